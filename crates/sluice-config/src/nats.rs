//! The `nats` sink's config (JetStream).

use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

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
    #[serde(default = "crate::pipeline::default_required")]
    pub required: bool,
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
    /// PEM CA for TLS; setting it requires TLS.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

impl NatsSinkConfig {
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
