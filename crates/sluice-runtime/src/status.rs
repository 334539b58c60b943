//! Where a pipeline stands, for the HTTP API, the metrics and the dashboard.
//!
//! The pipeline's tasks write these figures as they work: atomics for
//! counters, a lock for each position. Readers take a [`PipelineView`], a
//! plain copy. Nothing here is on the per-event path: counters move once
//! per chunk or batch.
//!
//! Positions are opaque and cannot be drawn on a line, so every mark along
//! the stream is also counted in events cut by this run: the head is every
//! event cut, a sink's durable watermark is the events of the batches it
//! holds, and lag is the difference.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sluice_core::{Event, Guarantee, LogStats, Position};
use tokio::sync::watch;

pub use self::view::{Health, PipelineView, SinkView, SourceView, TransformView};
use crate::latency::now_us;

mod view;

/// A source that has read nothing for this long while every measurement
/// since found the server's log ahead of it is stalled (s).
pub const STALL_SECS: f64 = 5.0;
/// How long measurements must keep finding the log ahead of a source that
/// reads before it counts as behind (s): longer than one measurement
/// interval (2 s), so a write the next keepalive covers is not lag.
pub const BACKLOG_SECS: f64 = 3.0;

pub(crate) use sluice_core::sync::lock;

/// Seconds from the time in `since_us` until now; 0 when it holds 0 (unset).
pub(crate) fn seconds_since(since_us: &AtomicI64) -> f64 {
    match since_us.load(Ordering::Relaxed) {
        0 => 0.0,
        since => (now_us() - since).max(0) as f64 / 1e6,
    }
}

pub(crate) fn text(position: &Mutex<Option<Position>>) -> Option<String> {
    lock(position).as_ref().map(ToString::to_string)
}

/// What a pipeline is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineState {
    Starting,
    Running,
    Paused,
    Stopped,
    Failed,
    /// Another instance of the fleet owns it (`sluice run --fleet`); this
    /// one runs it when it takes the lease.
    Standby,
}

/// Who runs a pipeline of a fleet: the lease's owner, its epoch, and since
/// when (the store's clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ownership {
    pub instance: String,
    pub epoch: i64,
    pub since_us: i64,
}

/// How long the source must wait on a required sink's full buffer before
/// the pipeline shows as held back by it.
pub const HELD_BACK_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// What a sink is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkState {
    Starting,
    Running,
    /// Its last call failed; the writer is retrying.
    Retrying,
    /// An optional sink that failed for `sink_batch_deadline_secs` or
    /// whose buffer overflowed: it no longer holds the others back, keeps
    /// its checkpoint, and is probed until it answers again.
    Detached,
    /// Reattached after a detachment, writing what its buffer kept.
    CatchingUp,
    Closed,
    Failed,
}

/// An error and when it happened.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorNote {
    pub at: String,
    pub message: String,
}

impl ErrorNote {
    /// Credentials in the message (a URL in a client library's error) are
    /// masked here, the one door to `last_error` in the API.
    fn now(message: String) -> Self {
        let message = sluice_core::redact::credentials(&message).into_owned();
        Self { at: sluice_core::time::format_utc_micros(now_us()), message }
    }
}

/// One sink's figures.
pub struct SinkStatus {
    pub id: String,
    pub guarantee: Guarantee,
    pub required: bool,
    state: Mutex<SinkState>,
    pub(crate) checkpoint: Mutex<Option<Position>>,
    /// The stored checkpoint as it changes, for a writer that waits on it
    /// (at-most-once stores before it writes).
    pub(crate) stored: tokio::sync::watch::Sender<Option<Position>>,
    pub(crate) durable: Mutex<Option<Position>>,
    /// Events and bytes, counted along the stream, the sink holds durably.
    pub(crate) durable_events: AtomicU64,
    pub(crate) durable_bytes: AtomicU64,
    pub(crate) checkpoint_events: AtomicU64,
    /// Since when the oldest batch the writer took and the sink does not
    /// hold durably yet has waited ([`crate::batch::Batch::waiting_since_us`]);
    /// 0 when the writer holds nothing.
    pub(crate) waiting_since_us: AtomicI64,
    /// The same for the oldest batch still in the sink's buffer.
    pub(crate) buffered_since_us: AtomicI64,
    pub events: AtomicU64,
    pub batches: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    /// Events left out because the sink already held them (replay filtering).
    pub replay_skipped: AtomicU64,
    /// Events written again after a failed call (at-least-once sinks may
    /// then hold them twice).
    pub replayed: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Events an at-most-once sink failed to write and the pipeline went
    /// past without writing again.
    pub dropped: AtomicU64,
    /// Since when the sink keeps failing (µs), 0 when it is not.
    failing_since_us: AtomicI64,
    last_error: Mutex<Option<ErrorNote>>,
    /// Why the sink was detached, and whether it must be resynced.
    detached: Mutex<Option<Detachment>>,
    pub(crate) buffer: BufferFigures,
    /// Commit-to-durable seconds per event, for /metrics.
    pub latency: crate::latency_buckets::LatencyBuckets,
    /// The sink's own transforms, whose counts the API reports.
    transforms: Mutex<Arc<sluice_transform::Transforms>>,
}

/// What a sink's buffer holds, as it last changed.
#[derive(Default)]
pub struct BufferFigures {
    pub batches: AtomicU64,
    pub memory_bytes: AtomicU64,
    pub disk_bytes: AtomicU64,
    /// The buffer dropped batches: the sink has a gap that a re-read of
    /// the source fills.
    pub overflowed: AtomicBool,
}

/// Why a sink was cut off.
#[derive(Debug, Clone, Serialize)]
pub struct Detachment {
    pub reason: String,
    /// The source no longer keeps the log from its checkpoint on: the sink
    /// has a gap and needs a resync.
    pub needs_resync: bool,
}

impl SinkStatus {
    fn new(id: String, guarantee: Guarantee, required: bool) -> Self {
        Self {
            id,
            guarantee,
            required,
            state: Mutex::new(SinkState::Starting),
            checkpoint: Mutex::new(None),
            stored: tokio::sync::watch::Sender::new(None),
            durable: Mutex::new(None),
            durable_events: AtomicU64::new(0),
            durable_bytes: AtomicU64::new(0),
            checkpoint_events: AtomicU64::new(0),
            waiting_since_us: AtomicI64::new(0),
            buffered_since_us: AtomicI64::new(0),
            events: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            replay_skipped: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failing_since_us: AtomicI64::new(0),
            last_error: Mutex::new(None),
            detached: Mutex::new(None),
            latency: Default::default(),
            buffer: BufferFigures::default(),
            transforms: Mutex::default(),
        }
    }

    pub(crate) fn set_transforms(&self, transforms: Arc<sluice_transform::Transforms>) {
        *lock(&self.transforms) = transforms;
    }

    pub fn transforms(&self) -> Arc<sluice_transform::Transforms> {
        lock(&self.transforms).clone()
    }

    pub fn state(&self) -> SinkState {
        *lock(&self.state)
    }

    pub(crate) fn set_state(&self, state: SinkState) {
        *lock(&self.state) = state;
    }

    pub(crate) fn failed_call(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let _ = self.failing_since_us.compare_exchange(0, now_us(), Ordering::Relaxed, Ordering::Relaxed);
        *lock(&self.last_error) = Some(ErrorNote::now(message));
        if self.state() == SinkState::Running {
            self.set_state(SinkState::Retrying);
        }
    }

    pub(crate) fn succeeded(&self) {
        self.failing_since_us.store(0, Ordering::Relaxed);
        if matches!(self.state(), SinkState::Retrying | SinkState::Starting) {
            self.set_state(SinkState::Running);
        }
    }

    pub(crate) fn detach(&self, mut detachment: Detachment) {
        detachment.reason = sluice_core::redact::credentials(&detachment.reason).into_owned();
        *lock(&self.detached) = Some(detachment);
        self.set_state(SinkState::Detached);
    }

    /// Back from a detachment: the writer writes again.
    pub(crate) fn reattached(&self) {
        *lock(&self.detached) = None;
        self.set_state(SinkState::CatchingUp);
    }

    pub fn detachment(&self) -> Option<Detachment> {
        lock(&self.detached).clone()
    }

    /// How long the sink has kept failing, in seconds; 0 when it is not.
    pub fn failing_for_secs(&self) -> f64 {
        seconds_since(&self.failing_since_us)
    }

    /// Seconds since the oldest event Sluice read that the sink does not
    /// hold yet committed (or, without real commit times, was cut); 0 when
    /// the sink holds all Sluice read. What Sluice has not read yet is the
    /// source's lag.
    pub fn lag_seconds(&self) -> f64 {
        let oldest = [&self.waiting_since_us, &self.buffered_since_us]
            .iter()
            .map(|at| at.load(Ordering::Relaxed))
            .filter(|at| *at > 0)
            .min();
        oldest.map_or(0.0, |at| (now_us() - at).max(0) as f64 / 1e6)
    }
}

/// The source's figures, as the pipeline sees them.
#[derive(Default)]
pub struct SourceFigures {
    pub events: AtomicU64,
    pub bytes: AtomicU64,
    /// Events and bytes read per table.
    tables: Mutex<BTreeMap<String, (u64, u64)>>,
    pub(crate) position: Mutex<Option<Position>>,
    /// Commit time of the latest event read (µs), 0 before the first.
    pub(crate) last_commit_us: AtomicI64,
    /// When the latest event was read (µs).
    pub(crate) last_read_us: AtomicI64,
    pub restarts: AtomicU64,
    failing_since_us: AtomicI64,
    last_error: Mutex<Option<ErrorNote>>,
    log: Mutex<Option<Arc<LogStats>>>,
}

impl SourceFigures {
    /// Counts a chunk the source read, once per chunk.
    pub(crate) fn read(&self, events: &[Event]) {
        let Some(last) = events.last() else { return };
        let mut bytes = 0;
        let mut tables = lock(&self.tables);
        let mut current: Option<(&str, u64, u64)> = None;
        for event in events {
            let size = event.approx_byte_size() as u64;
            bytes += size;
            match &mut current {
                Some((table, n, b)) if *table == &*event.table => {
                    *n += 1;
                    *b += size;
                }
                _ => {
                    if let Some((table, n, b)) = current.take() {
                        add(&mut tables, table, n, b);
                    }
                    current = Some((&event.table, 1, size));
                }
            }
        }
        if let Some((table, n, b)) = current {
            add(&mut tables, table, n, b);
        }
        drop(tables);
        self.events.fetch_add(events.len() as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        *lock(&self.position) = Some(last.position.clone());
        if last.commit_time_us > 0 {
            self.last_commit_us.store(last.commit_time_us, Ordering::Relaxed);
        }
        self.last_read_us.store(now_us(), Ordering::Relaxed);
        self.failing_since_us.store(0, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, message: String) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        let _ = self.failing_since_us.compare_exchange(0, now_us(), Ordering::Relaxed, Ordering::Relaxed);
        *lock(&self.last_error) = Some(ErrorNote::now(message));
    }

    pub(crate) fn started(&self) {
        self.failing_since_us.store(0, Ordering::Relaxed);
    }

    pub(crate) fn set_log(&self, log: Option<Arc<LogStats>>) {
        *lock(&self.log) = log;
    }

    pub fn log(&self) -> Option<Arc<LogStats>> {
        lock(&self.log).clone()
    }

    /// Events and bytes read per table.
    pub fn tables(&self) -> BTreeMap<String, (u64, u64)> {
        lock(&self.tables).clone()
    }

    pub fn failing_for_secs(&self) -> f64 {
        seconds_since(&self.failing_since_us)
    }

    /// Whether the source's commit times come from a server's log. A
    /// source without a server log (the generator) reports no log figures
    /// and stamps synthetic commit times, which measure no lag or latency.
    pub fn commit_times_are_real(&self) -> bool {
        lock(&self.log).is_some()
    }

    /// How far the source is behind its server, in seconds; 0 when it has
    /// read all there is, and for a source without a server (the
    /// generator stamps synthetic times).
    ///
    /// While it reads, that is the age of the latest commit read, once the
    /// log has been ahead for [`BACKLOG_SECS`]. Once it
    /// has read nothing for [`STALL_SECS`] though the server has more, the
    /// changes it has not read are at least as old as the backlog: the
    /// time since measurements first found it behind, or since its last
    /// read if that is later.
    pub fn lag_seconds(&self) -> f64 {
        let Some(log) = self.log() else { return 0.0 };
        if log.behind_bytes().is_none_or(|behind| behind == 0) {
            return 0.0;
        }
        let Some(since) = log.behind_since_us() else { return 0.0 };
        let now = now_us();
        let secs = |at: i64| (now - at).max(0) as f64 / 1e6;
        let last_read = self.last_read_us.load(Ordering::Relaxed);
        let last_commit = self.last_commit_us.load(Ordering::Relaxed);
        if last_read > 0 && secs(last_read) < STALL_SECS {
            // A log found ahead by one measurement only is the usual gap
            // between a write and the next keepalive, not a backlog.
            return if secs(since) >= BACKLOG_SECS && last_commit > 0 { secs(last_commit) } else { 0.0 };
        }
        secs(since.max(last_read))
    }

    /// Nothing read for [`STALL_SECS`] while every measurement in that
    /// time found the server's log ahead of the source.
    pub fn is_stalled(&self) -> bool {
        let Some(since) = self.log().and_then(|log| log.behind_since_us()) else { return false };
        let now = now_us();
        let last_read = self.last_read_us.load(Ordering::Relaxed);
        let quiet_since = since.max(last_read);
        (now - quiet_since) as f64 / 1e6 >= STALL_SECS
    }
}

fn add(tables: &mut BTreeMap<String, (u64, u64)>, table: &str, events: u64, bytes: u64) {
    match tables.get_mut(table) {
        Some((n, b)) => {
            *n += events;
            *b += bytes;
        }
        None => {
            tables.insert(table.to_string(), (events, bytes));
        }
    }
}

/// One pipeline's figures, written by its tasks and read by the API, the
/// metrics and the SLO monitor. Requests go through [`crate::PipelineControl`].
pub struct PipelineStatus {
    pub name: String,
    pub source_id: String,
    pub source_kind: String,
    state: Mutex<PipelineState>,
    failure: Mutex<Option<ErrorNote>>,
    /// The pause switch as [`crate::PipelineControl`] sets it.
    paused: watch::Receiver<bool>,
    pub source: SourceFigures,
    /// Events, bytes and batches cut by the dispatcher.
    pub events_cut: AtomicU64,
    pub bytes_cut: AtomicU64,
    pub batches_cut: AtomicU64,
    /// Where the source would start again after a crash: the lowest stored checkpoint.
    pub(crate) replay_from: Mutex<Option<Position>>,
    pub(crate) replay_from_events: AtomicU64,
    pub sinks: Vec<SinkStatus>,
    /// Problems that keep the pipeline from being ready, from the SLO
    /// monitor; replaced at each check.
    problems: Mutex<Vec<String>>,
    /// The required sink whose full buffer the dispatcher waits on, and
    /// since when.
    held_back_by: Mutex<Option<(String, tokio::time::Instant)>>,
    /// The pipeline's transforms, whose counts the API reports.
    transforms: Mutex<Arc<sluice_transform::Transforms>>,
    /// In a fleet: who owns the pipeline.
    owner: Mutex<Option<Ownership>>,
}

/// A sink as the pipeline is told about it before it runs.
pub struct SinkInfo {
    pub id: String,
    pub guarantee: Guarantee,
    pub required: bool,
}

impl PipelineStatus {
    pub(crate) fn new(
        name: &str,
        source_id: &str,
        source_kind: &str,
        sinks: Vec<SinkInfo>,
        paused: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            source_id: source_id.to_string(),
            source_kind: source_kind.to_string(),
            state: Mutex::new(PipelineState::Starting),
            failure: Mutex::new(None),
            paused,
            source: SourceFigures::default(),
            events_cut: AtomicU64::new(0),
            bytes_cut: AtomicU64::new(0),
            batches_cut: AtomicU64::new(0),
            replay_from: Mutex::new(None),
            replay_from_events: AtomicU64::new(0),
            sinks: sinks.into_iter().map(|s| SinkStatus::new(s.id, s.guarantee, s.required)).collect(),
            problems: Mutex::new(Vec::new()),
            held_back_by: Mutex::new(None),
            transforms: Mutex::default(),
            owner: Mutex::new(None),
        })
    }

    /// In a fleet: who owns the pipeline now; a pipeline this instance does
    /// not run stands by.
    pub fn set_owner(&self, owner: Option<Ownership>, runs_here: bool) {
        *lock(&self.owner) = owner;
        // A run here that ended, even one that failed for having lost its
        // lease, is over: the pipeline lives on elsewhere.
        if !runs_here {
            *lock(&self.state) = PipelineState::Standby;
        }
    }

    pub fn owner(&self) -> Option<Ownership> {
        lock(&self.owner).clone()
    }

    pub fn set_transforms(&self, transforms: Arc<sluice_transform::Transforms>) {
        *lock(&self.transforms) = transforms;
    }

    pub fn transforms(&self) -> Arc<sluice_transform::Transforms> {
        lock(&self.transforms).clone()
    }

    pub fn state(&self) -> PipelineState {
        let state = *lock(&self.state);
        if state == PipelineState::Running && self.is_paused() { PipelineState::Paused } else { state }
    }

    pub(crate) fn set_state(&self, state: PipelineState) {
        *lock(&self.state) = state;
    }

    pub(crate) fn fail(&self, message: String) {
        *lock(&self.failure) = Some(ErrorNote::now(message));
        self.set_state(PipelineState::Failed);
    }

    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    pub fn sink(&self, id: &str) -> Option<&SinkStatus> {
        self.sinks.iter().find(|s| s.id == id)
    }

    pub(crate) fn set_problems(&self, problems: Vec<String>) {
        *lock(&self.problems) = problems;
    }

    /// Clears the figures counted along one run's stream, before a run (a
    /// re-read runs the pipeline again with the same status). Totals and
    /// a detachment that needs a resync stay.
    pub(crate) fn begin_run(&self) {
        for counter in [&self.events_cut, &self.bytes_cut, &self.replay_from_events] {
            counter.store(0, Ordering::Relaxed);
        }
        self.set_held_back_by(None);
        for sink in &self.sinks {
            for counter in [&sink.durable_events, &sink.durable_bytes, &sink.checkpoint_events] {
                counter.store(0, Ordering::Relaxed);
            }
            sink.waiting_since_us.store(0, Ordering::Relaxed);
            sink.buffered_since_us.store(0, Ordering::Relaxed);
            for figure in [&sink.buffer.batches, &sink.buffer.memory_bytes, &sink.buffer.disk_bytes] {
                figure.store(0, Ordering::Relaxed);
            }
            sink.buffer.overflowed.store(false, Ordering::Relaxed);
            let mut detached = lock(&sink.detached);
            if detached.as_ref().is_none_or(|d| !d.needs_resync) {
                *detached = None;
                drop(detached);
                sink.set_state(SinkState::Starting);
            }
        }
    }

    pub(crate) fn set_held_back_by(&self, sink: Option<&str>) {
        let mut held = lock(&self.held_back_by);
        match sink {
            Some(id) if held.as_ref().is_some_and(|(held_by, _)| held_by == id) => {}
            Some(id) => *held = Some((id.to_string(), tokio::time::Instant::now())),
            None => *held = None,
        }
    }

    /// The sink whose full buffer holds the source back, if one does.
    /// Only a wait of [`HELD_BACK_AFTER`] counts: a source that outruns a
    /// sink for a moment waits on its buffer as back-pressure should, and
    /// that is no stall.
    pub fn held_back_by(&self) -> Option<String> {
        lock(&self.held_back_by)
            .as_ref()
            .filter(|(_, since)| since.elapsed() >= HELD_BACK_AFTER)
            .map(|(id, _)| id.clone())
    }

    /// Why the pipeline is not ready; empty when it is.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.state() {
            PipelineState::Running => {}
            // Another instance runs it: nothing here to be ready for.
            PipelineState::Standby => return problems,
            PipelineState::Paused => problems.push("paused through the API".to_string()),
            state => problems.push(format!("pipeline is {}", serde_json::to_string(&state).unwrap_or_default())),
        }
        if let Some(sink) = self.held_back_by() {
            problems.push(format!("held back by sink {sink}: its buffer is full and it is required"));
        }
        problems.extend(lock(&self.problems).iter().cloned());
        problems
    }
}
