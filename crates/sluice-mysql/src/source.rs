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
//! binlog file still exists: anything else stops it with the fix.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::binlog::BinlogChecksumAlg;
use mysql_async::binlog::events::{
    Event as BinlogEvent, EventData, GtidEvent, QueryEvent, RotateEvent, RowsEventData, TableMapEvent,
    TransactionPayloadEvent,
};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, OptsBuilder, SslOpts};
use sluice_config::{DdlLiterals, MysqlConfig, MysqlSslMode, MysqlStart, SnapshotMode, glob_match};
use sluice_core::snapshot::Run;
use sluice_core::source::ReaderHandle;
use sluice_core::{
    AckWatermark, BinlogPos, Columns, Event, LogStats, Op, Position, Row, SnapshotPos, Source, SourceError,
    SourceStatus, Value,
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::ddl::{Dialect, ddl_targets, redact};
pub use crate::errors::mysql_error;
use crate::gtid::{MariaGtid, MariaState};
use crate::incremental;
use crate::schema::{SchemaHistory, TableSchema, read_schema};
use crate::snapshot;
use crate::values::convert;
use sluice_core::snapshot::incremental::Incremental;

const READY_LIMIT: usize = 1024;
const CHUNK_QUEUE: usize = 8;

pub struct MysqlSource {
    config: MysqlConfig,
    state_dir: PathBuf,
    reader: Option<ReaderHandle>,
    snapshot: Option<PendingSnapshot>,
    /// Set when the config has a `signal_table`.
    incremental: Option<Incremental<incremental::Reader>>,
    /// `snapshot.mode: always` re-reads the tables once per process.
    started_once: bool,
    /// The tables are to be queued for re-reading when streaming starts.
    reread: bool,
    log: Arc<LogStats>,
}

/// How often the reader measures how far behind the server's head it is.
const LOG_MEASURE_INTERVAL: Duration = Duration::from_secs(5);

enum Start {
    File { file: String, offset: u64 },
    Gtid(String),
}

impl MysqlSource {
    /// `state_dir` keeps the schema history and the server identity.
    pub fn new(config: MysqlConfig, state_dir: PathBuf) -> Self {
        Self {
            config,
            state_dir,
            reader: None,
            snapshot: None,
            incremental: None,
            started_once: false,
            reread: false,
            log: Arc::default(),
        }
    }

    /// Checks the server and decides where to start.
    /// Also says whether the checkpoint's binlog was purged and streaming
    /// starts from now instead (`snapshot.mode: when_needed`).
    async fn prepare(&self, conn: &mut Conn, from: &Option<Position>) -> Result<(Start, bool, bool), SourceError> {
        let q = |e| mysql_error("server check", e);
        let row: Option<(String, String, String, u32, String)> = conn
            .query_first("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, @@version")
            .await
            .map_err(q)?;
        let (log_bin, format, image, server_id, version) = row.unwrap_or_default();
        if log_bin != "1" && !log_bin.eq_ignore_ascii_case("ON") {
            return Err(SourceError::permanent(
                "binary logging is off on the server",
                "set log_bin (and a server_id) in the server config and restart it",
            ));
        }
        if !format.eq_ignore_ascii_case("ROW") {
            return Err(SourceError::permanent(
                format!("binlog_format is {format}; row changes need ROW"),
                "SET GLOBAL binlog_format = 'ROW' (and in the server config), then reconnect clients",
            ));
        }
        if !image.eq_ignore_ascii_case("FULL") {
            return Err(SourceError::permanent(
                format!("binlog_row_image is {image}; before images need FULL"),
                "SET GLOBAL binlog_row_image = 'FULL' (and in the server config)",
            ));
        }
        let mariadb = version.contains("MariaDB");
        let identity = if mariadb {
            format!("mariadb server_id={server_id}")
        } else {
            let uuid: Option<String> = conn.query_first("SELECT @@server_uuid").await.map_err(q)?;
            format!("mysql server_uuid={}", uuid.unwrap_or_default())
        };
        self.check_identity(&identity, from.is_some())?;
        let logs: Vec<String> = conn
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| row.get::<String, usize>(0).unwrap_or_default())
            .await
            .map_err(q)?;
        let purged = |file: &str| {
            SourceError::permanent(
                format!(
                    "binlog file {file} is gone from the server (purged); the changes it held since the checkpoint are lost"
                ),
                "reset this source's checkpoints with `sluice checkpoints reset --pipeline <name> --yes` (it also moves the schema history aside and starts a new log generation, so no sink skips the new log) and take a new snapshot; after a purge, keep binlogs longer (binlog_expire_logs_seconds) so it does not happen again",
            )
        };
        let current = async |conn: &mut Conn| -> Result<Start, SourceError> {
            let status: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await.map_err(q)?;
            let status = status.ok_or_else(|| {
                SourceError::permanent("SHOW MASTER STATUS returned nothing", "enable log_bin on the server")
            })?;
            Ok(Start::File { file: status.get(0).unwrap_or_default(), offset: status.get(1).unwrap_or(4) })
        };
        let mut lost = false;
        let start = match from {
            Some(Position::Mysql(pos)) => match (&pos.gtid_before, self.config.gtid && mariadb) {
                (Some(state), true) => Start::Gtid(state.to_string()),
                _ if !logs.iter().any(|l| **l == *pos.file) => {
                    if self.config.snapshot.mode != SnapshotMode::WhenNeeded {
                        return Err(purged(&pos.file));
                    }
                    warn!(
                        file = %pos.file,
                        "the checkpoint's binlog file was purged; snapshot.mode when_needed: streaming from now and re-reading every table"
                    );
                    lost = true;
                    current(conn).await?
                }
                _ => Start::File { file: pos.file.to_string(), offset: pos.offset },
            },
            Some(other) => {
                return Err(SourceError::permanent(
                    format!("checkpoint {other} was not written by a mysql source"),
                    "give this source a new id, or reset its checkpoints with `sluice checkpoints reset`",
                ));
            }
            None => match &self.config.start {
                MysqlStart::Current => current(conn).await?,
                MysqlStart::Position { file, offset } if logs.iter().any(|l| l == file) => {
                    Start::File { file: file.clone(), offset: *offset }
                }
                MysqlStart::Position { file, .. } => return Err(purged(file)),
                MysqlStart::Gtid(_) if !mariadb => {
                    return Err(SourceError::permanent(
                        "start.gtid takes a MariaDB GTID state, and this server is MySQL",
                        "start from a file and offset",
                    ));
                }
                MysqlStart::Gtid(state) => Start::Gtid(state.clone()),
            },
        };
        Ok((start, mariadb, lost))
    }

    /// Takes a new snapshot (`resume` is `None`) or goes on with one;
    /// `from` is then the stream position it was taken at.
    async fn start_snapshot(&mut self, from: Option<Position>, resume: Option<SnapshotPos>) -> Result<(), SourceError> {
        let mut conn = connect(&self.config).await?;
        let (_, mariadb, lost) = self.prepare(&mut conn, &from).await?;
        if lost && resume.is_some() {
            // The snapshot's point is purged, so it cannot stream from there;
            // under when_needed the stream re-reads every table instead.
            return self.stream(from).await;
        }
        let mut plans = snapshot::plan_tables(&mut conn, &self.config.tables).await?;
        plans.retain(|plan| self.config.signal_table.as_deref() != Some(&*plan.name));
        let readers = self.config.snapshot.max_parallel_tables.min(plans.len()).max(1);
        let (conns, point) = snapshot::open_readers(&self.config, readers, mariadb, resume.is_none()).await?;
        let stream_from = match (point, from) {
            (Some(point), _) => {
                let gtid_before = if mariadb {
                    let state: Option<Option<String>> = conn
                        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (point.file.as_str(), point.offset))
                        .await
                        .map_err(|e| mysql_error("snapshot point GTID", e))?;
                    state.flatten().filter(|s| !s.is_empty()).map(Arc::from)
                } else {
                    None
                };
                Position::Mysql(BinlogPos { file: point.file.into(), offset: point.offset, seq: 0, gtid_before })
            }
            (None, Some(from)) => from,
            (None, None) => unreachable!("a resumed snapshot has its stream position"),
        };
        let _ = conn.disconnect().await;
        let Position::Mysql(pos) = &stream_from else { unreachable!("built or checked as a binlog position") };
        info!(
            tables = plans.len(),
            readers,
            resume_after = %resume.as_ref().map_or_else(|| "-".to_string(), |p| p.table.to_string()),
            stream_from = %stream_from,
            "snapshot starting"
        );
        let settings = snapshot::Settings {
            source_id: Arc::from(self.config.id.as_str()),
            chunk_size: self.config.snapshot.chunk_size,
            stream_from: Arc::from(stream_from.to_string()),
            stream_file: pos.file.to_string(),
            repair: self.config.snapshot.mode == SnapshotMode::WhenNeeded,
            started_us: sluice_core::time::now_us(),
        };
        let run = snapshot::spawn(settings, self.config.clone(), conns, plans, resume);
        self.snapshot = Some(PendingSnapshot { run, stream_from });
        Ok(())
    }

    /// Streams the binlog from `from` (or the configured start).
    async fn stream(&mut self, from: Option<Position>) -> Result<(), SourceError> {
        let mut conn = connect(&self.config).await?;
        let (start, mariadb, lost) = self.prepare(&mut conn, &from).await?;
        if lost || std::mem::take(&mut self.reread) {
            let incremental = self.incremental.as_mut().ok_or_else(|| {
                SourceError::permanent(
                    "snapshot.mode always and when_needed re-read tables with incremental snapshots",
                    "set signal_table in the source config",
                )
            })?;
            let mut tables = snapshot::table_names(&mut conn, &self.config.tables).await?;
            tables.retain(|t| self.config.signal_table.as_ref() != Some(t));
            info!(tables = tables.len(), mode = ?self.config.snapshot.mode, "every table queued for an incremental snapshot");
            incremental.enqueue(tables)?;
        }
        let q = |e| mysql_error("binlog request", e);
        let mut maria_state = MariaState::default();
        let checksum: Option<String> = conn.query_first("SELECT @@binlog_checksum").await.map_err(q)?;
        let checksum = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
        let (file, offset) = match &start {
            Start::File { file, offset } => {
                if mariadb {
                    let state: Option<Option<String>> =
                        conn.exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), *offset)).await.map_err(q)?;
                    if let Some(Some(state)) = state {
                        maria_state = MariaState::parse(&state).unwrap_or_default();
                    }
                }
                (file.clone(), *offset)
            }
            Start::Gtid(state) => {
                maria_state = MariaState::parse(state).map_err(|e| {
                    SourceError::permanent(format!("GTID state: {e}"), "give a MariaDB GTID state like 0-1-100")
                })?;
                conn.query_drop(format!("SET @slave_connect_state = '{maria_state}'")).await.map_err(q)?;
                conn.query_drop("SET @slave_gtid_strict_mode = 0").await.map_err(q)?;
                conn.query_drop("SET @slave_gtid_ignore_duplicates = 0").await.map_err(q)?;
                (String::new(), 4)
            }
        };
        if mariadb {
            // Capability 4: send GTID events as they are (MARIA_SLAVE_CAPABILITY_GTID).
            conn.query_drop("SET @mariadb_slave_capability = 4").await.map_err(q)?;
        }
        conn.query_drop(format!("SET @master_heartbeat_period = {}", self.config.heartbeat_secs * 1_000_000_000))
            .await
            .map_err(q)?;
        let schema_conn = connect(&self.config).await?;
        let request =
            BinlogStreamRequest::new(self.config.replica_server_id()).with_filename(file.as_bytes()).with_pos(offset);
        let stream = conn.get_binlog_stream(request).await.map_err(q)?;
        let by = if matches!(start, Start::Gtid(_)) { "gtid" } else { "file" };
        info!(by, file, offset, gtid = %maria_state, server_id = self.config.replica_server_id(), "binlog streaming started");
        let history = SchemaHistory::open(self.state_dir.join("schema_history.jsonl"))?;
        let (tx, rx) = mpsc::channel(CHUNK_QUEUE);
        let reader = Reader {
            stream,
            schema_conn,
            history,
            source_id: self.config.id.as_str().into(),
            // The signal table's rows carry incremental snapshot requests
            // and watermarks; they are taken out before the sinks.
            patterns: self.config.tables.iter().chain(&self.config.signal_table).cloned().collect(),
            ddl_literals: self.config.ddl_literals,
            events: tx,
            receive_timeout: Duration::from_secs(self.config.heartbeat_secs * 3 + 5),
            file: (!file.is_empty()).then(|| Arc::from(file.as_str())),
            maria_state,
            tx: None,
            held: None,
            checksum,
            format_seen: false,
            log: self.log.clone(),
            read_through: offset,
        };
        let task = tokio::spawn(reader.run());
        self.reader = Some(ReaderHandle::new(rx, task));
        Ok(())
    }

    fn check_identity(&self, identity: &str, has_checkpoint: bool) -> Result<(), SourceError> {
        let path = self.state_dir.join("server_identity");
        let io = |e: std::io::Error| {
            SourceError::permanent(format!("{}: {e}", path.display()), "check the disk of --data-dir")
        };
        match std::fs::read_to_string(&path) {
            Ok(stored) if stored.trim() == identity => Ok(()),
            Ok(stored) if has_checkpoint => Err(SourceError::permanent(
                format!(
                    "the server is now {identity:?}, but the checkpoints were taken on {:?}: its binlog positions mean nothing here",
                    stored.trim()
                ),
                "point the source back at the original server, or reset this source's checkpoints and take a new snapshot",
            )),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => {
                std::fs::create_dir_all(&self.state_dir).map_err(io)?;
                std::fs::write(&path, identity).map_err(io)
            }
        }
    }
}

#[async_trait]
impl Source for MysqlSource {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn start(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError> {
        // The server keeps binlogs by age and size, not by what readers
        // confirmed, so there is nothing to acknowledge.
        self.reader = None;
        self.snapshot = None;
        self.incremental = match &self.config.signal_table {
            Some(table) => {
                let reader = incremental::Reader::new(self.config.clone(), table.clone());
                let path = self.state_dir.join("incremental_snapshot.json");
                Some(Incremental::open(reader, &self.config.id, path, from.as_ref())?)
            }
            None => None,
        };
        let wanted = self.config.snapshot.mode.initial();
        if self.config.snapshot.mode == SnapshotMode::Always && from.is_some() && !self.started_once {
            // Queued once streaming starts, after any initial snapshot left to read.
            self.reread = true;
        }
        self.started_once = true;
        let highest = acked.highest_at_start();
        let resume = sluice_core::snapshot::resume_point(from.as_ref(), highest.as_ref(), wanted);
        // A snapshot position says where the stream that follows it starts.
        let from = match (&from, &highest) {
            (Some(Position::Snapshot(pos)), _) | (None, Some(Position::Snapshot(pos))) => Some(stream_from(pos)?),
            (None, Some(_)) if wanted => {
                warn!(
                    "a sink without a checkpoint joined a pipeline that streams already: it gets changes from the configured start on, not the rows already in the tables"
                );
                None
            }
            _ => from,
        };
        let fresh = wanted && from.is_none() && highest.is_none();
        if fresh || resume.is_some() {
            return self.start_snapshot(from, resume).await;
        }
        self.stream(from).await
    }

    fn log_stats(&self) -> Option<Arc<LogStats>> {
        Some(self.log.clone())
    }

    async fn poll(&mut self, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError> {
        if let Some(pending) = self.snapshot.as_mut() {
            match pending.run.next().await {
                Some(Ok(events)) => {
                    out.extend(events);
                    return Ok(SourceStatus::Open);
                }
                Some(Err(err)) => {
                    self.snapshot = None;
                    return Err(err);
                }
                None => {
                    let Some(done) = self.snapshot.take() else { unreachable!("matched above") };
                    info!(stream_from = %done.stream_from, "snapshot done; streaming from the snapshot point");
                    self.stream(Some(done.stream_from)).await?;
                }
            }
        }
        if let Some(incremental) = self.incremental.as_mut() {
            incremental.go_on().await?;
        }
        let reader = self.reader.as_mut().ok_or_else(|| SourceError::transient("mysql source polled before start"))?;
        match reader.next("binlog reader").await {
            Ok(events) => {
                match (self.incremental.as_mut(), self.config.signal_table.as_deref()) {
                    (Some(incremental), Some(table)) => {
                        incremental.filter(events, out, |e| incremental::mark(table, e)).await?
                    }
                    _ => out.extend(events),
                }
                Ok(SourceStatus::Open)
            }
            Err(err) => {
                self.reader = None;
                Err(err)
            }
        }
    }
}

/// A connection to the source's server.
pub(crate) async fn connect(config: &MysqlConfig) -> Result<Conn, SourceError> {
    let mut opts = OptsBuilder::default()
        .ip_or_hostname(config.host.clone())
        .tcp_port(config.port)
        .user(Some(config.user.clone()))
        .pass(Some(config.password.expose().to_string()))
        .prefer_socket(false);
    opts = match config.ssl_mode {
        MysqlSslMode::Disable => opts,
        MysqlSslMode::Require => opts.ssl_opts(SslOpts::default().with_danger_accept_invalid_certs(true)),
        MysqlSslMode::VerifyFull => {
            let ca = config.ca_file.clone().unwrap_or_default();
            // The driver reads the file while connecting and reports a
            // missing one as an I/O error, which would be retried forever.
            if let Err(e) = std::fs::File::open(&ca) {
                return Err(SourceError::permanent(
                    format!("cannot read ca_file {}: {e}", ca.display()),
                    "set ca_file to a readable PEM file of the CA that signed the server certificate",
                ));
            }
            opts.ssl_opts(SslOpts::default().with_root_certs(vec![ca.into()]))
        }
    };
    let addr = format!("{}:{}", config.host, config.port);
    let timeout = Duration::from_secs(config.connect_timeout_secs);
    match tokio::time::timeout(timeout, Conn::new(opts)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(mysql_error(&format!("connection to {addr} as {:?}", config.user), e)),
        Err(_) => Err(SourceError::transient(format!("connection to {addr} timed out after {}s", timeout.as_secs()))),
    }
}

/// A snapshot being read, and where the stream starts once it is done.
struct PendingSnapshot {
    run: Run,
    stream_from: Position,
}

/// The binlog position a snapshot position says the stream starts from.
fn stream_from(pos: &SnapshotPos) -> Result<Position, SourceError> {
    match pos.stream_from.parse::<Position>() {
        Ok(position @ Position::Mysql(_)) => Ok(position),
        _ => Err(SourceError::permanent(
            format!("checkpoint {} was not written by a mysql source", Position::Snapshot(pos.clone())),
            "give this source a new id, or reset its checkpoints with `sluice checkpoints reset`",
        )),
    }
}

/// The transaction being read.
struct Transaction {
    offset: u64,
    gtid: Option<MariaGtid>,
    gtid_before: Option<Arc<str>>,
    tx_id: Arc<str>,
    time_us: i64,
    seq: u32,
    /// A MariaDB GTID with the standalone flag: a DDL with no BEGIN/COMMIT.
    standalone: bool,
}

struct Reader {
    stream: BinlogStream,
    schema_conn: Conn,
    history: SchemaHistory,
    source_id: Arc<str>,
    patterns: Vec<String>,
    ddl_literals: DdlLiterals,
    events: mpsc::Sender<Result<Vec<Event>, SourceError>>,
    receive_timeout: Duration,
    file: Option<Arc<str>>,
    maria_state: MariaState,
    tx: Option<Transaction>,
    held: Option<Event>,
    /// The server adds CRC32 checksums to events.
    checksum: bool,
    /// A format description event arrived, so the reader knows the checksum.
    format_seen: bool,
    log: Arc<LogStats>,
    /// The end of the last event read in `file`.
    read_through: u64,
}

fn unreadable(what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(format!("cannot read a binlog {what}: {e}"), "report this with the server version")
}

impl Reader {
    async fn run(mut self) {
        if let Err(err) = self.stream_events().await {
            let _ = self.events.send(Err(err)).await;
        }
    }

    async fn stream_events(&mut self) -> Result<(), SourceError> {
        use futures_util::StreamExt as _;
        let mut ready: Vec<Event> = Vec::new();
        let events = self.events.clone();
        let mut measure = tokio::time::interval(LOG_MEASURE_INTERVAL);
        measure.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = measure.tick() => self.measure_log().await,
                permit = events.reserve(), if !ready.is_empty() => {
                    let Ok(permit) = permit else { return Ok(()) };
                    permit.send(Ok(std::mem::take(&mut ready)));
                }
                next = tokio::time::timeout(self.receive_timeout, self.stream.next()), if ready.len() < READY_LIMIT => {
                    let event = match next {
                        Err(_) => return Err(SourceError::transient(format!(
                            "no binlog event or heartbeat from the server for {}s; reconnecting", self.receive_timeout.as_secs()
                        ))),
                        Ok(None) => return Err(SourceError::transient("the server ended the binlog stream")),
                        Ok(Some(Err(e))) => return Err(mysql_error("binlog stream", e)),
                        Ok(Some(Ok(event))) => event,
                    };
                    self.handle(event, &mut ready).await?;
                }
            }
        }
    }

    /// Reads the server's binlog files to say where its head is and how
    /// many bytes the reader is behind it. A failure only leaves the
    /// figures stale: it must never stop streaming.
    async fn measure_log(&mut self) {
        let logs: Vec<mysql_async::Row> = match self.schema_conn.query("SHOW BINARY LOGS").await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the binlog files");
                return;
            }
        };
        let files: Vec<(String, u64)> =
            logs.iter().filter_map(|row| Some((row.get::<String, _>(0)?, row.get::<u64, _>(1)?))).collect();
        let Some((last, last_size)) = files.last() else { return };
        let current = self.file.as_deref().unwrap_or(last.as_str());
        let behind: u64 = files
            .iter()
            .filter(|(name, _)| sluice_core::binlog_file_index(name) >= sluice_core::binlog_file_index(current))
            .map(|(name, size)| if name == current { size.saturating_sub(self.read_through) } else { *size })
            .sum();
        self.log.set_head(format!("{last}:{last_size}"), behind);
    }

    async fn handle(&mut self, event: BinlogEvent, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let header = event.header();
        self.read_through = u64::from(header.log_pos()).max(self.read_through);
        let kind = header.event_type_raw();
        // The stream parser keeps each event's CRC32 but does not check it.
        if let Some(stored) = event.checksum() {
            let computed = event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
            if computed != u32::from_le_bytes(stored) {
                return Err(SourceError::permanent(
                    format!(
                        "binlog event checksum mismatch in {} at offset {} (stored {:08x}, computed {computed:08x})",
                        self.file.as_deref().unwrap_or("?"),
                        header.log_pos(),
                        u32::from_le_bytes(stored)
                    ),
                    "the binlog or the network corrupted data; check the server's binlog with mariadb-binlog --verify-binlog-checksum",
                ));
            }
        }
        let offset = u64::from(header.log_pos()).saturating_sub(u64::from(header.event_size()));
        let time_us = i64::from(header.timestamp()) * 1_000_000;
        match kind {
            0x04 => {
                let rotate: RotateEvent<'_> = event.read_event().map_err(|e| unreadable("rotate event", e))?;
                let raw = rotate.name_raw();
                // The rotate the server sends first comes before the format
                // description, so the reader cannot know to strip its
                // 4-byte checksum; it is still there.
                let raw = match (self.format_seen, self.checksum, raw.len().checked_sub(4)) {
                    (false, true, Some(len)) => &raw[..len],
                    _ => raw,
                };
                let name = std::str::from_utf8(raw)
                    .ok()
                    .filter(|n| !n.is_empty() && !n.contains(':'))
                    .ok_or_else(|| unreadable("rotate event", "no readable binlog file name"))?;
                self.file = Some(name.into());
                self.read_through = rotate.position();
            }
            162 => {
                let gtid = maria_gtid(event.data(), header.server_id())
                    .ok_or_else(|| unreadable("GTID event", "too short"))?;
                let standalone = event.data().get(12).is_some_and(|flags| flags & 1 == 1);
                self.begin(offset, Some(gtid), gtid.to_string().into(), time_us, standalone);
            }
            0x21 => {
                let gtid: GtidEvent = event.read_event().map_err(|e| unreadable("GTID event", e))?;
                let tx_id = format!("{}:{}", uuid_text(&gtid.sid()), gtid.gno());
                self.begin(offset, None, tx_id.into(), time_us, false);
            }
            0x22 => self.begin(offset, None, self.offset_id(offset), time_us, false),
            0x02 => {
                let query: QueryEvent<'_> = event.read_event().map_err(|e| unreadable("query event", e))?;
                let sql = query.query().trim().to_string();
                let database = query.schema().to_string();
                let dialect = statement_dialect(&query);
                match sql.to_ascii_uppercase().as_str() {
                    "BEGIN" => {
                        if self.tx.is_none() {
                            self.begin(offset, None, self.offset_id(offset), time_us, false);
                        }
                    }
                    "COMMIT" => self.commit(out),
                    _ => {
                        if self.tx.is_none() {
                            self.begin(offset, None, self.offset_id(offset), time_us, true);
                        }
                        self.ddl(&database, &sql, dialect, out).await?;
                        if self.tx.as_ref().is_some_and(|t| t.standalone) {
                            self.commit(out);
                        }
                    }
                }
            }
            0x0f => self.format_seen = true,
            0x10 => self.commit(out),
            0x17..=0x19 | 0x1e..=0x20 => self.rows(&event, out).await?,
            0x27 => {
                return Err(SourceError::permanent(
                    "the binlog holds a partial JSON update, which has no full after image",
                    "SET GLOBAL binlog_row_value_options = '' on the server",
                ));
            }
            0x28 => {
                // MySQL compressed transactions: the stream decompresses them
                // and yields the events inside; one it cannot read is an error.
                event
                    .read_event::<TransactionPayloadEvent<'_>>()
                    .map_err(|e| unreadable("compressed transaction (binlog_transaction_compression)", e))?;
            }
            164 => {
                return Err(SourceError::permanent(
                    "the binlog is encrypted",
                    "Sluice cannot read encrypted binlogs; turn encrypt_binlog off",
                ));
            }
            165..=171 => {
                return Err(SourceError::permanent(
                    "the binlog holds MariaDB compressed events, which Sluice does not decode",
                    "SET GLOBAL log_bin_compress = OFF on the server (new binlog events are then readable)",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn offset_id(&self, offset: u64) -> Arc<str> {
        format!("{}:{offset}", self.file.as_deref().unwrap_or("?")).into()
    }

    fn begin(&mut self, offset: u64, gtid: Option<MariaGtid>, tx_id: Arc<str>, time_us: i64, standalone: bool) {
        let gtid_before =
            (!self.maria_state.is_empty() || gtid.is_some()).then(|| Arc::from(self.maria_state.to_string()));
        self.tx = Some(Transaction { offset, gtid, gtid_before, tx_id, time_us, seq: 0, standalone });
    }

    fn commit(&mut self, out: &mut Vec<Event>) {
        if let Some(mut last) = self.held.take() {
            last.tx_end = true;
            out.push(last);
        }
        if let Some(tx) = self.tx.take()
            && let Some(gtid) = tx.gtid
        {
            self.maria_state.apply(gtid);
        }
    }

    fn position(&mut self) -> Result<(Position, Arc<str>, i64), SourceError> {
        let file = self.file.clone().ok_or_else(|| unreadable("event", "a row before any rotate event"))?;
        let tx = self.tx.as_mut().ok_or_else(|| unreadable("event", "a row outside a transaction"))?;
        let position =
            Position::Mysql(BinlogPos { file, offset: tx.offset, seq: tx.seq, gtid_before: tx.gtid_before.clone() });
        tx.seq = tx.seq.saturating_add(1);
        Ok((position, tx.tx_id.clone(), tx.time_us))
    }

    fn emit(&mut self, event: Event, out: &mut Vec<Event>) {
        if let Some(previous) = self.held.replace(event) {
            out.push(previous);
        }
    }

    fn matches(&self, table: &str) -> bool {
        self.patterns.iter().any(|p| glob_match(p, table))
    }

    /// The schema of `database.table` at the current transaction; read
    /// live and recorded the first time a table is seen.
    async fn schema_at(
        &mut self,
        database: &str,
        table: &str,
        position: &Position,
    ) -> Result<Option<Arc<TableSchema>>, SourceError> {
        let name = format!("{database}.{table}");
        if !self.history.knows(&name) {
            let schema = read_schema(&mut self.schema_conn, database, table).await?;
            self.history.record(&name, position, schema)?;
        }
        Ok(self.history.at(&name, position))
    }

    /// A statement that is not an allow-listed table change (see
    /// [`ddl_targets`]) is dropped here, text and all: a `CREATE USER` or
    /// `GRANT` carries a password, and no captured table is changed by it.
    async fn ddl(
        &mut self,
        database: &str,
        sql: &str,
        dialect: Dialect,
        out: &mut Vec<Event>,
    ) -> Result<(), SourceError> {
        let mut targets: Vec<(String, String)> = Vec::new();
        for target in ddl_targets(database, sql, dialect) {
            if self.matches(&format!("{}.{}", target.0, target.1)) && !targets.contains(&target) {
                targets.push(target);
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let text = match self.ddl_literals {
            DdlLiterals::Redact => redact(sql, dialect),
            DdlLiterals::Keep => sql.to_string(),
        };
        let columns: Columns = ["database", "ddl"].iter().map(|c| Arc::from(*c)).collect();
        // One event per captured table the statement changes (both names
        // of a rename), each recording that table's schema after it.
        for (db, table) in targets {
            let name = format!("{db}.{table}");
            let (position, tx_id, time_us) = self.position()?;
            // Recorded once, when first read; a replay keeps the recorded schema.
            if !self.history.has_entry_at(&name, &position) {
                let schema = read_schema(&mut self.schema_conn, &db, &table).await?;
                self.history.record(&name, &position, schema)?;
            }
            let event = Event {
                op: Op::Schema,
                source_id: self.source_id.clone(),
                database: db.as_str().into(),
                table: name.into(),
                key: None,
                before: None,
                after: Some(Row { columns: columns.clone(), values: vec![Value::Text(db), Value::Text(text.clone())] }),
                schema_version: 0,
                position,
                tx_id,
                tx_end: false,
                commit_time_us: time_us,
            };
            self.emit(event, out);
        }
        Ok(())
    }

    async fn rows(&mut self, event: &BinlogEvent, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let data = event.read_data().map_err(|e| unreadable("rows event", e))?;
        let Some(EventData::RowsEvent(rows)) = data else { return Ok(()) };
        let tme: TableMapEvent<'static> = self
            .stream
            .get_tme(rows.table_id())
            .ok_or_else(|| unreadable("rows event", "no table map for its table id"))?
            .clone();
        let (database, table) = (tme.database_name().to_string(), tme.table_name().to_string());
        let name = format!("{database}.{table}");
        if !self.matches(&name) {
            return Ok(());
        }
        let op = match &rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => Op::Insert,
            RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => Op::Delete,
        };
        let probe = self.peek_position()?;
        let schema = self.schema_at(&database, &table, &probe).await?.ok_or_else(|| {
            SourceError::permanent(
                format!("rows for {name} arrived, but its schema history says the table did not exist then"),
                "if the binlog was reset (RESET MASTER) or the server replaced, run `sluice checkpoints reset --pipeline <name> --yes`, which resets the checkpoints and moves the schema history aside",
            )
        })?;
        let count = tme.columns_count() as usize;
        if count != schema.columns.len() {
            return Err(SourceError::permanent(
                format!(
                    "{name} has {count} columns in the binlog but {} in the recorded schema: the table changed before Sluice recorded it",
                    schema.columns.len()
                ),
                "reset this source's checkpoints and take a new snapshot so the schema is read at a known point",
            ));
        }
        let columns: Columns = schema.columns.iter().map(|c| Arc::from(c.name.as_str())).collect();
        let key_index: Vec<usize> = schema.columns.iter().enumerate().filter(|(_, c)| c.key).map(|(i, _)| i).collect();
        let key_columns: Columns = key_index.iter().map(|i| columns[*i].clone()).collect();
        let types: Vec<(mysql_async::consts::ColumnType, Vec<u8>)> = (0..count)
            .map(|i| {
                let ty =
                    tme.get_column_type(i).ok().flatten().unwrap_or(mysql_async::consts::ColumnType::MYSQL_TYPE_NULL);
                (ty, tme.get_column_metadata(i).unwrap_or_default().to_vec())
            })
            .collect();
        let convert_row = |row: &mysql_async::binlog::row::BinlogRow| -> Result<Row, SourceError> {
            let values = (0..count)
                .map(|i| match row.as_ref(i) {
                    Some(value) => convert(value, types[i].0, &types[i].1, &schema.columns[i], &name, &probe),
                    None => Ok(Value::Unchanged),
                })
                .collect::<Result<_, _>>()?;
            Ok(Row { columns: columns.clone(), values })
        };
        let fingerprint = schema_fingerprint(&schema);
        let mut decoded = Vec::new();
        for pair in rows.rows(&tme) {
            let (before, after) = pair.map_err(|e| unreadable("row", e))?;
            decoded.push((before.as_ref().map(convert_row).transpose()?, after.as_ref().map(convert_row).transpose()?));
        }
        for (before, after) in decoded {
            let (position, tx_id, time_us) = self.position()?;
            let image = after.as_ref().or(before.as_ref());
            let key = (!key_index.is_empty()).then(|| Row {
                columns: key_columns.clone(),
                values: key_index.iter().map(|i| image.map_or(Value::Null, |r| r.values[*i].clone())).collect(),
            });
            let event = Event {
                op,
                source_id: self.source_id.clone(),
                database: database.as_str().into(),
                table: name.as_str().into(),
                key,
                before,
                after,
                schema_version: fingerprint,
                position,
                tx_id,
                tx_end: false,
                commit_time_us: time_us,
            };
            self.emit(event, out);
        }
        Ok(())
    }

    /// The position the next event of the transaction will get.
    fn peek_position(&self) -> Result<Position, SourceError> {
        let file = self.file.clone().ok_or_else(|| unreadable("event", "a row before any rotate event"))?;
        let tx = self.tx.as_ref().ok_or_else(|| unreadable("event", "a row outside a transaction"))?;
        Ok(Position::Mysql(BinlogPos { file, offset: tx.offset, seq: tx.seq, gtid_before: tx.gtid_before.clone() }))
    }
}

/// MariaDB's GTID event body: sequence (8 bytes), domain (4), flags (1).
fn maria_gtid(data: &[u8], server: u32) -> Option<MariaGtid> {
    let seq = u64::from_le_bytes(data.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(data.get(8..12)?.try_into().ok()?);
    Some(MariaGtid { domain, server, seq })
}

fn uuid_text(sid: &[u8; 16]) -> String {
    let hex: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// A stable fingerprint of a table's columns, as the event's schema version.
pub(crate) fn schema_fingerprint(schema: &TableSchema) -> u32 {
    let mut hash: u32 = 0x811C_9DC5;
    for column in &schema.columns {
        for byte in
            column.name.bytes().chain([0]).chain(column.data_type.bytes()).chain([u8::from(column.unsigned), 0xFF])
        {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash
}

/// How the server split the statement into tokens: the two `sql_mode`
/// flags the query event logged with it. Without the status variable the
/// server's defaults hold.
fn statement_dialect(query: &QueryEvent<'_>) -> Dialect {
    use mysql_async::binlog::StatusVarKey;
    use mysql_async::binlog::events::StatusVarVal;
    use mysql_async::consts::SqlMode;
    let mode = query.status_vars().get_status_var(StatusVarKey::SqlMode).and_then(|var| match var.get_value() {
        Ok(StatusVarVal::SqlMode(flags)) => Some(flags.get()),
        _ => None,
    });
    match mode {
        Some(mode) => Dialect {
            ansi_quotes: mode.contains(SqlMode::MODE_ANSI_QUOTES),
            backslash_escapes: !mode.contains(SqlMode::MODE_NO_BACKSLASH_ESCAPES),
        },
        None => Dialect::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_bodies_and_uuids() {
        let mut body = 17u64.to_le_bytes().to_vec();
        body.extend(3u32.to_le_bytes());
        body.push(1);
        assert_eq!(maria_gtid(&body, 42), Some(MariaGtid { domain: 3, server: 42, seq: 17 }));
        assert_eq!(maria_gtid(&body[..5], 42), None);
        assert_eq!(uuid_text(&[0xab; 16]), "abababab-abab-abab-abab-abababababab");
    }
}
