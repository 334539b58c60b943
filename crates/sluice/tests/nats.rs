//! The NATS JetStream sink against a real nats-server.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream;
use common::*;

fn pipeline(id: &str, tx_count: u64) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: {tx_count}, rows_per_tx: 10, events_per_sec: 10000 }} }}\n    sinks:\n      - type: nats\n        config: {{ id: n, url: \"{}\", subject: \"{id}.${{table}}\", stream: {id} }}\n    batch: {{ max_events: 200 }}\n",
        env("SLUICE_TEST_NATS_URL")
    )
}

#[test]
fn kill_9_never_duplicates_or_loses_a_message_in_an_exclusive_stream() {
    let id = unique("nats");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(&id, 800));
    let config = config.to_str().unwrap();
    let validate = run(&["validate", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&validate.stdout).contains("exactly-once (stream written only by this sink)"));
    for round in 1..=3 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        wait_until(Duration::from_secs(60), "messages", || nats_positions(&id).len() >= round * 1500);
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());
    let positions = nats_positions(&id);
    let unique_positions: BTreeSet<&String> = positions.iter().collect();
    assert_eq!(positions.len(), unique_positions.len(), "duplicates in the stream");
    assert_eq!(positions.len(), 8000, "messages missing");
}

#[test]
fn another_writer_on_an_exclusive_stream_stops_the_pipeline() {
    let id = unique("natsw");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(&id, 5));
    assert!(run(&["run", "-c", config.to_str().unwrap()], dir.path()).status.success());
    // A foreign message lands in the stream.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let context = jetstream::new(async_nats::connect(env("SLUICE_TEST_NATS_URL")).await.unwrap());
        context.publish(format!("{id}.orders"), "intruder".into()).await.unwrap().await.unwrap();
    });
    let more = pipeline(&id, 10);
    let config = write_config(dir.path(), &more);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("was not written by Sluice"), "{}", stderr(&output));
}

/// One source transaction is one write; a write of more events than the
/// client lets wait for acknowledgements (5,000) must still go through.
#[test]
fn a_transaction_larger_than_the_clients_pending_ack_limit_is_published() {
    let id = unique("natsbig");
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline(&id, 2).replace("rows_per_tx: 10, events_per_sec: 10000", "rows_per_tx: 12000");
    let config = write_config(dir.path(), &text);
    let mut child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let status = child.wait_exit(Duration::from_secs(120));
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());
    let positions = nats_positions(&id);
    assert_eq!(positions.len(), 24_000);
    assert_eq!(positions.iter().collect::<BTreeSet<_>>().len(), 24_000, "duplicates in the stream");
}
