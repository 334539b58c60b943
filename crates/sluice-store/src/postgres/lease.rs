//! Leases on pipelines, with fencing: one owner at a time, and an epoch
//! that grows with every acquisition.
//!
//! A lease is free when it expired (its owner stopped renewing it: killed,
//! stalled, cut off), when its owner gave it back, or when its owner's
//! instance lock is gone: each instance holds a session advisory lock
//! named after it, which the server drops the moment that session ends, so
//! a killed instance's leases are free without waiting for them to expire.
//! Times are the store server's, so the instances' clocks do not matter.
//!
//! Every checkpoint commit through [`FencedStore`] checks, in its own
//! transaction, that the lease is still at the owner's epoch. An owner
//! that stalled past its lease and woke up after another took the
//! pipeline over can therefore not move a checkpoint any more.

use std::time::Duration;

use sluice_core::{CheckpointKey, CheckpointStore, Position, StoreError};

use super::PgStore;
use super::session::{CallError, LOCK_CLASS};
use super::sql::literal;

/// The second advisory lock class: one lock per live instance.
pub(super) const INSTANCE_LOCK: i32 = LOCK_CLASS + 2;

/// A lease this instance holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub pipeline: String,
    pub epoch: i64,
}

/// What an attempt to take a lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// It was free; this instance holds it now.
    Lease(Lease),
    /// A live owner holds it.
    Held,
    /// A live owner runs the pipeline with other settings (a rollout of a
    /// changed config, or two configs under one name).
    OtherConfig { owner: String },
}

/// A lease as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub pipeline: String,
    pub owner: String,
    pub epoch: i64,
    /// Microseconds since the epoch, by the store's clock.
    pub acquired_at_us: i64,
    /// Whether it is held now: not expired, not given back, and its
    /// owner's instance lock held.
    pub live: bool,
}

/// The SQL condition that a lease row `l` is held by a live owner.
fn live(l: &str) -> String {
    alive(&format!("{l}.expires_at"), &format!("{l}.owner"))
}

/// The SQL condition that `until` is still ahead and the instance named
/// by `instance` holds its instance lock.
fn alive(until: &str, instance: &str) -> String {
    format!(
        "({until} > clock_timestamp() AND EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' \
         AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND k.classid = {INSTANCE_LOCK} AND k.objid = hashtext({instance})::oid AND k.objsubid = 2 AND k.granted))"
    )
}

impl PgStore {
    /// Takes `pipeline`'s lease for `owner` if it is free, for `ttl`.
    /// `config` is a digest of the pipeline's settings, kept with the
    /// lease, so a live owner with another one is told apart.
    pub fn try_acquire(&self, pipeline: &str, owner: &str, config: &str, ttl: Duration) -> Result<Taken, StoreError> {
        let (pipeline, owner, config) = (pipeline.to_string(), owner.to_string(), config.to_string());
        let table = self.table("leases");
        let ttl_ms = ttl.as_millis();
        self.call("acquire a lease", move |s| {
            let (p, o, c) = (literal(&pipeline)?, literal(&owner)?, literal(&config)?);
            let held = s.query(&format!(
                "SELECT l.owner, l.config, {} AS live FROM {table} l WHERE l.pipeline = {p}",
                live("l")
            ))?;
            if held.first("live") == Some("t") {
                let (other, digest) = (held.first("owner").unwrap_or_default(), held.first("config").unwrap_or_default());
                if other != owner && digest != config {
                    return Ok(Taken::OtherConfig { owner: other.to_string() });
                }
                return Ok(Taken::Held);
            }
            let rows = s.query(&format!(
                "INSERT INTO {table} AS l (pipeline, owner, epoch, config, acquired_at, expires_at) \
                 VALUES ({p}, {o}, 1, {c}, clock_timestamp(), clock_timestamp() + interval '{ttl_ms} milliseconds') \
                 ON CONFLICT (pipeline) DO UPDATE SET owner = EXCLUDED.owner, epoch = l.epoch + 1, config = EXCLUDED.config, \
                 acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at WHERE NOT {} \
                 RETURNING epoch",
                live("l")
            ))?;
            // Another instance took it between the two statements.
            let Some(epoch) = rows.first("epoch") else { return Ok(Taken::Held) };
            let epoch = epoch.parse().map_err(|_| super::corrupt(&pipeline, epoch))?;
            Ok(Taken::Lease(Lease { pipeline: pipeline.clone(), epoch }))
        })
    }

    /// Extends the lease by `ttl`; `false` when it is lost (another owner
    /// took it, at a later epoch).
    pub fn renew(&self, lease: &Lease, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (lease, owner, table) = (lease.clone(), owner.to_string(), self.table("leases"));
        let ttl_ms = ttl.as_millis();
        self.call("renew a lease", move |s| {
            let rows = s.query(&format!(
                "UPDATE {table} SET expires_at = clock_timestamp() + interval '{ttl_ms} milliseconds' \
                 WHERE pipeline = {} AND owner = {} AND epoch = {} RETURNING epoch",
                literal(&lease.pipeline)?,
                literal(&owner)?,
                lease.epoch
            ))?;
            Ok(!rows.rows.is_empty())
        })
    }

    /// Gives the lease back, so another instance may take it at once.
    pub fn release(&self, lease: &Lease, owner: &str) -> Result<(), StoreError> {
        let (lease, owner, table) = (lease.clone(), owner.to_string(), self.table("leases"));
        self.call("release a lease", move |s| {
            s.query(&format!(
                "UPDATE {table} SET expires_at = '-infinity' WHERE pipeline = {} AND owner = {} AND epoch = {}",
                literal(&lease.pipeline)?,
                literal(&owner)?,
                lease.epoch
            ))?;
            Ok(())
        })
    }

    /// Marks `instance` alive for `ttl`, and counts the live instances of
    /// the fleet: seen within their `ttl`, with their instance lock held.
    pub fn heartbeat(&self, instance: &str, ttl: Duration) -> Result<usize, StoreError> {
        let (instance, table) = (instance.to_string(), self.table("members"));
        let ttl_ms = ttl.as_millis();
        self.call("mark this instance alive", move |s| {
            let i = literal(&instance)?;
            s.query(&format!(
                "INSERT INTO {table} VALUES ({i}, clock_timestamp(), clock_timestamp() + interval '{ttl_ms} milliseconds') \
                 ON CONFLICT (instance) DO UPDATE SET alive_until = EXCLUDED.alive_until"
            ))?;
            let live = s.query(&format!(
                "SELECT count(*) AS n FROM {table} m WHERE {}",
                alive("m.alive_until", "m.instance")
            ))?;
            Ok(live.first("n").and_then(|n| n.parse().ok()).unwrap_or(1))
        })
    }

    /// Every lease, by pipeline.
    pub fn leases(&self) -> Result<Vec<LeaseRow>, StoreError> {
        let table = self.table("leases");
        self.call("list leases", move |s| {
            let rows = s.query(&format!(
                "SELECT l.pipeline, l.owner, l.epoch, (extract(epoch FROM l.acquired_at) * 1000000)::bigint AS at, {} AS live \
                 FROM {table} l ORDER BY l.pipeline",
                live("l")
            ))?;
            Ok(rows
                .rows
                .iter()
                .map(|row| {
                    let text = |c: &str| rows.get(row, c).unwrap_or_default().to_string();
                    LeaseRow {
                        pipeline: text("pipeline"),
                        owner: text("owner"),
                        epoch: text("epoch").parse().unwrap_or(0),
                        acquired_at_us: text("at").parse().unwrap_or(0),
                        live: text("live") == "t",
                    }
                })
                .collect())
        })
    }

    /// Records `lease` as the pipeline's fence, when its leases live
    /// elsewhere (etcd): from now on only commits at `lease.epoch` pass.
    /// Fences only rise (the same epoch again passes, for a retried call);
    /// an epoch below the stored one is refused, as when the lease service
    /// was replaced by one whose counters restart.
    pub fn raise_fence(&self, lease: &Lease, owner: &str) -> Result<(), StoreError> {
        let (lease, owner, table) = (lease.clone(), owner.to_string(), self.table("leases"));
        self.call("record a lease's fence", move |s| {
            let p = literal(&lease.pipeline)?;
            // Not live by this store's rules: only the epoch counts here.
            let rows = s.query(&format!(
                "INSERT INTO {table} AS l (pipeline, owner, epoch, config, acquired_at, expires_at) \
                 VALUES ({p}, {}, {}, '', clock_timestamp(), '-infinity') \
                 ON CONFLICT (pipeline) DO UPDATE SET owner = EXCLUDED.owner, epoch = EXCLUDED.epoch, \
                 acquired_at = EXCLUDED.acquired_at WHERE l.epoch <= EXCLUDED.epoch RETURNING epoch",
                literal(&owner)?,
                lease.epoch
            ))?;
            if rows.rows.is_empty() {
                let stored = s.query(&format!("SELECT epoch FROM {table} WHERE pipeline = {p}"))?;
                let current = stored.first("epoch").and_then(|e| e.parse().ok()).unwrap_or(0);
                return Err(CallError::Fatal(StoreError::Fenced {
                    pipeline: lease.pipeline.clone(),
                    held: lease.epoch,
                    current,
                }));
            }
            Ok(())
        })
    }

    /// The store as the holder of `lease` may write to it: checkpoint
    /// commits are refused once the lease moved on.
    pub fn fenced(&self, lease: Lease) -> FencedStore {
        FencedStore { store: self.clone(), lease }
    }
}

/// A [`PgStore`] whose checkpoint commits hold only while its lease does.
pub struct FencedStore {
    store: PgStore,
    lease: Lease,
}

impl CheckpointStore for FencedStore {
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError> {
        self.store.load(keys)
    }

    fn list(&self) -> Result<Vec<(String, Position)>, StoreError> {
        self.store.list()
    }

    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError> {
        self.store.commit_as(updates, Some(self.lease.clone()))
    }

    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError> {
        self.store.remove(keys)
    }

    fn generation(&self, source_id: &str) -> Result<u32, StoreError> {
        self.store.generation(source_id)
    }

    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError> {
        self.store.reset_source(source_id, keys)
    }
}

/// Within a commit's transaction: the lease still at `lease.epoch`, or the
/// fencing error. `FOR SHARE` keeps a takeover from committing between
/// this check and the commit.
pub(super) fn check_epoch(s: &mut super::session::Session, table: &str, lease: &Lease) -> Result<(), CallError> {
    let rows =
        s.query(&format!("SELECT epoch FROM {table} WHERE pipeline = {} FOR SHARE", literal(&lease.pipeline)?))?;
    let current: i64 = rows.first("epoch").and_then(|e| e.parse().ok()).unwrap_or(0);
    if current != lease.epoch {
        s.rollback();
        return Err(CallError::Fatal(StoreError::Fenced {
            pipeline: lease.pipeline.clone(),
            held: lease.epoch,
            current,
        }));
    }
    Ok(())
}
