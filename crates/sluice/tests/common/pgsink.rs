//! Helpers for tests of the postgres sink: its configs, and reading the
//! target through psql.

#![allow(dead_code)]

use std::process::Command;

use super::pg::pg_env;

/// The rows of `table` as the server's JSON, ordered by `order`.
pub fn table_json(database: &str, table: &str, order: &str) -> String {
    let output = Command::new("psql")
        .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", database, "-qXAtc"])
        .arg(format!("SELECT to_jsonb(t) FROM {table} t ORDER BY {order}"))
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One value the server returns for `query`.
pub fn scalar(database: &str, query: &str) -> String {
    super::pg::psql_value(database, query)
}

/// A pipeline from `source` into postgres sinks whose configs are `sinks`.
pub fn pipeline(source: &str, sinks: &[String]) -> String {
    let sinks: String = sinks.iter().map(|s| format!("      - type: postgres\n        config: {s}\n")).collect();
    format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {source}, host: 127.0.0.1, port: {port}, database: {source}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n{sinks}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    )
}

/// A sink config into database `target`; `extra` adds settings.
pub fn sink(id: &str, target: &str, extra: &str) -> String {
    format!(
        "{{ id: {id}, host: 127.0.0.1, port: {port}, database: {target}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}{extra} }}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    )
}
