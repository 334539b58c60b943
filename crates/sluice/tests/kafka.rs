//! The Kafka sink against a real broker: exactly-once across crashes,
//! per-key order, fencing, transaction size, and bad input.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::pg::{fresh_database, pipeline, prepare_replication, sql, stop};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::Producer;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

fn brokers() -> String {
    std::env::var("SLUICE_TEST_KAFKA_BROKERS").unwrap_or_else(|_| {
        panic!("SLUICE_TEST_KAFKA_BROKERS is not set: run `scripts/services.sh start` and source its env file")
    })
}

struct Record {
    partition: i32,
    key: Option<String>,
    position: String,
    payload: Vec<u8>,
}

/// Every record of the topics, read from the beginning.
fn consume(topics: &[String], isolation: &str) -> Vec<Record> {
    read(topics, isolation, usize::MAX)
}

/// The records of the topics from the beginning, until `enough` of them
/// or until none came for two seconds.
fn read(topics: &[String], isolation: &str, enough: usize) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", "sluice-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
            }
        }
    }
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let mut idle = 0;
    while idle < 20 && records.len() < enough {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                idle = 0;
                let position = message
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == "sluice.position").and_then(|h| h.value))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                records.push(Record {
                    partition: message.partition(),
                    key: message.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    position,
                    payload: message.payload().unwrap_or_default().to_vec(),
                });
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None => idle += 1,
        }
    }
    records
}

fn generator_to_kafka(id: &str, tx_count: u64, rows_per_tx: u32, rate: Option<u64>, extra: &str) -> String {
    let rate = rate.map(|r| format!(", events_per_sec: {r}")).unwrap_or_default();
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: {tx_count}, rows_per_tx: {rows_per_tx}{rate} }} }}\n    sinks:\n      - type: kafka\n        config: {{ id: k, brokers: \"{}\", topic: \"{id}.${{table}}\", timeout_secs: 10{extra} }}\n",
        brokers()
    )
}

/// The records hold each event of a generator of `tx_count` transactions
/// of 10 rows once, and nothing else.
fn assert_consumer_saw_each_once(records: &[Record], isolation: &str, tx_count: u64) {
    let positions: Vec<&str> = records.iter().map(|r| r.position.as_str()).collect();
    assert_each_once(&positions, &generator_positions(tx_count, 10), &format!("a {isolation} consumer"));
}

fn log_of(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default()
}

#[test]
fn exactly_once_survives_crashes_before_and_after_commit() {
    let id = &unique("eos");
    let dir = tempfile::tempdir().unwrap();
    // Batches of 200 events, of which a transaction takes at most 16 when
    // they queue: 30,000 events take many transactions, so every run
    // below meets its failpoint mid-stream.
    let pipeline = generator_to_kafka(id, 3000, 10, Some(20_000), ", exactly_once: true")
        .replace("    sinks:\n", "    batch: { max_events: 200 }\n    sinks:\n");
    let config = write_config(dir.path(), &pipeline);
    let config = config.to_str().unwrap();
    // Crash after producing a transaction but before committing it, then
    // after committing one but before the local checkpoint.
    for failpoint in ["kafka.before_commit=4", "kafka.after_commit=4"] {
        let output = sluice()
            .env("SLUICE_FAILPOINT", failpoint)
            .args(["run", "-c", config])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{failpoint} must abort the process");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("failpoint"),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // And plain kill -9 between and inside batches.
    for _ in 0..3 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        std::thread::sleep(Duration::from_millis(700));
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    let topic = vec![format!("{id}.orders")];
    let committed = consume(&topic, "read_committed");
    assert_consumer_saw_each_once(&committed, "read_committed", 3000);
    let everything = consume(&topic, "read_uncommitted");
    assert!(
        everything.len() > committed.len(),
        "the aborted transaction must be in the log, and invisible to read_committed"
    );
}

#[test]
fn every_change_of_a_row_stays_in_order_in_one_partition() {
    let id = &unique("order");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_kafka(id, 500, 10, None, ""));
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    let records = consume(&[format!("{id}.orders")], "read_committed");
    assert_eq!(records.len(), 5000);
    let mut by_key: BTreeMap<String, Vec<(i32, String)>> = BTreeMap::new();
    for record in records {
        by_key
            .entry(record.key.clone().expect("keyed by the primary key"))
            .or_default()
            .push((record.partition, record.position));
    }
    let order = |p: &str| -> (u64, u32) {
        let mut parts = p.split(':').skip(1).map(|n| n.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap() as u32)
    };
    assert!(by_key.values().any(|changes| changes.len() > 1), "the generator updates rows");
    for (key, changes) in by_key {
        let partitions: BTreeSet<i32> = changes.iter().map(|(p, _)| *p).collect();
        assert_eq!(partitions.len(), 1, "key {key} spread over partitions");
        assert!(changes.windows(2).all(|w| order(&w[0].1) < order(&w[1].1)), "key {key} out of order");
    }
}

#[test]
fn a_second_instance_fences_the_first_which_stops_with_a_clear_error() {
    let id = &unique("fence");
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let text = generator_to_kafka(id, 1_000_000, 10, Some(2000), ", exactly_once: true");
    let first_config = write_config(first_dir.path(), &text);
    let second_config = write_config(second_dir.path(), &text);
    let mut first = spawn(&["run", "-c", first_config.to_str().unwrap()], first_dir.path());
    wait_until(Duration::from_secs(60), "the first instance to commit", || {
        log_of(first_dir.path()).contains("source started")
    });
    std::thread::sleep(Duration::from_secs(2));
    let mut second = spawn(&["run", "-c", second_config.to_str().unwrap()], second_dir.path());
    let status = first.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", log_of(first_dir.path()));
    let log = log_of(first_dir.path());
    assert!(log.contains(&format!("another Sluice instance is running pipeline \"{id}\"")), "{log}");
    second.kill9();
}

/// In a fleet, an instance that lost the lease while it opened its
/// producer can fence the rightful owner's producer: its
/// `init_transactions` reaches the coordinator after the owner's. A
/// producer of the test's own with the pipeline's `transactional.id`
/// replays that late start. The owner must not stop: it gives the lease
/// back and takes the pipeline again at a new epoch, and a
/// `read_committed` consumer sees every event of the generator once.
#[test]
fn in_a_fleet_an_owner_fenced_by_a_late_producer_starts_again_and_writes_nothing_twice() {
    let id = &unique("fleetfence");
    let store = format!("store_{id}");
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {store} CASCADE"));
    let dir = tempfile::tempdir().unwrap();
    // 60,000 events at 2000 a second: the fence and the new start fall
    // well inside the stream.
    let text = format!(
        "{}{}",
        common::fleet::store_yaml(&store),
        generator_to_kafka(id, 6000, 10, Some(2000), ", exactly_once: true")
    );
    let config = write_config(dir.path(), &text);
    let mut owner = spawn(
        &["run", "-c", config.to_str().unwrap(), "--fleet", "--instance-id", "f1", "--api-addr", "off"],
        dir.path(),
    );
    let topic = vec![format!("{id}.orders")];
    wait_until(Duration::from_secs(90), "the owner's first committed transaction", || {
        !read(&topic, "read_committed", 1).is_empty()
    });
    let epoch = || common::fleet::leases(&store, "epoch").get(id.as_str()).cloned();
    let first_epoch = epoch().expect("the owner holds the lease");

    let late: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("transactional.id", format!("sluice-{id}-k"))
        .create()
        .unwrap();
    late.init_transactions(Duration::from_secs(30)).unwrap();

    wait_until(Duration::from_secs(90), "the owner taking its pipeline again at a new epoch", || {
        epoch().is_some_and(|e| e != first_epoch) && log_of(dir.path()).matches("source started").count() >= 2
    });
    let log = log_of(dir.path());
    assert!(log.contains("a sink's writer was fenced while this instance holds the lease"), "{log}");
    wait_until(Duration::from_secs(120), "the generator's last event delivered", || {
        log_of(dir.path()).contains("pipeline done")
    });
    assert!(owner.still_running(), "the owner stopped:\n{}", log_of(dir.path()));
    let status = owner.terminate();
    assert!(status.success(), "{}", log_of(dir.path()));

    let committed = consume(&topic, "read_committed");
    assert_consumer_saw_each_once(&committed, "read_committed", 6000);
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {store} CASCADE"));
}

#[test]
fn a_50000_row_source_transaction_is_one_kafka_transaction() {
    let id = &unique("bigtx");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &generator_to_kafka(id, 1, 50_000, None, ", exactly_once: true, checkpoint_topic: bigtx_checkpoints"),
    );
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    assert_eq!(consume(&[format!("{id}.orders")], "read_committed").len(), 50_000);
    // Each Kafka transaction writes exactly one checkpoint record.
    let checkpoints = consume(&["bigtx_checkpoints".to_string()], "read_committed");
    let key = format!("{id}::sink::k");
    let ours: Vec<&Record> = checkpoints.iter().filter(|r| r.key.as_deref() == Some(key.as_str())).collect();
    assert_eq!(ours.len(), 1, "one transaction for the whole source transaction");
}

#[test]
fn poison_events_go_to_the_dead_letter_queue_and_are_never_dropped() {
    // Every event is larger than this topic accepts.
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tiny = unique("tiny");
    let tiny_topic = format!("{tiny}.orders");
    let small = NewTopic::new(&tiny_topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "100");
    runtime.block_on(admin.create_topics([&small], &AdminOptions::new())).unwrap();
    for exactly_once in ["false", "true"] {
        let dir = tempfile::tempdir().unwrap();
        let text = generator_to_kafka(&tiny, 5, 2, None, &format!(", exactly_once: {exactly_once}"));
        let config = write_config(dir.path(), &text);
        let config = config.to_str().unwrap();
        let output = run(&["run", "-c", config], dir.path());
        assert!(output.status.success(), "{}", log_of(dir.path()));
        let list = run(&["dlq", "list", "-c", config], dir.path());
        let listing = String::from_utf8_lossy(&list.stdout);
        assert!(
            listing.contains("10 dead letter(s)") && listing.contains("larger than the broker accepts"),
            "{listing}"
        );
        let key = format!("{tiny}::sink::k::gen:3:1");
        let show = run(&["dlq", "show", "-c", config, &key], dir.path());
        let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
        assert_eq!(shown["event"]["position"], "gen:3:1", "the whole event is kept");
        let retry = run(&["dlq", "retry", "-c", config, &key], dir.path());
        assert_eq!(retry.status.code(), Some(1), "the broker still refuses it");
        let said = String::from_utf8_lossy(&retry.stdout);
        assert!(said.contains("still refuses") && said.contains("0 delivered and removed, 1 kept"), "{said}");
        if exactly_once == "true" {
            // Once the topic takes larger messages, a retry delivers them
            // (in a transaction of their own) and empties the queue.
            let larger = AlterConfig::new(ResourceSpecifier::Topic(&tiny_topic)).set("max.message.bytes", "1000000");
            runtime.block_on(admin.alter_configs([&larger], &AdminOptions::new())).unwrap();
            let retry = run(&["dlq", "retry", "-c", config, "--all"], dir.path());
            let said = String::from_utf8_lossy(&retry.stdout);
            assert!(
                retry.status.success() && said.contains("10 delivered and removed, 0 kept"),
                "{said}{}",
                stderr(&retry)
            );
            let held: BTreeSet<String> =
                consume(std::slice::from_ref(&tiny_topic), "read_committed").into_iter().map(|r| r.position).collect();
            assert_eq!(
                held,
                generator_positions(5, 2).into_iter().collect::<BTreeSet<_>>(),
                "every dead letter, delivered"
            );
        } else {
            let purge = run(&["dlq", "purge", "-c", config, "--all", "--yes"], dir.path());
            assert!(String::from_utf8_lossy(&purge.stdout).contains("purged 10"));
        }
    }

    // A topic that only the table's name makes too long: per-event, to
    // the queue.
    let dir = tempfile::tempdir().unwrap();
    let bad = unique("badtopic");
    let long = format!("{bad}{}", "x".repeat(248 - bad.len()));
    let text = generator_to_kafka(&bad, 5, 2, None, "")
        .replace(&format!("topic: \"{bad}.${{table}}\""), &format!("topic: \"{long}.${{table}}\""));
    let config = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    let show = run(&["dlq", "show", "-c", config.to_str().unwrap(), &format!("{bad}::sink::k::gen:1:0")], dir.path());
    assert!(String::from_utf8_lossy(&show.stdout).contains("not a valid topic name"), "{}", stderr(&show));
    // A template whose own text cannot name a topic would fail every
    // event: it is refused before anything runs.
    let text = text.replace(&format!("topic: \"{long}.${{table}}\""), "topic: \"bad topic ${table}\"");
    let config = write_config(dir.path(), &text);
    for command in ["validate", "run"] {
        let output = run(&[command, "-c", config.to_str().unwrap()], dir.path());
        let said = stderr(&output);
        assert!(!output.status.success() && said.contains(".topic") && said.contains("' '"), "{command}: {said}");
    }

    // A full queue stops the pipeline rather than drop anything.
    let tiny = unique("tiny");
    let tiny_topic = format!("{tiny}.orders");
    let small = NewTopic::new(&tiny_topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "100");
    runtime.block_on(admin.create_topics([&small], &AdminOptions::new())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_kafka(&tiny, 5, 2, None, "") + "    dead_letter: { max_entries: 3 }\n";
    let config = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("dead letter queue is full (3 entries)"), "{}", stderr(&output));
}

/// `(event id, row id, body)` of each record, in topic order.
fn rows_of(records: &[Record]) -> Vec<(String, i64, String)> {
    records
        .iter()
        .map(|r| {
            let event: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            let row = &event["after"];
            (
                event["id"].as_str().unwrap().to_string(),
                row["id"].as_i64().unwrap(),
                row["body"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn an_event_larger_than_the_client_accepts_goes_to_the_dead_letter_queue_and_the_rest_go_on() {
    // librdkafka refuses a message over its message.max.bytes (1 MB by
    // default) at produce, before any broker sees it.
    let big = 2_000_000;
    let small = |id: i64| format!("({id}, 'row {id}')");
    for exactly_once in [false, true] {
        let database = unique("kbig");
        fresh_database(&database);
        sql(&database, "CREATE TABLE t (id int PRIMARY KEY, body text)");
        prepare_replication(&database, "t");
        let dir = tempfile::tempdir().unwrap();
        let kafka = format!(
            "      - type: kafka\n        config: {{ id: k, brokers: \"{}\", topic: {database}, timeout_secs: 10, exactly_once: {exactly_once} }}\n",
            brokers()
        );
        let text = pipeline(&database, "unused.jsonl", None);
        let file_sink = text.lines().skip_while(|l| !l.contains("type: file")).take(2).collect::<Vec<_>>().join("\n");
        let config = write_config(dir.path(), &text.replace(&format!("{file_sink}\n"), &kafka));
        let config = config.to_str().unwrap();
        let topic = vec![database.clone()];
        let isolation = if exactly_once { "read_committed" } else { "read_uncommitted" };
        let arrived = |wanted: &[i64]| {
            let ids: BTreeSet<i64> = rows_of(&consume(&topic, isolation)).into_iter().map(|(_, id, _)| id).collect();
            wanted.iter().all(|id| ids.contains(id))
        };

        sql(&database, &format!("INSERT INTO t VALUES {}, {}", small(1), small(2)));
        sql(&database, &format!("INSERT INTO t VALUES (3, repeat('x', {big}))"));
        sql(&database, &format!("INSERT INTO t VALUES {}, {}", small(4), small(5)));
        let child = spawn(&["run", "-c", config], dir.path());
        wait_until(Duration::from_secs(120), "the small rows in the topic", || arrived(&[1, 2, 4, 5]));
        stop(child, dir.path());

        // Restarted, it goes on past the letter, and past a second one.
        let child = spawn(&["run", "-c", config], dir.path());
        sql(&database, &format!("INSERT INTO t VALUES {}", small(6)));
        sql(&database, &format!("INSERT INTO t VALUES (7, repeat('y', {big}))"));
        sql(&database, &format!("INSERT INTO t VALUES {}", small(8)));
        wait_until(Duration::from_secs(120), "the rows written after the restart", || arrived(&[6, 8]));
        stop(child, dir.path());

        let list = run(&["dlq", "list", "-c", config], dir.path());
        let listing = String::from_utf8_lossy(&list.stdout);
        assert!(
            listing.contains("2 dead letter(s)") && listing.matches("larger than the broker accepts").count() == 2,
            "exactly_once {exactly_once}: {listing}"
        );
        for (id, filler) in [(3, 'x'), (7, 'y')] {
            let key = listing
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|k| k.starts_with(&format!("{database}::sink::k::")))
                .find(|key| {
                    let show = run(&["dlq", "show", "-c", config, key], dir.path());
                    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
                    shown["event"]["after"]["id"] == id
                })
                .unwrap_or_else(|| panic!("no letter holds row {id}: {listing}"));
            let show = run(&["dlq", "show", "-c", config, key], dir.path());
            let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
            assert_eq!(
                shown["event"]["after"]["body"].as_str().unwrap(),
                filler.to_string().repeat(big),
                "the whole event"
            );
        }

        // Every other event, as written, once per event id: at-least-once
        // may repeat the records a batch produced before the refused one,
        // which consumers drop by id. (Rows are keyed, so spread over
        // partitions: no order across rows to check.)
        let records = rows_of(&consume(&topic, isolation));
        let mut delivered = BTreeMap::new();
        for (event_id, id, body) in &records {
            let first = delivered.entry(event_id.clone()).or_insert((*id, body.clone()));
            assert_eq!(*first, (*id, body.clone()), "one event id, two contents");
        }
        let mut delivered: Vec<(i64, String)> = delivered.into_values().collect();
        delivered.sort();
        let expected: Vec<(i64, String)> = [1, 2, 4, 5, 6, 8].into_iter().map(|id| (id, format!("row {id}"))).collect();
        assert_eq!(delivered, expected, "exactly_once {exactly_once}");
        if exactly_once {
            assert_eq!(records.len(), expected.len(), "a read_committed consumer saw duplicates");
        }
        let log = log_of(dir.path());
        assert!(log.contains("dead letter"), "{log}");
    }
}

#[test]
fn unreachable_brokers_are_reported_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_kafka(&unique("nobroker"), 5, 2, None, "").replace(&brokers(), "127.0.0.1:1");
    let config = write_config(dir.path(), &text.replace("timeout_secs: 10", "timeout_secs: 1"));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "two failed attempts", || {
        log_of(dir.path()).matches("cannot reach brokers 127.0.0.1:1").count() >= 2
    });
    drop(child);
}

#[test]
fn metrics_count_one_committed_transaction_per_batch() {
    let id = &unique("txmetrics");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &generator_to_kafka(
            id,
            100_000,
            10,
            Some(2000),
            ", exactly_once: true, checkpoint_topic: txmetrics_checkpoints",
        ),
    );
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let addr = common::api::api_addr(dir.path());
    let view = || common::api::get(&addr, &format!("/pipelines/{id}"), None).json();
    wait_until(Duration::from_secs(60), "a few thousand events in Kafka", || {
        view()["sinks"][0]["events"].as_u64() > Some(3000)
    });
    assert_eq!(common::api::call(&addr, "POST", &format!("/pipelines/{id}/pause"), None, None).status, 200);
    // Paused, the batcher cuts what it holds within max_ms: wait until the
    // head holds still and the sink has written all of it.
    let mut last = u64::MAX;
    wait_until(Duration::from_secs(60), "the paused pipeline to settle", || {
        std::thread::sleep(Duration::from_millis(300));
        let now = view();
        let head = now["head_events"].as_u64().unwrap();
        let settled = head == last && now["sinks"][0]["lag_events"] == 0 && now["sinks"][0]["events"] == head;
        last = head;
        settled
    });
    let metrics = common::api::get(&addr, "/metrics", None).body;
    let sample = |prefix: &str| -> f64 {
        metrics.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
    };
    let committed = sample("sluice_kafka_transactions_total{sink=\"k\",outcome=\"committed\"}");
    let batches = sample("sluice_sink_batches_total{pipeline=");
    assert!(batches >= 1.0, "{metrics}");
    assert_eq!(committed, batches, "one Kafka transaction per batch written\n{metrics}");
    assert_eq!(sample("sluice_sink_events_total{pipeline="), last as f64);
    assert!(child.terminate().success(), "{}", log_of(dir.path()));
    let checkpoints = consume(&["txmetrics_checkpoints".to_string()], "read_committed");
    let key = format!("{id}::sink::k");
    let records = checkpoints.iter().filter(|r| r.key.as_deref() == Some(key.as_str())).count();
    assert_eq!(records as f64, committed, "each committed transaction wrote one checkpoint record");
    assert_eq!(
        consume(&[format!("{id}.orders")], "read_committed").len() as u64,
        last,
        "the events counted are in Kafka"
    );
}

/// Creates `topic` with `partitions` partitions, or adds partitions to it.
fn partitioned_topic(topic: &str, partitions: usize, grow: bool) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let results = if grow {
        let more = rdkafka::admin::NewPartitions::new(topic, partitions);
        runtime.block_on(admin.create_partitions(&[more], &AdminOptions::new())).unwrap()
    } else {
        let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(1));
        runtime.block_on(admin.create_topics(&[new], &AdminOptions::new())).unwrap()
    };
    for result in results {
        result.unwrap();
    }
}

#[test]
fn read_back_writes_each_event_once_across_kill_9_without_transactions() {
    let id = &unique("rb");
    let topic = format!("{id}.orders");
    partitioned_topic(&topic, 3, false);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_kafka(id, 3000, 10, Some(20_000), ", exactly_once: read_back"));
    let config = config.to_str().unwrap();
    let validated = run(&["validate", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&validated.stdout).contains("exactly-once (topics written only by this sink"));
    for _ in 0..4 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        std::thread::sleep(Duration::from_millis(700));
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    // Without transactions, what a read_uncommitted consumer sees is all
    // there is: each event once.
    let records = consume(std::slice::from_ref(&topic), "read_uncommitted");
    assert_consumer_saw_each_once(&records, "read_uncommitted", 3000);
    let used: BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert_eq!(used.len(), 3, "records spread over the partitions by key");

    // A partition count that changed under the sink stops it.
    partitioned_topic(&topic, 4, true);
    let more = write_config(dir.path(), &generator_to_kafka(id, 3100, 10, None, ", exactly_once: read_back"));
    let output = run(&["run", "-c", more.to_str().unwrap()], dir.path());
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(
        said.contains(&format!("topic {topic} had 3 partitions when this sink last wrote it and has 4 now")),
        "{said}"
    );
}
