//! Lag that tells the truth, over a real PostgreSQL: a source held back by
//! a hung required sink shows as stalled, with lag in seconds and the sink
//! that holds it back, while rows keep committing; and after a restart a
//! sink that already holds everything the source reads again shows 0 lag.

mod common;

use std::time::{Duration, Instant};

use common::api::{api_addr, get};
use common::pg::*;
use common::receiver::{Receiver, Reply};
use common::*;

#[test]
fn a_source_held_back_by_a_hung_required_sink_shows_as_stalled_with_its_lag() {
    let db = "lag_stall";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "items");
    let receiver = Receiver::start();
    receiver.set_rule(|_| Reply::Hang);
    let dir = tempfile::tempdir().unwrap();
    // Only the hung webhook, required: nothing it holds back can move.
    let config = pipeline(db, "unused.jsonl", None).replace(
        "      - type: file\n        config: { id: file, path: unused.jsonl }\n",
        &format!(
            "      - type: http\n        config: {{ id: hook, url: \"{}\", timeout_secs: 600, max_attempts: 1 }}\n    sink_batch_deadline_secs: 600\n    batch: {{ max_inflight: 1 }}\n",
            receiver.url("/in")
        ),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let addr = api_addr(dir.path());
    let view = || get(&addr, "/pipelines/pg", None).json();
    wait_until(Duration::from_secs(30), "the source to start", || view()["source"]["head"].is_string());

    // More rows than every queue between the server and the hung sink
    // holds (one transaction is one batch; the writer holds one and the
    // buffer one), so the source stops reading while the server has more.
    for start in (0..200_000).step_by(50_000) {
        sql(db, &format!("INSERT INTO items SELECT g, 'n' FROM generate_series({}, {}) g", start + 1, start + 50_000));
    }
    let committed = Instant::now();
    wait_until(Duration::from_secs(60), "the source to show as stalled", || view()["source"]["stalled"] == true);
    let stalled = view();
    assert!(stalled["source"]["behind_bytes"].as_u64().unwrap() > 0, "{stalled}");
    assert!(stalled["source"]["lag_seconds"].as_f64().unwrap() > 0.0, "lag in seconds while stalled: {stalled}");
    assert!(stalled["sinks"][0]["lag_seconds"].as_f64().unwrap() > 0.0, "{stalled}");
    assert_eq!(stalled["held_back_by"], "hook", "{stalled}");

    // The lag keeps counting while nothing moves.
    let first = stalled["source"]["lag_seconds"].as_f64().unwrap();
    wait_until(Duration::from_secs(30), "the lag to grow", || {
        view()["source"]["lag_seconds"].as_f64().unwrap() >= first + 2.0
    });
    assert!(committed.elapsed() >= Duration::from_secs(2));
    let ready = get(&addr, "/ready", None);
    assert_eq!(ready.status, 503);
    assert!(ready.body.contains("is stalled") && ready.body.contains("held back by sink hook"), "{}", ready.body);
    drop(child);
}

#[test]
fn after_a_restart_a_sink_that_holds_everything_shows_no_lag_and_the_command_reattaches_the_other() {
    let db = "lag_restart";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY, note text)");
    prepare_replication(db, "items");
    // An optional webhook that is down keeps the replay point at the
    // start, so a restart reads every row again: the file sink holds them.
    let receiver = Receiver::start();
    receiver.set_rule(|_| Reply::Status(503));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("items.jsonl");
    let config = format!(
        "{}      - type: http\n        config: {{ id: hook, url: \"{}\", required: false, max_attempts: 1 }}\n    sink_batch_deadline_secs: 2\n    reattach_probe_secs: 600\n",
        pipeline(db, "items.jsonl", None),
        receiver.url("/in")
    );
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();
    let child = spawn(&["run", "-c", config], dir.path());
    sql(db, "INSERT INTO items SELECT g, 'n' FROM generate_series(1, 1000) g");
    wait_until(Duration::from_secs(60), "the file sink to hold every row", || line_count(&out) >= 1000);
    stop(child, dir.path());

    let child = spawn(&["run", "-c", config], dir.path());
    let addr = common::api::api_addr_after(dir.path(), 1);
    let view = || get(&addr, "/pipelines/pg", None).json();
    wait_until(Duration::from_secs(60), "the restart to read the rows again", || {
        view()["head_events"].as_u64() >= Some(1000)
    });
    wait_until(Duration::from_secs(30), "the file sink to show what it holds", || {
        view()["sinks"][0]["lag_events"] == 0
    });
    wait_until(Duration::from_secs(60), "the source to have read all there is", || {
        view()["source"]["lag_seconds"].as_f64() == Some(0.0)
    });
    let view = view();
    let file = &view["sinks"][0];
    assert_eq!(file["lag_bytes"], 0, "{file}");
    assert!(file["lag_seconds"].as_f64().unwrap() < 1.0, "the file sink waits for nothing: {file}");
    assert_eq!(file["replay_skipped"], 1000, "the rows read again were skipped, not written: {file}");
    assert_eq!(view["sinks"][1]["lag_events"], 1000, "the webhook still lacks every row: {view}");
    assert_eq!(line_count(&out), 1000);

    // Back up, the webhook is reattached by the command and catches up.
    wait_until(Duration::from_secs(30), "the webhook detached", || {
        get(&addr, "/pipelines/pg", None).json()["sinks"][1]["state"] == "detached"
    });
    receiver.set_rule(|_| Reply::Status(200));
    let reattached = run(&["sinks", "reattach", "--api-addr", &addr, "--pipeline", "pg", "--sink", "hook"], dir.path());
    assert!(reattached.status.success(), "{}", stderr(&reattached));
    wait_until(Duration::from_secs(60), "the webhook to catch up", || {
        get(&addr, "/pipelines/pg", None).json()["sinks"][1]["lag_events"] == 0
    });
    assert_eq!(receiver.delivered_positions().len(), 1000, "the webhook got every row once");
    assert_eq!(line_count(&out), 1000, "the file sink wrote nothing twice");
    stop(child, dir.path());
}
