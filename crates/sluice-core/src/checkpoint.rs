//! The checkpoint store contract.

use std::fmt;

use crate::error::StoreError;
use crate::position::Position;

/// The key of one sink's checkpoint: `{source_id}::sink::{sink_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckpointKey {
    pub source_id: String,
    pub sink_id: String,
}

impl CheckpointKey {
    pub fn new(source_id: impl Into<String>, sink_id: impl Into<String>) -> Self {
        Self { source_id: source_id.into(), sink_id: sink_id.into() }
    }
}

impl fmt::Display for CheckpointKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}::sink::{}", self.source_id, self.sink_id)
    }
}

/// Durable storage of sink checkpoints.
///
/// Contract:
/// - `commit` is atomic: after a crash at any instruction, either every
///   update of the call is stored or none is.
/// - Checkpoints are monotonic per key: an update below the stored position
///   fails with [`StoreError::Regression`] and writes nothing. Only
///   [`CheckpointStore::remove`], an explicit operator action, goes back.
/// - A returned `Ok` means the updates survive a kill -9 of the process.
///
/// Calls block; async callers run them on a blocking thread.
pub trait CheckpointStore: Send + Sync {
    /// The stored position of each key, in order; `None` if never stored.
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError>;

    /// Every stored checkpoint, sorted by key text.
    fn list(&self) -> Result<Vec<(String, Position)>, StoreError>;

    /// Stores all `updates` in one atomic transaction.
    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError>;

    /// Deletes the given keys; returns how many existed.
    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError>;

    /// The source's log generation: 0 until [`CheckpointStore::reset_source`]
    /// first runs for it. The coordinator puts it in every position of the
    /// source (see [`Position::in_generation`]).
    fn generation(&self, source_id: &str) -> Result<u32, StoreError>;

    /// Deletes `keys` (the checkpoints of every sink of the source) and
    /// moves the source to its next generation, in one atomic transaction,
    /// so no checkpoint of the old log survives into the new generation.
    /// Returns how many keys existed and the new generation.
    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError>;
}
