//! The Debezium envelope against Debezium itself: the same changes, read
//! by Debezium embedded (3.6.1 for PostgreSQL, 3.5.0 for MariaDB; see
//! scripts/debezium.sh) and by Sluice, must give the same records field by
//! field: values with and without schemas, keys, tombstones and the
//! key-change headers. Only processing times, `source.version` and
//! Debezium's engine context headers may differ. Redis, NATS, HTTP and S3
//! JSON Lines, in the same run, must hold the file sink's values.

mod common;

use std::time::Duration;

use common::debezium::{
    byte_sinks, compare_byte_sinks, compare_files, compare_topics, create_topics, debezium_records, pg_properties,
    wait_for_byte_sinks,
};
use common::my::{my_exec, my_sql};
use common::pg::{drop_slots, fresh_database, params, pg_env, sql, stop, wait_for_slot};
use common::receiver::Receiver;
use common::*;

const PG_SETUP: &str = include_str!("fixtures/debezium_pg.sql");
const PG_WORKLOAD: &str = include_str!("fixtures/debezium_pg_workload.sql");
const MY_SETUP: &str = include_str!("fixtures/debezium_mariadb.sql");
const MY_WORKLOAD: &str = include_str!("fixtures/debezium_mariadb_workload.sql");

fn statements(script: &str) -> impl Iterator<Item = &str> {
    script.split(";\n").map(str::trim).filter(|s| !s.is_empty())
}

/// Runs each statement on its own, so each is its own transaction unless
/// the workload says BEGIN.
fn run_pg(database: &str, script: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = sluice_postgres::wire::Connection::connect(&params(database), false).await.unwrap();
        for statement in statements(script) {
            conn.simple_query(statement).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        conn.close().await;
    });
}

/// The two file sinks (schemas on and off), the Kafka sink, and the other
/// sinks that write bytes, of a test.
fn sinks(prefix: &str, receiver: &Receiver, lake: &std::path::Path) -> String {
    format!(
        "      - type: file\n        config: {{ id: file, path: debezium.jsonl, format: {{ envelope: debezium, schemas: true, topic_prefix: {prefix}, truncate: include, transaction_metadata: true }} }}\n      - type: file\n        config: {{ id: plain, path: plain.jsonl, format: {{ envelope: debezium, topic_prefix: {prefix}, truncate: include, transaction_metadata: true }} }}\n      - type: kafka\n        config: {{ id: kafka, brokers: \"{brokers}\", topic: \"{prefix}.${{table}}\", format: {{ envelope: debezium, schemas: true, topic_prefix: {prefix}, truncate: include, transaction_metadata: true }} }}\n",
        brokers = env("SLUICE_TEST_KAFKA_BROKERS"),
    ) + &byte_sinks(prefix, &receiver.url("/events"), lake)
}

#[test]
fn the_postgres_debezium_envelope_matches_debezium_field_by_field() {
    let db = "debezium_golden";
    let prefix = unique("dbz");
    fresh_database(db);
    sql(db, PG_SETUP);
    let dir = tempfile::tempdir().unwrap();
    let (receiver, lake) = (Receiver::start(), dir.path().join("lake"));
    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, messages: true, status_interval_secs: 1 }}\n    sinks:\n{sinks}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
        sinks = sinks(&prefix, &receiver, &lake),
    );
    let config = write_config(dir.path(), &config);
    let tables = ["all_types", "nokey_full", "full_ident", "toasty", "multi_pk"];
    create_topics(&tables.map(|t| format!("{prefix}.public.{t}")));
    create_topics(&[format!("{prefix}.transaction")]);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    // Sluice creates its publication and slot at start; the workload must
    // come after them, and after Debezium's.
    wait_for_slot(db);
    sql(db, &format!("CREATE PUBLICATION debezium_{db} FOR ALL TABLES"));
    sql(db, &format!("SELECT pg_create_logical_replication_slot('debezium_{db}', 'pgoutput')"));
    run_pg(db, PG_WORKLOAD);

    let properties = pg_properties(
        dir.path(),
        db,
        &prefix,
        "snapshot.mode=no_data\nskipped.operations=none\nprovide.transaction.metadata=true\n",
    );
    let theirs = debezium_records(dir.path(), "pg", &properties, &[]);
    let values = theirs.iter().filter(|r| !r["value"].is_null()).count();
    assert!(values > 25, "Debezium gave only {values} events");
    let out = dir.path().join("debezium.jsonl");
    wait_until(Duration::from_secs(60), "sluice's events", || line_count(&out) >= values);
    wait_for_byte_sinks(&prefix, &receiver, values);
    stop(child, dir.path());
    compare_files(&out, &dir.path().join("plain.jsonl"), &theirs);
    compare_byte_sinks(&dir.path().join("plain.jsonl"), &prefix, &receiver, &lake);
    // Messages go to Debezium's `<prefix>.message` topic; the Kafka sink's
    // topic template names them by their prefix instead.
    compare_topics(&theirs, |topic| topic.ends_with(".message"));
    drop_slots(db);
}

/// False once the log says the run failed, so the test shows why at once.
fn child_running(log: &std::path::Path) -> bool {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains(" ERROR "), "sluice failed:\n{text}");
    true
}

#[test]
fn the_mariadb_debezium_envelope_matches_debezium_field_by_field() {
    let db = "debezium_golden_my";
    let prefix = unique("dbzmy");
    my_exec(&format!("DROP DATABASE IF EXISTS {db}"));
    my_exec(&format!("CREATE DATABASE {db}"));
    my_exec(&format!("USE {db}; {MY_SETUP}"));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let gtid: String = my_sql("SELECT @@gtid_binlog_pos").unwrap();
    // One connection, so the workload's START TRANSACTION … COMMIT holds.
    my_exec(&format!("USE {db}; {MY_WORKLOAD}"));
    let dir = tempfile::tempdir().unwrap();
    let (receiver, lake) = (Receiver::start(), dir.path().join("lake"));
    let config = format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{db}.*], start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n{sinks}",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
        sinks = sinks(&prefix, &receiver, &lake),
    );
    let config = write_config(dir.path(), &config);
    create_topics(&["all_types", "nokey", "multi_pk"].map(|t| format!("{prefix}.{db}.{t}")));
    create_topics(&[format!("{prefix}.transaction")]);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());

    let properties = format!(
        "name=golden\nconnector.class=io.debezium.connector.mariadb.MariaDbConnector\n\
         offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore\n\
         offset.storage.file.filename={offsets}\noffset.flush.interval.ms=0\n\
         database.hostname=127.0.0.1\ndatabase.port={port}\ndatabase.user={user}\ndatabase.password={password}\n\
         database.server.id=54321\ndatabase.ssl.mode=disable\ndatabase.include.list={db}\ntopic.prefix={prefix}\n\
         schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory\n\
         schema.history.internal.file.filename={history}\ninclude.schema.changes=false\nsnapshot.mode=recovery\n\
         skipped.operations=none\nprovide.transaction.metadata=true\n",
        offsets = dir.path().join("debezium.offsets").display(),
        history = dir.path().join("debezium.history").display(),
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
        password = env("SLUICE_TEST_MY_PASSWORD"),
    );
    let seed = format!(r#"{{"file":"{file}","pos":{offset},"gtids":"{gtid}"}}"#);
    let theirs = debezium_records(dir.path(), "mariadb", &properties, &["--seed-offset", &seed]);
    let values = theirs.iter().filter(|r| !r["value"].is_null()).count();
    assert!(values > 15, "Debezium gave only {values} events");
    let out = dir.path().join("debezium.jsonl");
    let log = dir.path().join("sluice.log");
    wait_until(Duration::from_secs(60), &format!("sluice's events (log {})", log.display()), || {
        line_count(&out) >= values || !child_running(&log)
    });
    wait_for_byte_sinks(&prefix, &receiver, values);
    stop(child, dir.path());
    compare_files(&out, &dir.path().join("plain.jsonl"), &theirs);
    compare_byte_sinks(&dir.path().join("plain.jsonl"), &prefix, &receiver, &lake);
    compare_topics(&theirs, |_| false);
}

/// An initial snapshot's `source.snapshot` marks, against Debezium's own
/// snapshot of the same tables (one of them empty, one with one row):
/// `first`, `true`, `last_in_data_collection`, `first_in_data_collection`
/// and `last`, on the same rows, in the same order.
#[test]
fn the_snapshot_marks_match_debeziums() {
    let db = "debezium_snapshot";
    let prefix = unique("dbzsnap");
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE a_three (id int PRIMARY KEY); INSERT INTO a_three VALUES (1), (2), (3);
         CREATE TABLE b_empty (id int PRIMARY KEY);
         CREATE TABLE c_one (id int PRIMARY KEY); INSERT INTO c_one VALUES (1);
         CREATE TABLE d_two (id int PRIMARY KEY); INSERT INTO d_two VALUES (1), (2);",
    );
    sql(db, &format!("CREATE PUBLICATION debezium_{db} FOR ALL TABLES"));
    sql(db, &format!("SELECT pg_create_logical_replication_slot('debezium_{db}', 'pgoutput')"));
    let dir = tempfile::tempdir().unwrap();
    let properties = pg_properties(dir.path(), db, &prefix, "snapshot.mode=initial\n");
    let marks = |records: Vec<serde_json::Value>| -> Vec<(String, i64, String)> {
        records
            .iter()
            .map(|r| {
                let payload = if r["payload"].is_object() { &r["payload"] } else { r };
                (
                    payload["source"]["table"].as_str().unwrap().to_string(),
                    payload["after"]["id"].as_i64().unwrap(),
                    payload["source"]["snapshot"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let theirs: Vec<serde_json::Value> = debezium_records(dir.path(), "pg", &properties, &[])
        .into_iter()
        .filter(|r| !r["value"].is_null())
        .map(|r| r["value"].clone())
        .collect();
    let theirs = marks(theirs);
    assert_eq!(theirs.len(), 6, "Debezium's snapshot: {theirs:?}");
    for mark in ["first", "last_in_data_collection", "last"] {
        assert!(theirs.iter().any(|(_, _, m)| m == mark), "no {mark} in Debezium's snapshot: {theirs:?}");
    }

    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, tables: [public.*], snapshot: {{ mode: initial }} }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: snapshot.jsonl, format: {{ envelope: debezium, topic_prefix: {prefix} }} }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let out = dir.path().join("snapshot.jsonl");
    wait_until(Duration::from_secs(60), "the snapshot", || line_count(&out) >= 6);
    stop(child, dir.path());
    let ours: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(marks(ours), theirs);
    drop_slots(db);
}
