//! The stdout sink: JSON Lines on standard output, for trying things out.
//! It cannot know what a reader already saw, so it is at-least-once.

mod sink;

use serde::Deserialize;
use sluice_core::{Guarantee, Sink};

use crate::registry::{SinkSettings, default_required};

pub use sink::StdoutSink;

/// JSON Lines on standard output, for trying things out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutSinkConfig {
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
    /// The envelope each line is written in (`format.envelope`).
    #[serde(default)]
    pub format: sluice_format::FormatConfig,
}

impl StdoutSinkConfig {
    /// Lines: no keys, no headers.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "stdout", keys: false, headers: sluice_format::Headers::None, avro: sluice_format::AvroSupport::None };
}

impl SinkSettings for StdoutSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::AtLeastOnce { dedup: crate::registry::line_dedup(&self.format) }
    }

    fn validate(&self, at: &str) -> Result<(), sluice_core::settings::Invalid> {
        self.format.validate(at, Self::CARRIER)
    }
}

pub fn build(config: &StdoutSinkConfig, _context: &crate::SinkContext) -> Box<dyn Sink> {
    Box::new(StdoutSink::new(&config.id, &config.format, config.guarantee()))
}
