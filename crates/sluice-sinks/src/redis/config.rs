//! The `redis` sink's config.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, check_range, check_seconds, check_template};

use sluice_core::settings::Secret;

use crate::registry::SinkSettings;
use crate::target::{Target, server};

/// One stream per table.
pub const DEFAULT_REDIS_STREAM: &str = "${db}.${table}";
/// Limit on one script call (s).
pub const DEFAULT_REDIS_TIMEOUT_SECS: u64 = 10;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    pub id: String,
    #[serde(default = "crate::registry::default_required")]
    pub required: bool,
    /// This sink's buffer limits (`buffer.max_memory_bytes`, `buffer.max_disk_bytes`).
    #[serde(default)]
    pub buffer: crate::BufferConfig,
    /// `at_least_once` (default) or `at_most_once` (optional sinks only).
    #[serde(default)]
    pub delivery: crate::Delivery,
    /// This sink's own transforms, run in its writer after the pipeline's.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
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
    /// With `rediss://`: PEM CA the server's certificate must chain to;
    /// absent: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// With `rediss://`: PEM client certificate and its key, for servers
    /// that authenticate clients by certificate (`tls-auth-clients yes`).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The envelope of each entry's `payload` (`format.envelope`).
    #[serde(default)]
    pub format: sluice_format::FormatConfig,
}

impl RedisSinkConfig {
    /// Stream entries have a `key` field but no compaction, so a
    /// tombstone would mean nothing; they carry no headers.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "redis", keys: false, headers: sluice_format::Headers::None, avro: if cfg!(feature = "avro") { sluice_format::AvroSupport::Registry } else { sluice_format::AvroSupport::None } };
}

fn default_stream() -> String {
    DEFAULT_REDIS_STREAM.to_string()
}
fn default_timeout() -> u64 {
    DEFAULT_REDIS_TIMEOUT_SECS
}

impl SinkSettings for RedisSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce { condition: Some("standalone Redis") }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        if !(c.url.starts_with("redis://") || c.url.starts_with("rediss://")) {
            return Err(Invalid::new(
                format!("{at}.url"),
                format!("{:?} is not a redis:// URL", c.url),
                "write redis://host:port[/db]",
            ));
        }
        check_template(&c.stream)
            .map_err(|problem| Invalid::new(format!("{at}.stream"), problem, "fix the stream template"))?;
        c.format.validate(at, Self::CARRIER)?;
        if let Some(maxlen) = c.maxlen {
            // Redis reads MAXLEN as a signed 64-bit count.
            check_range(at, "maxlen", maxlen, 1, i64::MAX as u64, "entries (leave it out to keep every entry)")?;
        }
        let tls_files = [("ca_file", &c.ca_file), ("cert_file", &c.cert_file), ("key_file", &c.key_file)];
        if let Some((field, _)) = tls_files.iter().find(|(_, f)| f.is_some())
            && !c.url.starts_with("rediss://")
        {
            return Err(Invalid::new(
                format!("{at}.{field}"),
                "is a TLS setting, but the url is not rediss://",
                "write the url as rediss://host:port[/db], or remove the TLS files",
            ));
        }
        crate::registry::certificate_pair(at, &c.cert_file, &c.key_file)?;
        check_seconds(at, "timeout_secs", c.timeout_secs, 3600)
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        crate::registry::readable_files(&[
            ("ca_file", self.ca_file.as_deref()),
            ("cert_file", self.cert_file.as_deref()),
            ("key_file", self.key_file.as_deref()),
        ])
    }

    fn target(&self, _resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(Target::Named {
            kind: "Redis stream",
            servers: vec![redis_server(&self.url)],
            name: self.stream.clone(),
            shared: false,
        })
    }
}

/// Redis server and database: `redis://h/0` and `redis://h:6379` are one.
fn redis_server(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let db = rest.split_once('/').map(|(_, db)| db.split(['?', '#']).next().unwrap_or("")).unwrap_or("");
    let db = if db.is_empty() { "0" } else { db };
    format!("{}/{db}", server(url, 6379))
}

#[cfg(test)]
mod tests {
    use super::redis_server;

    #[test]
    fn servers_compare_without_credentials_or_defaults() {
        assert_eq!(redis_server("redis://:pw@R:6379/0"), redis_server("redis://r"));
        assert_ne!(redis_server("redis://r/1"), redis_server("redis://r"));
    }
}
