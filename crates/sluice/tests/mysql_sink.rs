//! Database sinks across servers: PostgreSQL into MariaDB (the `mysql`
//! sink) and MariaDB into PostgreSQL (the `postgres` sink). Both sides are
//! read as JSON by their own servers (`to_jsonb`, `JSON_OBJECT`); the
//! comparison only evens out how the two write the same value (`true` and
//! `1`, `T` and a space in a timestamp, trailing zeros).

mod common;

use std::time::Duration;

use common::my::{my_exec, my_rows, my_sql};
use common::pg::{drop_slots, fresh_database, pg_env, prepare_replication, sql, stop};
use common::pgsink::{sink, table_json};
use common::*;
use serde_json::Value;

/// One JSON value in a form both servers' renderings of it share.
fn even(value: &Value) -> Value {
    match value {
        Value::Bool(b) => Value::String(u8::from(*b).to_string()),
        Value::Number(n) => Value::String(number(&n.to_string())),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(inner @ (Value::Object(_) | Value::Array(_))) => even(&inner),
            _ if s.parse::<f64>().is_ok() && !s.contains('-') => Value::String(number(s)),
            // MySQL's char(n) drops the padding PostgreSQL's keeps.
            _ => Value::String(timestamp(s.trim_end_matches(' '))),
        },
        Value::Array(items) => Value::Array(items.iter().map(even).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), even(v))).collect()),
        Value::Null => Value::Null,
    }
}

/// `12.50` and `12.5`, `1e300` and its digits: the same number. Large
/// doubles compare to 15 digits: serde_json's default float parsing is
/// not exact in the last bit.
fn number(text: &str) -> String {
    match text.parse::<f64>() {
        Ok(f) if f.abs() >= 1e15 => format!("{f:.14e}"),
        _ if text.contains('.') && !text.contains('e') => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        _ => text.to_string(),
    }
}

/// `2024-02-29T13:45:56.100000` and `2024-02-29 13:45:56.1`.
fn timestamp(text: &str) -> String {
    let is_time = text.len() >= 8 && text.as_bytes().get(4) == Some(&b'-') && text.as_bytes().get(10) == Some(&b'T');
    let text = if is_time { text.replacen('T', " ", 1) } else { text.to_string() };
    let text = text.strip_suffix("+00:00").unwrap_or(&text).to_string();
    match text.rsplit_once('.') {
        Some((head, fraction)) if fraction.bytes().all(|b| b.is_ascii_digit()) && head.contains(':') => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() { head.to_string() } else { format!("{head}.{fraction}") }
        }
        _ => text,
    }
}

fn evened(lines: &[String]) -> Vec<Value> {
    lines.iter().map(|l| even(&serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))).collect()
}

const PG_TABLE: &str = "CREATE TYPE tone AS ENUM ('low', 'high');
CREATE TABLE mixed (id int PRIMARY KEY, s smallint, big bigint, flag boolean, d double precision, amount numeric(12,2),
  code char(3), name varchar(20), note text, raw bytea, doc jsonb, token uuid, born date, at_time time(3),
  seen timestamp(3), stamped timestamptz, level tone, ints int[])";

const PG_WORKLOAD: &str = "INSERT INTO mixed SELECT g, g - 100, g * 9007199254740, g % 2 = 0, 1e300 / g, g * 10.25,
  'c' || g % 10, 'it''s ' || g, E'line\\nbreak \\\\ ' || g, decode('00ff' || lpad(to_hex(g), 4, '0'), 'hex'),
  jsonb_build_object('k', g, 'list', jsonb_build_array(1, 'two')), md5(g::text)::uuid, DATE '2024-02-29' + g,
  TIME '13:45:56.123' + g * INTERVAL '1 second', TIMESTAMP '1999-12-31 23:59:59.999' + g * INTERVAL '1 day',
  TIMESTAMPTZ '2026-12-02 10:00:00.123456+00' + g * INTERVAL '1 hour', CASE WHEN g % 2 = 0 THEN 'low' ELSE 'high' END::tone,
  ARRAY[g, -g] FROM generate_series(1, 25) g;
UPDATE mixed SET amount = amount + 1, note = 'updated' WHERE id % 3 = 0;
UPDATE mixed SET id = id + 1000 WHERE id = 7;
DELETE FROM mixed WHERE id % 10 = 5";

fn pg_rows(database: &str) -> Vec<String> {
    let text = table_json(
        database,
        "(SELECT id, s, big, flag, d, amount, code, name, note, encode(raw, 'hex') AS raw, doc, token, born, at_time, seen, stamped AT TIME ZONE 'UTC' AS stamped, level, ints FROM mixed)",
        "id",
    );
    text.lines().map(str::to_string).collect()
}

fn my_json(database: &str) -> Vec<String> {
    my_rows::<String>(&format!(
        "SELECT JSON_OBJECT('id', id, 's', s, 'big', big, 'flag', flag, 'd', d, 'amount', amount, 'code', code, 'name', name, \
         'note', note, 'raw', LOWER(HEX(raw)), 'doc', doc, 'token', token, 'born', born, 'at_time', at_time, 'seen', seen, \
         'stamped', stamped, 'level', level, 'ints', ints) FROM {database}.mixed ORDER BY id"
    ))
}

fn my_sink(id: &str, database: &str) -> String {
    format!(
        "{{ id: {id}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", schema: {database} }}",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    )
}

/// A pipeline from PostgreSQL database `source` into MariaDB database `target`.
fn pg_into_mariadb(source: &str, target: &str) -> String {
    format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {source}, host: 127.0.0.1, port: {port}, database: {source}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", status_interval_secs: 1 }}\n    sinks:\n      - type: mysql\n        config: {sink}\n",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        sink = my_sink("mariadb", target),
    )
}

#[test]
fn postgres_into_mariadb_mirrors_the_source_table() {
    let (source, target) = ("mysink_pg_src", "mysink_pg_dst");
    fresh_database(source);
    my_exec(&format!("DROP DATABASE IF EXISTS {target}"));
    sql(source, PG_TABLE);
    prepare_replication(source, "mixed");
    sql(source, PG_WORKLOAD);

    let dir = tempfile::tempdir().unwrap();
    let config = pg_into_mariadb(source, target);
    let config = write_config(dir.path(), &config);
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let expected = evened(&pg_rows(source));
    let exists = || {
        my_sql::<u64>(&format!("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{target}'"))
            == Some(1)
    };
    let same = || exists() && evened(&my_json(target)) == expected;
    let waited = std::panic::catch_unwind(|| wait_until(Duration::from_secs(60), "MariaDB's rows", same));
    stop(sluice, dir.path());
    drop_slots(source);
    if waited.is_err() {
        let got = if exists() { evened(&my_json(target)) } else { Vec::new() };
        for (a, b) in expected.iter().zip(&got).filter(|(a, b)| a != b).take(2) {
            eprintln!("source {a}\ntarget {b}");
        }
        panic!("MariaDB never matched the source ({} rows, {} in the target)", expected.len(), got.len());
    }
    let held: Option<String> = my_sql("SELECT position FROM sluice.sluice_checkpoints WHERE sink_id = 'mariadb'");
    assert!(held.is_some(), "the sink keeps its position in the target");
}

#[test]
fn mariadb_into_postgres_mirrors_the_source_table() {
    let (source, target) = ("pgsink_my_src", "pgsink_my_dst");
    fresh_database(target);
    my_exec(&format!(
        "DROP DATABASE IF EXISTS {source}; CREATE DATABASE {source}; CREATE TABLE {source}.items (id bigint PRIMARY KEY, \
         qty int, price decimal(10,3), flag tinyint(1), label varchar(30), body text, kind enum('a','b'), at datetime(6), \
         day date, raw varbinary(8), doc json)"
    ));
    let (file, offset): (String, u64) = common::my::binlog_head();
    my_exec(&format!(
        "INSERT INTO {source}.items VALUES (1, 5, 12.5, 1, 'it''s', 'multi\\nline', 'a', '2026-12-03 10:11:12.123456', '2024-02-29', X'00ff', '{{\"k\": [1, 2]}}'),
         (2, NULL, NULL, 0, NULL, NULL, 'b', '1999-01-01 00:00:00', NULL, NULL, NULL), (3, 7, 0.001, 1, 'x', 'y', 'a', NULL, '2000-01-01', X'', '[]');
         UPDATE {source}.items SET qty = qty + 1, label = 'changed' WHERE id = 1; DELETE FROM {source}.items WHERE id = 3"
    ));
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {source}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{source}.*], start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n      - type: postgres\n        config: {sink}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
        sink = sink("replica", target, ", schema: public"),
    );
    let config = write_config(dir.path(), &config);
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let expected = evened(&my_rows::<String>(&format!(
        "SELECT JSON_OBJECT('id', id, 'qty', qty, 'price', price, 'flag', flag, 'label', label, 'body', body, 'kind', kind, \
         'at', at, 'day', day, 'raw', LOWER(HEX(raw)), 'doc', doc) FROM {source}.items ORDER BY id"
    )));
    let target_rows = || {
        let text = table_json(
            target,
            "(SELECT id, qty, price, flag, label, body, kind, at, day, encode(raw, 'hex') AS raw, doc FROM items)",
            "id",
        );
        evened(&text.lines().map(str::to_string).collect::<Vec<_>>())
    };
    let waited = std::panic::catch_unwind(|| {
        wait_until(Duration::from_secs(60), "PostgreSQL's rows", || target_rows() == expected)
    });
    stop(sluice, dir.path());
    if waited.is_err() {
        panic!("PostgreSQL never matched MariaDB:\nsource {expected:?}\ntarget {:?}", target_rows());
    }
}

#[test]
fn a_row_mariadb_refuses_goes_to_the_dead_letter_queue_and_the_rest_lands() {
    let (source, target) = ("mysink_bad_src", "mysink_bad_dst");
    fresh_database(source);
    my_exec(&format!(
        "DROP DATABASE IF EXISTS {target}; CREATE DATABASE {target}; \
         CREATE TABLE {target}.items (id int PRIMARY KEY, qty int, CONSTRAINT qty_small CHECK (qty < 100))"
    ));
    sql(source, "CREATE TABLE items (id int PRIMARY KEY, qty int)");
    prepare_replication(source, "items");
    sql(source, "INSERT INTO items VALUES (1, 5), (2, 500), (3, 7); UPDATE items SET qty = qty + 1 WHERE id = 3");

    let dir = tempfile::tempdir().unwrap();
    let config = pg_into_mariadb(source, target);
    let config = write_config(dir.path(), &config);
    let config = config.to_str().unwrap();
    let sluice = spawn(&["run", "-c", config], dir.path());
    let rows = || my_rows::<(i32, i32)>(&format!("SELECT id, qty FROM {target}.items ORDER BY id"));
    wait_until(Duration::from_secs(60), "the rows MariaDB takes", || rows() == vec![(1, 5), (3, 8)]);
    stop(sluice, dir.path());
    drop_slots(source);
    let shown = the_dead_letter(config, dir.path());
    assert!(shown.contains("qty_small"), "the server's error names the constraint: {shown}");
    assert!(shown.contains("\"qty\": 500"), "the refused event is kept whole: {shown}");
}
