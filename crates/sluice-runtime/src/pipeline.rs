//! One pipeline: a source, its sinks, and the tasks that connect them.
//!
//! ```text
//! intake ──chunks──► dispatcher (batcher) ──Arc<Batch>──► buffer ─► writer per sink ──Report──► checkpointer
//!   ▲                                          (memory, then disk, per sink)                        │
//!   └──────────── AckWatermark: MIN of every stored checkpoint ◄──────────────────────────┘
//! ```
//!
//! Shutdown runs in order: the intake stops, the dispatcher sends the whole
//! transactions it holds and closes the writers' queues, each writer
//! drains its queue and flushes its sink, and the checkpointer makes the
//! final commit once the last writer is done. A failing task triggers the
//! same shutdown, so the others still end cleanly.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sluice_config::{BatchConfig, BufferLimits, CommitPolicy, DeadLetterConfig, PolicyMode, SloConfig};
use sluice_core::{
    AckWatermark, CheckpointKey, CheckpointStore, DeadLetterQueue, Position, Sink, SinkError, Source, SourceError,
    StoreError, or_start,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, error, info, info_span, warn};

use crate::batch::Batcher;
use crate::buffer::{Inflight, Rereads, SinkBuffer};
use crate::checkpointer::{Checkpointer, lowest};
use crate::control::PipelineHandle;
use crate::dispatch::Dispatcher;
use crate::error::PipelineError;
use crate::intake::Intake;
use crate::monitor::Monitor;
use crate::shutdown::{Shutdown, TriggerOnDrop};
use crate::status::{Detachment, PipelineState, PipelineStatus, SinkInfo, SinkState, lock};
use crate::writer::{Report, SinkMetrics, SinkWriter};

/// Chunks of source events queued between the intake and the dispatcher.
const CHUNK_QUEUE: usize = 4;

/// A sink, whether the commit policy counts it as required, and its
/// buffer's limits.
pub struct SinkSpec {
    pub sink: Box<dyn Sink>,
    pub required: bool,
    pub buffer: BufferLimits,
    /// A batch the sink fails to write is dropped and counted, not
    /// written again (`delivery: at_most_once`).
    pub at_most_once: bool,
    /// Run in the sink's writer on each batch, after the pipeline's.
    pub transforms: Arc<sluice_transform::Transforms>,
}

/// The settings of one pipeline, as validated config gives them.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    pub name: String,
    pub batch: BatchConfig,
    pub commit_policy: CommitPolicy,
    pub sink_batch_deadline: Duration,
    /// How often a detached optional sink is probed.
    pub reattach_probe: Duration,
    /// How long a stop an operator asked for waits for the sinks to drain.
    pub shutdown_grace: Duration,
    /// Where batches of transactions larger than `batch.max_bytes` go;
    /// cleared when the pipeline starts.
    pub spill_dir: PathBuf,
    pub dead_letter: DeadLetterConfig,
    pub slo: SloConfig,
    /// Where sinks detached for pinning the source's log are marked; a
    /// marked sink stays detached until `sluice checkpoints reset` clears it.
    pub detach_marks: sluice_core::StateDir,
    /// Run on every batch as it is cut, before any sink gets it.
    pub transforms: Arc<sluice_transform::Transforms>,
}

/// Where each sink's checkpoint stands when a run ends.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub checkpoints: Vec<(CheckpointKey, Option<Position>)>,
    /// Sinks whose buffer overflowed and that need the source read again
    /// from their checkpoint: the caller runs the pipeline again, unless
    /// it is shutting down (then the next start does it).
    pub rereads: Vec<String>,
}

impl std::fmt::Display for RunReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, (key, position)) in self.checkpoints.iter().enumerate() {
            let separator = if index == 0 { "" } else { ", " };
            write!(f, "{separator}{key}={}", or_start(position.as_ref()))?;
        }
        Ok(())
    }
}

pub struct Pipeline {
    pub settings: PipelineSettings,
    pub source: Box<dyn Source>,
    pub sinks: Vec<SinkSpec>,
    pub store: Arc<dyn CheckpointStore>,
    pub dead_letters: Arc<dyn DeadLetterQueue>,
    pub handle: PipelineHandle,
}

/// The status and controls of a pipeline of these parts.
pub fn handle_of(name: &str, source: &dyn Source, source_kind: &str, sinks: &[SinkSpec]) -> PipelineHandle {
    let handle = PipelineHandle::new(name, source.id(), source_kind, sink_infos(sinks));
    // A run again after a re-read keeps this handle, and with it these
    // transforms and their counts.
    for (status, spec) in handle.status.sinks.iter().zip(sinks) {
        status.set_transforms(spec.transforms.clone());
    }
    handle
}

fn sink_infos(sinks: &[SinkSpec]) -> Vec<SinkInfo> {
    sinks
        .iter()
        .map(|s| SinkInfo {
            id: s.sink.id().to_string(),
            guarantee: if s.at_most_once { sluice_core::Guarantee::AtMostOnce } else { s.sink.guarantee() },
            required: s.required,
        })
        .collect()
}

/// The mark's name, in the pipeline's detach marks, of a sink detached
/// for pinning the source's log.
pub fn detach_mark(sink_id: &str) -> String {
    format!("{sink_id}.json")
}

/// What the pipeline learned from the store and the detach marks before
/// any task runs.
struct Prepared {
    keys: Vec<CheckpointKey>,
    stored: Vec<Option<Position>>,
    /// The source's log generation, as the store counts resets.
    generation: u32,
    /// Sinks detached for pinning the log: they get no writer and do not
    /// hold the source back.
    released: Vec<bool>,
    /// Where the source starts: the lowest checkpoint of the sinks that
    /// hold it back.
    from: Option<Position>,
    ack: AckWatermark,
}

/// The tasks of a running pipeline, joined in the order shutdown runs.
struct Running {
    pipeline: String,
    source_id: String,
    keys: Vec<CheckpointKey>,
    relay: JoinHandle<()>,
    monitor: JoinHandle<()>,
    intake: JoinHandle<Result<(), SourceError>>,
    dispatcher: JoinHandle<Result<(), crate::dispatch::DispatchError>>,
    writers: Vec<(String, JoinHandle<Result<(), SinkError>>)>,
    checkpointer: JoinHandle<Result<Vec<Option<Position>>, StoreError>>,
    rereads: Arc<Rereads>,
    /// When an operator asked the pipeline to stop, if one did.
    stop_asked: Arc<OnceLock<tokio::time::Instant>>,
    grace: Duration,
}

impl Pipeline {
    /// Runs until the source ends and every sink is flushed, or until
    /// `shutdown`; either way the final checkpoints are committed.
    pub async fn run(self, shutdown: Shutdown) -> Result<RunReport, PipelineError> {
        let span = info_span!("pipeline", pipeline = %self.settings.name);
        let handle = self.handle.clone();
        let result = self.run_inner(shutdown).instrument(span).await;
        handle.control.disconnect_all();
        for sink in &handle.status.sinks {
            if sink.state() == SinkState::Running {
                sink.set_state(SinkState::Closed);
            }
        }
        match &result {
            Ok(_) => handle.status.set_state(PipelineState::Stopped),
            Err(err) => handle.status.fail(err.to_string()),
        }
        result
    }

    async fn run_inner(self, external: Shutdown) -> Result<RunReport, PipelineError> {
        let sinks = sink_infos(&self.sinks);
        let parts = (self.source.id().to_string(), self.store.clone(), self.handle.status.clone());
        let prepared = prepare(&self.settings, &sinks, parts).await?;
        let running = self.spawn(prepared, external);
        running.join().await
    }

    /// Starts the pipeline's tasks: a writer per attached sink, the
    /// checkpointer, the intake, the dispatcher and the SLO monitor.
    fn spawn(self, prepared: Prepared, external: Shutdown) -> Running {
        let Pipeline { settings, source, sinks, store, dead_letters, handle } = self;
        let Prepared { keys, stored, generation, released, from, ack } = prepared;
        let source_id = source.id().to_string();
        let shutdown = Shutdown::new();
        let stop_asked = Arc::new(OnceLock::new());
        let relay = {
            let (external, shutdown, asked) = (external.clone(), shutdown.clone(), stop_asked.clone());
            tokio::spawn(async move {
                external.wait().await;
                let _ = asked.set(tokio::time::Instant::now());
                shutdown.trigger();
            })
        };
        let (report_tx, report_rx) = mpsc::channel(64 * sinks.len().max(1));
        let required: Vec<bool> = sinks.iter().map(|s| s.required).collect();
        let parts = WriterParts {
            settings: &settings,
            handle: &handle,
            shutdown: &shutdown,
            reports: report_tx,
            source_id: &source_id,
            dead_letters,
            generation,
            rereads: Arc::new(Rereads::default()),
        };
        let rereads = parts.rereads.clone();
        let (buffers, writers) = parts.spawn_all(sinks, &stored, &released);
        let checkpointer = Checkpointer {
            durable_events: vec![0; keys.len()],
            released,
            status: handle.status.clone(),
            keys: keys.clone(),
            required,
            mode: settings.commit_policy.mode,
            quorum: settings.commit_policy.quorum,
            durable: stored.clone(),
            stored,
            store,
            ack: ack.clone(),
            reports: report_rx,
        };
        let checkpointer = spawn_guarded(&shutdown, checkpointer.run().instrument(info_span!("checkpointer")));
        let (chunk_tx, chunk_rx) = mpsc::channel(CHUNK_QUEUE);
        let intake = Intake {
            source,
            from,
            ack,
            chunks: chunk_tx,
            shutdown: shutdown.clone(),
            status: handle.status.clone(),
            paused: handle.control.paused(),
            generation,
        };
        let intake = spawn_guarded(&shutdown, intake.run().instrument(info_span!("source", source = %source_id)));
        let dispatcher = Dispatcher {
            batcher: Batcher::new(settings.batch.clone(), settings.spill_dir.clone())
                .with_transforms(settings.transforms.clone()),
            chunks: chunk_rx,
            buffers,
            shutdown: shutdown.clone(),
            status: handle.status.clone(),
        };
        let dispatcher = spawn_guarded(&shutdown, dispatcher.run().instrument(info_span!("dispatcher")));
        handle.status.set_state(PipelineState::Running);
        let monitor = tokio::spawn(Monitor::new(handle, settings.slo.clone()).run());
        Running {
            pipeline: settings.name,
            source_id,
            keys,
            relay,
            monitor,
            intake,
            dispatcher,
            writers,
            checkpointer,
            rereads,
            stop_asked,
            grace: settings.shutdown_grace,
        }
    }
}

/// Loads the checkpoints and the detach marks, and says where the source
/// starts. It holds no part of the [`Pipeline`] across an await: a source
/// or a sink is not `Sync`.
async fn prepare(
    settings: &PipelineSettings,
    sinks: &[SinkInfo],
    (source_id, store, status): (String, Arc<dyn CheckpointStore>, Arc<PipelineStatus>),
) -> Result<Prepared, PipelineError> {
    let pipeline = settings.name.clone();
    status.begin_run();
    let keys: Vec<CheckpointKey> = sinks.iter().map(|s| CheckpointKey::new(&source_id, &s.id)).collect();
    // Spill files left by a crash hold transactions that were never
    // checkpointed; the source reads them again.
    match std::fs::remove_dir_all(&settings.spill_dir) {
        Ok(()) => info!(dir = %settings.spill_dir.display(), "removed spill files left by an earlier run"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(dir = %settings.spill_dir.display(), error = %e, "cannot remove old spill files"),
    }
    let (load_store, load_keys) = (store.clone(), keys.clone());
    let (stored, generation) = tokio::task::spawn_blocking(move || {
        Ok::<_, StoreError>((load_store.load(&load_keys)?, load_store.generation(&source_id)?))
    })
    .await
    .map_err(|e| task_error(&pipeline, "checkpoint load", e))?
    .map_err(|error| PipelineError::Store { pipeline: pipeline.clone(), error })?;
    if generation > 0 {
        info!(generation, "the source's log was reset {generation} time(s); its positions carry the generation");
    }
    let released = released_by_marks(settings, sinks, &status)
        .map_err(|MarkedRequired { sink, mark }| PipelineError::Detached { pipeline: pipeline.clone(), sink, mark })?;
    let holding: Vec<Option<Position>> =
        stored.iter().zip(&released).filter(|(_, r)| !**r).map(|(s, _)| s.clone()).collect();
    for (sink, position) in status.sinks.iter().zip(&stored) {
        *lock(&sink.checkpoint) = position.clone();
        *lock(&sink.durable) = position.clone();
    }
    // The source resumes from the lowest checkpoint; sinks ahead of it
    // filter what they already have.
    let from = lowest(&holding);
    *lock(&status.replay_from) = from.clone();
    let ack = AckWatermark::default();
    if let Some(from) = &from {
        ack.advance(from);
    }
    ack.set_highest_at_start(stored.iter().flatten().max().cloned());
    info!(from = %or_start(from.as_ref()), sinks = sinks.len(), "pipeline starting");
    Ok(Prepared { keys, stored, generation, released, from, ack })
}

/// A required sink that carries a detach mark.
struct MarkedRequired {
    sink: String,
    mark: String,
}

/// Sinks a detach mark keeps detached: the log from their checkpoint on
/// is gone, so they must not hold the source back. A required sink with a
/// mark stops the pipeline, since it cannot be left behind.
fn released_by_marks(
    settings: &PipelineSettings,
    sinks: &[SinkInfo],
    status: &PipelineStatus,
) -> Result<Vec<bool>, MarkedRequired> {
    let mut released = vec![false; sinks.len()];
    for (index, spec) in sinks.iter().enumerate() {
        let name = detach_mark(&spec.id);
        let mark = settings.detach_marks.locate(&name);
        // An unreadable mark is none: the sink then stays attached, as it
        // was before it was marked.
        let Some(text) = settings.detach_marks.read(&name).ok().flatten() else { continue };
        let text = String::from_utf8_lossy(&text).into_owned();
        if spec.required {
            return Err(MarkedRequired { sink: spec.id.clone(), mark });
        }
        let reason = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["reason"].as_str().map(str::to_string))
            .unwrap_or(text);
        error!(sink = %spec.id, %reason, %mark,
            "sink stays DETACHED: it was cut off for pinning the source's log and needs a resync; \
             `sluice checkpoints reset --sink` clears the mark");
        status.sinks[index].detach(Detachment { reason, needs_resync: true });
        released[index] = true;
    }
    Ok(released)
}

/// What every sink writer of one pipeline shares.
struct WriterParts<'a> {
    settings: &'a PipelineSettings,
    handle: &'a PipelineHandle,
    shutdown: &'a Shutdown,
    reports: mpsc::Sender<Report>,
    source_id: &'a str,
    dead_letters: Arc<dyn DeadLetterQueue>,
    generation: u32,
    rereads: Arc<Rereads>,
}

type Writers = (Vec<Arc<SinkBuffer>>, Vec<(String, JoinHandle<Result<(), SinkError>>)>);

impl WriterParts<'_> {
    /// Spawns a writer for every sink not released; returns their buffers
    /// and their tasks.
    fn spawn_all(self, sinks: Vec<SinkSpec>, stored: &[Option<Position>], released: &[bool]) -> Writers {
        let settings = self.settings;
        let may_detach_optional = settings.commit_policy.mode != PolicyMode::All;
        let (mut queues, mut tasks) = (Vec::new(), Vec::new());
        for (index, spec) in sinks.into_iter().enumerate() {
            if released[index] {
                continue;
            }
            let may_detach = !spec.required && may_detach_optional;
            let buffer = Arc::new(SinkBuffer::new(
                spec.buffer,
                Inflight {
                    batches: settings.batch.max_inflight,
                    events: settings.batch.max_inflight.saturating_mul(settings.batch.max_events),
                },
                may_detach,
                settings.spill_dir.join(format!("buffer-{index}")),
                (self.handle.status.clone(), index),
            ));
            queues.push(buffer.clone());
            let sink_id = spec.sink.id().to_string();
            let merges = spec.sink.merges_writes();
            let writer = SinkWriter {
                merges,
                index,
                sink_id: sink_id.clone(),
                sink: spec.sink,
                may_detach,
                at_most_once: spec.at_most_once,
                deadline: settings.sink_batch_deadline,
                stored: stored[index].clone(),
                batches: buffer,
                probe_every: settings.reattach_probe,
                rereads: self.rereads.clone(),
                trying_since: None,
                detached: false,
                reports: self.reports.clone(),
                shutdown: self.shutdown.clone(),
                source_id: self.source_id.to_string(),
                dead_letters: self.dead_letters.clone(),
                dead_letter: settings.dead_letter.clone(),
                retain_dir: settings.spill_dir.join(format!("retained-{index}")),
                status: self.handle.status.clone(),
                control: self.handle.control.connect(index),
                detach_marks: settings.detach_marks.clone(),
                detach_mark: detach_mark(&sink_id),
                metrics: SinkMetrics::new(&settings.name, &sink_id),
                generation: self.generation,
                transforms: self.handle.status.sinks[index].transforms(),
            };
            let span = info_span!("sink", sink = %sink_id);
            tasks.push((sink_id, spawn_guarded(self.shutdown, writer.run().instrument(span))));
        }
        (queues, tasks)
    }
}

impl Running {
    /// Waits for every task in shutdown order and keeps the first error.
    async fn join(self) -> Result<RunReport, PipelineError> {
        let Running {
            pipeline,
            source_id,
            keys,
            relay,
            monitor,
            intake,
            dispatcher,
            writers,
            checkpointer,
            rereads,
            stop_asked,
            grace,
        } = self;
        let mut first_error = None;
        match intake.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error = Some(PipelineError::Source { pipeline: pipeline.clone(), source_id, error })
            }
            Err(e) => first_error = Some(task_error(&pipeline, "source", e)),
        }
        match dispatcher.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(PipelineError::Dispatch { pipeline: pipeline.clone(), error });
            }
            Err(e) => {
                first_error.get_or_insert(task_error(&pipeline, "dispatcher", e));
            }
        }
        for (sink, ended) in crate::drain::join_writers(writers, &stop_asked, grace).await {
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    first_error.get_or_insert(PipelineError::Sink { pipeline: pipeline.clone(), sink, error });
                }
                Err(e) => {
                    first_error.get_or_insert(task_error(&pipeline, &format!("sink writer {sink}"), e));
                }
            }
        }
        let stored = match checkpointer.await {
            Ok(Ok(stored)) => Some(stored),
            Ok(Err(error)) => {
                first_error.get_or_insert(PipelineError::Store { pipeline: pipeline.clone(), error });
                None
            }
            Err(e) => {
                first_error.get_or_insert(task_error(&pipeline, "checkpointer", e));
                None
            }
        };
        relay.abort();
        monitor.abort();
        if let Some(error) = first_error {
            return Err(error);
        }
        let report = RunReport {
            checkpoints: keys.into_iter().zip(stored.unwrap_or_default()).collect(),
            rereads: rereads.take(),
        };
        info!(checkpoints = %report, "pipeline stopped");
        Ok(report)
    }
}

/// Spawns a task that triggers `shutdown` if it fails or panics.
fn spawn_guarded<T, E>(
    shutdown: &Shutdown,
    task: impl Future<Output = Result<T, E>> + Send + 'static,
) -> JoinHandle<Result<T, E>>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let guard = TriggerOnDrop(Some(shutdown.clone()));
    tokio::spawn(async move {
        let result = task.await;
        if result.is_ok() {
            guard.disarm();
        }
        result
    })
}

fn task_error(pipeline: &str, task: &str, error: tokio::task::JoinError) -> PipelineError {
    PipelineError::Task { pipeline: pipeline.to_string(), task: task.to_string(), detail: error.to_string() }
}
