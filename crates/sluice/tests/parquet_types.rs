//! Parquet files with the source's declared column types, read by pyarrow:
//! every column's Arrow type and Parquet logical type, every value compared
//! with what PostgreSQL holds, and a type change that begins a new file.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::avro::pg_config;
use common::pg::{drop_slots, fresh_database, pg_env, sql, stop, wait_for_slot};
use common::*;
use serde_json::{Value, json};

/// Every Parquet file under `folder` as pyarrow reads it: {file, fields,
/// rows}, in file name order.
fn parquet_files(folder: &Path) -> Vec<Value> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let python = Command::new("bash").arg(scripts.join("consumers.sh")).arg("python").output().unwrap();
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    let output = Command::new(String::from_utf8(python.stdout).unwrap().trim())
        .arg(scripts.join("consumers/parquet_read.py"))
        .arg(folder)
        .output()
        .unwrap();
    assert!(output.status.success(), "pyarrow failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn field<'a>(file: &'a Value, name: &str) -> &'a Value {
    file["fields"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("no {name}"))
}

/// The rows as PostgreSQL holds them, in the forms parquet_read.py gives.
fn database_rows(db: &str) -> Vec<Value> {
    let query = "SELECT json_build_object('id', id, 's', s, 'big', big, 'r', r, 'dbl', dbl, 'amount', amount::text, \
        'd', d - date '1970-01-01', 'tm', (extract(epoch from tm) * 1000000)::bigint, \
        'ts3', (extract(epoch from ts3) * 1000000)::bigint, 'ts', (extract(epoch from ts) * 1000000)::bigint, \
        'tstz', (extract(epoch from tstz) * 1000000)::bigint, 'j', j::text, 'mood', mood::text, 'u', u::text, \
        'b', encode(b, 'hex'), 'tags', to_jsonb(tags)) FROM typed ORDER BY id";
    let output = Command::new("psql")
        .args(["-h", &pg_env("SLUICE_TEST_PG_HOST"), "-p", &pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &pg_env("SLUICE_TEST_PG_USER"), "-d", db, "-Atc", query])
        .env("PGPASSWORD", pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn pyarrow_reads_declared_types_and_the_values_postgres_holds_and_a_type_change_begins_a_file() {
    let db = "parquet_types";
    fresh_database(db);
    sql(
        db,
        "CREATE TYPE mood AS ENUM ('calm', 'glad'); \
         CREATE TABLE typed (id int PRIMARY KEY, s smallint, big bigint, r real, dbl double precision, \
         amount numeric(12,2), d date, tm time(6), ts3 timestamp(3), ts timestamp(6), tstz timestamptz, \
         j jsonb, mood mood, u uuid, b bytea, tags text[])",
    );
    let dir = tempfile::tempdir().unwrap();
    let sink = "      - type: s3\n        config: { id: lake, local: lake, max_file_age_secs: 1 }\n";
    let config = write_config(dir.path(), &pg_config(db, sink));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(
        db,
        "INSERT INTO typed VALUES (1, -7, 9007199254740993, 1.5, 2.25, 12.50, '2024-02-29', '13:45:56.123456', \
         '2024-02-29 13:45:56.123', '2024-02-29 13:45:56.123456', '2024-02-29 13:45:56.123456+02', \
         '{\"a\": [1, 2]}', 'glad', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff10', '{x,NULL}'); \
         INSERT INTO typed (id) VALUES (2)",
    );
    let lake = dir.path().join("lake");
    let rows = |files: &[Value]| files.iter().map(|f| f["rows"].as_array().unwrap().len()).sum::<usize>();
    wait_until(Duration::from_secs(60), "two rows in files", || rows(&parquet_files(&lake)) >= 2);
    let before_change = database_rows(db);
    sql(
        db,
        "ALTER TABLE typed ALTER COLUMN amount TYPE numeric(14,4); INSERT INTO typed (id, amount) VALUES (3, 1.2345)",
    );
    let mut files = Vec::new();
    wait_until(Duration::from_secs(60), "three rows in files", || {
        files = parquet_files(&lake);
        rows(&files) >= 3
    });
    stop(child, dir.path());

    assert_eq!(files.len(), 2, "the type change begins a second file: {files:?}");
    let first = &files[0];
    let expected = [
        ("id", "int32", "None"),
        ("s", "int16", "Int(bitWidth=16, isSigned=true)"),
        ("big", "int64", "None"),
        ("r", "float", "None"),
        ("dbl", "double", "None"),
        ("amount", "decimal128(12, 2)", "Decimal(precision=12, scale=2)"),
        ("d", "date32[day]", "Date"),
        ("tm", "time64[us]", "Time(isAdjustedToUTC=false, timeUnit=microseconds)"),
        (
            "ts3",
            "timestamp[ms]",
            "Timestamp(isAdjustedToUTC=false, timeUnit=milliseconds, is_from_converted_type=false, force_set_converted_type=false)",
        ),
        (
            "ts",
            "timestamp[us]",
            "Timestamp(isAdjustedToUTC=false, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)",
        ),
        (
            "tstz",
            "timestamp[us, tz=UTC]",
            "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)",
        ),
        ("j", "extension<arrow.json>", "JSON"),
        ("mood", "string", "String"),
        ("u", "string", "String"),
        ("b", "binary", "None"),
        ("tags", "string", "String"),
    ];
    for (name, arrow, logical) in expected {
        let f = field(first, name);
        assert_eq!(
            (f["type"].as_str(), f["logical"].as_str()),
            (Some(arrow), Some(logical)),
            "column {name} of {}",
            first["fields"]
        );
    }
    let mut read: Vec<Value> = first["rows"].as_array().unwrap().clone();
    for row in &mut read {
        // Arrays are their JSON text in a string column.
        if let Some(tags) = row["tags"].as_str() {
            row["tags"] = serde_json::from_str(tags).unwrap();
        }
        let columns = row.as_object_mut().unwrap();
        columns.retain(|name, _| !name.starts_with("sluice_"));
    }
    assert_eq!(read, before_change, "the values pyarrow read");
    let second = &files[1];
    assert_eq!(field(second, "amount")["type"], "decimal128(14, 4)");
    assert_eq!(second["rows"][0]["amount"], json!("1.2345"));
    drop_slots(db);
}

#[test]
fn mariadb_declared_types_reach_parquet_from_the_schema_history() {
    use common::my::{my_exec, my_rows};
    let db = "parquet_my";
    my_exec(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; USE {db}; \
         CREATE TABLE t (id int PRIMARY KEY, tiny tinyint, amount decimal(12,2), dt datetime(3), ts timestamp(6) NULL, \
         e enum('calm','glad'))"
    ));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{db}.*], start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n      - type: s3\n        config: {{ id: lake, local: lake, max_file_age_secs: 1 }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    my_exec(&format!(
        "INSERT INTO {db}.t VALUES (1, -7, 12.50, '2024-02-29 13:45:56.123', '2024-02-29 13:45:56.123456', 'glad')"
    ));
    let lake = dir.path().join("lake");
    let mut files = Vec::new();
    wait_until(Duration::from_secs(60), "a row in a file", || {
        files = parquet_files(&lake);
        !files.is_empty()
    });
    stop(child, dir.path());
    let file = &files[0];
    for (name, arrow) in [
        ("id", "int32"),
        ("tiny", "int16"),
        ("amount", "decimal128(12, 2)"),
        ("dt", "timestamp[ms]"),
        ("ts", "timestamp[us, tz=UTC]"),
        ("e", "string"),
    ] {
        assert_eq!(field(file, name)["type"], arrow, "column {name} of {}", file["fields"]);
    }
    let query = format!(
        "SELECT JSON_OBJECT('id', id, 'tiny', tiny, 'amount', CAST(amount AS CHAR), \
         'dt', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt), \
         'ts', TIMESTAMPDIFF(MICROSECOND, FROM_UNIXTIME(0), ts), 'e', e) FROM {db}.t"
    );
    let held: Value = serde_json::from_str(&my_rows::<String>(&query)[0]).unwrap();
    let mut row = file["rows"][0].clone();
    row.as_object_mut().unwrap().retain(|name, _| !name.starts_with("sluice_"));
    assert_eq!(row, held, "the values pyarrow read");
}
