//! The API and metrics over a real PostgreSQL: the counts of a known run,
//! the server's WAL head and the slot's retained WAL, and an optional sink
//! detached for pinning WAL past `slo.max_retained_wal_bytes`.

mod common;

use std::time::Duration;

use common::api::{api_addr, get};
use common::pg::*;
use common::receiver::{Receiver, Reply};
use common::*;

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_count_exactly_the_changes_the_database_committed() {
    let db = "api_metrics";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "items");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = write_config(dir.path(), &pipeline(db, "items.jsonl", None));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let addr = api_addr(dir.path());
    for batch in 0..3 {
        sql(
            db,
            &format!(
                "INSERT INTO items SELECT g, 'n' FROM generate_series({}, {}) g",
                batch * 100 + 1,
                batch * 100 + 100
            ),
        );
    }
    sql(db, "UPDATE items SET note = 'changed' WHERE id <= 20");
    sql(db, "DELETE FROM items WHERE id > 290");
    let committed = 300 + 20 + 10;
    wait_until(Duration::from_secs(60), "every change in the file", || line_count(&out) >= committed);
    wait_until(Duration::from_secs(30), "the checkpoint to reach the last change", || {
        let view = get(&addr, "/pipelines/pg", None).json();
        view["sinks"][0]["lag_events"] == 0 && view["sinks"][0]["checkpoint_events"] == committed
    });
    wait_until(Duration::from_secs(30), "the slot's retained WAL to be measured", || {
        get(&addr, "/pipelines/pg", None).json()["source"]["retained_wal_bytes"].is_u64()
    });

    let metrics = get(&addr, "/metrics", None).body;
    let n = committed as f64;
    let source = sample(&metrics, "sluice_source_events_total", &["pipeline=\"pg\"", "table=\"public.items\""]);
    assert_eq!(source, Some(n), "events read from the table\n{metrics}");
    assert_eq!(sample(&metrics, "sluice_sink_events_total", &["sink=\"file\""]), Some(n));
    assert_eq!(sample(&metrics, "sluice_pipeline_events_total", &["pipeline=\"pg\""]), Some(n));
    assert_eq!(
        sample(&metrics, "sluice_sink_latency_seconds_count", &["sink=\"file\""]),
        Some(n),
        "one latency per event"
    );
    let buckets: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_sink_latency_seconds_bucket{") && l.contains("sink=\"file\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(buckets.len(), 17, "16 bounds and +Inf\n{metrics}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "cumulative buckets never shrink: {buckets:?}");
    assert_eq!(buckets.last(), Some(&n), "+Inf holds every event");
    assert_eq!(sample(&metrics, "sluice_sink_batch_events_sum", &["sink=\"file\""]), Some(n), "batch sizes add up");
    let le_max = sample(&metrics, "sluice_sink_batch_events_bucket", &["sink=\"file\"", "le=\"2000\""]);
    assert_eq!(le_max, Some(sample(&metrics, "sluice_sink_batch_events_count", &["sink=\"file\""]).unwrap()));
    assert_eq!(sample(&metrics, "sluice_sink_lag_events", &["sink=\"file\""]), Some(0.0));
    assert_eq!(sample(&metrics, "sluice_sink_completeness_ratio", &["sink=\"file\""]), Some(1.0));
    assert_eq!(sample(&metrics, "sluice_sink_replayed_events_total", &["sink=\"file\""]), Some(0.0));
    let retained = sample(&metrics, "sluice_slot_retained_wal_bytes", &["pipeline=\"pg\""]).unwrap();
    assert!(retained.is_finite() && retained >= 0.0, "retained WAL {retained}");
    let view = get(&addr, "/pipelines/pg", None).json();
    assert_eq!(view["source"]["kind"], "postgres");
    assert!(view["source"]["head"].as_str().is_some_and(|h| h.contains('/')), "an LSN head: {view}");
    assert_eq!(view["source"]["events"], committed);
    stop(child, dir.path());
    assert_eq!(line_count(&out), committed, "the file holds each change once");
}

#[test]
fn an_optional_sink_that_pins_wal_past_the_slo_is_detached_and_stays_detached() {
    let db = "api_detach";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "items");
    let receiver = Receiver::start();
    receiver.set_rule(|_| Reply::Status(503));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    // One byte: any WAL the slot keeps is a breach, so the sink that holds
    // the slot back is detached as soon as it is the lowest.
    let config = format!(
        "{}      - type: http\n        config: {{ id: hook, url: \"{}\", required: false, max_attempts: 1 }}\n    sink_batch_deadline_secs: 300\n    slo: {{ max_retained_wal_bytes: 1, detach_optional_sinks: true }}\n",
        pipeline(db, "items.jsonl", None),
        receiver.url("/in")
    );
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();
    let child = spawn(&["run", "-c", config], dir.path());
    let addr = api_addr(dir.path());
    sql(db, "INSERT INTO items SELECT g, 'n' FROM generate_series(1, 50) g");
    wait_until(Duration::from_secs(60), "the file sink to hold every row", || line_count(&out) >= 50);
    wait_until(Duration::from_secs(60), "the failing optional sink to be detached", || {
        get(&addr, "/pipelines/pg", None).json()["sinks"][1]["state"] == "detached"
    });
    let view = get(&addr, "/pipelines/pg", None).json();
    let hook = &view["sinks"][1];
    assert_eq!(hook["detached"]["needs_resync"], true, "{hook}");
    assert!(hook["detached"]["reason"].as_str().unwrap().contains("max_retained_wal_bytes"), "{hook}");
    wait_until(Duration::from_secs(30), "the replay point to move past the detached sink", || {
        let view = get(&addr, "/pipelines/pg", None).json();
        view["replay_from"] == view["sinks"][0]["checkpoint"] && view["replay_from"].is_string()
    });
    let ready = get(&addr, "/ready", None);
    assert_eq!(ready.status, 503, "the WAL breach is reported: {}", ready.body);
    assert!(get(&addr, "/metrics", None).body.contains("sluice_sink_detached{pipeline=\"pg\",sink=\"hook\"} 1"));
    stop(child, dir.path());

    // The mark survives a restart: the sink stays detached and the slot
    // is not held for it.
    let child = spawn(&["run", "-c", config], dir.path());
    let addr = common::api::api_addr_after(dir.path(), 1);
    wait_until(Duration::from_secs(30), "the restarted pipeline to keep the sink detached", || {
        get(&addr, "/pipelines/pg", None).json()["sinks"][1]["state"] == "detached"
    });
    stop(child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    assert!(log.contains("sink stays DETACHED"), "{log}");

    let reset = run(&["checkpoints", "reset", "-c", config, "--sink", "hook", "--yes"], dir.path());
    assert!(reset.status.success(), "{}", stderr(&reset));
    assert!(String::from_utf8_lossy(&reset.stdout).contains("cleared the detachment mark"));
}

#[test]
fn an_incremental_snapshot_started_through_the_api_re_reads_the_table() {
    let doc: serde_json::Value = serde_json::from_str(include_str!("../src/api/openapi.json")).unwrap();
    let db = "api_inc";
    fresh_database(db);
    // Rows written before the slot exists never stream: only the
    // snapshot can bring them.
    sql(
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, note text); INSERT INTO items SELECT g, 'n' FROM generate_series(1, 2000) g",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: inc\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.*], snapshot: {{ chunk_size: 300 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let addr = api_addr(dir.path());
    wait_until(Duration::from_secs(60), "streaming", || {
        std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default().contains("replication started")
    });

    let started =
        common::api::call(&addr, "POST", "/pipelines/inc/snapshot", None, Some(r#"{"table":"public.items"}"#));
    assert_eq!(started.status, 202, "{}", started.body);
    common::api::assert_documented(&doc, "/pipelines/{name}/snapshot", "POST", &started);
    let refused = common::api::call(&addr, "POST", "/pipelines/inc/snapshot", None, Some(r#"{"table":"public.nope"}"#));
    assert_eq!(refused.status, 422, "{}", refused.body);
    common::api::assert_documented(&doc, "/pipelines/{name}/snapshot", "POST", &refused);
    let progress = get(&addr, "/pipelines/inc/snapshot", None);
    common::api::assert_documented(&doc, "/pipelines/{name}/snapshot", "GET", &progress);

    let out = dir.path().join("out.jsonl");
    wait_until(Duration::from_secs(120), "the table re-read into the file", || line_count(&out) >= 2000);
    stop(child, dir.path());
    let events = common::replay::events(&out);
    let mut ids = std::collections::BTreeSet::new();
    for event in &events {
        assert_eq!(event["op"], "r", "{event}");
        ids.insert(event["after"]["id"].as_i64().unwrap());
    }
    assert_eq!(events.len(), 2000, "each row once");
    assert_eq!(ids, (1..=2000).collect(), "every row of the table");
}
