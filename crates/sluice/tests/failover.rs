//! A failover under a running pipeline (PostgreSQL 17+): a primary and a
//! standby that syncs the primary's failover slots, both from
//! `scripts/services.sh pg-pair`; the primary crashes mid-stream, the
//! standby is promoted, and Sluice, given both hosts, resumes from the
//! synced slot on the new primary. A test binary of its own: the pair is
//! made afresh for it.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pg::*;
use common::*;

#[test]
fn after_a_failover_the_pipeline_resumes_from_the_synced_slot_on_the_promoted_standby() {
    let (primary, standby) = pg_pair(17);
    let db = "e2e_failover";
    psql_at(primary, "postgres", &format!("CREATE DATABASE {db}")).unwrap();
    psql_at(primary, db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let text = pair_pipeline("failover", db, primary, standby, "");
    let config = write_config(dir.path(), &text);
    let log = dir.path().join("sluice.log");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let slot = format!("sluice_{db}");
    wait_until(Duration::from_secs(60), "the slot, as a failover slot", || {
        psql_at(
            primary,
            db,
            &format!("SELECT failover AND active FROM pg_replication_slots WHERE slot_name = '{slot}'"),
        )
        .is_ok_and(|v| v == "t")
    });
    insert_items_at(primary, db, 1..=1000);
    wait_until(Duration::from_secs(60), "the first rows", || inserted_ids(&out).len() >= 1000);
    // The standby's copy of the slot: made by its slot sync worker.
    wait_until(Duration::from_secs(60), "the slot synced to the standby", || {
        let query = format!("SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = '{slot}'");
        psql_at(standby, db, &query).is_ok_and(|v| v == "t")
    });
    insert_items_at(primary, db, 1001..=3000);
    wait_until(Duration::from_secs(60), "rows of the second batch", || inserted_ids(&out).len() >= 1500);
    services(&["pg-pair-failover"]);
    insert_items_at(standby, db, 3001..=4000);
    wait_until(Duration::from_secs(120), &format!("every row (log: {})", log.display()), || {
        inserted_ids(&out).len() >= 4000
    });
    stop(child, dir.path());
    let ids = inserted_ids(&out);
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique, (1..=4000).collect(), "rows missing from the file");
    assert_eq!(ids.len(), 4000, "duplicates in the file");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "rows out of commit order");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains(&format!("server=127.0.0.1:{standby}")) && log.contains("it is the primary"), "{log}");
}
