//! Incremental snapshots of MySQL/MariaDB tables (the algorithm is in
//! [`sluice_core::snapshot::incremental`]). The binlog has no messages of
//! its own, so signals and watermarks are rows inserted into the source's
//! `signal_table`, which Sluice reads from the binlog like any table and
//! never hands to the sinks. Chunks are read by primary key on a
//! connection of their own, one autocommit statement each.
//!
//! A read just after the low watermark sees every transaction before it in
//! the binlog because the server makes commits visible in binlog order
//! (MariaDB always; MySQL while `binlog_order_commits` is ON, which is
//! checked before each table).

use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_config::MysqlConfig;
use sluice_core::snapshot::incremental::{ChunkReader, ChunkRows, Mark, Signal, text_at};
use sluice_core::snapshot::{KeyKind, KeyPart, decode_key, encode_key};
use sluice_core::{Event, Op, Position, SourceError};

use crate::conn::connect;
use crate::errors::mysql_error;
use crate::snapshot::{TablePlan, plan_table, quote_ident, row_values};

/// `database`.`table`, quoted.
fn quoted(name: &str) -> String {
    let (database, table) = name.split_once('.').unwrap_or(("", name));
    format!("{}.{}", quote_ident(database), quote_ident(table))
}

/// Creates the signal table if it is missing.
async fn ensure_table(conn: &mut Conn, signal_table: &str) -> Result<(), SourceError> {
    conn.query_drop(format!(
        "CREATE TABLE IF NOT EXISTS {} (id bigint AUTO_INCREMENT PRIMARY KEY, kind varchar(16) NOT NULL, \
         content varchar(2048) NOT NULL, created_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
        quoted(signal_table)
    ))
    .await
    .map_err(|e| {
        SourceError::permanent(
            format!("cannot create the signal table {signal_table}: {e}"),
            "create it yourself (id bigint AUTO_INCREMENT PRIMARY KEY, kind varchar(16), content varchar(2048)), and GRANT INSERT, DELETE on it to the user",
        )
    })
}

/// Why a chunk read could miss a transaction before its low watermark:
/// MySQL with `binlog_order_commits` OFF may make commits visible out of
/// binlog order (MariaDB has no such setting and always keeps the order).
async fn out_of_order_commits(conn: &mut Conn) -> Result<Option<String>, SourceError> {
    let order: Option<(String, String)> = conn
        .query_first("SHOW GLOBAL VARIABLES LIKE 'binlog_order_commits'")
        .await
        .map_err(|e| mysql_error("SHOW GLOBAL VARIABLES", e))?;
    Ok(order.filter(|(_, value)| value.eq_ignore_ascii_case("OFF")).map(|_| {
        "binlog_order_commits is OFF, so commits may become visible out of binlog order and a chunk could \
         hold a row older than a change before it; SET GLOBAL binlog_order_commits = ON"
            .to_string()
    }))
}

/// Recognises the signal table's rows among the stream's events: inserts
/// of kind `signal` are requests, `low` and `high` are watermarks, and
/// everything else on that table (the clean-up deletes) is dropped.
pub fn mark(signal_table: &str, event: &Event) -> Option<Mark> {
    if *event.table != *signal_table {
        return None;
    }
    let content = text_at(event, 2).unwrap_or_default().to_string();
    match (event.op, text_at(event, 1)) {
        (Op::Insert, Some("signal")) => Some(Mark::Signal(content)),
        (Op::Insert, Some("low" | "high")) => Some(Mark::Watermark(content)),
        _ => Some(Mark::Internal),
    }
}

/// Asks the running pipeline of `config` to re-read `table`: checks that
/// the table can be read by key, then inserts the signal row, which the
/// pipeline finds in the binlog (now, or when it next runs).
pub async fn request(config: &MysqlConfig, table: &str) -> Result<Position, SourceError> {
    let signal_table = config.signal_table.as_deref().ok_or_else(|| {
        SourceError::permanent(
            format!("source {} has no signal_table, where the request and the watermarks are written", config.id),
            "set signal_table: DATABASE.sluice_signal in the source config (Sluice creates it), and restart the pipeline",
        )
    })?;
    let mut conn = connect(config).await?;
    let (database, name) = table.split_once('.').ok_or_else(|| {
        SourceError::permanent(format!("{table:?} is not database.table"), "name the table as database.table")
    })?;
    match plan_table(&mut conn, database, name, 0).await? {
        Some(plan) if !plan.order.is_empty() => {}
        Some(_) => {
            return Err(SourceError::permanent(
                format!("{table} has no primary key to read it by"),
                "an incremental snapshot reads by key; add a primary key, or take a new initial snapshot",
            ));
        }
        None => return Err(SourceError::permanent(format!("{table} does not exist"), "name an existing table")),
    }
    if let Some(why) = out_of_order_commits(&mut conn).await? {
        return Err(SourceError::permanent(
            format!("cannot snapshot {table}: {why}"),
            "turn binlog_order_commits ON, then ask again",
        ));
    }
    ensure_table(&mut conn, signal_table).await?;
    let signal = serde_json::to_string(&Signal { source: config.id.clone(), table: table.to_string() })
        .map_err(|e| SourceError::permanent(format!("signal: {e}"), "report this"))?;
    conn.exec_drop(format!("INSERT INTO {} (kind, content) VALUES ('signal', ?)", quoted(signal_table)), (signal,))
        .await
        .map_err(|e| mysql_error("writing the snapshot signal", e))?;
    let status: Option<(String, u64)> = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .map_err(|e| mysql_error("SHOW MASTER STATUS", e))?
        .map(|row: mysql_async::Row| (row.get::<String, usize>(0).unwrap_or_default(), row.get(1).unwrap_or(0)));
    let _ = conn.disconnect().await;
    let (file, offset) = status.unwrap_or_default();
    Ok(Position::Mysql(sluice_core::BinlogPos { file: file.into(), offset, seq: 0, gtid_before: None }))
}

/// The table being read, its connection, and the key to go on after.
struct Open {
    plan: TablePlan,
    conn: Conn,
    after: Option<Vec<Vec<u8>>>,
}

/// Reads one table by key for the incremental snapshot.
pub struct Reader {
    config: MysqlConfig,
    signal_table: String,
    source_id: Arc<str>,
    open: Option<Open>,
}

impl Reader {
    pub fn new(config: MysqlConfig, signal_table: String) -> Self {
        let source_id = config.id.as_str().into();
        Self { config, signal_table, source_id, open: None }
    }
}

#[async_trait]
impl ChunkReader for Reader {
    async fn open(&mut self, table: &str, after: Option<&[u8]>) -> Result<Result<u64, String>, SourceError> {
        if let Some(open) = self.open.take() {
            let _ = open.conn.disconnect().await;
        }
        let mut conn = connect(&self.config).await?;
        conn.query_drop("SET NAMES utf8mb4, time_zone = '+00:00', sql_mode = ''")
            .await
            .map_err(|e| mysql_error("incremental snapshot session", e))?;
        ensure_table(&mut conn, &self.signal_table).await?;
        if let Some(why) = out_of_order_commits(&mut conn).await? {
            return Ok(Err(why));
        }
        let (database, name) = table.split_once('.').unwrap_or(("", table));
        let plan = match plan_table(&mut conn, database, name, 0).await {
            Ok(Some(plan)) if !plan.order.is_empty() => plan,
            Ok(_) => return Ok(Err("the table is gone or has no primary key to read it by".into())),
            Err(e) => return Ok(Err(e.to_string())),
        };
        let after = match after {
            Some(key) => match decode_key(key, &vec![KeyKind::Bytes; plan.order.len()]) {
                Some(parts) => {
                    Some(parts.into_iter().map(|p| if let KeyPart::Bytes(b) = p { b } else { Vec::new() }).collect())
                }
                None => return Ok(Err("its primary key changed since the last chunk".into())),
            },
            None => None,
        };
        let estimated_rows = plan.estimated_rows;
        self.open = Some(Open { plan, conn, after });
        Ok(Ok(estimated_rows))
    }

    async fn read_chunk(&mut self, low: &str, high: &str) -> Result<ChunkRows, SourceError> {
        let Some(Open { plan, conn, after }) = self.open.as_mut() else {
            return Err(SourceError::transient("incremental snapshot read before its table was opened"));
        };
        let chunk_size = self.config.snapshot.chunk_size;
        let signal_table = quoted(&self.signal_table);
        let error = |e| mysql_error(&format!("incremental snapshot of {}", plan.name), e);
        let insert = format!("INSERT INTO {signal_table} (kind, content) VALUES (?, ?)");
        conn.exec_drop(&insert, ("low", low)).await.map_err(error)?;
        let low_id = conn.last_insert_id().unwrap_or(0);
        let rows: Vec<mysql_async::Row> =
            conn.query(plan.chunk_sql(after.as_deref(), chunk_size)).await.map_err(error)?;
        conn.exec_drop(&insert, ("high", high)).await.map_err(error)?;
        // Watermarks of earlier chunks have been read past by now.
        conn.exec_drop(format!("DELETE FROM {signal_table} WHERE kind IN ('low', 'high') AND id < ?"), (low_id,))
            .await
            .map_err(error)?;
        let full = rows.len() as u64 >= chunk_size;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let values = row.unwrap();
            let key = plan.key_of(&values);
            let (columns, key_row) = row_values(plan, &values);
            events.push(Event {
                op: Op::Read,
                source_id: self.source_id.clone(),
                database: plan.database.clone(),
                table: plan.name.clone(),
                key: key_row,
                before: None,
                after: Some(columns),
                schema_version: plan.fingerprint,
                position: Position::Generator { tx: 0, seq: 0 },
                tx_id: Arc::from("snapshot"),
                tx_end: false,
                commit_time_us: 0,
                schema: Some(plan.declared.clone()),
                origin: sluice_core::schema::Origin::Snapshot(sluice_core::schema::SnapshotMark::Incremental),
                route: None,
                shape: Default::default(),
            });
            if key.is_some() {
                *after = key;
            }
        }
        let last_key =
            after.as_ref().map(|key| encode_key(&key.iter().map(|k| KeyPart::Bytes(k.clone())).collect::<Vec<_>>()));
        Ok(ChunkRows { rows: events, last_key, full })
    }
}
