use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use sluice_core::preflight::Check;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError, failpoint};
use sluice_pgwire::{ConnectParams, Connection, PgError};

use super::config::PostgresSinkConfig;
use super::text::CopyText;
use crate::db::plan::{Kind, Run, TablePlan};
use super::tables::{Tables, create_locked};
use super::text::{ident, quote_literal};
use super::{db_error, fail, is_row_error};
use crate::db::apply::{Applier, apply};
use crate::registry::SinkSettings;

type Plan = crate::db::plan::Plan<CopyText>;

pub struct PostgresSink {
    config: PostgresSinkConfig,
    source_id: String,
    /// `"schema".sluice_checkpoints`.
    checkpoints: String,
    conn: Option<Connection>,
    /// The server process of `conn`, ended when a new session replaces it.
    backend: Option<String>,
    tables: Tables,
    /// This session's temporary tables, by target table and column list.
    stages: HashMap<String, String>,
    /// How many temporary tables this session made, for their names.
    staged: usize,
    held: Option<Position>,
    /// Set after a row failed a set statement: the next try writes event
    /// by event, to find the row.
    careful: bool,
}

impl PostgresSink {
    pub fn new(config: PostgresSinkConfig, source_id: &str) -> Self {
        Self {
            checkpoints: format!("{}.sluice_checkpoints", ident(&config.checkpoint_schema)),
            config,
            source_id: source_id.to_string(),
            conn: None,
            backend: None,
            tables: Tables::default(),
            stages: HashMap::new(),
            staged: 0,
            held: None,
            careful: false,
        }
    }

    pub(super) fn params(&self) -> ConnectParams {
        let c = &self.config;
        ConnectParams {
            host: c.host.clone(),
            port: c.port,
            database: c.database.clone(),
            user: c.user.clone(),
            password: c.password.clone(),
            ssl_mode: c.ssl_mode,
            ca_file: c.ca_file.clone(),
            connect_timeout: Duration::from_secs(c.connect_timeout_secs),
        }
    }

    fn server(&self) -> String {
        format!("{}:{}/{}", self.config.host, self.config.port, self.config.database)
    }

    /// A fresh session: whatever a failed call left (an open transaction,
    /// temporary tables, cached table shapes) goes with the old one.
    /// A write cut off by its deadline may leave its backend mid-statement,
    /// its transaction open and its locks held: the new session ends the
    /// old backend, rather than wait behind it until its own deadline.
    async fn reconnect(&mut self) -> Result<&mut Connection, SinkError> {
        let old = self.conn.take();
        self.tables.clear();
        self.stages.clear();
        let mut conn = Connection::connect(&self.params(), false)
            .await
            .map_err(|e| db_error(&e, &format!("postgres sink {:?}: connecting to {}", self.config.id, self.server())))?;
        if let (Some(old), Some(pid)) = (old, self.backend.take()) {
            let _ = conn.simple_query(&format!("SELECT pg_terminate_backend({pid})")).await;
            old.close().await;
        }
        let pid = conn.simple_query("SELECT pg_backend_pid() AS pid").await.ok();
        self.backend = pid.and_then(|rows| rows.first("pid").map(str::to_string)).filter(|p| p.parse::<i32>().is_ok());
        Ok(self.conn.insert(conn))
    }

    async fn query(&mut self, sql: &str, doing: &str) -> Result<sluice_pgwire::Rows, SinkError> {
        let conn = self.conn.as_mut().ok_or_else(|| SinkError::transient("postgres sink used before open"))?;
        conn.simple_query(sql).await.map_err(|e| db_error(&e, doing))
    }

    async fn ensure_checkpoint_table(&mut self) -> Result<(), SinkError> {
        let schema = self.config.checkpoint_schema.clone();
        let found = format!("SELECT to_regclass({}) IS NOT NULL AS found", quote_literal(&self.checkpoints));
        if self.query(&found, "looking up the checkpoint table").await?.first("found") == Some("t") {
            return Ok(());
        }
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {} (source_id text NOT NULL, sink_id text NOT NULL, position text NOT NULL, \
             updated_at timestamp with time zone NOT NULL DEFAULT now(), PRIMARY KEY (source_id, sink_id))",
            self.checkpoints
        );
        let doing = format!("creating the checkpoint table {}", self.checkpoints);
        let conn = self.conn.as_mut().ok_or_else(|| SinkError::transient("postgres sink used before open"))?;
        create_locked(conn, &schema, &self.checkpoints, &create, &doing).await
    }

    fn checkpoint_where(&self) -> String {
        format!("source_id = {} AND sink_id = {}", quote_literal(&self.source_id), quote_literal(&self.config.id))
    }

    /// Within the batch's transaction: the stored position, locked until
    /// the commit, must be the one this writer holds. Another writer (in a
    /// fleet, the instance that took the pipeline over, or one that lost
    /// it and has not noticed yet) moved it otherwise. The batch then
    /// writes nothing and fails as transient: the writer reopens the sink,
    /// which reads the position again and is handed only later events, so
    /// each event is applied once, whichever writer applies it.
    async fn fence(&mut self) -> Result<(), SinkError> {
        let sql = format!("SELECT position FROM {} WHERE {} FOR UPDATE", self.checkpoints, self.checkpoint_where());
        let rows = self.query(&sql, "locking the sink's checkpoint").await?;
        let stored = rows.first("position").and_then(|text| text.parse::<Position>().ok());
        let fenced = crate::db::fence("postgres", &self.config.id, &self.checkpoints, stored.as_ref(), self.held.as_ref());
        if fenced.is_err() {
            let _ = self.query("ROLLBACK", "giving the batch up").await;
        }
        fenced
    }

    async fn read_position(&mut self) -> Result<Option<Position>, SinkError> {
        let sql = format!("SELECT position FROM {} WHERE {}", self.checkpoints, self.checkpoint_where());
        let rows = self.query(&sql, "reading the sink's checkpoint").await?;
        let Some(text) = rows.first("position") else { return Ok(None) };
        text.parse::<Position>().map(Some).map_err(|_| {
            fail(
                &self.config,
                format!("checkpoint row in {} holds {text:?}, which is not a position", self.checkpoints),
                format!("delete the row where {} to write from the start again", self.checkpoint_where()),
            )
        })
    }


    async fn execute_run(&mut self, table: &TablePlan, run: &Run) -> Result<(), (PgError, String)> {
        let columns = run.columns.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
        let doing = |what: &str| format!("{what} {}", table.display);
        let conn = self.conn.as_mut().ok_or_else(|| (not_open(), doing("writing")))?;
        match run.kind {
            Kind::Truncate => {
                conn.simple_query(&format!("TRUNCATE {}", table.name)).await.map_err(|e| (e, doing("truncating")))?;
            }
            Kind::Append => {
                let copy = format!("COPY {} ({columns}) FROM STDIN", table.name);
                conn.copy_in(&copy, run.data.as_bytes()).await.map_err(|e| (e, doing("appending to")))?;
            }
            Kind::Insert => {
                // New rows go straight in; a key the target holds already
                // (a snapshot over existing rows) sends the run the upsert way.
                conn.simple_query("SAVEPOINT sluice_insert").await.map_err(|e| (e, doing("inserting into")))?;
                let copy = format!("COPY {} ({columns}) FROM STDIN", table.name);
                match conn.copy_in(&copy, run.data.as_bytes()).await {
                    Ok(()) => {
                        let release = conn.simple_query("RELEASE SAVEPOINT sluice_insert").await;
                        release.map_err(|e| (e, doing("inserting into")))?;
                    }
                    Err(e) if e.code() == Some("23505") => {
                        let undo = conn.simple_query("ROLLBACK TO SAVEPOINT sluice_insert").await;
                        undo.map_err(|e| (e, doing("inserting into")))?;
                        self.staged_statement(table, run, &columns, Kind::Upsert).await?;
                    }
                    Err(e) => return Err((e, doing("inserting into"))),
                }
            }
            kind @ (Kind::Upsert | Kind::Delete) => self.staged_statement(table, run, &columns, kind).await?,
        }
        Ok(())
    }

    /// The run's rows into a staging table, then one upsert or delete.
    async fn staged_statement(
        &mut self,
        table: &TablePlan,
        run: &Run,
        columns: &str,
        kind: Kind,
    ) -> Result<(), (PgError, String)> {
        let doing = |what: &str| format!("{what} {}", table.display);
        let stage = self.stage(table, columns).await?;
        let conn = self.conn.as_mut().ok_or_else(|| (not_open(), doing("writing")))?;
        let copy = format!("COPY {stage} ({columns}) FROM STDIN");
        conn.copy_in(&copy, run.data.as_bytes()).await.map_err(|e| (e, doing("staging rows of")))?;
        let (sql, what) = if kind == Kind::Delete {
            (delete_sql(table, &stage), "deleting from")
        } else {
            (upsert_sql(table, run, columns, &stage), "upserting into")
        };
        conn.simple_query(&sql).await.map_err(|e| (e, doing(what)))?;
        Ok(())
    }

    /// The session's temporary table for rows of `table` with `columns`,
    /// typed as the target's columns.
    async fn stage(&mut self, table: &TablePlan, columns: &str) -> Result<String, (PgError, String)> {
        let key = format!("{}\u{0}{columns}", table.name);
        if let Some(stage) = self.stages.get(&key) {
            return Ok(stage.clone());
        }
        self.staged += 1;
        let stage = format!("sluice_stage_{}", self.staged);
        let sql = format!("CREATE TEMPORARY TABLE {stage} AS SELECT {columns} FROM {} WITH NO DATA", table.name);
        let conn = self.conn.as_mut().ok_or_else(|| (not_open(), String::new()))?;
        conn.simple_query(&sql).await.map_err(|e| (e, format!("staging rows of {}", table.display)))?;
        self.stages.insert(key, stage.clone());
        Ok(stage)
    }

    async fn commit(&mut self, last: &Position) -> Result<(), SinkError> {
        let sql = format!(
            "INSERT INTO {} (source_id, sink_id, position) VALUES ({}, {}, {}) \
             ON CONFLICT (source_id, sink_id) DO UPDATE SET position = EXCLUDED.position, updated_at = now()",
            self.checkpoints,
            quote_literal(&self.source_id),
            quote_literal(&self.config.id),
            quote_literal(&last.to_string())
        );
        self.query(&sql, "moving the sink's checkpoint").await?;
        failpoint::hit("postgres.before_commit");
        self.query("COMMIT", "committing the batch").await?;
        failpoint::hit("postgres.after_commit");
        Ok(())
    }
}

fn not_open() -> PgError {
    PgError::Protocol { addr: String::new(), detail: "the sink has no connection; it is opened again".into() }
}

fn upsert_sql(table: &TablePlan, run: &Run, columns: &str, stage: &str) -> String {
    let key = table.key.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
    let updates: Vec<String> = run
        .columns
        .iter()
        .filter(|c| !table.key.contains(c))
        .map(|c| format!("{0} = EXCLUDED.{0}", ident(c)))
        .collect();
    let action = if updates.is_empty() { "NOTHING".to_string() } else { format!("UPDATE SET {}", updates.join(", ")) };
    format!(
        "INSERT INTO {} ({columns}) SELECT {columns} FROM {stage} ON CONFLICT ({key}) DO {action}; TRUNCATE {stage}",
        table.name
    )
}

fn delete_sql(table: &TablePlan, stage: &str) -> String {
    let matches: Vec<String> = table.key.iter().map(|c| format!("t.{0} = s.{0}", ident(c))).collect();
    // Statistics of the staged keys let the planner probe the target's key
    // index for a few of them rather than scan the table.
    format!(
        "ANALYZE {stage}; DELETE FROM {} t USING {stage} s WHERE {}; TRUNCATE {stage}",
        table.name,
        matches.join(" AND ")
    )
}

#[async_trait]
impl Applier for PostgresSink {
    type Encoding = CopyText;
    type Error = PgError;

    fn name(&self) -> String {
        format!("postgres sink {:?}", self.config.id)
    }

    fn careful(&mut self) -> &mut bool {
        &mut self.careful
    }

    async fn add(&mut self, plan: &mut Plan, event: &Event) -> Result<(), SinkError> {
        let conn = self.conn.as_mut().ok_or_else(|| SinkError::transient("postgres sink used before open"))?;
        let table = self.tables.fit(conn, &self.config, event).await?;
        plan.add(table, event, self.config.mode, &self.config.columns)?;
        if std::mem::take(&mut self.tables.altered) {
            // Staging tables have the old column types.
            self.stages.clear();
        }
        Ok(())
    }

    async fn execute(&mut self, plan: &Plan) -> Result<(), (PgError, String)> {
        for table in &plan.tables {
            for run in &table.runs {
                self.execute_run(table, run).await?;
            }
        }
        Ok(())
    }

    fn is_row_error(e: &Self::Error) -> bool {
        is_row_error(e)
    }

    fn error(e: Self::Error, doing: &str) -> SinkError {
        db_error(&e, doing)
    }
}

#[async_trait]
impl Sink for PostgresSink {
    fn id(&self) -> &str {
        &self.config.id
    }

    fn guarantee(&self) -> Guarantee {
        self.config.guarantee()
    }

    fn reads_back_what_it_holds(&self) -> bool {
        true
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.reconnect().await?;
        self.ensure_checkpoint_table().await?;
        self.held = self.read_position().await?;
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        self.query("BEGIN", "starting a transaction").await?;
        self.fence().await?;
        while let Some(chunk) = events.next_chunk().await? {
            apply(self, chunk).await?;
        }
        self.commit(&last).await?;
        self.careful = false;
        self.held = Some(last);
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if let Some(conn) = self.conn.take() {
            conn.close().await;
        }
        Ok(())
    }

    async fn preflight(&mut self) -> Vec<Check> {
        super::preflight::checks(&self.config, &self.params(), &self.checkpoints).await
    }

    /// Applies one event from the dead letter queue in its own
    /// transaction, leaving the checkpoint alone.
    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        if self.conn.is_none() {
            self.reconnect().await?;
        }
        self.query("BEGIN", "starting a transaction").await?;
        let careful = std::mem::replace(&mut self.careful, true);
        let applied = apply(self, std::slice::from_ref(event)).await;
        self.careful = careful;
        match applied {
            Ok(()) => self.query("COMMIT", "committing the event").await.map(|_| ()),
            Err(e) => {
                let _ = self.query("ROLLBACK", "rolling back").await;
                Err(e)
            }
        }
    }
}
