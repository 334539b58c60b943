//! Reading from a standby (PostgreSQL 16+): a primary and a standby with
//! hot_standby_feedback from `scripts/services.sh pg-pair`; Sluice takes
//! its initial snapshot and streams from a slot on the standby while the
//! application writes to the primary. A test binary of its own: the pair
//! is made afresh for it.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pg::*;
use common::*;

fn psql(port: u16, db: &str, query: &str) -> String {
    psql_at(port, db, query).unwrap_or_else(|e| panic!("{query}: {e}"))
}

#[test]
fn a_standby_is_snapshotted_and_streamed_while_the_primary_takes_the_writes() {
    let (primary, standby) = pg_pair(16);
    let db = "e2e_standby";
    psql(primary, "postgres", &format!("CREATE DATABASE {db}"));
    psql(
        primary,
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, note text); \
         INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 500) g; \
         CREATE PUBLICATION sluice_e2e_standby FOR TABLE items",
    );
    // The standby replays the database, table and publication a moment
    // later; the checks below read them there.
    wait_until(Duration::from_secs(60), "the standby to replay the table", || {
        psql_at(standby, db, "SELECT count(*) FROM items").is_ok_and(|n| n.trim() == "500")
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let source = format!(
        "{{ id: {db}, host: 127.0.0.1, port: {standby}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.items], snapshot: {{ mode: initial }} }}",
        user = pg_env("SLUICE_TEST_PG_USER"),
    );
    let text = format!(
        "pipelines:\n  - name: standby\n    source:\n      type: postgres\n      config: {source}\n    sinks:\n      - type: file\n        config: {{ id: file, path: items.jsonl }}\n"
    );
    let config = write_config(dir.path(), &text);
    let validated = run(&["validate", "-c", config.to_str().unwrap(), "--connect"], dir.path());
    let said = String::from_utf8_lossy(&validated.stdout).to_string();
    assert!(validated.status.success() && said.contains("a standby"), "{said}{}", stderr(&validated));

    let log = dir.path().join("sluice.log");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    // Making a slot on a standby waits for the primary to log its running
    // transactions; writes on the primary make it do so.
    for first in (501..=3000).step_by(50) {
        psql(
            primary,
            db,
            &format!("INSERT INTO items SELECT g, 'n' || g FROM generate_series({first}, {}) g", first + 49),
        );
    }
    wait_until(Duration::from_secs(120), &format!("every row (log: {})", log.display()), || {
        inserted_ids(&out).len() + ids_of(&out, "r").len() >= 3000
    });
    stop(child, dir.path());
    let mut ids = ids_of(&out, "r");
    ids.extend(inserted_ids(&out));
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique, (1..=3000).collect(), "rows missing from the file");
    assert_eq!(ids.len(), 3000, "rows twice in the file");
    let slot = psql(standby, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'sluice_e2e_standby'");
    assert_eq!(slot, "1", "the slot lives on the standby");
    let on_primary = psql(primary, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'");
    assert_eq!(on_primary, "0", "nothing was made on the primary");

    // Without hot_standby_feedback the slot would be invalidated: refused.
    psql(standby, "postgres", "ALTER SYSTEM SET hot_standby_feedback = off");
    psql(standby, "postgres", "SELECT pg_reload_conf()");
    wait_until(Duration::from_secs(10), "the reload", || {
        psql(standby, "postgres", "SHOW hot_standby_feedback") == "off"
    });
    let refused = run(&["validate", "-c", config.to_str().unwrap(), "--connect"], dir.path());
    let said = String::from_utf8_lossy(&refused.stdout).to_string();
    assert!(!refused.status.success() && said.contains("hot_standby_feedback = on"), "{said}");
}
