//! The NATS JetStream sink.
//!
//! Every message carries `Nats-Msg-Id` = event id, so the server drops a
//! repeat within the stream's duplicate window, and a `Sluice-Position`
//! header.
//!
//! With `exclusive: true` (the stream is written only by this sink) it is
//! exactly-once: on start the sink reads the stream's last message and
//! reports its position, so nothing the stream already holds is sent
//! again; and every publish states the sequence it expects the stream to be
//! at (`Nats-Expected-Last-Sequence`), so another writer is detected and
//! stops the pipeline instead of interleaving silently.
//!
//! An event a format turns into several messages (Debezium's delete and
//! create of a key change) marks each with `Sluice-Part: <n>/<count>`, and
//! all but the last with `Sluice-After`, the position before the event. A
//! stream that ends inside such an event reports that earlier position
//! and remembers how many parts it holds, so the replay publishes only
//! the rest.

pub mod config;
#[cfg(feature = "nats")]
mod sink;

pub use config::*;
#[cfg(feature = "nats")]
pub use sink::NatsSink;

#[cfg(feature = "nats")]
pub fn build(config: &NatsSinkConfig, _context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(NatsSink::new(config.clone()))
}
