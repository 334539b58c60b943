//! The initial snapshot against a real MariaDB: rows already there, then
//! the binlog, with writes running all along; a kill -9 mid-snapshot; the
//! binlog purged mid-snapshot. The tests take turns: a purge removes files
//! every other test's stream would start from.

mod common;

use sluice_core::sync::lock;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use common::my::{my_exec, my_rows, my_sql, numbers};
use common::replay::*;
use common::*;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn pipeline(database: &str, chunk_size: u64, parallel: usize) -> String {
    format!(
        "pipelines:\n  - name: snap\n    source:\n      type: mysql\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{database}.*], heartbeat_secs: 1, snapshot: {{ mode: initial, chunk_size: {chunk_size}, max_parallel_tables: {parallel} }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    )
}

fn fresh_database(database: &str, ddl: &str) {
    my_exec(&format!("DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database}; USE {database}; {ddl}"));
}

/// A database with one table `big` of `rows` rows, and a run folder with a config.
fn big_table_pipeline(
    database: &str,
    rows: u32,
    chunk_size: u64,
    parallel: usize,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    fresh_database(
        database,
        &format!(
            "CREATE TABLE big (id bigint PRIMARY KEY, note varchar(40)); \
             INSERT INTO big SELECT seq, md5(seq) FROM {nums}",
            nums = numbers(rows)
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = write_config(dir.path(), &pipeline(database, chunk_size, parallel));
    (dir, out, config)
}

/// Every row of `table` as `key → the columns' text`.
fn table_state(table: &str, key: &str, columns: &[&str]) -> BTreeMap<String, Vec<Option<String>>> {
    let list: Vec<String> =
        std::iter::once(key).chain(columns.iter().copied()).map(|c| format!("CAST({c} AS CHAR)")).collect();
    let rows: Vec<mysql_async::Row> = my_rows(&format!("SELECT {} FROM {table}", list.join(", ")));
    rows.into_iter()
        .map(|row| {
            let mut values: Vec<Option<String>> = row.unwrap().into_iter().map(mysql_async::from_value).collect();
            (values.remove(0).unwrap(), values)
        })
        .collect()
}

fn stop(child: Running, dir: &Path) {
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "sluice did not stop cleanly:\n{log}");
}

/// FLUSH BINARY LOGS, then PURGE up to the new file until only it is left.
fn purge_all_but_the_current_binlog() {
    // The server keeps a file a binlog reader still streams (it notices a
    // closed reader only after a while), and one whose transactions are not
    // yet durable in the engine: wait out both.
    wait_until(Duration::from_secs(120), "binlog readers to end", || {
        my_sql::<u64>("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
            == Some(0)
    });
    my_exec("FLUSH BINARY LOGS");
    let current: String = common::my::binlog_head().0;
    wait_until(Duration::from_secs(120), "the older binlogs to be purged", || {
        my_exec(&format!("PURGE BINARY LOGS TO '{current}'"));
        my_rows::<mysql_async::Row>("SHOW BINARY LOGS").len() == 1
    });
}

/// A database with `items` (id, v, note) of `rows` rows, and a run folder
/// with a config in snapshot `mode` with a signal table.
fn items_pipeline(database: &str, rows: u32, mode: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    fresh_database(
        database,
        &format!(
            "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, note varchar(20)); \
             INSERT INTO items SELECT seq, 0, concat('n', seq) FROM {nums}",
            nums = numbers(rows)
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let text = pipeline(database, 500, 1)
        .replace("mode: initial", &format!("mode: {mode}"))
        .replace("heartbeat_secs: 1,", &format!("heartbeat_secs: 1, signal_table: {database}.sluice_signal,"));
    let config = write_config(dir.path(), &text);
    (dir, out, config)
}

#[test]
fn a_snapshot_under_writes_ends_in_the_database_state_with_each_later_change_once() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_mysnap";
    fresh_database(
        db,
        &format!(
            "CREATE TABLE items (id bigint PRIMARY KEY, note varchar(40), amount int, at datetime(3), paid decimal(10,2)); \
             INSERT INTO items SELECT seq, concat('item ', seq), seq, '2026-01-02 03:04:05.678', seq / 4 FROM {}; \
             CREATE TABLE tags (name varchar(20) PRIMARY KEY, n int) COLLATE utf8mb4_general_ci; \
             INSERT INTO tags SELECT concat('tag-', lpad(seq, 5, '0')), seq FROM {}; \
             INSERT INTO tags VALUES ('it''s', -1), ('Zebra', -2), ('äpfel', -3), ('', -4), ('apple', -5), ('a\\\\b', -6); \
             CREATE TABLE pairs (a int, b varchar(10), v int, PRIMARY KEY (b, a)); \
             INSERT INTO pairs SELECT seq % 7, concat('k', seq % 13), seq FROM {}; \
             CREATE TABLE logs (msg varchar(40), n int); \
             INSERT INTO logs SELECT concat('log ', seq), seq FROM {}",
            numbers(20000),
            numbers(3000),
            numbers(91),
            numbers(5000)
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // Two readers: the snapshot point is taken under FLUSH TABLES WITH READ LOCK.
    let config = write_config(dir.path(), &pipeline(db, 700, 2));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    for round in 0..150 {
        my_exec(&format!(
            "USE {db}; UPDATE items SET note = 'w{round}', amount = amount + 1 WHERE id % 150 = {round}; \
             DELETE FROM items WHERE id = {}; INSERT INTO items VALUES ({}, 'w{round}', 1, NOW(3), 1.5); \
             UPDATE tags SET n = n + 1000 WHERE name = 'tag-{:05}'; INSERT INTO logs VALUES ('w{round}', {round}); \
             UPDATE pairs SET v = v + 1 WHERE a = {}",
            round * 7 + 1,
            100_000 + round,
            round + 1,
            round % 7
        ));
    }
    marker_after_snapshot(dir.path(), || my_exec(&format!("INSERT INTO {db}.items VALUES (-1, 'marker', 0, NULL, 0)")));
    stop(child, dir.path());

    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("FLUSH TABLES WITH READ LOCK") && log.contains("held_ms"), "{log}");
    for (table, key, columns) in [("items", "id", &["note", "amount", "paid"][..]), ("tags", "name", &["n"][..])] {
        let want = table_state(&format!("{db}.{table}"), key, columns);
        let got = replayed(&out, &format!("{db}.{table}"), key, columns);
        assert_eq!(got.len(), want.len(), "{table}: rows after replay");
        assert_eq!(got, want, "{table}: the replayed rows differ from the database");
    }
    let all = events(&out);
    let pairs_want: BTreeMap<(i64, String), i64> =
        my_rows::<(i64, String, i64)>(&format!("SELECT a, b, v FROM {db}.pairs"))
            .into_iter()
            .map(|(a, b, v)| ((a, b), v))
            .collect();
    let mut pairs_got = BTreeMap::new();
    for e in all.iter().filter(|e| e["table"] == format!("{db}.pairs")) {
        let row = &e["after"];
        pairs_got
            .insert((row["a"].as_i64().unwrap(), row["b"].as_str().unwrap().to_string()), row["v"].as_i64().unwrap());
    }
    assert_eq!(pairs_got, pairs_want, "pairs (a two-column key) replayed");
    let mut got_logs: Vec<String> = all
        .iter()
        .filter(|e| e["table"] == format!("{db}.logs"))
        .map(|e| e["after"]["msg"].as_str().unwrap().to_string())
        .collect();
    let mut want_logs: Vec<String> = my_rows(&format!("SELECT msg FROM {db}.logs"));
    got_logs.sort();
    want_logs.sort();
    assert_eq!(got_logs, want_logs, "logs (no primary key): every row once");
    let ids: HashSet<&str> = all.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), all.len(), "an event id appears twice");
    let first_change = all.iter().position(|e| e["op"] != "r").unwrap();
    assert!(all[first_change..].iter().all(|e| e["op"] != "r"), "a snapshot row after the stream began");
    assert!(all[..first_change].iter().all(|e| e["position"].as_str().unwrap().starts_with("snap:")));
    let first = all.iter().find(|e| e["table"] == format!("{db}.items") && e["after"]["id"] == 20000);
    if let Some(first) = first.filter(|e| e["op"] == "r") {
        assert_eq!(first["after"]["at"], "2026-01-02T03:04:05.678", "a datetime reads as the binlog shows it");
    }
    let notes: Vec<&str> = all[first_change..]
        .iter()
        .filter(|e| e["table"] == format!("{db}.items") && e["op"] == "c")
        .map(|e| e["after"]["note"].as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), notes.iter().collect::<HashSet<_>>().len(), "an insert streamed twice");
}

#[test]
fn a_kill_mid_snapshot_resumes_after_the_last_row_every_sink_holds() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_mysnap_kill";
    // One reader: MariaDB takes the snapshot point without a lock.
    let (dir, out, config) = big_table_pipeline(db, 150_000, 2000, 1);
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
    my_exec(&format!("UPDATE {db}.big SET note = 'changed' WHERE id % 1000 = 0; DELETE FROM {db}.big WHERE id <= 10"));
    let child = spawn(&args, dir.path());
    marker_after_snapshot(dir.path(), || my_exec(&format!("INSERT INTO {db}.big VALUES (-1, 'marker')")));
    stop(child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    // MySQL takes the point under FLUSH TABLES WITH READ LOCK even then.
    let lock = if common::my::is_mariadb() { "none" } else { "FLUSH TABLES WITH READ LOCK" };
    assert!(log.contains(&format!("lock=\"{lock}\"")), "{log}");
    assert!(log.contains(&format!("resume_after={db}.big")), "{log}");
    let all = events(&out);
    let reads: Vec<i64> = all.iter().filter(|e| e["op"] == "r").map(|e| e["after"]["id"].as_i64().unwrap()).collect();
    assert_eq!(reads.len(), 150_000, "each row read exactly once across the kill");
    assert!(reads.windows(2).all(|w| w[0] < w[1]), "snapshot rows out of key order");
    assert_eq!(
        replayed(&out, &format!("{db}.big"), "id", &["note"]),
        table_state(&format!("{db}.big"), "id", &["note"])
    );
}

#[test]
fn the_binlog_purged_mid_snapshot_stops_the_pipeline_with_a_clear_error() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_mysnap_purge";
    let (dir, out, config) = big_table_pipeline(db, 150_000, 200, 1);
    // So that the file the snapshot starts in holds nothing still pending
    // and the purge below can take it at once.
    purge_all_but_the_current_binlog();
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(120), "part of the snapshot", || line_count(&out) >= 2_000);
    purge_all_but_the_current_binlog();
    let status = child.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "sluice must stop when the binlog it would stream from is gone");
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("purged during the snapshot") && log.contains("checkpoints reset"), "{log}");
    assert!(events(&out).iter().all(|e| e["op"] == "r"), "nothing may stream from a gap");
}

#[test]
fn an_incremental_snapshot_under_writes_never_emits_a_row_older_than_a_change_before_it() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_myinc";
    let (dir, out, config) = items_pipeline(db, 1_0000, "never");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "streaming", || {
        std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default().contains("binlog streaming started")
    });
    let stop_writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer = {
        let (stop_writing, rounds) = (stop_writing.clone(), rounds.clone());
        std::thread::spawn(move || {
            let mut round = 0u32;
            while !stop_writing.load(std::sync::atomic::Ordering::Relaxed) {
                my_exec(&format!(
                    "UPDATE {db}.items SET v = v + 1 WHERE id % 101 = {}; DELETE FROM {db}.items WHERE id = {}; \
                     INSERT IGNORE INTO {db}.items VALUES ({}, 1, 'new')",
                    round % 101,
                    round * 13 % 10_000 + 1,
                    100_000 + round
                ));
                round += 1;
                rounds.store(round, std::sync::atomic::Ordering::Relaxed);
                // Paced: a writer that outruns a debug build's stream makes
                // every chunk's high watermark recede, and the snapshot
                // would end only when the writer stops.
                std::thread::sleep(Duration::from_millis(20));
            }
            round
        })
    };
    let written = || rounds.load(std::sync::atomic::Ordering::Relaxed);
    wait_until(Duration::from_secs(60), "the writer to be under way", || written() >= 3);
    let rounds_at_ask = written();
    let asked = run(&["snapshot", "-c", config.to_str().unwrap(), "--table", &format!("{db}.items")], dir.path());
    assert!(asked.status.success(), "{}", stderr(&asked));
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    let started = std::time::Instant::now();
    while !log().contains("incremental snapshot done") {
        // The log says why, if it never ends.
        let text = log();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no end to the incremental snapshot; log tail (newest first):\n{}",
            tail.join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // On a loaded machine the snapshot may take less than ten rounds; what
    // matters is that writes overlapped it, and that some follow it.
    assert!(written() > rounds_at_ask, "no write overlapped the snapshot");
    let rounds_at_done = written();
    wait_until(Duration::from_secs(60), "writes after the snapshot", || written() >= rounds_at_done + 3);
    stop_writing.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.join().unwrap() > 6, "the writer hardly ran");
    marker_after_snapshot(dir.path(), || my_exec(&format!("INSERT INTO {db}.items VALUES (-1, 0, 'marker')")));
    stop(child, dir.path());

    let table = format!("{db}.items");
    assert_eq!(replayed(&out, &table, "id", &["v", "note"]), table_state(&table, "id", &["v", "note"]));
    let all = events(&out);
    let mut last_v: BTreeMap<i64, i64> = BTreeMap::new();
    for event in all.iter().filter(|e| e["table"] == table && e["op"] != "d") {
        let (id, v) = (event["after"]["id"].as_i64().unwrap(), event["after"]["v"].as_i64().unwrap());
        let before = last_v.insert(id, v).unwrap_or(i64::MIN);
        assert!(v >= before, "row {id}: v {v} (op {}) after v {before}: a stale read", event["op"]);
    }
    assert!(all.iter().filter(|e| e["op"] == "r").count() > 8_000);
    assert!(all.iter().all(|e| e["table"] != format!("{db}.sluice_signal")), "signal rows reached the sink");
}

#[test]
fn when_needed_streams_on_from_now_and_re_reads_the_tables_after_the_binlog_is_purged() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_myneeded";
    let (dir, out, config) = items_pipeline(db, 3_000, "when_needed");
    let args = ["run", "-c", config.to_str().unwrap()];
    let child = spawn(&args, dir.path());
    marker_after_snapshot(dir.path(), || my_exec(&format!("INSERT INTO {db}.items VALUES (-2, 0, 'marker')")));
    stop(child, dir.path());
    // Changes the purged binlog held: only the re-read has them.
    my_exec(&format!("UPDATE {db}.items SET v = 7 WHERE id % 10 = 0; INSERT INTO {db}.items VALUES (90000, 3, 'gap')"));
    purge_all_but_the_current_binlog();
    let child = spawn(&args, dir.path());
    wait_until(Duration::from_secs(300), "the re-read", || {
        std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default().contains("incremental snapshot done")
    });
    my_exec(&format!("INSERT INTO {db}.items VALUES (-1, 0, 'end')"));
    wait_until(Duration::from_secs(120), "the last row", || {
        std::fs::read_to_string(&out).unwrap_or_default().contains("\"note\":\"end\"")
    });
    stop(child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("when_needed"), "{log}");
    let table = format!("{db}.items");
    assert_eq!(replayed(&out, &table, "id", &["v", "note"]), table_state(&table, "id", &["v", "note"]));
}

#[test]
fn tables_created_or_renamed_into_the_patterns_join_with_their_rows_and_no_other_table_is_re_read() {
    let _turn = lock(&ONE_AT_A_TIME);
    let db = "e2e_mynew";
    let side = "e2e_mynew_side";
    let (dir, out, config) = items_pipeline(db, 200, "never");
    my_exec(&format!(
        "DROP DATABASE IF EXISTS {side}; CREATE DATABASE {side}; USE {side}; \
         CREATE TABLE {side}.moved (id bigint PRIMARY KEY, note varchar(20)); \
         INSERT INTO {side}.moved SELECT seq, concat('m', seq) FROM {}",
        numbers(300)
    ));
    let args = ["run", "-c", config.to_str().unwrap()];
    let child = spawn(&args, dir.path());
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    wait_until(Duration::from_secs(60), "streaming", || log().contains("binlog streaming started"));
    // Created while streaming: every row is in the binlog after it.
    my_exec(&format!(
        "USE {db}; CREATE TABLE {db}.late (id bigint PRIMARY KEY, note varchar(20)); \
         INSERT INTO {db}.late SELECT seq, concat('l', seq) FROM {}",
        numbers(100)
    ));
    // Renamed in from a database the patterns leave out: its rows are not.
    my_exec(&format!("RENAME TABLE {side}.moved TO {db}.moved; INSERT INTO {db}.moved VALUES (1000, 'after')"));
    marker_after_snapshot(dir.path(), || my_exec(&format!("INSERT INTO {db}.items VALUES (-1, 0, 'marker')")));
    stop(child, dir.path());
    // Created while Sluice is down: the binlog still holds it all.
    my_exec(&format!(
        "USE {db}; CREATE TABLE {db}.down (id bigint PRIMARY KEY, note varchar(20)); \
         INSERT INTO {db}.down SELECT seq, concat('d', seq) FROM {}",
        numbers(50)
    ));
    let child = spawn(&args, dir.path());
    my_exec(&format!("INSERT INTO {db}.items VALUES (-2, 0, 'end')"));
    wait_until(Duration::from_secs(120), "the last row", || {
        std::fs::read_to_string(&out).unwrap_or_default().contains("\"note\":\"end\"")
    });
    stop(child, dir.path());

    for table in ["late", "moved", "down"] {
        let table = format!("{db}.{table}");
        assert_eq!(replayed(&out, &table, "id", &["note"]), table_state(&table, "id", &["note"]), "{table}");
    }
    let all = events(&out);
    let reads = |table: &str| all.iter().filter(|e| e["op"] == "r" && e["table"] == format!("{db}.{table}")).count();
    assert!(reads("moved") >= 300, "the renamed table's rows are read");
    assert_eq!((reads("items"), reads("late"), reads("down")), (0, 0, 0), "no other table is read again");
    let created = all.iter().find(|e| e["op"] == "s" && e["table"] == format!("{db}.late")).expect("a schema event");
    assert_eq!(
        created["after"]["changes"],
        serde_json::json!([{"change": "added", "column": "id"}, {"change": "added", "column": "note"}])
    );
}
