//! Starting the `postgres` source: check the server, settle the tables and
//! publications, read the slot's state, plan (see
//! [`sluice_core::source::plan`]), then act on the plan: drop or create
//! the slot, queue re-reads, take or resume the initial snapshot, or
//! stream.

use std::sync::Arc;

use sluice_config::SnapshotMode;
use sluice_core::source::plan::{self, InitialSnapshot, LogState, Refusal, SourceKind, StartInput, StartPlan};
use sluice_core::{AckWatermark, Lsn, Position, SnapshotPos, SourceError};
use tracing::{info, warn};

use crate::catalog::{self, Matched, SlotState, quote_ident, quote_literal, source_error};
use crate::reader::Handoff;
use crate::slot_record::SlotRecord;
use crate::snapshot;
use crate::source::{PgStream, PostgresSource};
use crate::wire::Connection;

/// `snapshot.mode` as the plan takes it.
fn plan_mode(mode: SnapshotMode) -> plan::SnapshotMode {
    plan::SnapshotMode::from_config(mode.initial(), mode == SnapshotMode::Always, mode == SnapshotMode::WhenNeeded)
}

/// A refusal of the plan, in this source's words.
fn refused(refusal: Refusal, slot: &str) -> SourceError {
    match refusal {
        Refusal::Foreign(err) => err,
        Refusal::LogLost => SlotState::lost_error(slot),
        Refusal::LogMissing => SourceError::permanent(
            format!(
                "replication slot {slot:?} does not exist, but this source has checkpoints: the slot was dropped, and changes made since are gone"
            ),
            "reset this pipeline's checkpoints with `sluice checkpoints reset` to start over from now (and take a new snapshot)",
        ),
    }
}

impl PostgresSource {
    /// [`Source::start`](sluice_core::Source::start).
    pub(crate) async fn begin(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError> {
        self.stream.params = crate::hosts::primary(&self.stream.config, &self.stream.params).await?;
        let incremental = self.stream.open_incremental(from.as_ref())?;
        self.driver.restart(incremental);
        let slot = self.stream.config.slot_name();
        plan::check_checkpoint(SourceKind::Postgres, from.as_ref()).map_err(|r| refused(r, &slot))?;
        let highest = acked.highest_at_start();
        let mut sql = self.stream.connect(false).await?;
        let version = catalog::check_server(&mut sql, &self.stream.config.user).await?;
        catalog::check_features(&self.stream.config, version)?;
        self.stream.on_standby = crate::hosts::check_standby(&mut sql, &self.stream.config, version).await?;
        // A slot on a standby cannot be a failover slot.
        self.stream.failover_slot =
            !self.stream.on_standby && self.stream.config.failover_slot.unwrap_or(version >= 170_000);
        let tables = self.stream.settle_tables(&mut sql, version).await?;
        let state = catalog::slot_state(&mut sql, &slot, &self.stream.config.database).await?;
        let mut record = self.stream.state_dir.clone().map(|dir| SlotRecord::open(dir, &slot)).transpose()?;
        let moved = moved_past(&state, record.as_ref(), from.as_ref());
        let log = match (state.lost || moved.is_some(), state.exists) {
            (true, _) => LogState::Lost,
            (false, false) => LogState::Missing,
            (false, true) => LogState::Held,
        };
        let plan = plan::plan_start(&StartInput {
            kind: SourceKind::Postgres,
            checkpoint: from.as_ref(),
            highest_at_start: highest.as_ref(),
            mode: plan_mode(self.stream.config.snapshot.mode),
            started_once: self.stream.started_once,
            log,
        })
        .map_err(|r| match (r, moved) {
            (Refusal::LogLost, Some((found, known))) => SlotRecord::moved_error(&slot, found, known),
            (r, _) => refused(r, &slot),
        })?;
        plan.notices.iter().for_each(plan::Notice::log);
        let mut replication = self.stream.connect(true).await?;
        if plan.recover {
            warn!(
                slot,
                "the slot no longer holds the changes since the checkpoints (dropped, invalidated, or moved past them by another client); snapshot.mode when_needed: streaming from a new slot and re-reading every table"
            );
            if state.exists {
                drop_slot(&mut replication, &slot).await?;
            }
        }
        if plan.reread || plan.recover {
            self.queue_reread(version, &tables)?;
        }
        self.stream.started_once = true;
        let fresh = plan.snapshot == InitialSnapshot::Fresh;
        let exported =
            self.stream.settle_slot(&mut replication, state.exists && !plan.recover, fresh, record.as_mut()).await?;
        let start_lsn = match (&plan.stream_from, plan.recover) {
            (Some(Position::Postgres { commit_lsn, .. }), false) => *commit_lsn,
            _ => Lsn(0),
        };
        let handoff = Handoff { replication, sql, start_lsn, version, acked, tables: tables.len(), record };
        self.act(plan, exported, handoff, &tables, from).await
    }

    /// Queues every table for an incremental snapshot.
    fn queue_reread(&mut self, version: u32, tables: &[Matched]) -> Result<(), SourceError> {
        let mode = self.stream.config.snapshot.mode;
        if version < 140_000 {
            return Err(SourceError::permanent(
                format!(
                    "snapshot.mode {mode:?} re-reads tables with incremental snapshots, which need PostgreSQL 14 or later"
                ),
                "set snapshot.mode: initial, or upgrade the server",
            ));
        }
        let incremental = self.driver.incremental().ok_or_else(|| {
            SourceError::permanent("incremental snapshots need a data dir for their state", "run with --data-dir")
        })?;
        incremental.enqueue(tables.iter().map(Matched::name))?;
        info!(tables = tables.len(), mode = ?mode, "every table queued for an incremental snapshot");
        Ok(())
    }

    /// Takes or resumes the initial snapshot the plan asks for, or streams.
    async fn act(
        &mut self,
        plan: StartPlan,
        exported: Option<(String, String)>,
        mut handoff: Handoff,
        tables: &[Matched],
        from: Option<Position>,
    ) -> Result<(), SourceError> {
        let resume = match plan.snapshot {
            InitialSnapshot::Resume(pos) => Some(pos),
            InitialSnapshot::Fresh | InitialSnapshot::None => None,
        };
        let (stream_from, import) = match (exported, &resume) {
            (Some((point, name)), _) => (point, Some(name)),
            (None, Some(pos)) => (pos.stream_from.to_string(), None),
            (None, None) => {
                let reader = self.stream.stream(handoff, from).await?;
                self.driver.streaming(reader);
                return Ok(());
            }
        };
        handoff.start_lsn = if resume.is_some() { Lsn(0) } else { stream_from.parse().unwrap_or(Lsn(0)) };
        let run = self.stream.snapshot_run(&mut handoff.sql, tables, stream_from, import, resume).await?;
        self.driver.snapshotting(run, from, None, handoff);
        Ok(())
    }
}

/// The slot's confirmed position and the most Sluice knows of (its record
/// of what it confirmed, or the checkpoint), when the slot is past both.
fn moved_past(state: &SlotState, record: Option<&SlotRecord>, from: Option<&Position>) -> Option<(Lsn, Lsn)> {
    let found = state.confirmed?;
    let recorded = record?.confirmed()?;
    let checkpoint = match from?.base() {
        Position::Postgres { commit_lsn, .. } => *commit_lsn,
        _ => Lsn(0),
    };
    let known = recorded.max(checkpoint);
    (found > known).then_some((found, known))
}

async fn drop_slot(replication: &mut Connection, slot: &str) -> Result<(), SourceError> {
    replication
        .simple_query(&format!("DROP_REPLICATION_SLOT {} WAIT", quote_ident(slot)))
        .await
        .map_err(|e| source_error(&format!("cannot drop replication slot {slot:?}"), e))?;
    Ok(())
}

impl PgStream {
    /// The matched tables, keyless ones settled and the publications made
    /// to match; partitioned tables are left out, as they are read
    /// through their partitions.
    async fn settle_tables(&mut self, sql: &mut Connection, version: u32) -> Result<Vec<Matched>, SourceError> {
        let config = &self.config;
        let matched = catalog::matching_tables(sql, &config.tables).await?;
        let names = |tables: &[Matched]| tables.iter().map(Matched::name).collect::<Vec<_>>();
        let all = names(&matched);
        let (tables, inserts) = catalog::settle_keyless(sql, matched, config.keyless_tables).await?;
        let kept = names(&tables);
        self.skipped = all.into_iter().filter(|t| !kept.contains(t)).collect();
        self.inserts_publication = !inserts.is_empty();
        let published = catalog::published(&tables);
        let (main, keyless): (Vec<_>, Vec<_>) = published.into_iter().partition(|t| !inserts.contains(&t.name()));
        let publication = config.publication_name();
        // On a standby the publication comes from the primary.
        let create = config.create_publication && !self.on_standby;
        let later = self.watches_new_tables(version);
        catalog::ensure_publication(sql, &publication, create, &main, false, later).await?;
        let inserts_publication = config.inserts_publication_name();
        catalog::ensure_publication(sql, &inserts_publication, create, &keyless, true, false).await?;
        Ok(tables.into_iter().filter(|t| !t.partitioned).collect())
    }

    /// Makes sure the slot exists; a `fresh` start (no sink holds
    /// anything) gets a new slot that exports its snapshot, whose point
    /// and name are returned.
    async fn settle_slot(
        &self,
        replication: &mut Connection,
        mut exists: bool,
        fresh: bool,
        record: Option<&mut SlotRecord>,
    ) -> Result<Option<(String, String)>, SourceError> {
        let config = &self.config;
        let slot = config.slot_name();
        if exists && fresh {
            // No sink holds anything, so nothing read from this slot was
            // delivered (a crash before the first checkpoint, say): the
            // snapshot starts over with a slot of its own.
            if !config.create_slot {
                return Err(SourceError::permanent(
                    format!(
                        "snapshot.mode is initial, but replication slot {slot:?} exists already and create_slot is false: a snapshot must be taken as the slot is created, to match it exactly"
                    ),
                    format!(
                        "drop the slot (SELECT pg_drop_replication_slot({})) and set create_slot: true, or set snapshot.mode: never",
                        quote_literal(&slot)
                    ),
                ));
            }
            drop_slot(replication, &slot).await?;
            warn!(slot, "dropped the slot: no sink holds a checkpoint, so the snapshot starts over with a new slot");
            exists = false;
        }
        if exists {
            if self.failover_slot {
                make_failover_slot(replication, &slot).await?;
            }
            return Ok(None);
        }
        if !config.create_slot {
            return Err(SourceError::permanent(
                format!("replication slot {slot:?} does not exist"),
                format!(
                    "set create_slot: true, or run SELECT pg_create_logical_replication_slot({}, 'pgoutput')",
                    quote_literal(&slot)
                ),
            ));
        }
        let how = match (fresh, self.failover_slot) {
            (true, false) => "EXPORT_SNAPSHOT",
            (false, false) => "NOEXPORT_SNAPSHOT",
            (true, true) => "(SNAPSHOT 'export', FAILOVER true)",
            (false, true) => "(SNAPSHOT 'nothing', FAILOVER true)",
        };
        let created = replication
            .simple_query(&format!("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput {how}", quote_ident(&slot)))
            .await
            .map_err(|e| source_error(&format!("cannot create replication slot {slot:?}"), e))?;
        info!(slot, failover = self.failover_slot, "replication slot created");
        let field = |name: &str| created.first(name).map(str::to_string);
        if let (Some(record), Some(point)) = (record, field("consistent_point").and_then(|p| p.parse().ok())) {
            record.raise(point)?;
        }
        if !fresh {
            return Ok(None);
        }
        match (field("consistent_point"), field("snapshot_name")) {
            (Some(point), Some(name)) => Ok(Some((point, name))),
            _ => Err(SourceError::transient("CREATE_REPLICATION_SLOT returned no snapshot")),
        }
    }

    /// Plans every table and spawns the snapshot readers.
    async fn snapshot_run(
        &self,
        sql: &mut Connection,
        tables: &[Matched],
        stream_from: String,
        import: Option<String>,
        resume: Option<SnapshotPos>,
    ) -> Result<sluice_core::snapshot::Run, SourceError> {
        let config = &self.config;
        let mut plans = Vec::with_capacity(tables.len());
        for table in tables {
            plans.extend(snapshot::plan_table(sql, &table.schema, &table.table, config.snapshot.chunk_size).await?);
        }
        plans.sort_by(|a, b| a.read_name.cmp(&b.read_name));
        info!(
            tables = plans.len(),
            resume_after = %resume.as_ref().map_or_else(|| "-".to_string(), |p| p.table.to_string()),
            stream_from,
            "snapshot starting"
        );
        let settings = snapshot::Settings {
            params: self.params.clone(),
            source_id: Arc::from(config.id.as_str()),
            database: Arc::from(config.database.as_str()),
            chunk_size: config.snapshot.chunk_size,
            stream_from: Arc::from(stream_from.as_str()),
            slot: config.slot_name(),
            repair: config.snapshot.mode == SnapshotMode::WhenNeeded,
            import,
            started_us: sluice_core::time::now_us(),
        };
        Ok(snapshot::spawn(settings, config.snapshot.max_parallel_tables, plans, resume))
    }
}

/// Turns an existing slot into a failover slot (PostgreSQL 17+), so a
/// standby with `sync_replication_slots` keeps a copy a failover can use.
async fn make_failover_slot(replication: &mut Connection, slot: &str) -> Result<(), SourceError> {
    let rows = replication
        .simple_query(&format!("SELECT failover FROM pg_replication_slots WHERE slot_name = {}", quote_literal(slot)))
        .await
        .map_err(|e| source_error(&format!("cannot read replication slot {slot:?}"), e))?;
    if rows.first("failover") != Some("f") {
        return Ok(());
    }
    replication
        .simple_query(&format!("ALTER_REPLICATION_SLOT {} (FAILOVER true)", quote_ident(slot)))
        .await
        .map_err(|e| source_error(&format!("cannot make replication slot {slot:?} a failover slot"), e))?;
    info!(slot, "the slot is now a failover slot");
    Ok(())
}
