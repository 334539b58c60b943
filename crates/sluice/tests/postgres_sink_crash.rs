//! The postgres sink under crashes: kill -9 at its commit (both sides of
//! it, by failpoint) and at random instants, cut connections, and a PostgreSQL restart
//! (`pg_ctl -m immediate`) under it, during a 300,000-row transaction and a
//! stream of small ones. Afterwards the apply sink's tables equal the
//! source's, and the changelog sink holds each change exactly once.

mod common;

use std::time::{Duration, SystemTime};

use common::pg::{drop_slots, fresh_database, prepare_replication, restart_postgres, sql, stop, try_sql};
use common::pgsink::{pipeline, scalar, sink};
use common::*;

const BIG: u32 = 300_000;
const SMALL_INSERTS: u32 = 1_000;
const SMALL_UPDATES: u32 = 500;

fn digest(database: &str, table: &str) -> String {
    scalar(
        database,
        &format!("SELECT count(*) || ':' || md5(string_agg(to_jsonb(t)::text, ',' ORDER BY id)) FROM {table} t"),
    )
}

/// A pause of 200 to 1,500 ms that differs from run to run, printed so a
/// failure can be replayed.
fn random_pause(then: &str) -> Duration {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().subsec_nanos();
    let pause = Duration::from_millis(200 + u64::from(nanos % 1_300));
    eprintln!("{then} after {pause:?}");
    pause
}

#[test]
fn kills_and_target_restarts_leave_the_target_exact() {
    let (source, target) = ("pgsink_crash_src", "pgsink_crash_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE big (id int PRIMARY KEY, v text, n int); CREATE TABLE small (id int PRIMARY KEY, n int)");
    prepare_replication(source, "big, small");

    let dir = tempfile::tempdir().unwrap();
    let sinks = [sink("replica", target, ""), sink("audit", target, ", mode: changelog, schema: audit")];
    let config = write_config(dir.path(), &pipeline(source, &sinks));
    let config = config.to_str().unwrap();

    let mut first =
        spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", "postgres.before_commit=3")]);
    sql(source, &format!("INSERT INTO big SELECT g, md5(g::text), g % 97 FROM generate_series(1, {BIG}) g"));
    // A statement the PostgreSQL restart below cuts off may or may not
    // have committed: the checks count what the source holds afterwards.
    let small = std::thread::spawn(move || {
        for id in 1..=SMALL_INSERTS {
            let _ = try_sql(source, &format!("INSERT INTO small VALUES ({id}, 0)"));
        }
        for id in 1..=SMALL_UPDATES {
            let _ = try_sql(source, &format!("UPDATE small SET n = n + 1 WHERE id = {id}"));
        }
    });
    assert!(!first.wait_exit(Duration::from_secs(120)).success(), "the failpoint before commit aborts sluice");
    let mut second =
        spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", "postgres.after_commit=3")]);
    assert!(!second.wait_exit(Duration::from_secs(120)).success(), "the failpoint after commit aborts sluice");
    for _ in 0..3 {
        let mut run = spawn(&["run", "-c", config], dir.path());
        std::thread::sleep(random_pause("kill -9"));
        run.kill9();
    }
    let last = spawn(&["run", "-c", config], dir.path());
    for _ in 0..2 {
        std::thread::sleep(random_pause("cut the sinks' connections"));
        sql(
            target,
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{target}' AND pid <> pg_backend_pid()"
            ),
        );
    }
    restart_postgres();
    small.join().unwrap();

    // The test server acknowledges commits before they are on disk
    // (synchronous_commit off), so its restart may lose the last few
    // small transactions: what the source holds afterwards is what it
    // committed. Each surviving update added 1 to a row of its own.
    let inserted = scalar(source, "SELECT count(*) FROM small");
    let updated = scalar(source, "SELECT sum(n) FROM small");
    let changes = inserted.parse::<u32>().unwrap() + updated.parse::<u32>().unwrap();
    assert!(changes + 10 >= SMALL_INSERTS + SMALL_UPDATES, "the restart lost at most a few commits: {changes}");
    let done = || {
        scalar(target, "SELECT count(*) FROM audit.big") == BIG.to_string()
            && scalar(target, "SELECT count(*) FROM audit.small") == changes.to_string()
    };
    wait_until(Duration::from_secs(180), "every change in the changelog", done);
    wait_until(Duration::from_secs(60), "the replica equal to the source", || {
        digest(target, "big") == digest(source, "big") && digest(target, "small") == digest(source, "small")
    });
    stop(last, dir.path());
    drop_slots(source);

    let distinct = scalar(target, "SELECT count(DISTINCT after->>'id') FROM audit.big WHERE op = 'c'");
    assert_eq!(distinct, BIG.to_string(), "every inserted row once");
    let ops = scalar(
        target,
        "SELECT string_agg(op || '=' || n, ',' ORDER BY op) FROM (SELECT op, count(*) n FROM audit.small GROUP BY op) c",
    );
    assert_eq!(ops, format!("c={inserted},u={updated}"));
    let rows = scalar(target, "SELECT count(DISTINCT key->>'id') FROM audit.small WHERE op = 'u'");
    assert_eq!(rows, updated, "each update once, of its own row");
}
