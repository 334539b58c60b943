//! The HTTP webhook sink: at-least-once, deduplicated by the receiver.
//!
//! Each request is a POST (or PUT/PATCH) of JSON in the sink's format: one
//! record in `single` mode (binary CloudEvents put their attributes in
//! `ce-` headers), an array of them in `batch` mode. Every request carries
//! `Idempotency-Key` (the event id in single mode; `<first id>..<last id>`
//! in batch mode, where a replay may cut requests differently, so receivers
//! dedup by each element's `id`), `Sluice-Position` (the last event's
//! position), and, with a signing secret, `<signature_header>:
//! sha256=<hex HMAC-SHA256 of the body>`.
//!
//! How a response is handled:
//! - 2xx: delivered. The sink remembers it, so a retry after a failure in
//!   the same process skips it; after a restart the replay starts at the
//!   stored checkpoint, so the receiver may see an event again.
//! - 408, 429, 5xx, timeouts and connection errors: retried with capped
//!   exponential backoff, honouring `Retry-After` (seconds or an HTTP date,
//!   capped at `max_backoff_secs`), up to `max_attempts`; then the write
//!   fails and the coordinator retries it.
//! - 401, 403, 407 and 3xx: the endpoint or its credentials are wrong, not
//!   the event; the sink stops with that error rather than send every event
//!   to the dead letter queue.
//! - Any other 4xx: that event is poison and goes to the dead letter queue.
//!   In batch mode the request's events are sent again one by one first, so
//!   only the event the receiver refuses is set aside.

pub mod config;
#[cfg(feature = "http")]
mod request;
#[cfg(feature = "http")]
mod sink;

pub use config::*;
#[cfg(feature = "http")]
pub use sink::HttpSink;

#[cfg(feature = "http")]
pub fn build(config: &HttpSinkConfig, _context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(HttpSink::new(config.clone()))
}
