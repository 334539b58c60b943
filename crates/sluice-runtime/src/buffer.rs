//! Per-sink buffers: what decouples each sink's speed from the others'.
//!
//! ```text
//! dispatcher ──push──► SinkBuffer (memory, then disk) ──take──► writer
//! ```
//!
//! The dispatcher pushes every batch into every sink's buffer. A buffer
//! keeps batches in memory up to `max_inflight` batches and
//! `buffer.max_memory_bytes`, then as spill files on local disk up to
//! `buffer.max_disk_bytes`. When a buffer is full:
//! - a sink that may not be left behind (a required sink, or any sink
//!   under `commit_policy.mode: all`) makes the push wait: back-pressure
//!   on the whole pipeline, as the commit policy demands;
//! - an optional sink's buffer *overflows*: it drops the batch and every
//!   later one, and remembers that the sink has a gap after what it
//!   holds. The writer drains what is buffered, then asks for the source
//!   to be read again from the sink's own checkpoint ([`Rereads`]).
//!
//! Nothing is lost either way: a sink's checkpoint moves only with what it
//! made durable, and the source is acknowledged only up to MIN of the
//! checkpoints. Buffer files are scratch, like spill files: they live under
//! the pipeline's spill folder, which is cleared at start, because after a
//! crash the source re-reads everything past MIN anyway.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use sluice_config::BufferLimits;
use sluice_core::Position;
use tokio::sync::Notify;
use tracing::warn;

use crate::batch::Batch;
use crate::spill::SpillError;
use crate::status::{Detachment, PipelineStatus, lock};

/// What a push did with a batch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Kept in memory.
    Memory,
    /// Kept in a spill file.
    Disk,
    /// The buffer had overflowed (now or before): dropped, to be re-read.
    Dropped,
    /// The writer is gone (detached for pinning, failed, or stopped).
    Closed,
}

/// Where [`SinkBuffer::reserve`] put a batch.
enum Placement {
    Done(Pushed),
    /// Full, and the buffer may not overflow: the push waits.
    Wait,
    /// Room on disk is reserved; the file is still to be written.
    Spill {
        size: u64,
    },
}

/// What the writer takes next.
#[derive(Debug)]
pub(crate) enum Taken {
    Batch(Arc<Batch>),
    /// Everything buffered was taken, but batches after it were dropped:
    /// the sink holds nothing past `after`.
    Gap {
        after: Option<Position>,
    },
    /// The dispatcher is done and everything was taken.
    Closed,
}

/// How much of the stream a buffer keeps in memory besides its byte
/// limit: `batches` batches, holding no more than `events` events (as many
/// as that many full batches hold). A transaction that grew its batch past
/// the batch's event limit so counts for the batches it would have made,
/// and a backlog of large transactions does not keep several of them in
/// memory per sink. An empty buffer takes any batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inflight {
    pub batches: usize,
    pub events: usize,
}

struct Inner {
    queue: VecDeque<Arc<Batch>>,
    memory_bytes: u64,
    memory_batches: usize,
    memory_events: usize,
    disk_bytes: u64,
    /// Set when the buffer overflowed: the last position kept before the
    /// first dropped batch.
    gap: Option<Option<Position>>,
    /// The last position pushed and kept.
    last_kept: Option<Position>,
    /// The dispatcher is done: no more pushes.
    closed: bool,
    /// The writer stopped taking.
    abandoned: bool,
}

/// One sink's buffer, shared by the dispatcher (pushes) and the sink's
/// writer (takes).
pub(crate) struct SinkBuffer {
    inner: Mutex<Inner>,
    /// Wakes the writer: a batch, a gap or the end arrived.
    ready: Notify,
    /// Wakes the dispatcher: the writer took a batch.
    space: Notify,
    /// Turns true when the dispatcher is done, for a writer that is not
    /// taking batches (a detached one).
    done: tokio::sync::watch::Sender<bool>,
    limits: BufferLimits,
    inflight: Inflight,
    /// Whether a full buffer overflows (an optional sink) instead of
    /// holding the pipeline back.
    may_overflow: bool,
    dir: PathBuf,
    status: Arc<PipelineStatus>,
    index: usize,
}

impl SinkBuffer {
    pub fn new(
        limits: BufferLimits,
        inflight: Inflight,
        may_overflow: bool,
        dir: PathBuf,
        (status, index): (Arc<PipelineStatus>, usize),
    ) -> Self {
        Self {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                memory_bytes: 0,
                memory_batches: 0,
                memory_events: 0,
                disk_bytes: 0,
                gap: None,
                last_kept: None,
                closed: false,
                abandoned: false,
            }),
            ready: Notify::new(),
            space: Notify::new(),
            done: tokio::sync::watch::channel(false).0,
            limits,
            inflight: Inflight { batches: inflight.batches.max(1), events: inflight.events.max(1) },
            may_overflow,
            dir,
            status,
            index,
        }
    }

    pub fn sink_id(&self) -> &str {
        &self.status.sinks[self.index].id
    }

    /// Keeps `batch` for the sink, spilling it to disk when the memory part
    /// is full; waits while the buffer is full if it may not overflow.
    pub async fn push(&self, batch: &Arc<Batch>) -> Result<Pushed, SpillError> {
        let mut waited = false;
        loop {
            let space = self.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            match self.place(batch)? {
                Some(pushed) => {
                    if waited {
                        self.status.set_held_back_by(None);
                    }
                    return Ok(pushed);
                }
                None => {
                    // Only a buffer that may not overflow waits here.
                    if !waited {
                        self.status.set_held_back_by(Some(self.sink_id()));
                        waited = true;
                    }
                    space.await;
                }
            }
        }
    }

    /// One attempt to place `batch`; `None` when the buffer is full and
    /// the push must wait.
    fn place(&self, batch: &Arc<Batch>) -> Result<Option<Pushed>, SpillError> {
        match self.reserve(batch) {
            Placement::Done(pushed) => Ok(Some(pushed)),
            Placement::Wait => Ok(None),
            Placement::Spill { size } => self.finish_spill(batch, size).map(Some),
        }
    }

    /// Decides under the lock where `batch` goes; a batch bound for disk
    /// has its room reserved, and its file is written outside the lock.
    fn reserve(&self, batch: &Arc<Batch>) -> Placement {
        let size = batch.byte_size as u64;
        let mut inner = lock(&self.inner);
        if inner.abandoned {
            return Placement::Done(Pushed::Closed);
        }
        if inner.gap.is_some() {
            return Placement::Done(Pushed::Dropped);
        }
        let fits_memory = !batch.is_spilled()
            && inner.memory_batches < self.inflight.batches
            && inner.memory_events + batch.event_count() <= self.inflight.events
            && inner.memory_bytes + size <= self.limits.max_memory_bytes;
        // An empty buffer always takes the batch, so one batch larger
        // than every limit still moves.
        if inner.queue.is_empty() || fits_memory {
            self.keep(&mut inner, batch.clone(), !batch.is_spilled());
            return Placement::Done(if batch.is_spilled() { Pushed::Disk } else { Pushed::Memory });
        }
        if inner.disk_bytes + size > self.limits.max_disk_bytes {
            if !self.may_overflow {
                return Placement::Wait;
            }
            inner.gap = Some(inner.last_kept.clone());
            drop(inner);
            self.overflowed();
            return Placement::Done(Pushed::Dropped);
        }
        inner.disk_bytes += size;
        Placement::Spill { size }
    }

    /// Writes the spill file of a batch whose room [`Self::reserve`] took,
    /// and keeps it, unless the writer abandoned the buffer meanwhile
    /// (which dropped the reservation with everything else).
    fn finish_spill(&self, batch: &Arc<Batch>, size: u64) -> Result<Pushed, SpillError> {
        let kept = if batch.is_spilled() { Ok(batch.clone()) } else { self.spill(batch).map(Arc::new) };
        let mut inner = lock(&self.inner);
        if inner.abandoned {
            return Ok(Pushed::Closed);
        }
        inner.disk_bytes -= size;
        self.keep(&mut inner, kept?, false);
        Ok(Pushed::Disk)
    }

    fn overflowed(&self) {
        let sink = &self.status.sinks[self.index];
        sink.buffer.overflowed.store(true, Ordering::Relaxed);
        warn!(sink = %sink.id, max_disk_bytes = self.limits.max_disk_bytes,
            "optional sink's buffer is full: the sink is detached; it writes what was kept, \
             then the source is read again from its checkpoint");
        sink.detach(Detachment {
            reason: "its buffer is full; it catches up by a re-read of the source".to_string(),
            needs_resync: false,
        });
        self.ready.notify_one();
    }

    fn spill(&self, batch: &Batch) -> Result<Batch, SpillError> {
        match batch.spilled_copy(&self.dir)? {
            Some(copy) => Ok(copy),
            None => unreachable_spilled(batch),
        }
    }

    fn keep(&self, inner: &mut Inner, batch: Arc<Batch>, in_memory: bool) {
        let size = batch.byte_size as u64;
        if in_memory {
            inner.memory_bytes += size;
            inner.memory_batches += 1;
            inner.memory_events += batch.event_count();
        } else {
            inner.disk_bytes += size;
        }
        inner.last_kept = Some(batch.last().clone());
        inner.queue.push_back(batch);
        self.publish(inner);
        self.ready.notify_one();
    }

    /// The next batch for the writer, waiting for one.
    pub async fn take(&self) -> Taken {
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            if let Some(taken) = self.try_take() {
                return taken;
            }
            ready.await;
        }
    }

    fn try_take(&self) -> Option<Taken> {
        if let Some(batch) = self.take_queued(usize::MAX) {
            return Some(Taken::Batch(batch));
        }
        let inner = lock(&self.inner);
        if let Some(after) = &inner.gap {
            return Some(Taken::Gap { after: after.clone() });
        }
        inner.closed.then_some(Taken::Closed)
    }

    /// The next batch if one is queued already and holds no more than
    /// `max_bytes`, without waiting; a gap or the end stays for
    /// [`SinkBuffer::take`].
    pub fn take_queued(&self, max_bytes: usize) -> Option<Arc<Batch>> {
        let mut inner = lock(&self.inner);
        if inner.queue.front()?.byte_size > max_bytes {
            return None;
        }
        let batch = inner.queue.pop_front()?;
        let size = batch.byte_size as u64;
        if batch.is_spilled() {
            inner.disk_bytes -= size;
        } else {
            inner.memory_bytes -= size;
            inner.memory_batches -= 1;
            inner.memory_events -= batch.event_count();
        }
        self.publish(&inner);
        drop(inner);
        self.space.notify_one();
        Some(batch)
    }

    /// Batches waiting, for a writer deciding whether it caught up.
    pub fn is_empty(&self) -> bool {
        lock(&self.inner).queue.is_empty()
    }

    /// The dispatcher is done: the writer takes what is left, then ends.
    pub fn close(&self) {
        lock(&self.inner).closed = true;
        self.ready.notify_one();
        self.done.send_replace(true);
    }

    /// Resolves once the dispatcher is done pushing.
    pub async fn closed(&self) {
        let mut done = self.done.subscribe();
        // Only fails if the sender is gone, and we hold it.
        let _ = done.wait_for(|done| *done).await;
    }

    /// The writer stopped taking: drop what is buffered, refuse later
    /// pushes, and never make the dispatcher wait for this sink again.
    pub fn abandon(&self) {
        let mut inner = lock(&self.inner);
        inner.abandoned = true;
        inner.queue.clear();
        inner.memory_bytes = 0;
        inner.memory_batches = 0;
        inner.memory_events = 0;
        inner.disk_bytes = 0;
        self.publish(&inner);
        drop(inner);
        self.space.notify_one();
    }

    fn publish(&self, inner: &Inner) {
        let sink = &self.status.sinks[self.index];
        let real = self.status.source.commit_times_are_real();
        let since = inner.queue.front().map_or(0, |b| b.waiting_since_us(real));
        sink.buffered_since_us.store(since, Ordering::Relaxed);
        let figures = &sink.buffer;
        figures.batches.store(inner.queue.len() as u64, Ordering::Relaxed);
        figures.memory_bytes.store(inner.memory_bytes, Ordering::Relaxed);
        figures.disk_bytes.store(inner.disk_bytes, Ordering::Relaxed);
    }
}

/// `spilled_copy` returns `None` only for a batch already on disk, which
/// `place` never asks it to copy.
fn unreachable_spilled(batch: &Batch) -> Result<Batch, SpillError> {
    Err(SpillError {
        path: String::new(),
        detail: format!("batch {} is already on disk; this is a bug in the sink buffer", batch.seq),
    })
}

/// Closes the buffers when the dispatcher ends, however it ends, so no
/// writer waits forever.
pub(crate) struct CloseOnDrop(pub Vec<Arc<SinkBuffer>>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        for buffer in &self.0 {
            buffer.close();
        }
    }
}

/// Sinks whose buffer overflowed and that answer again: each needs the
/// source re-read from its checkpoint, which the process does by running
/// the pipeline again (the other sinks skip what they hold, as after a
/// restart).
#[derive(Default)]
pub(crate) struct Rereads {
    requested: Mutex<Vec<String>>,
}

impl Rereads {
    pub(crate) fn request(&self, sink_id: &str) {
        let mut requested = lock(&self.requested);
        if !requested.iter().any(|s| s == sink_id) {
            requested.push(sink_id.to_string());
        }
    }

    /// The sinks that asked, emptied.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.requested))
    }
}

#[cfg(test)]
mod tests {
    use sluice_config::BatchConfig;
    use sluice_core::{Event, Guarantee, Op};

    use super::*;
    use crate::batch::Batcher;
    use crate::status::SinkInfo;

    /// `count` batches of one 1-event transaction each.
    fn batches(count: u64) -> Vec<Arc<Batch>> {
        let dir = tempfile::tempdir().unwrap();
        let mut batcher = Batcher::new(BatchConfig { max_events: 1, ..BatchConfig::default() }, dir.path().into());
        (1..=count)
            .filter_map(|tx| {
                let event = Event {
                    op: Op::Insert,
                    source_id: "s".into(),
                    database: "d".into(),
                    table: "t".into(),
                    key: None,
                    before: None,
                    after: None,
                    schema_version: 1,
                    position: Position::Generator { tx, seq: 0 },
                    tx_id: tx.to_string().into(),
                    tx_end: true,
                    commit_time_us: 0,
                    schema: None,
                    origin: sluice_core::schema::Origin::None,
                    route: None,
                    shape: Default::default(),
                };
                batcher.push(event).unwrap()
            })
            .collect()
    }

    fn buffer(max_disk_bytes: u64, may_overflow: bool, dir: &std::path::Path) -> (SinkBuffer, Arc<PipelineStatus>) {
        buffer_holding(Inflight { batches: 2, events: usize::MAX }, max_disk_bytes, may_overflow, dir)
    }

    fn buffer_holding(
        inflight: Inflight,
        max_disk_bytes: u64,
        may_overflow: bool,
        dir: &std::path::Path,
    ) -> (SinkBuffer, Arc<PipelineStatus>) {
        let sink =
            SinkInfo { id: "k".into(), guarantee: Guarantee::ExactlyOnce { condition: None }, required: !may_overflow };
        let handle = crate::PipelineHandle::new("p", "s", "generator", vec![sink]);
        let limits = BufferLimits { max_memory_bytes: 1 << 30, max_disk_bytes };
        let buffer = SinkBuffer::new(limits, inflight, may_overflow, dir.join("buffer"), (handle.status.clone(), 0));
        (buffer, handle.status)
    }

    #[tokio::test]
    async fn memory_then_disk_then_overflow_leaves_a_gap_after_what_was_kept() {
        let dir = tempfile::tempdir().unwrap();
        let all = batches(6);
        let room = all[0].byte_size as u64 * 2;
        let (buffer, status) = buffer(room, true, dir.path());
        let pushed: Vec<Pushed> = futures_pushes(&buffer, &all).await;
        assert_eq!(
            pushed,
            [Pushed::Memory, Pushed::Memory, Pushed::Disk, Pushed::Disk, Pushed::Dropped, Pushed::Dropped]
        );
        assert!(status.sinks[0].buffer.overflowed.load(Ordering::Relaxed));
        assert!(status.sinks[0].detachment().is_some(), "an overflowed sink shows as detached");
        let mut taken = Vec::new();
        loop {
            match buffer.take().await {
                Taken::Batch(batch) => taken.push(batch.last().clone()),
                Taken::Gap { after } => {
                    assert_eq!(after.as_ref(), Some(all[3].last()), "the gap starts after the last batch kept");
                    break;
                }
                Taken::Closed => panic!("an overflowed buffer reports its gap"),
            }
        }
        let kept: Vec<Position> = all[..4].iter().map(|b| b.last().clone()).collect();
        assert_eq!(taken, kept, "what was kept comes out in order, from memory and from disk");
        assert_eq!(status.sinks[0].buffer.disk_bytes.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn memory_holds_no_more_events_than_its_bound_and_an_empty_buffer_takes_any_batch() {
        let dir = tempfile::tempdir().unwrap();
        let all = batches(5);
        let (buffer, status) = buffer_holding(Inflight { batches: 4, events: 2 }, 1 << 30, true, dir.path());
        let pushed: Vec<Pushed> = futures_pushes(&buffer, &all[..3]).await;
        assert_eq!(pushed, [Pushed::Memory, Pushed::Memory, Pushed::Disk], "two batches of one event fill it");
        for _ in 0..3 {
            assert!(matches!(buffer.take().await, Taken::Batch(_)));
        }
        assert_eq!(status.sinks[0].buffer.memory_bytes.load(Ordering::Relaxed), 0, "taking gives the room back");
        let (tight, _) = buffer_holding(Inflight { batches: 4, events: 1 }, 1 << 30, true, dir.path());
        let big = Batcher::new(
            BatchConfig { max_events: 10, respect_source_tx: false, ..Default::default() },
            dir.path().into(),
        );
        let two = merged_batch(big, &all[3..5]);
        assert_eq!(two.event_count(), 2);
        assert_eq!(tight.push(&two).await.unwrap(), Pushed::Memory, "a batch past the bound still moves");
        assert_eq!(tight.push(&all[0]).await.unwrap(), Pushed::Disk);
    }

    /// One batch of the events of `batches`.
    fn merged_batch(mut batcher: Batcher, batches: &[Arc<Batch>]) -> Arc<Batch> {
        for event in batches.iter().flat_map(|b| b.events().unwrap()) {
            assert!(batcher.push(event.clone()).unwrap().is_none());
        }
        batcher.finish().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_that_may_not_overflow_holds_the_push_until_a_take() {
        let dir = tempfile::tempdir().unwrap();
        let all = batches(3);
        let (buffer, status) = buffer(0, false, dir.path());
        let buffer = Arc::new(buffer);
        assert_eq!(buffer.push(&all[0]).await.unwrap(), Pushed::Memory);
        assert_eq!(buffer.push(&all[1]).await.unwrap(), Pushed::Memory);
        let pusher = {
            let (buffer, batch) = (buffer.clone(), all[2].clone());
            tokio::spawn(async move { buffer.push(&batch).await.unwrap() })
        };
        tokio::task::yield_now().await;
        assert!(!pusher.is_finished(), "a full required buffer makes the push wait");
        assert_eq!(status.held_back_by(), None, "a moment's back-pressure is no stall");
        tokio::time::advance(crate::status::HELD_BACK_AFTER).await;
        assert!(!pusher.is_finished());
        assert_eq!(status.held_back_by().as_deref(), Some("k"));
        assert!(matches!(buffer.take().await, Taken::Batch(_)));
        assert_eq!(pusher.await.unwrap(), Pushed::Memory);
        assert_eq!(status.held_back_by(), None, "the wait is over");
        buffer.close();
        assert!(matches!(buffer.take().await, Taken::Batch(_)));
        assert!(matches!(buffer.take().await, Taken::Batch(_)));
        assert!(matches!(buffer.take().await, Taken::Closed));
    }

    #[tokio::test]
    async fn an_abandoned_buffer_never_makes_the_dispatcher_wait() {
        let dir = tempfile::tempdir().unwrap();
        let all = batches(4);
        let (buffer, _) = buffer(0, false, dir.path());
        futures_pushes(&buffer, &all[..2]).await;
        buffer.abandon();
        assert_eq!(buffer.push(&all[2]).await.unwrap(), Pushed::Closed);
    }

    #[tokio::test]
    async fn a_buffer_abandoned_while_a_batch_is_spilled_drops_it_without_miscounting() {
        let dir = tempfile::tempdir().unwrap();
        let all = batches(3);
        let (buffer, status) = buffer(1 << 30, true, dir.path());
        futures_pushes(&buffer, &all[..2]).await;
        let Placement::Spill { size } = buffer.reserve(&all[2]) else { panic!("the third batch goes to disk") };
        // The writer stops between the reservation and the file.
        buffer.abandon();
        assert_eq!(buffer.finish_spill(&all[2], size).unwrap(), Pushed::Closed);
        assert_eq!(status.sinks[0].buffer.disk_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(buffer.push(&all[2]).await.unwrap(), Pushed::Closed);
    }

    async fn futures_pushes(buffer: &SinkBuffer, batches: &[Arc<Batch>]) -> Vec<Pushed> {
        let mut pushed = Vec::new();
        for batch in batches {
            pushed.push(buffer.push(batch).await.unwrap());
        }
        pushed
    }
}
