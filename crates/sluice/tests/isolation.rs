//! A slow or hung optional sink does not hold the others back: it is
//! detached within one deadline of wall-clock time, the required sink goes
//! on, and once the sink answers again it reattaches by itself and holds
//! every event, from its buffer or, after the buffer overflowed, by a
//! re-read of the source in the same process. A kill -9 with events in a
//! disk buffer loses none of them: they come back by the replay from the
//! sink's checkpoint, and the exactly-once sink repeats nothing.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::api::{api_addr, get};
use common::receiver::{Receiver, Reply};
use common::*;

const TOKEN: &str = "isolation-token";
/// `sink_batch_deadline_secs` of these pipelines.
const DEADLINE_SECS: u64 = 3;

/// A generator into a required file sink and an optional HTTP sink whose
/// receiver hangs while `hang` is on.
fn hung_receiver() -> (Receiver, Arc<AtomicBool>) {
    let receiver = Receiver::start();
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = hang.clone();
    receiver.set_rule(move |_| if hanging.load(Ordering::SeqCst) { Reply::Hang } else { Reply::Status(200) });
    (receiver, hang)
}

fn config(id: &str, tx_count: u64, hook: &str, buffer: &str) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: {tx_count}, rows_per_tx: 10, events_per_sec: 1000 }} }}\n    sinks:\n      - {{ type: file, config: {{ id: file, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{hook}\", required: false, timeout_secs: 1, max_attempts: 1{buffer} }} }}\n    batch: {{ max_events: 200, max_ms: 20 }}\n    sink_batch_deadline_secs: {DEADLINE_SECS}\n    reattach_probe_secs: 1\n"
    )
}

fn sink_view(addr: &str, pipeline: &str, sink: usize) -> serde_json::Value {
    get(addr, &format!("/pipelines/{pipeline}"), Some(TOKEN)).json()["sinks"][sink].clone()
}

fn assert_holds_every_event(receiver: &Receiver, total: usize) {
    // At least once: a repeat is allowed, a loss or a stranger is not.
    let mut unique = receiver.delivered_positions();
    unique.sort();
    unique.dedup();
    assert_each_once(&unique, &generator_positions(total as u64 / 10, 10), "the webhook");
}

#[test]
fn a_hung_optional_sink_is_detached_in_time_and_reattaches_by_itself() {
    let (receiver, hang) = hung_receiver();
    let id = unique("hung");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &config(&id, 2500, &receiver.url("/hook"), ""));
    let mut child =
        spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());

    wait_until(Duration::from_secs(30), "the first request to the webhook", || !receiver.requests().is_empty());
    let first_request = Instant::now();
    wait_until(Duration::from_secs(30), "the webhook sink to be detached", || {
        sink_view(&addr, &id, 1)["state"] == "detached"
    });
    let detached_after = first_request.elapsed();
    assert!(
        detached_after <= Duration::from_secs(DEADLINE_SECS + 5),
        "detached {detached_after:?} after its first hung request; the deadline is {DEADLINE_SECS} s"
    );

    // The required file sink goes on while the webhook still hangs.
    let lines_at_detach = line_count(&dir.path().join("out.jsonl"));
    wait_until(Duration::from_secs(30), "the file sink to move on past the detachment", || {
        line_count(&dir.path().join("out.jsonl")) >= lines_at_detach + 3000
    });
    assert_eq!(sink_view(&addr, &id, 1)["state"], "detached", "the webhook still hangs");
    assert!(sink_view(&addr, &id, 1)["buffer"]["batches"].as_u64().unwrap() > 0, "its buffer keeps what it missed");

    hang.store(false, Ordering::SeqCst);
    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("reattached"), "the sink reattached by itself:\n{log}");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 25_000);
    assert_holds_every_event(&receiver, 25_000);
}

#[test]
fn an_optional_sink_whose_buffer_overflows_catches_up_by_a_reread() {
    let (receiver, hang) = hung_receiver();
    let id = unique("overflow");
    let dir = tempfile::tempdir().unwrap();
    // One batch in memory and nothing on disk: the buffer overflows at once.
    let buffer = ", buffer: { max_memory_bytes: 1048576, max_disk_bytes: 0 }";
    let text =
        config(&id, 2500, &receiver.url("/hook"), buffer).replace("max_ms: 20 }", "max_ms: 20, max_inflight: 1 }");
    let config = write_config(dir.path(), &text);
    let mut child =
        spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());

    wait_until(Duration::from_secs(30), "the webhook sink's buffer to overflow", || {
        sink_view(&addr, &id, 1)["buffer"]["overflowed"] == true
    });
    let lines_at_overflow = line_count(&dir.path().join("out.jsonl"));
    wait_until(Duration::from_secs(30), "the file sink to move on past the overflow", || {
        line_count(&dir.path().join("out.jsonl")) >= lines_at_overflow + 3000
    });
    hang.store(false, Ordering::SeqCst);

    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("running the pipeline again"), "the source was re-read for the webhook:\n{log}");
    // The file sink is exactly-once: the re-read gave it nothing twice.
    let lines = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    let unique: BTreeSet<&str> = lines.lines().collect();
    assert_eq!(lines.lines().count(), 25_000);
    assert_eq!(unique.len(), 25_000, "the file sink holds an event twice after the re-read");
    assert_holds_every_event(&receiver, 25_000);
}

#[test]
fn a_sigterm_drain_says_what_it_waits_for_and_ends_at_the_grace() {
    let (receiver, _hang) = hung_receiver();
    let id = unique("grace");
    let dir = tempfile::tempdir().unwrap();
    // An endless source, and a webhook that hangs far longer than the grace.
    let text = config(&id, 2500, &receiver.url("/hook"), "")
        .replace("tx_count: 2500, ", "")
        .replace("timeout_secs: 1, max_attempts: 1", "timeout_secs: 300, max_attempts: 1")
        .replace(
            &format!("sink_batch_deadline_secs: {DEADLINE_SECS}"),
            "sink_batch_deadline_secs: 600\n    shutdown_grace_secs: 6",
        );
    let config = write_config(dir.path(), &text);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(30), "the file sink to get events", || {
        line_count(&dir.path().join("out.jsonl")) >= 2000
    });
    wait_until(Duration::from_secs(30), "the webhook to be sent a batch", || !receiver.requests().is_empty());
    let asked = Instant::now();
    let status = child.terminate();
    let took = asked.elapsed();
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    assert!(log.contains("draining: waiting for these sinks"), "the drain says what it waits for:\n{log}");
    assert!(log.contains("shutdown_grace_secs passed"), "the grace ends the wait:\n{log}");
    // The grace is 6 s and the drain notes come every 5 s.
    assert!(took < Duration::from_secs(20), "the hung webhook held the stop for {took:?}");
    // The file sink drained in full before the grace ended the wait.
    let lines = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    let unique: BTreeSet<&str> = lines.lines().collect();
    assert_eq!(unique.len(), lines.lines().count(), "no event twice in the file");
}

#[test]
fn a_kill_with_events_in_a_disk_buffer_loses_none_and_the_exactly_once_sink_repeats_none() {
    let (receiver, hang) = hung_receiver();
    let id = unique("diskbuf");
    let dir = tempfile::tempdir().unwrap();
    // Two batches in memory, the rest of the hung webhook's share on disk.
    let buffer = ", buffer: { max_memory_bytes: 1048576 }";
    let text =
        config(&id, 2500, &receiver.url("/hook"), buffer).replace("max_ms: 20 }", "max_ms: 20, max_inflight: 2 }");
    let config = write_config(dir.path(), &text);
    let args = ["run", "-c", config.to_str().unwrap()];
    let mut child = spawn_with_env(&args, dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());
    wait_until(Duration::from_secs(60), "the webhook's buffer to reach the disk", || {
        let hook = sink_view(&addr, &id, 1);
        hook["buffer"]["disk_bytes"].as_u64() > Some(0) && hook["buffer"]["overflowed"] == false
    });
    let spilled = std::fs::read_dir(dir.path().join("sluice-data/spill").join(&id)).map_or(0, |d| d.count());
    assert!(spilled > 0, "spill files under the data dir");
    child.kill9();
    let lines_at_kill = line_count(&dir.path().join("out.jsonl"));
    assert!(lines_at_kill < 25_000, "the run ended before the kill; make it longer");

    // The buffer died with the process: the webhook's events come back by
    // the replay from its checkpoint, the lowest.
    hang.store(false, Ordering::SeqCst);
    let mut child = spawn_with_env(&args, dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let status = child.wait_exit(Duration::from_secs(120));
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());
    let lines = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    let unique: BTreeSet<&str> = lines.lines().collect();
    assert_eq!(unique.len(), 25_000, "the file sink misses events");
    assert_eq!(lines.lines().count(), 25_000, "the file sink holds an event twice after the kill");
    assert_holds_every_event(&receiver, 25_000);
}
