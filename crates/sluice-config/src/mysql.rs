//! The `mysql` source's config (MySQL and MariaDB).

use serde::Deserialize;

pub use sluice_core::settings::MysqlSslMode;
use sluice_core::settings::Secret;

/// MySQL's own default port.
pub const DEFAULT_MYSQL_PORT: u16 = 3306;
/// How long a connection attempt may take (s).
pub const DEFAULT_MYSQL_CONNECT_TIMEOUT_SECS: u64 = 10;
/// The server sends a heartbeat this often on an idle binlog (s), so a dead
/// connection is noticed within a few of them.
pub const DEFAULT_MYSQL_HEARTBEAT_SECS: u64 = 5;

/// What a schema-change event's `ddl` text keeps of the statement's
/// string literals. A literal can hold anything the statement's author
/// typed (a column default, a comment, a partition value), and every sink
/// receives the text, so literals are replaced by `'?'` unless the
/// operator says the sinks may see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DdlLiterals {
    /// Each string literal becomes `'?'`, and comments are dropped.
    Redact,
    /// The statement text as the server logged it.
    Keep,
}

/// Literals in DDL text are redacted unless a config says otherwise:
/// a leak cannot be taken back, a missing default value can be looked up.
pub const DEFAULT_DDL_LITERALS: DdlLiterals = DdlLiterals::Redact;

/// Where to start when there is no checkpoint yet. In YAML: `current`,
/// `{ file: mariadb-bin.000001, offset: 4 }`, or `{ gtid: "0-1-100" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    #[serde(default)]
    pub snapshot: crate::SnapshotConfig,
    /// `database.table` Sluice writes incremental snapshot signals and
    /// watermarks to (created if missing); without it, `sluice snapshot`
    /// is refused for this source.
    pub signal_table: Option<String>,
    /// String literals in the `ddl` text of schema-change events.
    #[serde(default = "default_ddl_literals")]
    pub ddl_literals: DdlLiterals,
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

impl<'de> Deserialize<'de> for MysqlStart {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_yaml::Value::deserialize(deserializer)?;
        let expected = "start: expected `current`, `{ file: NAME, offset: N }` or `{ gtid: STATE }`";
        match &value {
            serde_yaml::Value::String(word) if word == "current" => Ok(MysqlStart::Current),
            serde_yaml::Value::Mapping(map) => {
                let get = |key: &str| map.get(serde_yaml::Value::String(key.into()));
                if let Some(unknown) =
                    map.keys().find_map(|k| k.as_str().filter(|k| !["file", "offset", "gtid"].contains(k)))
                {
                    return Err(D::Error::custom(format!("start: unknown field `{unknown}`; {}", &expected[7..])));
                }
                match (get("file"), get("offset"), get("gtid")) {
                    (Some(file), Some(offset), None) => Ok(MysqlStart::Position {
                        file: file.as_str().ok_or_else(|| D::Error::custom("file must be a string"))?.to_string(),
                        offset: offset.as_u64().ok_or_else(|| D::Error::custom("offset must be a whole number"))?,
                    }),
                    (None, None, Some(gtid)) => Ok(MysqlStart::Gtid(
                        gtid.as_str().ok_or_else(|| D::Error::custom("gtid must be a string"))?.to_string(),
                    )),
                    _ => Err(D::Error::custom(expected)),
                }
            }
            _ => Err(D::Error::custom(expected)),
        }
    }
}

fn default_port() -> u16 {
    DEFAULT_MYSQL_PORT
}
fn default_ssl_mode() -> MysqlSslMode {
    MysqlSslMode::Disable
}
fn default_ddl_literals() -> DdlLiterals {
    DEFAULT_DDL_LITERALS
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
