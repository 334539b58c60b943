//! The random trouble: kill -9 and restart Sluice (in a fleet, one of its
//! instances, or stop one past its leases and wake it), pause a sink's server,
//! cut or stall the connections through a proxy, restart PostgreSQL or
//! MariaDB. With a failover pair, once per run the primary crashes and the
//! standby is promoted, as soon as the standby holds a synced copy of the
//! slot (before, a failover loses the slot by design). And once per run, a slow spell of the optional webhook: its
//! connections stall for 30 s while nothing else goes wrong, and by the end
//! of it the required file sink must hold everything committed before it
//! began. A quiet stretch comes first, so what earlier trouble left behind
//! (a required sink's write hung on a cut connection until its deadline)
//! is not blamed on the webhook.

use std::time::{Duration, Instant};

use crate::Env;
use crate::db::{Db, Kind};
use crate::pipeline::Setup;
use crate::rng::Rng;

/// Servers that can be paused, by the env name of their PID file.
const PAUSABLE: [(&str, &str); 4] = [
    ("redis", "SLUICE_TEST_REDIS_PID_FILE"),
    ("nats", "SLUICE_TEST_NATS_PID_FILE"),
    ("s3", "SLUICE_TEST_S3_PID_FILE"),
    ("kafka", "SLUICE_TEST_KAFKA_PID_FILE"),
];

pub struct Chaos {
    rng: Rng,
    every: Duration,
    next: Instant,
    /// A paused server: its PID file and when to resume it.
    paused: Option<(String, Instant)>,
    pub pauses: u64,
    pub cuts: u64,
    pub stalls: u64,
    pub pg_restarts: u64,
    pub my_restarts: u64,
    /// A fleet's instance stopped (SIGSTOP) past its leases: its process
    /// id, and when to wake it.
    frozen: Option<(u32, Instant)>,
    pub freezes: u64,
    /// When a fleet's first instance stop is due, so even a short run
    /// has a zombie.
    first_freeze_at: Instant,
    /// When the slow spell may start, until it has.
    slow_at: Option<Instant>,
    /// When the last trouble was made or ended.
    last_trouble: Instant,
    /// The spell under way: its end, and the changes of each database
    /// committed when it began.
    slow: Option<(Instant, [usize; 2])>,
    /// What the spell showed; `None` while it has not ended.
    pub slow_outcome: Option<Result<String, String>>,
    /// When the failover pair fails over, until it has.
    failover_at: Option<Instant>,
    /// When to look again whether the standby has synced the slot.
    next_sync_check: Instant,
    pub failovers: u64,
}

/// When a fleet's first instance stop comes, from the first chaos.
const FIRST_FREEZE_AFTER: Duration = Duration::from_secs(10);

/// How long the optional webhook stays slow.
const SLOW_SPELL: Duration = Duration::from_secs(30);
/// When the slow spell may start, from the first chaos.
const SLOW_AFTER: Duration = Duration::from_secs(20);
/// How long nothing goes wrong before the slow spell: longer than a proxy
/// stall (at most 6 s) and the torture config's `sink_batch_deadline_secs`
/// (20 s) together, which bound how long a write hung by earlier trouble
/// can take.
const QUIET_BEFORE_SLOW: Duration = Duration::from_secs(30);

impl Chaos {
    pub fn new(seed: u64, every_secs: u64, failover_at: Option<Instant>) -> Self {
        let every = Duration::from_secs(every_secs.max(1));
        Self {
            rng: Rng::new(seed),
            every,
            next: Instant::now() + every,
            paused: None,
            pauses: 0,
            cuts: 0,
            stalls: 0,
            pg_restarts: 0,
            my_restarts: 0,
            frozen: None,
            freezes: 0,
            first_freeze_at: Instant::now() + FIRST_FREEZE_AFTER,
            slow_at: Some(Instant::now() + SLOW_AFTER),
            last_trouble: Instant::now(),
            slow: None,
            slow_outcome: None,
            failover_at,
            next_sync_check: Instant::now(),
            failovers: 0,
        }
    }

    /// The failover, when it is due and the standby's copy of the slot has
    /// synced: the primary crashes and the standby is promoted. True when
    /// it happened, and the env names the new primary.
    async fn maybe_fail_over(&mut self, env: &mut Env) -> anyhow::Result<bool> {
        let (Some(at), Some(standby)) = (self.failover_at, env.postgres_standby_port()) else { return Ok(false) };
        if Instant::now() < at || Instant::now() < self.next_sync_check || self.slow.is_some() {
            return Ok(false);
        }
        self.next_sync_check = Instant::now() + Duration::from_secs(1);
        // A synced slot stays temporary until the standby has caught up
        // with it, and a promotion drops a temporary one.
        let query = "SELECT count(*) FROM pg_replication_slots WHERE synced AND NOT temporary AND slot_name LIKE 'sluice_torture%'";
        let synced = Db::postgres(env, standby, "postgres")?.value(query).await?;
        if synced.as_deref() != Some("1") {
            return Ok(false);
        }
        let script = crate::repo_root().join("scripts/services.sh");
        let status = std::process::Command::new("bash").arg(script).arg("pg-pair-failover").status()?;
        anyhow::ensure!(status.success(), "scripts/services.sh pg-pair-failover failed");
        env.promoted();
        self.failover_at = None;
        self.failovers += 1;
        self.last_trouble = Instant::now();
        println!("torture: failed over: the standby on port {standby} is the primary");
        Ok(true)
    }

    /// Starts, or judges at its end, the optional webhook's slow spell;
    /// true while it is under way, when no other trouble is made.
    fn slow_spell(&mut self, setup: &mut Setup, committed: [usize; 2]) -> bool {
        if let Some((until, at_start)) = self.slow {
            if Instant::now() < until {
                return true;
            }
            self.slow = None;
            let held = [setup.required_changes(Kind::Postgres), setup.required_changes(Kind::MariaDb)];
            let shown = format!(
                "the required {} held {}/{} (pg) and {}/{} (my) of the changes committed before the webhook's {}-s slow spell",
                if setup.instances.is_fleet() { "webhook" } else { "file sink" },
                held[0],
                at_start[0],
                held[1],
                at_start[1],
                SLOW_SPELL.as_secs()
            );
            self.slow_outcome =
                Some(if held[0] >= at_start[0] && held[1] >= at_start[1] { Ok(shown) } else { Err(shown) });
            return false;
        }
        if self.slow_at.is_some_and(|at| Instant::now() >= at) {
            // No new trouble until the quiet stretch is over.
            if self.paused.is_some() || self.frozen.is_some() || self.last_trouble.elapsed() < QUIET_BEFORE_SLOW {
                return true;
            }
            self.slow_at = None;
            if let Some(proxy) = setup.proxies.iter().find(|p| p.name == "http_slow") {
                proxy.stall(SLOW_SPELL);
                self.slow = Some((Instant::now() + SLOW_SPELL, committed));
                return true;
            }
        }
        false
    }

    /// `committed`: the changes each database (PostgreSQL, MariaDB) has
    /// committed so far.
    /// True when the PostgreSQL source failed over to its standby.
    pub async fn maybe_act(&mut self, env: &mut Env, setup: &mut Setup, committed: [usize; 2]) -> anyhow::Result<bool> {
        if let Some((pid_file, until)) = &self.paused
            && Instant::now() >= *until
        {
            signal(pid_file, "-CONT");
            self.paused = None;
            self.last_trouble = Instant::now();
        }
        if let Some((pid, until)) = self.frozen
            && Instant::now() >= until
        {
            signal_pid(pid, "-CONT");
            self.frozen = None;
            self.last_trouble = Instant::now();
        }
        if self.maybe_fail_over(env).await? {
            return Ok(true);
        }
        if self.slow_spell(setup, committed) || Instant::now() < self.next {
            return Ok(false);
        }
        self.last_trouble = Instant::now();
        let spread = self.every.as_millis() as u64;
        self.next = Instant::now() + Duration::from_millis(self.rng.range(spread / 2, spread * 3 / 2 + 1));
        let first_freeze = self.freezes == 0 && Instant::now() >= self.first_freeze_at;
        match if first_freeze { 30 } else { self.rng.range(0, 100) } {
            // A fleet's instance stalls past its leases (10 s): another
            // takes its pipelines over, and it wakes as a zombie.
            30..=39 if setup.instances.is_fleet() && self.frozen.is_none() => {
                if let Some(pid) = setup.instances.pid(self.rng.range(0, u64::MAX)) {
                    signal_pid(pid, "-STOP");
                    self.frozen = Some((pid, Instant::now() + Duration::from_millis(self.rng.range(11_000, 16_000))));
                    self.freezes += 1;
                }
            }
            0..=39 => setup.instances.kill_and_restart(self.rng.range(0, u64::MAX))?,
            40..=59 if self.paused.is_none() => {
                let (_, pid_env) = PAUSABLE[self.rng.range(0, PAUSABLE.len() as u64) as usize];
                if let Ok(pid_file) = env.get(pid_env) {
                    signal(&pid_file, "-STOP");
                    let pause = Duration::from_millis(self.rng.range(2_000, 8_000));
                    self.paused = Some((pid_file, Instant::now() + pause));
                    self.pauses += 1;
                }
            }
            60..=74 => {
                let index = self.rng.range(0, setup.proxies.len() as u64) as usize;
                setup.proxies[index].cut();
                self.cuts += 1;
            }
            75..=89 => {
                let index = self.rng.range(0, setup.proxies.len() as u64) as usize;
                setup.proxies[index].stall(Duration::from_millis(self.rng.range(1_000, 6_000)));
                self.stalls += 1;
            }
            90..=94 => {
                restart("restart-postgres", env)?;
                self.pg_restarts += 1;
            }
            _ => {
                restart("restart-mariadb", env)?;
                self.my_restarts += 1;
            }
        }
        Ok(false)
    }

    /// Resumes whatever is paused; no more trouble after this.
    pub fn calm(&mut self, setup: &mut Setup) {
        if let Some((pid_file, _)) = self.paused.take() {
            signal(&pid_file, "-CONT");
        }
        if let Some((pid, _)) = self.frozen.take() {
            signal_pid(pid, "-CONT");
        }
        for proxy in &setup.proxies {
            proxy.stall(Duration::ZERO);
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} pauses, {} cut, {} stalled, {} PostgreSQL restarts, {} MariaDB restarts, {} failovers, {} instances stopped past their leases",
            self.pauses, self.cuts, self.stalls, self.pg_restarts, self.my_restarts, self.failovers, self.freezes
        )
    }
}

/// A database restart through the services script: PostgreSQL in
/// immediate mode (a crash), MariaDB with a clean shutdown.
fn restart(action: &str, env: &Env) -> anyhow::Result<()> {
    let script = crate::repo_root().join("scripts/services.sh");
    // The folder of the PostgreSQL server the run uses: the source's, or
    // with a failover pair, the database sinks'.
    let socket = env.get("SLUICE_TEST_PG_SOCKET")?;
    let status =
        std::process::Command::new("bash").arg(script).arg(action).env("SLUICE_TEST_PG_SOCKET", socket).status()?;
    anyhow::ensure!(status.success(), "scripts/services.sh {action} failed");
    Ok(())
}

fn signal(pid_file: &str, signal: &str) {
    if let Ok(pid) = std::fs::read_to_string(pid_file) {
        let _ = std::process::Command::new("kill").args([signal, pid.trim()]).status();
    }
}

fn signal_pid(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill").args([signal, &pid.to_string()]).status();
}
