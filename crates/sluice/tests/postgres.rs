//! The binary against a real PostgreSQL: a transaction of a million rows.

mod common;

use std::time::Duration;

use common::pg::*;
use common::*;

#[test]
fn a_million_row_transaction_passes_with_bounded_memory() {
    let db = "e2e_big";
    fresh_database(db);
    sql(db, "CREATE TABLE big (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "big");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.jsonl");
    // A small batch byte limit makes the transaction spill early.
    let config = write_config(dir.path(), &pipeline(db, "big.jsonl", Some(4 * 1024 * 1024)));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    sql(db, "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g");
    wait_until(Duration::from_secs(300), "a million rows", || line_count(&out) >= 1_000_000);
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    stop(child, dir.path());
    assert_eq!(line_count(&out), 1_000_000);
    let last: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&out).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(last["tx_end"], true);
    assert!(peak_kib < 256 * 1024, "peak RSS {} MiB for a million-row transaction", peak_kib / 1024);
}
