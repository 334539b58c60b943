//! The write workload: inserts, updates and deletes across three tables,
//! in single-row, multi-row and very large transactions. It records every
//! change it knows was committed, in commit order; that list is what each
//! sink is compared against.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::Env;
use sluice_config::{Secret, SslMode};
use sluice_postgres::wire::{ConnectParams, Connection};

use crate::rng::Rng;

pub const TABLES: [&str; 3] = ["t1", "t2", "t3"];

/// One row change, as every sink must show it: `change` is unique per
/// write, so a change seen twice is a duplicate, never a second update.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Change {
    pub table: String,
    pub op: char,
    pub id: i64,
    pub change: i64,
}

pub struct Workload {
    params: ConnectParams,
    rng: Rng,
    /// Live rows per table: id → its last change number.
    rows: Vec<BTreeMap<i64, i64>>,
    next_id: i64,
    next_change: i64,
    next_tx: i64,
    pub committed: Vec<Change>,
    pub transactions: u64,
    pub in_doubt_resolved: u64,
}

pub fn params(env: &Env, database: &str) -> anyhow::Result<ConnectParams> {
    Ok(ConnectParams {
        host: env.get("SLUICE_TEST_PG_HOST")?,
        port: env.get("SLUICE_TEST_PG_PORT")?.parse()?,
        database: database.into(),
        user: env.get("SLUICE_TEST_PG_USER")?,
        password: Secret::new(env.get("SLUICE_TEST_PG_PASSWORD")?),
        ssl_mode: SslMode::Prefer,
        ca_file: None,
        connect_timeout: Duration::from_secs(5),
    })
}

/// Runs SQL, reconnecting while the server restarts (up to a minute).
pub async fn execute(params: &ConnectParams, sql: &str) -> anyhow::Result<sluice_postgres::wire::Rows> {
    let mut last = None;
    for _ in 0..300 {
        match Connection::connect(params, false).await {
            Ok(mut conn) => {
                let rows = conn.simple_query(sql).await;
                conn.close().await;
                return rows.with_context(|| format!("running {sql}"));
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("cannot connect to PostgreSQL: {last:?}")
}

/// A fresh database with the tables, the publication and the slot (made
/// before the first write, so nothing committed is missed).
pub async fn prepare(env: &Env, database: &str, source_id: &str) -> anyhow::Result<()> {
    let admin = params(env, "postgres")?;
    execute(
        &admin,
        &format!("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{database}'"),
    )
    .await?;
    execute(&admin, &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).await?;
    execute(&admin, &format!("CREATE DATABASE {database}")).await?;
    // The test server runs with synchronous_commit off, and restarts in
    // immediate mode: a commit it acknowledged could then vanish, and the
    // harness would expect changes that never happened. Here a commit
    // returns only once its WAL is written.
    execute(&admin, &format!("ALTER DATABASE {database} SET synchronous_commit = on")).await?;
    let db = params(env, database)?;
    let mut ddl = String::from("CREATE TABLE tx_log (tx bigint PRIMARY KEY);");
    for table in TABLES {
        ddl.push_str(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, change bigint NOT NULL, note text); \
             ALTER TABLE {table} REPLICA IDENTITY FULL;"
        ));
    }
    ddl.push_str(&format!("CREATE PUBLICATION sluice_{source_id} FOR TABLE {};", TABLES.join(", ")));
    execute(&db, &ddl).await?;
    // A slot cannot be made in a transaction that wrote: its own statement.
    execute(&db, &format!("SELECT pg_create_logical_replication_slot('sluice_{source_id}', 'pgoutput')")).await?;
    Ok(())
}

impl Workload {
    pub fn new(env: &Env, database: &str, seed: u64) -> anyhow::Result<Self> {
        Ok(Self {
            params: params(env, database)?,
            rng: Rng::new(seed),
            rows: vec![BTreeMap::new(); TABLES.len()],
            next_id: 1,
            next_change: 1,
            next_tx: 1,
            committed: Vec::new(),
            transactions: 0,
            in_doubt_resolved: 0,
        })
    }

    /// Writes one transaction. An error during it leaves the outcome in
    /// doubt until the `tx_log` row says whether it committed.
    pub async fn step(&mut self, conn: &mut Option<Connection>) -> anyhow::Result<()> {
        if conn.is_none() {
            *conn = Connection::connect(&self.params, false).await.ok();
            if conn.is_none() {
                // The server is away (a restart): nothing was sent.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
        }
        let mut undo = Vec::new();
        let (sql, changes) = self.plan(&mut undo);
        let tx = self.next_tx;
        self.next_tx += 1;
        let statement = format!("BEGIN; {sql} INSERT INTO tx_log VALUES ({tx}); COMMIT;");
        let succeeded = match conn.as_mut() {
            Some(c) => c.simple_query(&statement).await.is_ok(),
            None => false,
        };
        let committed = if succeeded {
            true
        } else {
            *conn = None;
            let rows = execute(&self.params, &format!("SELECT count(*) AS n FROM tx_log WHERE tx = {tx}")).await?;
            self.in_doubt_resolved += 1;
            let committed = rows.first("n") == Some("1");
            println!(
                "torture: transaction {tx} was in doubt; it {}",
                if committed { "committed" } else { "did not commit" }
            );
            committed
        };
        if conn.is_none() {
            *conn = Connection::connect(&self.params, false).await.ok();
        }
        if committed {
            self.committed.extend(changes);
            self.transactions += 1;
        } else {
            for (t, id, before) in undo.into_iter().rev() {
                match before {
                    Some(change) => self.rows[t].insert(id, change),
                    None => self.rows[t].remove(&id),
                };
            }
        }
        Ok(())
    }

    /// The SQL of one transaction and its changes; applies them to the
    /// live rows, noting in `undo` how to take them back.
    fn plan(&mut self, undo: &mut Vec<(usize, i64, Option<i64>)>) -> (String, Vec<Change>) {
        let mut sql = String::new();
        let mut changes = Vec::new();
        let roll = self.rng.range(0, 100);
        if roll < 1 {
            // A very large transaction: thousands of inserts in one statement.
            let t = self.rng.range(0, 3) as usize;
            let count = self.rng.range(2_000, 12_000) as i64;
            let (first_id, first_change) = (self.next_id, self.next_change);
            sql.push_str(&format!(
                "INSERT INTO {} SELECT g, {} + g - {first_id}, 'bulk' FROM generate_series({first_id}, {}) g;",
                TABLES[t],
                first_change,
                first_id + count - 1
            ));
            for offset in 0..count {
                let (id, change) = (first_id + offset, first_change + offset);
                undo.push((t, id, self.rows[t].insert(id, change)));
                changes.push(Change { table: TABLES[t].into(), op: 'c', id, change });
            }
            self.next_id += count;
            self.next_change += count;
            return (sql, changes);
        }
        let statements = if roll < 60 { 1 } else { self.rng.range(2, 50) };
        for _ in 0..statements {
            let t = self.rng.range(0, 3) as usize;
            let table = TABLES[t];
            let change = self.next_change;
            self.next_change += 1;
            let existing = pick(&mut self.rng, &self.rows[t]);
            match (self.rng.range(0, 10), existing) {
                (0..=5, _) | (_, None) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    sql.push_str(&format!("INSERT INTO {table} VALUES ({id}, {change}, 'n{change}');"));
                    undo.push((t, id, self.rows[t].insert(id, change)));
                    changes.push(Change { table: table.into(), op: 'c', id, change });
                }
                (6..=7, Some((id, _))) => {
                    sql.push_str(&format!("UPDATE {table} SET change = {change}, note = 'u{change}' WHERE id = {id};"));
                    undo.push((t, id, self.rows[t].insert(id, change)));
                    changes.push(Change { table: table.into(), op: 'u', id, change });
                }
                (_, Some((id, last))) => {
                    sql.push_str(&format!("DELETE FROM {table} WHERE id = {id};"));
                    undo.push((t, id, self.rows[t].remove(&id)));
                    // A delete shows the row as it was: its last change.
                    changes.push(Change { table: table.into(), op: 'd', id, change: last });
                }
            }
        }
        (sql, changes)
    }
}

fn pick(rng: &mut Rng, rows: &BTreeMap<i64, i64>) -> Option<(i64, i64)> {
    if rows.is_empty() {
        return None;
    }
    let index = rng.range(0, rows.len() as u64) as usize;
    rows.iter().nth(index).map(|(id, change)| (*id, *change))
}
