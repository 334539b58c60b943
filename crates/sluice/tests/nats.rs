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

/// A primary-key change is two messages in the Debezium envelope (a delete
/// and a create). A kill -9 between them leaves the first in the stream;
/// the next run publishes only the second, so every message is there once.
#[test]
fn a_kill_between_the_messages_of_one_event_neither_repeats_nor_loses_one() {
    use common::debezium::nats_messages;
    use common::pg::{drop_slots, fresh_database, pipeline, prepare_replication, sql, stop};
    let db = "nats_parts";
    let stream = unique("natsp");
    fresh_database(db);
    sql(db, "CREATE TABLE items (id int PRIMARY KEY, name text)");
    prepare_replication(db, "items");
    sql(db, "INSERT INTO items SELECT g, 'x' FROM generate_series(1, 5) g");
    sql(db, "UPDATE items SET id = id + 100");
    let dir = tempfile::tempdir().unwrap();
    let nats = format!(
        "      - type: nats\n        config: {{ id: n, url: \"{}\", stream: {stream}, subject: {stream}.items, format: {{ envelope: debezium }} }}\n",
        env("SLUICE_TEST_NATS_URL")
    );
    let config = pipeline(db, "unused.jsonl", None)
        .replace("      - type: file\n        config: { id: file, path: unused.jsonl }\n", &nats);
    assert!(config.contains("type: nats"), "{config}");
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();
    let mut crashed =
        spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", "nats.between_parts=3")]);
    assert!(!crashed.wait_exit(Duration::from_secs(60)).success(), "the failpoint must abort the run");
    let first = nats_messages(&stream);
    assert_eq!(first.len(), 5 + 2 * 2 + 1, "five inserts, two whole key changes and half of the third");

    let child = spawn(&["run", "-c", config], dir.path());
    wait_until(Duration::from_secs(60), "every message", || nats_messages(&stream).len() >= 15);
    stop(child, dir.path());
    drop_slots(db);
    let messages = nats_messages(&stream);
    let parts: Vec<(String, String)> = messages
        .iter()
        .map(|(headers, _)| {
            (headers["Sluice-Position"].clone(), headers.get("Sluice-Part").cloned().unwrap_or_default())
        })
        .collect();
    let unique_parts: BTreeSet<&(String, String)> = parts.iter().collect();
    assert_eq!(unique_parts.len(), parts.len(), "a message is in the stream twice: {parts:?}");
    let ops: Vec<(&str, i64)> = messages
        .iter()
        .map(|(_, body)| {
            let row = if body["op"] == "d" { &body["before"] } else { &body["after"] };
            (body["op"].as_str().unwrap(), row["id"].as_i64().unwrap())
        })
        .collect();
    let mut expected: Vec<(&str, i64)> = (1..=5).map(|id| ("c", id)).collect();
    expected.extend((1..=5).flat_map(|id| [("d", id), ("c", id + 100)]));
    assert_eq!(ops, expected);
}
