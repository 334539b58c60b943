//! Kill -9 and SIGTERM against the real binary and the file sink.

mod common;

use std::time::Duration;

use common::*;

const TX_COUNT: u64 = 6000;
const ROWS_PER_TX: u32 = 10;

#[test]
fn sigkill_mid_run_never_loses_or_duplicates_an_event_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("orders.jsonl");
    // Rate-limited so each kill lands mid-stream.
    let config = write_config(dir.path(), &generator_to_file(TX_COUNT, ROWS_PER_TX, Some(40_000), "orders.jsonl"));
    let config = config.to_str().unwrap();
    let total = (TX_COUNT * u64::from(ROWS_PER_TX)) as usize;
    let mut kills = 0;
    for step in 1..=6 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        let target = total * step / 8;
        wait_until(Duration::from_secs(60), "the file to grow", || line_count(&out) >= target);
        child.kill9();
        kills += 1;
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(kills, 6);
    let held = std::fs::read_to_string(&out).unwrap();
    let held: Vec<&str> = held.lines().collect();
    let expected = expected_lines(TX_COUNT, ROWS_PER_TX);
    assert_eq!(held.len(), expected.len(), "every event exactly once");
    for (index, (held, expected)) in held.iter().zip(&expected).enumerate() {
        assert_eq!(held, expected, "line {index} differs");
    }
}

#[test]
fn sigterm_drains_and_saves_a_checkpoint_that_matches_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("orders.jsonl");
    let config = write_config(dir.path(), &generator_to_file(1_000_000, 4, Some(20_000), "orders.jsonl"));
    let config = config.to_str().unwrap();
    let child = spawn(&["run", "-c", config], dir.path());
    wait_until(Duration::from_secs(60), "the file to grow", || line_count(&out) >= 5000);
    let status = child.terminate();
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    assert!(status.success(), "{log}");
    let held = std::fs::read_to_string(&out).unwrap();
    let last_line: serde_json::Value = serde_json::from_str(held.lines().last().unwrap()).unwrap();
    assert_eq!(last_line["tx_end"], true, "a drained file ends on a whole transaction");
    let listing = run(&["checkpoints", "list", "-c", config], dir.path());
    let listing = String::from_utf8_lossy(&listing.stdout);
    let position = last_line["position"].as_str().unwrap();
    assert!(listing.contains(&format!("gen1::sink::local  {position}")), "{listing}");
}

/// A batch's sync overlaps the next batch's encoding, so a crash often
/// falls between a batch's append and its sync, or (in a foreign envelope)
/// between its sync and its mark. Each is hit exactly there, and the file
/// is compared with the generator's events afterwards.
#[test]
fn a_crash_between_append_sync_and_mark_never_loses_or_duplicates_an_event() {
    const TX: u64 = 2000;
    const ROWS: u32 = 10;
    let expected: Vec<String> = expected_events(TX, ROWS).iter().map(|e| e.position.to_string()).collect();
    for (envelope, failpoint) in
        [("native", "file.before_sync=5"), ("cloudevents", "file.before_sync=5"), ("cloudevents", "file.before_mark=5")]
    {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("orders.jsonl");
        let config = write_config(
            dir.path(),
            &format!(
                "pipelines:\n  - name: orders\n    source: {{ type: generator, config: {{ id: gen1, tx_count: {TX}, rows_per_tx: {ROWS} }} }}\n    sinks:\n      - type: file\n        config: {{ id: local, path: orders.jsonl, format: {{ envelope: {envelope} }} }}\n    batch: {{ max_events: 500, max_ms: 20 }}\n"
            ),
        );
        let config = config.to_str().unwrap();
        let mut child = spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", failpoint)]);
        let status = child.wait_exit(Duration::from_secs(60));
        let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
        let name = failpoint.split('=').next().unwrap();
        assert!(!status.success() && log.contains(&format!("failpoint {name} hit")), "{envelope}, {failpoint}: {log}");
        let output = run(&["run", "-c", config], dir.path());
        assert!(output.status.success(), "{}", stderr(&output));
        let field = if envelope == "native" { "position" } else { "sluiceposition" };
        let held: Vec<String> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()[field].as_str().unwrap().to_string())
            .collect();
        assert_eq!(held.len(), expected.len(), "{envelope}, {failpoint}: every event exactly once");
        assert!(held == expected, "{envelope}, {failpoint}: the events differ from the generator's, or their order");
    }
}
