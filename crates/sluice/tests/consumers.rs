//! Real consumers read Sluice's Debezium-format events into the rows the
//! database holds: Kafka Connect's JsonConverter (`toConnectData`) the
//! schema'd form, Flink's `debezium-json` deserializer the schemaless form
//! (scripts/consumers.sh, scripts/consumers/ConsumerCheck.java).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pg::{fresh_database, pg_env, prepare_replication, sql, stop};
use common::*;
use serde_json::{Value, json};

fn consumer(args: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/consumers.sh");
    let classpath = Command::new("bash").arg(script).arg("java").output().unwrap();
    assert!(classpath.status.success(), "{}", String::from_utf8_lossy(&classpath.stderr));
    let classpath = String::from_utf8(classpath.stdout).unwrap();
    let output = Command::new("java").args(["-cp", classpath.trim(), "ConsumerCheck"]).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "the consumer refused Sluice's events:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The table as the database holds it: id → [id, customer, amount, note].
fn database_rows(db: &str) -> BTreeMap<i64, Value> {
    let output = Command::new("psql")
        .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", db, "-AtF", "|", "-c"])
        .arg("SELECT id, customer, coalesce(amount::text, '<null>'), coalesce(note, '<null>') FROM orders ORDER BY id")
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split('|').collect();
            let id: i64 = parts[0].parse().unwrap();
            let nullable = |text: &str| if text == "<null>" { Value::Null } else { json!(text) };
            (id, json!([id, parts[1], nullable(parts[2]), nullable(parts[3])]))
        })
        .collect()
}

#[test]
fn kafka_connect_and_flink_read_the_debezium_envelope_into_the_tables_rows() {
    let db = "consumers_debezium";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10,2), placed timestamptz(3), note text); \
         ALTER TABLE orders REPLICA IDENTITY FULL",
    );
    prepare_replication(db, "orders");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n      - type: file\n        config: {{ id: connect, path: connect.jsonl, format: {{ envelope: debezium, schemas: true }} }}\n      - type: file\n        config: {{ id: flink, path: flink.jsonl, format: {{ envelope: debezium, decimal_handling: string }} }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let workload = [
        "INSERT INTO orders VALUES (1, 'ada', 12.50, '2026-12-02 10:00:00.125+00', 'first'), (2, 'bob', 3.00, now(), NULL), (3, 'cy', NULL, NULL, 'x')",
        "UPDATE orders SET amount = 13.75, note = 'changed' WHERE id = 1",
        "DELETE FROM orders WHERE id = 2",
        "UPDATE orders SET id = 30 WHERE id = 3",
        "INSERT INTO orders VALUES (4, 'dee', -0.01, now(), 'quote \" and \\ slash')",
    ];
    for statement in workload {
        sql(db, statement);
    }
    // 3 inserts, 1 update, 1 delete, a key change (delete + create), 1 insert.
    let events = 8;
    let out = dir.path().join("flink.jsonl");
    wait_until(Duration::from_secs(60), "sluice's events", || {
        line_count(&out) >= events && line_count(&dir.path().join("connect.jsonl")) >= events
    });
    stop(child, dir.path());
    let expected = database_rows(db);

    // Kafka Connect: the schema'd events become Structs; replaying their
    // images gives the table.
    let structs = consumer(&["connect", dir.path().join("connect.jsonl").to_str().unwrap()]);
    assert_eq!(structs.len(), events);
    let mut table = BTreeMap::new();
    for event in &structs {
        assert_eq!(event["schema"], format!("{db}.public.orders.Envelope"));
        if let Some(before) = event["before"].as_object() {
            table.remove(&before["id"].as_i64().unwrap());
        }
        if let Some(after) = event["after"].as_object() {
            let id = after["id"].as_i64().unwrap();
            table.insert(id, json!([id, after["customer"], after["amount"], after["note"]]));
        }
    }
    assert_eq!(table, expected, "the rows Kafka Connect read");

    // Flink: the schemaless events become RowData changes.
    let row_type =
        "id INT NOT NULL, customer STRING NOT NULL, amount DECIMAL(10,2), placed TIMESTAMP_LTZ(3), note STRING";
    let changes = consumer(&["flink", out.to_str().unwrap(), row_type]);
    let mut table = BTreeMap::new();
    for change in &changes {
        let row = change["row"].as_array().unwrap();
        let id = row[0].as_i64().unwrap();
        match change["kind"].as_str().unwrap() {
            "+I" | "+U" => table.insert(id, json!([id, row[1], row[2], row[4]])),
            "-U" | "-D" => table.remove(&id),
            other => panic!("row kind {other}"),
        };
    }
    assert_eq!(table, expected, "the rows Flink read");
    assert!(changes.iter().any(|c| c["kind"] == "+U"), "the update reached Flink as an update");
}
