//! Where a fleet's leases live: the PostgreSQL store itself, or etcd.
//! Either way the checkpoints stay in the store, and every commit is
//! fenced there by the lease's epoch.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sluice_core::StoreError;
use sluice_store::{Lease, LeaseRow, PgStore, Taken};

/// A lease service, seen from one instance of the fleet.
pub trait Leases: Send + Sync {
    /// Marks this instance alive for `ttl`; the number of live instances.
    fn heartbeat(&self, ttl: Duration) -> BoxFuture<'_, anyhow::Result<usize>>;
    /// Takes `pipeline`'s lease if it is free; `config` is the digest of
    /// its settings. On success the store's fence is at the new epoch.
    fn try_acquire<'a>(
        &'a self,
        pipeline: &'a str,
        config: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Taken>>;
    /// Keeps the lease for `ttl` more; `false` once it is lost.
    fn renew<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, anyhow::Result<bool>>;
    /// Gives the lease back, so another instance may take it at once.
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, anyhow::Result<()>>;
    /// Every lease there is.
    fn list(&self) -> BoxFuture<'_, anyhow::Result<Vec<LeaseRow>>>;
    /// This instance leaves the fleet (it stops): what it holds is freed.
    fn leave(&self) -> BoxFuture<'_, ()>;
}

/// Leases as rows of the PostgreSQL store; an instance's session lock
/// frees them the moment its session ends.
pub struct PgLeases {
    pub store: PgStore,
    pub instance: String,
}

/// The store's blocking calls, off the async threads.
pub async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(anyhow::anyhow!("the store call's task failed: {e}")),
    }
}

impl Leases for PgLeases {
    fn heartbeat(&self, ttl: Duration) -> BoxFuture<'_, anyhow::Result<usize>> {
        let (store, instance) = (self.store.clone(), self.instance.clone());
        Box::pin(blocking(move || store.heartbeat(&instance, ttl)))
    }

    fn try_acquire<'a>(
        &'a self,
        pipeline: &'a str,
        config: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Taken>> {
        let (store, instance) = (self.store.clone(), self.instance.clone());
        let (pipeline, config) = (pipeline.to_string(), config.to_string());
        Box::pin(blocking(move || store.try_acquire(&pipeline, &instance, &config, ttl)))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, anyhow::Result<bool>> {
        let (store, instance, lease) = (self.store.clone(), self.instance.clone(), lease.clone());
        Box::pin(blocking(move || store.renew(&lease, &instance, ttl)))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, anyhow::Result<()>> {
        let (store, instance, lease) = (self.store.clone(), self.instance.clone(), lease.clone());
        Box::pin(blocking(move || store.release(&lease, &instance)))
    }

    fn list(&self) -> BoxFuture<'_, anyhow::Result<Vec<LeaseRow>>> {
        let store = self.store.clone();
        Box::pin(blocking(move || store.leases()))
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        // The instance lock goes with the process's session.
        Box::pin(async {})
    }
}

/// The configured lease service for `instance`.
pub fn open(
    config: &sluice_config::FleetConfig,
    store: &PgStore,
    instance: &str,
) -> Result<Arc<dyn Leases>, anyhow::Error> {
    Ok(match &config.leases {
        sluice_config::LeasesConfig::Postgres => {
            Arc::new(PgLeases { store: store.clone(), instance: instance.to_string() })
        }
        sluice_config::LeasesConfig::Etcd(etcd) => {
            Arc::new(super::etcd::EtcdLeases::new(etcd, store.clone(), instance.to_string())?)
        }
    })
}
