//! The `sluice run` processes under torture: one, or with `--fleet N`, N
//! instances that share the pipelines through leases in the PostgreSQL
//! store. They all log to one file (each line written whole), which the
//! drain follows for the checkpoints.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

/// The mask's salt, handed to Sluice in its environment.
pub const MASK_SALT: &str = "torture-pepper";

pub struct Instances {
    sluice: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    /// 0 for a lone `sluice run`.
    fleet: usize,
    children: Vec<Option<Child>>,
    pub kills: u64,
}

impl Instances {
    pub fn start(sluice: PathBuf, config: PathBuf, dir: PathBuf, fleet: usize) -> anyhow::Result<Self> {
        let mut instances = Instances { sluice, config, dir, fleet, children: Vec::new(), kills: 0 };
        for index in 0..fleet.max(1) {
            instances.children.push(None);
            instances.spawn(index)?;
        }
        Ok(instances)
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("sluice.log")
    }

    fn spawn(&mut self, index: usize) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log())?;
        let mut command = Command::new(&self.sluice);
        command.args(["run", "-c"]).arg(&self.config);
        if self.fleet > 0 {
            let id = format!("t{index}");
            // Each its own data dir, for scratch files: nothing there is
            // state another instance would need.
            command.args(["--fleet", "--instance-id", &id, "--data-dir"]).arg(self.dir.join(format!("data-{id}")));
        }
        let child = command
            .current_dir(&self.dir)
            .env("SLUICE_API_ADDR", "127.0.0.1:0")
            .env("TORTURE_MASK_SALT", MASK_SALT)
            // The drain follows the checkpoints the MariaDB pipeline stores.
            .env("RUST_LOG", "info,sluice_runtime::checkpointer=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.sluice.display()))?;
        self.children[index] = Some(child);
        Ok(())
    }

    /// The instance `pick` chooses (modulo their number).
    fn index(&self, pick: u64) -> usize {
        (pick % self.children.len() as u64) as usize
    }

    /// Kills one instance with SIGKILL and starts it again.
    pub fn kill_and_restart(&mut self, pick: u64) -> anyhow::Result<()> {
        let index = self.index(pick);
        if let Some(mut child) = self.children[index].take() {
            child.kill()?;
            child.wait()?;
            self.kills += 1;
        }
        self.spawn(index)
    }

    /// The process id of the instance `pick` chooses.
    pub fn pid(&self, pick: u64) -> Option<u32> {
        self.children[self.index(pick)].as_ref().map(Child::id)
    }

    pub fn is_fleet(&self) -> bool {
        self.fleet > 0
    }

    /// Starts an instance that is not running; an exit is a failure of the
    /// run unless it was a clean one (which it never should be mid-run).
    pub fn keep_running(&mut self) -> anyhow::Result<()> {
        for index in 0..self.children.len() {
            let Some(child) = self.children[index].as_mut() else {
                self.spawn(index)?;
                continue;
            };
            if let Some(status) = child.try_wait()? {
                bail!("sluice exited by itself ({status}); see {}", self.log().display());
            }
        }
        Ok(())
    }

    /// Stops every instance in order (SIGTERM, then waits).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        for child in self.children.iter().flatten() {
            // A stopped (SIGSTOP) instance would never hear the SIGTERM.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        }
        for child in self.children.iter_mut() {
            if let Some(mut child) = child.take() {
                child.wait()?;
            }
        }
        Ok(())
    }
}

/// A run that fails midway (an instance exited, a chaos step failed)
/// leaves through `?` without `stop`: its instances must not outlive it,
/// stopped by the chaos or still writing into the sinks.
impl Drop for Instances {
    fn drop(&mut self) {
        for mut child in self.children.iter_mut().filter_map(Option::take) {
            // SIGKILL ends a stopped (SIGSTOP) process too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
