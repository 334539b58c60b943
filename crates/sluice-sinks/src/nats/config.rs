//! The `nats` sink's config (JetStream).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, check_seconds, check_template};

use sluice_core::settings::Secret;

use crate::registry::SinkSettings;
use crate::target::{Target, servers};

/// One subject per table.
pub const DEFAULT_NATS_SUBJECT: &str = "${db}.${table}";
/// How long the server remembers message ids for deduplication (s).
pub const DEFAULT_NATS_DUPLICATE_WINDOW_SECS: u64 = 120;
/// Limit on publishing a batch (s).
pub const DEFAULT_NATS_TIMEOUT_SECS: u64 = 30;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
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
    /// `nats://host:port`, or several separated by commas.
    pub url: String,
    /// Placeholders: `${db}`, `${table}`, `${op}`, `${key.<column>}`.
    #[serde(default = "default_subject")]
    pub subject: String,
    /// The JetStream stream the subjects belong to.
    pub stream: String,
    /// Create the stream when it does not exist.
    #[serde(default = "default_true")]
    pub create_stream: bool,
    /// Subjects of a created stream; default: the subject template with each
    /// placeholder token turned into `*`.
    pub stream_subjects: Option<Vec<String>>,
    #[serde(default = "default_duplicate_window")]
    pub duplicate_window_secs: u64,
    /// The stream is written only by this sink: exactly-once. Otherwise
    /// at-least-once with server deduplication within the window.
    #[serde(default = "default_true")]
    pub exclusive: bool,
    pub user: Option<String>,
    #[serde(default)]
    pub password: Secret,
    #[serde(default)]
    pub token: Secret,
    pub credentials_file: Option<PathBuf>,
    /// An NKey user's seed (`SU...`); a secret, so give it as `${VAR}`.
    #[serde(default)]
    pub nkey: Secret,
    /// PEM CA for TLS; setting it requires TLS.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate and its key, for a server that verifies
    /// clients; setting them requires TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// The envelope of each message (`format.envelope`).
    #[serde(default)]
    pub format: sluice_format::FormatConfig,
}

impl NatsSinkConfig {
    /// Messages have headers (binary CloudEvents) but no keys.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "nats", keys: false, headers: sluice_format::Headers::Text, avro: if cfg!(feature = "avro") { sluice_format::AvroSupport::Registry } else { sluice_format::AvroSupport::None } };

    pub fn subjects(&self) -> Vec<String> {
        self.stream_subjects.clone().unwrap_or_else(|| {
            vec![
                self.subject
                    .split('.')
                    .map(|token| if token.contains("${") { "*" } else { token })
                    .collect::<Vec<_>>()
                    .join("."),
            ]
        })
    }
}

fn default_subject() -> String {
    DEFAULT_NATS_SUBJECT.to_string()
}
fn default_true() -> bool {
    true
}
fn default_duplicate_window() -> u64 {
    DEFAULT_NATS_DUPLICATE_WINDOW_SECS
}
fn default_timeout() -> u64 {
    DEFAULT_NATS_TIMEOUT_SECS
}

impl SinkSettings for NatsSinkConfig {
    fn guarantee(&self) -> Guarantee {
        if self.exclusive {
            Guarantee::ExactlyOnce { condition: Some("stream written only by this sink") }
        } else {
            Guarantee::AtLeastOnce { dedup: "server dedup within duplicate_window" }
        }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        if !c.url.split(',').all(|u| u.trim().starts_with("nats://") || u.trim().starts_with("tls://")) {
            return Err(Invalid::new(
                format!("{at}.url"),
                format!("{:?} is not a nats:// URL list", c.url),
                "write nats://host:port[,nats://host:port]",
            ));
        }
        check_template(&c.subject)
            .map_err(|problem| Invalid::new(format!("{at}.subject"), problem, "fix the subject template"))?;
        c.format.validate(at, Self::CARRIER)?;
        let plain = |s: &str| !s.is_empty() && s.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
        if !plain(&c.stream) {
            return Err(Invalid::new(
                format!("{at}.stream"),
                format!("{:?} is not a valid stream name", c.stream),
                "use A-Z, a-z, 0-9, '_' and '-'",
            ));
        }
        let auth =
            [c.user.is_some(), !c.token.expose().is_empty(), c.credentials_file.is_some(), !c.nkey.expose().is_empty()];
        if auth.iter().filter(|a| **a).count() > 1 {
            return Err(Invalid::new(
                format!("{at}.user"),
                "more than one way to authenticate is set",
                "use one of user/password, token, nkey, or credentials_file",
            ));
        }
        if !c.nkey.expose().is_empty() && !c.nkey.expose().starts_with("SU") {
            return Err(Invalid::new(
                format!("{at}.nkey"),
                "is not a user seed (it starts with SU)",
                "give the seed of the NKey user, not its public key (UA...)",
            ));
        }
        crate::registry::certificate_pair(at, &c.cert_file, &c.key_file)?;
        check_seconds(at, "duplicate_window_secs", c.duplicate_window_secs, 86_400)?;
        check_seconds(at, "timeout_secs", c.timeout_secs, 3600)
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        crate::registry::readable_files(&[
            ("credentials_file", self.credentials_file.as_deref()),
            ("ca_file", self.ca_file.as_deref()),
            ("cert_file", self.cert_file.as_deref()),
            ("key_file", self.key_file.as_deref()),
        ])
    }

    /// A stream marked non-exclusive is meant to be shared, with the
    /// server's deduplication; an exclusive one claims it alone.
    fn target(&self, _resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(Target::Named {
            kind: "NATS stream",
            servers: servers(&self.url, 4222),
            name: self.stream.clone(),
            shared: !self.exclusive,
        })
    }
}
