//! Helpers for fleet tests: the servers' settings, pipeline configs,
//! reading tables and leases, signals.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_postgres::wire::Connection;

use super::Running;
use super::pg::{fresh_database, params, pg_env, sql};

pub fn server() -> String {
    let (port, user, ca) = (pg_env("SLUICE_TEST_PG_PORT"), pg_env("SLUICE_TEST_PG_USER"), pg_env("SLUICE_TEST_PG_CA"));
    format!(
        "host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}"
    )
}

pub fn store_yaml(store: &str) -> String {
    format!("store:\n  type: postgres\n  config: {{ {}, database: postgres, schema: {store} }}\n", server())
}

/// Pipeline `name` from database `{prefix}_{name}` into schema `name` of
/// database `target`.
pub fn pipeline_yaml(name: &str, prefix: &str, target: &str) -> String {
    let server = server();
    format!(
        "  - name: {name}\n    source:\n      type: postgres\n      config: {{ id: {prefix}_{name}, {server}, database: {prefix}_{name}, status_interval_secs: 1, snapshot: {{ mode: initial }} }}\n    sinks:\n      - type: postgres\n        config: {{ id: target, {server}, database: {target}, schema: {name} }}\n"
    )
}

/// A source database with 100 rows in `items`.
pub fn fresh_source(db: &str) {
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL); INSERT INTO items SELECT g, 0 FROM generate_series(1, 100) g",
    );
}

pub fn rows(database: &str, query: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = Connection::connect(&params(database), false).await.unwrap();
        let rows = match conn.simple_query(query).await {
            Ok(rows) => rows.rows,
            // The target table is made by the sink with its first event.
            Err(_) => Vec::new(),
        };
        conn.close().await;
        rows.into_iter().map(|mut r| (r.remove(0).unwrap_or_default(), r)).collect()
    })
}

/// `column` of each live lease of the store in schema `store`.
pub fn leases(store: &str, column: &str) -> BTreeMap<String, String> {
    rows("postgres", &format!("SELECT pipeline, {column} FROM {store}.leases WHERE expires_at > clock_timestamp()"))
        .into_iter()
        .map(|(pipeline, mut rest)| (pipeline, rest.remove(0).unwrap_or_default()))
        .collect()
}

pub fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default()
}

pub fn openapi() -> serde_json::Value {
    serde_json::from_str(include_str!("../../src/api/openapi.json")).unwrap()
}

pub fn hangup(child: &Running) {
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
}

/// Writes to source databases every 20 ms until stopped: each round runs
/// `statements(next)` in each database, `next` counting up from 1000.
pub struct Writer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<i64>,
}

impl Writer {
    pub fn start(databases: Vec<String>, statements: fn(i64) -> String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut next = 1000;
            while !stopped.load(Ordering::Relaxed) {
                for database in &databases {
                    sql(database, &statements(next));
                }
                next += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            next - 1000
        });
        Writer { stop, thread }
    }

    /// Stops it; how many rounds it wrote.
    pub fn stop(self) -> i64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
