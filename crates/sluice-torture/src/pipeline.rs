//! The pipeline under torture: proxies in front of the servers, the
//! webhook receiver, the config with every sink, and the `sluice` process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::proxy::Proxy;
use crate::receiver::Receiver;
use crate::workload::{Change, TABLES};
use crate::{Env, readers};

pub const DATABASE: &str = "torture";

/// One sink under test: its id and what it holds.
pub struct Held {
    pub sink: String,
    pub guarantee: String,
    pub changes: Vec<Change>,
}

pub struct Setup {
    pub run_id: String,
    source_id: String,
    pub proxies: Vec<Proxy>,
    receiver: Receiver,
    dir: PathBuf,
    config: PathBuf,
    sluice: PathBuf,
    child: Option<Child>,
    pub kills: u64,
}

fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

impl Setup {
    pub async fn start(env: &Env, run_id: &str, sluice: PathBuf) -> anyhow::Result<Self> {
        let source_id = format!("torture{run_id}");
        crate::workload::prepare(env, DATABASE, &source_id).await?;
        let receiver = Receiver::start();
        let pg = format!("{}:{}", env.get("SLUICE_TEST_PG_HOST")?, env.get("SLUICE_TEST_PG_PORT")?);
        let proxies = vec![
            Proxy::start("postgres", pg).await?,
            Proxy::start("redis", host_port(&env.get("SLUICE_TEST_REDIS_URL")?)).await?,
            Proxy::start("nats", host_port(&env.get("SLUICE_TEST_NATS_URL")?)).await?,
            Proxy::start("s3", host_port(&env.get("SLUICE_TEST_S3_ENDPOINT")?)).await?,
            Proxy::start("http", receiver.addr.to_string()).await?,
        ];
        let port = |name: &str| proxies.iter().find(|p| p.name == name).map_or(0, |p| p.port);
        let dir = std::env::temp_dir().join(format!("sluice-torture-{run_id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let config = format!(
            r#"pipelines:
  - name: torture{run_id}
    source:
      type: postgres
      config: {{ id: {source_id}, host: 127.0.0.1, port: {pg}, database: {DATABASE}, user: {user}, password: "{password}", ssl_mode: disable, status_interval_secs: 1, heartbeat_secs: 1, tables: [public.t1, public.t2, public.t3] }}
    sink_batch_deadline_secs: 20
    sinks:
      - type: file
        config: {{ id: file, path: out.jsonl }}
      - type: kafka
        config: {{ id: kafka_eos, brokers: "{brokers}", topic: "tt{run_id}e.${{table}}", exactly_once: true, timeout_secs: 10 }}
      - type: kafka
        config: {{ id: kafka_alo, brokers: "{brokers}", topic: "tt{run_id}a.${{table}}", timeout_secs: 10 }}
      - type: redis
        config: {{ id: redis, url: "redis://127.0.0.1:{redis}/0", stream: "tt{run_id}:${{table}}", timeout_secs: 5 }}
      - type: nats
        config: {{ id: nats, url: "nats://127.0.0.1:{nats}", stream: TT{run_id}, subject: "tt{run_id}.${{table}}", stream_subjects: ["tt{run_id}.>"], timeout_secs: 5 }}
      - type: http
        config: {{ id: http, url: "http://127.0.0.1:{http}/hook", mode: batch, batch_max_events: 200, timeout_secs: 5 }}
      - type: s3
        config: {{ id: s3, bucket: {bucket}, endpoint: "http://127.0.0.1:{s3}", path_style: true, access_key_id: {access}, secret_access_key: {secret}, prefix: tt{run_id}, max_file_events: 20000, max_file_age_secs: 5, timeout_secs: 5 }}
"#,
            pg = port("postgres"),
            user = env.get("SLUICE_TEST_PG_USER")?,
            password = env.get("SLUICE_TEST_PG_PASSWORD")?,
            brokers = env.get("SLUICE_TEST_KAFKA_BROKERS")?,
            redis = port("redis"),
            nats = port("nats"),
            http = port("http"),
            s3 = port("s3"),
            bucket = env.get("SLUICE_TEST_S3_BUCKET")?,
            access = env.get("SLUICE_TEST_S3_ACCESS_KEY")?,
            secret = env.get("SLUICE_TEST_S3_SECRET_KEY")?,
        );
        let config_path = dir.join("torture.yaml");
        std::fs::write(&config_path, config)?;
        let mut setup = Setup {
            run_id: run_id.to_string(),
            source_id,
            proxies,
            receiver,
            dir,
            config: config_path,
            sluice,
            child: None,
            kills: 0,
        };
        setup.spawn()?;
        Ok(setup)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("sluice.log"))?;
        let child = Command::new(&self.sluice)
            .args(["run", "-c"])
            .arg(&self.config)
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.sluice.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
            self.kills += 1;
        }
        self.spawn()
    }

    /// Restarts Sluice if it exited; an exit is a failure of the run
    /// unless it was a clean one (which it never should be mid-run).
    pub fn keep_running(&mut self) -> anyhow::Result<()> {
        let Some(child) = self.child.as_mut() else { return self.spawn() };
        if let Some(status) = child.try_wait()? {
            bail!("sluice exited by itself ({status}); see {}", self.dir.join("sluice.log").display());
        }
        Ok(())
    }

    /// Waits until the slot's acknowledged position passes the WAL end
    /// at the time the workload stopped (or `limit`), then stops Sluice.
    /// Sluice acknowledges the slot only up to what every sink has made
    /// durable, and with `heartbeat_secs` past the last commit once all
    /// of it is; so then every sink holds every committed change. Asking
    /// PostgreSQL costs nothing, where reading every sink again and again
    /// took the CPU Sluice needed to catch up.
    pub async fn drain(&mut self, env: &Env, limit: Duration) -> anyhow::Result<()> {
        let db = crate::workload::params(env, DATABASE)?;
        let end = crate::workload::execute(&db, "SELECT pg_current_wal_lsn() AS lsn").await?;
        let end = end.first("lsn").context("no WAL position")?.to_string();
        let query = format!(
            "SELECT pg_wal_lsn_diff('{end}', confirmed_flush_lsn) AS behind FROM pg_replication_slots \
             WHERE slot_name = 'sluice_{}'",
            self.source_id
        );
        let start = Instant::now();
        let mut said = Instant::now();
        loop {
            self.keep_running()?;
            let rows = crate::workload::execute(&db, &query).await?;
            let behind: f64 = rows.first("behind").and_then(|b| b.parse().ok()).context("the slot is gone")?;
            if behind <= 0.0 {
                println!(
                    "torture: drained in {:.0} s: the slot is acknowledged past {end}",
                    start.elapsed().as_secs_f64()
                );
                break;
            }
            if start.elapsed() > limit {
                println!("torture: drain timed out after {limit:?}: the slot is still {behind} bytes before {end}");
                break;
            }
            if said.elapsed() > Duration::from_secs(15) {
                println!("torture: draining: the slot is {:.1} MB before {end}", behind / 1e6);
                said = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            child.wait()?;
        }
        Ok(())
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

    pub async fn read_all(&self, env: &Env) -> anyhow::Result<Vec<Held>> {
        let run = &self.run_id;
        let topics =
            |mode: char| -> Vec<String> { TABLES.iter().map(|t| format!("tt{run}{mode}.public.{t}")).collect() };
        let streams: Vec<String> = TABLES.iter().map(|t| format!("tt{run}:public.{t}")).collect();
        let guarantees = self.guarantees()?;
        let guarantee =
            |sink: &str| guarantees.iter().find(|(s, _)| s == sink).map(|(_, g)| g.clone()).unwrap_or_default();
        let brokers = env.get("SLUICE_TEST_KAFKA_BROKERS")?;
        let kafka = |topics: Vec<String>| {
            let brokers = brokers.clone();
            tokio::task::spawn_blocking(move || readers::kafka(&brokers, &topics))
        };
        let (eos, alo) = (kafka(topics('e')).await??, kafka(topics('a')).await??);
        let mut held = vec![
            Held {
                sink: "file".into(),
                guarantee: guarantee("file"),
                changes: readers::file(&self.dir.join("out.jsonl")),
            },
            Held { sink: "kafka_eos".into(), guarantee: guarantee("kafka_eos"), changes: eos },
            Held { sink: "kafka_alo".into(), guarantee: guarantee("kafka_alo"), changes: alo },
            Held { sink: "redis".into(), guarantee: guarantee("redis"), changes: readers::redis(env, &streams).await? },
            Held {
                sink: "nats".into(),
                guarantee: guarantee("nats"),
                changes: readers::nats(env, &format!("TT{run}")).await?,
            },
            Held { sink: "http".into(), guarantee: guarantee("http"), changes: readers::http(&self.receiver) },
        ];
        held.push(Held {
            sink: "s3".into(),
            guarantee: guarantee("s3"),
            changes: readers::s3(env, &format!("tt{run}")).await?,
        });
        Ok(held)
    }

    /// Each sink's declared guarantee, as `sluice validate` prints it.
    fn guarantees(&self) -> anyhow::Result<Vec<(String, String)>> {
        let output = Command::new(&self.sluice).args(["validate", "-c"]).arg(&self.config).output()?;
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
