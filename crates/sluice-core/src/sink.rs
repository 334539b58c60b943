//! The sink contract.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use tokio::sync::OnceCell;

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
///    sink was given before. One `write` is one batch: a sink with
///    transactions writes it as one transaction. The events arrive as
///    [`EventChunks`]: one chunk for a batch in memory, several for a batch
///    of one huge source transaction that was spilled to disk, so no sink
///    needs a whole batch in memory. `write` returns once the events are *accepted*,
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
/// `redeliver` is separate from this cycle: it serves `sluice dlq retry`.
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

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError>;

    async fn flush(&mut self) -> Result<Option<Position>, SinkError>;

    async fn close(&mut self) -> Result<(), SinkError>;

    /// When a sink that buffers wants `flush` called even if no batch comes
    /// (a file that reached its age limit on an idle stream); `None` when
    /// it holds nothing that needs it.
    fn flush_due(&self) -> Option<std::time::Instant> {
        None
    }

    /// Whether one write of several batches costs about what one write of
    /// one batch does (Kafka's, which ends waiting for the brokers'
    /// acknowledgements or a transaction's commit): batches that queued
    /// behind a write then go in the next write together, so a sink that
    /// fell behind catches up in one round. Asked once, when the sink is
    /// built.
    fn merges_writes(&self) -> bool {
        false
    }

    /// At most how many written batches the sink holds before they are
    /// durable, where its own queue bounds them (a file's writing thread
    /// takes a few while it syncs): the writer keeps that many in memory
    /// rather than move them to disk, which would cost more than the
    /// memory it frees. `None` for no such bound (object storage holds a
    /// part until it is full).
    fn unsynced_bound(&self) -> Option<usize> {
        None
    }

    /// Whether `open` reads back, from the sink's own data, the last
    /// position it holds (a file's last line, a checkpoint row written in
    /// the same transaction). Only then does `open` returning `None` while a
    /// checkpoint is stored mean the data is gone, which is worth a warning;
    /// a sink that finds duplicates another way (object files compared by
    /// key, Kafka's read-back) opens with `None` every time.
    fn reads_back_what_it_holds(&self) -> bool {
        false
    }

    /// Checks, without writing anything a running pipeline relies on, what
    /// a first run needs of the sink's server: that it answers, accepts the
    /// credentials, and allows what the sink does (`sluice validate
    /// --connect`). Sinks with no server check where they write.
    async fn preflight(&mut self) -> Vec<crate::preflight::Check>;

    /// Sends one event from the dead letter queue again (`sluice dlq
    /// retry`), outside the position order, leaving the sink's position
    /// untouched. Returns [`SinkError::Rejected`] when the sink still
    /// refuses it. Sinks whose stored position is the last event they hold
    /// (file, NATS) cannot take an older event without breaking recovery,
    /// so they refuse; they dead-letter only what their own transforms
    /// fail on.
    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        Err(SinkError::permanent(
            format!("sink {:?} cannot take event {} out of position order", self.id(), event.position),
            "this sink writes in position order and finds its place by the last event it holds, so it cannot take an older one; `sluice dlq show` gives the event to replay elsewhere, then purge the letter",
        ))
    }
}

/// The events of one `write`, in order, in one or more chunks.
#[async_trait]
pub trait EventChunks: Send {
    /// The next chunk (never empty), or `None` after the last one.
    async fn next_chunk(&mut self) -> Result<Option<&[Event]>, SinkError>;

    /// Where the write ends, known before reading it: its last event's
    /// position, or past it when the pipeline's transforms dropped later
    /// events. A write may hold no event at all (a batch whose events were
    /// all dropped); the sink then still moves its position to here, or a
    /// filtered table would pin the source's log.
    fn last_position(&self) -> &Position;

    /// How many events the write holds in all.
    fn event_count(&self) -> usize;

    /// Work every sink writing these same events can share, and where
    /// they start in their batch (part of what the work is keyed by, with
    /// each chunk's first position and length); `None` where nothing is
    /// shared.
    fn shared(&self) -> Option<(Arc<SharedWork>, u64)> {
        None
    }
}

/// What a sink may share with the others writing the same batch.
pub type SharedValue = Arc<dyn Any + Send + Sync>;

/// Work on a batch's events that every sink writing them can share, such
/// as their encoding in one format: the first sink to ask does it, and the
/// others take the result while any of them still holds it. Nothing is
/// kept for a sink that comes later, so a slow sink's buffer holds no more
/// than the events.
#[derive(Debug, Default)]
pub struct SharedWork {
    entries: Mutex<Vec<(u64, Weak<OnceCell<SharedValue>>)>>,
    /// How many sinks the batch goes to; 0 until the runtime says.
    sinks: AtomicUsize,
}

impl SharedWork {
    /// Records how many sinks the batch goes to.
    pub fn set_sinks(&self, sinks: usize) {
        self.sinks.store(sinks, Ordering::Relaxed);
    }

    /// True when the batch goes to one sink only: there is no one to
    /// share with, so work shaped for sharing (records kept for others)
    /// can be skipped. False while the count is unknown.
    pub fn alone(&self) -> bool {
        self.sinks.load(Ordering::Relaxed) == 1
    }

    /// The cell of `key`: filled already if another sink holds it, else
    /// empty, for the caller to fill. Keep it while using its value.
    pub fn cell(&self, key: u64) -> Arc<OnceCell<SharedValue>> {
        let mut entries = crate::sync::lock(&self.entries);
        entries.retain(|(_, cell)| cell.strong_count() > 0);
        if let Some(cell) = entries.iter().filter(|(k, _)| *k == key).find_map(|(_, cell)| cell.upgrade()) {
            return cell;
        }
        let cell = Arc::new(OnceCell::new());
        entries.push((key, Arc::downgrade(&cell)));
        cell
    }
}

/// A write whose events are all in one slice.
pub struct SliceChunks<'a> {
    events: &'a [Event],
    last: &'a Position,
    done: bool,
}

impl<'a> SliceChunks<'a> {
    /// The events as one write ending at the last of them; `None` for an
    /// empty slice.
    pub fn new(events: &'a [Event]) -> Option<Self> {
        let last = &events.last()?.position;
        Some(Self { events, last, done: false })
    }

    /// The events as one write ending at `last`, which is at or past the
    /// last of them: a batch whose later events, or all of them, a
    /// transform dropped.
    pub fn ending_at(events: &'a [Event], last: &'a Position) -> Self {
        Self { events, last, done: false }
    }
}

#[async_trait]
impl EventChunks for SliceChunks<'_> {
    async fn next_chunk(&mut self) -> Result<Option<&[Event]>, SinkError> {
        if std::mem::replace(&mut self.done, true) || self.events.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.events))
    }

    fn last_position(&self) -> &Position {
        self.last
    }

    fn event_count(&self) -> usize {
        self.events.len()
    }
}

/// Reads every chunk into one vector; for tests and small sinks.
pub async fn collect_chunks(events: &mut dyn EventChunks) -> Result<Vec<Event>, SinkError> {
    let mut all = Vec::with_capacity(events.event_count());
    while let Some(chunk) = events.next_chunk().await? {
        all.extend_from_slice(chunk);
    }
    Ok(all)
}
