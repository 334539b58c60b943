//! The initial snapshot: the rows already in the tables, read before the
//! stream, as op `r` events.
//!
//! ```text
//! CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT ─► consistent point C, snapshot S
//!   worker per table (≤ max_parallel_tables): SET TRANSACTION SNAPSHOT S,
//!   key-ordered chunks ─► bounded queue per table ─► emitter, table by table
//!   ─► poll() … then START_REPLICATION from C on the same connection
//! ```
//!
//! Every worker reads inside the snapshot the slot was created with, so
//! the rows are exactly the database as of C, and the stream from C holds
//! exactly the changes after them. Rows carry snapshot positions (table,
//! then key), which order before every log position. A restart mid-snapshot
//! resumes after the lowest checkpoint's key, in a new snapshot: rows
//! changed since C may then be read in their newer state, and the stream
//! from C replays those changes after them, so the rows replayed by key
//! still end in the database's state. The slot is not acknowledged during
//! the snapshot, so C stays available; the emitter checks every 10 s that
//! the slot still exists and has not lost WAL.

mod plan;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::snapshot::{KeyPart, decode_key, encode_key};
use sluice_core::{Event, Op, Position, Row, SnapshotPos, SourceError, Value};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::info;

use crate::catalog::{quote_literal, slot_state, source_error};
use crate::types::decode_text;
use crate::wire::{ConnectParams, Connection};
pub use plan::{Order, TablePlan, plan_table};

/// How often the emitter logs progress and checks the slot.
const CHECK_EVERY: Duration = Duration::from_secs(10);
/// Chunks a worker may read ahead of the emitter.
const READ_AHEAD: usize = 2;

pub struct Settings {
    pub params: ConnectParams,
    pub source_id: Arc<str>,
    pub database: Arc<str>,
    pub chunk_size: u64,
    pub parallel: usize,
    /// Where the stream after the snapshot starts (the slot's consistent point).
    pub stream_from: Arc<str>,
    pub slot: String,
    /// The exported snapshot to read in; `None` when resuming.
    pub import: Option<String>,
    /// Stamped on every row as its commit time: when the snapshot began.
    pub started_us: i64,
}

type Chunk = Result<Vec<Event>, SourceError>;

/// A running snapshot; its events come out in position order.
pub struct Run {
    events: mpsc::Receiver<Chunk>,
    tasks: JoinSet<()>,
}

impl Run {
    pub fn spawn(settings: Settings, tables: Vec<TablePlan>, resume: Option<SnapshotPos>) -> Run {
        let (tx, events) = mpsc::channel(READ_AHEAD);
        let mut tasks = JoinSet::new();
        let settings = Arc::new(settings);
        let mut queues = Vec::new();
        let mut jobs = Vec::new();
        for table in tables {
            let table = Arc::new(table);
            if resume.as_ref().is_some_and(|r| *table.name < *r.table) {
                continue;
            }
            let after = resume.as_ref().filter(|r| r.table == table.name).map(|r| r.key.clone());
            let (queue_tx, queue_rx) = mpsc::channel(READ_AHEAD);
            jobs.push((table.clone(), after, queue_tx));
            queues.push((table, queue_rx));
        }
        tasks.spawn(start_workers(settings.clone(), jobs));
        tasks.spawn(emit(settings, queues, tx));
        Run { events, tasks }
    }

    /// The next rows; `None` once every table is read.
    pub async fn next(&mut self) -> Option<Chunk> {
        self.events.recv().await
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

type Job = (Arc<TablePlan>, Option<Arc<[u8]>>, mpsc::Sender<Chunk>);

/// Starts a worker per table, in table order, at most `parallel` at a
/// time. The order matters: the emitter drains tables in order, and a
/// later table holding a permit while the earliest waits for one would
/// fill its queue and stall the snapshot for good.
async fn start_workers(settings: Arc<Settings>, jobs: Vec<Job>) {
    let permits = Arc::new(Semaphore::new(settings.parallel.max(1)));
    let mut workers = JoinSet::new();
    for (table, after, queue) in jobs {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let settings = settings.clone();
        workers.spawn(async move {
            if let Err(err) = read_table(&settings, &table, after, &queue).await {
                let _ = queue.send(Err(err)).await;
            }
            drop(permit);
        });
    }
    // Dropping the set would abort the workers still reading.
    while workers.join_next().await.is_some() {}
}

/// Forwards each table's rows in table order, logs progress and guards the slot.
async fn emit(settings: Arc<Settings>, queues: Vec<(Arc<TablePlan>, mpsc::Receiver<Chunk>)>, out: mpsc::Sender<Chunk>) {
    let mut checked = Instant::now();
    let total = queues.len();
    for (done, (table, mut queue)) in queues.into_iter().enumerate() {
        let started = Instant::now();
        let mut rows: u64 = 0;
        while let Some(chunk) = queue.recv().await {
            let failed = chunk.is_err();
            rows += chunk.as_ref().map_or(0, |events| events.len() as u64);
            if out.send(chunk).await.is_err() || failed {
                return;
            }
            if checked.elapsed() >= CHECK_EVERY {
                checked = Instant::now();
                progress(&table, rows, started, "snapshot progress");
                if let Err(err) = check_slot(&settings).await {
                    let _ = out.send(Err(err)).await;
                    return;
                }
            }
        }
        progress(&table, rows, started, "snapshot of table done");
        info!(tables_done = done + 1, tables = total, "snapshot progress over all tables");
        if let Err(err) = check_slot(&settings).await {
            let _ = out.send(Err(err)).await;
            return;
        }
    }
}

fn progress(table: &TablePlan, rows: u64, started: Instant, message: &'static str) {
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
    // An estimate of 0 means the table was never analyzed: no ETA.
    let left = table.estimated_rows.saturating_sub(rows);
    let eta_secs = if rate > 0.0 { (left as f64 / rate).round() as u64 } else { 0 };
    info!(
        table = %table.name,
        rows,
        estimated_rows = table.estimated_rows,
        rows_per_sec = rate.round() as u64,
        eta_secs,
        message
    );
}

/// The stream must start at the snapshot's point: a slot that is gone or
/// lost WAL cannot give it, and streaming from elsewhere would leave a gap.
async fn check_slot(settings: &Settings) -> Result<(), SourceError> {
    let mut conn =
        Connection::connect(&settings.params, false).await.map_err(|e| source_error("snapshot slot check", e))?;
    let state = slot_state(&mut conn, &settings.slot, &settings.params.database).await;
    conn.close().await;
    if !state?.exists {
        return Err(SourceError::permanent(
            format!(
                "replication slot {:?} disappeared during the snapshot: the changes after the snapshot point are gone",
                settings.slot
            ),
            "reset this pipeline's checkpoints with `sluice checkpoints reset` and start again; a new snapshot is taken",
        ));
    }
    Ok(())
}

fn snapshot_error(table: &TablePlan, e: crate::wire::PgError) -> SourceError {
    source_error(&format!("snapshot of {}", table.name), e)
}

async fn read_table(
    settings: &Settings,
    table: &TablePlan,
    after: Option<Arc<[u8]>>,
    queue: &mpsc::Sender<Chunk>,
) -> Result<(), SourceError> {
    let mut after: Option<Vec<KeyPart>> = match after {
        Some(key) => Some(decode_key(&key, &table.key_kinds()).ok_or_else(|| {
            SourceError::permanent(
                format!(
                    "the checkpoint's snapshot key does not fit table {}'s key: did its primary key change?",
                    table.name
                ),
                "reset this pipeline's checkpoints with `sluice checkpoints reset` to take the snapshot again",
            )
        })?),
        None => None,
    };
    let mut conn = Connection::connect(&settings.params, false).await.map_err(|e| snapshot_error(table, e))?;
    conn.simple_query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await
        .map_err(|e| snapshot_error(table, e))?;
    if let Some(name) = &settings.import {
        conn.simple_query(&format!("SET TRANSACTION SNAPSHOT {}", quote_literal(name)))
            .await
            .map_err(|e| snapshot_error(table, e))?;
    }
    let tx_id: Arc<str> = Arc::from("snapshot");
    match &table.order {
        Order::Key(key) => loop {
            let sql = table.key_chunk_sql(key, after.as_deref(), settings.chunk_size);
            let rows = conn.simple_query(&sql).await.map_err(|e| snapshot_error(table, e))?;
            let full = rows.rows.len() as u64 >= settings.chunk_size;
            let mut events = Vec::with_capacity(rows.rows.len());
            for row in rows.rows {
                let parts: Option<Vec<KeyPart>> = key
                    .iter()
                    .map(|k| row.get(k.index)?.as_deref().and_then(|text| plan::key_part(k.kind, text)))
                    .collect();
                let parts = parts.ok_or_else(|| bad_key(table))?;
                events.push(event(settings, table, &tx_id, encode_key(&parts), row));
                after = Some(parts);
            }
            if !events.is_empty() && queue.send(Ok(events)).await.is_err() {
                return Ok(());
            }
            if !full {
                break;
            }
        },
        Order::Ctid { pages, pages_per_chunk } => {
            let mut resume = after.as_deref().and_then(|parts| match parts {
                [KeyPart::Int(block), KeyPart::Int(offset)] => Some((*block as u64, *offset as u64)),
                _ => None,
            });
            let mut first = resume.map_or(0, |(block, _)| block);
            while first < *pages {
                let sql = table.ctid_chunk_sql(first, *pages_per_chunk, resume.take());
                let rows = conn.simple_query(&sql).await.map_err(|e| snapshot_error(table, e))?;
                let mut events = Vec::with_capacity(rows.rows.len());
                for mut row in rows.rows {
                    let ctid = row.first().cloned().flatten().as_deref().and_then(plan::parse_ctid);
                    let (block, offset) = ctid.ok_or_else(|| bad_key(table))?;
                    row.remove(0);
                    let key = encode_key(&[KeyPart::Int(block as i64), KeyPart::Int(offset as i64)]);
                    events.push(event(settings, table, &tx_id, key, row));
                }
                if !events.is_empty() && queue.send(Ok(events)).await.is_err() {
                    return Ok(());
                }
                first += pages_per_chunk;
            }
        }
    }
    conn.simple_query("COMMIT").await.map_err(|e| snapshot_error(table, e))?;
    conn.close().await;
    Ok(())
}

fn bad_key(table: &TablePlan) -> SourceError {
    SourceError::permanent(
        format!("snapshot of {}: a row's key came back in a form Sluice cannot order", table.name),
        "report this with the table definition",
    )
}

fn event(settings: &Settings, table: &TablePlan, tx_id: &Arc<str>, key: Vec<u8>, row: Vec<Option<String>>) -> Event {
    let values: Vec<Value> = row
        .iter()
        .zip(&table.types)
        .map(|(text, ty)| text.as_deref().map_or(Value::Null, |t| decode_text(ty, t)))
        .collect();
    let key_row = (!table.identity.is_empty()).then(|| Row {
        columns: table.identity_columns.clone(),
        values: table.identity.iter().map(|i| values.get(*i).cloned().unwrap_or(Value::Null)).collect(),
    });
    Event {
        op: Op::Read,
        source_id: settings.source_id.clone(),
        database: settings.database.clone(),
        table: table.name.clone(),
        key: key_row,
        before: None,
        after: Some(Row { columns: table.columns.clone(), values }),
        schema_version: table.fingerprint,
        position: Position::Snapshot(SnapshotPos {
            table: table.name.clone(),
            key: key.into(),
            stream_from: settings.stream_from.clone(),
        }),
        tx_id: tx_id.clone(),
        tx_end: true,
        commit_time_us: settings.started_us,
    }
}
