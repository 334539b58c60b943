//! The write workload: inserts, updates and deletes across three tables,
//! in single-row, multi-row and very large transactions. It records every
//! change it knows was committed, in commit order; that list is what each
//! sink is compared against.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::db::{Conn, Db, Kind};
use crate::rng::Rng;

pub const TABLES: [&str; 3] = ["t1", "t2", "t3"];

/// One row change, as every sink must show it: `change_no` is unique per
/// write, so a change seen twice is a duplicate, never a second update.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Change {
    pub table: String,
    pub op: char,
    pub id: i64,
    pub change: i64,
}

pub struct Workload {
    db: Db,
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

/// On PostgreSQL the last table is partitioned (by hash of the id, so
/// every partition gets rows): its changes reach the publication under
/// the partitions' names and must come out under the table's.
const PARTITIONED: &str = "t3";
const PARTITIONS: u32 = 3;

/// The MariaDB tables' `tag BINARY(16)`: the change number's bytes, least
/// significant first, so nearly every value ends in zero bytes, which the
/// binlog strips from fixed-length binary and Sluice must put back. The
/// server computes it (a stored generated column, logged in the row image
/// like any other); inserts name their columns, so they leave it out.
const MARIADB_TAG: &str = "tag binary(16) AS (REVERSE(UNHEX(LPAD(HEX(change_no), 32, '0')))) STORED";

/// The `tag` a MariaDB row with this change number holds.
pub fn expected_tag(change: i64) -> [u8; 16] {
    u128::from(change as u64).to_le_bytes()
}

fn table_ddl(kind: Kind) -> String {
    let mut ddl = String::from("CREATE TABLE tx_log (tx bigint PRIMARY KEY);");
    for table in TABLES {
        let extra = match kind {
            Kind::Postgres => String::new(),
            Kind::MariaDb => format!(", {MARIADB_TAG}"),
        };
        let columns = format!("(id bigint PRIMARY KEY, change_no bigint NOT NULL, note text{extra})");
        if kind == Kind::Postgres && table == PARTITIONED {
            ddl.push_str(&format!("CREATE TABLE {table} {columns} PARTITION BY HASH (id);"));
            for part in 0..PARTITIONS {
                ddl.push_str(&format!(
                    "CREATE TABLE {table}_p{part} PARTITION OF {table} FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {part});\
                     ALTER TABLE {table}_p{part} REPLICA IDENTITY FULL;"
                ));
            }
            continue;
        }
        ddl.push_str(&format!("CREATE TABLE {table} {columns};"));
        if kind == Kind::Postgres {
            ddl.push_str(&format!("ALTER TABLE {table} REPLICA IDENTITY FULL;"));
        }
    }
    ddl
}

/// A fresh PostgreSQL database with the tables, the publication and the
/// slot (made before the first write, so nothing committed is missed).
/// Returns the server's `server_version_num`.
pub async fn prepare_postgres(env: &crate::Env, database: &str, source_id: &str) -> anyhow::Result<u32> {
    if env.postgres_standby_port().is_some() {
        // The source is the failover pair: the database sinks' server
        // needs the database of its own.
        let sinks = Db::new(env, Kind::Postgres, "postgres")?;
        sinks.execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).await?;
        sinks.execute(&format!("CREATE DATABASE {database}")).await?;
        // Restarted in immediate mode too: a commit the database sinks
        // were told of must survive it, as below for the source.
        sinks.execute(&format!("ALTER DATABASE {database} SET synchronous_commit = on")).await?;
    }
    let admin = Db::source(env, Kind::Postgres, "postgres")?;
    admin
        .execute(&format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{database}'"
        ))
        .await?;
    admin.execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).await?;
    admin.execute(&format!("CREATE DATABASE {database}")).await?;
    // The test server runs with synchronous_commit off, and restarts in
    // immediate mode: a commit it acknowledged could then vanish, and the
    // harness would expect changes that never happened. Here a commit
    // returns only once its WAL is written.
    admin.execute(&format!("ALTER DATABASE {database} SET synchronous_commit = on")).await?;
    let db = Db::source(env, Kind::Postgres, database)?;
    let ddl = table_ddl(Kind::Postgres);
    // tx_log too: the pipelines' filter must drop its changes.
    db.execute(&format!("{ddl} CREATE PUBLICATION sluice_{source_id} FOR TABLE {}, tx_log", TABLES.join(", "))).await?;
    // A slot cannot be made in a transaction that wrote: its own statement.
    // On a failover pair, a failover slot (17+), which the standby syncs.
    let failover = if env.postgres_standby_port().is_some() { ", false, false, true" } else { "" };
    db.execute(&format!("SELECT pg_create_logical_replication_slot('sluice_{source_id}', 'pgoutput'{failover})"))
        .await?;
    let version = admin.first_row("SHOW server_version_num").await?;
    let version = version.into_iter().next().flatten().unwrap_or_default();
    anyhow::Context::with_context(version.parse(), || format!("server_version_num {version:?}"))
}

/// A fresh MariaDB database with the tables; returns the binlog file and
/// offset to start from, taken before the first write.
pub async fn prepare_mariadb(env: &crate::Env, database: &str) -> anyhow::Result<(String, u64)> {
    let admin = Db::new(env, Kind::MariaDb, "")?;
    admin.execute(&format!("DROP DATABASE IF EXISTS {database}")).await?;
    admin.execute(&format!("CREATE DATABASE {database}")).await?;
    Db::new(env, Kind::MariaDb, database)?.execute(table_ddl(Kind::MariaDb).trim_end_matches(';')).await?;
    binlog_end(&admin).await
}

/// The binlog file and offset the next write will go to.
pub async fn binlog_end(db: &Db) -> anyhow::Result<(String, u64)> {
    let row = db.first_row("SHOW MASTER STATUS").await?;
    match (row.first().cloned().flatten(), row.get(1).cloned().flatten().and_then(|o| o.parse().ok())) {
        (Some(file), Some(offset)) => Ok((file, offset)),
        _ => anyhow::bail!("SHOW MASTER STATUS returned nothing: is the binlog on?"),
    }
}

impl Workload {
    pub fn new(env: &crate::Env, kind: Kind, database: &str, seed: u64) -> anyhow::Result<Self> {
        Ok(Self {
            db: Db::source(env, kind, database)?,
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

    /// Writes to the source server the env names now (after a failover).
    pub fn retarget(&mut self, env: &crate::Env) -> anyhow::Result<()> {
        if let Db::Postgres(params) = &mut self.db {
            params.port = env.postgres_source_port()?;
        }
        Ok(())
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The live rows of each table: id → its last change number.
    pub fn rows(&self) -> &[BTreeMap<i64, i64>] {
        &self.rows
    }

    /// Writes one transaction. An error during it leaves the outcome in
    /// doubt until the `tx_log` row says whether it committed.
    pub async fn step(&mut self, conn: &mut Option<Conn>) -> anyhow::Result<()> {
        if conn.is_none() {
            *conn = self.db.connect().await.ok();
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
        let outcome = match conn.as_mut() {
            Some(c) => c.run(&statement).await,
            None => Err(anyhow::anyhow!("not connected")),
        };
        let committed = if let Err(error) = outcome {
            // Dropping the connection rolls back whatever is still open.
            if let Some(c) = conn.take() {
                c.close().await;
            }
            let n = self.db.value(&format!("SELECT count(*) FROM tx_log WHERE tx = {tx}")).await?;
            self.in_doubt_resolved += 1;
            let committed = n.as_deref() == Some("1");
            println!(
                "torture: {:?} transaction {tx} was in doubt ({error:#}); it {}",
                self.db.kind(),
                if committed { "committed" } else { "did not commit" }
            );
            committed
        } else {
            true
        };
        if conn.is_none() {
            *conn = self.db.connect().await.ok();
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
            let (first_id, first_change, last_id) = (self.next_id, self.next_change, self.next_id + count - 1);
            let table = TABLES[t];
            sql.push_str(&match self.db.kind() {
                Kind::Postgres => format!(
                    "INSERT INTO {table} (id, change_no, note) SELECT g, {first_change} + g - {first_id}, 'bulk' \
                     FROM generate_series({first_id}, {last_id}) g;"
                ),
                // MariaDB's Sequence engine: a table of the numbers in its name.
                Kind::MariaDb => format!(
                    "INSERT INTO {table} (id, change_no, note) SELECT seq, {first_change} + seq - {first_id}, 'bulk' FROM seq_{first_id}_to_{last_id};"
                ),
            });
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
                    sql.push_str(&format!(
                        "INSERT INTO {table} (id, change_no, note) VALUES ({id}, {change}, 'n{change}');"
                    ));
                    undo.push((t, id, self.rows[t].insert(id, change)));
                    changes.push(Change { table: table.into(), op: 'c', id, change });
                }
                (6..=7, Some((id, _))) => {
                    sql.push_str(&format!(
                        "UPDATE {table} SET change_no = {change}, note = 'u{change}' WHERE id = {id};"
                    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_tables_carry_a_fixed_length_binary_with_trailing_zero_bytes() {
        let ddl = table_ddl(Kind::MariaDb);
        assert_eq!(ddl.matches("tag binary(16)").count(), TABLES.len());
        assert!(!table_ddl(Kind::Postgres).contains("tag"));
        assert_eq!(expected_tag(0x0102), [2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(expected_tag(i64::MAX)[..8], [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]);
    }
}
