//! The schema registry stops answering for 20 seconds (SIGSTOP on the
//! private Apicurio) just as a schema change needs a new version: the
//! pipeline waits, writes nothing without a registered schema, and then
//! delivers every event once. A test binary of its own: the pause would
//! stall the other registry tests.

mod common;

use std::time::{Duration, Instant};

use common::avro::{avro_messages, avro_pipeline};
use common::pg::{drop_slots, sql, stop, wait_for_slot};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

fn signal(name: &str) {
    let pid = std::fs::read_to_string(env("SLUICE_TEST_REGISTRY_PID_FILE")).unwrap();
    let status = std::process::Command::new("kill").args([name, pid.trim()]).status().unwrap();
    assert!(status.success());
}

/// Resumes the registry even if the test fails while it is paused.
struct Paused;

impl Drop for Paused {
    fn drop(&mut self) {
        signal("-CONT");
    }
}

/// How many committed messages `topic` holds.
fn committed_messages(topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS"))
        .set("group.id", unique("count"))
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let (mut count, mut idle) = (0, 0);
    while idle < 20 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => (count, idle) = (count + 1, 0),
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    count
}

#[test]
fn a_registry_outage_holds_the_pipeline_and_loses_nothing() {
    let db = "avro_outage";
    let (dir, topic, config) = avro_pipeline(db, "CREATE TABLE t (id int PRIMARY KEY, v text)", ", exactly_once: true");
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(db, "INSERT INTO t VALUES (1, 'a')");
    assert_eq!(avro_messages(&topic, 1).len(), 1);

    signal("-STOP");
    let paused = Paused;
    let since = Instant::now();
    sql(db, "ALTER TABLE t ADD COLUMN w text; INSERT INTO t VALUES (2, 'b', 'x'), (3, 'c', 'y')");
    let log = dir.path().join("sluice.log");
    wait_until(Duration::from_secs(30), "the sink waiting on the registry", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("sink call failed; retrying") && text.contains("schema registry http://127.0.0.1")
    });
    // Counted without the registry, which the Python deserializer needs.
    assert_eq!(committed_messages(&topic), 1, "an event was written without a registered schema");
    // The outage lasts 20 seconds whatever the retries do.
    std::thread::sleep(Duration::from_secs(20).saturating_sub(since.elapsed()));
    drop(paused);

    let messages = avro_messages(&topic, 3);
    stop(child, dir.path());
    let ids: Vec<i64> = messages.iter().map(|m| m["value"]["after"]["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3], "every event once");
    assert_eq!(messages[2]["value"]["after"]["w"], "y");
    drop_slots(db);
}
