//! Incremental snapshots of PostgreSQL tables (the algorithm is in
//! [`sluice_core::snapshot::incremental`]): signals and watermarks are
//! transactional logical decoding messages, so they need no table and
//! arrive in the stream in commit order; chunks are read by primary key on
//! a connection of their own, in READ COMMITTED.

use std::sync::Arc;

use async_trait::async_trait;
use sluice_config::PostgresConfig;
use sluice_core::snapshot::incremental::{ChunkReader, ChunkRows, Mark, Signal, text_at};
use sluice_core::snapshot::{KeyPart, decode_key, encode_key};
use sluice_core::{Event, Op, Position, SourceError};

use crate::catalog::{quote_literal, source_error};
use crate::snapshot::{Order, TablePlan, plan_table, row_values};
use crate::wire::{ConnectParams, Connection};

/// The prefix of the messages that ask for an incremental snapshot.
pub const SIGNAL_PREFIX: &str = "sluice_signal";
/// The prefix of the watermark messages around each chunk read.
pub const WATERMARK_PREFIX: &str = "sluice_watermark";

/// Recognises signals and watermarks among the stream's events.
pub fn mark(event: &Event) -> Option<Mark> {
    if event.op != Op::Message {
        return None;
    }
    let content = text_at(event, 1).unwrap_or_default().to_string();
    match &*event.table {
        SIGNAL_PREFIX => Some(Mark::Signal(content)),
        WATERMARK_PREFIX => Some(Mark::Watermark(content)),
        _ => None,
    }
}

/// Reads one table by key for the incremental snapshot.
pub struct Reader {
    params: ConnectParams,
    source_id: Arc<str>,
    database: Arc<str>,
    chunk_size: u64,
    open: Option<(TablePlan, Connection, Option<Vec<KeyPart>>)>,
}

impl Reader {
    pub fn new(params: ConnectParams, source_id: &str, database: &str, chunk_size: u64) -> Self {
        Self { params, source_id: source_id.into(), database: database.into(), chunk_size, open: None }
    }
}

#[async_trait]
impl ChunkReader for Reader {
    async fn open(&mut self, table: &str, after: Option<&[u8]>) -> Result<Result<(), String>, SourceError> {
        if let Some((_, conn, _)) = self.open.take() {
            conn.close().await;
        }
        let mut conn = Connection::connect(&self.params, false)
            .await
            .map_err(|e| source_error("incremental snapshot connection", e))?;
        let (schema, name) = table.split_once('.').unwrap_or(("public", table));
        let plan = match plan_table(&mut conn, schema, name, self.chunk_size).await {
            Ok(Some(plan)) if matches!(plan.order, Order::Key(_)) => plan,
            Ok(_) => return Ok(Err("the table is gone, partitioned, or has no primary key to read it by".into())),
            Err(e) => return Ok(Err(e.to_string())),
        };
        let after = match after {
            Some(key) => match decode_key(key, &plan.key_kinds()) {
                Some(parts) => Some(parts),
                None => return Ok(Err("its primary key changed since the last chunk".into())),
            },
            None => None,
        };
        self.open = Some((plan, conn, after));
        Ok(Ok(()))
    }

    async fn read_chunk(&mut self, low: &str, high: &str) -> Result<ChunkRows, SourceError> {
        let Some((plan, conn, after)) = self.open.as_mut() else {
            return Err(SourceError::transient("incremental snapshot read before its table was opened"));
        };
        let Order::Key(key) = &plan.order else { return Err(SourceError::transient("table without a key")) };
        let mark = |content: &str| {
            format!(
                "SELECT pg_logical_emit_message(true, {}, {})",
                quote_literal(WATERMARK_PREFIX),
                quote_literal(content)
            )
        };
        let error = |e| source_error(&format!("incremental snapshot of {}", plan.name), e);
        conn.simple_query(&mark(low)).await.map_err(error)?;
        let result =
            conn.simple_query(&plan.key_chunk_sql(key, after.as_deref(), self.chunk_size)).await.map_err(error)?;
        conn.simple_query(&mark(high)).await.map_err(error)?;
        let full = result.rows.len() as u64 >= self.chunk_size;
        let mut rows = Vec::with_capacity(result.rows.len());
        for row in result.rows {
            let parts: Option<Vec<KeyPart>> = key
                .iter()
                .map(|k| row.get(k.index)?.as_deref().and_then(|t| crate::snapshot::plan::key_part(k.kind, t)))
                .collect();
            let (values, key_row) = row_values(plan, &row);
            rows.push(Event {
                op: Op::Read,
                source_id: self.source_id.clone(),
                database: self.database.clone(),
                table: plan.name.clone(),
                key: key_row,
                before: None,
                after: Some(values),
                schema_version: plan.fingerprint,
                position: Position::Postgres { commit_lsn: sluice_core::Lsn(0), seq: 0 },
                tx_id: Arc::from("snapshot"),
                tx_end: false,
                commit_time_us: 0,
            });
            if parts.is_some() {
                *after = parts;
            }
        }
        Ok(ChunkRows { rows, last_key: after.as_ref().map(|p| encode_key(p)), full })
    }
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
