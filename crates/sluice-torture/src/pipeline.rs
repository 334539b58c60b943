//! The pipeline under torture: proxies in front of the servers, the
//! webhook receiver, the config with every sink, and the `sluice` process.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::db::{DATABASE, Db, Kind};
use crate::instances::{Instances, MASK_SALT};
use crate::proxy::Proxy;
use crate::receiver::Receiver;
use crate::workload::{Change, TABLES};
use crate::{Env, readers};

/// A table's rows as an apply-mode sink holds them: id → change number.
pub type Rows = std::collections::BTreeMap<i64, i64>;

/// One sink of one pipeline: its id and what it holds.
pub struct Held {
    pub source: Kind,
    pub sink: String,
    pub guarantee: String,
    pub changes: Vec<Change>,
}

pub struct Setup {
    pub run_id: String,
    pub proxies: Vec<Proxy>,
    receiver: Receiver,
    dir: PathBuf,
    config: PathBuf,
    sluice: PathBuf,
    pub instances: Instances,
}

/// Both pipelines' transforms. The filter drops every change of the
/// workload's own `tx_log` table (one per transaction), which the sources
/// capture only for this: the checkpoints must still pass them, or the
/// drain never ends, and a reader that meets one fails the run. The mask
/// hashes `note`, and a VRL script marks the hash `v:`: a reader that
/// meets a note in the clear, or unmarked, fails the run.
const TRANSFORMS: &str = "    transforms:\n      - { type: filter, tables: [\"*.tx_log\"] }\n      - { type: mask, columns: [note], with: { sha256: { salt: \"${TORTURE_MASK_SALT}\" } } }\n      - type: vrl\n        source: |\n          if is_string(.after.note) { .after.note = \"v:\" + string!(.after.note) }\n          if is_string(.before.note) { .before.note = \"v:\" + string!(.before.note) }\n";

/// The server of a database sink, by its id.
fn kind_of(sink: &str) -> Kind {
    if sink.starts_with("pg_") { Kind::Postgres } else { Kind::MariaDb }
}

fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The sinks of one pipeline, each writing under names of its own. A
/// fleet has no file sink: another instance could not go on from it.
fn sinks(env: &Env, run: &str, kind: Kind, port: impl Fn(&str) -> u16, fleet: bool) -> anyhow::Result<String> {
    let tag = kind.tag();
    // A fleet refuses read_back too: it assumes one writer.
    let (file, read_back) = if fleet {
        (String::new(), String::new())
    } else {
        let brokers = env.get("SLUICE_TEST_KAFKA_BROKERS")?;
        (
            format!("      - type: file\n        config: {{ id: file, path: out-{tag}.jsonl }}\n"),
            format!(
                "      - type: kafka\n        config: {{ id: kafka_rb, brokers: \"{brokers}\", topic: \"tt{run}{tag}r.${{table}}\", exactly_once: read_back, timeout_secs: 10 }}\n"
            ),
        )
    };
    Ok(format!(
        r#"    sinks:
{file}      - type: kafka
        config: {{ id: kafka_eos, brokers: "{brokers}", topic: "tt{run}{tag}e.${{table}}", exactly_once: true, timeout_secs: 10 }}
      - type: kafka
        config: {{ id: kafka_alo, brokers: "{brokers}", topic: "tt{run}{tag}a.${{table}}", timeout_secs: 10 }}
{read_back}      - type: redis
        config: {{ id: redis, url: "redis://127.0.0.1:{redis}/0", stream: "tt{run}{tag}:${{table}}", timeout_secs: 5 }}
      - type: nats
        config: {{ id: nats, url: "nats://127.0.0.1:{nats}", stream: TT{run}{tag}, subject: "tt{run}{tag}.${{table}}", stream_subjects: ["tt{run}{tag}.>"], timeout_secs: 5 }}
      - type: http
        config: {{ id: http, url: "http://127.0.0.1:{http}/{tag}", mode: batch, batch_max_events: 200, timeout_secs: 5 }}
      - type: http
        config: {{ id: http_slow, url: "http://127.0.0.1:{http_slow}/{tag}slow", required: false, mode: batch, batch_max_events: 200, timeout_secs: 5 }}
      - type: postgres
        config: {{ id: pg_log, host: 127.0.0.1, port: {pg}, database: {database}, user: {pg_user}, password: "{pg_password}", ssl_mode: disable, mode: changelog, schema: tt{run}{tag}l, checkpoint_schema: tt{run}{tag}l, connect_timeout_secs: 5 }}
      - type: postgres
        config: {{ id: pg_apply, host: 127.0.0.1, port: {pg}, database: {database}, user: {pg_user}, password: "{pg_password}", ssl_mode: disable, schema: tt{run}{tag}s, checkpoint_schema: tt{run}{tag}s, connect_timeout_secs: 5 }}
      - type: mysql
        config: {{ id: my_apply, host: 127.0.0.1, port: {my}, user: {my_user}, password: "{my_password}", schema: tt{run}{tag}s, checkpoint_schema: tt{run}{tag}s, connect_timeout_secs: 5 }}
      - type: mysql
        config: {{ id: my_log, host: 127.0.0.1, port: {my}, user: {my_user}, password: "{my_password}", mode: changelog, schema: tt{run}{tag}l, checkpoint_schema: tt{run}{tag}l, connect_timeout_secs: 5 }}
      - type: s3
        config: {{ id: s3, bucket: {bucket}, endpoint: "http://127.0.0.1:{s3}", path_style: true, access_key_id: {access}, secret_access_key: {secret}, prefix: tt{run}{tag}, max_file_events: 20000, max_file_age_secs: 5, timeout_secs: 5 }}
"#,
        brokers = env.get("SLUICE_TEST_KAFKA_BROKERS")?,
        pg = port("pg_sinks"),
        database = DATABASE,
        pg_user = env.get("SLUICE_TEST_PG_USER")?,
        pg_password = env.get("SLUICE_TEST_PG_PASSWORD")?,
        my = port("mariadb"),
        my_user = env.get("SLUICE_TEST_MY_USER")?,
        my_password = env.get("SLUICE_TEST_MY_PASSWORD")?,
        redis = port("redis"),
        nats = port("nats"),
        http = port("http"),
        http_slow = port("http_slow"),
        s3 = port("s3"),
        bucket = env.get("SLUICE_TEST_S3_BUCKET")?,
        access = env.get("SLUICE_TEST_S3_ACCESS_KEY")?,
        secret = env.get("SLUICE_TEST_S3_SECRET_KEY")?,
    ))
}

/// The sinks a fleet's pipelines lack.
const FLEET_LACKS: [&str; 2] = ["file", "kafka_rb"];

/// The sink ids of each pipeline, as in [`sinks`].
const SINK_IDS: [&str; 13] = [
    "file",
    "kafka_eos",
    "kafka_alo",
    "kafka_rb",
    "redis",
    "nats",
    "http",
    "http_slow",
    "pg_log",
    "my_log",
    "pg_apply",
    "my_apply",
    "s3",
];

/// The highest checkpoint each key reached, from the checkpointer's log
/// lines, read on from where the last call stopped.
#[derive(Default)]
struct Checkpoints {
    read_to: u64,
    highest: std::collections::HashMap<String, (u64, u64)>,
}

impl Checkpoints {
    fn read(&mut self, log: &std::path::Path) -> anyhow::Result<()> {
        use std::io::{Read, Seek};
        let mut file = std::fs::File::open(log)?;
        file.seek(std::io::SeekFrom::Start(self.read_to))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        // Only whole lines; a partial last line is read next time.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.read_to += whole as u64;
        for line in text[..whole].lines().filter(|l| l.contains("checkpoint stored")) {
            let field = |name: &str| line.split(name).nth(1).and_then(|rest| rest.split_whitespace().next());
            let (Some(key), Some(position)) = (field(" key="), field(" position=")) else { continue };
            // my:FILE:OFFSET:SEQ[:GTID]
            let mut parts = position.strip_prefix("my:").unwrap_or_default().split(':');
            let (Some(file), Some(Ok(offset))) = (parts.next(), parts.next().map(str::parse::<u64>)) else { continue };
            let at = (sluice_core::binlog_file_index(file), offset);
            let best = self.highest.entry(key.to_string()).or_insert(at);
            *best = (*best).max(at);
        }
        Ok(())
    }

    fn of(&self, key: &str) -> Option<(u64, u64)> {
        self.highest.get(key).copied()
    }
}

/// The source id of a kind's pipeline.
pub fn source_id(run: &str, kind: Kind) -> String {
    format!("torture{run}{}", kind.tag())
}

impl Setup {
    /// `fleet`: how many `sluice run --fleet` instances share the
    /// pipelines, or 0 for one `sluice run`.
    pub async fn start(env: &Env, run_id: &str, sluice: PathBuf, fleet: usize) -> anyhow::Result<Self> {
        let (pg_id, my_id) = (source_id(run_id, Kind::Postgres), source_id(run_id, Kind::MariaDb));
        let pg_version = crate::workload::prepare_postgres(env, DATABASE, &pg_id).await?;
        // Heartbeats ride on logical decoding messages, which pgoutput
        // sends from 14 on.
        let pg_heartbeat = if pg_version >= 140_000 { ", heartbeat_secs: 1" } else { "" };
        // The standby, reached directly: the failover does not go
        // through the proxy, which keeps pointing at the old primary.
        let pg_standby = env
            .postgres_standby_port()
            .map(|port| format!(", failover_hosts: [\"127.0.0.1:{port}\"]"))
            .unwrap_or_default();
        let (binlog_file, binlog_offset) = crate::workload::prepare_mariadb(env, DATABASE).await?;
        let receiver = Receiver::start();
        let server =
            |host: &str, port: &str| -> anyhow::Result<String> { Ok(format!("{}:{}", env.get(host)?, env.get(port)?)) };
        let proxies = vec![
            // The source's server, and the database sinks' (the same
            // one unless the source is a failover pair).
            Proxy::start("postgres", format!("{}:{}", env.get("SLUICE_TEST_PG_HOST")?, env.postgres_source_port()?))
                .await?,
            Proxy::start("pg_sinks", server("SLUICE_TEST_PG_HOST", "SLUICE_TEST_PG_PORT")?).await?,
            // A fleet's checkpoint store and leases, on the sinks' server:
            // cutting or stalling it is a store outage.
            Proxy::start("store", server("SLUICE_TEST_PG_HOST", "SLUICE_TEST_PG_PORT")?).await?,
            Proxy::start("mariadb", server("SLUICE_TEST_MY_HOST", "SLUICE_TEST_MY_PORT")?).await?,
            Proxy::start("redis", host_port(&env.get("SLUICE_TEST_REDIS_URL")?)).await?,
            Proxy::start("nats", host_port(&env.get("SLUICE_TEST_NATS_URL")?)).await?,
            Proxy::start("s3", host_port(&env.get("SLUICE_TEST_S3_ENDPOINT")?)).await?,
            Proxy::start("http", receiver.addr.to_string()).await?,
            // The optional webhook, which the chaos makes slow for a while.
            Proxy::start("http_slow", receiver.addr.to_string()).await?,
        ];
        let port = |name: &str| proxies.iter().find(|p| p.name == name).map_or(0, |p| p.port);
        let dir = std::env::temp_dir().join(format!("sluice-torture-{run_id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let store = if fleet > 0 {
            format!(
                "store: {{ type: postgres, config: {{ host: 127.0.0.1, port: {}, database: {DATABASE}, user: {}, password: \"{}\", ssl_mode: disable, schema: tt{run_id}store, connect_timeout_secs: 5 }} }}\n",
                port("store"),
                env.get("SLUICE_TEST_PG_USER")?,
                env.get("SLUICE_TEST_PG_PASSWORD")?,
            )
        } else {
            String::new()
        };
        let config = format!(
            r#"{store}pipelines:
  - name: torture{run_id}pg
    source:
      type: postgres
      config: {{ id: {pg_id}, host: 127.0.0.1, port: {pg}, database: {DATABASE}, user: {pg_user}, password: "{pg_password}", ssl_mode: disable, status_interval_secs: 1{pg_heartbeat}{pg_standby}, tables: [public.t1, public.t2, public.t3, public.tx_log] }}
    sink_batch_deadline_secs: 20
{TRANSFORMS}{pg_sinks}  - name: torture{run_id}my
    source:
      type: mysql
      config: {{ id: {my_id}, host: 127.0.0.1, port: {my}, user: {my_user}, password: "{my_password}", tables: [{DATABASE}.t1, {DATABASE}.t2, {DATABASE}.t3, {DATABASE}.tx_log], gtid: true, start: {{ file: {binlog_file}, offset: {binlog_offset} }}, heartbeat_secs: 1 }}
    sink_batch_deadline_secs: 20
{TRANSFORMS}{my_sinks}"#,
            pg = port("postgres"),
            pg_user = env.get("SLUICE_TEST_PG_USER")?,
            pg_password = env.get("SLUICE_TEST_PG_PASSWORD")?,
            pg_sinks = sinks(env, run_id, Kind::Postgres, port, fleet > 0)?,
            my = port("mariadb"),
            my_user = env.get("SLUICE_TEST_MY_USER")?,
            my_password = env.get("SLUICE_TEST_MY_PASSWORD")?,
            my_sinks = sinks(env, run_id, Kind::MariaDb, port, fleet > 0)?,
        );
        let config_path = dir.join("torture.yaml");
        std::fs::write(&config_path, config)?;
        let instances = Instances::start(sluice.clone(), config_path.clone(), dir.clone(), fleet)?;
        Ok(Setup { run_id: run_id.to_string(), proxies, receiver, dir, config: config_path, sluice, instances })
    }

    /// The sink ids of each pipeline.
    fn sink_ids(&self) -> Vec<&'static str> {
        let fleet = self.instances.is_fleet();
        SINK_IDS.iter().copied().filter(|id| !fleet || !FLEET_LACKS.contains(id)).collect()
    }

    /// How many changes of `kind` a required sink holds now: the file
    /// sink, or in a fleet (which has none) the webhook, each change once.
    pub fn required_changes(&self, kind: Kind) -> usize {
        if self.instances.is_fleet() {
            let changes = readers::http(&self.receiver, &source_id(&self.run_id, kind), &format!("/{}", kind.tag()));
            return changes.iter().map(|c| c.change).collect::<std::collections::HashSet<_>>().len();
        }
        readers::file(&self.dir.join(format!("out-{}.jsonl", kind.tag()))).len()
    }

    /// Waits until every sink of both pipelines holds everything the
    /// workload committed (or `limit`), then stops Sluice.
    ///
    /// PostgreSQL: the slot's acknowledged position passes the WAL end of
    /// this moment. Sluice acknowledges the slot only up to what every sink
    /// has made durable, and with `heartbeat_secs` past the last commit once
    /// all of it is. MariaDB has no slot: `binlog_end` is where the
    /// workload's last transaction began, and every MariaDB sink's stored
    /// checkpoint must reach it (the checkpointer logs each one). Asking
    /// costs nothing, where reading every sink again and again took the CPU
    /// Sluice needed to catch up.
    pub async fn drain(&mut self, env: &Env, binlog_end: (String, u64), limit: Duration) -> anyhow::Result<()> {
        let db = Db::source(env, Kind::Postgres, DATABASE)?;
        let end = db.value("SELECT pg_current_wal_lsn()").await?.context("no WAL position")?;
        let query = format!(
            "SELECT pg_wal_lsn_diff('{end}', confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name = 'sluice_{}'",
            source_id(&self.run_id, Kind::Postgres)
        );
        let binlog_target = (sluice_core::binlog_file_index(&binlog_end.0), binlog_end.1);
        let my_prefix = format!("{}::sink::", source_id(&self.run_id, Kind::MariaDb));
        let mut checkpoints = Checkpoints::default();
        let start = Instant::now();
        let mut said = Instant::now();
        loop {
            self.instances.keep_running()?;
            let behind: f64 = db.value(&query).await?.and_then(|b| b.parse().ok()).context("the slot is gone")?;
            checkpoints.read(&self.instances.log())?;
            let my_behind: Vec<&str> = self
                .sink_ids()
                .iter()
                .filter(|id| checkpoints.of(&format!("{my_prefix}{id}")).is_none_or(|at| at < binlog_target))
                .copied()
                .collect();
            if behind <= 0.0 && my_behind.is_empty() {
                println!(
                    "torture: drained in {:.0} s: the slot is acknowledged past {end}, every MariaDB sink's checkpoint past {}:{}",
                    start.elapsed().as_secs_f64(),
                    binlog_end.0,
                    binlog_end.1
                );
                break;
            }
            let status = format!(
                "the slot is {:.1} MB before {end}; MariaDB sinks short of {}:{}: {}",
                behind.max(0.0) / 1e6,
                binlog_end.0,
                binlog_end.1,
                if my_behind.is_empty() { "none".to_string() } else { my_behind.join(", ") }
            );
            if start.elapsed() > limit {
                println!("torture: drain timed out after {limit:?}: {status}");
                break;
            }
            if said.elapsed() > Duration::from_secs(15) {
                println!("torture: draining: {status}");
                said = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.instances.stop()
    }

    /// Removes the run's folder after a pass; keeps it, and says where,
    /// after a failure.
    pub fn finish(&self, passed: bool) {
        if passed {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            println!("torture: the run's config, log and file sink output are in {}", self.dir.display());
        }
    }

    /// What every sink of both pipelines holds.
    pub async fn read_all(&self, env: &Env) -> anyhow::Result<Vec<Held>> {
        let guarantees = self.guarantees()?;
        let mut held = Vec::new();
        for kind in [Kind::Postgres, Kind::MariaDb] {
            let (run, tag, schema) = (&self.run_id, kind.tag(), kind.schema());
            let names = |pattern: &str| -> Vec<String> {
                TABLES.iter().map(|t| pattern.replace("{table}", &format!("{schema}.{t}"))).collect()
            };
            let brokers = env.get("SLUICE_TEST_KAFKA_BROKERS")?;
            let kafka = |topics: Vec<String>, isolation: &'static str| {
                let brokers = brokers.clone();
                tokio::task::spawn_blocking(move || readers::kafka(&brokers, &topics, isolation))
            };
            let eos = kafka(names(&format!("tt{run}{tag}e.{{table}}")), "read_committed").await??;
            let alo = kafka(names(&format!("tt{run}{tag}a.{{table}}")), "read_committed").await??;
            // Read-back promises exactly-once to every consumer, even one
            // that reads what no transaction committed.
            let read_back = if self.instances.is_fleet() {
                Vec::new()
            } else {
                kafka(names(&format!("tt{run}{tag}r.{{table}}")), "read_uncommitted").await??
            };
            let mut sources = vec![
                ("file", readers::file(&self.dir.join(format!("out-{tag}.jsonl")))),
                ("kafka_eos", eos),
                ("kafka_alo", alo),
                ("kafka_rb", read_back),
                ("redis", readers::redis(env, &names(&format!("tt{run}{tag}:{{table}}"))).await?),
                ("nats", readers::nats(env, &format!("TT{run}{tag}")).await?),
                ("http", readers::http(&self.receiver, &source_id(run, kind), &format!("/{tag}"))),
                ("http_slow", readers::http(&self.receiver, &source_id(run, kind), &format!("/{tag}slow"))),
                (
                    "pg_log",
                    readers::changelog(&Db::new(env, Kind::Postgres, DATABASE)?, &format!("tt{run}{tag}l")).await?,
                ),
                ("my_log", readers::changelog(&Db::new(env, Kind::MariaDb, "")?, &format!("tt{run}{tag}l")).await?),
                ("s3", readers::s3(env, &format!("tt{run}{tag}")).await?),
            ];
            if self.instances.is_fleet() {
                sources.retain(|(sink, _)| !FLEET_LACKS.contains(sink));
            }
            for (sink, changes) in sources {
                let guarantee = guarantees.iter().find(|(s, _)| s == sink).map(|(_, g)| g.clone()).unwrap_or_default();
                held.push(Held { source: kind, sink: sink.to_string(), guarantee, changes });
            }
        }
        Ok(held)
    }

    /// The rows (id → change number) the apply-mode database sinks hold,
    /// per table: what the final state is compared by.
    pub async fn final_states(&self, env: &Env) -> anyhow::Result<Vec<(Kind, &'static str, Vec<Rows>)>> {
        let mut states = Vec::new();
        for kind in [Kind::Postgres, Kind::MariaDb] {
            let schema = format!("tt{}{}s", self.run_id, kind.tag());
            let targets = [
                ("pg_apply", Db::new(env, Kind::Postgres, DATABASE)?, format!("\"{schema}\".")),
                ("my_apply", Db::new(env, Kind::MariaDb, "")?, format!("`{schema}`.")),
            ];
            for (sink, db, prefix) in targets {
                let mut tables = Vec::new();
                for table in TABLES {
                    // A row whose note is in the clear, or not marked by the
                    // script, counts as missing.
                    let hashed = match kind_of(sink) {
                        Kind::Postgres => "note ~ '^v:[0-9a-f]{64}$'",
                        Kind::MariaDb => "note REGEXP '^v:[0-9a-f]{64}$'",
                    };
                    let query = format!("SELECT id, change_no FROM {prefix}{table} WHERE {hashed}");
                    let rows = db.rows(&query).await.unwrap_or_default();
                    let number = |v: &Option<String>| v.as_deref().and_then(|t| t.parse::<i64>().ok()).unwrap_or(-1);
                    tables.push(rows.iter().map(|r| (number(&r[0]), number(&r[1]))).collect());
                }
                states.push((kind, sink, tables));
            }
        }
        Ok(states)
    }

    /// Each sink's declared guarantee, as `sluice validate` prints it.
    fn guarantees(&self) -> anyhow::Result<Vec<(String, String)>> {
        let output = Command::new(&self.sluice)
            .args(["validate", "-c"])
            .arg(&self.config)
            .env("TORTURE_MASK_SALT", MASK_SALT)
            .output()?;
        // Without the guarantees no duplicate would count against a sink.
        anyhow::ensure!(output.status.success(), "sluice validate failed: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8_lossy(&output.stdout);
        let mut found = Vec::new();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let Some(at) = words.iter().position(|w| *w == "yes" || *w == "no")
                && at >= 2
            {
                found.push((words[at - 2].to_string(), words[at + 1..].join(" ")));
            }
        }
        Ok(found)
    }
}
