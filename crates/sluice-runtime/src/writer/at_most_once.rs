//! At-most-once delivery: each batch's checkpoint is stored before the
//! batch is written, and a batch the sink fails is dropped and counted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_core::{EventChunks, Position, SinkError};
use tracing::warn;

use super::{SinkWriter, State, Stop};
use crate::batch::Batch;

impl SinkWriter {
    /// At-most-once: the sink failed the part of `batch` past `from`. It is
    /// reopened at once (once, not retried, shutdown or not), so it is
    /// consistent again and says what of the batch it took (a sink that
    /// acknowledges event by event); the rest is dropped, counted, and
    /// passed for good. A sink that does not reopen is taken to hold
    /// nothing of the batch, and its next batch tries again.
    pub(super) async fn drop_batch(
        &mut self,
        state: &mut State,
        (batch, from): (&Arc<Batch>, Option<Position>),
        err: SinkError,
    ) -> Result<(), Stop> {
        self.sink_status().failed_call(err.to_string());
        let holds = match self.open_once().await {
            Ok(holds) => holds,
            Err(not_open) => {
                warn!(error = %not_open, "at-most-once sink did not reopen; its next batch tries again");
                self.sink_status().failed_call(not_open.to_string());
                None
            }
        };
        let unreadable = |e: String| {
            Stop::Fatal(SinkError::permanent(
                format!("cannot read back a spilled batch: {e}"),
                "check the disk of --data-dir",
            ))
        };
        // Counted chunk by chunk: a spilled batch knows only its total.
        let mut dropped = 0u64;
        if let Some(mut rest) = batch.chunks(from.max(holds).as_ref()).map_err(|e| unreadable(e.to_string()))? {
            while let Some(chunk) = rest.next_chunk().await.map_err(|e| unreadable(e.to_string()))? {
                dropped += chunk.len() as u64;
            }
        }
        warn!(error = %err, dropped, "at-most-once sink failed a batch; its events are dropped, not written again");
        self.sink_status().dropped.fetch_add(dropped, Ordering::Relaxed);
        self.metrics.dropped.increment(dropped);
        let last = batch.last().clone();
        state.position = Some(last.clone());
        self.note_durable(state, Some(last)).await;
        Ok(())
    }

    /// Waits until the sink's stored checkpoint reaches `last`: the
    /// commit policy may hold it behind the required sinks for a while.
    /// Not cut short by shutdown: the checkpointer outlives the writers,
    /// and a batch whose checkpoint is stored must still be written (the
    /// shutdown grace bounds the wait).
    pub(super) async fn wait_stored(&mut self, last: &Position) -> Result<(), Stop> {
        let mut stored = self.sink_status().stored.subscribe();
        match stored.wait_for(|s| s.as_ref().is_some_and(|s| s >= last)).await {
            Ok(_) => Ok(()),
            Err(_) => Err(Stop::Abandoned),
        }
    }
}
