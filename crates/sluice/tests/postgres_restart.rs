//! The binary against a real PostgreSQL that is killed and restarted, and
//! a Sluice that is killed with SIGKILL, mid-stream. A test binary of its
//! own: restarting the server would break tests running beside it.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pg::*;
use common::*;

#[test]
fn kill_9_and_server_restarts_leave_every_committed_row_once_in_the_file() {
    let db = "e2e_crash";
    fresh_database(db);
    // The test servers run with synchronous_commit off, and an immediate
    // restart may then lose commits they acknowledged, which the test
    // would expect to arrive. Here a commit returns once its WAL is written.
    sql("postgres", &format!("ALTER DATABASE {db} SET synchronous_commit = on"));
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "items");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = write_config(dir.path(), &pipeline(db, "items.jsonl", None));
    let config = config.to_str().unwrap();
    let mut child = spawn(&["run", "-c", config], dir.path());
    let rows_per_round = 4000;
    let rounds = 6;
    for round in 0..rounds {
        let first = round * rows_per_round + 1;
        // Many small transactions, so kills land between and inside them.
        let inserts: String = (0..rows_per_round / 50)
            .map(|t| {
                let start = first + t * 50;
                format!("INSERT INTO items SELECT g, 'n' || g FROM generate_series({start}, {}) g;", start + 49)
            })
            .collect();
        sql(db, &inserts);
        let target = (first + rows_per_round / 3) as usize;
        let arrived = wait_for(Duration::from_secs(60), || inserted_ids(&out).len() >= target);
        let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
        assert!(arrived, "round {round}: {} of {target} rows arrived; log:\n{log}", inserted_ids(&out).len());
        if round == 2 {
            restart_postgres();
        } else {
            child.kill9();
            child = spawn(&["run", "-c", config], dir.path());
        }
    }
    let total = (rounds * rows_per_round) as usize;
    wait_until(Duration::from_secs(120), "every row", || inserted_ids(&out).len() >= total);
    stop(child, dir.path());
    let ids = inserted_ids(&out);
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), total, "duplicates in the file");
    assert_eq!(unique, (1..=total as i64).collect(), "rows missing from the file");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "rows out of commit order");
}
