//! Incremental snapshots of PostgreSQL tables (the algorithm is in
//! [`sluice_core::snapshot::incremental`]): signals and watermarks are
//! transactional logical decoding messages, so they need no table and
//! arrive in the stream in commit order; chunks are read by primary key on
//! a connection of their own, each in a REPEATABLE READ transaction whose
//! snapshot tells which transactions the read could not see.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_config::PostgresConfig;
use sluice_core::snapshot::incremental::{ChunkReader, ChunkRows, Mark, Signal, text_at};
use sluice_core::snapshot::{KeyPart, decode_key, encode_key};
use sluice_core::{Event, Op, Position, SourceError};

use crate::catalog::{quote_literal, source_error};
use crate::pgoutput::{SIGNAL_PREFIX, WATERMARK_PREFIX};
use crate::snapshot::{Order, TablePlan, plan_table, row_values};
use crate::wire::{ConnectParams, Connection};

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
    /// The snapshot of the last chunk's read.
    read_view: Option<ReadView>,
}

impl Reader {
    pub fn new(params: ConnectParams, source_id: &str, database: &str, chunk_size: u64) -> Self {
        Self { params, source_id: source_id.into(), database: database.into(), chunk_size, open: None, read_view: None }
    }
}

/// How long a chunk's read waits for the transactions the stream handed
/// on to become visible; they are committed, so this is a moment unless
/// the server is starved.
const VISIBLE_WAIT: Duration = Duration::from_secs(10);

/// The snapshot `pg_current_snapshot()` gives after `begin` (empty, or a
/// BEGIN that makes it the snapshot of the queries after it), for a read
/// of `table`.
async fn read_view(conn: &mut Connection, begin: &str, table: &str) -> Result<ReadView, SourceError> {
    let rows = conn
        .simple_query(&format!("{begin}SELECT pg_current_snapshot()::text"))
        .await
        .map_err(|e| source_error(&format!("incremental snapshot of {table}"), e))?;
    let text = rows.rows.first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default();
    ReadView::parse(&text).ok_or_else(|| {
        SourceError::transient(format!("incremental snapshot of {table}: pg_current_snapshot() gave {text:?}"))
    })
}

/// Which transactions a snapshot sees, from `pg_current_snapshot()` as
/// text (`xmin:xmax:xip,...`), cut to the 32-bit ids pgoutput carries.
///
/// A commit is in the WAL before the server takes the transaction out of
/// its running set, so a chunk read just after the low watermark may miss
/// a transaction whose commit is before the watermark in the stream. The
/// snapshot names every such transaction: it is still running to it.
#[derive(Debug)]
struct ReadView {
    xmin: u32,
    xmax: u32,
    running: HashSet<u32>,
}

impl ReadView {
    fn parse(text: &str) -> Option<Self> {
        let low32 = |part: &str| part.parse::<u64>().ok().map(|xid| xid as u32);
        let mut parts = text.trim().split(':');
        let xmin = low32(parts.next()?)?;
        let xmax = low32(parts.next()?)?;
        let running = match parts.next()? {
            "" => HashSet::new(),
            list => list.split(',').map(low32).collect::<Option<_>>()?,
        };
        Some(Self { xmin, xmax, running })
    }

    /// Transaction ids wrap around: `a` is at or after `b` when it is less
    /// than half the id space ahead.
    fn sees(&self, xid: u32) -> bool {
        let at_or_after = |a: u32, b: u32| a.wrapping_sub(b) as i32 >= 0;
        !at_or_after(xid, self.xmax) && (!at_or_after(xid, self.xmin) || !self.running.contains(&xid))
    }
}

#[async_trait]
impl ChunkReader for Reader {
    async fn open(&mut self, table: &str, after: Option<&[u8]>) -> Result<Result<u64, String>, SourceError> {
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
        let estimated_rows = plan.estimated_rows;
        self.open = Some((plan, conn, after));
        Ok(Ok(estimated_rows))
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
        let error = |e| source_error(&format!("incremental snapshot of {}", plan.read_name), e);
        conn.simple_query(&mark(low)).await.map_err(error)?;
        self.read_view =
            Some(read_view(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; ", &plan.read_name).await?);
        let result =
            conn.simple_query(&plan.key_chunk_sql(key, after.as_deref(), self.chunk_size)).await.map_err(error)?;
        conn.simple_query("COMMIT").await.map_err(error)?;
        conn.simple_query(&mark(high)).await.map_err(error)?;
        let full = result.rows.len() as u64 >= self.chunk_size;
        let mut rows = Vec::with_capacity(result.rows.len());
        for row in result.rows {
            let parts: Option<Vec<KeyPart>> = key
                .iter()
                .map(|k| row.get(k.index)?.as_deref().and_then(|t| crate::snapshot::plan::key_part(k.kind, t)))
                .collect();
            let (values, key_row) = row_values(plan, row.into_iter().map(|v| v.map(Into::into)).collect());
            rows.push(Event {
                op: Op::Read,
                source_id: self.source_id.clone(),
                database: self.database.clone(),
                table: plan.event_name.clone(),
                key: key_row,
                before: None,
                after: Some(values),
                schema_version: plan.fingerprint,
                position: Position::Postgres { commit_lsn: sluice_core::Lsn(0), seq: 0 },
                tx_id: Arc::from("snapshot"),
                tx_end: false,
                commit_time_us: 0,
                schema: Some(plan.schema.clone()),
                origin: sluice_core::schema::Origin::Snapshot(sluice_core::schema::SnapshotMark::Incremental),
                route: None,
                shape: Default::default(),
            });
            if parts.is_some() {
                *after = parts;
            }
        }
        Ok(ChunkRows { rows, last_key: after.as_ref().map(|p| encode_key(p)), full })
    }

    async fn wait_visible(&mut self, tx_ids: &[Arc<str>]) -> Result<(), SourceError> {
        let Some((plan, conn, _)) = self.open.as_mut() else { return Ok(()) };
        let xids: Vec<u32> = tx_ids.iter().filter_map(|tx| tx.parse().ok()).collect();
        let started = Instant::now();
        loop {
            let view = read_view(conn, "", &plan.read_name).await?;
            if xids.iter().all(|xid| view.sees(*xid)) {
                return Ok(());
            }
            if started.elapsed() > VISIBLE_WAIT {
                return Err(SourceError::transient(format!(
                    "incremental snapshot of {}: transactions the stream already delivered are still not visible after {} s",
                    plan.read_name,
                    VISIBLE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn unseen(&self, tx_id: &str) -> bool {
        // An id that is not a number is taken as unseen: the row then comes
        // from the stream alone, which is never stale.
        match (&self.read_view, tx_id.parse::<u32>()) {
            (Some(view), Ok(xid)) => !view.sees(xid),
            _ => true,
        }
    }
}

/// Asks the running pipeline of `config` to re-read `table`: checks that
/// the table can be read by key, then writes the signal into the WAL,
/// where the pipeline finds it (now, or when it next runs).
pub async fn request(config: &PostgresConfig, table: &str) -> Result<Position, SourceError> {
    // With failover_hosts, the request goes to the current primary.
    let params = crate::hosts::primary(config, &crate::connect_params(config)).await?;
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
    if crate::hosts::check_standby(&mut conn, config, version).await? {
        return Err(SourceError::permanent(
            "an incremental snapshot writes its request and watermarks into the WAL, and this source reads a standby, which is read-only",
            "take a new initial snapshot with `sluice checkpoints reset`, or read from the primary",
        ));
    }
    let at = signal(&mut conn, &config.id, table, config.snapshot.chunk_size).await;
    conn.close().await;
    at
}

/// Writes the signal that asks source `source_id` to re-read `table`,
/// once the table is known to be readable by key; the signal's position.
pub(crate) async fn signal(
    conn: &mut Connection,
    source_id: &str,
    table: &str,
    chunk_size: u64,
) -> Result<Position, SourceError> {
    let (schema, name) = table.split_once('.').ok_or_else(|| {
        SourceError::permanent(
            format!("{table:?} is not schema.table"),
            "name the table as schema.table, e.g. public.orders",
        )
    })?;
    let plan = plan_table(conn, schema, name, chunk_size).await?;
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
    let signal = serde_json::to_string(&Signal { source: source_id.to_string(), table: table.to_string() })
        .map_err(|e| SourceError::permanent(format!("signal: {e}"), "report this"))?;
    let rows = conn
        .simple_query(&format!(
            "SELECT pg_logical_emit_message(true, {}, {})",
            quote_literal(SIGNAL_PREFIX),
            quote_literal(&signal)
        ))
        .await
        .map_err(|e| source_error("writing the snapshot signal", e))?;
    let lsn = rows.rows.first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default();
    Ok(Position::Postgres { commit_lsn: lsn.parse().unwrap_or(sluice_core::Lsn(0)), seq: 0 })
}

#[cfg(test)]
mod tests {
    use super::ReadView;

    #[test]
    fn a_snapshot_sees_finished_transactions_below_xmax_and_not_the_running_ones() {
        let view = ReadView::parse("100:110:100,104").unwrap();
        let seen: Vec<u32> = (95..115).filter(|xid| view.sees(*xid)).collect();
        assert_eq!(seen, vec![95, 96, 97, 98, 99, 101, 102, 103, 105, 106, 107, 108, 109]);
        assert!(ReadView::parse("5:5:").unwrap().sees(4));
        assert!(ReadView::parse("not a snapshot").is_none());
    }

    #[test]
    fn ids_compare_across_wraparound_and_the_epoch_is_cut_off() {
        // Epoch 1, xmax just past the 32-bit wrap: pgoutput's ids are 32-bit.
        let base = 1u64 << 32;
        let view = ReadView::parse(&format!("{}:{}:{}", base - 10, base + 5, base + 2)).unwrap();
        assert!(view.sees(u32::MAX - 20), "long finished");
        assert!(view.sees(u32::MAX), "before the wrap, finished");
        assert!(view.sees(1), "after the wrap, finished");
        assert!(!view.sees(2), "running");
        assert!(!view.sees(5), "at xmax");
        assert!(!view.sees(1000), "after xmax");
    }
}
