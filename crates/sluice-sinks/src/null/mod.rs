//! The null sink: counts events and drops them. It measures the rest of
//! the pipeline (source, batching, checkpoints) without any sink's cost,
//! and lets a config be tried without a place to write.
//!
//! It keeps nothing, so after a restart it reports no position and the
//! coordinator hands it whatever the checkpoint has not passed: a replay
//! "delivers" events again, which is harmless only because nothing holds
//! them.

use async_trait::async_trait;
use serde::Deserialize;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError};

use crate::registry::{SinkSettings, default_required};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NullSinkConfig {
    pub id: String,
    #[serde(default = "default_required")]
    pub required: bool,
    /// This sink's buffer limits (`buffer.max_memory_bytes`, `buffer.max_disk_bytes`).
    #[serde(default)]
    pub buffer: crate::BufferConfig,
    /// `at_least_once` (default) or `at_most_once` (optional sinks only).
    #[serde(default)]
    pub delivery: crate::Delivery,
    /// This sink's own transforms, run in its writer after the pipeline's.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
}

impl NullSinkConfig {
    /// Replays repeat events, as with any sink without a stored position;
    /// nothing is kept, so there is nothing to deduplicate.
    pub const GUARANTEE: Guarantee = Guarantee::AtLeastOnce { dedup: "none needed: nothing is kept" };
}

impl SinkSettings for NullSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Self::GUARANTEE
    }
}

pub fn build(config: &NullSinkConfig, _context: &crate::SinkContext) -> Box<dyn Sink> {
    Box::new(NullSink { id: config.id.clone(), dropped: 0, written: None })
}

pub struct NullSink {
    id: String,
    /// Events dropped since the sink was built, reported on close.
    dropped: u64,
    written: Option<Position>,
}

#[async_trait]
impl Sink for NullSink {
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        vec![sluice_core::preflight::Check::ok("target", "nothing to reach: events are dropped")]
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn guarantee(&self) -> Guarantee {
        NullSinkConfig::GUARANTEE
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(None)
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        // Chunks are read, not skipped, so a spilled batch costs what it
        // costs any sink.
        while let Some(chunk) = events.next_chunk().await? {
            self.dropped += chunk.len() as u64;
        }
        self.written = Some(last);
        Ok(self.written.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.written.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        tracing::info!(sink = %self.id, dropped = self.dropped, "null sink closed");
        Ok(())
    }
}
