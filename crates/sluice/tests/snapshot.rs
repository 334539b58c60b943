//! The initial snapshot against a real PostgreSQL: rows already there,
//! then the stream, with writes running all along; a kill -9 mid-snapshot;
//! the slot dropped mid-snapshot.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::pg::*;
use common::replay::*;
use common::*;
use sluice_postgres::wire::Connection;

/// A fresh database with one table `big` of `rows` rows; the run folder,
/// its output file and a config that snapshots `big` in chunks.
fn big_table_pipeline(database: &str, rows: u32, chunk_size: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    fresh_database(database);
    sql(
        database,
        &format!(
            "CREATE TABLE big (id bigint PRIMARY KEY, note text); \
             INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, {rows}) g"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = write_config(dir.path(), &snapshot_pipeline(database, chunk_size));
    (dir, out, config)
}

fn snapshot_pipeline(database: &str, chunk_size: u64) -> String {
    format!(
        "pipelines:\n  - name: snap\n    source:\n      type: postgres\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, database: {database}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.*], snapshot: {{ mode: initial, chunk_size: {chunk_size}, max_parallel_tables: 2 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
    )
}

/// Every row of `table` as `key → the columns' text`.
fn table_state(database: &str, table: &str, key: &str, columns: &[&str]) -> BTreeMap<String, Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = Connection::connect(&params(database), false).await.unwrap();
        let list: Vec<String> =
            std::iter::once(key).chain(columns.iter().copied()).map(|c| format!("{c}::text")).collect();
        let rows = conn.simple_query(&format!("SELECT {} FROM {table}", list.join(", "))).await.unwrap();
        conn.close().await;
        rows.rows.into_iter().map(|mut r| (r.remove(0).unwrap(), r)).collect()
    })
}

/// Ends the slot's connection and drops the slot, as an operator might.
fn drop_slot(db: &str) {
    sql(
        "postgres",
        &format!(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'sluice_{db}' AND active_pid IS NOT NULL"
        ),
    );
    sql("postgres", &format!("SELECT pg_drop_replication_slot('sluice_{db}')"));
}

/// Writes the marker row once the snapshot is read and waits for it.
fn marker_after(dir: &Path, database: &str, insert: &str) {
    marker_after_snapshot(dir, || sql(database, insert));
}

#[test]
fn a_snapshot_under_writes_ends_in_the_database_state_with_each_later_change_once() {
    let db = "e2e_snap";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, note text, amount int); \
         INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 20000) g; \
         CREATE TABLE tags (name text PRIMARY KEY, n int); \
         INSERT INTO tags SELECT 'tag-' || lpad(g::text, 5, '0'), g FROM generate_series(1, 3000) g; \
         INSERT INTO tags VALUES ('it''s', -1), ('Zebra', -2), ('äpfel', -3), ('', -4); \
         CREATE TABLE logs (msg text, n int); ALTER TABLE logs REPLICA IDENTITY FULL; \
         INSERT INTO logs SELECT 'log ' || g, g FROM generate_series(1, 5000) g",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = write_config(dir.path(), &snapshot_pipeline(db, 700));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    // Writes while the snapshot runs and after it: each note is unique.
    for round in 0..150 {
        sql(
            db,
            &format!(
                "UPDATE items SET note = 'w{round}', amount = amount + 1 WHERE id % 150 = {round}; \
                 DELETE FROM items WHERE id = {}; INSERT INTO items VALUES ({}, 'w{round}', 1); \
                 UPDATE tags SET n = n + 1000 WHERE name = 'tag-{:05}'; INSERT INTO logs VALUES ('w{round}', {round})",
                round * 7 + 1,
                100_000 + round,
                round + 1
            ),
        );
    }
    marker_after(dir.path(), db, "INSERT INTO items VALUES (-1, 'marker', 0)");
    stop(child, dir.path());

    for (table, key, columns) in [("items", "id", &["note", "amount"][..]), ("tags", "name", &["n"][..])] {
        let want = table_state(db, table, key, columns);
        let got = replayed(&out, &format!("public.{table}"), key, columns);
        assert_eq!(got.len(), want.len(), "{table}: rows after replay");
        assert_eq!(got, want, "{table}: the replayed rows differ from the database");
    }
    let all = events(&out);
    let logs: Vec<String> = all
        .iter()
        .filter(|e| e["table"] == "public.logs")
        .map(|e| e["after"]["msg"].as_str().unwrap().to_string())
        .collect();
    let mut want_logs: Vec<String> = table_state(db, "logs", "msg", &[]).into_keys().collect();
    let mut got_logs = logs.clone();
    want_logs.sort();
    got_logs.sort();
    assert_eq!(got_logs, want_logs, "logs (read by ctid): every row once");
    let ids: HashSet<&str> = all.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), all.len(), "an event id appears twice");
    let reads = all.iter().filter(|e| e["op"] == "r").count();
    assert!(reads >= 20_000 + 3_004 + 5_000 - 300, "{reads} snapshot reads");
    // Reads come first; every position after them is a log position.
    let first_change = all.iter().position(|e| e["op"] != "r").unwrap();
    assert!(all[first_change..].iter().all(|e| e["op"] != "r"), "a snapshot row after the stream began");
    assert!(all[..first_change].iter().all(|e| e["position"].as_str().unwrap().starts_with("snap:")));
    let notes: Vec<&str> = all[first_change..]
        .iter()
        .filter(|e| e["table"] == "public.items" && e["op"] == "c")
        .map(|e| e["after"]["note"].as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), notes.iter().collect::<HashSet<_>>().len(), "an insert streamed twice");
}

#[test]
fn a_kill_mid_snapshot_resumes_after_the_last_row_every_sink_holds() {
    let db = "e2e_snap_kill";
    let (dir, out, config) = big_table_pipeline(db, 150000, 2000);
    let args = ["run", "-c", config.to_str().unwrap()];
    let mut child = spawn_logging_checkpoints(&args, dir.path());
    // Resuming is from the stored checkpoint: lines reach the file before
    // their checkpoint reaches the store, and a kill before the first one
    // starts the snapshot over (the sink then skips the rows it holds).
    wait_until(Duration::from_secs(120), "part of the snapshot, checkpointed", || {
        line_count(&out) >= 20_000 && checkpoint_stored(dir.path())
    });
    child.kill9();
    let held = line_count(&out);
    assert!(held < 150_000, "the snapshot finished before the kill; make the table bigger");
    sql(db, "UPDATE big SET note = 'changed' WHERE id % 1000 = 0; DELETE FROM big WHERE id <= 10");
    let child = spawn(&args, dir.path());
    marker_after(dir.path(), db, "INSERT INTO big VALUES (-1, 'marker')");
    stop(child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("resume_after=public.big"), "{log}");
    let all = events(&out);
    let reads: Vec<i64> = all.iter().filter(|e| e["op"] == "r").map(|e| e["after"]["id"].as_i64().unwrap()).collect();
    assert_eq!(reads.len(), 150_000, "each row read exactly once across the kill");
    assert!(reads.windows(2).all(|w| w[0] < w[1]), "snapshot rows out of key order");
    assert_eq!(replayed(&out, "public.big", "id", &["note"]), table_state(db, "big", "id", &["note"]));
}

#[test]
fn a_slot_dropped_mid_snapshot_stops_the_pipeline_with_a_clear_error() {
    let db = "e2e_snap_slot";
    let (dir, out, config) = big_table_pipeline(db, 150000, 500);
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(120), "part of the snapshot", || line_count(&out) >= 5_000);
    drop_slot(db);
    let status = child.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "sluice must stop when the slot is gone");
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains(&format!("sluice_{db}")) && log.contains("checkpoints reset"), "{log}");
    assert!(events(&out).iter().all(|e| e["op"] == "r"), "nothing may stream from a gap");
}

#[test]
fn a_kill_before_the_first_checkpoint_takes_the_snapshot_again_with_a_new_slot() {
    let db = "e2e_snap_early";
    // One chunk of every row: nothing reaches the sink before it is read whole.
    let (dir, out, config) = big_table_pipeline(db, 200000, 1_000_000);
    let log = dir.path().join("sluice.log");
    let args = ["run", "-c", config.to_str().unwrap()];
    let mut child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(60), "the snapshot to start", || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("snapshot starting")
    });
    child.kill9();
    assert_eq!(line_count(&out), 0, "rows arrived before the kill; this test needs the kill to come first");
    sql(db, "UPDATE big SET note = 'after' WHERE id <= 100; DELETE FROM big WHERE id > 199990");
    let child = spawn(&args, dir.path());
    marker_after(dir.path(), db, "INSERT INTO big VALUES (-1, 'marker')");
    stop(child, dir.path());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("dropped the slot"), "{text}");
    let all = events(&out);
    // The marker may be written before the second snapshot begins: left out.
    let reads: Vec<i64> = all
        .iter()
        .filter(|e| e["op"] == "r")
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .filter(|id| *id > 0)
        .collect();
    assert_eq!(reads.len(), 199_990, "the second snapshot reads the table as it is then, once");
    let stale = all
        .iter()
        .filter(|e| e["op"] == "r" && (1..=100).contains(&e["after"]["id"].as_i64().unwrap()))
        .any(|e| e["after"]["note"] != "after");
    assert!(!stale, "the second snapshot shows the rows as they are after the kill");
    assert_eq!(replayed(&out, "public.big", "id", &["note"]), table_state(db, "big", "id", &["note"]));
}

#[test]
fn many_tables_read_in_parallel_arrive_table_by_table_in_key_order() {
    let db = "e2e_snap_many";
    fresh_database(db);
    let names = ["t_a", "t_b", "t_c", "t_d", "t_e", "t_f"];
    for name in names {
        sql(
            db,
            &format!(
                "CREATE TABLE {name} (id int PRIMARY KEY, note text); \
                 INSERT INTO {name} SELECT g, md5(g::text) FROM generate_series(1, 3000) g"
            ),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // Far more chunks per table than a worker may read ahead.
    let config = write_config(dir.path(), &snapshot_pipeline(db, 100));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    marker_after(dir.path(), db, "INSERT INTO t_a VALUES (-1, 'marker')");
    stop(child, dir.path());
    let reads: Vec<(String, i64)> = events(&out)
        .iter()
        .filter(|e| e["op"] == "r" && e["after"]["id"].as_i64().unwrap() > 0)
        .map(|e| (e["table"].as_str().unwrap().to_string(), e["after"]["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(reads.len(), names.len() * 3000);
    assert!(reads.windows(2).all(|w| w[0] < w[1]), "rows out of (table, key) order");
}

#[test]
fn a_partitioned_table_is_read_once_through_its_partitions() {
    let db = "e2e_snap_parts";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE readings (id bigint, at date NOT NULL, value int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at); \
         CREATE TABLE readings_2025 PARTITION OF readings FOR VALUES FROM ('2025-01-01') TO ('2026-01-01'); \
         CREATE TABLE readings_2026 PARTITION OF readings FOR VALUES FROM ('2026-01-01') TO ('2027-01-01'); \
         INSERT INTO readings SELECT g, DATE '2025-06-01' + (g % 400), g FROM generate_series(1, 4000) g; \
         CREATE TABLE marks (id bigint PRIMARY KEY, note text)",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = write_config(dir.path(), &snapshot_pipeline(db, 500));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    marker_after(dir.path(), db, "INSERT INTO marks VALUES (-1, 'marker')");
    stop(child, dir.path());
    let reads: Vec<(String, i64)> = events(&out)
        .iter()
        .filter(|e| e["op"] == "r")
        .map(|e| (e["table"].as_str().unwrap().to_string(), e["after"]["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(reads.len(), 4000, "each row once, not again through the parent");
    // Rows of a partition go by the partitioned table's name, as its
    // changes do in the stream.
    assert!(reads.iter().all(|(table, _)| table == "public.readings"), "{:?}", &reads[..3]);
    let ids: HashSet<i64> = reads.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), 4000);
}

#[test]
fn under_when_needed_a_slot_dropped_mid_snapshot_is_replaced_and_the_tables_re_read() {
    let db = "e2e_snap_needed";
    let (dir, out, _) = big_table_pipeline(db, 100_000, 500);
    let text = snapshot_pipeline(db, 500).replace("mode: initial", "mode: when_needed");
    let config = write_config(dir.path(), &text);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(120), "part of the snapshot", || line_count(&out) >= 5_000);
    drop_slot(db);
    sql(db, "UPDATE big SET note = 'after' WHERE id % 100 = 0");
    wait_until(Duration::from_secs(300), "the re-read", || {
        std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default().contains("incremental snapshot done")
    });
    marker_after(dir.path(), db, "INSERT INTO big VALUES (-1, 'marker')");
    stop(child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("when_needed: restarting the source"), "{log}");
    assert_eq!(replayed(&out, "public.big", "id", &["note"]), table_state(db, "big", "id", &["note"]));
}
