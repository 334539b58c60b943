//! `sluice run --fleet`: instances with the same config share its
//! pipelines through leases (in the PostgreSQL store, or in etcd), and
//! keep their checkpoints in the PostgreSQL store.
//!
//! Every `renew_every`, each instance marks itself alive, renews the
//! leases it holds, and takes free ones up to its fair share (pipelines ÷
//! live instances, rounded up). One over its share gives one back (after
//! stopping it in order, so its checkpoints are stored), so load spreads
//! when the fleet grows. A lease it finds lost (it stalled past its TTL
//! and another took over) stops that pipeline here; its checkpoint
//! commits were refused from the moment the other took it. A sink whose
//! writer was fenced (Kafka transactions) while the lease is still held
//! gives the lease back, and the pipeline starts again at a new epoch.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use sluice_config::PipelineConfig;
use sluice_core::{SinkFenced, StoreError};
use sluice_runtime::status::Ownership;
use sluice_runtime::{PipelineHandle, RunReport, Shutdown};
use sluice_store::{Lease, PgStore, Store, Taken};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use self::leases::Leases;
use crate::assemble;
use crate::reload::{Change, Pipeline};
use crate::run::{Again, run_with_rereads};

mod etcd;
pub mod leases;

pub use self::etcd::checks as etcd_checks;

pub struct Fleet {
    /// Where checkpoints are kept, fenced by each lease's epoch.
    pub store: PgStore,
    pub leases: Arc<dyn Leases>,
    pub instance: String,
    /// How long a lease lasts without renewal, and how often it is renewed.
    pub ttl: Duration,
    pub renew_every: Duration,
    pub data_dir: PathBuf,
}

/// A pipeline this instance runs.
struct Owned {
    lease: Lease,
    stop: Shutdown,
    task: JoinHandle<anyhow::Result<RunReport>>,
    /// Its lease is gone: another instance owns the pipeline now.
    lost: bool,
    /// Stopping to give the lease back.
    giving_back: bool,
}

struct Entry {
    /// The live owner with other settings last warned about.
    other_config: Option<String>,
    config: PipelineConfig,
    handle: PipelineHandle,
    digest: String,
    owned: Option<Owned>,
    /// Its source ended by itself (a finite generator): not taken again.
    done: bool,
}

/// The instance id when none is given: the host name and the process id.
pub fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "sluice".into());
    format!("{host}:{}", std::process::id())
}

/// The pipeline's settings as a digest: two instances that run a pipeline
/// under one name with different settings are refused. FNV-1a, which
/// every build computes alike (the standard hasher may change between
/// Rust releases), over the settings as this build prints them.
pub(crate) fn digest(config: &PipelineConfig) -> String {
    let hash = format!("{config:?}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    format!("{hash:016x}")
}

/// The order in which this instance tries free pipelines: its own
/// shuffle, so instances starting at once reach for different ones.
fn preference(instance: &str, pipeline: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (instance, pipeline).hash(&mut hasher);
    hasher.finish()
}

impl Fleet {
    /// A member with the config's lease service and timing.
    pub fn new(
        config: &sluice_config::FleetConfig,
        store: PgStore,
        instance: String,
        data_dir: PathBuf,
    ) -> anyhow::Result<Self> {
        Ok(Fleet {
            leases: leases::open(config, &store, &instance)?,
            store,
            instance,
            ttl: Duration::from_secs(config.lease_ttl_secs),
            renew_every: Duration::from_secs(config.renew_every_secs),
            data_dir,
        })
    }

    /// Runs until `shutdown`, or until a pipeline this instance owns fails
    /// for a reason other than losing its lease (which stops the process,
    /// as without a fleet, and frees its leases for the others).
    /// A reload's [`Change`] arrives through `changes`.
    pub async fn run(
        self,
        pipelines: Vec<Pipeline>,
        mut changes: mpsc::Receiver<Change>,
        shutdown: Shutdown,
    ) -> anyhow::Result<()> {
        let mut entries: Vec<Entry> =
            pipelines.into_iter().map(|(config, handle)| Entry::new(config, handle)).collect();
        let fleet = Arc::new(self);
        info!(instance = %fleet.instance, pipelines = entries.len(), "fleet member started");
        let mut tick = tokio::time::interval(fleet.renew_every);
        let mut failure = None;
        while failure.is_none() {
            tokio::select! {
                _ = tick.tick() => {}
                Some(change) = changes.recv() => {
                    fleet.apply(&mut entries, change.pipelines).await;
                    let _ = change.done.send(());
                }
                _ = shutdown.wait() => break,
            }
            failure = fleet.round(&mut entries).await.err();
        }
        fleet.stop_all(&mut entries).await;
        fleet.leases.leave().await;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One round: mark alive, renew, reap, balance, show owners. Renewing
    /// first finds a lost lease before the run it stopped is reaped, so a
    /// run that failed for having lost it is given up, not fatal.
    async fn round(self: &Arc<Self>, entries: &mut [Entry]) -> anyhow::Result<()> {
        let live = match self.leases.heartbeat(self.ttl).await {
            Ok(live) => live.max(1),
            Err(e) => {
                warn!(error = %e, "cannot reach the leases this round; they are renewed at the next");
                return Ok(());
            }
        };
        for entry in entries.iter_mut() {
            self.renew(entry).await;
        }
        for entry in entries.iter_mut() {
            self.reap(entry).await?;
        }
        self.balance(entries, live).await?;
        self.show_owners(entries).await;
        Ok(())
    }

    /// Handles a run that ended.
    async fn reap(&self, entry: &mut Entry) -> anyhow::Result<()> {
        let Some(owned) = entry.owned.as_mut().filter(|o| o.task.is_finished()) else { return Ok(()) };
        let result = (&mut owned.task).await.unwrap_or_else(|e| Err(anyhow!("task failed: {e}")));
        let owned = entry.owned.take().expect("checked above");
        let name = &entry.config.name;
        match result {
            Err(e) if owned.lost || store_fenced(&e) => {
                warn!(pipeline = %name, error = %e, "gave the pipeline up: another instance owns it now");
            }
            Err(e) if sink_fenced(&e) => {
                // Most likely an instance that lost the lease while it
                // opened its sinks, whose late start reached the sink
                // after this owner's. Taking the lease again, here or
                // elsewhere, starts a writer at a new epoch, which fences
                // that one in turn; its aborted batch is written again.
                warn!(pipeline = %name, error = %format!("{e:#}"),
                    "a sink's writer was fenced while this instance holds the lease; giving the lease back so the pipeline starts again at a new epoch");
                self.release(&owned.lease).await;
            }
            Err(e) => {
                error!(pipeline = %name, error = %e, "pipeline failed");
                self.release(&owned.lease).await;
                return Err(e);
            }
            Ok(report) => {
                if owned.lost {
                    warn!(pipeline = %name, "gave the pipeline up: another instance owns it now");
                } else {
                    if !owned.giving_back {
                        info!(pipeline = %name, checkpoints = %report, "pipeline done");
                        entry.done = true;
                    }
                    self.release(&owned.lease).await;
                }
            }
        }
        Ok(())
    }

    async fn release(&self, lease: &Lease) {
        if let Err(e) = self.leases.release(lease).await {
            // It expires by itself within one TTL.
            warn!(error = %e, "cannot give the lease back");
        }
    }

    async fn renew(&self, entry: &mut Entry) {
        let Some(owned) = entry.owned.as_mut().filter(|o| !o.lost) else { return };
        match self.leases.renew(&owned.lease, self.ttl).await {
            Ok(true) => {}
            Ok(false) => {
                warn!(pipeline = %entry.config.name, epoch = owned.lease.epoch,
                    "lost the pipeline's lease (this instance stalled past it, or was cut off); stopping it here");
                owned.lost = true;
                owned.stop.trigger();
            }
            Err(e) => {
                warn!(pipeline = %entry.config.name, error = %e, "cannot renew the lease; trying again next round")
            }
        }
    }

    /// Takes free pipelines up to the fair share, or gives one back.
    async fn balance(self: &Arc<Self>, entries: &mut [Entry], live: usize) -> anyhow::Result<()> {
        let wanted = entries.iter().filter(|e| !e.done).count();
        let share = wanted.div_ceil(live);
        let held = |e: &Entry| e.owned.as_ref().is_some_and(|o| !o.lost && !o.giving_back);
        let mut owned = entries.iter().filter(|e| held(e)).count();
        if owned > share {
            if let Some(entry) = entries.iter_mut().rev().find(|e| held(e)) {
                info!(pipeline = %entry.config.name, share, live, "giving a pipeline back so the fleet's load spreads");
                let owned = entry.owned.as_mut().expect("held");
                owned.giving_back = true;
                owned.stop.trigger();
            }
            return Ok(());
        }
        let mut free: Vec<usize> =
            (0..entries.len()).filter(|&i| entries[i].owned.is_none() && !entries[i].done).collect();
        free.sort_by_key(|&i| preference(&self.instance, &entries[i].config.name));
        for index in free {
            if owned >= share {
                break;
            }
            let entry = &mut entries[index];
            let taken = match self.leases.try_acquire(&entry.config.name, &entry.digest, self.ttl).await {
                Ok(taken) => taken,
                Err(e) => {
                    // Tried again next round, like any free pipeline.
                    warn!(pipeline = %entry.config.name, error = %format!("{e:#}"), "cannot take the pipeline's lease");
                    break;
                }
            };
            let lease = match taken {
                Taken::Lease(lease) => lease,
                Taken::Held => continue,
                Taken::OtherConfig { owner } => {
                    if entry.other_config.as_ref() != Some(&owner) {
                        error!(pipeline = %entry.config.name, owner = %owner, instance = %self.instance,
                            "the pipeline runs on another instance with other settings than this instance's config: \
                             it stays there until that instance stops (a rollout of a changed config), or give every \
                             instance of the fleet the same config");
                        entry.other_config = Some(owner);
                    }
                    continue;
                }
            };
            entry.other_config = None;
            info!(pipeline = %entry.config.name, epoch = lease.epoch, "took the pipeline's lease; starting it here");
            entry.owned = Some(self.start(entry, lease)?);
            owned += 1;
        }
        Ok(())
    }

    fn start(self: &Arc<Self>, entry: &Entry, lease: Lease) -> anyhow::Result<Owned> {
        let store: Arc<dyn Store> = Arc::new(self.store.clone());
        let checkpoints: Arc<dyn sluice_core::CheckpointStore> = Arc::new(self.store.fenced(lease.clone()));
        let mut pipeline = assemble::pipeline(&entry.config, store.clone(), &self.data_dir)
            .map_err(|failure| anyhow!("cannot build pipeline {}: {:#}", entry.config.name, failure.error))?;
        pipeline.store = checkpoints.clone();
        pipeline.settings.transforms = entry.handle.status.transforms();
        pipeline.handle = entry.handle.clone();
        let again = Again {
            config: entry.config.clone(),
            store,
            checkpoints: Some(checkpoints),
            data_dir: self.data_dir.clone(),
        };
        let stop = Shutdown::new();
        let task = tokio::spawn(run_with_rereads(pipeline, again, stop.clone()));
        Ok(Owned { lease, stop, task, lost: false, giving_back: false })
    }

    /// Shows every pipeline's owner in its status, from the store.
    async fn show_owners(&self, entries: &[Entry]) {
        let Ok(rows) = self.leases.list().await else { return };
        for entry in entries {
            let row = rows.iter().find(|r| r.pipeline == entry.config.name && r.live);
            let owner =
                row.map(|r| Ownership { instance: r.owner.clone(), epoch: r.epoch, since_us: r.acquired_at_us });
            let here = entry.owned.as_ref().is_some_and(|o| !o.lost);
            entry.handle.status.set_owner(owner, here);
        }
    }

    /// Stops every pipeline this instance runs, in order, and gives their
    /// leases back.
    async fn stop_all(&self, entries: &mut [Entry]) {
        for owned in entries.iter().filter_map(|e| e.owned.as_ref()) {
            owned.stop.trigger();
        }
        for entry in entries.iter_mut() {
            self.stop(entry).await;
        }
    }

    /// Stops the pipeline if it runs here, waits for its checkpoints to be
    /// stored, and gives its lease back.
    async fn stop(&self, entry: &mut Entry) {
        let Some(owned) = entry.owned.take() else { return };
        owned.stop.trigger();
        match owned.task.await {
            Ok(Ok(report)) => info!(pipeline = %entry.config.name, checkpoints = %report, "pipeline stopped"),
            Ok(Err(e)) => warn!(pipeline = %entry.config.name, error = %e, "pipeline stopped with an error"),
            Err(e) => warn!(pipeline = %entry.config.name, error = %e, "pipeline task failed"),
        }
        if !owned.lost {
            self.release(&owned.lease).await;
        }
    }

    /// Takes a reloaded config's pipelines: those gone or changed stop
    /// here first; the new and changed ones are taken by the next rounds,
    /// here or on another instance, like any free pipeline.
    async fn apply(&self, entries: &mut Vec<Entry>, pipelines: Vec<Pipeline>) {
        let mut kept = Vec::new();
        for mut entry in std::mem::take(entries) {
            let same = pipelines.iter().any(|(c, _)| c.name == entry.config.name && digest(c) == entry.digest);
            if same {
                kept.push(entry);
                continue;
            }
            if entry.owned.is_some() {
                info!(pipeline = %entry.config.name, "the reloaded config removed or changed the pipeline; stopping it");
            }
            self.stop(&mut entry).await;
        }
        for (config, handle) in pipelines {
            match kept.iter().position(|e| e.config.name == config.name) {
                Some(at) => entries.push(kept.swap_remove(at)),
                None => entries.push(Entry::new(config, handle)),
            }
        }
    }
}

impl Entry {
    fn new(config: PipelineConfig, handle: PipelineHandle) -> Self {
        handle.status.set_owner(None, false);
        Entry { digest: digest(&config), config, handle, owned: None, done: false, other_config: None }
    }
}

fn store_fenced(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<StoreError>().is_some_and(|e| matches!(e, StoreError::Fenced { .. })))
}

fn sink_fenced(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<SinkFenced>())
}
