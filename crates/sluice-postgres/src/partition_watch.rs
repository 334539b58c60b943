//! Partitions attached to or detached from a captured partitioned table
//! while streaming.
//!
//! An `ATTACH PARTITION` brings rows into the table without a row change
//! in the WAL, so the stream never shows them. And pgoutput before 15
//! decides once per replication session whether a table's changes are
//! published, forgetting those decisions only when a publication changes:
//! `ATTACH` or `DETACH` alone does not make it decide again, so the changes
//! of a partition it had already seen keep going the old way (none of an
//! attached one; a detached one's still under the root's name).
//!
//! Every few seconds the reader compares each captured partitioned table's
//! partitions with the last it knew (kept in the state dir, so a change
//! made while Sluice was down is found at start). On a difference, before
//! 15 it rewrites the publication's `publish_via_partition_root` with the
//! value it has, which changes nothing but makes pgoutput decide afresh
//! from that point of the WAL; and where incremental snapshots run (14
//! and later) it asks for one of each partition that joined, for the rows
//! it brought and the changes written before the renewal.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sluice_config::PostgresConfig;
use sluice_core::{SourceError, StateDir};
use tracing::{info, warn};

use crate::catalog::{self, Matched, quote_ident, quote_literal, source_error};
use crate::wire::Connection;

/// The last known partitions' name in the source's state.
const NAME: &str = "partitions.json";

const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// The partitions of each captured partitioned table, by its name.
type Trees = BTreeMap<String, BTreeSet<String>>;

pub(crate) struct PartitionWatch {
    patterns: Vec<String>,
    publication: String,
    source_id: String,
    chunk_size: u64,
    /// PostgreSQL before 15: the publication is renewed on a change.
    renew: bool,
    /// Incremental snapshots run: a partition that joined is read again.
    reread: bool,
    /// Where the last known partitions are kept, when there is a state dir.
    state: Option<StateDir>,
    known: Option<Trees>,
    last: Option<Instant>,
}

impl PartitionWatch {
    pub(crate) fn new(config: &PostgresConfig, state: Option<StateDir>, renew: bool, reread: bool) -> Self {
        // A record from an earlier run is the baseline; a damaged or
        // unreadable one is none, and the first check sets it again.
        let known =
            state.as_ref().and_then(|s| s.read(NAME).ok().flatten()).and_then(|b| serde_json::from_slice(&b).ok());
        Self {
            patterns: config.tables.clone(),
            publication: config.publication_name(),
            source_id: config.id.clone(),
            chunk_size: config.snapshot.chunk_size,
            renew,
            reread,
            state,
            known,
            last: None,
        }
    }

    /// Compares the partitions with the last known, at once on the first
    /// call and then at most every [`CHECK_INTERVAL`]. A failure only
    /// delays the check: it must never stop replication.
    pub(crate) async fn check(&mut self, conn: &mut Connection) {
        if self.last.is_some_and(|last| last.elapsed() < CHECK_INTERVAL) {
            return;
        }
        self.last = Some(Instant::now());
        if let Err(e) = self.compare(conn).await {
            warn!(error = %e, "could not check the partitions of the captured tables; trying again");
        }
    }

    async fn compare(&mut self, conn: &mut Connection) -> Result<(), SourceError> {
        let now = trees(&catalog::matching_tables(conn, &self.patterns).await?);
        let Some(known) = &self.known else { return self.keep(now) };
        let changed: Vec<&String> =
            now.iter().filter(|(root, parts)| known.get(*root).is_some_and(|k| k != *parts)).map(|(r, _)| r).collect();
        if changed.is_empty() {
            return self.keep(now);
        }
        let joined: Vec<String> =
            changed.iter().flat_map(|root| now[*root].difference(&known[*root]).cloned().collect::<Vec<_>>()).collect();
        let tables: Vec<&str> = changed.iter().map(|r| r.as_str()).collect();
        if self.renew {
            self.touch(conn).await.map_err(|e| {
                SourceError::permanent(
                    format!("partitions of {} changed, and {e}", tables.join(", ")),
                    "run ATTACH and DETACH PARTITION in one transaction with ALTER PUBLICATION … SET (publish_via_partition_root = …) (docs/postgres.md)",
                )
            })?;
        }
        if self.reread {
            let mut read = Vec::new();
            for part in &joined {
                match crate::incremental::signal(conn, &self.source_id, part, self.chunk_size).await {
                    Ok(_) => read.push(part),
                    Err(e) => {
                        warn!(table = part, error = %e, "a partition joined a captured table, and cannot be read by an incremental snapshot: the rows it brought are not captured")
                    }
                }
            }
            info!(tables = ?tables, joined = ?joined, read = ?read, renewed = self.renew, "partitions attached or detached: the partitions that joined are read by incremental snapshots");
        } else {
            warn!(
                tables = ?tables,
                joined = ?joined,
                "partitions attached or detached: the publication was renewed so PostgreSQL before 15 publishes them afresh; a partition that joined is not read (13 has no incremental snapshots): the rows it brought, and changes to it since it joined, may be missing (see docs/postgres.md)"
            );
        }
        self.keep(now)
    }

    /// Rewrites the publication's `publish_via_partition_root` with the
    /// value it has: the row changes, so pgoutput drops its decisions.
    async fn touch(&self, conn: &mut Connection) -> Result<(), SourceError> {
        let current =
            format!("SELECT pubviaroot FROM pg_publication WHERE pubname = {}", quote_literal(&self.publication));
        let rows = conn.simple_query(&current).await.map_err(|e| source_error("publication lookup", e))?;
        let via_root = rows.rows.first().and_then(|r| r.first().cloned().flatten()).ok_or_else(|| {
            SourceError::permanent(format!("publication {:?} is gone", self.publication), "create it again")
        })?;
        let value = if via_root == "t" { "true" } else { "false" };
        let alter =
            format!("ALTER PUBLICATION {} SET (publish_via_partition_root = {value})", quote_ident(&self.publication));
        conn.simple_query(&alter)
            .await
            .map(|_| ())
            .map_err(|e| source_error(&format!("publication {:?} could not be renewed", self.publication), e))
    }

    fn keep(&mut self, now: Trees) -> Result<(), SourceError> {
        if let Some(state) = &self.state
            && self.known.as_ref() != Some(&now)
        {
            let text = serde_json::to_vec(&now).map_err(|e| SourceError::transient(e.to_string()))?;
            state.write(NAME, &text).map_err(|e| SourceError::transient(e.to_string()))?;
        }
        self.known = Some(now);
        Ok(())
    }
}

/// Each captured partitioned table's leaf partitions.
fn trees(matched: &[Matched]) -> Trees {
    let mut trees = Trees::new();
    for table in matched {
        if table.partitioned && table.root.is_none() {
            trees.entry(table.name()).or_default();
        }
    }
    for table in matched.iter().filter(|t| !t.partitioned) {
        if let Some(parts) = table.root.as_ref().and_then(|root| trees.get_mut(root)) {
            parts.insert(table.name());
        }
    }
    trees
}
