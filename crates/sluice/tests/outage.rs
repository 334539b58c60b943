//! A sink's server stops answering for 20 seconds mid-stream (SIGSTOP on
//! the private Redis, nats-server or S3 server). A test binary of its own: the pause
//! would stall any test running beside it.

mod common;

use sluice_core::sync::lock;
use std::time::Duration;

use common::*;

/// Both tests pause the one Redis, so they take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn signal(pid_file: &str, signal: &str) {
    let pid = std::fs::read_to_string(env(pid_file)).unwrap();
    let status = std::process::Command::new("kill").args([signal, pid.trim()]).status().unwrap();
    assert!(status.success());
}

/// Resumes the server even if the test fails while it is paused.
struct Paused(&'static str);

impl Paused {
    fn start(pid_file: &'static str) -> Self {
        signal(pid_file, "-STOP");
        Paused(pid_file)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn config(id: &str, redis_required: bool) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: 2000, rows_per_tx: 10, events_per_sec: 2000 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n      - type: redis\n        config: {{ id: r, url: \"{}\", stream: \"{id}.${{table}}\", required: {redis_required}, timeout_secs: 2 }}\n    sink_batch_deadline_secs: 2\n",
        env("SLUICE_TEST_REDIS_URL")
    )
}

#[test]
fn a_required_sink_that_stops_answering_holds_the_pipeline_then_catches_up() {
    let _turn = lock(&ONE_AT_A_TIME);
    let id = unique("outreq");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &config(&id, true));
    let stream = format!("{id}.orders");
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "entries", || redis_positions(&stream).len() >= 2000);
    {
        let _paused = Paused::start("SLUICE_TEST_REDIS_PID_FILE");
        std::thread::sleep(Duration::from_secs(20));
    }
    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("sink call failed; retrying"), "the pipeline waited and retried:\n{log}");
    assert_each_once(&redis_positions(&stream), &generator_positions(2000, 10), "Redis");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 20_000);
}

#[test]
fn an_optional_sink_that_stops_answering_lets_the_others_flow_and_catches_up_later() {
    let _turn = lock(&ONE_AT_A_TIME);
    let id = unique("outopt");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &config(&id, false));
    let stream = format!("{id}.orders");
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "entries", || redis_positions(&stream).len() >= 2000);
    {
        let _paused = Paused::start("SLUICE_TEST_REDIS_PID_FILE");
        // The file sink finishes the whole stream while Redis is paused.
        let status = child.wait_exit(Duration::from_secs(60));
        let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
        assert!(status.success(), "{log}");
        assert!(log.contains("optional sink detached"), "{log}");
        assert_eq!(line_count(&dir.path().join("out.jsonl")), 20_000);
    }
    let partial = redis_positions(&stream).len();
    assert!(partial < 20_000, "Redis held {partial} when the run ended");
    // The next start catches Redis up from its own checkpoint.
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success());
    assert_each_once(&redis_positions(&stream), &generator_positions(2000, 10), "Redis");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 20_000, "the file sink got no replay");
}

/// A generator at 1000 events/s into a file and a NATS stream named `id`.
fn nats_config(id: &str, tx_count: u64, nats_required: bool) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: {tx_count}, rows_per_tx: 10, events_per_sec: 1000 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n      - type: nats\n        config: {{ id: n, url: \"{}\", subject: \"{id}.${{table}}\", stream: {id}, timeout_secs: 2, required: {nats_required} }}\n    sink_batch_deadline_secs: 3\n",
        env("SLUICE_TEST_NATS_URL")
    )
}

#[test]
fn an_optional_nats_sink_that_stops_answering_lets_the_others_flow_and_catches_up_later() {
    let _turn = lock(&ONE_AT_A_TIME);
    let id = unique("outnatsopt");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &nats_config(&id, 1000, false));
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "messages", || nats_positions(&id).len() >= 1000);
    {
        let _paused = Paused::start("SLUICE_TEST_NATS_PID_FILE");
        let paused_at = std::time::Instant::now();
        // The file sink finishes the whole stream while NATS is paused.
        let status = child.wait_exit(Duration::from_secs(60));
        let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
        assert!(status.success(), "{log}");
        assert!(log.contains("optional sink detached"), "{log}");
        assert_eq!(line_count(&dir.path().join("out.jsonl")), 10_000);
        // The outage lasts its full 20 seconds either way.
        std::thread::sleep(Duration::from_secs(20).saturating_sub(paused_at.elapsed()));
    }
    let partial = nats_positions(&id).len();
    assert!(partial < 10_000, "NATS held {partial} when the run ended");
    // The next start catches NATS up from its own checkpoint.
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_each_once(&nats_positions(&id), &generator_positions(1000, 10), "NATS");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 10_000, "the file sink got no replay");
}

#[test]
fn a_required_nats_sink_that_stops_answering_holds_the_pipeline_then_catches_up() {
    let _turn = lock(&ONE_AT_A_TIME);
    let id = unique("outnats");
    let dir = tempfile::tempdir().unwrap();
    let text = nats_config(&id, 600, true);
    let config = write_config(dir.path(), &text);
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "messages", || nats_positions(&id).len() >= 1000);
    {
        let _paused = Paused::start("SLUICE_TEST_NATS_PID_FILE");
        std::thread::sleep(Duration::from_secs(20));
    }
    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("sink call failed; retrying"), "the pipeline waited and retried:\n{log}");
    assert_each_once(&nats_positions(&id), &generator_positions(600, 10), "NATS");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 6000);
}

#[test]
fn a_required_s3_sink_whose_server_stops_answering_retries_and_catches_up() {
    let _turn = lock(&ONE_AT_A_TIME);
    let prefix = unique("outs3");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "pipelines:\n  - name: {prefix}\n    source: {{ type: generator, config: {{ id: gen1, tx_count: 2000, rows_per_tx: 10, events_per_sec: 2000 }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: out.jsonl }}\n      - type: s3\n        config: {{ id: lake, {}, prefix: {prefix}, max_file_events: 1000, timeout_secs: 2 }}\n    sink_batch_deadline_secs: 3\n",
        common::lake::s3_target()
    );
    let config = write_config(dir.path(), &text);
    let held =
        || -> usize { common::lake::s3_files(&prefix).iter().map(|(n, b)| common::lake::positions(n, b).len()).sum() };
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "committed files", || held() >= 2000);
    {
        let _paused = Paused::start("SLUICE_TEST_S3_PID_FILE");
        std::thread::sleep(Duration::from_secs(20));
    }
    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("sink call failed; retrying"), "the pipeline waited and retried:\n{log}");
    common::lake::assert_exactly_once(&common::lake::s3_files(&prefix), "lake", &generator_positions(2000, 10));
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 20_000);
}
