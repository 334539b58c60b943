//! Delivery modes on a real sink, a webhook: at-most-once loses exactly
//! the events the pipeline counts as dropped, writes none twice, and never
//! holds back the required sink; at-least-once retries are watched by
//! `slo.max_duplicate_ratio`, which fails `/ready` while too many events
//! are written again.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::receiver::{Receiver, Reply};
use common::*;

const TOKEN: &str = "telemetry-token";

/// The value of metric `name` for the hook sink, from a /metrics page.
fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l.contains("sink=\"hook\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} for the hook in {metrics}"))
}

/// The hook sink's figures and the pipeline's head, from the API.
fn figures(addr: &str) -> (serde_json::Value, u64) {
    let pipeline = common::api::get(addr, "/pipelines/telemetry", Some(TOKEN)).json();
    let hook = pipeline["sinks"].as_array().unwrap().iter().find(|s| s["id"] == "hook").cloned().unwrap();
    (hook, pipeline["head_events"].as_u64().unwrap())
}

#[test]
fn a_webhook_failing_every_other_request_loses_exactly_the_counted_events() {
    let receiver = Receiver::start();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    receiver.set_rule(move |_| {
        if counted.fetch_add(1, Ordering::SeqCst) % 2 == 1 { Reply::Status(503) } else { Reply::Status(200) }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: telemetry\n    source: {{ type: generator, config: {{ id: gen1, tx_count: 1000000, rows_per_tx: 10, events_per_sec: 1000 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n      - type: http\n        config: {{ id: hook, url: \"{}\", mode: single, max_attempts: 1, required: false, delivery: at_most_once }}\n    batch: {{ max_events: 25, max_ms: 20 }}\n",
        receiver.url("/hook")
    );
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();

    let validated = run(&["validate", "-c", config], dir.path());
    assert!(validated.status.success(), "{}", stderr(&validated));
    let said = String::from_utf8_lossy(&validated.stdout);
    assert!(said.contains("at-most-once (dropped events counted)"), "{said}");

    let child = spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = common::api::api_addr(dir.path());
    wait_until(Duration::from_secs(60), "some events delivered and some dropped", || {
        let (hook, _) = figures(&addr);
        receiver.delivered().len() >= 100 && hook["dropped"].as_u64().unwrap() >= 100
    });
    let (hook, _) = figures(&addr);
    assert_eq!(hook["guarantee"], "at-most-once (dropped events counted)");
    let metrics = common::api::get(&addr, "/metrics", Some(TOKEN)).body;
    let shown = metric(&metrics, "sluice_sink_dropped_events_total") as u64;
    assert!(shown > 0, "the metric shows no drop");
    // A graceful stop lets the write in flight end, so what follows is
    // final: the hook's checkpoint, the drops it logged, and what the
    // receiver took.
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    let dropped: u64 = log
        .lines()
        .filter(|l| l.contains("at-most-once sink failed a batch"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("dropped="))?.parse::<u64>().ok())
        .sum();
    assert!(dropped >= shown, "{dropped} dropped in the log, {shown} in the metric");
    let listed = run(&["checkpoints", "list", "-c", config], dir.path());
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let checkpoint = listed
        .lines()
        .find(|l| l.contains("sink::hook"))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("gen:")))
        .unwrap_or_else(|| panic!("no checkpoint of the hook in {listed}"));
    // gen:<tx>:<seq>, ten events a transaction.
    let mut parts = checkpoint.trim_start_matches("gen:").split(':').map(|p| p.parse::<u64>().unwrap());
    let passed = (parts.next().unwrap() - 1) * 10 + parts.next().unwrap() + 1;

    let delivered = receiver.delivered_positions();
    let unique: BTreeSet<&String> = delivered.iter().collect();
    assert_eq!(unique.len(), delivered.len(), "an event delivered twice");
    assert_eq!(
        delivered.len() as u64 + dropped,
        passed,
        "delivered and dropped events make up what the hook passed; checkpoint {checkpoint}; log:\n{}",
        log.lines().rev().take(25).collect::<Vec<_>>().join("\n")
    );
    assert!(line_count(&dir.path().join("out.jsonl")) as u64 >= passed, "the required sink was held back");
}

/// Answers 503 to every other request while `failing` is set.
fn flaky_receiver(failing: Arc<std::sync::atomic::AtomicBool>) -> Receiver {
    let receiver = Receiver::start();
    let requests = AtomicUsize::new(0);
    receiver.set_rule(move |_| {
        let odd = requests.fetch_add(1, Ordering::SeqCst) % 2 == 1;
        if odd && failing.load(Ordering::SeqCst) { Reply::Status(503) } else { Reply::Status(200) }
    });
    receiver
}

#[test]
fn retries_past_the_duplicate_ratio_fail_ready_until_the_window_is_clean() {
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let receiver = flaky_receiver(failing.clone());
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: telemetry\n    source: {{ type: generator, config: {{ id: gen1, tx_count: 1000000, rows_per_tx: 10, events_per_sec: 500 }} }}\n    sinks:\n      - type: http\n        config: {{ id: hook, url: \"{}\", mode: batch, batch_max_events: 5, max_attempts: 1, initial_backoff_ms: 10 }}\n    batch: {{ max_events: 25, max_ms: 20 }}\n    slo: {{ max_duplicate_ratio: 0.05, duplicate_window_secs: 3, breach_after_secs: 1, clear_after_secs: 1 }}\n",
        receiver.url("/hook")
    );
    let config = write_config(dir.path(), &config);
    let child = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = common::api::api_addr(dir.path());
    let mut ready = common::api::get(&addr, "/ready", Some(TOKEN));
    wait_until(Duration::from_secs(60), "/ready to report the duplicate ratio", || {
        ready = common::api::get(&addr, "/ready", Some(TOKEN));
        ready.status == 503 && ready.body.contains("max_duplicate_ratio")
    });
    assert!(ready.body.contains("sink hook wrote"), "{}", ready.body);
    let metrics = common::api::get(&addr, "/metrics", Some(TOKEN)).body;
    let ratio = metric(&metrics, "sluice_sink_duplicate_ratio");
    assert!(ratio > 0.05, "the gauge shows {ratio}");
    let breached = metrics.lines().any(|l| {
        l.starts_with("sluice_slo_breached") && l.contains("slo=\"max_duplicate_ratio\"") && l.ends_with(" 1")
    });
    assert!(breached, "{metrics}");
    // The receiver recovers: once the window holds only clean writes,
    // the pipeline is ready again.
    failing.store(false, Ordering::SeqCst);
    wait_until(Duration::from_secs(60), "/ready to recover", || {
        common::api::get(&addr, "/ready", Some(TOKEN)).status == 200
    });
    let status = child.terminate();
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(log.contains("SLO breached") && log.contains("SLO met again"), "{log}");
}
