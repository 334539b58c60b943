//! A sink's buffer limits: how much the pipeline keeps for a sink that is
//! slower than the source, before the sink holds the others back (a
//! required sink) or is detached (an optional one).

use serde::Deserialize;
use sluice_core::settings::{Invalid, check_range};

/// Bytes of batches a sink's buffer keeps in memory (64 MiB): four of the
/// largest default batches; beyond it batches go to disk.
pub const DEFAULT_BUFFER_MAX_MEMORY_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes an optional sink's buffer may keep on local disk (1 GiB) before
/// the sink is detached: minutes of a busy database, so a sink that is
/// down for a while catches up from its buffer, not by a re-read.
pub const DEFAULT_OPTIONAL_MAX_DISK_BYTES: u64 = 1024 * 1024 * 1024;
/// A required sink's buffer keeps nothing on disk unless told to: the
/// pipeline's checkpoints wait for it anyway, and spilling costs the CPU
/// the source needs; a full buffer holds the source back instead.
pub const DEFAULT_REQUIRED_MAX_DISK_BYTES: u64 = 0;
/// The largest limit accepted (1 TiB), against typos.
pub const MAX_BUFFER_BYTES: u64 = 1 << 40;

/// `buffer:` of a sink.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// Bytes of batches kept in memory for this sink; `None`: the default.
    pub max_memory_bytes: Option<u64>,
    /// Bytes of batches kept on local disk (under `--data-dir`) once the
    /// memory part is full; `None`: the default for the sink's `required`.
    pub max_disk_bytes: Option<u64>,
}

/// A buffer's limits with the defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    pub max_memory_bytes: u64,
    pub max_disk_bytes: u64,
}

impl BufferConfig {
    pub fn limits(&self, required: bool) -> BufferLimits {
        let disk_default = if required { DEFAULT_REQUIRED_MAX_DISK_BYTES } else { DEFAULT_OPTIONAL_MAX_DISK_BYTES };
        BufferLimits {
            max_memory_bytes: self.max_memory_bytes.unwrap_or(DEFAULT_BUFFER_MAX_MEMORY_BYTES),
            max_disk_bytes: self.max_disk_bytes.unwrap_or(disk_default),
        }
    }

    /// `at` is the sink's `config` path.
    pub fn validate(&self, at: &str) -> Result<(), Invalid> {
        let at = format!("{at}.buffer");
        if let Some(bytes) = self.max_memory_bytes {
            check_range(
                &at,
                "max_memory_bytes",
                bytes,
                1024 * 1024,
                MAX_BUFFER_BYTES,
                "bytes (e.g. 67108864 for 64 MiB)",
            )?;
        }
        if let Some(bytes) = self.max_disk_bytes {
            check_range(&at, "max_disk_bytes", bytes, 0, MAX_BUFFER_BYTES, "bytes (0 keeps nothing on disk)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_required() {
        let config = BufferConfig::default();
        assert_eq!(config.limits(true).max_disk_bytes, 0);
        assert_eq!(config.limits(false).max_disk_bytes, DEFAULT_OPTIONAL_MAX_DISK_BYTES);
        assert_eq!(config.limits(false).max_memory_bytes, DEFAULT_BUFFER_MAX_MEMORY_BYTES);
        let set = BufferConfig { max_memory_bytes: Some(2 << 20), max_disk_bytes: Some(5) };
        assert_eq!(set.limits(true), BufferLimits { max_memory_bytes: 2 << 20, max_disk_bytes: 5 });
    }

    #[test]
    fn out_of_range_limits_name_the_field() {
        let small = BufferConfig { max_memory_bytes: Some(10), max_disk_bytes: None };
        let err = small.validate("pipelines[0].sinks[1].config").unwrap_err();
        assert_eq!(err.field, "pipelines[0].sinks[1].config.buffer.max_memory_bytes");
        let huge = BufferConfig { max_memory_bytes: None, max_disk_bytes: Some(MAX_BUFFER_BYTES + 1) };
        assert!(huge.validate("x").unwrap_err().field.ends_with("buffer.max_disk_bytes"));
    }
}
