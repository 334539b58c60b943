//! The `postgres` source's config.

use std::path::PathBuf;

use serde::Deserialize;

use sluice_core::settings::Secret;
pub use sluice_core::settings::SslMode;

/// PostgreSQL's own default port.
pub const DEFAULT_POSTGRES_PORT: u16 = 5432;
/// Try TLS and fall back to plain text, like libpq's default; set
/// `require` or `verify-full` where the network is not trusted.
pub const DEFAULT_SSL_MODE: SslMode = SslMode::Prefer;
/// Every table of the `public` schema.
pub const DEFAULT_TABLE_PATTERN: &str = "public.*";
/// How often a standby status update goes to the server even when nothing
/// moved (s). Well under the server's `wal_sender_timeout` (60 s by
/// default), so a busy pipeline is never cut off as unresponsive.
pub const DEFAULT_STATUS_INTERVAL_SECS: u64 = 10;
/// How long a connection attempt may take (s).
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 10;

/// What Sluice does with a matched table that has no primary key and a
/// replica identity that names no row (DEFAULT without a key, or
/// NOTHING), when it puts the table into a publication it creates.
/// PostgreSQL refuses every UPDATE and DELETE of such a table once it is
/// in a publication of updates and deletes, so the default never adds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeylessTables {
    /// Leave the table out, with a warning that names it and the fixes.
    #[default]
    Skip,
    /// Capture only its inserts and truncates, through a second
    /// publication (`<publication>_inserts`) that publishes nothing else.
    InsertsOnly,
    /// Run `ALTER TABLE … REPLICA IDENTITY FULL` on it, then capture it
    /// whole (the server then logs every old row in full).
    SetReplicaIdentityFull,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    pub id: String,
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Secret,
    #[serde(default = "default_ssl_mode")]
    pub ssl_mode: SslMode,
    /// PEM file of the CA that signed the server certificate, for
    /// `verify-ca` and `verify-full`.
    pub ca_file: Option<PathBuf>,
    /// Default: `sluice_<id>` with `-` and `.` turned into `_`.
    pub slot: Option<String>,
    /// Default: `sluice_<id>` with `-` and `.` turned into `_`.
    pub publication: Option<String>,
    /// Create the slot when it does not exist; otherwise a missing slot is an error.
    #[serde(default = "default_true")]
    pub create_slot: bool,
    /// Create the publication for the matched tables when it does not exist.
    #[serde(default = "default_true")]
    pub create_publication: bool,
    /// `schema.table` patterns; `*` matches any run of characters.
    #[serde(default = "default_tables")]
    pub tables: Vec<String>,
    #[serde(default)]
    pub keyless_tables: KeylessTables,
    /// Emit `pg_logical_emit_message` messages as events (op `m`).
    /// Absent: on where the server sends them (PostgreSQL 14+); `true`
    /// on an older server is refused at start.
    pub messages: Option<bool>,
    /// Write a tiny WAL record this often (s) so the slot advances even
    /// when the watched tables are idle; absent means off.
    pub heartbeat_secs: Option<u64>,
    #[serde(default = "default_status_interval")]
    pub status_interval_secs: u64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Read the rows already in the tables before streaming.
    #[serde(default)]
    pub snapshot: crate::SnapshotConfig,
    /// Servers that may become the primary, as `host` or `host:port`
    /// (default port: `port`): on every start and reconnect the source
    /// reads from the first of `host` and these that is not in recovery.
    #[serde(default)]
    pub failover_hosts: Vec<String>,
    /// Create the slot as a failover slot, which a standby with
    /// `sync_replication_slots` keeps in step (PostgreSQL 17+), and make an
    /// existing slot one. Absent: on from 17; `true` before 17 is refused.
    pub failover_slot: Option<bool>,
}

impl PostgresConfig {
    /// `host:port` of the source's servers: `host`, then `failover_hosts`
    /// (validation refuses an entry that does not parse).
    pub fn hosts(&self) -> Vec<(String, u16)> {
        let mut hosts = vec![(self.host.clone(), self.port)];
        for (host, port) in self.failover_hosts.iter().filter_map(|e| parse_host_port(e)) {
            hosts.push((host, port.unwrap_or(self.port)));
        }
        hosts
    }

    /// Whether messages become events (unless the server predates them).
    pub fn emit_messages(&self) -> bool {
        self.messages.unwrap_or(true)
    }

    pub fn slot_name(&self) -> String {
        self.slot.clone().unwrap_or_else(|| default_object_name(&self.id))
    }

    pub fn publication_name(&self) -> String {
        self.publication.clone().unwrap_or_else(|| default_object_name(&self.id))
    }

    /// The publication of inserts and truncates only, for keyless tables
    /// under `keyless_tables: inserts_only`.
    pub fn inserts_publication_name(&self) -> String {
        format!("{}_inserts", self.publication_name())
    }
}

fn default_object_name(id: &str) -> String {
    let plain: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    format!("sluice_{plain}")
}

fn default_port() -> u16 {
    DEFAULT_POSTGRES_PORT
}
fn default_ssl_mode() -> SslMode {
    DEFAULT_SSL_MODE
}
fn default_true() -> bool {
    true
}
fn default_tables() -> Vec<String> {
    vec![DEFAULT_TABLE_PATTERN.to_string()]
}
fn default_status_interval() -> u64 {
    DEFAULT_STATUS_INTERVAL_SECS
}
fn default_connect_timeout() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_SECS
}

/// `host` or `host:port` (an IPv6 address in brackets: `[::1]:5432`);
/// `None` for an empty host or a port that is not 1 to 65535.
pub fn parse_host_port(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        (host, if tail.is_empty() { None } else { Some(tail.strip_prefix(':')?) })
    } else {
        match entry.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (entry, None),
        }
    };
    let port = match port {
        Some(text) => Some(text.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => None,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::parse_host_port;

    #[test]
    fn host_entries_take_an_optional_port() {
        assert_eq!(parse_host_port("db-b.internal"), Some(("db-b.internal".into(), None)));
        assert_eq!(parse_host_port(" 10.0.0.2:5433 "), Some(("10.0.0.2".into(), Some(5433))));
        assert_eq!(parse_host_port("[::1]:5433"), Some(("::1".into(), Some(5433))));
        assert_eq!(parse_host_port("[::1]"), Some(("::1".into(), None)));
        for bad in ["", ":5432", "db:0", "db:70000", "db:x", "[::1", "[::1]5432"] {
            assert_eq!(parse_host_port(bad), None, "{bad}");
        }
    }
}
