//! The `redis` sink's config.

use serde::Deserialize;

use crate::secret::Secret;

/// One stream per table.
pub const DEFAULT_REDIS_STREAM: &str = "${db}.${table}";
/// Limit on one script call (s).
pub const DEFAULT_REDIS_TIMEOUT_SECS: u64 = 10;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    pub id: String,
    #[serde(default = "crate::pipeline::default_required")]
    pub required: bool,
    /// `redis://[user@]host:port[/db]` (a standalone server; not Redis Cluster).
    pub url: String,
    #[serde(default)]
    pub password: Secret,
    /// Placeholders: `${db}`, `${table}`, `${op}`, `${key.<column>}`.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Trim each stream to about this many entries (`MAXLEN ~`).
    pub maxlen: Option<u64>,
    /// Default: `sluice:checkpoint:<source id>::sink::<sink id>`.
    pub checkpoint_key: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_stream() -> String {
    DEFAULT_REDIS_STREAM.to_string()
}
fn default_timeout() -> u64 {
    DEFAULT_REDIS_TIMEOUT_SECS
}
