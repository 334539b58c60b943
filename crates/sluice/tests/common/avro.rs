//! Reading Sluice's Avro topics as a Confluent client does (the
//! `confluent-kafka` Python client and its AvroDeserializer, from
//! scripts/consumers.sh), and talking to the schema registry.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::env;
use super::pg::pg_env;

/// The registry's Confluent-compatible API.
pub fn registry_url() -> String {
    env("SLUICE_TEST_REGISTRY_URL")
}

/// `count` messages of `topic`, each {partition, offset, key, value,
/// key_id, value_id} as the Python consumer decodes them.
pub fn avro_messages(topic: &str, count: usize) -> Vec<Value> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let python = Command::new("bash").arg(scripts.join("consumers.sh")).arg("python").output().unwrap();
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    let python = String::from_utf8(python.stdout).unwrap();
    let output = Command::new(python.trim())
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
    let python = Command::new("bash").arg(scripts.join("consumers.sh")).arg("python").output().unwrap();
    let mut child = Command::new(String::from_utf8(python.stdout).unwrap().trim())
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
