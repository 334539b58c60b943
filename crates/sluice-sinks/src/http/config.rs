//! The `http` (webhook) sink's config.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, check_range, check_seconds, check_template};

use sluice_core::settings::Secret;

use crate::registry::SinkSettings;
use sluice_format::{CloudEventsMode, Envelope};

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
    /// A PEM client certificate (chain) and its private key, for a
    /// receiver that asks for one (mutual TLS).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The envelope of each event (`format.envelope`).
    #[serde(default)]
    pub format: sluice_format::FormatConfig,
}

impl HttpSinkConfig {
    /// Requests have headers (binary CloudEvents) but no message keys.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "http", keys: false, headers: sluice_format::Headers::Text, avro: if cfg!(feature = "avro") { sluice_format::AvroSupport::Registry } else { sluice_format::AvroSupport::None } };
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

/// Headers the http sink sets itself; a config may not override them.
const HTTP_MANAGED_HEADERS: &[&str] = &["content-type", "content-length", "idempotency-key", "host"];

impl SinkSettings for HttpSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::AtLeastOnce {
            dedup: match (self.mode, self.format.envelope) {
                (HttpMode::Single, _) => "Idempotency-Key = event id",
                (HttpMode::Batch, Envelope::Native) => "event id in each array element",
                (HttpMode::Batch, Envelope::Cloudevents) => "CloudEvents id in each array element",
                (HttpMode::Batch, Envelope::Debezium) => {
                    "source position in each array element (source.lsn, or source.file, pos and row)"
                }
            },
        }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        let rest = c.url.strip_prefix("http://").or_else(|| c.url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
            return Err(Invalid::new(
                format!("{at}.url"),
                format!("{:?} is not an http:// or https:// URL", c.url),
                "write http(s)://host[:port]/path; ${db}, ${table}, ${op} and ${key.<column>} may appear in it",
            ));
        }
        check_template(&c.url).map_err(|problem| Invalid::new(format!("{at}.url"), problem, "fix the URL template"))?;
        check_headers(at, c)?;
        c.format.validate(at, Self::CARRIER)?;
        if c.format.is_avro() && c.mode == HttpMode::Batch {
            return Err(Invalid::new(
                format!("{at}.mode"),
                "an Avro record travels alone, framed with its schema's registry id, so records cannot share a request",
                "set mode: single, or format.encoding: json to send batches as JSON arrays",
            ));
        }
        if c.format.mode == Some(CloudEventsMode::Binary) {
            if c.mode == HttpMode::Batch {
                return Err(Invalid::new(
                    format!("{at}.format.mode"),
                    "a binary-mode CloudEvent is a whole request, so it cannot share one with others (mode: batch)",
                    "set the sink's mode: single, or format.mode: structured (batches are sent as application/cloudevents-batch+json)",
                ));
            }
            if let Some(name) = c.headers.keys().find(|n| n.to_ascii_lowercase().starts_with("ce-")) {
                return Err(Invalid::new(
                    format!("{at}.headers.{name}"),
                    "ce- headers carry the CloudEvents attributes in binary mode",
                    "remove it from headers",
                ));
            }
        }
        crate::registry::certificate_pair(at, &c.cert_file, &c.key_file)?;
        if let Some(field) = [("ca_file", &c.ca_file), ("cert_file", &c.cert_file)]
            .iter()
            .find_map(|(field, f)| f.is_some().then_some(*field))
            .filter(|_| c.url.starts_with("http://"))
        {
            return Err(Invalid::new(
                format!("{at}.{field}"),
                "is a TLS setting, but the url is http://",
                "write the url as https://, or remove the TLS files",
            ));
        }
        // Checked in single mode too, where it is unused, so that switching
        // the mode cannot bring a bad value to life.
        check_range(at, "batch_max_events", c.batch_max_events as u64, 1, 100_000, "events a request")?;
        check_range(at, "max_attempts", u64::from(c.max_attempts), 1, 100, "attempts")?;
        check_range(at, "initial_backoff_ms", c.initial_backoff_ms, 1, 60_000, "milliseconds")?;
        check_seconds(at, "max_backoff_secs", c.max_backoff_secs, 3600)?;
        check_seconds(at, "timeout_secs", c.timeout_secs, 3600)
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        crate::registry::readable_files(&[
            ("ca_file", self.ca_file.as_deref()),
            ("cert_file", self.cert_file.as_deref()),
            ("key_file", self.key_file.as_deref()),
        ])
    }
}

/// An HTTP token: what a header name may be made of.
fn token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_headers(at: &str, c: &HttpSinkConfig) -> Result<(), Invalid> {
    for (name, value) in &c.headers {
        if !token(name) {
            return Err(Invalid::new(
                format!("{at}.headers.{name}"),
                "is not a valid header name",
                "use letters, digits and - only",
            ));
        }
        if HTTP_MANAGED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            || name.eq_ignore_ascii_case(&c.signature_header)
        {
            return Err(Invalid::new(
                format!("{at}.headers.{name}"),
                "is set by the sink itself",
                "remove it from headers",
            ));
        }
        if value.expose().bytes().any(|b| b == b'\r' || b == b'\n') {
            return Err(Invalid::new(
                format!("{at}.headers.{name}"),
                "the value holds a line break",
                "remove the line break (check the environment variable it comes from)",
            ));
        }
    }
    if !token(&c.signature_header) {
        return Err(Invalid::new(
            format!("{at}.signature_header"),
            format!("{:?} is not a valid header name", c.signature_header),
            "use letters, digits and - only",
        ));
    }
    Ok(())
}
