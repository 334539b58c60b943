//! One write for several queued batches, for a sink whose every write
//! ends in a fixed round trip (Kafka's: the wait for the brokers'
//! acknowledgements, and with exactly-once the transaction's commit): when
//! batches queue behind a slow write, the next write takes them all, so
//! the sink catches up in one round instead of one per batch.
//!
//! Only batches in memory and with no event sent to the dead letter queue
//! are merged; the others go alone, as before. A merged write shares no
//! encoding with other sinks (that work is keyed by batch).

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use sluice_core::{Event, EventChunks, Position, SinkError};

use super::{SinkWriter, State, Stop};
use crate::batch::Batch;

/// The most batches one write takes.
pub(super) const MAX_MERGED_BATCHES: usize = 16;

/// The most bytes (as batches count them) one merged write takes: a
/// merged write takes batches out of the buffer, which makes room there
/// for more, so this bounds what merging adds to the memory in use.
pub(super) const MAX_MERGED_BYTES: usize = 8 * 1024 * 1024;

impl SinkWriter {
    /// Moves batches already queued in the buffer to `retained`, where the
    /// next write takes them with the one just taken.
    pub(super) fn take_queued(&self, state: &mut State) {
        if !self.merges {
            return;
        }
        // Counted as `merged_after` counts: the batches the next write sends.
        let mut bytes: usize = state.unwritten().map(|b| b.byte_size).sum();
        while state.retained.len() < MAX_MERGED_BATCHES {
            let Some(batch) = self.batches.take_queued(MAX_MERGED_BYTES.saturating_sub(bytes)) else { break };
            bytes += batch.byte_size;
            state.retained.push_back(batch);
        }
    }

    /// The retained batches after `index` that go in one write with it:
    /// none unless the sink merges writes and every one of them is in
    /// memory with nothing to leave out.
    pub(super) fn merged_after(&self, state: &State, index: usize) -> Vec<Arc<Batch>> {
        if !self.merges || self.at_most_once {
            return Vec::new();
        }
        let plain = |batch: &Batch| batch.events().is_some() && !state.skips_within(batch);
        if !plain(&state.retained[index]) {
            return Vec::new();
        }
        let (mut merged, mut bytes) = (Vec::new(), state.retained[index].byte_size);
        for batch in state.retained.iter().skip(index + 1).take(MAX_MERGED_BATCHES - 1) {
            bytes += batch.byte_size;
            if !plain(batch) || bytes > MAX_MERGED_BYTES {
                break;
            }
            merged.push(batch.clone());
        }
        merged
    }
}

/// The events of several in-memory batches after the sink's position, a
/// batch a chunk.
pub(super) struct MergedChunks<'a> {
    chunks: VecDeque<&'a [Event]>,
    last: Position,
    count: usize,
}

impl<'a> MergedChunks<'a> {
    /// Every batch must be in memory, as [`SinkWriter::merged_after`]
    /// chooses them.
    pub(super) fn new(batches: impl Iterator<Item = &'a Arc<Batch>>, after: Option<&Position>) -> Result<Self, Stop> {
        let mut chunks = VecDeque::new();
        let mut last = None;
        let bug =
            || Stop::Fatal(SinkError::permanent("a batch chosen to merge is not in memory", "report this as a bug"));
        for batch in batches {
            let events = batch.events_after(after).ok_or_else(bug)?;
            if !events.is_empty() {
                chunks.push_back(events);
            }
            last = Some(batch.last().clone());
        }
        let count = chunks.iter().map(|c| c.len()).sum();
        Ok(Self { chunks, last: last.ok_or_else(bug)?, count })
    }
}

#[async_trait]
impl EventChunks for MergedChunks<'_> {
    async fn next_chunk(&mut self) -> Result<Option<&[Event]>, SinkError> {
        Ok(self.chunks.pop_front())
    }

    fn last_position(&self) -> &Position {
        &self.last
    }

    fn event_count(&self) -> usize {
        self.count
    }
}
