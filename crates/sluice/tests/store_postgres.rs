//! The PostgreSQL checkpoint store end to end: a pipeline killed mid-way
//! through an incremental snapshot goes on from another, empty data dir,
//! because its checkpoints and every piece of its source's state live in
//! the store; offline commands read the same store.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use common::pg::*;
use common::replay::*;
use common::*;
use sluice_postgres::wire::Connection;

/// A pipeline of `database` into `out.jsonl`, its store in `schema` of the
/// same server's `postgres` database.
fn config(database: &str, schema: &str) -> String {
    format!(
        "store:\n  type: postgres\n  config: {{ host: 127.0.0.1, port: {port}, database: postgres, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, schema: {schema} }}\npipelines:\n  - name: stored\n    source:\n      type: postgres\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, database: {database}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.*], snapshot: {{ chunk_size: 500 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    )
}

fn rows_of(database: &str, query: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = Connection::connect(&params(database), false).await.unwrap();
        let rows = conn.simple_query(query).await.unwrap();
        conn.close().await;
        rows.rows.into_iter().map(|mut r| (r.remove(0).unwrap_or_default(), r)).collect()
    })
}

fn log_has(dir: &Path, text: &str) -> bool {
    std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default().contains(text)
}

#[test]
fn a_pipeline_killed_mid_snapshot_goes_on_from_another_data_dir_through_the_postgresql_store() {
    let (db, schema) = ("e2e_store_move", "store_e2e_move");
    fresh_database(db);
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    sql(
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, note text); \
         INSERT INTO items SELECT g, 0, 'n' || g FROM generate_series(1, 40000) g",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &config(db, schema));
    let out = dir.path().join("out.jsonl");
    let run_in = |data_dir: &str| spawn(&["run", "-c", config.to_str().unwrap(), "--data-dir", data_dir], dir.path());

    let mut first = run_in("first");
    wait_until(Duration::from_secs(60), "streaming", || log_has(dir.path(), "replication started"));
    let asked = run(&["snapshot", "-c", config.to_str().unwrap(), "--table", "public.items"], dir.path());
    assert!(asked.status.success(), "{}", stderr(&asked));
    wait_until(Duration::from_secs(120), "part of the snapshot", || line_count(&out) >= 5_000);
    first.kill9();
    assert!(line_count(&out) < 40_000, "the snapshot finished before the kill; make the table bigger");
    sql(db, "UPDATE items SET v = 5 WHERE id % 1000 = 0; DELETE FROM items WHERE id > 39990");

    // Nothing of the pipeline's state is on the first instance's disk.
    let left: Vec<String> = walk(&dir.path().join("first"));
    assert!(left.iter().all(|p| p.contains("/spill")), "state left on the instance's disk: {left:?}");

    let second = run_in("second");
    wait_until(Duration::from_secs(300), "the incremental snapshot", || {
        log_has(dir.path(), "incremental snapshot done")
    });
    sql(db, "INSERT INTO items VALUES (-1, 0, 'marker')");
    wait_until(Duration::from_secs(120), "the marker row", || has_marker(&out));
    stop(second, dir.path());
    assert!(log_has(dir.path(), "resume=true"), "the second instance did not resume the snapshot");
    let state = rows_of(db, "SELECT id::text, v::text, note FROM items");
    assert_eq!(replayed(&out, "public.items", "id", &["v", "note"]), state, "replayed rows differ");
    let all = events(&out);
    let read: HashSet<i64> =
        all.iter().filter(|e| e["op"] == "r").map(|e| e["after"]["id"].as_i64().unwrap()).collect();
    assert!((1..=39_990).all(|id| read.contains(&id)), "a row was never read");
    let positions: Vec<&str> = all.iter().map(|e| e["position"].as_str().unwrap()).collect();
    assert_eq!(positions.iter().collect::<HashSet<_>>().len(), positions.len(), "an event was delivered twice");

    // Offline, a third data dir's `checkpoints list` reads the store.
    let listed = run(&["checkpoints", "list", "-c", config.to_str().unwrap(), "--data-dir", "third"], dir.path());
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success() && text.contains(&format!("{db}::sink::file")), "{text}{}", stderr(&listed));
    assert!(!text.contains(" none"), "the checkpoint is stored: {text}");
    let stored = rows_of("postgres", &format!("SELECT name FROM {schema}.state ORDER BY name"));
    for name in [format!("postgres/{db}/slot_confirmed"), format!("postgres/{db}/incremental_snapshot.json")] {
        assert!(stored.contains_key(&name), "{name} is not in the store: {:?}", stored.keys());
    }
}

/// Every file under `root`, as paths.
fn walk(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_store_that_cannot_be_reached_or_is_held_stops_the_run_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = config("e2e_store_none", "store_e2e_none").replacen(
        &format!("port: {}, database: postgres", pg_env("SLUICE_TEST_PG_PORT")),
        &format!("port: {port}, database: postgres"),
        1,
    );
    let config_path = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config_path.to_str().unwrap()], dir.path());
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("store.config") && said.contains(&format!("127.0.0.1:{port}")), "{said}");
    assert!(!said.contains(&pg_env("SLUICE_TEST_PG_PASSWORD")), "the password reached the output: {said}");

    // A store another run holds is refused, as a locked data dir is.
    let (db, schema) = ("e2e_store_held", "store_e2e_held");
    fresh_database(db);
    sql(db, "CREATE TABLE t (id int PRIMARY KEY)");
    let held = write_config(dir.path(), &config(db, schema));
    let first = spawn(&["run", "-c", held.to_str().unwrap(), "--data-dir", "one", "--api-addr", "off"], dir.path());
    wait_until(Duration::from_secs(60), "the first run streaming", || log_has(dir.path(), "replication started"));
    let second = run(&["run", "-c", held.to_str().unwrap(), "--data-dir", "two", "--api-addr", "off"], dir.path());
    let said = stderr(&second);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(said.contains("another process") && said.contains(schema), "{said}");
    stop(first, dir.path());
}

#[test]
fn validate_connect_checks_the_store_without_writing_to_it() {
    let (db, schema) = ("e2e_store_check", "store_e2e_check");
    fresh_database(db);
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &config(db, schema));
    let output = run(&["validate", "-c", config.to_str().unwrap(), "--connect"], dir.path());
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(said.contains(&format!("store: postgres, schema {schema}")), "{said}");
    assert!(said.contains(&format!("{schema} will be created at the first run")), "{said}");
    let present = rows_of("postgres", &format!("SELECT nspname FROM pg_namespace WHERE nspname = '{schema}'"));
    assert!(present.is_empty(), "validate created the schema");

    sql(
        "postgres",
        &format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.store_version (version bigint); INSERT INTO {schema}.store_version VALUES (99)"
        ),
    );
    let output = run(&["validate", "-c", config.to_str().unwrap(), "--connect"], dir.path());
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("FAIL") && said.contains("newer Sluice"), "{said}");
}
