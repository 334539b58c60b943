//! Incremental snapshots against a real PostgreSQL: one table re-read
//! while the pipeline streams and a writer keeps changing it; a kill -9
//! in the middle; the command's refusals.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::api::{api_addr, call};
use common::pg::*;
use common::replay::*;
use common::*;
use sluice_postgres::wire::Connection;

fn streaming_pipeline(database: &str, chunk_size: u64) -> String {
    format!(
        "pipelines:\n  - name: inc\n    source:\n      type: postgres\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, database: {database}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.*], snapshot: {{ chunk_size: {chunk_size} }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
    )
}

/// A database with `items` of `rows` rows, streaming into a run folder.
fn setup(database: &str, rows: u32, chunk_size: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    fresh_database(database);
    sql(
        database,
        &format!(
            "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, note text); \
             INSERT INTO items SELECT g, 0, 'n' || g FROM generate_series(1, {rows}) g; \
             CREATE TABLE other (id int PRIMARY KEY); \
             CREATE TABLE nokey (note text)"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &streaming_pipeline(database, chunk_size));
    (dir, config)
}

fn log_has(dir: &Path, text: &str) -> bool {
    std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default().contains(text)
}

fn items_state(database: &str) -> BTreeMap<String, Vec<Option<String>>> {
    state_of(database, "SELECT id::text, v::text, note FROM items")
}

/// A query's rows as `first column → the others`.
fn state_of(database: &str, query: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = Connection::connect(&params(database), false).await.unwrap();
        let rows = conn.simple_query(query).await.unwrap();
        conn.close().await;
        rows.rows.into_iter().map(|mut r| (r.remove(0).unwrap(), r)).collect()
    })
}

fn ask(config: &Path, dir: &Path, table: &str) -> std::process::Output {
    run(&["snapshot", "-c", config.to_str().unwrap(), "--table", table], dir)
}

#[test]
fn an_incremental_snapshot_under_writes_never_emits_a_row_older_than_a_change_before_it() {
    let db = "e2e_inc";
    let (dir, config) = setup(db, 30_000, 500);
    let out = dir.path().join("out.jsonl");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "streaming", || log_has(dir.path(), "replication started"));
    // The writer bumps `v` on rows all over the table while the chunks are
    // read; a stale chunk row would show a smaller v after a larger one.
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop_writing = stop_writing.clone();
        std::thread::spawn(move || {
            let mut round = 0u32;
            while !stop_writing.load(Ordering::Relaxed) {
                sql(
                    db,
                    &format!(
                        "UPDATE items SET v = v + 1 WHERE id % 101 = {}; DELETE FROM items WHERE id = {}; \
                         INSERT INTO items VALUES ({}, 1, 'new') ON CONFLICT DO NOTHING",
                        round % 101,
                        round * 13 % 30_000 + 1,
                        100_000 + round
                    ),
                );
                round += 1;
            }
            round
        })
    };
    // `--wait` follows the snapshot through the API until it ends; the
    // API shows its progress meanwhile, with the estimate ANALYZE gives.
    sql(db, "ANALYZE items");
    let addr = api_addr(dir.path());
    let waiting = sluice()
        .args(["snapshot", "-c", config.to_str().unwrap(), "--table", "public.items", "--wait", "--api-addr", &addr])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = serde_json::Value::Null;
    wait_until(Duration::from_secs(120), "the snapshot's progress in the API", || {
        progress = call(&addr, "GET", "/pipelines/inc/snapshot", None, None).json();
        progress["running"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["incremental"] == true && s["table"] == "public.items" && s["rows"].as_u64() > Some(0))
    });
    let running = &progress["running"][0];
    assert!(running["estimated_rows"].as_u64() > Some(25_000), "the server's estimate: {progress}");
    let waited = waiting.wait_with_output().unwrap();
    assert!(waited.status.success(), "--wait: {}", stderr(&waited));
    let said = String::from_utf8_lossy(&waited.stdout);
    assert!(said.contains("public.items read, "), "--wait says the table was read: {said}");
    assert!(log_has(dir.path(), "incremental snapshot done"));
    let ended = call(&addr, "GET", "/pipelines/inc/snapshot", None, None).json();
    assert_eq!(ended["running"], serde_json::json!([]), "the snapshot is over: {ended}");
    assert_eq!(ended["ended"][0]["table"], "public.items", "{ended}");
    stop_writing.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 10, "the writer ran only {rounds} rounds");
    sql(db, "INSERT INTO items VALUES (-1, 0, 'marker')");
    wait_until(Duration::from_secs(120), "the marker row", || has_marker(&out));
    stop(child, dir.path());

    let all = events(&out);
    assert_eq!(replayed(&out, "public.items", "id", &["v", "note"]), items_state(db), "replayed rows differ");
    let mut last_v: BTreeMap<i64, i64> = BTreeMap::new();
    for event in all.iter().filter(|e| e["table"] == "public.items" && e["op"] != "d") {
        let (id, v) = (event["after"]["id"].as_i64().unwrap(), event["after"]["v"].as_i64().unwrap());
        let before = last_v.insert(id, v).unwrap_or(i64::MIN);
        assert!(v >= before, "row {id}: v {v} (op {}) after v {before}: a stale read", event["op"]);
    }
    let reads = all.iter().filter(|e| e["op"] == "r").count();
    assert!(reads > 25_000, "{reads} rows read");
    let positions: Vec<&str> = all.iter().map(|e| e["position"].as_str().unwrap()).collect();
    assert_eq!(positions.iter().collect::<HashSet<_>>().len(), positions.len(), "a position appears twice");
    assert!(all.iter().all(|e| e["table"] != "sluice_watermark" && e["table"] != "sluice_signal"));
}

#[test]
fn a_kill_mid_incremental_snapshot_reads_on_from_the_last_chunk_every_sink_holds() {
    let db = "e2e_inc_kill";
    let (dir, config) = setup(db, 60_000, 500);
    let out = dir.path().join("out.jsonl");
    let args = ["run", "-c", config.to_str().unwrap()];
    let mut child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(60), "streaming", || log_has(dir.path(), "replication started"));
    let asked = ask(&config, dir.path(), "public.items");
    assert!(asked.status.success(), "{}", stderr(&asked));
    wait_until(Duration::from_secs(120), "part of the snapshot", || line_count(&out) >= 10_000);
    child.kill9();
    assert!(line_count(&out) < 60_000, "the snapshot finished before the kill; make the table bigger");
    sql(db, "UPDATE items SET v = 5 WHERE id % 1000 = 0; DELETE FROM items WHERE id > 59990");
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(300), "the incremental snapshot", || {
        log_has(dir.path(), "incremental snapshot done")
    });
    sql(db, "INSERT INTO items VALUES (-1, 0, 'marker')");
    wait_until(Duration::from_secs(120), "the marker row", || has_marker(&out));
    stop(child, dir.path());
    assert!(log_has(dir.path(), "resume=true"), "the second run did not resume the snapshot");
    assert_eq!(replayed(&out, "public.items", "id", &["v", "note"]), items_state(db));
    let read: HashSet<i64> =
        events(&out).iter().filter(|e| e["op"] == "r").map(|e| e["after"]["id"].as_i64().unwrap()).collect();
    assert!((1..=59_990).all(|id| read.contains(&id)), "a row was never read");
}

#[test]
fn the_command_refuses_tables_it_cannot_read_by_key_and_names_the_problem() {
    let db = "e2e_inc_refuse";
    let (dir, config) = setup(db, 10, 500);
    let cases = [("public.nokey", "no primary key"), ("public.missing", "is gone"), ("sales.items", "no pipeline")];
    for (table, problem) in cases {
        let output = ask(&config, dir.path(), table);
        assert_eq!(output.status.code(), Some(2), "{table}");
        assert!(stderr(&output).contains(problem), "{table}: {}", stderr(&output));
    }
}

/// Streams `items` with `mode`; stops; `between` runs while Sluice is
/// down; starts again and waits for the re-read. Returns the run folder.
fn restart_with_mode(db: &str, mode: &str, between: impl FnOnce()) -> tempfile::TempDir {
    let (dir, _) = setup(db, 5_000, 700);
    let text = streaming_pipeline(db, 700)
        .replace("snapshot: { chunk_size: 700 }", &format!("snapshot: {{ mode: {mode}, chunk_size: 700 }}"));
    let config = write_config(dir.path(), &text);
    let out = dir.path().join("out.jsonl");
    let args = ["run", "-c", config.to_str().unwrap()];
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(120), "the initial snapshot", || log_has(dir.path(), "snapshot done"));
    sql(db, "INSERT INTO items VALUES (-2, 0, 'first')");
    wait_until(Duration::from_secs(120), "the first run", || {
        std::fs::read_to_string(&out).unwrap_or_default().contains("\"note\":\"first\"")
    });
    stop(child, dir.path());
    between();
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(300), "the re-read", || log_has(dir.path(), "incremental snapshot done"));
    sql(db, "INSERT INTO items VALUES (-1, 0, 'marker')");
    wait_until(Duration::from_secs(120), "the marker row", || has_marker(&out));
    stop(child, dir.path());
    assert_eq!(replayed(&out, "public.items", "id", &["v", "note"]), items_state(db), "replayed rows differ");
    dir
}

#[test]
fn when_needed_streams_on_from_a_new_slot_and_re_reads_the_tables_after_the_slot_is_dropped() {
    let db = "e2e_inc_needed";
    let dir = restart_with_mode(db, "when_needed", || {
        sql(db, &format!("SELECT pg_drop_replication_slot('sluice_{db}')"));
        // Changes the dropped slot would have carried: only the re-read has them.
        sql(db, "UPDATE items SET v = 7 WHERE id % 10 = 0; INSERT INTO items VALUES (90000, 3, 'gap')");
    });
    assert!(log_has(dir.path(), "when_needed"), "the restart did not say why it re-read");
}

#[test]
fn always_re_reads_the_tables_on_every_start() {
    let db = "e2e_inc_always";
    let dir = restart_with_mode(db, "always", || {});
    let text = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    // The first run read the tables (initial), the second re-read them.
    let reads = text.lines().filter(|l| l.contains("\"op\":\"r\"") && l.contains("\"table\":\"public.items\"")).count();
    // The second read includes the row streamed in between.
    assert_eq!(reads, 5_000 + 5_001, "each row read once per start");
}

/// PostgreSQL 13's pgoutput sends no logical decoding messages, so an
/// incremental snapshot has no watermarks there: the command and the
/// snapshot modes that re-read tables are refused with the reason, while
/// 14 and later take the request.
#[test]
fn incremental_snapshots_are_taken_from_postgresql_14_on_and_refused_before() {
    let db = "e2e_inc_version";
    let (dir, config) = setup(db, 10, 500);
    let output = ask(&config, dir.path(), "public.items");
    let version: u32 = psql_value(db, "SHOW server_version_num").parse().unwrap();
    if version >= 140_000 {
        assert!(output.status.success(), "{}", stderr(&output));
        return;
    }
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("need PostgreSQL 14 or later"), "{}", stderr(&output));
    let text = streaming_pipeline(db, 500).replace("chunk_size: 500", "chunk_size: 500, mode: when_needed");
    let config = write_config(dir.path(), &text);
    let output = run(&["validate", "-c", config.to_str().unwrap(), "--connect"], dir.path());
    assert!(!output.status.success());
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), stderr(&output));
    assert!(said.contains("snapshot.mode: when_needed") && said.contains("needs PostgreSQL 14"), "{said}");
}

/// A table created while the pipeline streams joins it: Sluice publishes
/// it and reads the rows it had by an incremental snapshot, and nothing
/// else is read again.
#[test]
fn a_table_created_while_streaming_joins_with_its_rows_and_no_other_table_is_re_read() {
    let db = "e2e_inc_new";
    let (dir, config) = setup(db, 100, 50);
    let out = dir.path().join("out.jsonl");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "streaming", || log_has(dir.path(), "replication started"));
    sql(
        db,
        "CREATE TABLE late (id bigint PRIMARY KEY, note text); \
         INSERT INTO late SELECT g, 'before' FROM generate_series(1, 300) g",
    );
    wait_until(Duration::from_secs(60), "the new table published", || {
        log_has(dir.path(), "a new table matches the patterns")
    });
    sql(
        db,
        "INSERT INTO late SELECT g, 'after' FROM generate_series(301, 400) g; UPDATE late SET note = 'changed' WHERE id % 50 = 0",
    );
    wait_until(Duration::from_secs(60), "the snapshot of the new table", || {
        log_has(dir.path(), "incremental snapshot done")
    });
    sql(db, "INSERT INTO late VALUES (1000, 'marker')");
    wait_until(Duration::from_secs(60), "the marker", || {
        replayed(&out, "public.late", "id", &["note"]).contains_key("1000")
    });
    stop(child, dir.path());
    // A table created while Sluice is down joins on the next start.
    sql(
        db,
        "CREATE TABLE down (id bigint PRIMARY KEY, note text); INSERT INTO down SELECT g, 'x' FROM generate_series(1, 200) g",
    );
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    sql(db, "INSERT INTO down VALUES (1000, 'marker')");
    wait_until(Duration::from_secs(60), "the table made while down", || {
        replayed(&out, "public.down", "id", &["note"]).len() == 201
    });
    stop(child, dir.path());
    for table in ["late", "down"] {
        let state = state_of(db, &format!("SELECT id::text, note FROM {table}"));
        assert_eq!(replayed(&out, &format!("public.{table}"), "id", &["note"]), state, "{table}");
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let read: Vec<&str> = text.lines().filter(|l| l.contains("\"op\":\"r\"")).collect();
    let of = |l: &str, table: &str| l.contains(&format!("\"table\":\"public.{table}\""));
    assert!(read.iter().any(|l| of(l, "late")), "the rows late had were read");
    assert!(read.iter().any(|l| of(l, "down")), "the rows down had were read");
    assert!(read.iter().all(|l| of(l, "late") || of(l, "down")), "no other table is read again");
}

/// A table with rows attached as a partition of a captured table while
/// the pipeline streams, then changed: the file replays to the table. The
/// attach logs no row, so the source reads the partition; and before 15,
/// where pgoutput keeps dropping the changes of a partition it saw before
/// the attach, it renews the publication first.
#[test]
fn a_partition_attached_while_streaming_ends_in_the_table_state() {
    let db = "e2e_inc_attach";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE meas (id int PRIMARY KEY, v int) PARTITION BY RANGE (id); \
         CREATE TABLE meas_low PARTITION OF meas FOR VALUES FROM (0) TO (100); \
         CREATE TABLE meas_high (LIKE meas INCLUDING ALL)",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = streaming_pipeline(db, 50).replace("tables: [public.*]", "tables: [public.meas]");
    let config = write_config(dir.path(), &text);
    let out = dir.path().join("out.jsonl");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "streaming", || log_has(dir.path(), "replication started"));
    // A change of the table while it stands alone, decoded before the attach.
    sql(db, "INSERT INTO meas_high SELECT g, 0 FROM generate_series(100, 120) g");
    sql(db, "INSERT INTO meas VALUES (1, 1)");
    let meas = || replayed(&out, "public.meas", "id", &["v"]);
    wait_until(Duration::from_secs(60), "the first row", || meas().contains_key("1"));
    sql(db, "ALTER TABLE meas ATTACH PARTITION meas_high FOR VALUES FROM (100) TO (1000000)");
    sql(db, "INSERT INTO meas VALUES (3, 1), (130, 1); UPDATE meas SET v = 5 WHERE id % 5 = 0");
    let state = || state_of(db, "SELECT id::text, v::text FROM meas");
    wait_until(Duration::from_secs(60), "the file to replay to the table", || meas() == state());
    sql(db, "INSERT INTO meas VALUES (1000, 1)");
    wait_until(Duration::from_secs(60), "the marker", || meas().contains_key("1000"));
    stop(child, dir.path());
    assert_eq!(meas(), state());
    let version: u32 = psql_value(db, "SHOW server_version_num").parse().unwrap();
    let renewed = log_has(dir.path(), &format!("renewed={}", version < 150_000));
    assert!(renewed, "the publication is renewed before 15 only");
}

/// A slot made anew under the same name while Sluice was stopped (as after
/// a failover before PostgreSQL 17), or advanced by another client, is
/// confirmed past anything Sluice confirmed: the changes in between are
/// gone from it. The restart refuses it, naming the slot, and
/// `when_needed` repairs it: a new slot, and every table read again.
#[test]
fn a_slot_made_anew_or_advanced_by_another_client_is_refused_and_when_needed_repairs_it() {
    let db = "e2e_inc_anew";
    let slot = format!("sluice_{db}");
    let (dir, _) = setup(db, 100, 50);
    let initial = streaming_pipeline(db, 50)
        .replace("snapshot: { chunk_size: 50 }", "snapshot: { mode: initial, chunk_size: 50 }");
    let config = write_config(dir.path(), &initial);
    let out = dir.path().join("out.jsonl");
    let args = ["run", "-c", config.to_str().unwrap()];
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(60), "the initial snapshot", || log_has(dir.path(), "snapshot done"));
    sql(db, "INSERT INTO items VALUES (-2, 0, 'first')");
    wait_until(Duration::from_secs(60), "the first row", || {
        replayed(&out, "public.items", "id", &["v"]).contains_key("-2")
    });
    stop(child, dir.path());
    let refused = |what: &str| {
        // The log of this run alone.
        let _ = std::fs::remove_file(dir.path().join("sluice.log"));
        let mut child = spawn(&args, dir.path());
        let status = child.wait_exit(Duration::from_secs(60));
        let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
        assert_eq!(status.code(), Some(1), "{what}: {log}");
        assert!(log.contains(&format!("replication slot \"{slot}\" is confirmed to")), "{what}: {log}");
        assert!(log.contains("snapshot.mode: when_needed"), "{what}: {log}");
    };
    sql(db, &format!("SELECT pg_drop_replication_slot('{slot}')"));
    sql(db, "UPDATE items SET v = 7 WHERE id % 10 = 0");
    sql(db, &format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"));
    refused("a slot made anew");
    let repair = initial.replace("mode: initial", "mode: when_needed");
    write_config(dir.path(), &repair);
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(120), "the re-read", || log_has(dir.path(), "incremental snapshot done"));
    sql(db, "INSERT INTO items VALUES (-1, 0, 'marker')");
    wait_until(Duration::from_secs(60), "the marker row", || has_marker(&out));
    stop(child, dir.path());
    assert_eq!(replayed(&out, "public.items", "id", &["v", "note"]), items_state(db), "replayed rows differ");
    write_config(dir.path(), &initial);
    sql(db, "UPDATE items SET v = 8 WHERE id % 10 = 1");
    sql(db, &format!("SELECT pg_replication_slot_advance('{slot}', pg_current_wal_lsn())"));
    refused("a slot advanced by another client");
}
