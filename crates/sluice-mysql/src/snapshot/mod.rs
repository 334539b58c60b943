//! The initial snapshot: the rows already in the tables, read before the
//! binlog stream, as op `r` events.
//!
//! ```text
//! N connections, each START TRANSACTION WITH CONSISTENT SNAPSHOT at one instant
//!   + the binlog position (and MariaDB GTID state) of that instant = point P
//!   reader per connection takes tables in name order, key-ordered chunks
//!   ─► queue per table ─► emitter, table by table ─► poll() … then binlog from P
//! ```
//!
//! Every connection reads the database as of P, so the stream from P holds
//! exactly the changes after the rows. Taking P:
//! - MariaDB with one reader: no lock at all. The server reports the binlog
//!   position of a consistent snapshot (`binlog_snapshot_file/position`).
//! - Otherwise: `FLUSH TABLES WITH READ LOCK` is held while the readers
//!   open their snapshots and the position is read, then released. It
//!   blocks commits for those few milliseconds, but it waits for running
//!   statements first, and writes queue behind it meanwhile.
//!
//! Rows carry snapshot positions (table, then the row's ordinal in the
//! table's read and its key), which order before every binlog position. A
//! restart mid-snapshot resumes after the lowest checkpoint's key, in a new
//! snapshot and without a lock: rows changed since P may be read in their
//! newer state, and the stream from P replays those changes after them, so
//! the rows replayed by key still end in the database's state.
//!
//! The binlog file at P must survive the snapshot: the guard checks every
//! 10 s that it is still on the server, and warns when the snapshot looks
//! set to outlast the server's binlog retention.

mod plan;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_config::MysqlConfig;
use sluice_core::snapshot::{
    ChunkSender, KeyKind, KeyPart, LogGuard, Pieces, ResumeKey, Run, TableReader, decode_key, push_key_bytes,
    push_key_int,
};
use sluice_core::{Event, Op, Position, Row, SnapshotPos, SourceError, Value};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::conn::connect;
use crate::errors::mysql_error;
use crate::text_values::text_value_as;
pub use plan::{TablePlan, plan_table, plan_tables, quote_ident, table_names};

pub struct Settings {
    pub source_id: Arc<str>,
    pub chunk_size: u64,
    /// Where the stream after the snapshot starts, as a position's text.
    pub stream_from: Arc<str>,
    /// The binlog file of `stream_from`, which must outlive the snapshot.
    pub stream_file: String,
    /// `snapshot.mode: when_needed`: a purged file restarts the source,
    /// which then streams from now and re-reads the tables.
    pub repair: bool,
    /// Stamped on every row as its commit time: when the snapshot began.
    pub started_us: i64,
}

/// The binlog position a fresh snapshot matches.
pub struct Point {
    pub file: String,
    pub offset: u64,
}

/// Opens `readers` connections, each in a transaction on the same
/// consistent snapshot; with `take_point`, also the binlog position the
/// snapshot matches (else each reader's snapshot is simply of now).
pub async fn open_readers(
    config: &MysqlConfig,
    readers: usize,
    mariadb: bool,
    take_point: bool,
) -> Result<(Vec<Conn>, Option<Point>), SourceError> {
    let mut conns = Vec::with_capacity(readers);
    for _ in 0..readers.max(1) {
        let mut conn = connect(config).await?;
        // UTC, so TIMESTAMP reads as the binlog's UTC instant; no
        // NO_BACKSLASH_ESCAPES, so key literals escape one known way.
        // Rows are taken as fast as the sinks take them, so the server may
        // wait on a full socket as long as a sink is slow: the default
        // net_write_timeout (60 s) would drop the reader mid-chunk.
        for statement in [
            "SET NAMES utf8mb4, time_zone = '+00:00', sql_mode = '', net_write_timeout = 31536000",
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        ] {
            conn.query_drop(statement).await.map_err(|e| mysql_error("snapshot session", e))?;
        }
        conns.push(conn);
    }
    let begin = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";
    let begin_error = |e| mysql_error("snapshot transaction", e);
    if !take_point {
        for conn in &mut conns {
            conn.query_drop(begin).await.map_err(begin_error)?;
        }
        return Ok((conns, None));
    }
    if mariadb && conns.len() == 1 {
        conns[0].query_drop(begin).await.map_err(begin_error)?;
        let status: Vec<(String, String)> =
            conns[0].query("SHOW STATUS LIKE 'binlog_snapshot_%'").await.map_err(begin_error)?;
        let get = |name: &str| status.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        let file = get("binlog_snapshot_file").filter(|f| !f.is_empty());
        let offset = get("binlog_snapshot_position").and_then(|p| p.parse().ok());
        let (Some(file), Some(offset)) = (file, offset) else {
            return Err(SourceError::permanent(
                "the server gave no binlog position for the snapshot (binlog_snapshot_file is empty)",
                "enable log_bin on the server",
            ));
        };
        info!(file, offset, lock = "none", "snapshot point taken");
        return Ok((conns, Some(Point { file, offset })));
    }
    let mut lock = connect(config).await?;
    let locked = Instant::now();
    lock.query_drop("FLUSH TABLES WITH READ LOCK").await.map_err(|e| match &e {
        mysql_async::Error::Server(server) if server.code == 1227 || server.code == 1045 => SourceError::permanent(
            format!("FLUSH TABLES WITH READ LOCK was refused: {e}"),
            "GRANT RELOAD ON *.* to the user, so the snapshot can fix its binlog position; on MariaDB, snapshot.max_parallel_tables: 1 needs no lock",
        ),
        _ => mysql_error("FLUSH TABLES WITH READ LOCK", e),
    })?;
    let taken = async {
        for conn in &mut conns {
            conn.query_drop(begin).await.map_err(begin_error)?;
        }
        let status: Option<mysql_async::Row> = lock.query_first("SHOW MASTER STATUS").await.map_err(begin_error)?;
        let status = status.ok_or_else(|| {
            SourceError::permanent("SHOW MASTER STATUS returned nothing", "enable log_bin on the server")
        })?;
        Ok::<_, SourceError>(Point { file: status.get(0).unwrap_or_default(), offset: status.get(1).unwrap_or(4) })
    }
    .await;
    let unlocked = lock.query_drop("UNLOCK TABLES").await;
    let held_ms = locked.elapsed().as_millis() as u64;
    drop(lock);
    let point = taken?;
    unlocked.map_err(|e| mysql_error("UNLOCK TABLES", e))?;
    info!(
        file = point.file,
        offset = point.offset,
        lock = "FLUSH TABLES WITH READ LOCK",
        held_ms,
        "snapshot point taken"
    );
    Ok((conns, Some(point)))
}

/// Starts reading `tables` on the connections `open_readers` gave.
pub fn spawn(
    settings: Settings,
    config: MysqlConfig,
    conns: Vec<Conn>,
    tables: Vec<TablePlan>,
    resume: Option<SnapshotPos>,
) -> Run {
    let settings = Arc::new(settings);
    let tx_id: Arc<str> = Arc::from("snapshot");
    let readers =
        conns.into_iter().map(|conn| Reader { conn, settings: settings.clone(), tx_id: tx_id.clone() }).collect();
    let guard = Arc::new(BinlogGuard { config, settings: settings.clone(), warned: Default::default() });
    Run::spawn(settings.source_id.clone(), readers, tables, resume, guard)
}

/// Reads tables one after another on one connection, in its snapshot.
struct Reader {
    conn: Conn,
    settings: Arc<Settings>,
    /// Every snapshot row's transaction id, shared.
    tx_id: Arc<str>,
}

fn snapshot_error(table: &TablePlan, e: mysql_async::Error) -> SourceError {
    mysql_error(&format!("snapshot of {}", table.name), e)
}

fn bad_checkpoint(table: &TablePlan) -> SourceError {
    SourceError::permanent(
        format!("the checkpoint's snapshot key does not fit table {}'s key: did its primary key change?", table.name),
        "reset this pipeline's checkpoints with `sluice checkpoints reset` to take the snapshot again",
    )
}

#[async_trait]
impl TableReader for Reader {
    type Table = TablePlan;

    async fn read(&mut self, table: &TablePlan, after: ResumeKey, out: &ChunkSender) -> Result<(), SourceError> {
        // A row's key is its ordinal in the table's read, then its key
        // columns as the server wrote them: ordinals order the positions
        // whatever the key's collation, and the columns say where to resume.
        let kinds: Vec<KeyKind> =
            std::iter::once(KeyKind::Int).chain(table.order.iter().map(|_| KeyKind::Bytes)).collect();
        let (mut ordinal, mut last) = match after {
            Some(key) => {
                let parts = decode_key(&key, &kinds).ok_or_else(|| bad_checkpoint(table))?;
                let mut parts = parts.into_iter();
                let Some(KeyPart::Int(ordinal)) = parts.next() else { return Err(bad_checkpoint(table)) };
                let key: Vec<Vec<u8>> =
                    parts.filter_map(|p| if let KeyPart::Bytes(b) = p { Some(b) } else { None }).collect();
                (ordinal, (!key.is_empty()).then_some(key))
            }
            None => (0, None),
        };
        let settings = self.settings.clone();
        let tx_id = self.tx_id.clone();
        let chunk_size = settings.chunk_size;
        // Each row's encoded key is built here, then copied into the row's
        // position: one allocation per row.
        let mut key = Vec::new();
        let mut pieces = Pieces::new(out);
        if table.order.is_empty() {
            // No primary key: one pass; a resume skips the rows already
            // read, which is exact only if the table did not change since.
            let skip = ordinal;
            let mut result = self.conn.query_iter(table.whole_sql()).await.map_err(|e| snapshot_error(table, e))?;
            let mut read: i64 = 0;
            while let Some(row) = result.next().await.map_err(|e| snapshot_error(table, e))? {
                read += 1;
                if read <= skip {
                    continue;
                }
                let values = row.unwrap();
                key.clear();
                push_key_int(&mut key, read);
                if !pieces.push(event(&settings, &tx_id, table, key.as_slice().into(), &values)).await {
                    return Ok(());
                }
            }
            pieces.send().await;
            return Ok(());
        }
        loop {
            let sql = table.chunk_sql(last.as_deref(), chunk_size);
            // Row by row as the server sends them: the server goes on
            // producing while these are turned into events.
            let mut rows = self.conn.query_iter(sql).await.map_err(|e| snapshot_error(table, e))?;
            let mut read = 0;
            let mut last_row = None;
            while let Some(row) = rows.next().await.map_err(|e| snapshot_error(table, e))? {
                read += 1;
                let values = row.unwrap();
                ordinal += 1;
                key.clear();
                push_key_int(&mut key, ordinal);
                for index in &table.order {
                    let Some(mysql_async::Value::Bytes(bytes)) = values.get(*index) else {
                        return Err(SourceError::permanent(
                            format!("snapshot of {}: a primary key value came back NULL or not as text", table.name),
                            "report this with the table definition",
                        ));
                    };
                    push_key_bytes(&mut key, bytes);
                }
                let event = event(&settings, &tx_id, table, key.as_slice().into(), &values);
                last_row = Some(values);
                if !pieces.push(event).await {
                    return Ok(());
                }
            }
            // Only the chunk's last key is needed, to go on after it.
            if let Some(row) = last_row {
                last = table.key_of(&row);
            }
            if read < chunk_size {
                pieces.send().await;
                return Ok(());
            }
        }
    }
}

/// A row's values as the binlog shows them, and its primary key.
pub fn row_values(table: &TablePlan, row: &[mysql_async::Value]) -> (Row, Option<Row>) {
    let values: Vec<Value> = row
        .iter()
        .zip(&table.schema.columns)
        .zip(&table.kinds)
        .map(|((v, info), kind)| text_value_as(v, *kind, info))
        .collect();
    let key = (!table.identity.is_empty()).then(|| Row {
        columns: table.identity_columns.clone(),
        values: table.identity.iter().map(|i| values.get(*i).cloned().unwrap_or(Value::Null)).collect(),
    });
    (Row { columns: table.columns.clone(), values }, key)
}

fn event(
    settings: &Settings,
    tx_id: &Arc<str>,
    table: &TablePlan,
    key: Arc<[u8]>,
    row: &[mysql_async::Value],
) -> Event {
    let (after, key_row) = row_values(table, row);
    Event {
        op: Op::Read,
        source_id: settings.source_id.clone(),
        database: table.database.clone(),
        table: table.name.clone(),
        key: key_row,
        before: None,
        after: Some(after),
        schema_version: table.fingerprint,
        position: Position::Snapshot(SnapshotPos {
            table: table.name.clone(),
            key,
            stream_from: settings.stream_from.clone(),
        }),
        tx_id: tx_id.clone(),
        tx_end: true,
        commit_time_us: settings.started_us,
        schema: Some(table.declared.clone()),
        origin: sluice_core::schema::Origin::Snapshot(sluice_core::schema::SnapshotMark::Row),
        route: None,
        shape: Default::default(),
    }
}

/// Stops the snapshot once the binlog file the stream must start from is
/// gone, and warns once when the snapshot looks set to outlast retention.
struct BinlogGuard {
    config: MysqlConfig,
    settings: Arc<Settings>,
    warned: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl LogGuard for BinlogGuard {
    async fn check(&self, eta: Option<Duration>) -> Result<(), SourceError> {
        let mut conn = connect(&self.config).await?;
        let q = |e| mysql_error("snapshot binlog check", e);
        let logs: Vec<String> = conn
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| row.get::<String, usize>(0).unwrap_or_default())
            .await
            .map_err(q)?;
        let file = &self.settings.stream_file;
        if !logs.iter().any(|l| l == file) && self.settings.repair {
            return Err(SourceError::transient(format!(
                "binlog file {file}, where streaming must start after the snapshot, was purged during the snapshot; snapshot.mode when_needed: restarting the source to stream from now and re-read the tables"
            )));
        }
        if !logs.iter().any(|l| l == file) {
            return Err(SourceError::permanent(
                format!(
                    "binlog file {file}, where streaming must start after the snapshot, was purged during the snapshot: the changes since the snapshot point are gone"
                ),
                "keep binlogs longer than the snapshot takes (binlog_expire_logs_seconds), then reset this pipeline's checkpoints with `sluice checkpoints reset` and start again",
            ));
        }
        // Read as text: the types differ by server (expire_logs_days is a
        // decimal on MariaDB), and an older server lacks the first one.
        let retention: Option<mysql_async::Row> =
            conn.query_first("SELECT @@binlog_expire_logs_seconds, @@expire_logs_days").await.unwrap_or(None);
        let _ = conn.disconnect().await;
        let number = |i: usize| -> f64 {
            let text = retention.as_ref().and_then(|r| r.get_opt::<String, usize>(i)).and_then(Result::ok);
            text.and_then(|t| t.parse().ok()).unwrap_or(0.0)
        };
        let retention_secs = match (number(0), number(1)) {
            (secs, _) if secs > 0.0 => secs as u64,
            (_, days) if days > 0.0 => (days * 86_400.0) as u64,
            _ => return Ok(()),
        };
        if let Some(eta) = eta
            && eta.as_secs() > retention_secs / 2
            && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            warn!(
                eta_secs = eta.as_secs(),
                retention_secs,
                file,
                "the snapshot may outlast binlog retention: if {file} is purged before it ends, the pipeline stops; raise binlog_expire_logs_seconds"
            );
        }
        Ok(())
    }
}
