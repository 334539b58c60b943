//! The binary against a real MariaDB, killed with SIGKILL mid-stream,
//! resuming by binlog file and offset, and by GTID; what a DDL statement
//! sends to a sink; TLS and login refusals stopping the pipeline.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::my::{items_pipeline, my_exec, my_sql};
use common::pg::inserted_ids;
use common::*;

fn kill_and_resume(gtid: bool) {
    let db = if gtid { "e2e_my_gtid" } else { "e2e_my_file" };
    my_exec(&format!("DROP DATABASE IF EXISTS {db}"));
    my_exec(&format!("CREATE DATABASE {db}"));
    my_exec(&format!("CREATE TABLE {db}.items (id bigint PRIMARY KEY, note varchar(20))"));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = write_config(dir.path(), &items_pipeline(db, gtid, &file, offset));
    let config = config.to_str().unwrap();
    let mut child = spawn(&["run", "-c", config], dir.path());
    let rows_per_round: i64 = 3000;
    let rounds = 5;
    for round in 0..rounds {
        let first = round * rows_per_round + 1;
        for t in 0..rows_per_round / 50 {
            let start = first + t * 50;
            let values: Vec<String> = (start..start + 50).map(|id| format!("({id}, 'n{id}')")).collect();
            my_exec(&format!("INSERT INTO {db}.items VALUES {}", values.join(",")));
        }
        if round == 2 {
            my_exec("FLUSH BINARY LOGS");
        }
        let target = (first + rows_per_round / 3) as usize;
        wait_until(
            Duration::from_secs(60),
            &format!("rows (log: {})", dir.path().join("sluice.log").display()),
            || inserted_ids(&out).len() >= target,
        );
        child.kill9();
        child = spawn(&["run", "-c", config], dir.path());
    }
    let total = (rounds * rows_per_round) as usize;
    wait_until(Duration::from_secs(120), "every row", || inserted_ids(&out).len() >= total);
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "sluice did not stop cleanly:\n{log}");
    let resumed_by_gtid = log.matches("by=\"gtid\"").count();
    if gtid {
        // A kill can land before the first checkpoint is stored; that
        // restart starts from the configured start, by file. Every restart
        // from a checkpoint must resume by GTID.
        let from_checkpoint = log.matches("pipeline starting from=my:").count();
        assert!(from_checkpoint >= 1, "no restart from a checkpoint:\n{log}");
        assert_eq!(resumed_by_gtid, from_checkpoint, "the restarts from a checkpoint resumed by GTID:\n{log}");
    } else {
        assert_eq!(resumed_by_gtid, 0, "the restarts resumed by file and offset:\n{log}");
    }
    let ids = inserted_ids(&out);
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), total, "duplicates in the file");
    assert_eq!(unique, (1..=total as i64).collect(), "rows missing from the file");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "rows out of binlog order");
}

#[test]
fn kill_9_resuming_by_file_and_offset_leaves_every_row_once() {
    kill_and_resume(false);
}

#[test]
fn kill_9_resuming_by_gtid_leaves_every_row_once() {
    kill_and_resume(true);
}

/// A pipeline of `tables` into a file sink, from the server's current
/// position; `extra` goes into the source config.
fn current_pipeline(id: &str, tables: &str, extra: &str) -> String {
    let (file, offset): (String, u64) = common::my::binlog_head();
    file_pipeline(id, tables, &format!(", start: {{ file: {file}, offset: {offset} }}{extra}"))
}

/// A pipeline of `tables` into a file sink; `extra` goes into the source
/// config.
fn file_pipeline(id: &str, tables: &str, extra: &str) -> String {
    format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {id}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{tables}], heartbeat_secs: 1{extra} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    )
}

#[test]
fn a_password_in_a_statement_reaches_no_sink_and_ddl_literals_are_redacted() {
    let db = "e2e_my_sec";
    my_exec(&format!(
        "DROP USER IF EXISTS e2e_my_sec_u; DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; \
         CREATE TABLE {db}.t (id int PRIMARY KEY, note varchar(20))"
    ));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &current_pipeline(db, &format!("{db}.t"), ""));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    // A row first, so the source knows the columns before the ALTER.
    my_exec(&format!("INSERT INTO {db}.t VALUES (0, 'before')"));
    let out = dir.path().join("out.jsonl");
    wait_until(Duration::from_secs(60), "the row before the statements", || inserted_ids(&out) == [0]);
    // The statement of the issue, with the captured database as the default.
    my_exec(&format!("USE {db}; CREATE USER e2e_my_sec_u IDENTIFIED BY 'Leak TABLE t '"));
    my_exec(&format!(
        "USE {db}; GRANT SELECT ON {db}.t TO e2e_my_sec_u; ALTER USER e2e_my_sec_u IDENTIFIED BY 'Leak2 TABLE t'"
    ));
    my_exec(&format!("USE {db}; ALTER TABLE t ADD COLUMN c varchar(10) DEFAULT 'secret'"));
    my_exec(&format!("INSERT INTO {db}.t VALUES (1, 'after', 'plain')"));
    wait_until(Duration::from_secs(60), "the row after the statements", || inserted_ids(&out) == [0, 1]);
    my_exec("DROP USER e2e_my_sec_u");
    stop_cleanly(child, dir.path());
    let text = std::fs::read_to_string(&out).unwrap();
    let events: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let schema: Vec<&serde_json::Value> = events.iter().filter(|e| e["op"] == "s").collect();
    assert_eq!(schema.len(), 1, "only the ALTER TABLE is a schema event: {text}");
    assert_eq!(schema[0]["table"], format!("{db}.t"));
    assert_eq!(schema[0]["after"]["ddl"], "ALTER TABLE t ADD COLUMN c varchar(10) DEFAULT '?'");
    assert_eq!(schema[0]["after"]["changes"], serde_json::json!([{"change": "added", "column": "c"}]));
    let columns = schema[0]["after"]["columns"].as_array().unwrap();
    let names: Vec<&str> = columns.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["id", "note", "c"]);
    assert_eq!((&columns[0]["key"], &columns[0]["nullable"]), (&true.into(), &false.into()));
    assert_eq!(columns[2], serde_json::json!({"name": "c", "type": "varchar(10)", "nullable": true, "key": false}));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    for secret in ["Leak", "secret"] {
        assert!(!text.contains(secret), "{secret} reached the sink: {text}");
    }
    for secret in ["Leak", "'secret'"] {
        assert!(!log.contains(secret), "{secret} reached the log: {log}");
    }
}

/// A table whose first row the stream reaches only after an `ALTER` the
/// server already ran (here while Sluice was stopped) is read with the
/// columns the row was written with: the source recorded every captured
/// table's schema where its stream began.
fn first_rows_behind_an_alter_read_with_their_own_columns(mode: &str) {
    let db = format!("e2e_my_first_{mode}");
    my_exec(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; \
         CREATE TABLE {db}.t (id int PRIMARY KEY, note varchar(20)); CREATE TABLE {db}.u (id int PRIMARY KEY)"
    ));
    let dir = tempfile::tempdir().unwrap();
    let text = file_pipeline(&db, &format!("{db}.*"), &format!(", snapshot: {{ mode: {mode} }}"));
    let config = write_config(dir.path(), &text);
    let out = dir.path().join("out.jsonl");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    // A streamed row of the other table: the stream has begun, past any snapshot.
    let mut next = 0;
    wait_until(Duration::from_secs(60), "a streamed row of u", || {
        next += 1;
        my_exec(&format!("INSERT INTO {db}.u VALUES ({next})"));
        !inserted_ids(&out).is_empty()
    });
    stop_cleanly(child, dir.path());
    my_exec(&format!(
        "INSERT INTO {db}.t VALUES (1, 'old'); ALTER TABLE {db}.t ADD COLUMN c int; INSERT INTO {db}.t VALUES (2, 'new', 7)"
    ));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let rows_of_t = || -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["table"] == format!("{db}.t"))
            .collect()
    };
    wait_until(Duration::from_secs(60), "both rows of t", || rows_of_t().len() == 3);
    stop_cleanly(child, dir.path());
    let events = rows_of_t();
    assert_eq!(events[0]["after"], serde_json::json!({"id": 1, "note": "old"}), "{events:?}");
    assert_eq!(events[1]["op"], "s");
    assert_eq!(events[1]["after"]["changes"], serde_json::json!([{"change": "added", "column": "c"}]));
    assert_eq!(events[2]["after"], serde_json::json!({"id": 2, "note": "new", "c": 7}), "{events:?}");
}

#[test]
fn a_first_row_behind_an_alter_is_read_with_its_own_columns_after_a_snapshot() {
    first_rows_behind_an_alter_read_with_their_own_columns("initial");
}

#[test]
fn a_first_row_behind_an_alter_is_read_with_its_own_columns_from_the_head() {
    first_rows_behind_an_alter_read_with_their_own_columns("never");
}

fn stop_cleanly(child: Running, dir: &std::path::Path) {
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "sluice did not stop cleanly:\n{log}");
}

/// `sluice run` must stop by itself, with exit 1, and say `expected` in its log.
fn refused(id: &str, extra: &str, password: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let text = current_pipeline(id, "e2e_my_refused.*", extra).replace("${SLUICE_TEST_MY_PASSWORD}", password);
    let config = write_config(dir.path(), &text);
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let status = child.wait_exit(Duration::from_secs(30));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{log}");
    for word in expected {
        assert!(log.contains(word), "{word:?} missing from:\n{log}");
    }
}

#[test]
fn tls_that_the_server_does_not_offer_stops_the_pipeline() {
    let have_ssl: Option<(String, String)> = my_sql("SHOW VARIABLES LIKE 'have_ssl'");
    assert_ne!(have_ssl.map(|(_, v)| v).as_deref(), Some("YES"), "this test needs a server without TLS");
    let ca = env("SLUICE_TEST_PG_CA");
    refused(
        "e2e_my_tls",
        &format!(", ssl_mode: verify-full, ca_file: {ca}"),
        "${SLUICE_TEST_MY_PASSWORD}",
        &["does not offer TLS", "ssl_mode"],
    );
}

#[test]
fn an_unreadable_ca_file_stops_the_pipeline() {
    refused(
        "e2e_my_ca",
        ", ssl_mode: verify-full, ca_file: /nonexistent/sluice-ca.pem",
        "${SLUICE_TEST_MY_PASSWORD}",
        &["cannot read ca_file /nonexistent/sluice-ca.pem"],
    );
}

#[test]
fn a_wrong_password_stops_the_pipeline() {
    refused("e2e_my_auth", "", "not-the-password", &["Access denied", "check user and password"]);
}
