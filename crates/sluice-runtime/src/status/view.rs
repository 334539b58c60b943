//! The plain copies of a pipeline's figures that readers take: what the
//! API serves as JSON and the dashboard draws.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::{Detachment, ErrorNote, PipelineState, PipelineStatus, SinkState, SinkStatus, lock, text};

impl PipelineStatus {
    pub fn view(&self) -> PipelineView {
        let head_events = self.events_cut.load(Ordering::Relaxed);
        let log = self.source.log();
        let sinks: Vec<SinkView> = self
            .sinks
            .iter()
            .map(|s| s.view(head_events, self.bytes_cut.load(Ordering::Relaxed), self.source.lag_seconds()))
            .collect();
        let stalled = self.source.is_stalled() && !self.is_paused();
        let held_back_by = self.held_back_by();
        PipelineView {
            name: self.name.clone(),
            state: self.state(),
            health: health(self.state(), stalled || held_back_by.is_some(), &sinks),
            failure: lock(&self.failure).clone(),
            owner: self.owner(),
            problems: self.problems(),
            source: SourceView {
                id: self.source_id.clone(),
                kind: self.source_kind.clone(),
                position: text(&self.source.position),
                head: log.as_ref().and_then(|l| l.head()),
                behind_bytes: log.as_ref().and_then(|l| l.behind_bytes()),
                retained_wal_bytes: log.as_ref().and_then(|l| l.retained_bytes()),
                lag_seconds: self.source.lag_seconds(),
                stalled,
                events: self.source.events.load(Ordering::Relaxed),
                bytes: self.source.bytes.load(Ordering::Relaxed),
                restarts: self.source.restarts.load(Ordering::Relaxed),
                last_error: lock(&self.source.last_error).clone(),
            },
            head_events,
            held_back_by,
            transforms: steps(&self.transforms()),
            snapshots: sluice_core::snapshot::progress::running()
                .into_iter()
                .filter(|t| *t.source == *self.source_id)
                .collect(),
            replay_from: text(&self.replay_from),
            replay_from_events: self.replay_from_events.load(Ordering::Relaxed),
            sinks,
        }
    }
}

/// One word for the pipeline as a whole, for a badge: its state, unless
/// it runs while stopped in effect (`stalled`) or with a sink not live.
fn health(state: PipelineState, stalled: bool, sinks: &[SinkView]) -> Health {
    match state {
        PipelineState::Starting => Health::Starting,
        PipelineState::Paused => Health::Paused,
        PipelineState::Stopped => Health::Stopped,
        PipelineState::Failed => Health::Failed,
        PipelineState::Standby => Health::Standby,
        PipelineState::Running if stalled => Health::Stalled,
        PipelineState::Running
            if sinks.iter().any(|s| !matches!(s.state, SinkState::Running | SinkState::Starting)) =>
        {
            Health::Degraded
        }
        PipelineState::Running => Health::Running,
    }
}

/// What the dashboard's badge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Starting,
    Running,
    /// A sink is retrying, detached, catching up or failed; the others go on.
    Degraded,
    /// The source reads nothing though the server has more, or a required
    /// sink's full buffer holds everything back.
    Stalled,
    Paused,
    Stopped,
    Failed,
    /// Another instance of the fleet runs it.
    Standby,
}

impl SinkStatus {
    fn view(&self, head_events: u64, head_bytes: u64, source_lag: f64) -> SinkView {
        let durable_events = self.durable_events.load(Ordering::Relaxed);
        SinkView {
            id: self.id.clone(),
            guarantee: self.guarantee.to_string(),
            exactly_once: self.guarantee.is_exactly_once(),
            required: self.required,
            state: self.state(),
            checkpoint: text(&self.checkpoint),
            durable: text(&self.durable),
            checkpoint_events: self.checkpoint_events.load(Ordering::Relaxed),
            durable_events,
            lag_events: head_events.saturating_sub(durable_events),
            lag_bytes: head_bytes.saturating_sub(self.durable_bytes.load(Ordering::Relaxed)),
            // The oldest change the sink lacks is either one Sluice read
            // (its own lag) or one Sluice has not read yet (the source's).
            lag_seconds: self.lag_seconds().max(source_lag),
            events: self.events.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            replay_skipped: self.replay_skipped.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failing_for_seconds: self.failing_for_secs(),
            last_error: lock(&self.last_error).clone(),
            detached: self.detachment(),
            buffer: BufferView {
                batches: self.buffer.batches.load(Ordering::Relaxed),
                memory_bytes: self.buffer.memory_bytes.load(Ordering::Relaxed),
                disk_bytes: self.buffer.disk_bytes.load(Ordering::Relaxed),
                overflowed: self.buffer.overflowed.load(Ordering::Relaxed),
            },
            transforms: steps(&self.transforms()),
        }
    }
}

/// Each step of a transform list with what it did so far.
fn steps(transforms: &sluice_transform::Transforms) -> Vec<TransformView> {
    transforms
        .counts()
        .enumerate()
        .map(|(index, (kind, counts))| TransformView {
            step: index + 1,
            kind,
            events_in: counts.events_in.load(Ordering::Relaxed),
            events_out: counts.events_out.load(Ordering::Relaxed),
            dropped: counts.dropped.load(Ordering::Relaxed),
            errored: counts.errored.load(Ordering::Relaxed),
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct PipelineView {
    pub name: String,
    pub state: PipelineState,
    pub health: Health,
    pub failure: Option<ErrorNote>,
    /// In a fleet (`sluice run --fleet`): the instance that owns the
    /// pipeline, its lease's epoch, and since when.
    pub owner: Option<super::Ownership>,
    /// Why the pipeline is not ready; empty when it is.
    pub problems: Vec<String>,
    pub source: SourceView,
    /// Events cut by this run: the head of the stream as the sinks see it.
    pub head_events: u64,
    /// The required sink whose full buffer the source has waited on for
    /// [`HELD_BACK_AFTER`](super::HELD_BACK_AFTER), if any.
    pub held_back_by: Option<String>,
    /// Where the source would start again after a crash (MIN of the checkpoints).
    pub replay_from: Option<String>,
    pub replay_from_events: u64,
    /// Snapshots running now, initial or incremental.
    pub snapshots: Vec<sluice_core::snapshot::progress::TableProgress>,
    /// The pipeline's transforms, in order, with what each did so far.
    pub transforms: Vec<TransformView>,
    pub sinks: Vec<SinkView>,
}

/// One step of the pipeline's or a sink's transforms.
#[derive(Debug, Clone, Serialize)]
pub struct TransformView {
    /// From 1, as the config lists them.
    pub step: usize,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub events_in: u64,
    pub events_out: u64,
    pub dropped: u64,
    pub errored: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceView {
    pub id: String,
    pub kind: String,
    /// The latest position read.
    pub position: Option<String>,
    /// The server's log head.
    pub head: Option<String>,
    /// Bytes of log between the position read and the head.
    pub behind_bytes: Option<u64>,
    /// WAL the server keeps for this source's replication slot.
    pub retained_wal_bytes: Option<u64>,
    pub lag_seconds: f64,
    /// Nothing read for a few seconds while the server has more.
    pub stalled: bool,
    pub events: u64,
    pub bytes: u64,
    pub restarts: u64,
    pub last_error: Option<ErrorNote>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SinkView {
    pub id: String,
    pub guarantee: String,
    pub exactly_once: bool,
    pub required: bool,
    pub state: SinkState,
    pub checkpoint: Option<String>,
    pub durable: Option<String>,
    pub checkpoint_events: u64,
    pub durable_events: u64,
    pub lag_events: u64,
    pub lag_bytes: u64,
    pub lag_seconds: f64,
    pub events: u64,
    pub batches: u64,
    pub bytes: u64,
    pub errors: u64,
    pub retries: u64,
    pub replay_skipped: u64,
    pub replayed: u64,
    pub dead_lettered: u64,
    /// Events an at-most-once sink dropped.
    pub dropped: u64,
    pub failing_for_seconds: f64,
    pub last_error: Option<ErrorNote>,
    pub detached: Option<Detachment>,
    pub buffer: BufferView,
    /// The sink's own transforms, in order, with what each did so far.
    pub transforms: Vec<TransformView>,
}

/// What a sink's buffer holds.
#[derive(Debug, Clone, Serialize)]
pub struct BufferView {
    pub batches: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Batches were dropped: the sink catches up by a re-read of the source.
    pub overflowed: bool,
}
