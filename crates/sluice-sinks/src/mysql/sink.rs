use std::time::Duration;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};
use sluice_core::preflight::Check;
use sluice_core::settings::MysqlSslMode;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError, failpoint};

use super::config::MysqlSinkConfig;
use super::tables::{Fit, Tables};
use super::text::{ValuesList, ident, quoted};
use super::{fail, is_row_error, my_error};
use crate::db::plan::{Kind, Run, TablePlan};
use crate::db::apply::{Applier, apply};
use crate::registry::SinkSettings;

type Plan = crate::db::plan::Plan<ValuesList>;

/// Strict: a value the column cannot take is an error, never a silent
/// truncation; quotes are the only escape in string literals.
const SQL_MODE: &str = "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'";

pub struct MysqlSink {
    config: MysqlSinkConfig,
    source_id: String,
    checkpoints: String,
    conn: Option<Conn>,
    tables: Tables,
    held: Option<Position>,
    careful: bool,
}

impl MysqlSink {
    pub fn new(config: MysqlSinkConfig, source_id: &str) -> Self {
        Self {
            checkpoints: format!("{}.sluice_checkpoints", ident(&config.checkpoint_schema)),
            config,
            source_id: source_id.to_string(),
            conn: None,
            tables: Tables::default(),
            held: None,
            careful: false,
        }
    }

    fn server(&self) -> String {
        format!("{}:{}", self.config.host, self.config.port)
    }

    async fn connect(&self) -> Result<Conn, SinkError> {
        let c = &self.config;
        let mut opts = OptsBuilder::default()
            .ip_or_hostname(c.host.clone())
            .tcp_port(c.port)
            .user(Some(c.user.clone()))
            .pass(Some(c.password.expose().to_string()))
            .prefer_socket(false);
        opts = match c.ssl_mode {
            MysqlSslMode::Disable => opts,
            MysqlSslMode::Require => opts.ssl_opts(SslOpts::default().with_danger_accept_invalid_certs(true)),
            MysqlSslMode::VerifyFull => {
                let ca = c.ca_file.clone().unwrap_or_default();
                if let Err(e) = std::fs::File::open(&ca) {
                    return Err(fail(c, format!("cannot read ca_file {}: {e}", ca.display()), "give a readable PEM file"));
                }
                opts.ssl_opts(SslOpts::default().with_root_certs(vec![ca.into()]))
            }
        };
        let doing = format!("mysql sink {:?}: connecting to {} as {:?}", c.id, self.server(), c.user);
        let timeout = Duration::from_secs(c.connect_timeout_secs);
        let mut conn = match tokio::time::timeout(timeout, Conn::new(opts)).await {
            Ok(conn) => conn.map_err(|e| my_error(e, &doing))?,
            Err(_) => return Err(SinkError::transient(format!("{doing}: no answer within {}s", timeout.as_secs()))),
        };
        conn.query_drop(SQL_MODE).await.map_err(|e| my_error(e, "setting the session's sql_mode"))?;
        Ok(conn)
    }

    fn conn(&mut self) -> Result<&mut Conn, SinkError> {
        self.conn.as_mut().ok_or_else(|| SinkError::transient("mysql sink used before open"))
    }

    async fn exec(&mut self, sql: &str, doing: &str) -> Result<(), SinkError> {
        self.conn()?.query_drop(sql).await.map_err(|e| my_error(e, doing))
    }

    fn checkpoint_where(&self) -> String {
        format!("source_id = {} AND sink_id = {}", quoted(&self.source_id), quoted(&self.config.id))
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
        let text: Option<String> =
            self.conn()?.query_first(sql).await.map_err(|e| my_error(e, "locking the sink's checkpoint"))?;
        let stored = text.and_then(|t| t.parse::<Position>().ok());
        let fenced = crate::db::fence("mysql", &self.config.id, &self.checkpoints, stored.as_ref(), self.held.as_ref());
        if fenced.is_err() {
            let _ = self.exec("ROLLBACK", "giving the batch up").await;
        }
        fenced
    }

    async fn read_position(&mut self) -> Result<Option<Position>, SinkError> {
        let schema = &self.config.checkpoint_schema;
        let create = [
            format!("CREATE DATABASE IF NOT EXISTS {} CHARACTER SET utf8mb4", ident(schema)),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (source_id varchar(255) NOT NULL, sink_id varchar(255) NOT NULL, \
                 position varchar(512) NOT NULL, updated_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
                 PRIMARY KEY (source_id, sink_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
                self.checkpoints
            ),
        ];
        let exists = super::checkpoint_table_count(schema);
        let found: Option<u64> = self.conn()?.query_first(exists).await.map_err(|e| my_error(e, "looking up the checkpoint table"))?;
        if found != Some(1) {
            for sql in &create {
                self.exec(sql, &format!("creating the checkpoint table {}", self.checkpoints)).await?;
            }
        }
        let sql = format!("SELECT position FROM {} WHERE {}", self.checkpoints, self.checkpoint_where());
        let text: Option<String> = self.conn()?.query_first(sql).await.map_err(|e| my_error(e, "reading the sink's checkpoint"))?;
        let Some(text) = text else { return Ok(None) };
        text.parse::<Position>().map(Some).map_err(|_| {
            fail(
                &self.config,
                format!("checkpoint row in {} holds {text:?}, which is not a position", self.checkpoints),
                format!("delete the row where {} to write from the start again", self.checkpoint_where()),
            )
        })
    }

}

/// The statement of a run, and what it does (for messages).
fn statement(table: &TablePlan, run: &Run) -> (String, String) {
    let columns = run.columns.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
    match run.kind {
        Kind::Insert | Kind::Upsert => {
            let mut updates: Vec<String> =
                run.columns.iter().filter(|c| !table.key.contains(c)).map(|c| format!("{0} = VALUES({0})", ident(c))).collect();
            if updates.is_empty() {
                // Nothing but the key: the row is there, or it is added.
                updates = table.key.iter().take(1).map(|c| format!("{0} = {0}", ident(c))).collect();
            }
            let sql = format!(
                "INSERT INTO {} ({columns}) VALUES {} ON DUPLICATE KEY UPDATE {}",
                table.name,
                run.data,
                updates.join(", ")
            );
            (sql, "upserting into".into())
        }
        Kind::Delete => (format!("DELETE FROM {} WHERE ({columns}) IN ({})", table.name, run.data), "deleting from".into()),
        Kind::Truncate => (format!("DELETE FROM {}", table.name), "truncating".into()),
        Kind::Append => (format!("INSERT INTO {} ({columns}) VALUES {}", table.name, run.data), "appending to".into()),
    }
}

#[async_trait]
impl Applier for MysqlSink {
    type Encoding = ValuesList;
    type Error = mysql_async::Error;

    fn name(&self) -> String {
        format!("mysql sink {:?}", self.config.id)
    }

    fn careful(&mut self) -> &mut bool {
        &mut self.careful
    }

    async fn add(&mut self, plan: &mut Plan, event: &Event) -> Result<(), SinkError> {
        let conn = self.conn.as_mut().ok_or_else(|| SinkError::transient("mysql sink used before open"))?;
        match self.tables.fit(conn, &self.config, event).await? {
            Fit::Ready(table) => plan.add(table, event, self.config.mode, &self.config.columns),
            Fit::Changed(table) => Err(SinkError::transient(format!(
                "mysql sink {:?}: target table {table} was changed to fit the source; the batch is written again",
                self.config.id
            ))),
        }
    }

    async fn execute(&mut self, plan: &Plan) -> Result<(), (mysql_async::Error, String)> {
        for table in &plan.tables {
            for run in &table.runs {
                let (sql, what) = statement(table, run);
                let conn = match self.conn.as_mut() {
                    Some(conn) => conn,
                    None => return Err((mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed), what)),
                };
                conn.query_drop(sql).await.map_err(|e| (e, format!("{what} {}", table.display)))?;
            }
        }
        Ok(())
    }

    fn is_row_error(e: &Self::Error) -> bool {
        is_row_error(e)
    }

    fn error(e: Self::Error, doing: &str) -> SinkError {
        my_error(e, doing)
    }
}

#[async_trait]
impl Sink for MysqlSink {
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
        // A write cut off by its deadline may leave its session on the
        // server mid-statement, its transaction open and its locks held
        // (a metadata lock blocks the next ALTER): the new session ends
        // the old one, rather than wait behind it until its own deadline.
        let old = self.conn.take();
        self.tables.clear();
        let mut conn = self.connect().await?;
        if let Some(old) = old {
            let _ = conn.query_drop(format!("KILL {}", old.id())).await;
            drop(old);
        }
        self.conn = Some(conn);
        self.held = self.read_position().await?;
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        self.exec("START TRANSACTION", "starting a transaction").await?;
        self.fence().await?;
        while let Some(chunk) = events.next_chunk().await? {
            apply(self, chunk).await?;
        }
        let sql = format!(
            "INSERT INTO {} (source_id, sink_id, position) VALUES ({}, {}, {}) \
             ON DUPLICATE KEY UPDATE position = VALUES(position), updated_at = CURRENT_TIMESTAMP(6)",
            self.checkpoints,
            quoted(&self.source_id),
            quoted(&self.config.id),
            quoted(&last.to_string())
        );
        self.exec(&sql, "moving the sink's checkpoint").await?;
        failpoint::hit("mysql.before_commit");
        self.exec("COMMIT", "committing the batch").await?;
        failpoint::hit("mysql.after_commit");
        self.careful = false;
        self.held = Some(last);
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if let Some(conn) = self.conn.take() {
            let _ = conn.disconnect().await;
        }
        Ok(())
    }

    async fn preflight(&mut self) -> Vec<Check> {
        match self.connect().await {
            Ok(mut conn) => {
                let version: Option<String> = conn.query_first("SELECT VERSION()").await.ok().flatten();
                let mut checks = vec![Check::ok("connect", format!("{} ({})", self.server(), version.unwrap_or_default()))];
                checks.extend(super::preflight::checks(&self.config, &mut conn, &self.server()).await);
                let _ = conn.disconnect().await;
                checks
            }
            Err(e) => vec![Check::fail("connect", e.to_string(), "check host, port, user, password and ssl_mode")],
        }
    }

    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().await?);
        }
        self.exec("START TRANSACTION", "starting a transaction").await?;
        let careful = std::mem::replace(&mut self.careful, true);
        let applied = apply(self, std::slice::from_ref(event)).await;
        self.careful = careful;
        match applied {
            Ok(()) => self.exec("COMMIT", "committing the event").await,
            Err(e) => {
                let _ = self.exec("ROLLBACK", "rolling back").await;
                Err(e)
            }
        }
    }
}
