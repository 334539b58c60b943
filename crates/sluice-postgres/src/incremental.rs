//! Incremental snapshots: one table re-read while streaming goes on,
//! asked for by a signal in the WAL (`sluice snapshot --table T`).
//!
//! ```text
//! signal ─► for each chunk: emit low watermark ─► SELECT next rows by key
//!                           ─► emit high watermark
//! stream:  … low … changes to the table (their keys leave the chunk) … high
//!                                            └─► rest of the chunk as op r
//! ```
//!
//! A row the stream changes between the watermarks may have been read
//! before or after the change, so it is dropped from the chunk: the stream
//! carries it in its newer state. Every other row of the chunk is as the
//! database held it at the high watermark, so the chunk goes out there, at
//! the high watermark's commit position, and no row is ever emitted stale
//! after a newer change. The rows' positions are stream positions, so each
//! sink's checkpoint and dedup work as for any change.
//!
//! The rows are not in the WAL: after a crash the chunks a sink may lack
//! are read again, from the last chunk every sink holds (kept in a state
//! file next to the checkpoints), at new positions further on.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_config::PostgresConfig;
use sluice_core::snapshot::{KeyPart, decode_key, encode_key, hex, unhex};
use sluice_core::{Event, Op, Position, Row, SourceError, Value};
use tracing::{info, warn};

use crate::catalog::{quote_literal, source_error};
use crate::snapshot::{Order, TablePlan, plan_table, row_values};
use crate::wire::{ConnectParams, Connection};

/// The prefix of the messages that ask for an incremental snapshot.
pub const SIGNAL_PREFIX: &str = "sluice_signal";
/// The prefix of the watermark messages around each chunk read.
pub const WATERMARK_PREFIX: &str = "sluice_watermark";

/// What a signal asks for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Signal {
    pub source: String,
    pub table: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The signal position last taken: a replayed signal at or before it
    /// is not a new request.
    last_signal: Option<String>,
    /// Tables asked for and not done yet, the first one being read.
    queue: VecDeque<Table>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Table {
    name: String,
    /// Chunks handed on: the position of each one's high watermark and the
    /// key (hex) of its last row read.
    chunks: Vec<(String, String)>,
}

pub struct Incremental {
    params: ConnectParams,
    source_id: Arc<str>,
    chunk_size: u64,
    path: PathBuf,
    state: State,
    active: Option<Active>,
}

/// The table being read, on its own connection.
struct Active {
    plan: TablePlan,
    conn: Connection,
    /// Tells this process's watermarks from replayed ones of an earlier run.
    run: String,
    chunk: u64,
    after: Option<Vec<KeyPart>>,
    pending: Option<Pending>,
}

/// A chunk read, waiting for its high watermark.
struct Pending {
    low_seen: bool,
    rows: Vec<(String, Row, Option<Row>)>,
    changed: HashSet<String>,
    last: Option<Vec<KeyPart>>,
    full: bool,
}

fn state_error(path: &std::path::Path, detail: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(
        format!("incremental snapshot state {}: {detail}", path.display()),
        "check the disk of --data-dir; if the file is damaged, move it away (the snapshots it lists stop)",
    )
}

/// A key as text, to compare a stream event's key with a chunk row's.
fn key_text(key: &Row) -> String {
    serde_json::to_string(&key.values).unwrap_or_default()
}

/// Asks the running pipeline of `config` to re-read `table`: checks that
/// the table can be read by key, then writes the signal into the WAL,
/// where the pipeline finds it (now, or when it next runs).
pub async fn request(config: &PostgresConfig, table: &str) -> Result<Position, SourceError> {
    let params = crate::connect_params(config);
    let mut conn = Connection::connect(&params, false)
        .await
        .map_err(|e| source_error(&format!("connection to {} as {:?}", params.addr(), params.user), e))?;
    let version = crate::catalog::check_server(&mut conn, &config.user).await?;
    if version < 140_000 {
        return Err(SourceError::permanent(
            "incremental snapshots need PostgreSQL 14 or later (logical decoding messages in pgoutput)",
            "upgrade the server, or take a new initial snapshot with `sluice checkpoints reset`",
        ));
    }
    let (schema, name) = table.split_once('.').ok_or_else(|| {
        SourceError::permanent(
            format!("{table:?} is not schema.table"),
            "name the table as schema.table, e.g. public.orders",
        )
    })?;
    let plan = plan_table(&mut conn, schema, name, config.snapshot.chunk_size).await?;
    match plan {
        Some(plan) if matches!(plan.order, Order::Key(_)) => {}
        Some(_) => {
            return Err(SourceError::permanent(
                format!("{table} has no primary key of integers, text, uuid or bytea to read it by"),
                "an incremental snapshot reads by key; add a primary key, or take a new initial snapshot",
            ));
        }
        None => {
            return Err(SourceError::permanent(
                format!("{table} does not exist, or is a partitioned table"),
                "name an existing table (for a partitioned one, each partition)",
            ));
        }
    }
    let signal = serde_json::to_string(&Signal { source: config.id.clone(), table: table.to_string() })
        .map_err(|e| SourceError::permanent(format!("signal: {e}"), "report this"))?;
    let rows = conn
        .simple_query(&format!(
            "SELECT pg_logical_emit_message(true, {}, {})",
            quote_literal(SIGNAL_PREFIX),
            quote_literal(&signal)
        ))
        .await
        .map_err(|e| source_error("writing the snapshot signal", e))?;
    conn.close().await;
    let lsn = rows.rows.first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default();
    Ok(Position::Postgres { commit_lsn: lsn.parse().unwrap_or(sluice_core::Lsn(0)), seq: 0 })
}

impl Incremental {
    /// Loads the state; `acked` is where the stream restarts (the lowest
    /// checkpoint), so chunks past it are read again.
    pub fn open(
        params: ConnectParams,
        source_id: Arc<str>,
        chunk_size: u64,
        path: PathBuf,
        acked: Option<&Position>,
    ) -> Result<Self, SourceError> {
        let mut state: State = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| state_error(&path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(state_error(&path, e)),
        };
        if let Some(table) = state.queue.front_mut() {
            let held = |chunk: &(String, String)| {
                let position: Option<Position> = chunk.0.parse().ok();
                matches!((position, acked), (Some(p), Some(a)) if p <= *a)
            };
            let keep = table.chunks.iter().take_while(|c| held(c)).count();
            if keep < table.chunks.len() {
                info!(
                    table = table.name,
                    chunks_kept = keep,
                    chunks_again = table.chunks.len() - keep,
                    "incremental snapshot resumes after the last chunk every sink holds"
                );
            }
            table.chunks.truncate(keep);
        }
        Ok(Self { params, source_id, chunk_size, path, state, active: None })
    }

    fn save(&self) -> Result<(), SourceError> {
        let bytes = serde_json::to_vec(&self.state).map_err(|e| state_error(&self.path, e))?;
        let tmp = self.path.with_extension("tmp");
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| state_error(&self.path, e))?;
        }
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| state_error(&self.path, e))
    }

    /// Passes `events` on to `out`, taking out signals and watermarks and
    /// putting each chunk's rows in at its high watermark.
    pub async fn filter(&mut self, events: Vec<Event>, out: &mut Vec<Event>) -> Result<(), SourceError> {
        if self.active.is_none() && !self.state.queue.is_empty() {
            self.activate().await?;
        }
        for event in events {
            if event.op == Op::Message && &*event.table == SIGNAL_PREFIX {
                self.signal(&event).await?;
                continue;
            }
            if event.op == Op::Message && &*event.table == WATERMARK_PREFIX {
                self.watermark(&event, out).await?;
                continue;
            }
            if let Some(active) = self.active.as_mut().filter(|a| a.plan.name == event.table)
                && let Some(pending) = active.pending.as_mut().filter(|p| p.low_seen)
                && let Some(key) = &event.key
            {
                pending.changed.insert(key_text(key));
                if let Some(before) = &event.before {
                    pending.changed.insert(key_text(&project(before, &key.columns)));
                }
            }
            out.push(event);
        }
        Ok(())
    }

    async fn signal(&mut self, event: &Event) -> Result<(), SourceError> {
        let position = event.position.to_string();
        let seen = self.state.last_signal.as_ref().and_then(|p| p.parse::<Position>().ok());
        if seen.is_some_and(|p| event.position <= p) {
            return Ok(());
        }
        let content = match event.after.as_ref().and_then(|r| r.values.get(1)) {
            Some(Value::Text(text)) => text.clone(),
            _ => String::new(),
        };
        let signal: Signal = match serde_json::from_str(&content) {
            Ok(signal) => signal,
            Err(e) => {
                warn!(content, error = %e, "an incremental snapshot signal that is not {{\"source\":..., \"table\":...}}: ignored");
                return Ok(());
            }
        };
        if signal.source != *self.source_id {
            return Ok(());
        }
        self.state.last_signal = Some(position);
        if self.state.queue.iter().any(|t| t.name == signal.table) {
            info!(table = signal.table, "incremental snapshot asked for again while queued or running: once is enough");
        } else {
            info!(table = signal.table, "incremental snapshot asked for");
            self.state.queue.push_back(Table { name: signal.table, chunks: Vec::new() });
        }
        self.save()?;
        if self.active.is_none() {
            self.activate().await?;
        }
        Ok(())
    }

    /// Starts reading the first queued table, after its last chunk held.
    async fn activate(&mut self) -> Result<(), SourceError> {
        while let Some(table) = self.state.queue.front().cloned() {
            let mut conn = Connection::connect(&self.params, false)
                .await
                .map_err(|e| source_error("incremental snapshot connection", e))?;
            let (schema, name) = table.name.split_once('.').unwrap_or(("public", &table.name));
            let plan = plan_table(&mut conn, schema, name, self.chunk_size).await?;
            let Some(plan) = plan.filter(|p| matches!(p.order, Order::Key(_))) else {
                warn!(
                    table = table.name,
                    "incremental snapshot refused: the table does not exist, is partitioned, or has no primary key Sluice can order by"
                );
                self.state.queue.pop_front();
                self.save()?;
                conn.close().await;
                continue;
            };
            let after = match table.chunks.last() {
                Some((_, key)) => {
                    Some(unhex(key).and_then(|k| decode_key(&k, &plan.key_kinds())).ok_or_else(|| {
                        state_error(
                            &self.path,
                            format!("the key of {}'s last chunk does not fit the table", table.name),
                        )
                    })?)
                }
                None => None,
            };
            info!(table = table.name, resume = after.is_some(), "incremental snapshot starting");
            let run = format!("{:x}", sluice_core::time::now_us());
            self.active = Some(Active { plan, conn, run, chunk: table.chunks.len() as u64, after, pending: None });
            return self.read_chunk().await;
        }
        Ok(())
    }

    /// Low watermark, the next rows by key, high watermark.
    async fn read_chunk(&mut self) -> Result<(), SourceError> {
        let Some(active) = self.active.as_mut() else { return Ok(()) };
        let Order::Key(key) = &active.plan.order else { return Ok(()) };
        let mark = |side: &str| {
            format!(
                "SELECT pg_logical_emit_message(true, {}, {})",
                quote_literal(WATERMARK_PREFIX),
                quote_literal(&format!("{}:{}:{side}", active.run, active.chunk))
            )
        };
        let error = |e| source_error(&format!("incremental snapshot of {}", active.plan.name), e);
        let (low, high) = (mark("low"), mark("high"));
        active.conn.simple_query(&low).await.map_err(error)?;
        let sql = active.plan.key_chunk_sql(key, active.after.as_deref(), self.chunk_size);
        let result = active.conn.simple_query(&sql).await.map_err(error)?;
        active.conn.simple_query(&high).await.map_err(error)?;
        let full = result.rows.len() as u64 >= self.chunk_size;
        let mut rows = Vec::with_capacity(result.rows.len());
        let mut last = None;
        for row in result.rows {
            let parts: Option<Vec<KeyPart>> = key
                .iter()
                .map(|k| row.get(k.index)?.as_deref().and_then(|t| crate::snapshot::plan::key_part(k.kind, t)))
                .collect();
            let (after, key_row) = row_values(&active.plan, &row);
            let text = key_row.as_ref().map(key_text).unwrap_or_default();
            rows.push((text, after, key_row));
            last = parts;
        }
        active.pending = Some(Pending { low_seen: false, rows, changed: HashSet::new(), last, full });
        Ok(())
    }

    async fn watermark(&mut self, event: &Event, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let content = match event.after.as_ref().and_then(|r| r.values.get(1)) {
            Some(Value::Text(text)) => text.clone(),
            _ => return Ok(()),
        };
        let Some(active) = self.active.as_mut() else { return Ok(()) };
        let ours = format!("{}:{}:", active.run, active.chunk);
        let Some(side) = content.strip_prefix(&ours) else { return Ok(()) };
        let Some(pending) = active.pending.as_mut() else { return Ok(()) };
        if side == "low" {
            pending.low_seen = true;
            return Ok(());
        }
        let Position::Postgres { commit_lsn, .. } = event.position else { return Ok(()) };
        let Some(pending) = active.pending.take() else { return Ok(()) };
        let kept: Vec<_> = pending.rows.into_iter().filter(|(key, _, _)| !pending.changed.contains(key)).collect();
        let count = kept.len();
        let tx_id: Arc<str> = Arc::from("snapshot");
        for (seq, (_, after, key)) in kept.into_iter().enumerate() {
            out.push(Event {
                op: Op::Read,
                source_id: event.source_id.clone(),
                database: event.database.clone(),
                table: active.plan.name.clone(),
                key,
                before: None,
                after: Some(after),
                schema_version: active.plan.fingerprint,
                position: Position::Postgres { commit_lsn, seq: seq as u32 },
                tx_id: tx_id.clone(),
                tx_end: seq + 1 == count,
                commit_time_us: event.commit_time_us,
            });
        }
        let name = active.plan.name.to_string();
        if let Some(last) = pending.last {
            let key = hex(&encode_key(&last));
            if let Some(table) = self.state.queue.front_mut() {
                let at = Position::Postgres { commit_lsn, seq: count.saturating_sub(1) as u32 };
                table.chunks.push((at.to_string(), key));
            }
            active.after = Some(last);
        }
        active.chunk += 1;
        if pending.full {
            self.save()?;
            return self.read_chunk().await;
        }
        info!(table = name, chunks = active.chunk, "incremental snapshot done");
        if let Some(active) = self.active.take() {
            active.conn.close().await;
        }
        self.state.queue.pop_front();
        self.save()?;
        self.activate().await
    }
}

/// The values of `columns` in `row`.
fn project(row: &Row, columns: &[Arc<str>]) -> Row {
    let values = columns
        .iter()
        .map(|c| row.columns.iter().position(|n| n == c).map_or(Value::Null, |i| row.values[i].clone()))
        .collect();
    Row { columns: columns.iter().cloned().collect(), values }
}
