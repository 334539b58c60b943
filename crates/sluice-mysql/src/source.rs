//! The `mysql` source (MySQL and MariaDB).
//!
//! ```text
//! COM_BINLOG_DUMP ─► reader task ─chunks─► poll() ─► coordinator
//!                      │
//!                      └─ schema history (information_schema + position)
//! ```
//!
//! A position is (binlog file, offset of the transaction's first event,
//! row index in the transaction), so a restart from any checkpoint begins
//! at a transaction boundary and the coordinator drops what each sink
//! already has. On MariaDB each position also carries the GTID state just
//! before its transaction (`BINLOG_GTID_POS`), so with `gtid: true` the
//! source resumes by GTID instead. Before streaming, the source checks that
//! binary logging is on and row-based with full row images, that the
//! server is the one the checkpoints came from, and that the checkpoint's
//! binlog file still exists: anything else stops it with the fix
//! ([`crate::start`]). The reader task is in [`crate::reader`]; the phases
//! after start are [`Driver`]'s.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_config::MysqlConfig;
use sluice_core::snapshot::incremental::{Incremental, Mark};
use sluice_core::source::{AfterSnapshot, Driver, ReaderHandle, Stream};
use sluice_core::{Event, LogStats, Position, SourceError};

use crate::incremental;

pub struct MysqlSource {
    pub(crate) stream: MyStream,
    pub(crate) driver: Driver<MyStream>,
}

/// What the source keeps across starts, and how it opens its stream.
pub(crate) struct MyStream {
    pub config: MysqlConfig,
    /// Keeps the schema history and the server identity.
    pub state_dir: sluice_core::StateDir,
    /// `snapshot.mode: always` re-reads the tables once per process.
    pub started_once: bool,
    /// The tables are to be queued for re-reading when streaming starts.
    pub reread: bool,
    pub log: Arc<LogStats>,
}

impl MysqlSource {
    /// `state_dir` keeps the schema history and the server identity.
    pub fn new(config: MysqlConfig, state_dir: sluice_core::StateDir) -> Self {
        let stream = MyStream { config, state_dir, started_once: false, reread: false, log: Arc::default() };
        Self { stream, driver: Driver::new("mysql", "binlog reader") }
    }
}

impl MyStream {
    /// The incremental snapshots of this start, when the config has a `signal_table`.
    pub(crate) fn open_incremental(
        &self,
        from: Option<&Position>,
    ) -> Result<Option<Incremental<incremental::Reader>>, SourceError> {
        let Some(table) = &self.config.signal_table else { return Ok(None) };
        let reader = incremental::Reader::new(self.config.clone(), table.clone());
        Ok(Some(Incremental::open(reader, &self.config.id, self.state_dir.clone(), from)?))
    }
}

#[async_trait]
impl Stream for MyStream {
    /// The point the snapshot was taken at, where the stream starts.
    type Handoff = Position;
    type Chunks = incremental::Reader;

    async fn open_after_snapshot(&mut self, done: AfterSnapshot<'_, Self>) -> Result<ReaderHandle, SourceError> {
        // Positions the snapshot handed on are rows, not binlog places.
        self.stream_after_snapshot(done.handoff, done.incremental).await
    }

    fn mark(&self, event: &Event) -> Option<Mark> {
        // Only a config with a signal table reads incremental snapshots.
        let table = self.config.signal_table.as_deref()?;
        incremental::mark(table, event)
    }
}

sluice_core::driven_source!(MysqlSource, id: stream.config.id, log: stream.log);
