//! The Redis Streams sink: exactly-once on a standalone Redis.
//!
//! Each chunk of a batch goes to Redis as one server-side script that, in
//! one atomic step, appends (XADD) the events whose position is above the
//! sink's checkpoint key and moves that key to the chunk's last position.
//! On start the sink reads the key back, so after a crash at any point the
//! coordinator hands it only events Redis does not hold. Positions are
//! compared in the script by a fixed-width sort key whose byte order is the
//! position order.
//!
//! Every entry has the fields `id` (event id), `key` (the primary key as
//! JSON, or the format's key), `op` and `payload` (the event in the sink's
//! format; an event of several records is several entries, appended by the
//! same script call). Durable means acknowledged
//! by Redis; what survives a Redis crash is up to its persistence settings
//! (`appendonly yes` with `appendfsync always` for no loss).

pub mod config;
#[cfg(feature = "redis")]
mod sink;

pub use config::*;
#[cfg(feature = "redis")]
pub use sink::RedisSink;

#[cfg(feature = "redis")]
pub fn build(config: &RedisSinkConfig, context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(RedisSink::new(config.clone(), &context.source_id))
}
