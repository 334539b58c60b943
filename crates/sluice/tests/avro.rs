//! Avro with a schema registry on Kafka: read back by the `confluent-kafka`
//! Python client's AvroDeserializer (which fetches each writer schema from
//! the registry by the id in front of the datum) into the rows PostgreSQL
//! holds; schemas compared with what Debezium's events become through
//! Kafka Connect's AvroData; schema changes checked by the registry.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::avro::{
    ZOO, ZOO_WORKLOAD, avro_messages, avro_pipeline, avro_sink, database_rows, decimal_text, decode_datums,
    epoch_micros, pg_config, registry_url, schema_of, set_compatibility, version_ids, zoo_after,
};
use common::debezium::{create_topics, debezium_records, pg_properties};
use common::pg::{drop_slots, fresh_database, sql, stop, wait_for_slot};
use common::*;
use serde_json::{Value, json};

#[test]
fn confluent_kafka_reads_the_type_zoo_as_postgres_holds_it_with_debeziums_avro_schemas() {
    let db = "avro_zoo";
    fresh_database(db);
    sql(db, ZOO);
    let prefix = unique("avz");
    let topic = format!("{prefix}.public.zoo");
    create_topics(std::slice::from_ref(&topic));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pg_config(db, &avro_sink("avro", &topic, &prefix, "")));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(db, &format!("CREATE PUBLICATION debezium_{db} FOR ALL TABLES"));
    sql(db, &format!("SELECT pg_create_logical_replication_slot('debezium_{db}', 'pgoutput')"));
    for statement in ZOO_WORKLOAD {
        sql(db, statement);
    }
    // 3 inserts, an update, a delete and its tombstone.
    let messages = avro_messages(&topic, 6);
    stop(child, dir.path());

    let table = zoo_after(messages.iter().map(|m| &m["value"]).filter(|v| v.is_object()));
    assert_eq!(table, database_rows(db), "the rows the Avro consumer read");
    let tombstone = &messages[5];
    assert!(tombstone["value"].is_null() && tombstone["key"] == json!({"id": 2}), "{tombstone}");

    // The registered schemas are those Debezium's events get through
    // Kafka Connect's Avro converter.
    let theirs = debezium_records(
        dir.path(),
        "pg",
        &pg_properties(dir.path(), db, &prefix, "snapshot.mode=no_data\n"),
        &["--avro"],
    );
    let change = theirs.iter().find(|r| !r["value_schema"].is_null()).expect("a Debezium record");
    let value_ids: std::collections::BTreeSet<u64> = messages.iter().filter_map(|m| m["value_id"].as_u64()).collect();
    assert_eq!(value_ids.len(), 1, "one table version, one value schema: {value_ids:?}");
    let ours = schema_of(*value_ids.first().unwrap());
    common::debezium::assert_same("the value schema", &ours, &change["value_schema"]);
    let key_id = messages[0]["key_id"].as_u64().unwrap();
    common::debezium::assert_same("the key schema", &schema_of(key_id), &change["key_schema"]);
    drop_slots(db);
}

/// The `after` image's fields of a registered envelope schema.
fn row_fields(schema: &Value) -> Vec<(String, Value)> {
    let row = schema["fields"][0]["type"][1]["fields"].as_array().unwrap();
    row.iter().map(|f| (f["name"].as_str().unwrap().to_string(), f["type"].clone())).collect()
}

#[test]
fn schema_changes_register_new_versions_and_a_refused_one_stops_the_pipeline_until_the_level_allows_it() {
    let db = "avro_ddl";
    let (dir, topic, config) =
        avro_pipeline(db, "CREATE TABLE t (id int PRIMARY KEY, a text NOT NULL, b int)", ", exactly_once: true");
    let config = config.to_str().unwrap();
    let child = spawn(&["run", "-c", config], dir.path());
    wait_for_slot(db);
    sql(db, "INSERT INTO t VALUES (1, 'x', 10)");
    let first = avro_messages(&topic, 1);
    let subject = format!("{topic}-value");
    set_compatibility(&subject, "BACKWARD");

    // A nullable column: a version BACKWARD takes.
    sql(db, "ALTER TABLE t ADD COLUMN c text; INSERT INTO t VALUES (2, 'y', 20, 'c2')");
    let two = avro_messages(&topic, 2);
    assert_eq!(two[0], first[0]);
    // A type change no reader of the old version can take.
    sql(db, "ALTER TABLE t ALTER COLUMN b TYPE text; INSERT INTO t VALUES (3, 'z', '30', 'c3')");
    let mut child = child;
    let status = child.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "sluice went on past a schema the registry refuses");
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    for needed in ["public.t", "column \"b\" changed from", "BACKWARD", subject.as_str(), "PUT /config/"] {
        assert!(log.contains(needed), "the error lacks {needed:?}:\n{log}");
    }
    assert_eq!(avro_messages(&topic, 2).len(), 2, "an event past the refused schema was written");

    set_compatibility(&subject, "NONE");
    let child = spawn(&["run", "-c", config], dir.path());
    let messages = avro_messages(&topic, 3);
    stop(child, dir.path());
    assert_eq!(messages.len(), 3, "each event once: {messages:#?}");
    let ids: Vec<u64> = messages.iter().map(|m| m["value_id"].as_u64().unwrap()).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "one version per table version: {ids:?}");
    let names = |id| row_fields(&schema_of(id)).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(ids[0]), ["id", "a", "b"]);
    assert_eq!(names(ids[2]), ["id", "a", "b", "c"]);
    assert_eq!(row_fields(&schema_of(ids[2]))[2].1, json!(["null", "string"]));
    let after: Vec<&Value> = messages.iter().map(|m| &m["value"]["after"]).collect();
    assert_eq!(after[0], &json!({"id": 1, "a": "x", "b": 10}));
    assert_eq!(after[1], &json!({"id": 2, "a": "y", "b": 20, "c": "c2"}));
    assert_eq!(after[2], &json!({"id": 3, "a": "z", "b": "30", "c": "c3"}));
    drop_slots(db);
}

const MY_ZOO: &str = "CREATE TABLE zoo (id int PRIMARY KEY, tiny tinyint, amount decimal(12,2), d date, \
     dt datetime(6), ts timestamp(6) NULL, tm time(6), v varchar(20), j json, b blob, e enum('sad','ok','happy'), \
     s set('a','b','c'), u uuid, dbl double, y year)";

const MY_WORKLOAD: &str = "INSERT INTO zoo VALUES (1, -7, 12.50, '2024-02-29', '2024-02-29 13:45:56.123456', \
     '2024-02-29 13:45:56.123456', '13:45:56.123456', 'first', '{\"a\": [1, 2]}', x'00ff10', 'happy', 'a,c', \
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 2.25, 2024), \
     (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL); \
     UPDATE zoo SET amount = -0.01, v = 'changed', s = '' WHERE id = 1";

/// The MariaDB rows, each column in the form Debezium gives it.
fn my_database_rows(db: &str) -> BTreeMap<i64, Value> {
    let query = format!(
        "SELECT JSON_OBJECT('id', id, 'tiny', tiny, 'amount', CAST(amount AS CHAR), 'd', DATEDIFF(d, '1970-01-01'), \
         'dt', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt), 'ts', TIMESTAMPDIFF(MICROSECOND, FROM_UNIXTIME(0), ts), \
         'tm', FLOOR(TIME_TO_SEC(tm)) * 1000000 + MICROSECOND(tm), 'v', v, 'j', CONCAT(j), 'b', LOWER(HEX(b)), 'e', e, 's', s, \
         'u', CAST(u AS CHAR), 'dbl', dbl, 'y', y) FROM {db}.zoo ORDER BY id"
    );
    common::my::my_rows::<String>(&query)
        .into_iter()
        .map(|row| {
            let row: Value = serde_json::from_str(&row).unwrap();
            (row["id"].as_i64().unwrap(), row)
        })
        .collect()
}

#[test]
fn confluent_kafka_reads_the_mariadb_type_zoo_as_mariadb_holds_it() {
    use common::my::my_exec;
    let db = "avro_my";
    my_exec(&format!("DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; USE {db}; {MY_ZOO}"));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let prefix = unique("avm");
    let topic = format!("{prefix}.{db}.zoo");
    create_topics(std::slice::from_ref(&topic));
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{db}.*], start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n{sink}",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
        sink = avro_sink("avro", &topic, &prefix, ""),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    my_exec(&format!("USE {db}; {MY_WORKLOAD}"));
    let messages = avro_messages(&topic, 3);
    stop(child, dir.path());
    let mut table = BTreeMap::new();
    for message in &messages {
        let after = &message["value"]["after"];
        let mut row = after.clone();
        row["amount"] = after["amount"].get("decimal").cloned().unwrap_or(Value::Null);
        row["b"] = after["b"].get("hex").cloned().unwrap_or(Value::Null);
        row["ts"] = after["ts"].as_str().map_or(Value::Null, |t| json!(epoch_micros(t)));
        table.insert(row["id"].as_i64().unwrap(), row);
    }
    assert_eq!(table, my_database_rows(db), "the rows the Avro consumer read");
    let value = schema_of(messages[0]["value_id"].as_u64().unwrap());
    assert_eq!(value["connect.name"], format!("{topic}.Envelope"));
    assert_eq!(value["fields"][2]["type"]["name"], "Source");
    assert_eq!(value["fields"][2]["type"]["namespace"], "io.debezium.connector.mariadb");
}

/// A change's value without what differs by nature between two writes.
fn comparable(mut value: Value) -> Value {
    for field in ["ts_ms", "ts_us", "ts_ns"] {
        value[field] = Value::Null;
    }
    value["source"]["ts_ms"] = Value::Null;
    value
}

#[test]
fn nats_redis_and_http_carry_the_avro_values_kafka_does_under_their_subjects() {
    let db = "avro_streams";
    fresh_database(db);
    sql(db, "CREATE TABLE t (id int PRIMARY KEY, v text, amount numeric(8,2))");
    let prefix = unique("avs");
    let topic = format!("{prefix}.public.t");
    create_topics(std::slice::from_ref(&topic));
    let (stream, redis_stream) = (unique("avs"), unique("avs"));
    let registry = format!("schema_registry: {{ url: \"{}\" }}", registry_url());
    let format = format!("format: {{ envelope: debezium, encoding: avro, topic_prefix: {prefix}, {registry} }}");
    let receiver = common::receiver::Receiver::start();
    let sinks = format!(
        "{kafka}      - type: nats\n        config: {{ id: n, url: \"{nats}\", stream: {stream}, subject: {stream}.events, {format} }}\n      - type: redis\n        config: {{ id: r, url: \"{redis}\", stream: {redis_stream}, {format} }}\n      - type: http\n        config: {{ id: h, url: \"{http}\", mode: single, {format} }}\n",
        kafka = avro_sink("k", &topic, &prefix, ""),
        http = receiver.url("/hook"),
        nats = env("SLUICE_TEST_NATS_URL"),
        redis = env("SLUICE_TEST_REDIS_URL"),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pg_config(db, &sinks));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(db, "INSERT INTO t VALUES (1, 'a', 1.50), (2, 'b', NULL); UPDATE t SET v = 'c' WHERE id = 1");
    let kafka = avro_messages(&topic, 3);
    let counts = || (nats_raw(&stream).len(), redis_payloads(&redis_stream).len(), receiver.delivered().len());
    let arrived = common::wait_for(Duration::from_secs(60), || {
        let (nats, redis, http) = counts();
        nats >= 3 && redis >= 3 && http >= 3
    });
    assert!(arrived, "of 3 changes, (nats, redis, http) hold {:?}", counts());
    stop(child, dir.path());
    let expected: Vec<Value> = kafka.iter().map(|m| comparable(m["value"].clone())).collect();
    let nats: Vec<Vec<u8>> = nats_raw(&stream).into_iter().map(|(_, payload)| payload).collect();
    let redis = redis_payloads(&redis_stream);
    let requests = receiver.delivered();
    for request in &requests {
        assert_eq!(request.header("content-type"), Some("application/octet-stream"));
        assert!(request.header("idempotency-key").is_some_and(|key| !key.is_empty()));
    }
    let http: Vec<Vec<u8>> = requests.into_iter().map(|r| r.body).collect();
    for (sink, datums) in [("nats", nats), ("redis", redis), ("http", http.clone())] {
        let decoded = decode_datums(&datums);
        let values: Vec<Value> = decoded.iter().map(|d| comparable(d["value"].clone())).collect();
        assert_eq!(values, expected, "{sink}'s values");
    }
    // HTTP names subjects after the topic Debezium would write to, which
    // here is Kafka's: the same subject, so the same schema id.
    let kafka_ids: Vec<u64> = kafka.iter().map(|m| m["value_id"].as_u64().unwrap()).collect();
    let http_ids: Vec<u64> = decode_datums(&http).iter().map(|d| d["value_id"].as_u64().unwrap()).collect();
    assert_eq!(http_ids, kafka_ids, "http's schema ids");
    // The topic strategy names subjects after the NATS subject and the Redis
    // stream; NATS writes no key, so registers no key schema.
    let (status, subjects) = common::avro::registry("GET", "/subjects", None);
    assert_eq!(status, 200);
    let subjects: Vec<&str> = subjects.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for present in [format!("{stream}.events-value"), format!("{redis_stream}-value"), format!("{redis_stream}-key")] {
        assert!(subjects.contains(&present.as_str()), "{present} missing from {subjects:?}");
    }
    assert!(!subjects.contains(&format!("{stream}.events-key").as_str()), "a key schema for NATS");
    drop_slots(db);
}

/// A stream entry: its id and its fields.
type Entry = (String, Vec<(String, Vec<u8>)>);

/// Each entry's `payload` field as bytes.
fn redis_payloads(stream: &str) -> Vec<Vec<u8>> {
    let mut conn = redis::Client::open(env("SLUICE_TEST_REDIS_URL")).unwrap().get_connection().unwrap();
    let entries: Vec<Entry> = redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query(&mut conn).unwrap();
    entries.into_iter().map(|(_, fields)| fields.into_iter().find(|(k, _)| k == "payload").unwrap().1).collect()
}

#[test]
fn kills_after_registering_and_after_committing_replay_with_the_same_ids_and_no_duplicate() {
    let db = "avro_kill";
    let (dir, topic, config) = avro_pipeline(db, "CREATE TABLE t (id int PRIMARY KEY, v text)", ", exactly_once: true");
    let config = config.to_str().unwrap();
    let insert =
        |from: i32| sql(db, &format!("INSERT INTO t SELECT g, 'v' || g FROM generate_series({from}, {}) g", from + 4));

    // The key's schema is registered first, then the value's: the second
    // registration is the last step before the batch is written.
    let mut child =
        spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", "avro.after_register=2")]);
    wait_for_slot(db);
    insert(1);
    assert!(!child.wait_exit(Duration::from_secs(60)).success(), "the failpoint did not fire");
    let subject = format!("{topic}-value");
    let registered = version_ids(&subject);
    assert_eq!(registered.len(), 1);

    let mut child = spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_FAILPOINT", "kafka.after_commit=1")]);
    assert!(!child.wait_exit(Duration::from_secs(60)).success(), "the failpoint did not fire");
    assert_eq!(avro_messages(&topic, 5).len(), 5);

    let child = spawn(&["run", "-c", config], dir.path());
    insert(6);
    let messages = avro_messages(&topic, 10);
    stop(child, dir.path());
    let ids: Vec<i64> = messages.iter().map(|m| m["value"]["after"]["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>(), "every event once, in order");
    assert!(messages.iter().all(|m| m["value_id"].as_u64() == Some(registered[0])), "{messages:#?}");
    assert_eq!(version_ids(&subject), registered, "a replay registered another version");
    drop_slots(db);
}

#[test]
fn a_bad_subject_strategy_is_a_config_error_and_an_unreachable_or_refusing_registry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let generator = "    source: { type: generator, config: { id: gen, tx_count: 5, rows_per_tx: 2 } }\n";
    let kafka = |format: &str| {
        format!(
            "pipelines:\n  - name: p\n{generator}    sinks:\n      - type: kafka\n        config: {{ id: k, brokers: \"{}\", topic: {}, format: {{ envelope: debezium, encoding: avro, {format} }} }}\n",
            env("SLUICE_TEST_KAFKA_BROKERS"),
            unique("avb"),
        )
    };
    let bad = write_config(
        dir.path(),
        &kafka("subject_strategy: by_table, schema_registry: { url: \"http://127.0.0.1:1\" }"),
    );
    let output = run(&["validate", "-c", bad.to_str().unwrap()], dir.path());
    assert!(!output.status.success());
    let text = stderr(&output);
    assert!(text.contains("format.subject_strategy") || text.contains("subject_strategy"), "{text}");
    assert!(text.contains("by_table"), "{text}");

    // Nothing listens on port 1: the error names the registry and retries.
    let unreachable = write_config(
        dir.path(),
        &kafka("schema_registry: { url: \"http://127.0.0.1:1/apis/ccompat/v7\", timeout_secs: 1 }"),
    );
    let child = spawn(&["run", "-c", unreachable.to_str().unwrap()], dir.path());
    let log = dir.path().join("sluice.log");
    wait_until(Duration::from_secs(30), "the registry named in the log", || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("schema registry http://127.0.0.1:1/apis/ccompat/v7")
    });
    child.terminate();

    // A registry that refuses the credentials stops the pipeline, naming
    // the registry and the status, never the password.
    let receiver = common::receiver::Receiver::start();
    receiver.set_rule(|_| common::receiver::Reply::Status(401));
    let refused = write_config(
        dir.path(),
        &kafka(&format!(
            "schema_registry: {{ url: \"{}\", username: sluice, password: hush-hush-42 }}",
            receiver.url("/ccompat")
        )),
    );
    std::fs::remove_file(&log).ok();
    let mut child = spawn(&["run", "-c", refused.to_str().unwrap()], dir.path());
    assert!(!child.wait_exit(Duration::from_secs(60)).success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&receiver.url("/ccompat")) && text.contains("refused the credentials (401)"), "{text}");
    assert!(!text.contains("hush-hush-42"), "the password is in the log:\n{text}");
    assert!(receiver.requests().iter().any(|r| r.header("authorization").is_some()), "no credentials were sent");
}

#[test]
fn decimals_and_timestamps_convert() {
    assert_eq!(decimal_text("fb1e", 2), "-12.50");
    assert_eq!(decimal_text("04cb2f", 5), "3.14159");
    assert_eq!(decimal_text("64", 0), "100");
    assert_eq!(epoch_micros("1970-01-02T00:00:01.5Z"), 86_401_500_000);
    assert_eq!(epoch_micros("2024-02-29T11:45:56.123456Z"), 1_709_207_156_123_456);
}
