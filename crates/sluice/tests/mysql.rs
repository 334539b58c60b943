//! The binary against a real MariaDB, killed with SIGKILL mid-stream,
//! resuming by binlog file and offset, and by GTID.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::my::{my_exec, my_sql};
use common::pg::inserted_ids;
use common::*;

fn pipeline(database: &str, gtid: bool, file: &str, offset: u64) -> String {
    format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{database}.*], gtid: {gtid}, start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: items.jsonl }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    )
}

fn kill_and_resume(gtid: bool) {
    let db = if gtid { "e2e_my_gtid" } else { "e2e_my_file" };
    my_exec(&format!("DROP DATABASE IF EXISTS {db}"));
    my_exec(&format!("CREATE DATABASE {db}"));
    my_exec(&format!("CREATE TABLE {db}.items (id bigint PRIMARY KEY, note varchar(20))"));
    let (file, offset): (String, u64) =
        my_sql("SHOW MASTER STATUS").map(|(f, o, _, _): (String, u64, String, String)| (f, o)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = write_config(dir.path(), &pipeline(db, gtid, &file, offset));
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
