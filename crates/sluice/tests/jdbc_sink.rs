//! Interop end to end: Debezium's own JDBC sink connector, in Kafka Connect
//! standalone (scripts/debezium.sh connect), reads the Debezium-format
//! topics Sluice writes and replicates the tables into a second PostgreSQL
//! database. After inserts, updates, a primary-key change and deletes, the
//! two databases must hold the same rows.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::debezium::create_topics;
use common::pg::{drop_slots, fresh_database, pg_env, prepare_replication, sql, stop};
use common::*;

const SETUP: &str = "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), active boolean, opened date, touched timestamptz(6), token uuid, note text);
CREATE TABLE entries (account int, line int, amount bigint NOT NULL, PRIMARY KEY (account, line))";

const WORKLOAD: &str = "INSERT INTO accounts SELECT g, 'owner ' || g, g * 10.25, g % 2 = 0, DATE '2026-01-01' + g, TIMESTAMPTZ '2026-12-02 10:00:00.123456+00' + g * INTERVAL '1 minute', md5(g::text)::uuid, NULL FROM generate_series(1, 40) g;
INSERT INTO entries SELECT g % 5, g, g * 100 FROM generate_series(1, 60) g;
UPDATE accounts SET balance = balance + 1, note = 'updated' WHERE id % 3 = 0;
UPDATE accounts SET id = id + 1000 WHERE id IN (7, 8);
DELETE FROM accounts WHERE id % 10 = 5;
DELETE FROM entries WHERE line > 50;
UPDATE entries SET amount = -amount WHERE account = 2";

/// Every row of `table`, ordered by its key, as psql prints them.
fn rows(database: &str, table: &str, order: &str) -> String {
    let output = Command::new("psql")
        .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", database, "-qXAtc"])
        .arg(format!("SET TIME ZONE 'UTC'; SELECT * FROM {table} ORDER BY {order}"))
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn debeziums_jdbc_sink_replicates_sluices_topics_into_another_database() {
    let (source, target) = ("jdbc_source", "jdbc_target");
    let prefix = unique("jdbc");
    fresh_database(source);
    fresh_database(target);
    sql(source, SETUP);
    prepare_replication(source, "accounts, entries");
    sql(source, WORKLOAD);
    create_topics(&[format!("{prefix}.public.accounts"), format!("{prefix}.public.entries")]);

    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {source}, host: 127.0.0.1, port: {port}, database: {source}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n      - type: kafka\n        config: {{ id: kafka, brokers: \"{brokers}\", topic: \"{prefix}.${{table}}\", format: {{ envelope: debezium, schemas: true, topic_prefix: {prefix} }} }}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
        brokers = env("SLUICE_TEST_KAFKA_BROKERS"),
    );
    let config = write_config(dir.path(), &config);
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());

    let worker = dir.path().join("worker.properties");
    std::fs::write(
        &worker,
        format!(
            "bootstrap.servers={brokers}\nkey.converter=org.apache.kafka.connect.json.JsonConverter\nvalue.converter=org.apache.kafka.connect.json.JsonConverter\nkey.converter.schemas.enable=true\nvalue.converter.schemas.enable=true\noffset.storage.file.filename={offsets}\noffset.flush.interval.ms=1000\nlisteners=http://127.0.0.1:{rest}\nplugin.discovery=only_scan\nconsumer.auto.offset.reset=earliest\n",
            brokers = env("SLUICE_TEST_KAFKA_BROKERS"),
            offsets = dir.path().join("connect.offsets").display(),
            rest = free_port(),
        ),
    )
    .unwrap();
    let connector = dir.path().join("jdbc.properties");
    std::fs::write(
        &connector,
        format!(
            "name={prefix}\nconnector.class=io.debezium.connector.jdbc.JdbcSinkConnector\ntasks.max=1\ntopics.regex={prefix}\\\\.public\\\\..*\nconnection.url=jdbc:postgresql://127.0.0.1:{port}/{target}?sslmode=require\nconnection.username={user}\nconnection.password={password}\ninsert.mode=upsert\ndelete.enabled=true\nprimary.key.mode=record_key\nschema.evolution=basic\ncollection.name.format=${{source.table}}\n",
            port = pg_env("SLUICE_TEST_PG_PORT"),
            user = pg_env("SLUICE_TEST_PG_USER"),
            password = pg_env("SLUICE_TEST_PG_PASSWORD"),
        ),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/debezium.sh");
    let log = std::fs::File::create(dir.path().join("connect.log")).unwrap();
    let mut connect = Command::new("bash")
        .arg(script)
        .arg("connect")
        .arg(&worker)
        .arg(&connector)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();

    let tables = [("accounts", "id"), ("entries", "account, line")];
    let same = || tables.iter().all(|(table, order)| rows(target, table, order) == rows(source, table, order));
    let waited = std::panic::catch_unwind(|| wait_until(Duration::from_secs(120), "the target's rows", same));
    connect.kill().unwrap();
    connect.wait().unwrap();
    stop(sluice, dir.path());
    drop_slots(source);
    if waited.is_err() {
        let log = std::fs::read_to_string(dir.path().join("connect.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        for (table, order) in tables {
            eprintln!(
                "{table} in the source:\n{}\nin the target:\n{}",
                rows(source, table, order),
                rows(target, table, order)
            );
        }
        panic!(
            "the target never matched the source; Kafka Connect's log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let accounts = rows(target, "accounts", "id");
    assert_eq!(accounts.lines().count(), 36, "40 accounts, 4 deleted");
    assert!(accounts.contains("1007|owner 7|"), "the key change moved account 7: {accounts}");
    assert!(!accounts.lines().any(|l| l.starts_with("7|")), "the old key of account 7 is gone: {accounts}");
}
