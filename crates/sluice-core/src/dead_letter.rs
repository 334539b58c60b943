//! The dead letter queue: events a sink can never take.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// One event a sink rejected, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// `{source_id}::sink::{sink_id}::{position}`.
    pub key: String,
    pub source_id: String,
    pub sink_id: String,
    pub position: String,
    pub error: String,
    /// The event's JSON envelope.
    pub event: String,
    pub recorded_at_us: i64,
}

/// Durable storage of dead letters. `put` returns once the letter
/// survives a kill -9, so the checkpoint may then move past the event.
pub trait DeadLetterQueue: Send + Sync {
    /// Stores `letter`. When `max_entries` are stored already, the oldest
    /// is dropped with `drop_oldest`, otherwise [`StoreError::DeadLetterQueueFull`].
    fn put(&self, letter: &DeadLetter, max_entries: usize, drop_oldest: bool) -> Result<(), StoreError>;

    /// Every letter, oldest first.
    fn letters(&self) -> Result<Vec<DeadLetter>, StoreError>;

    /// Deletes letters by key; returns how many existed.
    fn purge(&self, keys: &[String]) -> Result<usize, StoreError>;
}
