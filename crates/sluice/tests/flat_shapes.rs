//! `unwrap` and `outbox` in Sluice's own envelope and in a database sink,
//! on real PostgreSQL events (Debezium's envelope is compared with
//! Debezium itself in `debezium_transforms.rs`): the file sink holds the
//! flat rows and the outbox payloads, a Kafka sink a true tombstone for a
//! delete, and a postgres sink keeps a rewritten delete as a row marked
//! deleted.

mod common;

use std::time::Duration;

use common::debezium::kafka_topic_with;
use common::pg::{drop_slots, fresh_database, sql, stop, wait_for_slot};
use common::*;
use serde_json::{Value, json};

fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn flat_shapes_reach_the_native_sinks_and_a_database_target() {
    let (db, target) = ("flat_shapes", "flat_shapes_t");
    fresh_database(db);
    fresh_database(target);
    sql(
        db,
        "CREATE TABLE items (id int PRIMARY KEY, name text); \
         CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, \
         type text NOT NULL, payload jsonb)",
    );
    let dir = tempfile::tempdir().unwrap();
    let (rows, messages) = (dir.path().join("rows.jsonl"), dir.path().join("messages.jsonl"));
    let topic = unique("flat");
    common::debezium::create_topics(std::slice::from_ref(&topic));
    let unwrap = "{ type: unwrap, tables: [public.items], delete_handling: rewrite, add_fields: [op] }";
    let sinks = [
        format!(
            "      - type: file\n        config: {{ id: rows, path: {}, transforms: [{unwrap}] }}\n",
            rows.display()
        ),
        format!(
            "      - type: file\n        config: {{ id: messages, path: {}, transforms: [{{ type: outbox, tables: [public.outbox] }}, {{ type: filter, action: keep, tables: [public.outbox] }}] }}\n",
            messages.display()
        ),
        format!(
            "      - type: kafka\n        config: {{ id: kafka, brokers: \"{}\", topic: {topic}, transforms: [{{ type: unwrap, tables: [public.items] }}, {{ type: filter, action: keep, tables: [public.items] }}] }}\n",
            env("SLUICE_TEST_KAFKA_BROKERS")
        ),
        format!(
            "      - type: postgres\n        config: {}\n",
            common::pgsink::sink("target", target, &format!(", transforms: [{unwrap}]"))
        ),
    ];
    let config = common::pgsink::pipeline(db, &[]) + &sinks.concat();
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    for statement in [
        "INSERT INTO items VALUES (1, 'pen'), (2, 'ink')",
        "UPDATE items SET name = 'quill' WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        "INSERT INTO outbox VALUES ('6f1c0e3a-0000-4000-8000-000000000001', 'Order', 'o-1', 'Created', '{\"total\": 12}')",
        "DELETE FROM outbox",
    ] {
        sql(db, statement);
    }
    wait_until(Duration::from_secs(60), "the flat rows", || lines(&rows).len() >= 4);
    wait_until(Duration::from_secs(60), "the outbox message", || !lines(&messages).is_empty());
    wait_until(Duration::from_secs(60), "the Kafka records", || kafka_topic_with(&topic, |_| false).len() >= 4);
    let target_rows = || common::pgsink::table_json(target, "public.items", "id");
    wait_until(Duration::from_secs(60), "the soft delete in the target", || target_rows().contains("\"true\""));
    stop(child, dir.path());

    // The outbox rows went to the rows sink unchanged: only items count.
    let flat: Vec<Value> = lines(&rows).into_iter().filter(|l| l.get("__op").is_some()).collect();
    assert_eq!(
        flat,
        [
            json!({"id": 1, "name": "pen", "__deleted": "false", "__op": "c"}),
            json!({"id": 2, "name": "ink", "__deleted": "false", "__op": "c"}),
            json!({"id": 1, "name": "quill", "__deleted": "false", "__op": "u"}),
            // The default replica identity sends a delete's key only.
            json!({"id": 2, "__deleted": "true", "__op": "d"}),
        ]
    );
    assert_eq!(lines(&messages), [json!({"total": 12})], "the payload alone; the cleanup delete sends nothing");

    let records = kafka_topic_with(&topic, |_| false);
    let values: Vec<&Value> = records.iter().map(|(_, value, _)| value).collect();
    assert_eq!(
        values,
        [
            &json!({"id": 1, "name": "pen"}),
            &json!({"id": 2, "name": "ink"}),
            &json!({"id": 1, "name": "quill"}),
            &Value::Null
        ]
    );
    assert_eq!(records[3].0, json!({"id": 2}), "the tombstone keeps the deleted row's key");

    let held: Vec<Value> = target_rows().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        held,
        [
            json!({"id": 1, "name": "quill", "__op": "u", "__deleted": "false"}),
            json!({"id": 2, "name": "ink", "__op": "d", "__deleted": "true"}),
        ],
        "the deleted row stays, marked"
    );
    drop_slots(db);
}
