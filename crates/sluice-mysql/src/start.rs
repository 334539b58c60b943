//! Starting the `mysql` source: check the server and list its binlog
//! files, plan (see [`sluice_core::source::plan`]), then act on the plan:
//! take or resume the initial snapshot, or stream, queuing re-reads.

use std::sync::Arc;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_config::{MysqlStart, SnapshotMode};
use sluice_core::snapshot::Run;
use sluice_core::snapshot::incremental::Incremental;
use sluice_core::source::ReaderHandle;
use sluice_core::source::plan::{self, InitialSnapshot, LogState, Notice, Refusal, SourceKind, StartInput, StartPlan};
use sluice_core::{AckWatermark, BinlogPos, Position, SnapshotPos, SourceError};
use tracing::{info, warn};

use crate::conn::connect;
use crate::errors::mysql_error;
use crate::incremental;
use crate::reader::Start;
use crate::schema::{TableSchema, record_at_start};
use crate::snapshot;
use crate::source::{MyStream, MysqlSource};

/// What the server check found.
pub(crate) struct Server {
    mariadb: bool,
    /// The binlog files the server still has.
    logs: Vec<String>,
}

impl Server {
    fn holds(&self, file: &str) -> bool {
        self.logs.iter().any(|l| l == file)
    }
}

/// `snapshot.mode` as the plan takes it.
fn plan_mode(mode: SnapshotMode) -> plan::SnapshotMode {
    plan::SnapshotMode::from_config(mode.initial(), mode == SnapshotMode::Always, mode == SnapshotMode::WhenNeeded)
}

fn purged(file: &str) -> SourceError {
    SourceError::permanent(
        format!(
            "binlog file {file} is gone from the server (purged); the changes it held since the checkpoint are lost"
        ),
        "reset this source's checkpoints with `sluice checkpoints reset --pipeline <name> --yes` (it also moves the schema history aside and starts a new log generation, so no sink skips the new log) and take a new snapshot; after a purge, keep binlogs longer (binlog_expire_logs_seconds) so it does not happen again",
    )
}

/// A refusal of the plan, in this source's words; `point` is where the
/// stream was to resume.
fn refused(refusal: Refusal, point: Option<&Position>) -> SourceError {
    match (refusal, point) {
        (Refusal::Foreign(err), _) => err,
        (Refusal::LogLost | Refusal::LogMissing, Some(Position::Mysql(pos))) => purged(&pos.file),
        (Refusal::LogLost | Refusal::LogMissing, _) => purged("?"),
    }
}

impl MysqlSource {
    /// [`Source::start`](sluice_core::Source::start). The server keeps
    /// binlogs by age and size, not by what readers confirmed, so there is
    /// nothing to acknowledge.
    pub(crate) async fn begin(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError> {
        let incremental = self.stream.open_incremental(from.as_ref())?;
        self.driver.restart(incremental);
        let highest = acked.highest_at_start();
        // A snapshot position says where the stream that follows it starts.
        let point =
            plan::stream_point(SourceKind::Mysql, from.as_ref(), highest.as_ref()).map_err(|r| refused(r, None))?;
        let mut conn = connect(&self.stream.config).await?;
        let server = self.stream.check_server(&mut conn, point.is_some()).await?;
        let plan = self.stream.plan(&server, from.as_ref(), highest.as_ref(), point.as_ref())?;
        plan.notices.iter().for_each(Notice::log);
        // Queued once streaming starts, after any initial snapshot left to read.
        self.stream.reread |= plan.reread;
        self.stream.started_once = true;
        // A configured start the server cannot serve stops the source now,
        // not after a snapshot.
        self.stream.start_at(&server, plan.stream_from.as_ref(), plan.recover)?;
        let resume = match plan.snapshot {
            InitialSnapshot::None => {
                let incremental = self.driver.incremental();
                let reader = self.stream.open(conn, &server, plan.stream_from, plan.recover, incremental).await?;
                self.driver.streaming(reader);
                return Ok(());
            }
            InitialSnapshot::Fresh => None,
            InitialSnapshot::Resume(pos) => Some(pos),
        };
        let (run, stream_from) = self.stream.snapshot_run(conn, server.mariadb, plan.stream_from, resume).await?;
        self.driver.snapshotting(run, None, Some(stream_from.to_string()), stream_from);
        Ok(())
    }
}

impl MyStream {
    fn plan(
        &self,
        server: &Server,
        from: Option<&Position>,
        highest: Option<&Position>,
        point: Option<&Position>,
    ) -> Result<StartPlan, SourceError> {
        // A GTID start needs no file; any other start needs the checkpoint's file.
        let by_gtid = |pos: &BinlogPos| pos.gtid_before.is_some() && self.config.gtid && server.mariadb;
        let log = match point {
            Some(Position::Mysql(pos)) if !by_gtid(pos) && !server.holds(&pos.file) => LogState::Lost,
            _ => LogState::Held,
        };
        plan::plan_start(&StartInput {
            kind: SourceKind::Mysql,
            checkpoint: from,
            highest_at_start: highest,
            mode: plan_mode(self.config.snapshot.mode),
            started_once: self.started_once,
            log,
        })
        .map_err(|r| refused(r, point))
    }

    /// Streams from the point an initial snapshot was taken at; its
    /// binlog file may have been purged while the snapshot was read.
    pub(crate) async fn stream_after_snapshot(
        &mut self,
        stream_from: Position,
        incremental: Option<&mut Incremental<incremental::Reader>>,
    ) -> Result<ReaderHandle, SourceError> {
        let mut conn = connect(&self.config).await?;
        let server = self.check_server(&mut conn, true).await?;
        let plan = self.plan(&server, Some(&stream_from), None, Some(&stream_from))?;
        self.open(conn, &server, Some(stream_from), plan.recover, incremental).await
    }

    /// Checks that the server logs row changes in full and is the one the
    /// checkpoints came from, and lists its binlog files.
    async fn check_server(&self, conn: &mut Conn, has_checkpoint: bool) -> Result<Server, SourceError> {
        let q = |e| mysql_error("server check", e);
        let (server_id, version) = check_binlog(conn).await?;
        let mariadb = version.contains("MariaDB");
        let identity = if mariadb {
            format!("mariadb server_id={server_id}")
        } else {
            let uuid: Option<String> = conn.query_first("SELECT @@server_uuid").await.map_err(q)?;
            format!("mysql server_uuid={}", uuid.unwrap_or_default())
        };
        self.check_identity(&identity, has_checkpoint)?;
        let logs: Vec<String> = conn
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| row.get::<String, usize>(0).unwrap_or_default())
            .await
            .map_err(q)?;
        Ok(Server { mariadb, logs })
    }

    /// Where in the binlog to stream from; `None` for the server's head.
    /// `from` is a binlog position or none: the plan refused the others.
    fn start_at(&self, server: &Server, from: Option<&Position>, recover: bool) -> Result<Option<Start>, SourceError> {
        if let Some(Position::Mysql(pos)) = from {
            return Ok(match (&pos.gtid_before, self.config.gtid && server.mariadb) {
                (Some(state), true) => Some(Start::Gtid(state.to_string())),
                _ if recover => None,
                _ => Some(Start::File { file: pos.file.to_string(), offset: pos.offset }),
            });
        }
        match &self.config.start {
            MysqlStart::Current => Ok(None),
            MysqlStart::Position { file, offset } if server.holds(file) => {
                Ok(Some(Start::File { file: file.clone(), offset: *offset }))
            }
            MysqlStart::Position { file, .. } => Err(purged(file)),
            MysqlStart::Gtid(_) if !server.mariadb => Err(SourceError::permanent(
                "start.gtid takes a MariaDB GTID state, and this server is MySQL",
                "start from a file and offset",
            )),
            MysqlStart::Gtid(state) => Ok(Some(Start::Gtid(state.clone()))),
        }
    }

    /// Streams the binlog from `from` (or the configured start), or from
    /// now when `recover`ing from a purged checkpoint.
    async fn open(
        &mut self,
        mut conn: Conn,
        server: &Server,
        from: Option<Position>,
        recover: bool,
        incremental: Option<&mut Incremental<incremental::Reader>>,
    ) -> Result<ReaderHandle, SourceError> {
        let start = match self.start_at(server, from.as_ref(), recover)? {
            Some(start) => start,
            None => {
                let ((file, offset), schemas) = head_with_schemas(&mut conn, &self.config.tables).await?;
                let at = Position::Mysql(BinlogPos { file: file.as_str().into(), offset, seq: 0, gtid_before: None });
                record_at_start(&self.state_dir, &at, schemas, recover)?;
                Start::File { file, offset }
            }
        };
        if recover && let Some(Position::Mysql(pos)) = &from {
            warn!(
                file = %pos.file,
                "the checkpoint's binlog file was purged; snapshot.mode when_needed: streaming from now and re-reading every table"
            );
        }
        if recover || std::mem::take(&mut self.reread) {
            let incremental = incremental.ok_or_else(|| {
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
        self.spawn_reader(conn, server.mariadb, start).await
    }

    /// Takes a new snapshot (`resume` is `None`) or goes on with one;
    /// `from` is then the stream position it was taken at. Returns the
    /// run and where the stream follows it.
    async fn snapshot_run(
        &self,
        mut conn: Conn,
        mariadb: bool,
        from: Option<Position>,
        resume: Option<SnapshotPos>,
    ) -> Result<(Run, Position), SourceError> {
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
                BinlogPos { file: point.file.into(), offset: point.offset, seq: 0, gtid_before }
            }
            (None, Some(Position::Mysql(pos))) => pos,
            (None, _) => {
                return Err(SourceError::transient("a resumed snapshot has no binlog position to stream from"));
            }
        };
        if resume.is_none() {
            // Read before the point and again after it: the same columns
            // held at the point, where the stream's history must begin.
            let schemas = captured_schemas(&mut conn, &self.config.tables).await?;
            let read: Vec<(&str, &TableSchema)> = plans.iter().map(|plan| (&*plan.name, &plan.schema)).collect();
            let signal = self.config.signal_table.as_deref();
            if !schemas.iter().filter(|(name, _)| Some(name.as_str()) != signal).map(|(n, s)| (n.as_str(), s)).eq(read)
            {
                return Err(SourceError::transient(
                    "a captured table was created, dropped or altered while the snapshot point was taken; taking it again",
                ));
            }
            record_at_start(&self.state_dir, &Position::Mysql(stream_from.clone()), schemas, false)?;
        }
        let _ = conn.disconnect().await;
        let stream_file = stream_from.file.to_string();
        let stream_from = Position::Mysql(stream_from);
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
            stream_file,
            repair: self.config.snapshot.mode == SnapshotMode::WhenNeeded,
            started_us: sluice_core::time::now_us(),
        };
        let run = snapshot::spawn(settings, self.config.clone(), conns, plans, resume);
        Ok((run, stream_from))
    }

    fn check_identity(&self, identity: &str, has_checkpoint: bool) -> Result<(), SourceError> {
        const NAME: &str = "server_identity";
        let io = |e: sluice_core::StoreError| {
            SourceError::permanent(
                format!("{}: {e}", self.state_dir.locate(NAME)),
                "check the checkpoint store (the disk of --data-dir, or the store's database)",
            )
        };
        let stored = self.state_dir.read(NAME).map_err(io)?.map(|b| String::from_utf8_lossy(&b).into_owned());
        match stored {
            Some(stored) if stored.trim() == identity => Ok(()),
            Some(stored) if has_checkpoint => Err(SourceError::permanent(
                format!(
                    "the server is now {identity:?}, but the checkpoints were taken on {:?}: its binlog positions mean nothing here",
                    stored.trim()
                ),
                "point the source back at the original server, or reset this source's checkpoints and take a new snapshot",
            )),
            _ => self.state_dir.write(NAME, identity.as_bytes()).map_err(io),
        }
    }
}

/// Each table the patterns match, by name, with its schema now.
async fn captured_schemas(conn: &mut Conn, patterns: &[String]) -> Result<Vec<(String, TableSchema)>, SourceError> {
    let plans = snapshot::plan_tables(conn, patterns).await?;
    Ok(plans.into_iter().map(|plan| (plan.name.to_string(), plan.schema)).collect())
}

/// The server's binlog head, with each captured table's schema there:
/// read before and after the head, and the same both times.
async fn head_with_schemas(
    conn: &mut Conn,
    patterns: &[String],
) -> Result<((String, u64), Vec<(String, TableSchema)>), SourceError> {
    for _ in 0..5 {
        let before = captured_schemas(conn, patterns).await?;
        let head = current(conn).await?;
        if captured_schemas(conn, patterns).await? == before {
            return Ok((head, before));
        }
    }
    Err(SourceError::transient("the captured tables kept changing while the stream's start was taken"))
}

/// The server's binlog head.
async fn current(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    let status: Option<mysql_async::Row> =
        conn.query_first("SHOW MASTER STATUS").await.map_err(|e| mysql_error("server check", e))?;
    let status = status
        .ok_or_else(|| SourceError::permanent("SHOW MASTER STATUS returned nothing", "enable log_bin on the server"))?;
    Ok((status.get(0).unwrap_or_default(), status.get(1).unwrap_or(4)))
}

/// Checks that the server logs row changes in full; gives its server_id
/// and version.
pub(crate) async fn check_binlog(conn: &mut Conn) -> Result<(u32, String), SourceError> {
    let row: Option<(String, String, String, u32, String)> = conn
        .query_first("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, @@version")
        .await
        .map_err(|e| mysql_error("server check", e))?;
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
    Ok((server_id, version))
}
