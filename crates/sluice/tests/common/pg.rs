//! Helpers for tests of the binary against the private PostgreSQL that
//! `scripts/services.sh start` runs.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use sluice_config::Secret;
use sluice_postgres::wire::{ConnectParams, Connection};

use super::Running;

pub fn pg_env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run `scripts/services.sh start` and source its env file"))
}

pub fn params(database: &str) -> ConnectParams {
    ConnectParams {
        host: pg_env("SLUICE_TEST_PG_HOST"),
        port: pg_env("SLUICE_TEST_PG_PORT").parse().unwrap(),
        database: database.into(),
        user: pg_env("SLUICE_TEST_PG_USER"),
        password: Secret::new(pg_env("SLUICE_TEST_PG_PASSWORD")),
        ssl_mode: sluice_config::SslMode::Prefer,
        ca_file: None,
        connect_timeout: Duration::from_secs(10),
    }
}

/// Runs SQL, retrying the connection while the server restarts.
pub fn sql(database: &str, statements: &str) {
    try_sql(database, statements).unwrap_or_else(|e| panic!("{statements}: {e}"));
}

/// Runs SQL as `sql` does, but hands back the statements' error, which a
/// server restart in the middle of them causes.
pub fn try_sql(database: &str, statements: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        for attempt in 0..100 {
            match Connection::connect(&params(database), false).await {
                Ok(mut conn) => {
                    let done = conn.simple_query(statements).await.map(|_| ()).map_err(|e| e.to_string());
                    conn.close().await;
                    return done;
                }
                Err(_) if attempt < 99 => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("cannot connect: {e}"),
            }
        }
        unreachable!("the last attempt panics")
    })
}

pub fn fresh_database(name: &str) {
    drop_slots(name);
    sql("postgres", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    sql("postgres", &format!("CREATE DATABASE {name}"));
}

/// Ends the replication of `database` and drops its slots, so a test that
/// is done holds none of the server's `max_replication_slots`.
pub fn drop_slots(name: &str) {
    sql(
        "postgres",
        &format!(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = '{name}' AND active_pid IS NOT NULL"
        ),
    );
    sql(
        "postgres",
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{name}' AND NOT active"
        ),
    );
}

/// Creates the publication and slot up front, so that no row written
/// before Sluice has set them up goes unseen.
pub fn prepare_replication(database: &str, table: &str) {
    sql(database, &format!("CREATE PUBLICATION sluice_{database} FOR TABLE {table}"));
    sql(database, &format!("SELECT pg_create_logical_replication_slot('sluice_{database}', 'pgoutput')"));
}

pub fn pipeline(database: &str, out: &str, max_bytes: Option<u64>) -> String {
    let batch = max_bytes.map(|b| format!("    batch: {{ max_bytes: {b} }}\n")).unwrap_or_default();
    format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, database: {database}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: {out} }}\n{batch}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    )
}

pub fn restart_postgres() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh");
    let status = std::process::Command::new("bash").arg(script).arg("restart-postgres").status().unwrap();
    assert!(status.success(), "restarting PostgreSQL failed");
}

pub fn stop(child: Running, dir: &Path) {
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "sluice did not stop cleanly:\n{log}");
}

/// The ids of inserted rows in the file, in file order. A line without its
/// newline is one the sink is still writing (or a torn tail a kill left,
/// which the next run truncates): it is not counted yet.
pub fn inserted_ids(path: &Path) -> Vec<i64> {
    ids_of(path, "c")
}

/// The ids of the rows of events with `op` in the file, as [`inserted_ids`].
pub fn ids_of(path: &Path, op: &str) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["op"] == op)
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect()
}

/// The one value `query` gives on `db`, through psql.
pub fn psql_value(db: &str, query: &str) -> String {
    let answer = std::process::Command::new("psql")
        .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", db, "-qXAtc", query])
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&answer.stdout).trim().to_string()
}

/// Waits until Sluice's slot on `db` is active: its publication and slot
/// are made at start, and a workload must come after them.
pub fn wait_for_slot(db: &str) {
    super::wait_until(Duration::from_secs(60), "sluice's slot", || {
        let query = format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'sluice_{db}' AND active");
        psql_value(db, &query) == "1"
    });
}

/// `scripts/services.sh` with `args` (a pair of servers, a failover); its
/// output.
pub fn services(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh");
    let output = std::process::Command::new("bash").arg(script).args(args).output().unwrap();
    assert!(output.status.success(), "services.sh {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A fresh primary and standby of `major` (`services.sh pg-pair`): their ports.
pub fn pg_pair(major: u32) -> (u16, u16) {
    let ports = services(&["pg-pair", &major.to_string()]);
    let (primary, standby) = ports.split_once(' ').expect("two ports");
    (primary.parse().unwrap(), standby.parse().unwrap())
}

/// `query` on the server at `port`, through psql: its output, or the error.
pub fn psql_at(port: u16, db: &str, query: &str) -> Result<String, String> {
    let output = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", db])
        .args(["-qXAt", "-v", "ON_ERROR_STOP=1", "-c", query])
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).to_string())
    }
}

/// Inserts rows `ids` into `items` (id, note 'n' || id) on the server at
/// `port`, ten rows per transaction, so a failover lands between and
/// inside the transactions Sluice reads.
pub fn insert_items_at(port: u16, db: &str, ids: std::ops::RangeInclusive<i64>) {
    let statements: String = ids
        .step_by(10)
        .map(|start| format!("INSERT INTO items SELECT g, 'n' || g FROM generate_series({start}, {}) g;", start + 9))
        .collect();
    psql_at(port, db, &statements).unwrap();
}

/// A pipeline `name` of `public.items` on a pg-pair (`failover_hosts`
/// naming the standby) into `items.jsonl`; `extra` goes into the source config.
pub fn pair_pipeline(name: &str, db: &str, primary: u16, standby: u16, extra: &str) -> String {
    format!(
        "pipelines:\n  - name: {name}\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {primary}, failover_hosts: [\"127.0.0.1:{standby}\"], database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.items]{extra} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: items.jsonl }}\n",
        user = pg_env("SLUICE_TEST_PG_USER"),
    )
}
