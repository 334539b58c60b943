//! Reading the config again while `sluice run --fleet` runs (SIGHUP or
//! `POST /reload`): pipelines added start somewhere in the fleet, removed
//! ones stop in order and give their lease back, changed ones stop and
//! start again with their new settings, and the others run on untouched.
//!
//! A lone run has no way to hand a pipeline over without stopping the
//! process, so there a reload is refused and says to restart.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use sluice_config::{Config, PipelineConfig};
use sluice_runtime::PipelineHandle;
use sluice_store::Store;
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::{info, warn};

use crate::api::Catalog;
use crate::{assemble, fleet};

/// A pipeline's settings and the handle its status and controls live in.
pub type Pipeline = (PipelineConfig, PipelineHandle);

/// A new set of pipelines for the fleet member; `done` answers once the
/// pipelines that left are stopped.
pub struct Change {
    pub pipelines: Vec<Pipeline>,
    pub done: oneshot::Sender<()>,
}

pub struct Reloader {
    path: PathBuf,
    data_dir: PathBuf,
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    /// The fleet member's inbox; `None` in a lone run.
    fleet: Option<mpsc::Sender<Change>>,
    /// One reload at a time: two at once could each see the other's
    /// pipelines as new.
    busy: Mutex<()>,
}

/// What a reload did, by pipeline name.
#[derive(Debug, Serialize)]
pub struct Reloaded {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(
        "a lone `sluice run` applies a changed config only when restarted; hint: restart it, or run the instances with --fleet, where a reload starts and stops pipelines without a restart"
    )]
    NotInFleet,
    #[error("the config was not applied, and every pipeline runs on as before: {0:#}")]
    Refused(anyhow::Error),
    #[error("the fleet member stopped before it took the new config")]
    Stopped,
}

impl Reloader {
    pub fn new(
        path: PathBuf,
        data_dir: PathBuf,
        store: Arc<dyn Store>,
        catalog: Arc<Catalog>,
        fleet: Option<mpsc::Sender<Change>>,
    ) -> Self {
        Reloader { path, data_dir, store, catalog, fleet, busy: Mutex::new(()) }
    }

    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        let Some(fleet) = &self.fleet else { return Err(ReloadError::NotInFleet) };
        let _one = self.busy.lock().await;
        let path = self.path.clone();
        let config = tokio::task::spawn_blocking(move || assemble::load(&path))
            .await
            .map_err(|e| ReloadError::Refused(anyhow::anyhow!("reading the config failed: {e}")))?
            .map_err(|failure| ReloadError::Refused(failure.error))?;
        let current = self.catalog.config();
        // The store holds the leases every member agrees on; moving it
        // while some still use the old one would let two own a pipeline.
        if format!("{:?}", config.store) != format!("{:?}", current.store) {
            return Err(ReloadError::Refused(anyhow::anyhow!(
                "store: the checkpoint store cannot change while sluice runs; hint: stop every instance, then start them with the new store"
            )));
        }
        assemble::check_fleet(&config).map_err(|failure| ReloadError::Refused(failure.error))?;
        let (pipelines, reloaded) = self.sort(&current, &config)?;
        let handles = pipelines.iter().map(|(_, handle)| handle.clone()).collect();
        let (done, applied) = oneshot::channel();
        fleet.send(Change { pipelines, done }).await.map_err(|_| ReloadError::Stopped)?;
        applied.await.map_err(|_| ReloadError::Stopped)?;
        self.catalog.replace(config, handles);
        info!(added = ?reloaded.added, removed = ?reloaded.removed, changed = ?reloaded.changed, "config reloaded");
        Ok(reloaded)
    }

    /// The new config's pipelines, each with the handle it had when its
    /// settings are the same, or a new one.
    fn sort(&self, current: &Config, config: &Config) -> Result<(Vec<Pipeline>, Reloaded), ReloadError> {
        let handles = self.catalog.handles();
        let mut reloaded = Reloaded { added: vec![], removed: vec![], changed: vec![], unchanged: vec![] };
        let mut pipelines = Vec::new();
        for pipeline in &config.pipelines {
            let before = current.pipelines.iter().position(|p| p.name == pipeline.name);
            let same = before.filter(|&i| fleet::digest(&current.pipelines[i]) == fleet::digest(pipeline));
            let handle = match (before, same) {
                (_, Some(i)) => {
                    reloaded.unchanged.push(pipeline.name.clone());
                    handles.iter().find(|h| h.status.name == current.pipelines[i].name).cloned()
                }
                (Some(_), None) => {
                    reloaded.changed.push(pipeline.name.clone());
                    None
                }
                (None, _) => {
                    reloaded.added.push(pipeline.name.clone());
                    None
                }
            };
            let handle = match handle {
                Some(handle) => handle,
                None => {
                    assemble::pipeline(pipeline, self.store.clone(), &self.data_dir)
                        .map_err(|failure| ReloadError::Refused(failure.error))?
                        .handle
                }
            };
            pipelines.push((pipeline.clone(), handle));
        }
        reloaded.removed = current
            .pipelines
            .iter()
            .filter(|p| !config.pipelines.iter().any(|n| n.name == p.name))
            .map(|p| p.name.clone())
            .collect();
        Ok((pipelines, reloaded))
    }

    /// A reload asked for by SIGHUP: its outcome goes to the log.
    pub async fn on_hangup(&self) {
        match self.reload().await {
            Ok(_) => {}
            Err(e) => warn!(error = %e, "SIGHUP: config not reloaded"),
        }
    }
}
