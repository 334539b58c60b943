//! `sluice-torture`: runs a write workload on PostgreSQL and on MariaDB,
//! through one Sluice pipeline each into every sink (with a filter that
//! drops one table, a mask that hashes one column and a VRL script that
//! marks the hash), while killing
//! Sluice, pausing sink servers, cutting and stalling connections and
//! restarting the databases at random; then drains and compares, sink by sink, what each holds with what the
//! database committed. Exits 1 if any sink lost an event or an exactly-once
//! sink holds a duplicate. A run replays from its `--seed`.

mod chaos;
mod db;
mod instances;
mod pipeline;
mod proxy;
mod readers;
#[path = "../../sluice/tests/common/receiver.rs"]
#[allow(dead_code)]
mod receiver;
mod report;
mod rng;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use db::Kind;

#[derive(Debug, Parser)]
#[command(about = "Crash, outage and network torture of every sink, compared event by event")]
struct Args {
    /// How long the workload and the chaos run before the drain.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// Replays a run; default: from the clock (printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The sluice binary; default: target/release/sluice, else target/debug/sluice.
    #[arg(long)]
    sluice: Option<PathBuf>,
    /// The workload's pace, in committed changes per second on average
    /// (a very large transaction is followed by a quiet spell).
    #[arg(long, default_value_t = 2_000)]
    changes_per_sec: u64,
    /// How long the drain may take before the run is judged as it stands.
    #[arg(long, default_value_t = 600)]
    drain_limit_secs: u64,
    /// Average seconds between two chaos actions.
    #[arg(long, default_value_t = 4)]
    chaos_every_secs: u64,
    /// The PostgreSQL major the PostgreSQL pipeline reads (and its database
    /// sinks write to): one the services script runs beside the main 15.
    #[arg(long)]
    postgres_major: Option<u32>,
    /// The PostgreSQL pipeline reads a primary and a standby of
    /// --postgres-major (17 or later), and the chaos promotes the standby
    /// once, after its copy of the slot has synced.
    #[arg(long, requires = "postgres_major")]
    failover: bool,
    /// Runs N `sluice run --fleet` instances sharing the pipelines through
    /// the PostgreSQL store (no file sink then); kills and stalls go to
    /// random instances, and the store's connections go through a proxy
    /// the chaos cuts and stalls.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(2..=8))]
    fleet: Option<u16>,
}

/// The private services' settings, from the env file the services script writes.
pub struct Env(HashMap<String, String>);

impl Env {
    pub fn get(&self, name: &str) -> anyhow::Result<String> {
        self.0.get(name).cloned().with_context(|| format!("{name} is missing from the services env file"))
    }

    /// Points the PostgreSQL settings at the server of another major: its
    /// port, and its folder, where `services.sh restart-postgres` finds it.
    fn use_postgres_major(&mut self, major: u32) -> anyhow::Result<()> {
        let port = self.get(&format!("SLUICE_TEST_PG{major}_PORT")).with_context(|| {
            format!(
                "PostgreSQL {major} is not among the servers: {}",
                self.0.get("SLUICE_TEST_PG_MAJORS").map_or("", |m| m)
            )
        })?;
        let main = PathBuf::from(self.get("SLUICE_TEST_PG_SOCKET")?);
        let folder = main.with_file_name(format!("postgres-{major}"));
        self.0.insert("SLUICE_TEST_PG_PORT".into(), port);
        self.0.insert("SLUICE_TEST_PG_SOCKET".into(), folder.display().to_string());
        Ok(())
    }

    /// The PostgreSQL pipeline reads a fresh primary and standby of
    /// `major` (`services.sh pg-pair`), which the chaos fails over once;
    /// the database sinks still write to the services' server.
    fn use_postgres_pair(&mut self, major: u32) -> anyhow::Result<()> {
        anyhow::ensure!(major >= 17, "--failover needs PostgreSQL 17 or later (failover slots), not {major}");
        let script = repo_root().join("scripts/services.sh");
        let output = std::process::Command::new("bash").arg(&script).args(["pg-pair", &major.to_string()]).output()?;
        if !output.status.success() {
            bail!("services.sh pg-pair {major} failed:\n{}", String::from_utf8_lossy(&output.stderr));
        }
        let ports = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let (primary, standby) = ports.split_once(' ').with_context(|| format!("pg-pair printed {ports:?}"))?;
        self.0.insert(SOURCE_PORT.into(), primary.into());
        self.0.insert(STANDBY_PORT.into(), standby.into());
        Ok(())
    }

    /// The port of the PostgreSQL server the workload writes to.
    pub fn postgres_source_port(&self) -> anyhow::Result<u16> {
        let port = self.0.get(SOURCE_PORT).cloned().map_or_else(|| self.get("SLUICE_TEST_PG_PORT"), Ok)?;
        Ok(port.parse()?)
    }

    /// The standby of the failover pair, while it has not been promoted.
    pub fn postgres_standby_port(&self) -> Option<u16> {
        self.0.get(STANDBY_PORT).and_then(|p| p.parse().ok())
    }

    /// After the failover: the standby is the source's primary.
    pub fn promoted(&mut self) {
        if let Some(standby) = self.0.remove(STANDBY_PORT) {
            self.0.insert(SOURCE_PORT.into(), standby);
        }
    }
}

/// Where the failover pair's primary and standby listen, when there is one.
const SOURCE_PORT: &str = "TORTURE_PG_SOURCE_PORT";
const STANDBY_PORT: &str = "TORTURE_PG_STANDBY_PORT";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Starts the test services (or finds them running) and reads their env file.
fn services() -> anyhow::Result<Env> {
    let script = repo_root().join("scripts/services.sh");
    let output = std::process::Command::new("bash").arg(&script).arg("start").output()?;
    if !output.status.success() {
        bail!("{} start failed:\n{}", script.display(), String::from_utf8_lossy(&output.stderr));
    }
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let vars = text
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(Env(vars))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("torture: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("torture: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("torture: seed {seed} (replay with --seed {seed})");
    let sluice = match args.sluice {
        Some(path) => path,
        None => ["release", "debug"]
            .iter()
            .map(|p| repo_root().join("target").join(p).join("sluice"))
            .find(|p| p.exists())
            .context("no sluice binary; build one, or pass --sluice")?,
    };
    let sluice = std::fs::canonicalize(&sluice).with_context(|| format!("{}", sluice.display()))?;
    let mut env = services()?;
    if let Some(major) = args.postgres_major {
        env.use_postgres_major(major)?;
        if args.failover {
            env.use_postgres_pair(major)?;
        }
        let pair = if args.failover { ", a primary and a standby it fails over to" } else { "" };
        println!("torture: the PostgreSQL pipeline reads PostgreSQL {major}{pair}");
    }
    let run_id = format!("{}", seed % 1_000_000_000);
    let fleet = usize::from(args.fleet.unwrap_or(0));
    if fleet > 0 {
        println!("torture: {fleet} sluice run --fleet instances share the pipelines");
    }
    let mut setup = pipeline::Setup::start(&env, &run_id, sluice, fleet).await?;
    let mut workloads = [
        (workload::Workload::new(&env, Kind::Postgres, db::DATABASE, seed)?, None),
        (workload::Workload::new(&env, Kind::MariaDb, db::DATABASE, seed ^ 0x3a1e)?, None),
    ];
    let started = Instant::now();
    let run = Duration::from_secs_f64(args.minutes * 60.0);
    let end = started + run;
    // The failover, a third of the way in: time for trouble before and after.
    let failover_at = args.failover.then(|| started + run / 3);
    let mut chaos = chaos::Chaos::new(seed ^ 0x5eed, args.chaos_every_secs, failover_at);
    let mut rng = rng::Rng::new(seed ^ 0xbeef);
    // Each database gets half the pace.
    let pace = args.changes_per_sec.max(2) as f64 / 2.0;
    while Instant::now() < end {
        for (workload, conn) in &mut workloads {
            if started.elapsed() >= Duration::from_secs_f64(workload.committed.len() as f64 / pace) {
                workload.step(conn).await?;
            }
        }
        let committed = [workloads[0].0.committed.len(), workloads[1].0.committed.len()];
        if chaos.maybe_act(&mut env, &mut setup, committed).await? {
            // The old primary is gone: the workload writes to the new one.
            let (pg, conn) = &mut workloads[0];
            pg.retarget(&env)?;
            *conn = None;
        }
        setup.instances.keep_running()?;
        tokio::time::sleep(Duration::from_millis(rng.range(1, 5))).await;
    }
    chaos.calm(&mut setup);
    // MariaDB has no slot to follow: one more transaction, written after
    // this binlog position, marks how far every MariaDB sink must get.
    let [(pg, _), (my, my_conn)] = &mut workloads;
    let binlog_end = workload::binlog_end(my.db()).await?;
    let done = my.transactions;
    while my.transactions == done {
        my.step(my_conn).await?;
    }
    for (kind, workload) in [(Kind::Postgres, &*pg), (Kind::MariaDb, &*my)] {
        println!(
            "torture: {kind:?} workload done: {} transactions, {} changes, {} commits in doubt resolved",
            workload.transactions,
            workload.committed.len(),
            workload.in_doubt_resolved,
        );
    }
    println!("torture: chaos: {} kills, {}", setup.instances.kills, chaos.summary());
    setup.drain(&env, binlog_end, Duration::from_secs(args.drain_limit_secs)).await?;
    let held = setup.read_all(&env).await?;
    let states = setup.final_states(&env).await?;
    let [(pg, _), (my, _)] = workloads;
    let finals = [(Kind::Postgres, pg.rows().to_vec()), (Kind::MariaDb, my.rows().to_vec())];
    let expected = [(Kind::Postgres, pg.committed), (Kind::MariaDb, my.committed)];
    let mut passed = report::print(&expected, &held);
    passed &= report::final_states(&finals, &states);
    if args.failover && chaos.failovers == 0 {
        println!("torture: FAILED: no failover: the standby never had a synced copy of the slot");
        passed = false;
    }
    match &chaos.slow_outcome {
        Some(Ok(shown)) => println!("torture: delivery went on through the slow spell: {shown}"),
        Some(Err(shown)) => {
            println!("torture: FAILED: a slow optional sink held the required ones back: {shown}");
            passed = false;
        }
        None => println!("torture: the run was too short for the optional webhook's slow spell"),
    }
    println!("torture: {}", if passed { "PASS" } else { "FAIL" });
    setup.finish(passed);
    Ok(passed)
}
