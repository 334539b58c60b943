//! What each sink holds, as changes in the order the sink holds them.

use std::path::Path;
use std::time::Duration;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::Env;
use crate::workload::{Change, TABLES, expected_tag};

/// The change an event envelope describes. A MariaDB row's `tag` must be
/// the bytes the server holds for its change number (base64 in JSON), and
/// `note` must be masked (a hex SHA-256) and marked `v:` by the pipelines'
/// script; a wrong one marks the change
/// with op `!`, so it counts as a change no transaction made, and the
/// comparison fails. So does any event of `tx_log`, which the pipelines'
/// filter drops.
pub fn change_of(event: &serde_json::Value) -> Option<Change> {
    let op = event["op"].as_str()?.chars().next()?;
    let table = event["table"].as_str()?.rsplit('.').next()?.to_string();
    let row = if op == 'd' { &event["before"] } else { &event["after"] };
    if table == "tx_log" {
        return Some(Change { table, op: '!', id: row["tx"].as_i64().unwrap_or(-1), change: -1 });
    }
    let change = row["change_no"].as_i64()?;
    let tag_ok = match row.get("tag") {
        None => true,
        Some(tag) => tag.as_str().and_then(base64_bytes).is_some_and(|b| b == expected_tag(change)),
    };
    let masked = row["note"].as_str().is_some_and(is_masked);
    Some(Change { table, op: if tag_ok && masked { op } else { '!' }, id: row["id"].as_i64()?, change })
}

/// A hex SHA-256, as the `mask` step writes it, marked `v:` as the `vrl`
/// step after it writes it.
fn is_masked(note: &str) -> bool {
    let Some(hash) = note.strip_prefix("v:") else { return false };
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Standard base64, as the JSON envelope writes bytes.
fn base64_bytes(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn parse(bytes: &[u8]) -> Option<Change> {
    change_of(&serde_json::from_slice(bytes).ok()?)
}

pub fn file(path: &Path) -> Vec<Change> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| parse(l.as_bytes())).collect()
}

/// Every record of the topics, partition after partition, at
/// `isolation` (`read_committed` or `read_uncommitted`).
pub fn kafka(brokers: &str, topics: &[String], isolation: &str) -> anyhow::Result<Vec<Change>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "sluice-torture")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment.add_partition_offset(topic, p.id(), Offset::Beginning)?;
            }
        }
    }
    consumer.assign(&assignment)?;
    let mut by_partition: std::collections::BTreeMap<(String, i32), Vec<Change>> = Default::default();
    let mut idle = 0;
    while idle < 20 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                idle = 0;
                if let Some(change) = message.payload().and_then(parse) {
                    by_partition.entry((message.topic().to_string(), message.partition())).or_default().push(change);
                }
            }
            Some(Err(e)) => anyhow::bail!("reading kafka: {e}"),
            None => idle += 1,
        }
    }
    Ok(by_partition.into_values().flatten().collect())
}

/// What the changelog-mode database sink keeps in `schema` (a schema of
/// `db`'s PostgreSQL database, or a MariaDB database): one row per change.
pub async fn changelog(db: &crate::db::Db, schema: &str) -> anyhow::Result<Vec<Change>> {
    let quote = |name: &str| match db.kind() {
        crate::db::Kind::Postgres => format!("\"{name}\""),
        crate::db::Kind::MariaDb => format!("`{name}`"),
    };
    let exists = match db.kind() {
        crate::db::Kind::Postgres => "SELECT table_name FROM information_schema.tables WHERE table_schema = ",
        crate::db::Kind::MariaDb => "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ",
    };
    let present = db.rows(&format!("{exists}'{schema}'")).await?;
    let mut changes = Vec::new();
    if present.iter().any(|r| r.first().and_then(|c| c.as_deref()) == Some("tx_log")) {
        // The pipelines' filter drops every change of this table.
        changes.push(Change { table: "tx_log".into(), op: '!', id: -1, change: -1 });
    }
    for table in TABLES.iter().filter(|t| present.iter().any(|r| r.first().and_then(|c| c.as_deref()) == Some(**t))) {
        let sql = format!(
            "SELECT op, source_table, {}, {} FROM {}.{}",
            quote("before"),
            quote("after"),
            quote(schema),
            quote(table)
        );
        for row in db.rows(&sql).await? {
            let text = |i: usize| row.get(i).cloned().flatten();
            let json =
                |i: usize| text(i).and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(serde_json::Value::Null);
            let event = serde_json::json!({ "op": text(0), "table": text(1), "before": json(2), "after": json(3) });
            changes.extend(change_of(&event));
        }
    }
    Ok(changes)
}

/// XRANGE's answer: entry id and field/value pairs.
type StreamEntries = Vec<(String, Vec<(String, Vec<u8>)>)>;

pub async fn redis(env: &Env, streams: &[String]) -> anyhow::Result<Vec<Change>> {
    let client = redis::Client::open(env.get("SLUICE_TEST_REDIS_URL")?)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut all = Vec::new();
    for stream in streams {
        let entries: StreamEntries = redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query_async(&mut conn).await?;
        for (_, fields) in entries {
            if let Some((_, payload)) = fields.iter().find(|(k, _)| k == "payload") {
                all.extend(parse(payload));
            }
        }
    }
    Ok(all)
}

/// The whole stream through one ordered consumer: a pull per batch of
/// messages, where a get per sequence took minutes for a long run.
pub async fn nats(env: &Env, stream: &str) -> anyhow::Result<Vec<Change>> {
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    use futures_util::StreamExt;

    let client = async_nats::connect(env.get("SLUICE_TEST_NATS_URL")?).await?;
    let context = async_nats::jetstream::new(client);
    let Ok(mut handle) = context.get_stream(stream).await else { return Ok(Vec::new()) };
    let last = handle.info().await?.state.last_sequence;
    let mut all = Vec::new();
    if last == 0 {
        return Ok(all);
    }
    let consumer = handle.create_consumer(OrderedConfig::default()).await?;
    let mut messages = consumer.messages().await?;
    while let Some(message) = tokio::time::timeout(Duration::from_secs(30), messages.next())
        .await
        .map_err(|_| anyhow::anyhow!("reading NATS stream {stream}: no message for 30 s"))?
    {
        let message = message?;
        all.extend(parse(&message.payload));
        let sequence = message.info().map_err(|e| anyhow::anyhow!("{e}"))?.stream_sequence;
        if sequence >= last {
            break;
        }
    }
    Ok(all)
}

/// The events of one source the receiver took at `path`, in the order it
/// took them.
pub fn http(receiver: &crate::receiver::Receiver, source_id: &str, path: &str) -> Vec<Change> {
    receiver
        .delivered()
        .iter()
        .filter(|r| r.path == path)
        .flat_map(|r| r.events())
        .filter(|e| e["source"].as_str() == Some(source_id))
        .filter_map(|e| change_of(&e))
        .collect()
}

/// Every Parquet file under `prefix`, in key order (per partition, that
/// is stream order).
pub async fn s3(env: &Env, prefix: &str) -> anyhow::Result<Vec<Change>> {
    let store = AmazonS3Builder::new()
        .with_bucket_name(env.get("SLUICE_TEST_S3_BUCKET")?)
        .with_endpoint(env.get("SLUICE_TEST_S3_ENDPOINT")?)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(env.get("SLUICE_TEST_S3_ACCESS_KEY")?)
        .with_secret_access_key(env.get("SLUICE_TEST_S3_SECRET_KEY")?)
        .build()?;
    let mut pending = vec![Key::parse(prefix)?];
    let mut keys = Vec::new();
    while let Some(dir) = pending.pop() {
        let listing = store.list_with_delimiter(Some(&dir)).await?;
        pending.extend(listing.common_prefixes);
        keys.extend(listing.objects.into_iter().map(|o| o.location));
    }
    keys.sort();
    let mut all = Vec::new();
    for key in keys.iter().filter(|k| k.as_ref().ends_with(".parquet")) {
        if key.as_ref().contains(".tx_log/") {
            // The pipelines' filter drops every change of this table.
            all.push(Change { table: "tx_log".into(), op: '!', id: -1, change: -1 });
            continue;
        }
        let table = TABLES.iter().find(|t| key.as_ref().contains(&format!(".{t}/"))).copied();
        let bytes = store.get(key).await?.bytes().await?;
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
            let batch = batch?;
            let (Some(op), Some(id), Some(change)) =
                (batch.column_by_name("sluice_op"), batch.column_by_name("id"), batch.column_by_name("change_no"))
            else {
                continue;
            };
            let (op, id, change) =
                (op.as_string::<i32>(), id.as_primitive::<Int64Type>(), change.as_primitive::<Int64Type>());
            let tag = batch.column_by_name("tag").map(|t| t.as_binary_opt::<i32>());
            let note = batch.column_by_name("note").and_then(|n| n.as_string_opt::<i32>());
            for row in 0..batch.num_rows() {
                if id.is_null(row) || change.is_null(row) {
                    continue;
                }
                // As for JSON: a MariaDB row's tag must be its change's bytes.
                let tag_ok = match tag {
                    None => true,
                    Some(None) => false,
                    Some(Some(tag)) => !tag.is_null(row) && tag.value(row) == expected_tag(change.value(row)),
                };
                let masked = note.is_some_and(|n| !n.is_null(row) && is_masked(n.value(row)));
                let op = op.value(row).chars().next().unwrap_or('?');
                all.push(Change {
                    table: table.unwrap_or("?").to_string(),
                    op: if tag_ok && masked { op } else { '!' },
                    id: id.value(row),
                    change: change.value(row),
                });
            }
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "v:47ce0cd5c63317134e85eaf44c97cc2288a3c88b3b3cf7cfb2f1d6589c364b1b";

    #[test]
    fn a_mariadb_tag_must_hold_its_change_numbers_bytes() {
        let event = |tag: serde_json::Value| serde_json::json!({"op": "c", "table": "db.t1", "after": {"id": 7, "change_no": 258, "note": HASH, "tag": tag}});
        // 258 = 0x0102: 02 01 and fourteen zero bytes.
        let whole = event("AgEAAAAAAAAAAAAAAAAAAA==".into());
        assert_eq!(change_of(&whole).unwrap().op, 'c');
        let stripped = event("AgE=".into());
        assert_eq!(change_of(&stripped).unwrap().op, '!', "trailing zero bytes lost");
        assert_eq!(change_of(&event(serde_json::Value::Null)).unwrap().op, '!');
        let postgres =
            serde_json::json!({"op": "d", "table": "public.t1", "before": {"id": 7, "change_no": 3, "note": HASH}});
        assert_eq!(change_of(&postgres).unwrap(), Change { table: "t1".into(), op: 'd', id: 7, change: 3 });
        assert_eq!(base64_bytes("AP8="), Some(vec![0, 255]));
    }

    #[test]
    fn a_note_in_the_clear_or_a_filtered_tables_event_fails_the_comparison() {
        let clear =
            serde_json::json!({"op": "c", "table": "public.t1", "after": {"id": 7, "change_no": 3, "note": "n3"}});
        assert_eq!(change_of(&clear).unwrap().op, '!');
        let unmarked = serde_json::json!({"op": "c", "table": "public.t1", "after": {"id": 7, "change_no": 3, "note": &HASH[2..]}});
        assert_eq!(change_of(&unmarked).unwrap().op, '!', "the script's mark is missing");
        let log = serde_json::json!({"op": "c", "table": "public.tx_log", "after": {"tx": 12}});
        assert_eq!(change_of(&log).unwrap(), Change { table: "tx_log".into(), op: '!', id: 12, change: -1 });
    }
}
