//! The `postgres` source.
//!
//! ```text
//! START_REPLICATION ─► reader task ──chunks──► poll() ─► coordinator
//!                        │  ▲
//!   standby status ◄─────┘  └── AckWatermark (MIN of every sink's checkpoint)
//! ```
//!
//! [`start`](crate::start) decides where to begin (a pure plan, see
//! [`sluice_core::source::plan`]) and sets up the slot and the initial
//! snapshot; [`reader`](crate::reader) owns the replication connection and
//! says what the slot may release; [`Driver`] runs the phases after start.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sluice_config::PostgresConfig;
use sluice_core::snapshot::incremental::{Incremental, Mark};
use sluice_core::source::{AfterSnapshot, Driver, ReaderHandle, Stream};
use sluice_core::{Event, LogStats, Position, SourceError};

use crate::catalog::source_error;
use crate::incremental;
use crate::reader::Handoff;
use crate::wire::{ConnectParams, Connection};

/// Counters for lag and throughput.
#[derive(Debug, Default)]
pub struct SourceStats {
    pub events_read: AtomicU64,
    pub bytes_read: AtomicU64,
    /// The server's WAL end, from the latest message.
    pub server_wal_end: AtomicU64,
    /// The flush position last reported to the server.
    pub flushed_lsn: AtomicU64,
    /// Commit time of the latest transaction read (µs since the Unix epoch).
    pub last_commit_time_us: AtomicI64,
    pub heartbeats_sent: AtomicU64,
}

impl SourceStats {
    /// WAL the slot still holds for Sluice.
    pub fn slot_lag_bytes(&self) -> u64 {
        self.server_wal_end.load(Ordering::Relaxed).saturating_sub(self.flushed_lsn.load(Ordering::Relaxed))
    }

    /// How far behind the database the latest event read is.
    pub fn replication_lag(&self) -> Duration {
        let commit = self.last_commit_time_us.load(Ordering::Relaxed);
        if commit == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(sluice_core::time::now_us().saturating_sub(commit).max(0) as u64)
    }
}

pub struct PostgresSource {
    pub(crate) stream: PgStream,
    pub(crate) driver: Driver<PgStream>,
}

/// What the source keeps across starts, and how it opens its stream.
pub(crate) struct PgStream {
    pub config: PostgresConfig,
    pub params: ConnectParams,
    pub stats: Arc<SourceStats>,
    pub log: Arc<LogStats>,
    /// Where incremental snapshot state is kept; without it signals are refused.
    pub state_dir: Option<sluice_core::StateDir>,
    /// `snapshot.mode: always` re-reads the tables once per process.
    pub started_once: bool,
    /// Matched tables left out by `keyless_tables: skip`.
    pub skipped: Vec<String>,
    /// Keyless tables go through the inserts-only publication.
    pub inserts_publication: bool,
    /// The slot is (made) a failover slot: `failover_slot`, by default on
    /// from PostgreSQL 17.
    pub failover_slot: bool,
    /// The server is a standby (PostgreSQL 16+): nothing is written to it.
    pub on_standby: bool,
}

impl PostgresSource {
    pub fn new(config: PostgresConfig) -> Self {
        let params = connect_params(&config);
        let stream = PgStream {
            config,
            params,
            stats: Arc::default(),
            log: Arc::default(),
            state_dir: None,
            started_once: false,
            skipped: Vec::new(),
            inserts_publication: false,
            failover_slot: false,
            on_standby: false,
        };
        Self { stream, driver: Driver::new("postgres", "replication reader") }
    }

    /// Keeps the source's state (incremental snapshots, which turn on
    /// `sluice snapshot --table`, the schema history, the slot record and
    /// the known partitions) in `dir`.
    pub fn with_state_dir(mut self, dir: sluice_core::StateDir) -> Self {
        self.stream.state_dir = Some(dir);
        self
    }

    pub fn stats(&self) -> Arc<SourceStats> {
        self.stream.stats.clone()
    }
}

impl PgStream {
    pub(crate) async fn connect(&self, replication: bool) -> Result<Connection, SourceError> {
        let what = if replication { "replication connection" } else { "connection" };
        Connection::connect(&self.params, replication)
            .await
            .map_err(|e| source_error(&format!("{what} to {} as {:?}", self.params.addr(), self.params.user), e))
    }

    /// Tables created while streaming are published and read
    /// (new_tables.rs): Sluice manages the publication, and incremental
    /// snapshots, which need 14 and a state dir and cannot run on a
    /// standby, are on.
    pub(crate) fn watches_new_tables(&self, version: u32) -> bool {
        self.config.create_publication && self.rereads_partitions(version)
    }

    /// A partition attached to a captured table is read by an incremental
    /// snapshot (partition_watch.rs): they need 14 and a state dir, and
    /// cannot run on a standby.
    pub(crate) fn rereads_partitions(&self, version: u32) -> bool {
        version >= 140_000 && self.state_dir.is_some() && !self.on_standby
    }

    /// The incremental snapshots of this start, when there is a state dir.
    pub(crate) fn open_incremental(
        &self,
        from: Option<&Position>,
    ) -> Result<Option<Incremental<incremental::Reader>>, SourceError> {
        let Some(dir) = &self.state_dir else { return Ok(None) };
        let config = &self.config;
        let reader =
            incremental::Reader::new(self.params.clone(), &config.id, &config.database, config.snapshot.chunk_size);
        Ok(Some(Incremental::open(reader, &config.id, dir.clone(), from)?))
    }
}

#[async_trait]
impl Stream for PgStream {
    type Handoff = Handoff;
    type Chunks = incremental::Reader;

    async fn open_after_snapshot(&mut self, done: AfterSnapshot<'_, Self>) -> Result<ReaderHandle, SourceError> {
        self.stream(done.handoff, done.last).await
    }

    fn mark(&self, event: &Event) -> Option<Mark> {
        incremental::mark(event)
    }
}

sluice_core::driven_source!(PostgresSource, id: stream.config.id, log: stream.log);

/// How to reach the server of a `postgres` source config.
pub fn connect_params(config: &PostgresConfig) -> ConnectParams {
    ConnectParams {
        host: config.host.clone(),
        port: config.port,
        database: config.database.clone(),
        user: config.user.clone(),
        password: config.password.clone(),
        ssl_mode: config.ssl_mode,
        ca_file: config.ca_file.clone(),
        connect_timeout: Duration::from_secs(config.connect_timeout_secs),
    }
}
