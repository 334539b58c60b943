//! A fleet member cut off from the store (its store connections stall in
//! a proxy for longer than its lease) while it runs a pipeline: another
//! instance takes the pipeline over once the lease expires; when the cut
//! one's connections flow again, its checkpoint commits are refused, it
//! gives the pipeline up, and the target's changelog (the postgres sink,
//! exactly-once) holds every insert once.

mod common;
#[path = "../../sluice-torture/src/proxy.rs"]
#[allow(dead_code)]
mod proxy;

use std::time::Duration;

use common::fleet::*;
use common::pg::*;
use common::*;

const STORE: &str = "store_e2e_partition";
const TARGET: &str = "e2e_partition_target";

/// The fleet's config, its store reached on `store_port`.
fn config(store_port: &str) -> String {
    let store =
        store_yaml(STORE).replace(&format!("port: {}", pg_env("SLUICE_TEST_PG_PORT")), &format!("port: {store_port}"));
    // Streaming only: a takeover in the middle of an initial snapshot has
    // its own, documented, semantics (guarantees.md, "Initial snapshot").
    let pipeline = pipeline_yaml("pa", "e2e_partition", TARGET)
        .replace("schema: ", "mode: changelog, schema: ")
        .replace("snapshot: { mode: initial }", "snapshot: { mode: never }");
    format!("{store}pipelines:\n{pipeline}")
}

fn inserted() -> (usize, usize) {
    let counts = rows(TARGET, "SELECT count(*)::text, count(DISTINCT after->>'id')::text FROM pa.items WHERE op = 'c'");
    let (count, rest) = counts.into_iter().next().unwrap_or_default();
    let distinct = rest.first().cloned().flatten().unwrap_or_default();
    (count.parse().unwrap_or(0), distinct.parse().unwrap_or(0))
}

#[test]
fn an_owner_cut_off_from_the_store_past_its_lease_loses_the_pipeline_and_writes_nothing_twice() {
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {STORE} CASCADE"));
    fresh_database(TARGET);
    fresh_source("e2e_partition_pa");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = format!("127.0.0.1:{}", pg_env("SLUICE_TEST_PG_PORT"));
    let proxy = runtime.block_on(proxy::Proxy::start("store", server)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let start = |id: &str, store_port: String| {
        let dir = root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let config = write_config(&dir, &config(&store_port));
        let args = ["run", "-c", config.to_str().unwrap(), "--fleet", "--instance-id", id, "--api-addr", "off"];
        (spawn(&args, &dir), dir)
    };
    // The cut one starts first, so it owns the pipeline.
    let (mut cut, cut_dir) = start("p1", proxy.port.to_string());
    wait_until(Duration::from_secs(60), "p1 owning the pipeline", || {
        leases(STORE, "owner").get("pa").is_some_and(|owner| owner == "p1")
    });
    let (other, other_dir) = start("p2", pg_env("SLUICE_TEST_PG_PORT"));
    wait_for_slot("e2e_partition_pa");
    let mut next = 1000;
    let mut write = |n: usize| {
        for _ in 0..n {
            sql("e2e_partition_pa", &format!("INSERT INTO items VALUES ({next}, 1)"));
            next += 1;
        }
    };
    write(100);
    wait_until(Duration::from_secs(60), "p1's first inserts in the changelog", || inserted().0 == 100);

    proxy.stall(Duration::from_secs(20));
    write(50);
    wait_until(Duration::from_secs(60), "p2 owning the pipeline", || {
        leases(STORE, "owner").get("pa").is_some_and(|owner| owner == "p2")
    });
    wait_until(Duration::from_secs(60), "p1 giving the pipeline up once it reaches the store again", || {
        let log = log_of(&cut_dir);
        log.contains("lost the pipeline's lease") || log.contains("gave the pipeline up")
    });
    write(50);
    let expected = 200;
    let arrived = wait_for(Duration::from_secs(60), || inserted().0 >= expected);
    assert!(arrived, "{:?} of {expected} inserts in the changelog:\n{}", inserted(), log_of(&other_dir));
    assert_eq!(inserted(), (expected, expected), "every insert once");
    assert!(cut.still_running(), "p1 stopped:\n{}", log_of(&cut_dir));
    assert!(cut.terminate().success(), "p1 did not stop cleanly:\n{}", log_of(&cut_dir));
    assert!(other.terminate().success(), "p2 did not stop cleanly:\n{}", log_of(&other_dir));
    drop_slots("e2e_partition_pa");
}
