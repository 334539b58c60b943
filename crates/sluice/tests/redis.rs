//! The Redis Streams sink against a real Redis: exactly-once across kill -9.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn kill_9_never_duplicates_or_loses_a_stream_entry() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let id = format!("redis{}x{nanos}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: 3000, rows_per_tx: 10, events_per_sec: 20000 }} }}\n    sinks:\n      - type: redis\n        config: {{ id: r, url: \"{}\", stream: \"{id}.${{table}}\" }}\n    batch: {{ max_events: 200 }}\n",
        env("SLUICE_TEST_REDIS_URL")
    );
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();
    let validate = run(&["validate", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&validate.stdout).contains("exactly-once (standalone Redis)"));
    let stream = format!("{id}.orders");
    for round in 1..=4 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        wait_until(Duration::from_secs(60), "entries", || redis_positions(&stream).len() >= round * 5000);
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());
    let positions = redis_positions(&stream);
    assert_each_once(&positions, &generator_positions(3000, 10), "the stream");
    let order = |p: &str| -> (u64, u64) {
        let mut parts = p.split(':').skip(1).map(|n| n.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    assert!(positions.windows(2).all(|w| order(&w[0]) < order(&w[1])), "entries out of order");
}
