//! The checkpointer: turns durable watermarks into stored checkpoints.
//!
//! ```text
//! writers ──Report──► apply ──► frontier (commit policy) ──► one atomic store commit
//!                                                        └─► ack the source up to MIN(stored)
//! ```
//!
//! Invariants: a stored checkpoint never passes its sink's durable
//! watermark nor the policy frontier, and never moves backward; the source
//! is never acknowledged past the lowest stored checkpoint of all sinks.
//! Reports that queue up while a commit runs are folded into the next one,
//! so a slow disk costs fewer, larger commits, not a backlog.

use std::sync::Arc;

use sluice_config::PolicyMode;
use sluice_core::{AckWatermark, CheckpointKey, CheckpointStore, Position, StoreError};
use tokio::sync::mpsc;
use tracing::{debug, error};

use crate::policy::{SinkState, frontier, proposal};
use crate::status::{PipelineStatus, lock};
use crate::writer::Report;

pub(crate) struct Checkpointer {
    pub keys: Vec<CheckpointKey>,
    pub required: Vec<bool>,
    pub mode: PolicyMode,
    pub quorum: Option<usize>,
    pub durable: Vec<Option<Position>>,
    pub stored: Vec<Option<Position>>,
    pub store: Arc<dyn CheckpointStore>,
    pub ack: AckWatermark,
    pub reports: mpsc::Receiver<Report>,
    /// Sinks that no longer hold the source back (detached for pinning its log).
    pub released: Vec<bool>,
    /// Events of this run's stream up to each sink's durable watermark.
    pub durable_events: Vec<u64>,
    pub status: Arc<PipelineStatus>,
}

impl Checkpointer {
    /// Runs until every writer is gone, then makes the final commit.
    /// Returns the stored checkpoints.
    pub async fn run(mut self) -> Result<Vec<Option<Position>>, StoreError> {
        while let Some(report) = self.reports.recv().await {
            let released = matches!(report, Report::Released { .. });
            self.apply(report);
            if released {
                self.advance_ack();
            }
            while let Ok(report) = self.reports.try_recv() {
                self.apply(report);
            }
            match self.commit().await {
                Ok(()) => {}
                // Both mean a bug, not a bad disk: stop rather than carry on.
                Err(err @ (StoreError::Regression { .. } | StoreError::Interrupted { .. })) => return Err(err),
                // Nothing moved; the next report tries again.
                Err(err) => {
                    error!(error = %err, "checkpoint commit failed; checkpoints stay where they are")
                }
            }
        }
        self.commit().await?;
        Ok(self.stored)
    }

    fn apply(&mut self, report: Report) {
        let (sink, position) = match report {
            Report::Opened { sink, start } => match start {
                Some(start) => (sink, start),
                None => return,
            },
            Report::Durable { sink, position, events } => {
                self.durable_events[sink] = events;
                (sink, position)
            }
            Report::Released { sink } => {
                self.released[sink] = true;
                return;
            }
        };
        let durable = &mut self.durable[sink];
        if durable.as_ref().is_none_or(|d| *d < position) {
            *durable = Some(position);
        }
    }

    async fn commit(&mut self) -> Result<(), StoreError> {
        let states: Vec<SinkState<'_>> = self
            .required
            .iter()
            .zip(&self.durable)
            .map(|(required, durable)| SinkState { required: *required, durable: durable.as_ref() })
            .collect();
        let Some(frontier) = frontier(self.mode, self.quorum, &states) else {
            return Ok(());
        };
        let mut updates = Vec::new();
        for (index, durable) in self.durable.iter().enumerate() {
            let Some(proposed) = proposal(durable.as_ref(), Some(&frontier)) else {
                continue;
            };
            if self.stored[index].as_ref().is_none_or(|stored| *stored < proposed) {
                updates.push((index, proposed));
            }
        }
        if updates.is_empty() {
            return Ok(());
        }
        let batch: Vec<(CheckpointKey, Position)> =
            updates.iter().map(|(index, p)| (self.keys[*index].clone(), p.clone())).collect();
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.commit(&batch))
            .await
            .map_err(|e| StoreError::Interrupted { detail: e.to_string() })??;
        for (index, position) in updates {
            debug!(key = %self.keys[index], %position, "checkpoint stored");
            let events = self
                .durable
                .iter()
                .position(|d| d.as_ref() == Some(&position))
                .map(|holder| self.durable_events[holder]);
            let sink = &self.status.sinks[index];
            if let Some(events) = events {
                sink.checkpoint_events.store(events, std::sync::atomic::Ordering::Relaxed);
            }
            *lock(&sink.checkpoint) = Some(position.clone());
            sink.stored.send_replace(Some(position.clone()));
            self.stored[index] = Some(position);
        }
        self.advance_ack();
        Ok(())
    }

    /// Acknowledges the source up to the lowest checkpoint of the sinks
    /// that hold it back, and shows it as the replay point.
    fn advance_ack(&self) {
        let holding: Vec<Option<Position>> =
            self.stored.iter().zip(&self.released).filter(|(_, r)| !**r).map(|(s, _)| s.clone()).collect();
        let Some(lowest) = lowest(&holding) else { return };
        self.ack.advance(&lowest);
        let events = self
            .stored
            .iter()
            .zip(&self.released)
            .enumerate()
            .filter(|(_, (_, r))| !**r)
            .map(|(i, _)| self.status.sinks[i].checkpoint_events.load(std::sync::atomic::Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        self.status.replay_from_events.store(events, std::sync::atomic::Ordering::Relaxed);
        *lock(&self.status.replay_from) = Some(lowest);
    }
}

/// The lowest position, if every entry has one.
pub(crate) fn lowest(positions: &[Option<Position>]) -> Option<Position> {
    let mut lowest: Option<&Position> = None;
    for position in positions {
        let position = position.as_ref()?;
        lowest = Some(lowest.map_or(position, |l| l.min(position)));
    }
    lowest.cloned()
}
