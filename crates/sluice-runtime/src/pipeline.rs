//! One pipeline: a source, its sinks, and the tasks that connect them.
//!
//! ```text
//! intake ──chunks──► dispatcher (batcher) ──Arc<Batch>──► writer per sink ──Report──► checkpointer
//!   ▲                                          (queue: max_inflight)                      │
//!   └──────────── AckWatermark: MIN of every stored checkpoint ◄──────────────────────────┘
//! ```
//!
//! Shutdown runs in order: the intake stops, the dispatcher sends the whole
//! transactions it holds and closes the writers' queues, each writer
//! drains its queue and flushes its sink, and the checkpointer makes the
//! final commit once the last writer is done. A failing task triggers the
//! same shutdown, so the others still end cleanly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{BatchConfig, CommitPolicy, DeadLetterConfig, PolicyMode, SloConfig};
use sluice_core::{AckWatermark, CheckpointKey, CheckpointStore, DeadLetterQueue, Position, Sink, Source, or_start};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, error, info, info_span, warn};

use crate::batch::Batcher;
use crate::checkpointer::{Checkpointer, lowest};
use crate::dispatch::Dispatcher;
use crate::error::PipelineError;
use crate::intake::Intake;
use crate::monitor::Monitor;
use crate::shutdown::{Shutdown, TriggerOnDrop};
use crate::status::{Detachment, PipelineState, PipelineStatus, SinkInfo, SinkState};
use crate::writer::{SinkMetrics, SinkWriter};

/// Chunks of source events queued between the intake and the dispatcher.
const CHUNK_QUEUE: usize = 4;

/// A sink and whether the commit policy counts it as required.
pub struct SinkSpec {
    pub sink: Box<dyn Sink>,
    pub required: bool,
}

/// The settings of one pipeline, as validated config gives them.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    pub name: String,
    pub batch: BatchConfig,
    pub commit_policy: CommitPolicy,
    pub sink_batch_deadline: Duration,
    /// Where batches of transactions larger than `batch.max_bytes` go;
    /// cleared when the pipeline starts.
    pub spill_dir: PathBuf,
    pub dead_letter: DeadLetterConfig,
    pub slo: SloConfig,
    /// Where sinks detached for pinning the source's log are marked; a
    /// marked sink stays detached until `sluice checkpoints reset` clears it.
    pub detach_dir: PathBuf,
}

/// Where each sink's checkpoint stands when a run ends.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub checkpoints: Vec<(CheckpointKey, Option<Position>)>,
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
    pub status: Arc<PipelineStatus>,
}

/// The status a pipeline of these parts reports.
pub fn status_of(name: &str, source: &dyn Source, source_kind: &str, sinks: &[SinkSpec]) -> Arc<PipelineStatus> {
    let sinks = sinks
        .iter()
        .map(|s| SinkInfo { id: s.sink.id().to_string(), guarantee: s.sink.guarantee(), required: s.required })
        .collect();
    PipelineStatus::new(name, source.id(), source_kind, sinks)
}

/// The mark file of a sink detached for pinning the source's log.
pub fn detach_mark(detach_dir: &std::path::Path, sink_id: &str) -> PathBuf {
    detach_dir.join(format!("{sink_id}.json"))
}

impl Pipeline {
    /// Runs until the source ends and every sink is flushed, or until
    /// `shutdown`; either way the final checkpoints are committed.
    pub async fn run(self, shutdown: Shutdown) -> Result<RunReport, PipelineError> {
        let name = self.settings.name.clone();
        let span = info_span!("pipeline", pipeline = %name);
        let status = self.status.clone();
        let result = self.run_inner(shutdown).instrument(span).await;
        match &result {
            Ok(_) => status.set_state(PipelineState::Stopped),
            Err(err) => status.fail(err.to_string()),
        }
        result
    }

    async fn run_inner(self, external: Shutdown) -> Result<RunReport, PipelineError> {
        let Pipeline { settings, source, sinks, store, dead_letters, status } = self;
        let pipeline = settings.name.clone();
        let source_id = source.id().to_string();
        let keys: Vec<CheckpointKey> = sinks.iter().map(|s| CheckpointKey::new(&source_id, s.sink.id())).collect();
        // Spill files left by a crash hold transactions that were never
        // checkpointed; the source reads them again.
        match std::fs::remove_dir_all(&settings.spill_dir) {
            Ok(()) => info!(dir = %settings.spill_dir.display(), "removed spill files left by an earlier run"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(dir = %settings.spill_dir.display(), error = %e, "cannot remove old spill files"),
        }
        let load_store = store.clone();
        let load_keys = keys.clone();
        let load_source = source_id.clone();
        let (stored, generation) = tokio::task::spawn_blocking(move || {
            Ok::<_, sluice_core::StoreError>((load_store.load(&load_keys)?, load_store.generation(&load_source)?))
        })
        .await
        .map_err(|e| task_error(&pipeline, "checkpoint load", e))?
        .map_err(|error| PipelineError::Store { pipeline: pipeline.clone(), error })?;
        if generation > 0 {
            info!(generation, "the source's log was reset {generation} time(s); its positions carry the generation");
        }

        // A sink detached for pinning the log stays detached: the log from
        // its checkpoint on is gone, so it must not hold the source back.
        let mut released = vec![false; sinks.len()];
        for (index, spec) in sinks.iter().enumerate() {
            let mark = detach_mark(&settings.detach_dir, spec.sink.id());
            let Ok(text) = std::fs::read_to_string(&mark) else { continue };
            if spec.required {
                return Err(PipelineError::Detached {
                    pipeline: pipeline.clone(),
                    sink: spec.sink.id().to_string(),
                    mark: mark.display().to_string(),
                });
            }
            let reason = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["reason"].as_str().map(str::to_string))
                .unwrap_or(text);
            error!(sink = %spec.sink.id(), %reason, mark = %mark.display(),
                "sink stays DETACHED: it was cut off for pinning the source's log and needs a resync; \
                 `sluice checkpoints reset --sink` clears the mark");
            status.sinks[index].detach(Detachment { reason, needs_resync: true });
            released[index] = true;
        }
        let holding: Vec<Option<Position>> =
            stored.iter().zip(&released).filter(|(_, r)| !**r).map(|(s, _)| s.clone()).collect();
        for (sink, position) in status.sinks.iter().zip(&stored) {
            *sink.checkpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = position.clone();
            *sink.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = position.clone();
        }

        // The source resumes from the lowest checkpoint; sinks ahead of it
        // filter what they already have.
        let from = lowest(&holding);
        *status.replay_from.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = from.clone();
        let ack = AckWatermark::default();
        if let Some(from) = &from {
            ack.advance(from);
        }
        ack.set_highest_at_start(stored.iter().flatten().max().cloned());
        info!(from = %or_start(from.as_ref()), sinks = sinks.len(), "pipeline starting");

        let shutdown = Shutdown::new();
        let relay = {
            let (external, shutdown) = (external.clone(), shutdown.clone());
            tokio::spawn(async move {
                external.wait().await;
                shutdown.trigger();
            })
        };

        let (report_tx, report_rx) = mpsc::channel(64 * sinks.len().max(1));
        let may_detach_optional = settings.commit_policy.mode != PolicyMode::All;
        let mut writer_txs = Vec::new();
        let mut writers: Vec<(String, JoinHandle<_>)> = Vec::new();
        let required: Vec<bool> = sinks.iter().map(|s| s.required).collect();
        for (index, spec) in sinks.into_iter().enumerate() {
            if released[index] {
                continue;
            }
            let (tx, rx) = mpsc::channel(settings.batch.max_inflight);
            writer_txs.push(tx);
            let sink_id = spec.sink.id().to_string();
            let (control_tx, control_rx) = mpsc::channel(4);
            status.sinks[index].set_control(Some(control_tx));
            let writer = SinkWriter {
                index,
                sink_id: sink_id.clone(),
                sink: spec.sink,
                may_detach: !spec.required && may_detach_optional,
                deadline: settings.sink_batch_deadline,
                stored: stored[index].clone(),
                batches: rx,
                reports: report_tx.clone(),
                shutdown: shutdown.clone(),
                source_id: source_id.clone(),
                dead_letters: dead_letters.clone(),
                dead_letter: settings.dead_letter.clone(),
                retain_dir: settings.spill_dir.join(format!("retained-{index}")),
                status: status.clone(),
                control: control_rx,
                detach_mark: detach_mark(&settings.detach_dir, &sink_id),
                metrics: SinkMetrics::new(&pipeline, &sink_id),
                generation,
            };
            let span = info_span!("sink", sink = %sink_id);
            writers.push((sink_id, spawn_guarded(&shutdown, writer.run().instrument(span))));
        }
        drop(report_tx);

        let checkpointer = Checkpointer {
            durable_events: vec![0; keys.len()],
            released,
            status: status.clone(),
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
            status: status.clone(),
            generation,
        };
        let intake = spawn_guarded(&shutdown, intake.run().instrument(info_span!("source", source = %source_id)));
        let dispatcher = Dispatcher {
            batcher: Batcher::new(settings.batch.clone(), settings.spill_dir.clone()),
            chunks: chunk_rx,
            writers: writer_txs,
            shutdown: shutdown.clone(),
            status: status.clone(),
        };
        let dispatcher = spawn_guarded(&shutdown, dispatcher.run().instrument(info_span!("dispatcher")));

        status.set_state(PipelineState::Running);
        let monitor = tokio::spawn(Monitor::new(status.clone(), settings.slo.clone()).run());

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
                first_error.get_or_insert(PipelineError::Spill { pipeline: pipeline.clone(), error });
            }
            Err(e) => {
                first_error.get_or_insert(task_error(&pipeline, "dispatcher", e));
            }
        }
        for (sink, writer) in writers {
            match writer.await {
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
        for sink in &status.sinks {
            sink.set_control(None);
            if sink.state() == SinkState::Running {
                sink.set_state(SinkState::Closed);
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        let report = RunReport { checkpoints: keys.into_iter().zip(stored.unwrap_or_default()).collect() };
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
