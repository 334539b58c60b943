//! The two databases the workload writes to, behind one small interface:
//! connect, run a batch of statements, and look a value up while the
//! server may be restarting.

use std::time::Duration;

use anyhow::{Context, bail};
use mysql_async::prelude::Queryable;
use sluice_config::{Secret, SslMode};
use sluice_postgres::wire::{ConnectParams, Connection};

use crate::Env;

/// The database the workload writes to on both servers.
pub const DATABASE: &str = "torture";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

impl Kind {
    /// The schema part of the tables' names in events (`public.t1`, `torture.t1`).
    pub fn schema(self) -> &'static str {
        match self {
            Kind::Postgres => "public",
            Kind::MariaDb => DATABASE,
        }
    }

    /// A short tag for names: topics, streams, files.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Postgres => "pg",
            Kind::MariaDb => "my",
        }
    }
}

#[derive(Clone)]
pub enum Db {
    Postgres(ConnectParams),
    MariaDb(mysql_async::Opts),
}

pub enum Conn {
    Postgres(Connection),
    MariaDb(mysql_async::Conn),
}

impl Db {
    /// A database of the servers the sinks write to (and, without a
    /// failover pair, the PostgreSQL source too).
    pub fn new(env: &Env, kind: Kind, database: &str) -> anyhow::Result<Self> {
        Ok(match kind {
            Kind::Postgres => Self::postgres(env, env.get("SLUICE_TEST_PG_PORT")?.parse()?, database)?,
            Kind::MariaDb => Db::MariaDb(
                mysql_async::OptsBuilder::default()
                    .ip_or_hostname(env.get("SLUICE_TEST_MY_HOST")?)
                    .tcp_port(env.get("SLUICE_TEST_MY_PORT")?.parse()?)
                    .user(Some(env.get("SLUICE_TEST_MY_USER")?))
                    .pass(Some(env.get("SLUICE_TEST_MY_PASSWORD")?))
                    .db_name((!database.is_empty()).then(|| database.to_string()))
                    .into(),
            ),
        })
    }

    /// A database of the servers the workload writes to and the
    /// pipelines read: for PostgreSQL, the current primary of the
    /// failover pair when the run has one.
    pub fn source(env: &Env, kind: Kind, database: &str) -> anyhow::Result<Self> {
        match kind {
            Kind::Postgres => Self::postgres(env, env.postgres_source_port()?, database),
            Kind::MariaDb => Self::new(env, kind, database),
        }
    }

    /// A database of the PostgreSQL server on `port`.
    pub fn postgres(env: &Env, port: u16, database: &str) -> anyhow::Result<Self> {
        Ok(Db::Postgres(ConnectParams {
            host: env.get("SLUICE_TEST_PG_HOST")?,
            port,
            database: database.into(),
            user: env.get("SLUICE_TEST_PG_USER")?,
            password: Secret::new(env.get("SLUICE_TEST_PG_PASSWORD")?),
            ssl_mode: SslMode::Prefer,
            ca_file: None,
            connect_timeout: Duration::from_secs(5),
        }))
    }

    pub fn kind(&self) -> Kind {
        match self {
            Db::Postgres(_) => Kind::Postgres,
            Db::MariaDb(_) => Kind::MariaDb,
        }
    }

    pub async fn connect(&self) -> anyhow::Result<Conn> {
        Ok(match self {
            Db::Postgres(params) => Conn::Postgres(Connection::connect(params, false).await?),
            Db::MariaDb(opts) => Conn::MariaDb(mysql_async::Conn::new(opts.clone()).await?),
        })
    }

    /// The first column of the first row `sql` returns, reconnecting while
    /// the server restarts (up to a minute).
    pub async fn value(&self, sql: &str) -> anyhow::Result<Option<String>> {
        Ok(self.first_row(sql).await?.into_iter().next().flatten())
    }

    /// The first row of the last result `sql` returns, reconnecting while
    /// the server restarts (up to a minute).
    pub async fn first_row(&self, sql: &str) -> anyhow::Result<Vec<Option<String>>> {
        Ok(self.rows(sql).await?.into_iter().next().unwrap_or_default())
    }

    /// Every row of the last result `sql` returns, as text, reconnecting
    /// while the server restarts (up to a minute).
    pub async fn rows(&self, sql: &str) -> anyhow::Result<Vec<Vec<Option<String>>>> {
        let mut last = None;
        for _ in 0..300 {
            match self.connect().await {
                Ok(mut conn) => {
                    let rows = conn.rows(sql).await;
                    conn.close().await;
                    return rows.with_context(|| format!("running {sql}"));
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("cannot connect to {:?}: {last:?}", self.kind())
    }

    /// Runs statements that return nothing, reconnecting while the server restarts.
    pub async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        self.first_row(sql).await.map(drop)
    }
}

impl Conn {
    /// Runs one or more statements.
    pub async fn run(&mut self, sql: &str) -> anyhow::Result<()> {
        match self {
            Conn::Postgres(conn) => conn.simple_query(sql).await.map(drop).map_err(Into::into),
            Conn::MariaDb(conn) => conn.query_drop(sql).await.map_err(Into::into),
        }
    }

    async fn rows(&mut self, sql: &str) -> anyhow::Result<Vec<Vec<Option<String>>>> {
        match self {
            Conn::Postgres(conn) => Ok(conn.simple_query(sql).await?.rows),
            Conn::MariaDb(conn) => {
                let mut result = conn.query_iter(sql).await?;
                let mut last = Vec::new();
                while !result.is_empty() {
                    let rows: Vec<mysql_async::Row> = result.collect().await?;
                    last = rows
                        .iter()
                        .map(|row| (0..row.len()).map(|i| row.get::<Option<String>, _>(i).flatten()).collect())
                        .collect();
                }
                Ok(last)
            }
        }
    }

    pub async fn close(self) {
        match self {
            Conn::Postgres(conn) => conn.close().await,
            Conn::MariaDb(conn) => drop(conn.disconnect().await),
        }
    }
}
