//! The Debezium envelope against Debezium itself: the same PostgreSQL
//! changes, read by Debezium embedded 3.6.1 (scripts/debezium.sh) and by
//! Sluice, must give the same events field by field, with schemas, keys,
//! tombstones and headers. Only processing times, `source.version` and
//! Debezium's engine context headers may differ.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pg::{fresh_database, params, pg_env, sql, stop};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::Value;

const SETUP: &str = include_str!("fixtures/debezium_pg.sql");
const WORKLOAD: &str = include_str!("fixtures/debezium_pg_workload.sql");

/// Runs each statement on its own, so each is its own transaction unless
/// the workload says BEGIN.
fn run_statements(database: &str, script: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = sluice_postgres::wire::Connection::connect(&params(database), false).await.unwrap();
        for statement in script.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
            conn.simple_query(statement).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        conn.close().await;
    });
}

/// Debezium's records for the slot, one JSON object per record.
fn debezium_records(dir: &Path, database: &str, prefix: &str) -> Vec<Value> {
    let properties = format!(
        "name=golden\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
         offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore\n\
         offset.storage.file.filename={offsets}\noffset.flush.interval.ms=0\n\
         database.hostname={host}\ndatabase.port={port}\ndatabase.user={user}\ndatabase.password={password}\n\
         database.dbname={database}\ntopic.prefix={prefix}\nplugin.name=pgoutput\nslot.name=debezium_{database}\n\
         publication.name=debezium_{database}\npublication.autocreate.mode=disabled\nsnapshot.mode=no_data\n\
         skipped.operations=none\n",
        offsets = dir.join("debezium.offsets").display(),
        host = pg_env("SLUICE_TEST_PG_HOST"),
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        password = pg_env("SLUICE_TEST_PG_PASSWORD"),
    );
    let path = dir.join("debezium.properties");
    std::fs::write(&path, properties).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/debezium.sh");
    let output = Command::new("bash")
        .arg(script)
        .args(["run", "pg", path.to_str().unwrap(), "--idle-ms", "5000"])
        .output()
        .unwrap();
    assert!(output.status.success(), "debezium failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Blanks what differs by nature: processing times and the version.
fn masked(mut value: Value) -> Value {
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

/// Every message of a topic: key, value and the format's headers.
fn kafka_topic(topic: &str) -> Vec<(Value, Value, BTreeMap<String, String>)> {
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
                            .filter(|h| h.key.starts_with("__debezium."))
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

fn assert_same(what: &str, ours: &Value, theirs: &Value) {
    assert!(
        ours == theirs,
        "{what} differs from Debezium's:\n  sluice:   {}\n  debezium: {}",
        serde_json::to_string(ours).unwrap(),
        serde_json::to_string(theirs).unwrap()
    );
}

#[test]
fn the_debezium_envelope_matches_debezium_field_by_field() {
    let db = "debezium_golden";
    let prefix = unique("dbz");
    fresh_database(db);
    sql(db, SETUP);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("debezium.jsonl");
    let format = format!(
        "{{ envelope: debezium, schemas: true, topic_prefix: {prefix}, truncate: include, messages: include }}"
    );
    let plain = format!("{{ envelope: debezium, topic_prefix: {prefix}, truncate: include }}");
    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, messages: true, status_interval_secs: 1 }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: debezium.jsonl, format: {format} }}\n      - type: file\n        config: {{ id: plain, path: plain.jsonl, format: {plain} }}\n      - type: kafka\n        config: {{ id: kafka, brokers: \"{brokers}\", topic: \"{prefix}.${{table}}\", format: {format} }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        brokers = env("SLUICE_TEST_KAFKA_BROKERS"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    );
    let config = write_config(dir.path(), &config);
    // One partition per topic, so Kafka keeps the order Debezium gives.
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS")).create().unwrap();
    let names: Vec<String> = ["all_types", "nokey_full", "full_ident", "toasty", "multi_pk"]
        .iter()
        .map(|t| format!("{prefix}.public.{t}"))
        .collect();
    let topics: Vec<NewTopic> = names.iter().map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1))).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(admin.create_topics(&topics, &AdminOptions::new())).unwrap();
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "sluice's slot", || {
        let slots = std::process::Command::new("psql")
            .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
            .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", db, "-Atc"])
            .arg(format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'sluice_{db}' AND active"))
            .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&slots.stdout).trim() == "1"
    });
    sql(db, &format!("CREATE PUBLICATION debezium_{db} FOR ALL TABLES"));
    sql(db, &format!("SELECT pg_create_logical_replication_slot('debezium_{db}', 'pgoutput')"));
    run_statements(db, WORKLOAD);

    let theirs = debezium_records(dir.path(), db, &prefix);
    let values: Vec<&Value> = theirs.iter().filter(|r| !r["value"].is_null()).map(|r| &r["value"]).collect();
    assert!(values.len() > 25, "Debezium gave only {} events", values.len());
    wait_until(Duration::from_secs(60), "sluice's events", || line_count(&out) >= values.len());
    stop(child, dir.path());

    // The file: every event's value, in log order.
    let text = std::fs::read_to_string(&out).unwrap();
    let ours: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ours.len(), values.len(), "sluice wrote {} events, Debezium {}", ours.len(), values.len());
    for (i, (ours, theirs)) in ours.iter().zip(&values).enumerate() {
        assert_same(&format!("event {i} in the file"), &masked(ours.clone()), &masked((*theirs).clone()));
    }

    // Without schemas: the payload alone, as JsonConverter writes it with
    // schemas.enable=false.
    let text = std::fs::read_to_string(dir.path().join("plain.jsonl")).unwrap();
    let plain: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(plain.len(), values.len(), "the schemaless file holds {} events", plain.len());
    for (i, (ours, theirs)) in plain.into_iter().zip(&values).enumerate() {
        let wrapped = serde_json::json!({ "payload": ours });
        let theirs = serde_json::json!({ "payload": theirs["payload"] });
        assert_same(&format!("schemaless event {i}"), &masked(wrapped), &masked(theirs));
    }

    // Kafka: keys, tombstones and the key-change headers, topic by topic.
    let mut topics: Vec<&str> = theirs.iter().filter_map(|r| r["topic"].as_str()).collect();
    topics.sort_unstable();
    topics.dedup();
    for topic in topics.iter().filter(|t| !t.ends_with(".message")) {
        let expected: Vec<&Value> = theirs.iter().filter(|r| r["topic"] == **topic).collect();
        let got = kafka_topic(topic);
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
                .filter(|(k, _)| !k.starts_with("__debezium.context."))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            assert_eq!(headers, their_headers, "{topic} record {i} headers");
        }
    }
}
