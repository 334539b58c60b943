//! The dead letter queue: events a sink can never take.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::error::StoreError;
use crate::event::Event;

/// One event a sink rejected, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// `{source_id}::sink::{sink_id}::{position}`.
    pub key: String,
    pub source_id: String,
    pub sink_id: String,
    pub position: String,
    pub error: String,
    /// The event's JSON envelope, for people.
    pub event: String,
    /// The event in the lossless binary codec, base64; what `sluice dlq
    /// retry` sends again. Empty in letters written before it existed.
    #[serde(default)]
    pub encoded: String,
    pub recorded_at_us: i64,
}

impl DeadLetter {
    pub fn encode_event(event: &Event) -> String {
        let mut bytes = Vec::new();
        codec::encode(event, &mut bytes);
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// The stored event, exactly as the sink was given it.
    pub fn decode_event(&self) -> Result<Event, CodecError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.encoded)
            .map_err(|_| CodecError::Invalid("the letter's event is not base64"))?;
        codec::decode(&mut bytes.as_slice())
    }
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
