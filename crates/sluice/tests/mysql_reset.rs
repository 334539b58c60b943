//! `RESET MASTER` and the documented recovery, end to end.
//!
//! This test RESETS THE SHARED SERVER'S BINLOG. It is in a test binary of
//! its own, and, as binlog_purge.rs does, waits until no binlog reader
//! streams before it resets; a reader that starts during the reset loses
//! its position all the same, so run it where nothing else reads the
//! server's binlog (a serial group).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::my::{my_exec, my_sql};
use common::*;
use serde_json::Value;

/// What the source logs once it reads the binlog.
const STREAMING: &str = "binlog streaming started";

fn pipeline(database: &str, stream: &str) -> String {
    format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{database}.t], heartbeat_secs: 1, snapshot: {{ mode: initial }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n      - type: redis\n        config: {{ id: r, url: \"{redis}\", stream: \"{stream}\" }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
        redis = env("SLUICE_TEST_REDIS_URL"),
    )
}

/// `(op, id, note)` of each event, the position and the id.
fn rows(events: &[Value]) -> Vec<(String, String, String, i64, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["position"].as_str().unwrap().to_string(),
                e["id"].as_str().unwrap().to_string(),
                e["op"].as_str().unwrap().to_string(),
                e["after"]["id"].as_i64().unwrap(),
                e["after"]["note"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn redis_events(stream: &str) -> Vec<Value> {
    let mut conn = redis::Client::open(env("SLUICE_TEST_REDIS_URL")).unwrap().get_connection().unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query(&mut conn).unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| serde_json::from_str(&fields.iter().find(|(k, _)| k == "payload").unwrap().1).unwrap())
        .collect()
}

fn insert(database: &str, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        my_exec(&format!("INSERT INTO {database}.t VALUES ({id}, 'n{id}')"));
    }
}

/// The server does not reset a binlog a dump thread still reads, and
/// other readers would lose their place: wait until none streams.
fn wait_for_no_binlog_readers() {
    wait_until(Duration::from_secs(120), "no binlog dump thread", || {
        my_sql::<u64>("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
            == Some(0)
    });
}

#[test]
fn after_reset_master_the_documented_recovery_delivers_every_new_row_to_every_sink() {
    let database = unique("my_reset");
    let stream = format!("{database}.events");
    my_exec(&format!("CREATE DATABASE {database}"));
    my_exec(&format!("CREATE TABLE {database}.t (id int PRIMARY KEY, note varchar(20))"));
    // The sinks then hold a position past file 1, which is where the
    // binlog starts again after the reset.
    my_exec("FLUSH BINARY LOGS");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(&database, &stream));
    let config = config.to_str().unwrap();
    let out = dir.path().join("out.jsonl");
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();

    let child = spawn(&["run", "-c", config], dir.path());
    wait_until(Duration::from_secs(60), "the snapshot of the empty table", || log().contains(STREAMING));
    insert(&database, 1..=3);
    wait_until(Duration::from_secs(60), "rows 1-3 in both sinks", || {
        replay::events(&out).len() == 3 && redis_events(&stream).len() == 3
    });
    assert!(child.terminate().success(), "{}", log());
    let before = rows(&replay::events(&out));
    assert!(before.iter().all(|r| r.0.starts_with("my:")), "{before:?}");

    wait_for_no_binlog_readers();
    my_exec("RESET MASTER");
    let file = common::my::binlog_head().0;
    assert!(file.ends_with(".000001"), "{file}");
    insert(&database, 4..=5);

    // The documented error, then the documented recovery.
    let stopped = run(&["run", "-c", config], dir.path());
    assert_eq!(stopped.status.code(), Some(1), "{}", log());
    let said = stderr(&stopped);
    assert!(said.contains("is gone from the server") && said.contains("sluice checkpoints reset"), "{said}");
    let reset = run(&["checkpoints", "reset", "-c", config, "--pipeline", "my", "--yes"], dir.path());
    let told = String::from_utf8_lossy(&reset.stdout).into_owned();
    assert!(reset.status.success(), "{told}{}", stderr(&reset));
    assert!(
        told.contains("removed 2 checkpoint(s)")
            && told.contains("log generation 1")
            && told.contains("moved the schema history"),
        "{told}"
    );

    let child = spawn(&["run", "-c", config], dir.path());
    wait_until(Duration::from_secs(60), "the new snapshot", || log().matches(STREAMING).count() >= 2);
    insert(&database, 6..=8);
    wait_until(Duration::from_secs(60), "every row of the new log in both sinks", || {
        replay::events(&out).len() == 3 + 8 && redis_events(&stream).len() == 3 + 8
    });
    assert!(child.terminate().success(), "{}", log());
    assert!(log().contains("from before a checkpoint reset; ignored"), "{}", log());

    // Event by event: the new snapshot of rows 1-5, then rows 6-8 from the
    // new binlog, all in the new generation, in the same order in both
    // sinks, with ids no event before the reset had.
    let file_events = rows(&replay::events(&out));
    let redis = rows(&redis_events(&stream));
    assert_eq!(file_events, redis, "the sinks disagree");
    assert_eq!(file_events[..3], before[..], "what was there before stays");
    let after = &file_events[3..];
    let got: Vec<(String, i64, String)> = after.iter().map(|r| (r.2.clone(), r.3, r.4.clone())).collect();
    let expected: Vec<(String, i64, String)> =
        (1..=8).map(|id| (if id <= 5 { "r" } else { "c" }.to_string(), id, format!("n{id}"))).collect();
    assert_eq!(got, expected);
    assert!(after.iter().all(|r| r.0.starts_with("e1/")), "{after:?}");
    assert!(after[5..].iter().all(|r| r.0.starts_with("e1/my:") && r.0.contains("-bin.000001:")), "{after:?}");
    let ids: BTreeSet<&String> = file_events.iter().map(|r| &r.1).collect();
    assert_eq!(ids.len(), file_events.len(), "event ids repeat across the reset");

    // A restart in the new generation resumes where it was: nothing again.
    let child = spawn(&["run", "-c", config], dir.path());
    insert(&database, 9..=9);
    wait_until(Duration::from_secs(60), "row 9", || replay::events(&out).len() == 12);
    assert!(child.terminate().success(), "{}", log());
    assert_eq!(redis_events(&stream).len(), 12);
    my_exec(&format!("DROP DATABASE {database}"));
}
