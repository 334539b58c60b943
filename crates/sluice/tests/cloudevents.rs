//! CloudEvents output read by the CloudEvents SDKs for Python and for
//! JavaScript in strict mode (scripts/consumers.sh): structured mode from
//! the file sink, binary mode from Kafka headers and from NATS and HTTP
//! headers (Python's HTTP binding, which NATS's follows). The SDK refuses
//! any event that breaks the specification; every event must come back
//! with the native event's id, position and data.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::debezium::nats_messages;
use common::receiver::Receiver;
use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::Value;

/// Every message of a one-partition topic as {headers, key, value}.
fn binary_messages(topic: &str) -> Vec<Value> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS"))
        .set("group.id", unique("ce"))
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
        assignment.add_partition_offset(topic, partition.id(), Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let (mut messages, mut idle) = (Vec::new(), 0);
    let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8(b.to_vec()).unwrap());
    while idle < 20 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = 0;
                let headers: BTreeMap<String, String> = m
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), text(h.value).unwrap_or_default())).collect())
                    .unwrap_or_default();
                messages
                    .push(serde_json::json!({"headers": headers, "key": text(m.key()), "value": text(m.payload())}));
            }
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    messages
}

/// What `scripts/consumers.sh <kind>` prints: the SDK's interpreter or modules.
fn consumer(kind: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/consumers.sh");
    let output = Command::new("bash").arg(script).arg(kind).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn the_cloudevents_sdk_reads_structured_and_binary_events() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("ce");
    let stream = unique("ce");
    let receiver = Receiver::start();
    let config = format!(
        "pipelines:\n  - name: orders\n    source: {{ type: generator, config: {{ id: gen1, tx_count: 20, rows_per_tx: 3 }} }}\n    sinks:\n      - type: file\n        config: {{ id: native, path: native.jsonl }}\n      - type: file\n        config: {{ id: structured, path: structured.jsonl, format: {{ envelope: cloudevents, source: /shop/orders }} }}\n      - type: kafka\n        config: {{ id: binary, brokers: \"{}\", topic: {topic}, format: {{ envelope: cloudevents, mode: binary }} }}\n      - type: nats\n        config: {{ id: nats, url: \"{}\", stream: {stream}, subject: {stream}.events, format: {{ envelope: cloudevents, mode: binary }} }}\n      - type: http\n        config: {{ id: http, url: \"{}\", format: {{ envelope: cloudevents, mode: binary }} }}\n",
        env("SLUICE_TEST_KAFKA_BROKERS"),
        env("SLUICE_TEST_NATS_URL"),
        receiver.url("/events"),
    );
    let config = write_config(dir.path(), &config);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let binary = binary_messages(&topic);
    let binary_path = dir.path().join("binary.jsonl");
    let lines: Vec<String> = binary.iter().map(|m| m.to_string()).collect();
    std::fs::write(&binary_path, lines.join("\n") + "\n").unwrap();
    // NATS messages, then HTTP requests, as the HTTP binding's messages.
    let mut http_lines: Vec<String> = nats_messages(&stream)
        .into_iter()
        .map(|(headers, body)| serde_json::json!({"headers": headers, "body": body.to_string()}).to_string())
        .collect();
    for request in receiver.delivered() {
        let headers: BTreeMap<&str, &str> = request.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let body = String::from_utf8(request.body.clone()).unwrap();
        http_lines.push(serde_json::json!({"headers": headers, "body": body}).to_string());
    }
    let http_path = dir.path().join("http.jsonl");
    std::fs::write(&http_path, http_lines.join("\n") + "\n").unwrap();

    let checked = Command::new(consumer("python"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cloudevents_check.py"))
        .arg(dir.path().join("structured.jsonl"))
        .arg(&binary_path)
        .arg(&http_path)
        .output()
        .unwrap();
    assert!(checked.status.success(), "the SDK refused an event:\n{}", String::from_utf8_lossy(&checked.stderr));
    let decoded: Vec<Value> =
        String::from_utf8(checked.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();

    let native: Vec<Value> = std::fs::read_to_string(dir.path().join("native.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(native.len(), 60);
    assert_eq!(decoded.len(), 240, "every mode and sink gives every event");
    let (structured, binary) = decoded.split_at(60);
    let (binary, rest) = binary.split_at(60);
    let (nats, http) = rest.split_at(60);
    let mut binary = binary.to_vec();
    binary.sort_by_key(|e| native.iter().position(|n| n["id"] == e["id"]));
    let modes = [
        ("structured", structured, "/shop/orders"),
        ("kafka binary", &binary[..], "/sluice/gen1"),
        ("nats binary", nats, "/sluice/gen1"),
        ("http binary", http, "/sluice/gen1"),
    ];
    for (mode, events, source) in modes {
        for (event, native) in events.iter().zip(&native) {
            assert_eq!(event["id"], native["id"], "{mode}");
            assert_eq!(event["position"], native["position"], "{mode}");
            let operation = match native["op"].as_str().unwrap() {
                "c" => "insert",
                "u" => "update",
                "d" => "delete",
                other => panic!("the generator wrote op {other}"),
            };
            assert_eq!(event["type"], format!("io.sluice.change.{operation}"), "{mode}");
            assert_eq!(event["source"], source, "{mode}");
            assert_eq!(event["subject"], native["table"], "{mode}");
            assert_eq!(event["data"], *native, "{mode}: the data is the native event");
        }
    }

    let strict = Command::new("node")
        .env("NODE_PATH", consumer("node"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cloudevents_check.js"))
        .arg(dir.path().join("structured.jsonl"))
        .output()
        .unwrap();
    assert!(
        strict.status.success(),
        "the JavaScript SDK refused an event:\n{}",
        String::from_utf8_lossy(&strict.stderr)
    );
    let read: Vec<Value> =
        String::from_utf8(strict.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(read.len(), native.len());
    for (event, native) in read.iter().zip(&native) {
        assert_eq!(event["id"], native["id"]);
        assert_eq!(event["position"], native["position"]);
        assert_eq!(event["source"], "/shop/orders");
    }
}
