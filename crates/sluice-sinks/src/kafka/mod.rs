//! The Kafka sink.
//!
//! At-least-once by default: the idempotent producer (`acks=all`), a batch
//! durable once every message of it is acknowledged; a retry after a
//! failure can repeat messages, which consumers drop by the
//! `sluice.event_id` header.
//!
//! With `exactly_once: true`, one batch is one Kafka transaction, and the
//! same transaction writes the sink's position to a compacted checkpoint
//! topic. On start (and before any retry) the sink re-creates its producer
//! (which aborts whatever transaction a crash left open) and reads its
//! position back with `read_committed`, so the coordinator never hands it
//! an event the topic already holds: a crash between the Kafka commit and
//! the local checkpoint produces no duplicate. The `transactional.id` is
//! stable per pipeline and sink; a second instance fences the first, which
//! stops with an error rather than fight.
//!
//! With `exactly_once: read_back`, no transactions: each partition's last
//! record is read back instead (see `read_back`).

#[cfg(feature = "kafka")]
mod checkpoint;
pub mod config;
pub mod security;
#[cfg(feature = "kafka")]
mod context;
#[cfg(feature = "kafka")]
mod error;
#[cfg(feature = "kafka")]
mod ledger;
#[cfg(feature = "kafka")]
mod preflight;
#[cfg(feature = "kafka")]
mod read_back;
#[cfg(feature = "kafka")]
mod record;
#[cfg(feature = "kafka")]
mod sink;

pub use config::*;
#[cfg(feature = "kafka")]
pub use sink::KafkaSink;

#[cfg(feature = "kafka")]
pub fn build(config: &KafkaSinkConfig, context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(KafkaSink::new(config.clone(), &context.pipeline, &context.source_id))
}
