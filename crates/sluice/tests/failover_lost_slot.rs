//! A failover before PostgreSQL 17, which has no failover slots: the
//! promoted standby has no copy of Sluice's slot, so the changes since
//! the checkpoints are gone from the log. Sluice, given both hosts, finds
//! the new primary, sees the slot missing and stops with the fix; with
//! `snapshot.mode: when_needed` it streams from a new slot and re-reads
//! the tables instead. A test binary of its own: the pair
//! (`scripts/services.sh pg-pair`) is made afresh for it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::pg::*;
use common::replay::replayed;
use common::*;

fn config(db: &str, primary: u16, standby: u16, mode: &str) -> String {
    pair_pipeline("lost", db, primary, standby, &format!(", snapshot: {{ mode: {mode} }}"))
}

#[test]
fn before_17_a_failover_that_loses_the_slot_stops_the_pipeline_and_when_needed_repairs_it() {
    let (primary, standby) = pg_pair(16);
    let db = "e2e_lost_slot";
    psql_at(primary, "postgres", &format!("CREATE DATABASE {db}")).unwrap();
    psql_at(primary, db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let log = dir.path().join("sluice.log");
    let path = write_config(dir.path(), &config(db, primary, standby, "never"));
    let mut child = spawn(&["run", "-c", path.to_str().unwrap()], dir.path());
    let slot = format!("sluice_{db}");
    wait_until(Duration::from_secs(60), "the slot", || {
        psql_at(primary, db, &format!("SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}'"))
            .is_ok_and(|v| v == "t")
    });
    insert_items_at(primary, db, 1..=1000);
    wait_until(Duration::from_secs(60), "the first rows", || inserted_ids(&out).len() >= 1000);
    insert_items_at(primary, db, 1001..=2000);
    services(&["pg-pair-failover"]);
    insert_items_at(standby, db, 2001..=2500);
    let status = child.wait_exit(Duration::from_secs(120));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("replication slot \"{slot}\" does not exist, but this source has checkpoints")),
        "{text}"
    );
    assert!(text.contains("sluice checkpoints reset"), "{text}");
    // The checks look at the host a run would read: the promoted standby.
    let output = run(&["validate", "--connect", "-c", path.to_str().unwrap()], dir.path());
    let checks = String::from_utf8_lossy(&output.stdout);
    assert!(checks.contains(&format!("127.0.0.1:{standby} as")), "{checks}");

    // The operator's other answer: re-read what the lost log held.
    write_config(dir.path(), &config(db, primary, standby, "when_needed"));
    let child = spawn(&["run", "-c", path.to_str().unwrap()], dir.path());
    insert_items_at(standby, db, 2501..=2600);
    let expected: BTreeMap<String, Vec<Option<String>>> =
        (1..=2600).map(|id| (id.to_string(), vec![Some(format!("n{id}"))])).collect();
    wait_until(Duration::from_secs(120), "every row, re-read or streamed", || {
        replayed(&out, "public.items", "id", &["note"]) == expected
    });
    stop(child, dir.path());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("streaming from a new slot and re-reading every table"), "{text}");
    assert!(text.contains(&format!("server=127.0.0.1:{standby}")), "{text}");
}
