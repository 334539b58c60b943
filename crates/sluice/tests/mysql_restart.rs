//! The binary against a real server that restarts (a clean stop) under
//! a pipeline: MariaDB resuming by GTID, MySQL by file and offset. A test
//! binary of its own: restarting the server would break tests running
//! beside it.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::my::{items_pipeline, my_exec};
use common::pg::inserted_ids;
use common::*;

/// The server restarts (a clean stop) under a running pipeline: Sluice
/// reconnects by itself (by GTID on MariaDB), and the file holds every
/// row once, in binlog order.
#[test]
fn a_server_restart_mid_stream_resumes_with_every_row_once() {
    let by = if common::my::is_mariadb() { "gtid" } else { "file" };
    let db = "e2e_my_restart";
    my_exec(&format!("DROP DATABASE IF EXISTS {db}"));
    my_exec(&format!("CREATE DATABASE {db}"));
    my_exec(&format!("CREATE TABLE {db}.items (id bigint PRIMARY KEY, note varchar(20))"));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = write_config(dir.path(), &items_pipeline(db, by == "gtid", &file, offset));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let insert = |ids: std::ops::Range<i64>| {
        for start in ids.step_by(50) {
            let values: Vec<String> = (start..start + 50).map(|id| format!("({id}, 'n{id}')")).collect();
            my_exec(&format!("INSERT INTO {db}.items VALUES {}", values.join(",")));
        }
    };
    insert(1..2001);
    wait_until(Duration::from_secs(60), "rows before the restart", || inserted_ids(&out).len() >= 1000);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh");
    let status = std::process::Command::new("bash").arg(script).arg("restart-mariadb").status().unwrap();
    assert!(status.success(), "restarting the server failed");
    insert(2001..4001);
    let log_path = dir.path().join("sluice.log");
    wait_until(Duration::from_secs(120), &format!("every row (log: {})", log_path.display()), || {
        inserted_ids(&out).len() >= 4000
    });
    let status = child.terminate();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(status.success(), "sluice did not stop cleanly:\n{log}");
    // The first start is from the configured file and offset either way.
    let (started, first) = (format!("binlog streaming started by=\"{by}\""), usize::from(by == "file"));
    assert!(log.matches(&started).count() > first, "no reconnect by {by}:\n{log}");
    let ids = inserted_ids(&out);
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), 4000, "duplicates in the file");
    assert_eq!(unique, (1..=4000).collect(), "rows missing from the file");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "rows out of binlog order");
}
