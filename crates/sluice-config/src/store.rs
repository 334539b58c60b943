//! Where `sluice run` keeps its checkpoints, dead letters and the
//! sources' state: the `store:` section at the top of a config.

use std::path::PathBuf;

use serde::Deserialize;
use sluice_core::settings::{Invalid, Secret, SslMode, check_seconds};

/// The schema of the store's tables, unless `schema` says otherwise.
pub const DEFAULT_STORE_SCHEMA: &str = "sluice_store";
/// How long a store call waits out a store it cannot reach (s) before
/// it fails, and with it the pipeline.
pub const DEFAULT_STORE_OUTAGE_SECS: u64 = 300;
pub const DEFAULT_STORE_CONNECT_TIMEOUT_SECS: u64 = 10;
/// The most a store call may wait out: a day.
pub const MAX_STORE_OUTAGE_SECS: u64 = 86_400;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "type", content = "config", rename_all = "snake_case", deny_unknown_fields)]
pub enum StoreConfig {
    /// `checkpoints.redb` and state files in the data dir, for one instance.
    #[default]
    Embedded,
    /// Tables in a PostgreSQL database, so no state stays on the
    /// instance's disk.
    Postgres(PostgresStoreConfig),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresStoreConfig {
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Secret,
    #[serde(default = "default_ssl_mode")]
    pub ssl_mode: SslMode,
    /// PEM CA for `verify-ca` and `verify-full`.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "default_schema")]
    pub schema: String,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    #[serde(default = "default_outage")]
    pub outage_secs: u64,
}

fn default_port() -> u16 {
    crate::DEFAULT_POSTGRES_PORT
}
fn default_ssl_mode() -> SslMode {
    crate::DEFAULT_SSL_MODE
}
fn default_schema() -> String {
    DEFAULT_STORE_SCHEMA.into()
}
fn default_connect_timeout() -> u64 {
    DEFAULT_STORE_CONNECT_TIMEOUT_SECS
}
fn default_outage() -> u64 {
    DEFAULT_STORE_OUTAGE_SECS
}

pub(crate) fn validate_store(store: &StoreConfig) -> Result<(), Invalid> {
    let StoreConfig::Postgres(c) = store else { return Ok(()) };
    let at = "store.config";
    for (field, value) in [("host", &c.host), ("database", &c.database), ("user", &c.user)] {
        if value.trim().is_empty() {
            return Err(Invalid::new(format!("{at}.{field}"), "is empty", format!("set {field}")));
        }
    }
    if c.port == 0 {
        return Err(Invalid::new(format!("{at}.port"), "port 0 is not a port", "set the server's port, e.g. 5432"));
    }
    let plain = c.schema.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
    if c.schema.is_empty() || c.schema.len() > 63 || !plain || c.schema.starts_with(|ch: char| ch.is_ascii_digit()) {
        return Err(Invalid::new(
            format!("{at}.schema"),
            format!("{:?} is not a plain schema name", c.schema),
            "use 1 to 63 characters from a-z, 0-9 and '_', not starting with a digit",
        ));
    }
    if matches!(c.ssl_mode, SslMode::VerifyCa | SslMode::VerifyFull) && c.ca_file.is_none() {
        return Err(Invalid::new(
            format!("{at}.ca_file"),
            "ssl_mode verify-ca and verify-full check the server certificate against a CA, and none is given",
            "set ca_file to the PEM file of the CA that signed the server certificate",
        ));
    }
    check_seconds(at, "connect_timeout_secs", c.connect_timeout_secs, 300)?;
    check_seconds(at, "outage_secs", c.outage_secs, MAX_STORE_OUTAGE_SECS)
}
