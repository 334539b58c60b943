//! Batches written but not yet durable, kept for a retry: which stay in
//! memory and which move to disk.

use std::sync::Arc;

use sluice_core::SinkError;

use super::{SinkWriter, State, Stop};

/// Heap bytes of retained batches a writer keeps in memory besides the
/// newest; older ones move to spill files. A buffering sink (object
/// storage) may hold minutes of events before they are durable, which must
/// not all sit on the heap. A file sink's writing thread holds a few at
/// most ([`sluice_core::Sink::unsynced_bound`]), which stay in memory:
/// moving them cost a snapshot into a file a tenth of its time.
pub(crate) const RETAINED_MEMORY_BYTES: usize = 4 * 1024 * 1024;

impl SinkWriter {
    /// Moves the oldest retained batches to spill files, as [`to_spill`]
    /// says.
    pub(super) fn spill_retained(&self, state: &mut State) -> Result<(), Stop> {
        let heaps: Vec<usize> = state.retained.iter().map(|b| b.heap_bytes).collect();
        let count = to_spill(&heaps, self.sink.unsynced_bound().unwrap_or(1), RETAINED_MEMORY_BYTES);
        for batch in state.retained.iter_mut().take(count) {
            let copy = batch.spilled_copy(&self.retain_dir).map_err(|e| {
                Stop::Fatal(SinkError::permanent(
                    format!("cannot move a batch the sink has not made durable to disk: {e}"),
                    "free space on the disk of --data-dir",
                ))
            })?;
            if let Some(copy) = copy {
                *batch = Arc::new(copy);
            }
        }
        Ok(())
    }
}

/// How many of the oldest retained batches move to disk, given the heap
/// bytes of each, oldest first (none for a batch on disk already): the
/// newest `kept` (at least one) stay, and the older ones go, oldest first,
/// until those left in memory hold at most `limit`.
fn to_spill(heaps: &[usize], kept: usize, limit: usize) -> usize {
    let older = &heaps[..heaps.len().saturating_sub(kept.max(1))];
    let mut held: usize = older.iter().sum();
    older
        .iter()
        .take_while(|heap| {
            let over = held > limit;
            held -= **heap;
            over
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::to_spill;

    #[test]
    fn the_oldest_batches_past_the_limit_move_to_disk_and_the_newest_kept_stay() {
        // Only the newest stays whatever it holds; the oldest go until the
        // rest fit.
        assert_eq!(to_spill(&[3, 3, 3, 100], 1, 6), 1);
        assert_eq!(to_spill(&[3, 3, 3, 100], 1, 2), 3);
        assert_eq!(to_spill(&[3, 3, 3, 100], 1, 9), 0);
        // A batch already on disk holds nothing, and moving it frees nothing.
        assert_eq!(to_spill(&[0, 3, 3, 100], 1, 3), 2);
        // A sink that holds four unsynced at most keeps four in memory.
        assert_eq!(to_spill(&[3, 3, 3, 100], 4, 0), 0);
        assert_eq!(to_spill(&[5, 3, 3, 3, 100], 4, 0), 1);
        // Zero kept still keeps the newest; nothing retained moves nothing.
        assert_eq!(to_spill(&[3, 100], 0, 0), 1);
        assert_eq!(to_spill(&[], 4, 0), 0);
    }
}
