//! Transaction-aware batching.
//!
//! The batcher cuts the event stream into batches bounded by
//! `max_events`, `max_bytes` and `max_ms`. With `respect_source_tx` it cuts
//! only after an event with `tx_end`: when a limit is reached mid-
//! transaction, it cuts after the last whole transaction in the batch and
//! carries the partial one over; a single transaction larger than the limits
//! makes one batch that grows until the transaction ends. Once such a batch
//! holds `max_bytes`, it moves to a spill file and grows there instead of
//! on the heap (see [`crate::spill`]).
//!
//! The pipeline's transforms run on each batch as it is cut. A batch keeps
//! the first and last position of every event it was cut from, dropped or
//! not, so a dropped event still moves every sink's checkpoint on: a batch
//! whose events were all dropped still goes to every sink.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use sluice_config::BatchConfig;
use sluice_core::{Event, EventChunks, Op, Position, SharedWork, SinkError};
use sluice_transform::{StepError, Transforms, Verdict};
use tokio::time::{Duration, Instant};

use crate::latency::Latency;
use crate::spill::{SPILL_CHUNK_EVENTS, SpillError, SpillFile, SpillReader, SpillWriter};

/// Events of one transaction share their commit time: one run each.
/// Snapshot reads carry the snapshot's start, not a commit: left out.
fn commit_runs(events: &[Event]) -> Vec<(i64, u64)> {
    let mut runs: Vec<(i64, u64)> = Vec::new();
    for event in events.iter().filter(|e| e.op != Op::Read) {
        match runs.last_mut() {
            Some((at, count)) if *at == event.commit_time_us => *count += 1,
            _ => runs.push((event.commit_time_us, 1)),
        }
    }
    runs
}

/// Contiguous events in source order, shared by every sink writer.
#[derive(Debug)]
pub struct Batch {
    /// Counts batches of one run, from 1.
    pub seq: u64,
    /// Approximate bytes of the events (on disk, for a spilled batch).
    pub byte_size: usize,
    /// What the events take on the heap ([`Event::sizes`]); 0 once spilled.
    /// Several times `byte_size` for narrow rows.
    pub heap_bytes: usize,
    /// Events and approximate bytes cut by this run up to and including
    /// this batch: where the batch ends, counted along the stream.
    pub through_events: u64,
    pub through_bytes: u64,
    /// When the batch was cut (µs since the Unix epoch): from then on it
    /// waits in Sluice for the sinks.
    pub cut_at_us: i64,
    first: Position,
    last: Position,
    /// The commit time of the last event; what latency is measured from
    /// for a spilled batch, whose events are not at hand.
    last_commit_us: i64,
    /// Commit times and how many events share each, worked out once for
    /// every sink writer's latency record.
    commit_runs: Vec<(i64, u64)>,
    body: Body,
    /// What the sink writers of this batch share (its encodings).
    shared: Arc<SharedWork>,
}

#[derive(Debug)]
enum Body {
    Memory(Vec<Event>),
    Spilled(SpillFile),
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Body::Memory(events) = &mut self.body {
            sluice_core::event_vecs::give(std::mem::take(events));
        }
    }
}

impl Batch {
    /// The batch cut from `events`, of which `transforms` keep some.
    fn in_memory(
        seq: u64,
        mut events: Vec<Event>,
        (byte_size, mut heap_bytes): (usize, usize),
        transforms: &Arc<Transforms>,
    ) -> Result<Option<Self>, Failed> {
        let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(None) };
        let (first, last, last_commit_us) = (first.position.clone(), last.position.clone(), last.commit_time_us);
        if !transforms.is_empty() {
            let mut verdicts = crate::transform_pool::apply_all(transforms, &mut events).into_iter();
            let mut failed = None;
            events.retain_mut(|event| match verdicts.next() {
                Some(Ok(verdict)) => verdict == Verdict::Keep,
                Some(Err(error)) => {
                    failed.get_or_insert_with(|| Failed { position: event.position.clone(), error });
                    false
                }
                None => false,
            });
            if let Some(failed) = failed {
                return Err(failed);
            }
            heap_bytes = events.iter().map(|e| e.sizes().1).sum();
        }
        let commit_runs = commit_runs(&events);
        let mut batch = Self::new(seq, byte_size, (first, last), last_commit_us, commit_runs, Body::Memory(events));
        batch.heap_bytes = heap_bytes;
        Ok(Some(batch))
    }

    /// A batch not yet counted along the stream ([`Batcher`] does that).
    fn new(
        seq: u64,
        byte_size: usize,
        (first, last): (Position, Position),
        last_commit_us: i64,
        commit_runs: Vec<(i64, u64)>,
        body: Body,
    ) -> Self {
        Self {
            seq,
            byte_size,
            heap_bytes: 0,
            through_events: 0,
            through_bytes: 0,
            cut_at_us: 0,
            first,
            last,
            last_commit_us,
            commit_runs,
            body,
            shared: Arc::default(),
        }
    }

    pub fn first(&self) -> &Position {
        &self.first
    }

    pub fn last(&self) -> &Position {
        &self.last
    }

    /// Since when the batch's oldest event has waited to be durable: its
    /// commit time where commit times are real and the batch has one (not
    /// a batch of snapshot reads), otherwise when the batch was cut.
    pub fn waiting_since_us(&self, commit_times_are_real: bool) -> i64 {
        let committed = self.commit_runs.first().map(|(at, _)| *at).filter(|at| *at > 0);
        match committed {
            Some(at) if commit_times_are_real => at,
            _ => self.cut_at_us.max(1),
        }
    }

    /// Records in `latency` each event's time from commit to `now_us`.
    pub fn record_latency(&self, latency: &Latency, now_us: i64) {
        for (commit_us, count) in &self.commit_runs {
            latency.record(*commit_us, now_us, *count);
        }
    }

    /// Each event's time from commit to `now_us`, in seconds, with how
    /// many events share it.
    /// Events without a commit time are left out, as [`Latency`] leaves
    /// them out.
    pub fn latencies(&self, now_us: i64) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.commit_runs
            .iter()
            .filter(|(commit_us, _)| *commit_us > 0)
            .map(move |(commit_us, count)| ((now_us - commit_us).max(0) as f64 / 1e6, *count))
    }

    pub fn event_count(&self) -> usize {
        match &self.body {
            Body::Memory(events) => events.len(),
            Body::Spilled(file) => file.event_count(),
        }
    }

    pub fn is_spilled(&self) -> bool {
        matches!(self.body, Body::Spilled(_))
    }

    /// A copy of an in-memory batch in a spill file under `dir`, so a
    /// writer that must keep it a long time holds it on disk; `None` for a
    /// batch that is spilled already.
    pub fn spilled_copy(&self, dir: &std::path::Path) -> Result<Option<Batch>, SpillError> {
        let Body::Memory(events) = &self.body else { return Ok(None) };
        let mut writer = SpillWriter::create(dir, self.seq)?;
        for event in events {
            writer.push(event)?;
        }
        let file = writer.finish()?;
        Ok(Some(Batch {
            seq: self.seq,
            byte_size: self.byte_size,
            heap_bytes: 0,
            through_events: self.through_events,
            through_bytes: self.through_bytes,
            cut_at_us: self.cut_at_us,
            first: self.first.clone(),
            last: self.last.clone(),
            last_commit_us: self.last_commit_us,
            commit_runs: self.commit_runs.clone(),
            body: Body::Spilled(file),
            shared: Arc::default(),
        }))
    }

    /// The events of an in-memory batch; `None` for a spilled one.
    pub fn events(&self) -> Option<&[Event]> {
        match &self.body {
            Body::Memory(events) => Some(events),
            Body::Spilled(_) => None,
        }
    }

    /// The events of an in-memory batch strictly after `position`;
    /// `None` for a spilled one.
    pub fn events_after(&self, position: Option<&Position>) -> Option<&[Event]> {
        let events = self.events()?;
        Some(&events[position.map_or(0, |p| events.partition_point(|e| e.position <= *p))..])
    }

    /// Tells the sinks' shared work how many sinks the batch goes to.
    pub(crate) fn going_to(&self, sinks: usize) {
        self.shared.set_sinks(sinks);
    }

    /// The events strictly after `position` (what a sink at that checkpoint
    /// still needs), or `None` when there are none.
    pub fn chunks(&self, position: Option<&Position>) -> Result<Option<BatchChunks<'_>>, SpillError> {
        if position.is_some_and(|p| *p >= self.last) {
            return Ok(None);
        }
        let mut shared = None;
        let source = match &self.body {
            Body::Memory(events) => {
                let after = self.events_after(position).unwrap_or_default();
                shared = Some((self.shared.clone(), (events.len() - after.len()) as u64));
                // A batch whose events were all dropped, or that the sink
                // holds up to past its last kept event, has no chunk.
                Source::Memory(after)
            }
            // A spilled batch is read chunk by chunk by each sink: nothing
            // is shared, so nothing of it has to stay in memory.
            Body::Spilled(file) => Source::Spilled { reader: Box::new(file.reader()?), buf: Vec::new() },
        };
        Ok(Some(BatchChunks {
            source,
            shared,
            after: position.cloned(),
            last: self.last.clone(),
            event_count: self.event_count(),
        }))
    }
}

/// The most events of an in-memory batch handed to a sink at once: a batch
/// of the default size (`batch.max_events`, 2,000) is one chunk.
pub const MEMORY_CHUNK_EVENTS: usize = 2048;

/// The events of one batch after a sink's position, chunk by chunk.
pub struct BatchChunks<'a> {
    source: Source<'a>,
    shared: Option<(Arc<SharedWork>, u64)>,
    after: Option<Position>,
    last: Position,
    event_count: usize,
}

enum Source<'a> {
    /// The events not handed out yet.
    Memory(&'a [Event]),
    Spilled {
        reader: Box<SpillReader>,
        buf: Vec<Event>,
    },
}

#[async_trait]
impl EventChunks for BatchChunks<'_> {
    async fn next_chunk(&mut self) -> Result<Option<&[Event]>, SinkError> {
        match &mut self.source {
            Source::Memory(rest) => {
                if rest.is_empty() {
                    return Ok(None);
                }
                // A large transaction's batch goes out in pieces, so what a
                // sink builds from a chunk (its encoding, its buffers) stays
                // the size of a piece rather than of the transaction.
                let (chunk, after) = rest.split_at(rest.len().min(MEMORY_CHUNK_EVENTS));
                *rest = after;
                Ok(Some(chunk))
            }
            Source::Spilled { reader, buf } => loop {
                buf.clear();
                reader.read_chunk(buf, SPILL_CHUNK_EVENTS).map_err(|e| {
                    SinkError::permanent(
                        format!("cannot read back a spilled batch: {e}"),
                        "check the disk of --data-dir",
                    )
                })?;
                if buf.is_empty() {
                    return Ok(None);
                }
                if let Some(after) = &self.after {
                    buf.retain(|e| e.position > *after);
                }
                if !buf.is_empty() {
                    return Ok(Some(buf.as_slice()));
                }
            },
        }
    }

    fn last_position(&self) -> &Position {
        &self.last
    }

    fn shared(&self) -> Option<(Arc<SharedWork>, u64)> {
        self.shared.clone()
    }

    /// For a spilled batch with a position inside it, an upper bound.
    fn event_count(&self) -> usize {
        match &self.source {
            Source::Memory(rest) => rest.len(),
            Source::Spilled { .. } => self.event_count,
        }
    }
}

/// A transform failed on the event at `position`; the batch it was in is
/// not sent, so the pipeline stops before any sink moves past it.
#[derive(Debug)]
pub struct Failed {
    pub position: Position,
    pub error: StepError,
}

/// One huge transaction growing on disk: its file, and the first and last
/// position and the last commit time of every event it was cut from.
struct Spilling {
    writer: SpillWriter,
    first: Position,
    last: Position,
    last_commit_us: i64,
}

/// The most events a batcher reserves room for ahead of them.
const MAX_RESERVED_EVENTS: usize = 1 << 16;

pub struct Batcher {
    limits: BatchConfig,
    spill_dir: PathBuf,
    transforms: Arc<Transforms>,
    /// Set when a transform failed: the dispatcher stops on it.
    pub failed: Option<Failed>,
    current: Vec<Event>,
    /// Set while the open batch is one transaction growing on disk.
    spill: Option<Spilling>,
    byte_size: usize,
    /// What the open batch's events take in memory, which `max_bytes` bounds.
    heap_bytes: usize,
    /// Length of the prefix of `current` that ends on a transaction end.
    whole_tx_len: usize,
    opened_at: Option<Instant>,
    /// The age limit passed mid-transaction: cut at the next transaction end.
    age_expired: bool,
    next_seq: u64,
    /// Events and bytes of every batch cut so far.
    events_cut: u64,
    bytes_cut: u64,
}

impl Batcher {
    pub fn new(limits: BatchConfig, spill_dir: PathBuf) -> Self {
        Self {
            current: Vec::with_capacity(limits.max_events.min(MAX_RESERVED_EVENTS)),
            limits,
            spill_dir,
            transforms: Arc::default(),
            failed: None,
            spill: None,
            byte_size: 0,
            heap_bytes: 0,
            whole_tx_len: 0,
            opened_at: None,
            age_expired: false,
            next_seq: 1,
            events_cut: 0,
            bytes_cut: 0,
        }
    }

    /// The pipeline's transforms, run on each batch as it is cut.
    pub fn with_transforms(mut self, transforms: Arc<Transforms>) -> Self {
        self.transforms = transforms;
        self
    }

    /// `event` through the transforms, for a spill file: whether to write
    /// it. A failure is kept for the dispatcher.
    fn keep(&mut self, event: &mut Event) -> bool {
        match self.transforms.apply(event) {
            Ok(verdict) => verdict == Verdict::Keep,
            Err(error) => {
                self.failed.get_or_insert_with(|| Failed { position: event.position.clone(), error });
                false
            }
        }
    }

    /// When the open batch must be cut by age, if one is open.
    pub fn deadline(&self) -> Option<Instant> {
        if self.age_expired || self.spill.is_some() {
            return None;
        }
        self.opened_at.map(|t| t + Duration::from_millis(self.limits.max_ms))
    }

    /// The age limit passed: cuts the whole transactions, or, if there are
    /// none yet, arranges a cut at the next transaction end.
    pub fn on_deadline(&mut self) -> Option<Arc<Batch>> {
        let batch = self.cut();
        if batch.is_none() && !self.current.is_empty() {
            self.age_expired = true;
        }
        batch
    }

    /// Adds one event; returns a batch when a limit cut one.
    pub fn push(&mut self, mut event: Event) -> Result<Option<Arc<Batch>>, SpillError> {
        if self.opened_at.is_none() {
            self.opened_at = Some(Instant::now());
        }
        let (approx, heap) = event.sizes();
        self.byte_size += approx;
        self.heap_bytes += heap;
        let tx_end = event.tx_end;
        if self.spill.is_some() {
            let kept = self.keep(&mut event);
            if let Some(spill) = &mut self.spill {
                if kept {
                    spill.writer.push(&event)?;
                }
                spill.last_commit_us = event.commit_time_us;
                spill.last = event.position;
            }
            return if tx_end { self.cut_spilled().map(Some) } else { Ok(None) };
        }
        self.current.push(event);
        if tx_end {
            self.whole_tx_len = self.current.len();
        }
        let full = self.current.len() >= self.limits.max_events || self.heap_bytes >= self.limits.max_bytes;
        if (full || (self.age_expired && tx_end))
            && let Some(batch) = self.cut()
        {
            return Ok(Some(batch));
        }
        let one_huge_tx = self.limits.respect_source_tx && self.whole_tx_len == 0 && !tx_end;
        if one_huge_tx && self.heap_bytes >= self.limits.max_bytes {
            self.start_spill()?;
        }
        Ok(None)
    }

    /// Cuts what may be cut now: everything, or with `respect_source_tx`
    /// every whole transaction. Used for size and age limits.
    pub fn cut(&mut self) -> Option<Arc<Batch>> {
        let len = if self.limits.respect_source_tx { self.whole_tx_len } else { self.current.len() };
        self.take(len)
    }

    /// Cuts whatever whole transactions are left, at the end of the stream
    /// or at shutdown. A trailing partial transaction is dropped: its
    /// events are not checkpointed, so a restart reads them again.
    pub fn finish(&mut self) -> Option<Arc<Batch>> {
        let batch = self.cut();
        self.current.clear();
        self.spill = None;
        self.whole_tx_len = 0;
        self.byte_size = 0;
        self.heap_bytes = 0;
        self.opened_at = None;
        self.age_expired = false;
        batch
    }

    fn start_spill(&mut self) -> Result<(), SpillError> {
        let mut writer = SpillWriter::create(&self.spill_dir, self.next_seq)?;
        let ends = self
            .current
            .first()
            .map(|e| e.position.clone())
            .zip(self.current.last().map(|e| (e.position.clone(), e.commit_time_us)));
        let mut events = std::mem::take(&mut self.current);
        for event in &mut events {
            if self.keep(event) {
                writer.push(event)?;
            }
        }
        events.clear();
        events.shrink_to(self.limits.max_events.min(MAX_RESERVED_EVENTS));
        self.current = events;
        if let Some((first, (last, last_commit_us))) = ends {
            self.spill = Some(Spilling { writer, first, last, last_commit_us });
        }
        Ok(())
    }

    fn cut_spilled(&mut self) -> Result<Arc<Batch>, SpillError> {
        let Some(Spilling { writer, first, last, last_commit_us }) = self.spill.take() else {
            return Err(SpillError { path: "spill file".into(), detail: "cut while no batch was spilling".into() });
        };
        let file = writer.finish()?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let byte_size = std::mem::take(&mut self.byte_size);
        self.heap_bytes = 0;
        self.opened_at = None;
        self.age_expired = false;
        // The events are on disk: all of them are counted at the last commit.
        let commit_runs = vec![(last_commit_us, file.event_count() as u64)];
        let mut batch = Batch::new(seq, byte_size, (first, last), last_commit_us, commit_runs, Body::Spilled(file));
        self.count(&mut batch);
        Ok(Arc::new(batch))
    }

    fn take(&mut self, len: usize) -> Option<Arc<Batch>> {
        if len == 0 {
            return None;
        }
        let rest = if len == self.current.len() {
            // Room for a batch like this one, so the next does not grow
            // event by event, moving every event each time it doubles: a
            // run of transactions larger than `max_events` would otherwise
            // reallocate each of their batches three or four times, and
            // the blocks they leave behind stay resident until the
            // allocator returns them. A kept vector (`event_vecs`) comes
            // with its pages resident; a new one's room is touched only
            // as it fills.
            sluice_core::event_vecs::take(len.min(MAX_RESERVED_EVENTS))
        } else {
            self.current.split_off(len)
        };
        let events = std::mem::replace(&mut self.current, rest);
        let sizes = if self.current.is_empty() {
            (std::mem::take(&mut self.byte_size), std::mem::take(&mut self.heap_bytes))
        } else {
            let (rest_bytes, rest_heap) =
                self.current.iter().map(Event::sizes).fold((0, 0), |(a, h), (ea, eh)| (a + ea, h + eh));
            let heap = std::mem::replace(&mut self.heap_bytes, rest_heap).saturating_sub(rest_heap);
            (std::mem::replace(&mut self.byte_size, rest_bytes) - rest_bytes, heap)
        };
        self.whole_tx_len = 0;
        self.age_expired = false;
        self.opened_at = if self.current.is_empty() { None } else { Some(Instant::now()) };
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut batch = match Batch::in_memory(seq, events, sizes, &self.transforms) {
            Ok(batch) => batch?,
            Err(failed) => {
                self.failed = Some(failed);
                return None;
            }
        };
        self.count(&mut batch);
        Some(Arc::new(batch))
    }

    fn count(&mut self, batch: &mut Batch) {
        self.events_cut += batch.event_count() as u64;
        self.bytes_cut += batch.byte_size as u64;
        batch.through_events = self.events_cut;
        batch.through_bytes = self.bytes_cut;
        batch.cut_at_us = crate::latency::now_us();
    }
}

#[cfg(test)]
mod tests;
