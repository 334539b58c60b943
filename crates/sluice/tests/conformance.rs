//! One suite every sink passes, against the real servers: batches land in
//! order; a new instance of a sink that stores its position with its data
//! reports what it holds (so a restart after a crash between the write and
//! the checkpoint sends nothing twice); flush reports the last position;
//! and the declared guarantee matches the behaviour. Per-event refusals
//! (the dead letter queue) are tested with each sink that can refuse one:
//! `kafka.rs` (oversized events, invalid topics) and `http.rs` (4xx).

mod common;

use common::{env, kafka_partition_positions, nats_positions, redis_positions, unique};

use sluice_config::{GeneratorConfig, KafkaSinkConfig, NatsSinkConfig, RedisSinkConfig, SinkConfig};
use sluice_core::{Event, Position, SliceChunks};
use sluice_generator::GeneratorSource;
use sluice_sinks::SinkContext;

/// Three batches of whole transactions from the generator.
fn batches() -> Vec<Vec<Event>> {
    let generator = GeneratorSource::new(GeneratorConfig {
        id: "conf".into(),
        tx_count: Some(30),
        rows_per_tx: 5,
        tables: vec!["orders".into()],
        database: "shop".into(),
        events_per_sec: None,
        seed: 9,
    });
    (0..3)
        .map(|b| {
            (b * 10 + 1..=b * 10 + 10)
                .flat_map(|tx| (0..5).map(move |seq| (tx, seq)))
                .map(|(tx, seq)| generator.event_at(tx, seq))
                .collect()
        })
        .collect()
}

fn kafka_positions(topic: &str) -> Vec<String> {
    let positions = kafka_partition_positions(topic, "sluice-conformance");
    // Kafka orders within a partition only: check that, then merge.
    let order = |p: &str| -> (u64, u64) {
        let mut parts = p.split(':').skip(1).map(|n| n.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    for partition in positions.iter().map(|(p, _)| *p).collect::<std::collections::BTreeSet<_>>() {
        let within: Vec<&String> = positions.iter().filter(|(p, _)| *p == partition).map(|(_, pos)| pos).collect();
        assert!(within.windows(2).all(|w| order(w[0]) < order(w[1])), "partition {partition} out of order");
    }
    let mut merged: Vec<String> = positions.into_iter().map(|(_, p)| p).collect();
    merged.sort_by_key(|p| order(p));
    merged
}

fn file_positions(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["position"].as_str().unwrap().to_string())
        .collect()
}

/// The suite, for one sink.
async fn conform(config: SinkConfig, read: impl FnOnce() -> Vec<String> + Send + 'static) {
    let staging = tempfile::tempdir().unwrap();
    let context = SinkContext { pipeline: unique("conf"), source_id: unique("src"), data_dir: staging.path().into() };
    let batches = batches();
    let mut sink = sluice_sinks::build(&config, &context).unwrap();
    let declared = config.guarantee();
    assert_eq!(sink.guarantee(), declared, "the built sink declares what the config says");
    assert_eq!(sink.open().await.unwrap(), None, "a fresh destination holds nothing");
    let (first_end, second_end) =
        (batches[0].last().unwrap().position.clone(), batches[1].last().unwrap().position.clone());
    let durable = sink.write(&mut SliceChunks::new(&batches[0]).unwrap()).await.unwrap();
    assert!(durable.as_ref().is_none_or(|d| *d <= first_end), "never durable past what it was given");
    let durable = sink.write(&mut SliceChunks::new(&batches[1]).unwrap()).await.unwrap();
    // A sink that buffers (object storage) may report less until flush.
    if sink.flush_due().is_none() {
        assert_eq!(durable.as_ref(), Some(&second_end), "write-through sinks are durable at the batch end");
    }
    assert_eq!(sink.flush().await.unwrap(), Some(second_end.clone()), "flush makes everything durable");
    sink.close().await.unwrap();
    drop(sink);
    // A crash here, before the coordinator stored a checkpoint: a new
    // instance of an exactly-once sink either says what it holds, or takes
    // the replay of everything and skips what it holds.
    let mut again = sluice_sinks::build(&config, &context).unwrap();
    let held: Option<Position> = again.open().await.unwrap();
    let replay: Vec<Event> = match (&held, declared.is_exactly_once()) {
        (Some(held), _) => {
            assert_eq!(held, &second_end, "a sink that reports what it holds reports all of it");
            batches[2].clone()
        }
        (None, true) => batches.iter().flatten().cloned().collect(),
        (None, false) => batches[2].clone(),
    };
    again.write(&mut SliceChunks::new(&replay).unwrap()).await.unwrap();
    again.flush().await.unwrap();
    // A write whose events the pipeline's transforms all dropped: nothing
    // lands, and the sink's watermark still reaches its end, so the
    // checkpoint, and the source's acknowledgement, move on.
    let beyond = Position::Generator { tx: 31, seq: 4 };
    let durable = again.write(&mut SliceChunks::ending_at(&[], &beyond)).await.unwrap();
    assert!(durable.as_ref().is_none_or(|d| *d <= beyond), "never durable past what it was given");
    assert_eq!(again.flush().await.unwrap(), Some(beyond), "an empty write moves the watermark to its end");
    again.close().await.unwrap();
    let expected: Vec<String> = batches.iter().flatten().map(|e| e.position.to_string()).collect();
    let held = tokio::task::spawn_blocking(read).await.unwrap();
    assert_eq!(held, expected, "every event once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let config: SinkConfig = serde_yaml_config(&format!("type: file\nconfig: {{ id: f, path: {} }}", path.display()));
    conform(config, move || file_positions(&path)).await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sinks_conform() {
    use sluice_config::ExactlyOnce;
    for exactly_once in [ExactlyOnce::Off, ExactlyOnce::Transactions, ExactlyOnce::ReadBack] {
        let topic = unique("conformk");
        let config = SinkConfig::Kafka(KafkaSinkConfig {
            id: "k".into(),
            required: true,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
            brokers: env("SLUICE_TEST_KAFKA_BROKERS"),
            topic: topic.clone(),
            key: None,
            exactly_once,
            checkpoint_topic: "sluice_conformance_checkpoints".into(),
            transactional_id: None,
            compression: sluice_config::KafkaCompression::Lz4,
            timeout_secs: 10,
            tls: None,
            sasl: None,
            client_conf: Default::default(),
            format: Default::default(),
        });
        let read_topic = topic.clone();
        conform(config, move || kafka_positions(&read_topic)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sink_conforms() {
    let stream = unique("conformr");
    let config = SinkConfig::Redis(RedisSinkConfig {
        id: "r".into(),
        required: true,
        buffer: Default::default(),
        delivery: Default::default(),
        transforms: Vec::new(),
        url: env("SLUICE_TEST_REDIS_URL"),
        password: Default::default(),
        stream: stream.clone(),
        maxlen: None,
        checkpoint_key: Some(format!("{stream}:checkpoint")),
        timeout_secs: 10,
        ca_file: None,
        cert_file: None,
        key_file: None,
        format: Default::default(),
    });
    conform(config, move || redis_positions(&stream)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sink_conforms() {
    let stream = unique("conformn");
    let config = SinkConfig::Nats(NatsSinkConfig {
        id: "n".into(),
        required: true,
        buffer: Default::default(),
        delivery: Default::default(),
        transforms: Vec::new(),
        url: env("SLUICE_TEST_NATS_URL"),
        subject: format!("{stream}.${{table}}"),
        stream: stream.clone(),
        create_stream: true,
        stream_subjects: None,
        duplicate_window_secs: 120,
        exclusive: true,
        user: None,
        password: Default::default(),
        token: Default::default(),
        credentials_file: None,
        nkey: Default::default(),
        ca_file: None,
        cert_file: None,
        key_file: None,
        timeout_secs: 10,
        format: Default::default(),
    });
    let read = stream.clone();
    conform(config, move || nats_positions(&read)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sinks_conform() {
    for mode in ["single", "batch"] {
        let receiver = common::receiver::Receiver::start();
        let config = serde_yaml_config(&format!(
            "type: http\nconfig: {{ id: h, url: \"{}\", mode: {mode} }}",
            receiver.url("/")
        ));
        conform(config, move || receiver.delivered_positions()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_storage_sinks_conform() {
    let prefix = unique("conforms3");
    let target = common::lake::s3_target();
    let config = serde_yaml_config(&format!("type: s3\nconfig: {{ id: o, {target}, prefix: {prefix} }}"));
    conform(config, move || {
        let files = common::lake::s3_files(&prefix);
        files.iter().flat_map(|(name, bytes)| common::lake::positions(name, bytes)).collect()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let config = serde_yaml_config(&format!(
        "type: s3\nconfig: {{ id: o, local: {}, format: jsonl, compression: gzip }}",
        root.display()
    ));
    conform(config, move || {
        let files = common::lake::local_files(&root);
        files.iter().flat_map(|(name, bytes)| common::lake::positions(name, bytes)).collect()
    })
    .await;
}

fn serde_yaml_config(text: &str) -> SinkConfig {
    let wrapped = format!(
        "pipelines:\n  - name: c\n    source: {{ type: generator, config: {{ id: g }} }}\n    sinks:\n      - {}\n",
        text.replace('\n', "\n        ")
    );
    let config = sluice_config::parse(std::path::Path::new("conformance.yaml"), &wrapped, |_| None).unwrap();
    config.pipelines[0].sinks[0].clone()
}
