//! The sink contract.

use async_trait::async_trait;

use crate::error::SinkError;
use crate::event::Event;
use crate::guarantee::Guarantee;
use crate::position::Position;

/// A destination for change events.
///
/// One writer task owns each sink, so calls never overlap. The coordinator
/// drives a sink like this:
///
/// 1. `open` once before any write. A sink that stores its position together
///    with its data (the file sink, Kafka transactions, ...) returns the
///    highest position it already holds; the coordinator then never hands it
///    an event at or below that position. Other sinks return `None`.
/// 2. `write` with events in source order, strictly above everything this
///    sink was given before. `write` returns once the events are *accepted*,
///    and reports the sink's *durable* watermark: the highest position that
///    would survive a kill -9 right now. A sink that buffers (object storage)
///    reports a watermark below the batch; one that writes through reports
///    the batch's last position. The checkpoint follows the durable
///    watermark, never the accepted one, so a buffering sink cannot lose data.
/// 3. After a failed or timed-out `write`, the sink may hold part of the
///    batch. The coordinator calls `open` again before retrying: the sink
///    must bring itself back to a consistent state (truncate a torn tail,
///    abort a transaction) and report what it holds, so the retry does not
///    duplicate what already landed.
/// 4. `flush` makes everything accepted durable and returns the watermark.
///    It runs on shutdown and when a finite source ends.
/// 5. `close` releases resources after the final flush.
///
/// Every call runs under `sink_batch_deadline_secs`; a call that exceeds it
/// is dropped and treated as a transient failure.
#[async_trait]
pub trait Sink: Send {
    /// The sink's id from the config; part of its checkpoint key.
    fn id(&self) -> &str;

    /// What this sink, as configured, promises about duplicates.
    fn guarantee(&self) -> Guarantee;

    async fn open(&mut self) -> Result<Option<Position>, SinkError>;

    async fn write(&mut self, events: &[Event]) -> Result<Option<Position>, SinkError>;

    async fn flush(&mut self) -> Result<Option<Position>, SinkError>;

    async fn close(&mut self) -> Result<(), SinkError>;
}
