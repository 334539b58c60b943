//! The `http` (webhook) sink's config.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

/// Limit on one request, connect to last response byte (s).
pub const DEFAULT_HTTP_TIMEOUT_SECS: u64 = 10;
/// Events per request in `batch` mode: enough to amortise a round trip,
/// small enough that a receiver's body limit (often 1 MiB) is rarely hit.
pub const DEFAULT_HTTP_BATCH_MAX_EVENTS: usize = 100;
/// Tries of one request before the write fails and the coordinator's own
/// retry takes over (which reopens the sink and skips what was delivered).
pub const DEFAULT_HTTP_MAX_ATTEMPTS: u32 = 5;
/// First pause after a failed request (ms); doubles on each retry.
pub const DEFAULT_HTTP_INITIAL_BACKOFF_MS: u64 = 200;
/// Longest pause between tries (s), also the cap on a `Retry-After`.
pub const DEFAULT_HTTP_MAX_BACKOFF_SECS: u64 = 30;
/// The header that carries the HMAC signature.
pub const DEFAULT_HTTP_SIGNATURE_HEADER: &str = "X-Sluice-Signature";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSinkConfig {
    pub id: String,
    #[serde(default = "crate::pipeline::default_required")]
    pub required: bool,
    /// `http(s)://...`; placeholders `${db}`, `${table}`, `${op}`,
    /// `${key.<column>}` are percent-encoded.
    pub url: String,
    #[serde(default)]
    pub method: HttpMethod,
    /// Extra headers. Values are secrets: never printed.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    #[serde(default)]
    pub mode: HttpMode,
    /// With `mode: batch`, the most events in one request.
    #[serde(default = "default_batch_max_events")]
    pub batch_max_events: usize,
    /// Signs each body with HMAC-SHA256 when set.
    #[serde(default)]
    pub signing_secret: Secret,
    #[serde(default = "default_signature_header")]
    pub signature_header: String,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_secs")]
    pub max_backoff_secs: u64,
    /// PEM CA certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    #[default]
    Post,
    Put,
    Patch,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpMode {
    /// One event per request; `Idempotency-Key` is the event id.
    #[default]
    Single,
    /// A JSON array of events per request; each element carries its `id`.
    Batch,
}

fn default_batch_max_events() -> usize {
    DEFAULT_HTTP_BATCH_MAX_EVENTS
}
fn default_signature_header() -> String {
    DEFAULT_HTTP_SIGNATURE_HEADER.to_string()
}
fn default_timeout() -> u64 {
    DEFAULT_HTTP_TIMEOUT_SECS
}
fn default_max_attempts() -> u32 {
    DEFAULT_HTTP_MAX_ATTEMPTS
}
fn default_initial_backoff_ms() -> u64 {
    DEFAULT_HTTP_INITIAL_BACKOFF_MS
}
fn default_max_backoff_secs() -> u64 {
    DEFAULT_HTTP_MAX_BACKOFF_SECS
}

impl HttpSinkConfig {
    pub fn guarantee(&self) -> sluice_core::Guarantee {
        sluice_core::Guarantee::AtLeastOnce {
            dedup: match self.mode {
                HttpMode::Single => "Idempotency-Key = event id",
                HttpMode::Batch => "event id in each array element",
            },
        }
    }
}
