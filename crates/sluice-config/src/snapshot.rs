//! The `snapshot` block of a source: whether a new pipeline first reads
//! the rows already in its tables, and how.

use serde::Deserialize;

/// Rows per chunk: one query and one resumable step per chunk.
pub const DEFAULT_SNAPSHOT_CHUNK_SIZE: u64 = 10_000;
/// Tables read at the same time, each on its own connection.
pub const DEFAULT_SNAPSHOT_MAX_PARALLEL_TABLES: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Read the tables once, when the pipeline has no checkpoint yet, then
    /// stream from the point the snapshot was taken.
    Initial,
    /// Stream only: changes from the slot's (or the configured) start.
    #[default]
    Never,
    /// As `initial`, and on every start of `sluice run` with a checkpoint,
    /// re-read every table with an incremental snapshot while streaming.
    Always,
    /// As `initial`, and when the log position of the checkpoints is gone
    /// (slot dropped or invalidated, binlog purged), stream from now and
    /// re-read every table with an incremental snapshot instead of stopping.
    WhenNeeded,
}

impl SnapshotMode {
    /// A pipeline without a checkpoint first reads the tables.
    pub fn initial(self) -> bool {
        self != SnapshotMode::Never
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    #[serde(default)]
    pub mode: SnapshotMode,
    #[serde(default = "default_parallel")]
    pub max_parallel_tables: usize,
    #[serde(default = "default_chunk_size")]
    pub chunk_size: u64,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            mode: SnapshotMode::default(),
            max_parallel_tables: DEFAULT_SNAPSHOT_MAX_PARALLEL_TABLES,
            chunk_size: DEFAULT_SNAPSHOT_CHUNK_SIZE,
        }
    }
}

fn default_parallel() -> usize {
    DEFAULT_SNAPSHOT_MAX_PARALLEL_TABLES
}

fn default_chunk_size() -> u64 {
    DEFAULT_SNAPSHOT_CHUNK_SIZE
}
