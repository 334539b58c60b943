//! A fleet's PostgreSQL store crashes (an immediate-mode restart of its
//! server) while two instances run two pipelines: each instance waits the
//! store out and goes on, no instance stops, and every insert lands once
//! in each pipeline's changelog (the postgres sink, exactly-once). The
//! store is on a server of its own (the PostgreSQL 13 of the services), so
//! only the store goes away. A test binary of its own: restarting a server
//! would break tests running beside it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::fleet::*;
use common::pg::*;
use common::*;

const STORE: &str = "store_e2e_outage";
const TARGET: &str = "e2e_outage_target";
const PIPELINES: [&str; 2] = ["oa", "ob"];

/// The store on the PostgreSQL 13 server.
fn config() -> String {
    let (port, user, ca) = (env("SLUICE_TEST_PG13_PORT"), pg_env("SLUICE_TEST_PG_USER"), pg_env("SLUICE_TEST_PG_CA"));
    let mut text = format!(
        "store:\n  type: postgres\n  config: {{ host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, database: postgres, schema: {STORE}, connect_timeout_secs: 2 }}\npipelines:\n"
    );
    for name in PIPELINES {
        let changelog = pipeline_yaml(name, "e2e_outage", TARGET).replace("schema: ", "mode: changelog, schema: ");
        text.push_str(&changelog);
    }
    text
}

/// Runs `query` on the store's server.
fn on_store(query: &str) {
    let port = env("SLUICE_TEST_PG13_PORT");
    let status = std::process::Command::new("psql")
        .args(["-X", "-q", "-h", "127.0.0.1", "-p", &port, "-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", "postgres"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", query])
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .status()
        .unwrap();
    assert!(status.success(), "{query}");
}

/// Crashes and starts the PostgreSQL 13 server, which holds the store.
fn restart_store_server() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh");
    let main = std::path::PathBuf::from(pg_env("SLUICE_TEST_PG_SOCKET"));
    let status = std::process::Command::new("bash")
        .arg(script)
        .arg("restart-postgres")
        .env("SLUICE_TEST_PG_SOCKET", main.with_file_name("postgres-13"))
        .status()
        .unwrap();
    assert!(status.success(), "restarting the store's server failed");
}

#[test]
fn a_crashed_store_is_waited_out_and_every_insert_lands_once() {
    on_store(&format!("DROP SCHEMA IF EXISTS {STORE} CASCADE"));
    fresh_database(TARGET);
    for name in PIPELINES {
        let db = format!("e2e_outage_{name}");
        fresh_source(&db);
        // An immediate restart of the sources' server is not part of this
        // test, but every commit the writer counts is a durable one.
        sql("postgres", &format!("ALTER DATABASE {db} SET synchronous_commit = on"));
    }
    let root = tempfile::tempdir().unwrap();
    let mut instances = BTreeMap::new();
    for id in ["o1", "o2"] {
        let dir = root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let config = write_config(&dir, &config());
        let child =
            spawn(&["run", "-c", config.to_str().unwrap(), "--fleet", "--instance-id", id, "--api-addr", "off"], &dir);
        instances.insert(id, (child, dir));
    }
    let changelog = |name: &str| {
        rows(
            TARGET,
            &format!(
                "SELECT count(*)::text, count(DISTINCT after->>'id')::text FROM {name}.items WHERE op IN ('c', 'r')"
            ),
        )
    };
    let inserted =
        |name: &str| -> usize { changelog(name).into_iter().next().map_or(0, |(n, _)| n.parse().unwrap_or(0)) };
    wait_until(Duration::from_secs(90), "both pipelines' snapshots in their changelogs", || {
        PIPELINES.iter().all(|name| inserted(name) == 100)
    });

    let writer = Writer::start(PIPELINES.iter().map(|name| format!("e2e_outage_{name}")).collect(), |next| {
        format!("INSERT INTO items VALUES ({next}, 1)")
    });
    std::thread::sleep(Duration::from_secs(2));
    restart_store_server();
    // Writes go on after the store is back; the instances' pipelines take them.
    std::thread::sleep(Duration::from_secs(4));
    let written = writer.stop();
    for name in PIPELINES {
        let expected = 100 + usize::try_from(written).unwrap();
        let arrived = wait_for(Duration::from_secs(90), || inserted(name) >= expected);
        let (count, distinct) = changelog(name).into_iter().next().map(|(n, d)| (n, d[0].clone())).unwrap();
        assert!(arrived, "{name}: {count} of {expected} inserts in the changelog");
        assert_eq!(
            (count.parse::<usize>().unwrap(), distinct.unwrap_or_default().parse::<usize>().unwrap()),
            (expected, expected),
            "{name}: every insert once"
        );
    }
    let waited =
        instances.values().any(|(_, dir)| log_of(dir).contains("the checkpoint store cannot be reached; waiting"));
    assert!(waited, "no instance met the store's outage");
    for (id, (mut child, dir)) in instances {
        let log = log_of(&dir);
        assert!(child.still_running(), "instance {id} stopped:\n{log}");
        assert!(!log.contains("pipeline failed"), "instance {id}:\n{log}");
        assert!(child.terminate().success(), "instance {id} did not stop cleanly:\n{}", log_of(&dir));
    }
    for name in PIPELINES {
        drop_slots(&format!("e2e_outage_{name}"));
    }
}
