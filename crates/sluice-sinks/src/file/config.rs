//! The `file` sink's config.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::Invalid;

use crate::registry::{SinkSettings, default_required};
use crate::target::Target;

/// JSON Lines in one local file; the position rides in every line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    pub id: String,
    pub path: PathBuf,
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

impl FileSinkConfig {
    /// The file is its own checkpoint, cut back to its last whole line on
    /// open, so nothing is held twice or lost.
    pub const GUARANTEE: Guarantee = Guarantee::ExactlyOnce { condition: None };
    /// Lines: no keys, no headers.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "file", keys: false, headers: sluice_format::Headers::None, avro: sluice_format::AvroSupport::None };
}

impl SinkSettings for FileSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Self::GUARANTEE
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        self.format.validate(at, Self::CARRIER)?;
        if self.path.as_os_str().is_empty() {
            return Err(Invalid::new(
                format!("{at}.path"),
                "the path is empty",
                "set path to the JSON Lines file to write",
            ));
        }
        Ok(())
    }

    fn target(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(Target::File(resolve(&self.path)))
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        super::preflight(&self.path).map_err(|problem| ("path", problem))
    }
}
