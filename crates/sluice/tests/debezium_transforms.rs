//! `unwrap` and `outbox` against Debezium's own single message transforms
//! (`ExtractNewRecordState`, the outbox `EventRouter`) run by Debezium
//! embedded 3.6.1 on the same changes: Sluice's Kafka records must equal
//! Debezium's key for key, value for value (schemas included), tombstone
//! for tombstone, with the same headers.

mod common;

use std::time::Duration;

use common::debezium::{compare_topics_with, create_topics, debezium_records, kafka_topic, pg_properties};
use common::pg::{drop_slots, fresh_database, pg_env, sql, stop, wait_for_slot};
use common::*;

const SETUP: &str = "CREATE TABLE items (id int PRIMARY KEY, name varchar(40) NOT NULL, price numeric(10,2), \
    tags text[], seen timestamptz, note text DEFAULT 'none');
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, \
    type varchar(255) NOT NULL, payload jsonb)";

/// Inserts, an update, a key change, a delete under the default replica
/// identity (a key-only old row), a truncate; outbox inserts of two
/// aggregates, an update and the usual cleanup delete.
const WORKLOAD: &str = "INSERT INTO items VALUES (1, 'pen', 1.50, '{blue,red}', '2026-01-02 03:04:05.123456+00', 'a'), \
    (2, 'ink', NULL, NULL, NULL, DEFAULT), (3, 'pad', 4.00, '{}', '2026-06-01 00:00:00+00', 'c');
UPDATE items SET name = 'quill', price = 2.25 WHERE id = 1;
UPDATE items SET id = 20 WHERE id = 2;
DELETE FROM items WHERE id = 3;
TRUNCATE items;
INSERT INTO outbox VALUES ('6f1c0e3a-0000-4000-8000-000000000001', 'Order', 'order-17', 'OrderCreated', '{\"total\": 12, \"lines\": [1, 2]}');
INSERT INTO outbox VALUES ('6f1c0e3a-0000-4000-8000-000000000002', 'Customer', 'c-9', 'CustomerMoved', '{\"city\": \"Oslo\"}'), \
    ('6f1c0e3a-0000-4000-8000-000000000003', 'Order', 'order-18', 'OrderCreated', NULL);
UPDATE outbox SET type = 'Changed' WHERE aggregateid = 'c-9';
DELETE FROM outbox";

fn statements(script: &str) -> impl Iterator<Item = &str> {
    script.split(";\n").map(str::trim).filter(|s| !s.is_empty())
}

/// A Kafka sink on `<prefix>.${table}` in Debezium's envelope, with schemas,
/// and `transforms`.
fn kafka_sink(id: &str, prefix: &str, transforms: &str) -> String {
    format!(
        "      - type: kafka\n        config: {{ id: {id}, brokers: \"{brokers}\", topic: \"{prefix}.${{table}}\", format: {{ envelope: debezium, schemas: true, topic_prefix: {prefix}, truncate: include }}, transforms: [{transforms}] }}\n",
        brokers = env("SLUICE_TEST_KAFKA_BROKERS"),
    )
}

/// Debezium's records for its own slot `<slot>` on `db` with `extra`
/// engine properties (its transforms).
fn debezium(dir: &std::path::Path, db: &str, prefix: &str, slot: &str, extra: &str) -> Vec<serde_json::Value> {
    let dir = dir.join(slot);
    std::fs::create_dir_all(&dir).unwrap();
    let extra = format!("snapshot.mode=no_data\nskipped.operations=none\nslot.name={slot}\n{extra}");
    debezium_records(&dir, "pg", &pg_properties(&dir, db, prefix, &extra), &[])
}

/// Keeps Debezium's records of `topics` only, and waits until Sluice has
/// written as many to each.
fn keep_and_wait(theirs: &mut Vec<serde_json::Value>, topics: &[String]) {
    theirs.retain(|r| topics.iter().any(|t| r["topic"] == t.as_str()));
    for topic in topics {
        let expected = theirs.iter().filter(|r| r["topic"] == topic.as_str()).count();
        assert!(expected > 0, "Debezium wrote nothing to {topic}");
        wait_until(Duration::from_secs(60), &format!("sluice's records on {topic}"), || {
            kafka_topic(topic).len() >= expected
        });
    }
}

#[test]
fn unwrap_and_outbox_match_debeziums_transforms() {
    let db = "debezium_transforms";
    let (rewrite, tombstone, outbox) = (unique("unw"), unique("unt"), unique("obx"));
    fresh_database(db);
    sql(db, SETUP);
    let dir = tempfile::tempdir().unwrap();
    let sinks = kafka_sink(
        "rewrite",
        &rewrite,
        "{ type: unwrap, delete_handling: rewrite, add_fields: [op, table, lsn, source.ts_ms, 'db:database'] }",
    ) + &kafka_sink("tombstone", &tombstone, "{ type: unwrap }")
        + &kafka_sink(
            "outbox",
            &outbox,
            "{ type: outbox, tables: [public.outbox], to: '${routedByValue}', headers: [{ column: type, name: eventType }] }",
        );
    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n{sinks}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    );
    let config = write_config(dir.path(), &config);
    let topics: Vec<String> = [&rewrite, &tombstone]
        .iter()
        .map(|p| format!("{p}.public.items"))
        .chain(["Order", "Customer"].map(|a| format!("{outbox}.{a}")))
        .collect();
    create_topics(&topics);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(db, &format!("CREATE PUBLICATION debezium_{db} FOR ALL TABLES"));
    for slot in ["dbz_rewrite", "dbz_tombstone", "dbz_outbox"] {
        sql(db, &format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"));
    }
    for statement in statements(WORKLOAD) {
        sql(db, statement);
    }

    let unwrap_rewrite = "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n\
        transforms.unwrap.delete.tombstone.handling.mode=rewrite\n\
        transforms.unwrap.add.fields=op,table,lsn,source.ts_ms,db:database\n";
    let unwrap_tombstone = "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n\
        transforms.unwrap.delete.tombstone.handling.mode=tombstone\n";
    let router = format!(
        "transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
         transforms.outbox.route.topic.replacement={outbox}.${{routedByValue}}\n\
         transforms.outbox.table.fields.additional.placement=type:header:eventType\n\
         table.include.list=public.outbox\n"
    );
    let mut theirs = debezium(dir.path(), db, &rewrite, "dbz_rewrite", unwrap_rewrite);
    theirs.extend(debezium(dir.path(), db, &tombstone, "dbz_tombstone", unwrap_tombstone));
    theirs.extend(debezium(dir.path(), db, &outbox, "dbz_outbox", &router));
    // Debezium's records of the tables each sink's transform does not take
    // (the outbox under unwrap, the items under the router) are not compared.
    keep_and_wait(&mut theirs, &topics);
    stop(child, dir.path());
    compare_topics_with(
        &theirs,
        |_| false,
        |name| name.starts_with("__debezium.") || name == "id" || name == "eventType",
    );
    drop_slots(db);
}

const MY_SETUP: &str = "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, price DECIMAL(10,2), \
    note VARCHAR(20) DEFAULT 'none');
CREATE TABLE outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NOT NULL, \
    type VARCHAR(255) NOT NULL, payload TEXT)";

const MY_WORKLOAD: &str = "INSERT INTO items VALUES (1, 'pen', 1.50, 'a'), (2, 'ink', NULL, DEFAULT), (3, 'pad', 4.00, 'c');
UPDATE items SET name = 'quill', price = 2.25 WHERE id = 1;
UPDATE items SET id = 20 WHERE id = 2;
DELETE FROM items WHERE id = 3;
INSERT INTO outbox VALUES ('6f1c0e3a-0000-4000-8000-000000000001', 'Order', 'order-17', 'OrderCreated', '{\"total\": 12}');
INSERT INTO outbox VALUES ('6f1c0e3a-0000-4000-8000-000000000002', 'Customer', 'c-9', 'CustomerMoved', '{\"city\": \"Oslo\"}');
UPDATE outbox SET type = 'Changed' WHERE aggregateid = 'c-9';
DELETE FROM outbox";

/// The same on MariaDB, against Debezium's MariaDB connector (3.5.0) with
/// the same transforms: `unwrap` with the binlog's source fields, and the
/// outbox router.
#[test]
fn mariadb_unwrap_and_outbox_match_debeziums_transforms() {
    use common::my::{my_exec, my_sql};
    let db = "debezium_transforms_my";
    let (rewrite, outbox) = (unique("unwmy"), unique("obxmy"));
    my_exec(&format!("DROP DATABASE IF EXISTS {db}"));
    my_exec(&format!("CREATE DATABASE {db}"));
    my_exec(&format!("USE {db}; {MY_SETUP}"));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let gtid: String = my_sql("SELECT @@gtid_binlog_pos").unwrap();
    my_exec(&format!("USE {db}; {MY_WORKLOAD}"));
    let dir = tempfile::tempdir().unwrap();
    let sinks = kafka_sink(
        "rewrite",
        &rewrite,
        "{ type: unwrap, delete_handling: rewrite, add_fields: [op, table, file, pos, row, source.ts_ms] }",
    ) + &kafka_sink(
        "outbox",
        &outbox,
        &format!("{{ type: outbox, tables: ['{db}.outbox'], to: '${{routedByValue}}' }}"),
    );
    let config = format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{db}.*], start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n{sinks}",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    );
    let config = write_config(dir.path(), &config);
    let topics: Vec<String> = std::iter::once(format!("{rewrite}.{db}.items"))
        .chain(["Order", "Customer"].map(|a| format!("{outbox}.{a}")))
        .collect();
    create_topics(&topics);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let seed = format!(r#"{{"file":"{file}","pos":{offset},"gtids":"{gtid}"}}"#);
    let run = |name: &str, prefix: &str, extra: &str| {
        let dir = dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let properties = format!(
            "name={name}\nconnector.class=io.debezium.connector.mariadb.MariaDbConnector\n\
             offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore\n\
             offset.storage.file.filename={offsets}\noffset.flush.interval.ms=0\n\
             database.hostname=127.0.0.1\ndatabase.port={port}\ndatabase.user={user}\ndatabase.password={password}\n\
             database.server.id=54322\ndatabase.ssl.mode=disable\ndatabase.include.list={db}\ntopic.prefix={prefix}\n\
             schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory\n\
             schema.history.internal.file.filename={history}\ninclude.schema.changes=false\nsnapshot.mode=recovery\n\
             skipped.operations=none\n{extra}",
            offsets = dir.join("debezium.offsets").display(),
            history = dir.join("debezium.history").display(),
            port = env("SLUICE_TEST_MY_PORT"),
            user = env("SLUICE_TEST_MY_USER"),
            password = env("SLUICE_TEST_MY_PASSWORD"),
        );
        debezium_records(&dir, "mariadb", &properties, &["--seed-offset", &seed])
    };
    let mut theirs = run(
        "rewrite",
        &rewrite,
        "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n\
         transforms.unwrap.delete.tombstone.handling.mode=rewrite\n\
         transforms.unwrap.add.fields=op,table,file,pos,row,source.ts_ms\n",
    );
    theirs.extend(run(
        "outbox",
        &outbox,
        &format!(
            "transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
             transforms.outbox.route.topic.replacement={outbox}.${{routedByValue}}\ntable.include.list={db}.outbox\n"
        ),
    ));
    keep_and_wait(&mut theirs, &topics);
    stop(child, dir.path());
    compare_topics_with(&theirs, |_| false, |name| name.starts_with("__debezium.") || name == "id");
    my_exec(&format!("DROP DATABASE {db}"));
}
