//! Helpers for tests that run the `sluice` binary.

#![allow(dead_code)]

pub mod api;
pub mod avro;
pub mod debezium;
pub mod fleet;
pub mod lake;
pub mod my;
pub mod pg;
pub mod pgsink;
pub mod receiver;
pub mod replay;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_config::GeneratorConfig;
use sluice_generator::GeneratorSource;

pub fn sluice() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.env_remove("RUST_LOG");
    // Tests run many `sluice run` at once: each API gets a port of its own.
    command.env("SLUICE_API_ADDR", "127.0.0.1:0");
    command
}

pub fn run(args: &[&str], dir: &Path) -> Output {
    sluice().args(args).current_dir(dir).output().expect("sluice runs")
}

/// A running `sluice`; killed when dropped, so a failing test leaves no
/// process behind. Its log goes to `sluice.log` in its folder (appended
/// across restarts); when a test fails while it runs, the log's tail goes
/// to the test's output, since the folder is removed with the test.
pub struct Running(Option<Child>, PathBuf);

impl Running {
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.0.take() {
            child.kill().expect("SIGKILL");
            child.wait().unwrap();
        }
    }

    /// Waits for the process to exit on its own; panics after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let child = self.0.as_mut().expect("running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.0 = None;
                return status;
            }
            assert!(start.elapsed() < limit, "sluice did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process has not exited.
    pub fn still_running(&mut self) -> bool {
        self.0.as_mut().is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("running");
        let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill runs");
        assert!(status.success());
        child.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.1).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- last lines of {} ---", self.1.display());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// `spawn` with extra environment variables.
pub fn spawn_with_env(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Running {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("sluice.log")).unwrap();
    let mut command = sluice();
    command.args(args).current_dir(dir).stdout(Stdio::null()).stderr(log);
    for (name, value) in env {
        command.env(name, value);
    }
    Running(Some(command.spawn().expect("sluice starts")), dir.join("sluice.log"))
}

pub fn spawn(args: &[&str], dir: &Path) -> Running {
    spawn_command(sluice(), args, dir)
}

/// [`spawn`], with each checkpoint the store takes in the log, so a test
/// can wait for one ([`checkpoint_stored`]) before it kills the process:
/// lines in a sink's file come before their checkpoint does.
pub fn spawn_logging_checkpoints(args: &[&str], dir: &Path) -> Running {
    let mut command = sluice();
    command.env("RUST_LOG", "info,sluice_runtime::checkpointer=debug");
    spawn_command(command, args, dir)
}

/// Whether a process from [`spawn_logging_checkpoints`] in `dir` has had
/// a checkpoint stored.
pub fn checkpoint_stored(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("sluice.log")).is_ok_and(|log| log.contains("checkpoint stored"))
}

fn spawn_command(mut command: Command, args: &[&str], dir: &Path) -> Running {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("sluice.log")).unwrap();
    let child = command.args(args).current_dir(dir).stdout(Stdio::null()).stderr(log).spawn().expect("sluice starts");
    Running(Some(child), dir.join("sluice.log"))
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A generator → file pipeline.
pub fn generator_to_file(tx_count: u64, rows_per_tx: u32, rate: Option<u64>, out: &str) -> String {
    let rate = rate.map(|r| format!(", events_per_sec: {r}")).unwrap_or_default();
    format!(
        "pipelines:\n  - name: orders\n    source: {{ type: generator, config: {{ id: gen1, tx_count: {tx_count}, rows_per_tx: {rows_per_tx}{rate} }} }}\n    sinks:\n      - type: file\n        config: {{ id: local, path: {out} }}\n    batch: {{ max_events: 500, max_ms: 20 }}\n"
    )
}

/// The exact lines a generator config produces, in order.
pub fn expected_lines(tx_count: u64, rows_per_tx: u32) -> Vec<String> {
    expected_events(tx_count, rows_per_tx).iter().map(|event| serde_json::to_string(event).unwrap()).collect()
}

/// The events of [`generator_to_file`]'s source, in order.
pub fn expected_events(tx_count: u64, rows_per_tx: u32) -> Vec<sluice_core::Event> {
    let generator = GeneratorSource::new(GeneratorConfig {
        id: "gen1".into(),
        tx_count: Some(tx_count),
        rows_per_tx,
        tables: vec!["orders".into()],
        database: "generator".into(),
        events_per_sec: None,
        seed: 0,
    });
    (1..=tx_count)
        .flat_map(|tx| (0..rows_per_tx).map(move |seq| (tx, seq)))
        .map(|(tx, seq)| generator.event_at(tx, seq))
        .collect()
}

/// The positions of a generator's events, `tx_count` transactions of
/// `rows_per_tx` rows, in order.
pub fn generator_positions(tx_count: u64, rows_per_tx: u32) -> Vec<String> {
    (1..=tx_count).flat_map(|tx| (0..rows_per_tx).map(move |seq| format!("gen:{tx}:{seq}"))).collect()
}

/// Asserts that `positions`, as `holder` holds them in any order, name
/// each of `expected` exactly once and nothing else.
pub fn assert_each_once<S: AsRef<str>>(positions: &[S], expected: &[String], holder: &str) {
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<&str> = positions.iter().map(AsRef::as_ref).filter(|p| !seen.insert(*p)).take(5).collect();
    assert!(repeated.is_empty(), "{holder} holds duplicates, e.g. {repeated:?}");
    let missing: Vec<&String> = expected.iter().filter(|p| !seen.contains(p.as_str())).take(5).collect();
    assert!(missing.is_empty(), "{holder} misses events, e.g. {missing:?}");
    let wanted: std::collections::BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    let extra: Vec<&str> = seen.iter().filter(|p| !wanted.contains(*p)).take(5).copied().collect();
    assert!(extra.is_empty(), "{holder} holds events never written, e.g. {extra:?}");
}

pub fn line_count(path: &Path) -> usize {
    std::fs::read(path).map(|bytes| bytes.iter().filter(|b| **b == b'\n').count()).unwrap_or(0)
}

/// Polls a condition until it holds; panics after `limit`.
pub fn wait_until(limit: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(wait_for(limit, condition), "timed out waiting for {what}");
}

/// Whether `condition` came true within `limit`, for a caller that says
/// more than [`wait_until`] can when it does not.
pub fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !condition() {
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A name of its own for every run, so topics, streams and checkpoint keys
/// never meet what an earlier run left in a server.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{name}{}x{nanos}", std::process::id())
}

/// A setting of the private services, from the env file `scripts/services.sh start` writes.
pub fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run `scripts/services.sh start` and source its env file"))
}

/// Every `sluice.position` header of a topic, read from the plaintext
/// listener with `read_committed`, with its partition, in partition order.
pub fn kafka_partition_positions(topic: &str, group: &str) -> Vec<(i32, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("SLUICE_TEST_KAFKA_BROKERS"))
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in metadata.topics().iter().flat_map(|t| t.partitions()) {
        assignment.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let (mut positions, mut idle) = (Vec::new(), 0);
    while idle < 15 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = 0;
                let header = m
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == "sluice.position").and_then(|h| h.value))
                    .unwrap();
                positions.push((m.partition(), String::from_utf8_lossy(header).into_owned()));
            }
            Some(Err(e)) => panic!("{e}"),
            None => idle += 1,
        }
    }
    positions
}

/// The `position` of every entry of a Redis stream, in stream order.
pub fn redis_positions(stream: &str) -> Vec<String> {
    let mut conn = redis::Client::open(env("SLUICE_TEST_REDIS_URL")).unwrap().get_connection().unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query(&mut conn).unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| {
            let payload = &fields.iter().find(|(k, _)| k == "payload").unwrap().1;
            serde_json::from_str::<serde_json::Value>(payload).unwrap()["position"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The `Sluice-Position` of every message of a JetStream stream, in order
/// (none when the stream does not exist yet).
pub fn nats_positions(stream: &str) -> Vec<String> {
    nats_raw(stream).into_iter().map(|(headers, _)| headers["Sluice-Position"].clone()).collect()
}

/// Every message of a JetStream stream, in order: its headers (values of
/// a repeated header joined by commas) and its payload.
pub fn nats_raw(stream: &str) -> Vec<(std::collections::BTreeMap<String, String>, Vec<u8>)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let context = async_nats::jetstream::new(async_nats::connect(env("SLUICE_TEST_NATS_URL")).await.unwrap());
        let Ok(mut handle) = context.get_stream(stream).await else { return Vec::new() };
        let last = handle.info().await.unwrap().state.last_sequence;
        let mut messages = Vec::new();
        for sequence in 1..=last {
            let Ok(message) = handle.get_raw_message(sequence).await else { continue };
            let headers = message
                .headers
                .iter()
                .map(|(name, values)| {
                    (name.to_string(), values.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(","))
                })
                .collect();
            messages.push((headers, message.payload.to_vec()));
        }
        messages
    })
}

/// The one dead letter the store in `dir` holds, as `sluice dlq show`
/// prints it; panics unless there is exactly one.
pub fn the_dead_letter(config: &str, dir: &Path) -> String {
    let listing = run(&["dlq", "list", "-c", config], dir);
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("1 dead letter(s)"), "{listing}");
    let key = listing.lines().nth(1).and_then(|l| l.split_whitespace().next()).unwrap();
    String::from_utf8_lossy(&run(&["dlq", "show", key, "-c", config], dir).stdout).into_owned()
}

/// A loopback port nothing listens on when it is returned.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// From now on, forwards every connection to `port` on loopback to `to`,
/// in both directions, until the test ends: a server the test makes
/// reachable when it chooses.
pub fn forward(port: u16, to: u16) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the forwarded port is free");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to)) else { continue };
            let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else { continue };
            for (mut from, mut into) in [(client_in, server), (server_in, client)] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}
