//! The dispatcher: batches the source's events and pushes every batch into
//! every sink's buffer.
//!
//! A push waits only when a sink that may not be left behind (a required
//! sink) has a full buffer, which holds the source back. That is the only
//! place a fast sink waits for a slow one; an optional sink's full buffer
//! overflows instead (see [`crate::buffer`]).

use std::sync::Arc;

use sluice_core::Event;
use tokio::sync::mpsc;
use tracing::debug;

use crate::batch::{Batch, Batcher, Failed};
use crate::buffer::{CloseOnDrop, SinkBuffer};
use crate::deadline::sleep_until;
use crate::shutdown::Shutdown;
use crate::spill::SpillError;
use crate::status::PipelineStatus;

/// Why the dispatcher stopped the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Spill(#[from] SpillError),
    /// The batch with the event was not sent: no sink moved past it.
    #[error(
        "a transform in the pipeline's list failed on the event at {}: {}; no sink moved past it. Fix the step and \
         restart, or put a step that can fail in each sink's own transforms, where a failed event goes to the dead \
         letter queue and the rest flows on",
        .0.position,
        .0.error
    )]
    Transform(Failed),
}

pub(crate) struct Dispatcher {
    pub batcher: Batcher,
    pub chunks: mpsc::Receiver<Vec<Event>>,
    pub buffers: Vec<Arc<SinkBuffer>>,
    pub shutdown: Shutdown,
    pub status: Arc<PipelineStatus>,
}

impl Dispatcher {
    pub async fn run(mut self) -> Result<(), DispatchError> {
        let _close = CloseOnDrop(self.buffers.clone());
        loop {
            let deadline = self.batcher.deadline();
            tokio::select! {
                biased;
                _ = self.shutdown.wait() => break,
                chunk = self.chunks.recv() => {
                    let Some(mut events) = chunk else { break };
                    for event in events.drain(..) {
                        let batch = self.batcher.push(event)?;
                        self.check()?;
                        if let Some(batch) = batch {
                            self.send(batch).await?;
                        }
                    }
                    sluice_core::event_vecs::give(events);
                }
                _ = sleep_until(deadline) => {
                    let batch = self.batcher.on_deadline();
                    self.check()?;
                    if let Some(batch) = batch {
                        self.send(batch).await?;
                    }
                }
            }
        }
        // Stop intake, then drain: whole transactions still in the batcher
        // go out; a trailing partial one is read again on the next start.
        let batch = self.batcher.finish();
        self.check()?;
        if let Some(batch) = batch {
            self.send(batch).await?;
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), DispatchError> {
        match self.batcher.failed.take() {
            Some(failed) => Err(DispatchError::Transform(failed)),
            None => Ok(()),
        }
    }

    async fn send(&self, batch: Arc<Batch>) -> Result<(), SpillError> {
        debug!(seq = batch.seq, events = batch.event_count(), spilled = batch.is_spilled(), last = %batch.last(), "batch cut");
        use std::sync::atomic::Ordering::Relaxed;
        self.status.events_cut.store(batch.through_events, Relaxed);
        self.status.bytes_cut.store(batch.through_bytes, Relaxed);
        self.status.batches_cut.fetch_add(1, Relaxed);
        batch.going_to(self.buffers.len());
        for buffer in &self.buffers {
            // A buffer whose writer is gone, or that overflowed, drops the
            // batch: the pipeline already knows why.
            buffer.push(&batch).await?;
        }
        Ok(())
    }
}
