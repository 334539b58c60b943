//! Reading Sluice's Avro topics as a Confluent client does (the
//! `confluent-kafka` Python client and its AvroDeserializer, from
//! scripts/consumers.sh), and talking to the schema registry.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::env;
use super::pg::pg_env;

/// The registry's Confluent-compatible API.
pub fn registry_url() -> String {
    env("SLUICE_TEST_REGISTRY_URL")
}

/// The Python of the consumers' virtualenv (created when missing).
fn python() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/consumers.sh");
    let python = Command::new("bash").arg(script).arg("python").output().unwrap();
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    String::from_utf8(python.stdout).unwrap().trim().to_string()
}

/// Every Avro container file under `folder` as fastavro reads it:
/// {file, codec, schema, records} each, in file name order.
pub fn avro_files(folder: &Path) -> Vec<Value> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let output = Command::new(python()).arg(scripts.join("consumers/avro_files.py")).arg(folder).output().unwrap();
    assert!(
        output.status.success(),
        "fastavro failed on {}:\n{}",
        folder.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `count` messages of `topic`, each {partition, offset, key, value,
/// key_id, value_id} as the Python consumer decodes them.
pub fn avro_messages(topic: &str, count: usize) -> Vec<Value> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let output = Command::new(python())
        .arg(scripts.join("consumers/avro_read.py"))
        .args([&env("SLUICE_TEST_KAFKA_BROKERS"), &registry_url(), topic, &count.to_string()])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the confluent-kafka consumer failed on {topic}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Framed datums (a NATS message, a Redis field) decoded by the same
/// deserializer: {value, value_id} each.
pub fn decode_datums(datums: &[Vec<u8>]) -> Vec<Value> {
    use std::io::Write as _;
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let mut child = Command::new(python())
        .arg(scripts.join("consumers/avro_read.py"))
        .args(["decode", &registry_url()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for datum in datums {
        let hex: String = datum.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(stdin, "{hex}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the deserializer failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// One registry call with curl: the status and the JSON answer.
pub fn registry(method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut command = Command::new("curl");
    command.args(["-s", "-w", "\n%{http_code}", "-X", method, &format!("{}{path}", registry_url())]);
    if let Some(body) = body {
        command.args(["-H", "Content-Type: application/vnd.schemaregistry.v1+json", "--data", body]);
    }
    let output = command.output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.trim().parse().unwrap(), serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The schema of registry id `id`, parsed.
pub fn schema_of(id: u64) -> Value {
    let (status, body) = registry("GET", &format!("/schemas/ids/{id}"), None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(body["schema"].as_str().unwrap()).unwrap()
}

/// Sets `subject`'s compatibility level.
pub fn set_compatibility(subject: &str, level: &str) {
    let (status, body) =
        registry("PUT", &format!("/config/{subject}"), Some(&format!("{{\"compatibility\":\"{level}\"}}")));
    assert_eq!(status, 200, "setting {subject}'s level: {body}");
}

/// An unscaled big-endian two's-complement integer in hex with `scale`
/// digits after the point, as decimal text.
pub fn decimal_text(hex: &str, scale: u32) -> String {
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    let mut n: i128 = if bytes.first().is_some_and(|b| b & 0x80 != 0) { -1 } else { 0 };
    for b in bytes {
        n = (n << 8) | i128::from(b);
    }
    let digits = n.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    let sign = if n < 0 { "-" } else { "" };
    if scale == 0 { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") }
}

/// Microseconds since the epoch of an ISO-8601 UTC timestamp
/// (`2024-02-29T11:45:56.123456Z`).
pub fn epoch_micros(text: &str) -> i64 {
    let text = text.strip_suffix('Z').unwrap_or_else(|| panic!("{text} is not in UTC"));
    let (date, time) = text.split_once('T').unwrap();
    let mut date = date.split('-').map(|p| p.parse::<i64>().unwrap());
    let (y, m, d) = (date.next().unwrap(), date.next().unwrap(), date.next().unwrap());
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.split(':').map(|p| p.parse::<i64>().unwrap());
    let seconds = clock.next().unwrap() * 3600 + clock.next().unwrap() * 60 + clock.next().unwrap();
    let micros: i64 = if fraction.is_empty() { 0 } else { format!("{fraction:0<6}")[..6].parse().unwrap() };
    (days * 86_400 + seconds) * 1_000_000 + micros
}

pub fn pg_config(db: &str, sinks: &str) -> String {
    format!(
        "pipelines:\n  - name: pg\n    source:\n      type: postgres\n      config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: verify-full, ca_file: {ca}, status_interval_secs: 1 }}\n    sinks:\n{sinks}",
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
        ca = pg_env("SLUICE_TEST_PG_CA"),
    )
}

pub fn avro_sink(id: &str, topic: &str, prefix: &str, extra: &str) -> String {
    format!(
        "      - type: kafka\n        config: {{ id: {id}, brokers: \"{}\", topic: {topic}, format: {{ envelope: debezium, encoding: avro, topic_prefix: {prefix}, schema_registry: {{ url: \"{}\", timeout_secs: 2 }} }}{extra} }}\n",
        env("SLUICE_TEST_KAFKA_BROKERS"),
        registry_url(),
    )
}

/// The registry ids of `subject`'s versions, oldest first.
pub fn version_ids(subject: &str) -> Vec<u64> {
    let (status, versions) = registry("GET", &format!("/subjects/{subject}/versions"), None);
    assert_eq!(status, 200, "{versions}");
    versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let (_, version) = registry("GET", &format!("/subjects/{subject}/versions/{v}"), None);
            version["id"].as_u64().unwrap()
        })
        .collect()
}

/// A fresh database `db` with the table `create` makes, its topic
/// `<prefix>.public.t` created, and a config reading it into one avro Kafka
/// sink (`extra`: more sink settings): the scratch folder, topic and config.
pub fn avro_pipeline(db: &str, create: &str, extra: &str) -> (tempfile::TempDir, String, std::path::PathBuf) {
    super::pg::fresh_database(db);
    super::pg::sql(db, create);
    let prefix = super::unique("av");
    let topic = format!("{prefix}.public.t");
    super::debezium::create_topics(std::slice::from_ref(&topic));
    let dir = tempfile::tempdir().unwrap();
    let config = super::write_config(dir.path(), &pg_config(db, &avro_sink("avro", &topic, &prefix, extra)));
    (dir, topic, config)
}

pub const ZOO: &str = "CREATE TABLE zoo (id int PRIMARY KEY, s smallint, big bigint, flag boolean, r real, \
     dbl double precision, amount numeric(12,2), n numeric, d date, tm time(6), ts timestamp(6), tstz timestamptz, \
     u uuid, j jsonb, b bytea, tags text[], note text DEFAULT 'new', qty int NOT NULL DEFAULT 7); \
     ALTER TABLE zoo REPLICA IDENTITY FULL";

pub const ZOO_WORKLOAD: &[&str] = &[
    "INSERT INTO zoo VALUES (1, -7, 9007199254740993, true, 1.5, 2.25, 12.50, 3.14159, '2024-02-29', '13:45:56.123456', \
     '2024-02-29 13:45:56.123456', '2024-02-29 13:45:56.123456+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', \
     '{\"a\": [1, 2], \"b\": \"x\"}', '\\x00ff10', '{x,y,NULL}', 'first', 1)",
    "INSERT INTO zoo (id, note, qty) VALUES (2, NULL, 2)",
    "INSERT INTO zoo VALUES (3, 32767, -1, false, -0.25, 1e300, -0.01, 100, '1969-12-31', '00:00:00', \
     '1900-01-01 00:00:00', '2026-12-02 10:00:00+00', '00000000-0000-0000-0000-000000000000', '[]', '\\x', '{}', 'q\"\\\\', 3)",
    "UPDATE zoo SET amount = 13.75, note = 'changed', tags = '{z}' WHERE id = 1",
    "DELETE FROM zoo WHERE id = 2",
];

/// The rows as the database holds them, each column in the form Debezium
/// gives it (days, microseconds, decimal text, hex).
pub fn database_rows(db: &str) -> BTreeMap<i64, Value> {
    let query = "SELECT json_build_object('id', id, 's', s, 'big', big, 'flag', flag, 'r', r, 'dbl', dbl, \
        'amount', amount::text, 'n', n::text, 'd', d - date '1970-01-01', \
        'tm', (extract(epoch from tm) * 1000000)::bigint, 'ts', (extract(epoch from ts) * 1000000)::bigint, \
        'tstz', (extract(epoch from tstz) * 1000000)::bigint, 'u', u::text, 'j', j::text, 'b', encode(b, 'hex'), \
        'tags', to_jsonb(tags), 'note', note, 'qty', qty) FROM zoo ORDER BY id";
    let output = std::process::Command::new("psql")
        .args(["-h", &super::pg::pg_env("SLUICE_TEST_PG_HOST"), "-p", &super::pg::pg_env("SLUICE_TEST_PG_PORT")])
        .args(["-U", &super::pg::pg_env("SLUICE_TEST_PG_USER"), "-d", db, "-Atc", query])
        .env("PGPASSWORD", super::pg::pg_env("SLUICE_TEST_PG_PASSWORD"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            (row["id"].as_i64().unwrap(), row)
        })
        .collect()
}

/// A row image as the Python consumer decoded it, in the database's forms.
pub fn as_database(image: &Value) -> Value {
    let mut row = image.clone();
    row["amount"] = image["amount"].get("decimal").cloned().unwrap_or(Value::Null);
    row["n"] = match image["n"].as_object() {
        Some(n) => json!(decimal_text(n["value"]["hex"].as_str().unwrap(), n["scale"].as_u64().unwrap() as u32)),
        None => Value::Null,
    };
    row["b"] = image["b"].get("hex").cloned().unwrap_or(Value::Null);
    row["tstz"] = image["tstz"].as_str().map_or(Value::Null, |t| json!(epoch_micros(t)));
    row
}

/// The zoo table the change values (Debezium envelopes, in order) leave,
/// each row in the database's forms.
pub fn zoo_after<'a>(values: impl IntoIterator<Item = &'a Value>) -> BTreeMap<i64, Value> {
    let mut table = BTreeMap::new();
    for value in values {
        if let Some(before) = value["before"].as_object() {
            table.remove(&before["id"].as_i64().unwrap());
        }
        if value["after"].is_object() {
            let row = as_database(&value["after"]);
            table.insert(row["id"].as_i64().unwrap(), row);
        }
    }
    table
}
