//! The initial snapshot: the rows already in the tables, read before the
//! stream, as op `r` events.
//!
//! ```text
//! CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT ─► consistent point C, snapshot S
//!   reader per table (≤ max_parallel_tables): SET TRANSACTION SNAPSHOT S,
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

pub(crate) mod plan;

use sluice_core::sync::lock;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::snapshot::{
    Chunk, ChunkSender, KeyPart, LogGuard, Pieces, ResumeKey, Run, SnapshotTable, TableReader, decode_key,
    encode_key_into, push_key_int,
};
use sluice_core::{CompactString, Event, Op, Position, Row, SnapshotPos, SourceError, Value};
use tokio::sync::mpsc;
use tracing::warn;

use crate::catalog::{quote_literal, slot_state, source_error};
use crate::types::decode_owned;
use crate::wire::{ConnectParams, Connection};
pub use plan::{Order, TablePlan, plan_table};

pub struct Settings {
    pub params: ConnectParams,
    pub source_id: Arc<str>,
    pub database: Arc<str>,
    pub chunk_size: u64,
    /// Where the stream after the snapshot starts (the slot's consistent point).
    pub stream_from: Arc<str>,
    pub slot: String,
    /// `snapshot.mode: when_needed`: a lost slot restarts the source, which
    /// then streams from a new slot and re-reads the tables.
    pub repair: bool,
    /// The exported snapshot to read in; `None` when resuming.
    pub import: Option<String>,
    /// Stamped on every row as its commit time: when the snapshot began.
    pub started_us: i64,
}

/// Starts reading `tables` with `parallel` connections at a time.
pub fn spawn(settings: Settings, parallel: usize, tables: Vec<TablePlan>, resume: Option<SnapshotPos>) -> Run {
    let settings = Arc::new(settings);
    let readers = (0..parallel.max(1)).map(|_| Reader { settings: settings.clone() }).collect();
    let guard = SlotGuard { settings: settings.clone(), previous: Default::default() };
    Run::spawn(settings.source_id.clone(), readers, tables, resume, Arc::new(guard))
}

impl SnapshotTable for TablePlan {
    fn name(&self) -> &Arc<str> {
        &self.read_name
    }

    fn estimated_rows(&self) -> u64 {
        self.estimated_rows
    }
}

/// Reads a table on a connection of its own, inside the exported snapshot.
struct Reader {
    settings: Arc<Settings>,
}

#[async_trait]
impl TableReader for Reader {
    type Table = TablePlan;

    async fn read(&mut self, table: &TablePlan, after: ResumeKey, out: &ChunkSender) -> Result<(), SourceError> {
        read_table(&self.settings, table, after, out).await
    }
}

struct SlotGuard {
    settings: Arc<Settings>,
    /// The slot's safe WAL size at the previous check, to see how fast it
    /// shrinks; and whether the warning was given.
    previous: std::sync::Mutex<(Option<(std::time::Instant, i64)>, bool)>,
}

#[async_trait]
impl LogGuard for SlotGuard {
    async fn check(&self, eta: Option<Duration>) -> Result<(), SourceError> {
        let Some(safe) = check_slot(&self.settings).await? else { return Ok(()) };
        let mut previous = lock(&self.previous);
        let now = std::time::Instant::now();
        if let (Some((then, before)), Some(eta), false) = (previous.0, eta, previous.1) {
            let rate = (before - safe) as f64 / now.duration_since(then).as_secs_f64().max(0.001);
            if rate > 0.0 && rate * eta.as_secs_f64() > safe as f64 {
                previous.1 = true;
                warn!(
                    slot = self.settings.slot,
                    safe_wal_bytes = safe,
                    wal_bytes_per_sec = rate.round() as u64,
                    eta_secs = eta.as_secs(),
                    "at this write rate the server invalidates the slot (max_slot_wal_keep_size) before the snapshot ends; raise max_slot_wal_keep_size"
                );
            }
        }
        previous.0 = Some((now, safe));
        Ok(())
    }
}

/// The stream must start at the snapshot's point: a slot that is gone or
/// lost WAL cannot give it, and streaming from elsewhere would leave a gap.
/// Returns the slot's safe WAL size, when the server limits it.
async fn check_slot(settings: &Settings) -> Result<Option<i64>, SourceError> {
    let mut conn =
        Connection::connect(&settings.params, false).await.map_err(|e| source_error("snapshot slot check", e))?;
    let state = slot_state(&mut conn, &settings.slot, &settings.params.database).await;
    conn.close().await;
    let state = state?;
    let error = if state.lost {
        crate::catalog::SlotState::lost_error(&settings.slot)
    } else if !state.exists {
        SourceError::permanent(
            format!(
                "replication slot {:?} disappeared during the snapshot: the changes after the snapshot point are gone",
                settings.slot
            ),
            "reset this pipeline's checkpoints with `sluice checkpoints reset` and start again; a new snapshot is taken",
        )
    } else {
        return Ok(state.safe_wal_bytes);
    };
    if settings.repair {
        return Err(SourceError::transient(format!(
            "{error}; snapshot.mode when_needed: restarting the source to stream from a new slot and re-read the tables"
        )));
    }
    Err(error)
}

fn snapshot_error(table: &TablePlan, e: crate::wire::PgError) -> SourceError {
    source_error(&format!("snapshot of {}", table.read_name), e)
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
                    table.read_name
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
    // A chunk's query lasts as long as the sinks take to take its rows,
    // and the transaction as long as the table: limits a role or database
    // sets for ordinary sessions would end the snapshot part way.
    conn.simple_query("SET LOCAL statement_timeout = 0; SET LOCAL idle_in_transaction_session_timeout = 0")
        .await
        .map_err(|e| snapshot_error(table, e))?;
    let tx_id: Arc<str> = Arc::from("snapshot");
    let mut pieces = Pieces::new(queue);
    // Each row's encoded key is built here, then copied into the row's
    // position: one allocation per row.
    let mut encoded = Vec::new();
    match &table.order {
        Order::Key(key) => loop {
            let sql = table.key_chunk_sql(key, after.as_deref(), settings.chunk_size);
            let mut rows = conn.query_rows(&sql).await.map_err(|e| snapshot_error(table, e))?;
            let mut read = 0;
            while let Some(row) = rows.next().await.map_err(|e| snapshot_error(table, e))? {
                read += 1;
                let parts: Option<Vec<KeyPart>> = key
                    .iter()
                    .map(|k| row.get(k.index)?.as_deref().and_then(|text| plan::key_part(k.kind, text)))
                    .collect();
                let parts = parts.ok_or_else(|| bad_key(table))?;
                encoded.clear();
                encode_key_into(&parts, &mut encoded);
                let event = event(settings, table, &tx_id, encoded.as_slice().into(), row);
                after = Some(parts);
                if !pieces.push(event).await {
                    return Ok(());
                }
            }
            if read < settings.chunk_size {
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
                let mut rows = conn.query_rows(&sql).await.map_err(|e| snapshot_error(table, e))?;
                while let Some(mut row) = rows.next().await.map_err(|e| snapshot_error(table, e))? {
                    let ctid = row.first().cloned().flatten().as_deref().and_then(plan::parse_ctid);
                    let (block, offset) = ctid.ok_or_else(|| bad_key(table))?;
                    row.remove(0);
                    encoded.clear();
                    push_key_int(&mut encoded, block as i64);
                    push_key_int(&mut encoded, offset as i64);
                    if !pieces.push(event(settings, table, &tx_id, encoded.as_slice().into(), row)).await {
                        return Ok(());
                    }
                }
                first += pages_per_chunk;
            }
        }
    }
    if !pieces.send().await {
        return Ok(());
    }
    conn.simple_query("COMMIT").await.map_err(|e| snapshot_error(table, e))?;
    conn.close().await;
    Ok(())
}

fn bad_key(table: &TablePlan) -> SourceError {
    SourceError::permanent(
        format!("snapshot of {}: a row's key came back in a form Sluice cannot order", table.read_name),
        "report this with the table definition",
    )
}

/// A row's values as the stream shows them, and its replica identity.
pub fn row_values(table: &TablePlan, row: Vec<Option<CompactString>>) -> (Row, Option<Row>) {
    let values: Vec<Value> =
        row.into_iter().zip(&table.types).map(|(text, ty)| text.map_or(Value::Null, |t| decode_owned(ty, t))).collect();
    let key = (!table.identity.is_empty()).then(|| Row {
        columns: table.identity_columns.clone(),
        values: table.identity.iter().map(|i| values.get(*i).cloned().unwrap_or(Value::Null)).collect(),
    });
    (Row { columns: table.columns.clone(), values }, key)
}

fn event(
    settings: &Settings,
    table: &TablePlan,
    tx_id: &Arc<str>,
    key: Arc<[u8]>,
    row: Vec<Option<CompactString>>,
) -> Event {
    let (after, key_row) = row_values(table, row);
    Event {
        op: Op::Read,
        source_id: settings.source_id.clone(),
        database: settings.database.clone(),
        table: table.event_name.clone(),
        key: key_row,
        before: None,
        after: Some(after),
        schema_version: table.fingerprint,
        position: Position::Snapshot(SnapshotPos {
            table: table.read_name.clone(),
            key,
            stream_from: settings.stream_from.clone(),
        }),
        tx_id: tx_id.clone(),
        tx_end: true,
        commit_time_us: settings.started_us,
        schema: Some(table.schema.clone()),
        origin: sluice_core::schema::Origin::Snapshot(sluice_core::schema::SnapshotMark::Row),
        route: None,
        shape: Default::default(),
    }
}
