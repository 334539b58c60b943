//! Debezium embedded as the oracle of the Debezium envelope
//! (scripts/debezium.sh), and comparing its records with Sluice's.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::Value;

use super::{env, unique};

/// Debezium's records, one JSON object each, from the engine properties
/// `properties` (`set`: `pg` or `mariadb`), and extra Capture options.
pub fn debezium_records(dir: &Path, set: &str, properties: &str, options: &[&str]) -> Vec<Value> {
    let path = dir.join("debezium.properties");
    std::fs::write(&path, properties).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/debezium.sh");
    let output = Command::new("bash")
        .arg(script)
        .args(["run", set, path.to_str().unwrap(), "--idle-ms", "5000"])
        .args(options)
        .output()
        .unwrap();
    assert!(output.status.success(), "debezium failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Blanks what differs by nature: processing times and the version.
pub fn masked(mut value: Value) -> Value {
    if let Some(payload) = value.get_mut("payload").filter(|p| p.is_object()) {
        for field in ["ts_ms", "ts_us", "ts_ns"] {
            if payload.get(field).is_some() {
                payload[field] = Value::Null;
            }
        }
        if let Some(source) = payload.get_mut("source").filter(|s| s.is_object()) {
            source["version"] = Value::Null;
        }
    }
    value
}

pub fn assert_same(what: &str, ours: &Value, theirs: &Value) {
    let mut differences = Vec::new();
    differ("", ours, theirs, &mut differences);
    assert!(differences.is_empty(), "{what} differs from Debezium's:\n  {}", differences.join("\n  "));
}

/// How Debezium names a logical decoding message's data collection in its
/// transaction END record: a Java object's identity hash, which no run
/// repeats (`…LogicalDecodingMessageId@5cd76cd4`). Sluice names the
/// message prefix; this is the one value the comparison lets differ.
const MESSAGE_COLLECTION: &str =
    "io.debezium.connector.postgresql.LogicalDecodingMessageMonitor$LogicalDecodingMessageId@";

/// The paths where two JSON values differ, with both sides.
fn differ(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    if path.ends_with(".data_collection") && theirs.as_str().is_some_and(|t| t.starts_with(MESSAGE_COLLECTION)) {
        return;
    }
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (x, y) = (a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null));
                if a.contains_key(key) != b.contains_key(key) {
                    out.push(format!("{path}.{key}: sluice {}, debezium {}", a.contains_key(key), b.contains_key(key)));
                }
                differ(&format!("{path}.{key}"), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differ(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if ours != theirs => out.push(format!("{path}: sluice {ours}, debezium {theirs}")),
        _ => {}
    }
}

/// Creates one-partition topics, so Kafka keeps the order Debezium gives.
pub fn create_topics(names: &[String]) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS")).create().unwrap();
    let topics: Vec<NewTopic> = names.iter().map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1))).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(admin.create_topics(&topics, &AdminOptions::new())).unwrap();
}

/// Every message of a one-partition topic: key, value and the
/// `__debezium.*` headers.
pub fn kafka_topic(topic: &str) -> Vec<(Value, Value, BTreeMap<String, String>)> {
    kafka_topic_with(topic, |name| name.starts_with("__debezium."))
}

/// [`kafka_topic`] with the headers `keep` names.
pub fn kafka_topic_with(topic: &str, keep: impl Fn(&str) -> bool) -> Vec<(Value, Value, BTreeMap<String, String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS"))
        .set("group.id", unique("golden"))
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let (mut records, mut idle) = (Vec::new(), 0);
    let parse = |bytes: Option<&[u8]>| bytes.map_or(Value::Null, |b| serde_json::from_slice(b).unwrap());
    while idle < 20 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = 0;
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .filter(|h| keep(h.key))
                            .map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or(b"")).into_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                records.push((parse(m.key()), parse(m.payload()), headers));
            }
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    records
}

/// A value's payload, with or without the schema wrapper.
fn payload(value: &Value) -> &Value {
    if value["schema"].is_object() { &value["payload"] } else { value }
}

/// Leaves out of Sluice's values the END records of transactions Debezium
/// wrote no END for. That is the one record the comparison lets Sluice
/// add: Debezium's MySQL and MariaDB connectors end a transaction on its
/// XID event, which a `TRUNCATE` (a statement logged on its own) lacks, so
/// Debezium opens that transaction and never closes it. Any other END
/// Debezium lacks stays, and fails the comparison.
fn without_truncate_ends(ours: Vec<Value>, theirs: &[Value]) -> Vec<Value> {
    let theirs: Vec<&Value> = theirs.iter().filter(|r| !r["value"].is_null()).map(|r| payload(&r["value"])).collect();
    let ended: std::collections::BTreeSet<&str> =
        theirs.iter().filter(|p| p["status"] == "END").filter_map(|p| p["id"].as_str()).collect();
    let truncates_only = |id: &str| {
        let ops: Vec<&Value> = theirs.iter().filter(|p| p["transaction"]["id"] == id).map(|p| &p["op"]).collect();
        !ops.is_empty() && ops.iter().all(|op| *op == "t")
    };
    ours.into_iter()
        .filter(|value| {
            let p = payload(value);
            let extra =
                p["status"] == "END" && p["id"].as_str().is_some_and(|id| !ended.contains(id) && truncates_only(id));
            !extra
        })
        .collect()
}

/// Compares a file of Sluice's values (schemas on) with Debezium's values
/// in log order, and the schemaless file with Debezium's payloads.
pub fn compare_files(schemas: &Path, plain: &Path, theirs: &[Value]) {
    let values: Vec<&Value> = theirs.iter().filter(|r| !r["value"].is_null()).map(|r| &r["value"]).collect();
    for (path, wrapped) in [(schemas, true), (plain, false)] {
        let text = std::fs::read_to_string(path).unwrap();
        let ours: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let ours = without_truncate_ends(ours, theirs);
        assert_eq!(
            ours.len(),
            values.len(),
            "{} holds {} events, Debezium gave {}",
            path.display(),
            ours.len(),
            values.len()
        );
        for (i, (ours, theirs)) in ours.into_iter().zip(&values).enumerate() {
            let (ours, theirs) = match wrapped {
                true => (ours, (*theirs).clone()),
                false => (serde_json::json!({ "payload": ours }), serde_json::json!({ "payload": theirs["payload"] })),
            };
            assert_same(&format!("event {i} of {}", path.display()), &masked(ours), &masked(theirs));
        }
    }
}

/// Compares Sluice's Kafka topics with Debezium's records topic by topic:
/// keys, values, tombstones and the key-change headers.
pub fn compare_topics(theirs: &[Value], skip: impl Fn(&str) -> bool) {
    compare_topics_with(theirs, skip, |name| name.starts_with("__debezium."));
}

/// [`compare_topics`] of the headers `keep` names (Debezium's context
/// headers left out).
pub fn compare_topics_with(theirs: &[Value], skip: impl Fn(&str) -> bool, keep: impl Fn(&str) -> bool + Copy) {
    let mut topics: Vec<&str> = theirs.iter().filter_map(|r| r["topic"].as_str()).collect();
    topics.sort_unstable();
    topics.dedup();
    for topic in topics.into_iter().filter(|t| !skip(t)) {
        let expected: Vec<&Value> = theirs.iter().filter(|r| r["topic"] == topic).collect();
        let mut got = kafka_topic_with(topic, keep);
        let kept = without_truncate_ends(got.iter().map(|(_, value, _)| value.clone()).collect(), theirs);
        got.retain(|(_, value, _)| kept.contains(value));
        assert_eq!(
            got.len(),
            expected.len(),
            "topic {topic}: sluice wrote {} records, Debezium {}",
            got.len(),
            expected.len()
        );
        for (i, ((key, value, headers), theirs)) in got.into_iter().zip(expected).enumerate() {
            assert_same(&format!("{topic} record {i} key"), &key, &theirs["key"]);
            assert_same(&format!("{topic} record {i} value"), &masked(value), &masked(theirs["value"].clone()));
            let their_headers: BTreeMap<String, String> = theirs["headers"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !k.starts_with("__debezium.context.") && keep(k))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            assert_eq!(headers, their_headers, "{topic} record {i} headers");
        }
    }
}

/// The other sinks that write bytes, in the schemaless Debezium envelope:
/// Redis (one stream), NATS (one subject), an HTTP receiver (batch mode)
/// and S3 JSON Lines in a local folder. Each must hold what the
/// schemaless file holds, which is compared with Debezium itself.
pub fn byte_sinks(prefix: &str, receiver: &str, lake: &Path) -> String {
    let format = format!("envelope: debezium, topic_prefix: {prefix}, truncate: include, transaction_metadata: true");
    format!(
        "      - type: redis\n        config: {{ id: redis, url: \"{redis}\", stream: {prefix}, checkpoint_key: \"{prefix}:checkpoint\", format: {{ {format} }} }}\n      - type: nats\n        config: {{ id: nats, url: \"{nats}\", stream: {prefix}, subject: {prefix}.events, format: {{ {format} }} }}\n      - type: http\n        config: {{ id: http, url: \"{receiver}\", mode: batch, format: {{ {format} }} }}\n      - type: s3\n        config: {{ id: lake, local: {lake}, format: {{ file: jsonl, {format} }} }}\n",
        redis = env("SLUICE_TEST_REDIS_URL"),
        nats = env("SLUICE_TEST_NATS_URL"),
        lake = lake.display(),
    )
}

/// Every payload of a Redis stream, in stream order.
pub fn redis_payloads(stream: &str) -> Vec<Value> {
    let mut conn = redis::Client::open(env("SLUICE_TEST_REDIS_URL")).unwrap().get_connection().unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query(&mut conn).unwrap();
    let payload = |fields: &[(String, String)]| fields.iter().find(|(k, _)| k == "payload").unwrap().1.clone();
    entries.iter().map(|(_, fields)| serde_json::from_str(&payload(fields)).unwrap()).collect()
}

/// Every message of a JetStream stream: its headers and its body as JSON.
pub fn nats_messages(stream: &str) -> Vec<(BTreeMap<String, String>, Value)> {
    let parse = |payload: Vec<u8>| serde_json::from_slice(&payload).unwrap();
    super::nats_raw(stream).into_iter().map(|(headers, payload)| (headers, parse(payload))).collect()
}

/// Asserts that each byte sink of [`byte_sinks`] holds the values of the
/// schemaless file: in order for the streams and the receiver, as a set
/// for the lake (whose files are per table).
pub fn compare_byte_sinks(plain: &Path, prefix: &str, receiver: &super::receiver::Receiver, lake: &Path) {
    let expected: Vec<Value> = std::fs::read_to_string(plain)
        .unwrap()
        .lines()
        .map(|l| masked_plain(serde_json::from_str(l).unwrap()))
        .collect();
    let nats: Vec<Value> = nats_messages(prefix).into_iter().map(|(_, body)| body).collect();
    let http: Vec<Value> = receiver.delivered().iter().flat_map(super::receiver::Request::events).collect();
    for (sink, got) in [("redis", redis_payloads(prefix)), ("nats", nats), ("http", http)] {
        let got: Vec<Value> = got.into_iter().map(masked_plain).collect();
        assert_eq!(
            got.len(),
            expected.len(),
            "the {sink} sink holds {} events, the file {}",
            got.len(),
            expected.len()
        );
        for (i, (ours, file)) in got.iter().zip(&expected).enumerate() {
            assert_same(&format!("{sink} event {i}"), ours, file);
        }
    }
    let mut lake_lines: Vec<String> = super::lake::local_files(lake)
        .iter()
        .flat_map(|(_, bytes)| {
            String::from_utf8(bytes.clone()).unwrap().lines().map(str::to_string).collect::<Vec<_>>()
        })
        .map(|line| masked_plain(serde_json::from_str(&line).unwrap()).to_string())
        .collect();
    let mut file_lines: Vec<String> = expected.iter().map(Value::to_string).collect();
    lake_lines.sort();
    file_lines.sort();
    assert_eq!(lake_lines, file_lines, "the lake's JSON lines are the file's");
}

/// Waits until Redis, NATS and the receiver hold `count` events each.
pub fn wait_for_byte_sinks(prefix: &str, receiver: &super::receiver::Receiver, count: usize) {
    super::wait_until(Duration::from_secs(60), "the byte sinks' events", || {
        let http: usize = receiver.delivered().iter().map(|r| r.events().len()).sum();
        redis_payloads(prefix).len() >= count && nats_messages(prefix).len() >= count && http >= count
    });
}

/// [`masked`] for a value without the schema wrapper.
pub fn masked_plain(value: Value) -> Value {
    masked(serde_json::json!({ "payload": value }))["payload"].take()
}

/// Engine properties of Debezium's PostgreSQL connector on `db`, reading
/// slot and publication `debezium_<db>` (made by the test), topic prefix
/// `prefix`, plus `extra` lines (the snapshot mode at least).
pub fn pg_properties(dir: &Path, db: &str, prefix: &str, extra: &str) -> String {
    use super::pg::pg_env;
    format!(
        "name=capture\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
         offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore\n\
         offset.storage.file.filename={offsets}\noffset.flush.interval.ms=0\n\
         database.hostname={host}\ndatabase.port={port}\ndatabase.user={user}\ndatabase.password={password}\n\
         database.dbname={db}\ntopic.prefix={prefix}\nplugin.name=pgoutput\nslot.name=debezium_{db}\n\
         publication.name=debezium_{db}\npublication.autocreate.mode=disabled\n{extra}",
        offsets = dir.join("debezium.offsets").display(),
        host = pg_env("SLUICE_TEST_PG_HOST"),
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        password = pg_env("SLUICE_TEST_PG_PASSWORD"),
    )
}
