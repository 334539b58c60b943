//! The `mysql` source's config (MySQL and MariaDB).

use serde::Deserialize;

use crate::secret::Secret;

/// MySQL's own default port.
pub const DEFAULT_MYSQL_PORT: u16 = 3306;
/// How long a connection attempt may take (s).
pub const DEFAULT_MYSQL_CONNECT_TIMEOUT_SECS: u64 = 10;
/// The server sends a heartbeat this often on an idle binlog (s), so a dead
/// connection is noticed within a few of them.
pub const DEFAULT_MYSQL_HEARTBEAT_SECS: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MysqlSslMode {
    Disable,
    /// TLS without checking the certificate.
    Require,
    /// TLS, certificate signed by `ca_file` and naming `host`.
    VerifyFull,
}

/// Where to start when there is no checkpoint yet.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum MysqlStart {
    /// The server's current position: only changes from now on.
    Current,
    /// A binlog file and offset.
    Position { file: String, offset: u64 },
    /// A MariaDB GTID state (`domain-server-seq`, comma separated).
    Gtid(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    pub id: String,
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub user: String,
    #[serde(default)]
    pub password: Secret,
    #[serde(default = "default_ssl_mode")]
    pub ssl_mode: MysqlSslMode,
    pub ca_file: Option<std::path::PathBuf>,
    /// `database.table` patterns; `*` matches any run of characters.
    pub tables: Vec<String>,
    /// The replica server id Sluice registers with; default derived from the source id.
    pub server_id: Option<u32>,
    /// Resume by MariaDB GTID instead of by file and offset (survives a
    /// failover to another server of the same replication topology).
    #[serde(default)]
    pub gtid: bool,
    #[serde(default = "default_start")]
    pub start: MysqlStart,
    #[serde(default = "default_heartbeat")]
    pub heartbeat_secs: u64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
}

impl MysqlConfig {
    /// The configured server id, or one derived from the source id (FNV-1a,
    /// kept away from the small ids people give real servers).
    pub fn replica_server_id(&self) -> u32 {
        self.server_id.unwrap_or_else(|| {
            let mut hash: u32 = 0x811C_9DC5;
            for byte in self.id.bytes() {
                hash ^= u32::from(byte);
                hash = hash.wrapping_mul(0x0100_0193);
            }
            1_000_000 + hash % 1_000_000_000
        })
    }
}

fn default_port() -> u16 {
    DEFAULT_MYSQL_PORT
}
fn default_ssl_mode() -> MysqlSslMode {
    MysqlSslMode::Disable
}
fn default_start() -> MysqlStart {
    MysqlStart::Current
}
fn default_heartbeat() -> u64 {
    DEFAULT_MYSQL_HEARTBEAT_SECS
}
fn default_connect_timeout() -> u64 {
    DEFAULT_MYSQL_CONNECT_TIMEOUT_SECS
}
