//! The `postgres` source.
//!
//! ```text
//! START_REPLICATION ─► reader task ──chunks──► poll() ─► coordinator
//!                        │  ▲
//!   standby status ◄─────┘  └── AckWatermark (MIN of every sink's checkpoint)
//! ```
//!
//! A reader task owns the replication connection. It decodes pgoutput
//! into events and, on its own timer, sends standby status updates, so the
//! server hears from Sluice every `status_interval_secs` even while slow
//! sinks hold the pipeline back (the server drops replication clients that
//! stay silent for `wal_sender_timeout`).
//!
//! The flush position it reports is the commit LSN of the lowest stored
//! checkpoint, so the server keeps every transaction a sink still lacks; a
//! transaction at that LSN is sent again after a restart and filtered.
//! When every event read so far is checkpointed by every sink and no
//! transaction is open, the flush position moves on to the end of the last
//! COMMIT received, or to the last heartbeat message received: decoding
//! runs in WAL order, so every transaction that committed before either
//! has been sent. Never to the server's WAL end from a keepalive: the
//! server may still be decoding a large transaction that committed before
//! it, and a slot confirmed past that transaction skips it after a
//! reconnect. With `heartbeat_secs`, an idle source does not make the
//! server keep WAL.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sluice_config::{PostgresConfig, SnapshotMode};
use sluice_core::source::ReaderHandle;
use sluice_core::{AckWatermark, Event, LogStats, Lsn, Position, Source, SourceError, SourceStatus};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use crate::catalog::{self, quote_ident, quote_literal, source_error};
use crate::decode::{Decoder, HEARTBEAT_PREFIX};
use crate::incremental;
use crate::pgoutput::{self, Frame, Message};
use crate::snapshot;
use crate::wire::{Backend, ConnectParams, Connection};
use sluice_core::snapshot::incremental::Incremental;

/// Decoded events gathered before the reader waits for the coordinator.
const READY_LIMIT: usize = 1024;
/// Chunks queued between the reader task and `poll`.
const CHUNK_QUEUE: usize = 8;
/// With nothing from the server for this long while reading, the
/// connection is taken for dead and reopened. The server sends keepalives
/// at half its `wal_sender_timeout` (60 s by default).
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// Counters for lag and throughput.
#[derive(Debug, Default)]
pub struct SourceStats {
    pub events_read: AtomicU64,
    pub bytes_read: AtomicU64,
    /// The server's WAL end, from the latest message.
    pub server_wal_end: AtomicU64,
    /// The flush position last reported to the server.
    pub flushed_lsn: AtomicU64,
    /// Commit time of the latest transaction read (µs since the Unix epoch).
    pub last_commit_time_us: AtomicI64,
    pub heartbeats_sent: AtomicU64,
}

impl SourceStats {
    /// WAL the slot still holds for Sluice.
    pub fn slot_lag_bytes(&self) -> u64 {
        self.server_wal_end.load(Ordering::Relaxed).saturating_sub(self.flushed_lsn.load(Ordering::Relaxed))
    }

    /// How far behind the database the latest event read is.
    pub fn replication_lag(&self) -> Duration {
        let commit = self.last_commit_time_us.load(Ordering::Relaxed);
        if commit == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(sluice_core::time::now_us().saturating_sub(commit).max(0) as u64)
    }
}

pub struct PostgresSource {
    config: PostgresConfig,
    params: ConnectParams,
    stats: Arc<SourceStats>,
    log: Arc<LogStats>,
    reader: Option<ReaderHandle>,
    snapshot: Option<PendingSnapshot>,
    /// Where incremental snapshot state is kept; without it signals are refused.
    state_dir: Option<PathBuf>,
    incremental: Option<Incremental<incremental::Reader>>,
    /// `snapshot.mode: always` re-reads the tables once per process.
    started_once: bool,
    /// Matched tables left out by `keyless_tables: skip`.
    skipped: Vec<String>,
    /// Keyless tables go through the inserts-only publication.
    inserts_publication: bool,
}

impl PostgresSource {
    pub fn new(config: PostgresConfig) -> Self {
        let params = connect_params(&config);
        Self {
            config,
            params,
            stats: Arc::default(),
            log: Arc::default(),
            reader: None,
            snapshot: None,
            state_dir: None,
            incremental: None,
            started_once: false,
            skipped: Vec::new(),
            inserts_publication: false,
        }
    }

    /// Keeps incremental snapshot state in `dir`, which turns on
    /// `sluice snapshot --table` for this source.
    pub fn with_state_dir(mut self, dir: PathBuf) -> Self {
        self.state_dir = Some(dir);
        self
    }

    pub fn stats(&self) -> Arc<SourceStats> {
        self.stats.clone()
    }

    async fn connect(&self, replication: bool) -> Result<Connection, SourceError> {
        let what = if replication { "replication connection" } else { "connection" };
        Connection::connect(&self.params, replication)
            .await
            .map_err(|e| source_error(&format!("{what} to {} as {:?}", self.params.addr(), self.params.user), e))
    }
}

#[async_trait]
impl Source for PostgresSource {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn start(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError> {
        self.reader = None;
        self.snapshot = None;
        self.incremental = match &self.state_dir {
            Some(dir) => {
                let config = &self.config;
                let reader = incremental::Reader::new(
                    self.params.clone(),
                    &config.id,
                    &config.database,
                    config.snapshot.chunk_size,
                );
                Some(Incremental::open(reader, &config.id, dir.join("incremental_snapshot.json"), from.as_ref())?)
            }
            None => None,
        };
        let mut start_lsn = match &from {
            None | Some(Position::Snapshot(_)) => Lsn(0),
            Some(Position::Postgres { commit_lsn, .. }) => *commit_lsn,
            Some(other) => {
                return Err(SourceError::permanent(
                    format!("checkpoint {other} was not written by a postgres source"),
                    "give this source a new id, or reset its checkpoints with `sluice checkpoints reset`",
                ));
            }
        };
        let mode = self.config.snapshot.mode;
        let mut snapshot = mode.initial();
        let highest = acked.highest_at_start();
        let resume = sluice_core::snapshot::resume_point(from.as_ref(), highest.as_ref(), snapshot);
        if snapshot && from.is_none() && matches!(highest, Some(Position::Postgres { .. })) {
            warn!(
                "a sink without a checkpoint joined a pipeline that streams already: it gets changes from the slot's position on, not the rows already in the tables"
            );
            snapshot = false;
        }
        let config = &self.config;
        let (slot, publication) = (config.slot_name(), config.publication_name());
        let mut sql = self.connect(false).await?;
        let version = catalog::check_server(&mut sql, &config.user).await?;
        let matched = catalog::matching_tables(&mut sql, &config.tables).await?;
        let names = |tables: &[catalog::Matched]| tables.iter().map(catalog::Matched::name).collect::<Vec<_>>();
        let all = names(&matched);
        let (tables, inserts) = catalog::settle_keyless(&mut sql, matched, config.keyless_tables).await?;
        let kept = names(&tables);
        self.skipped = all.into_iter().filter(|t| !kept.contains(t)).collect();
        self.inserts_publication = !inserts.is_empty();
        let published = catalog::published(&tables);
        let (main, keyless): (Vec<_>, Vec<_>) = published.into_iter().partition(|t| !inserts.contains(&t.name()));
        catalog::ensure_publication(&mut sql, &publication, config.create_publication, &main, false).await?;
        let inserts_publication = config.inserts_publication_name();
        catalog::ensure_publication(&mut sql, &inserts_publication, config.create_publication, &keyless, true).await?;
        // A partitioned table is read through its partitions.
        let tables: Vec<catalog::Matched> = tables.into_iter().filter(|t| !t.partitioned).collect();
        let state = catalog::slot_state(&mut sql, &slot, &config.database).await?;
        let mut replication = self.connect(true).await?;
        let mut exported = None;
        let mut exists = state.exists;
        let mut reread = mode == SnapshotMode::Always && from.is_some() && !self.started_once;
        let gone = state.lost || (!state.exists && (from.is_some() || highest.is_some()));
        let recreate = gone && mode == SnapshotMode::WhenNeeded && from.is_some();
        let mut resume = resume;
        if recreate {
            // An unfinished initial snapshot cannot stream from its point
            // either: the re-read covers its tables.
            resume = None;
            warn!(
                slot,
                "the slot no longer holds the changes since the checkpoints (dropped or invalidated); snapshot.mode when_needed: streaming from a new slot and re-reading every table"
            );
            if state.exists {
                replication
                    .simple_query(&format!("DROP_REPLICATION_SLOT {} WAIT", quote_ident(&slot)))
                    .await
                    .map_err(|e| source_error(&format!("cannot drop replication slot {slot:?}"), e))?;
            }
            exists = false;
            reread = true;
            start_lsn = Lsn(0);
        } else if state.lost {
            return Err(catalog::SlotState::lost_error(&slot));
        }
        if reread {
            if version < 140_000 {
                return Err(SourceError::permanent(
                    format!(
                        "snapshot.mode {mode:?} re-reads tables with incremental snapshots, which need PostgreSQL 14 or later"
                    ),
                    "set snapshot.mode: initial, or upgrade the server",
                ));
            }
            let incremental = self.incremental.as_mut().ok_or_else(|| {
                SourceError::permanent("incremental snapshots need a data dir for their state", "run with --data-dir")
            })?;
            incremental.enqueue(tables.iter().map(catalog::Matched::name))?;
            info!(tables = tables.len(), mode = ?mode, "every table queued for an incremental snapshot");
        }
        self.started_once = true;
        let fresh = snapshot && from.is_none() && highest.is_none();
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
            replication
                .simple_query(&format!("DROP_REPLICATION_SLOT {} WAIT", quote_ident(&slot)))
                .await
                .map_err(|e| source_error(&format!("cannot drop replication slot {slot:?}"), e))?;
            warn!(slot, "dropped the slot: no sink holds a checkpoint, so the snapshot starts over with a new slot");
            exists = false;
        }
        if !exists {
            if (from.is_some() || highest.is_some()) && !recreate {
                return Err(SourceError::permanent(
                    format!(
                        "replication slot {slot:?} does not exist, but this source has checkpoints: the slot was dropped, and changes made since are gone"
                    ),
                    "reset this pipeline's checkpoints with `sluice checkpoints reset` to start over from now (and take a new snapshot)",
                ));
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
            let how = if fresh { "EXPORT_SNAPSHOT" } else { "NOEXPORT_SNAPSHOT" };
            let created = replication
                .simple_query(&format!("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput {how}", quote_ident(&slot)))
                .await
                .map_err(|e| source_error(&format!("cannot create replication slot {slot:?}"), e))?;
            info!(slot, "replication slot created");
            if fresh {
                let field = |name: &str| created.first(name).map(str::to_string);
                match (field("consistent_point"), field("snapshot_name")) {
                    (Some(point), Some(name)) => exported = Some((point, name)),
                    _ => return Err(SourceError::transient("CREATE_REPLICATION_SLOT returned no snapshot")),
                }
            }
        }
        if exported.is_some() || resume.is_some() {
            let mut plans = Vec::with_capacity(tables.len());
            for table in &tables {
                plans.extend(
                    snapshot::plan_table(&mut sql, &table.schema, &table.table, config.snapshot.chunk_size).await?,
                );
            }
            plans.sort_by(|a, b| a.read_name.cmp(&b.read_name));
            let (stream_from, import) = match (exported, &resume) {
                (Some((point, name)), _) => (point, Some(name)),
                (None, Some(pos)) => (pos.stream_from.to_string(), None),
                (None, None) => unreachable!("checked above"),
            };
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
                slot: slot.clone(),
                repair: mode == SnapshotMode::WhenNeeded,
                import,
                started_us: sluice_core::time::now_us(),
            };
            let start_lsn = if resume.is_some() { Lsn(0) } else { stream_from.parse().unwrap_or(Lsn(0)) };
            // The replication connection idles until the snapshot is read:
            // it holds the exported snapshot, and then streams from its point.
            self.snapshot = Some(PendingSnapshot {
                run: snapshot::spawn(settings, config.snapshot.max_parallel_tables, plans, resume),
                replication,
                sql,
                start_lsn,
                version,
                last: from,
                acked,
                tables: tables.len(),
            });
            return Ok(());
        }
        self.stream(replication, sql, start_lsn, version, from, acked, tables.len()).await
    }

    fn log_stats(&self) -> Option<Arc<LogStats>> {
        Some(self.log.clone())
    }

    async fn poll(&mut self, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError> {
        if let Some(pending) = self.snapshot.as_mut() {
            match pending.run.next().await {
                Some(Ok(events)) => {
                    pending.last = events.last().map(|e| e.position.clone()).or(pending.last.take());
                    out.extend(events);
                    return Ok(SourceStatus::Open);
                }
                Some(Err(err)) => {
                    self.snapshot = None;
                    return Err(err);
                }
                None => {
                    let Some(done) = self.snapshot.take() else { unreachable!("matched above") };
                    info!("snapshot done; streaming from the snapshot point");
                    self.stream(
                        done.replication,
                        done.sql,
                        done.start_lsn,
                        done.version,
                        done.last,
                        done.acked,
                        done.tables,
                    )
                    .await?;
                }
            }
        }
        if let Some(incremental) = self.incremental.as_mut() {
            incremental.go_on().await?;
        }
        let reader =
            self.reader.as_mut().ok_or_else(|| SourceError::transient("postgres source polled before start"))?;
        match reader.next("replication reader").await {
            Ok(events) => {
                match self.incremental.as_mut() {
                    Some(incremental) => incremental.filter(events, out, incremental::mark).await?,
                    None => out.extend(events),
                }
                Ok(SourceStatus::Open)
            }
            Err(err) => {
                self.reader = None;
                Err(err)
            }
        }
    }
}

/// How to reach the server of a `postgres` source config.
pub fn connect_params(config: &PostgresConfig) -> ConnectParams {
    ConnectParams {
        host: config.host.clone(),
        port: config.port,
        database: config.database.clone(),
        user: config.user.clone(),
        password: config.password.clone(),
        ssl_mode: config.ssl_mode,
        ca_file: config.ca_file.clone(),
        connect_timeout: Duration::from_secs(config.connect_timeout_secs),
    }
}

/// A snapshot being read, and what streaming needs once it is done.
struct PendingSnapshot {
    run: sluice_core::snapshot::Run,
    replication: Connection,
    sql: Connection,
    start_lsn: Lsn,
    version: u32,
    /// The last position handed on: where streaming counts as read from.
    last: Option<Position>,
    acked: AckWatermark,
    tables: usize,
}

impl PostgresSource {
    /// Starts replication on `replication` and the reader task.
    #[allow(clippy::too_many_arguments)]
    async fn stream(
        &mut self,
        mut replication: Connection,
        sql: Connection,
        start_lsn: Lsn,
        version: u32,
        from: Option<Position>,
        acked: AckWatermark,
        tables: usize,
    ) -> Result<(), SourceError> {
        let config = &self.config;
        let (slot, publication) = (config.slot_name(), config.publication_name());
        let mut names = quote_ident(&publication);
        if self.inserts_publication {
            names = format!("{names},{}", quote_ident(&config.inserts_publication_name()));
        }
        let mut options = format!("proto_version '1', publication_names {}", quote_literal(&names));
        // Messages carry incremental snapshot signals and watermarks too.
        if (config.messages || self.state_dir.is_some()) && version >= 140_000 {
            options.push_str(", messages 'true'");
        }
        replication
            .start_copy_both(&format!("START_REPLICATION SLOT {} LOGICAL {start_lsn} ({options})", quote_ident(&slot)))
            .await
            .map_err(|e| source_error(&format!("cannot start replication from slot {slot:?}"), e))?;
        info!(slot, publication, from = %start_lsn, tables, "replication started");

        let (tx, rx) = mpsc::channel(CHUNK_QUEUE);
        let acked_now = acked.get();
        let reader = Reader {
            conn: replication,
            sql,
            decoder: {
                let mut decoder = Decoder::new(&config.id, &config.database, config.tables.clone(), config.messages);
                decoder.exclude(self.skipped.clone());
                decoder
            },
            acked,
            events: tx,
            status_interval: Duration::from_secs(config.status_interval_secs),
            heartbeat: config.heartbeat_secs.map(Duration::from_secs),
            stats: self.stats.clone(),
            log: self.log.clone(),
            slot: slot.clone(),
            read_through: 0,
            floor: floor(start_lsn, acked_now.as_ref()),
            flushed: Lsn(0),
            server_wal_end: 0,
            sent_through: Lsn(0),
            // A restart inside a running pipeline starts after events the
            // sinks may not hold yet: they count as read.
            last_emitted: from,
            last_received: Instant::now(),
        };
        let task = tokio::spawn(reader.run());
        self.reader = Some(ReaderHandle::new(rx, task));
        Ok(())
    }
}

struct Reader {
    conn: Connection,
    sql: Connection,
    decoder: Decoder,
    acked: AckWatermark,
    events: mpsc::Sender<Result<Vec<Event>, SourceError>>,
    status_interval: Duration,
    heartbeat: Option<Duration>,
    stats: Arc<SourceStats>,
    log: Arc<LogStats>,
    slot: String,
    /// The end of the WAL the server has sent so far.
    read_through: u64,
    /// A flush position known to be safe: see [`floor`].
    floor: Lsn,
    flushed: Lsn,
    server_wal_end: u64,
    /// Every transaction that committed before this was sent.
    sent_through: Lsn,
    last_emitted: Option<Position>,
    last_received: Instant,
}

impl Reader {
    async fn run(mut self) {
        if let Err(err) = self.stream().await {
            let _ = self.events.send(Err(err)).await;
        }
    }

    async fn stream(&mut self) -> Result<(), SourceError> {
        let mut status = tokio::time::interval(self.status_interval);
        status.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(self.heartbeat.unwrap_or(Duration::from_secs(86_400)));
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        heartbeat.tick().await;
        let mut ready: Vec<Event> = Vec::new();
        let events = self.events.clone();
        loop {
            tokio::select! {
                biased;
                _ = status.tick() => {
                    if !ready.is_empty() {
                        // Held back by the coordinator, not by the server.
                        self.last_received = Instant::now();
                    } else if self.last_received.elapsed() > RECEIVE_TIMEOUT {
                        return Err(SourceError::transient(format!(
                            "no message from the server for {}s; reconnecting",
                            RECEIVE_TIMEOUT.as_secs()
                        )));
                    }
                    self.send_status(ready.is_empty()).await?;
                    self.measure_log().await;
                }
                _ = heartbeat.tick(), if self.heartbeat.is_some() => {
                    let sql = format!("SELECT pg_logical_emit_message(false, {}, '')", quote_literal(HEARTBEAT_PREFIX));
                    self.sql.simple_query(&sql).await.map_err(|e| source_error("heartbeat", e))?;
                    self.stats.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
                }
                permit = events.reserve(), if !ready.is_empty() => {
                    // The receiver is gone only when the source was restarted or dropped.
                    let Ok(permit) = permit else { return Ok(()) };
                    self.last_emitted = ready.last().map(|e| e.position.clone());
                    permit.send(Ok(std::mem::take(&mut ready)));
                }
                message = self.conn.read_message(), if ready.len() < READY_LIMIT => {
                    let message = message.map_err(|e| source_error("replication stream", e))?;
                    self.last_received = Instant::now();
                    self.handle(message, &mut ready).await?;
                }
            }
        }
    }

    async fn handle(&mut self, message: Backend, ready: &mut Vec<Event>) -> Result<(), SourceError> {
        match message {
            Backend::CopyData(payload) => match pgoutput::parse_frame(payload).map_err(malformed)? {
                Frame::XLogData { wal_start, wal_end, data } => {
                    self.server_wal_end = self.server_wal_end.max(wal_end);
                    self.read_through = self.read_through.max(wal_start);
                    let message = pgoutput::parse_message(data).map_err(malformed)?;
                    match &message {
                        Message::Commit { end_lsn, .. } => self.sent_through = self.sent_through.max(Lsn(*end_lsn)),
                        Message::Message { transactional: false, lsn, .. } => {
                            self.sent_through = self.sent_through.max(Lsn(*lsn));
                        }
                        _ => {}
                    }
                    if let Message::Relation(relation) = &message {
                        let meta = catalog::relation_meta(&mut self.sql, relation.oid).await?;
                        self.decoder.set_meta(relation.oid, meta);
                        let unknown = self.decoder.unknown_types(relation);
                        if !unknown.is_empty() {
                            for (oid, ty) in catalog::resolve_types(&mut self.sql, &unknown).await? {
                                self.decoder.add_type(oid, ty);
                            }
                        }
                    }
                    let before = ready.len();
                    self.decoder.apply(message, ready).map_err(|e| {
                        SourceError::permanent(
                            format!("cannot decode the replication stream: {e}"),
                            "report this with the server version and the table definition",
                        )
                    })?;
                    if let Some(last) = ready.last() {
                        self.stats.last_commit_time_us.store(last.commit_time_us, Ordering::Relaxed);
                    }
                    self.stats.events_read.fetch_add((ready.len() - before) as u64, Ordering::Relaxed);
                }
                Frame::Keepalive { wal_end, reply_requested } => {
                    // A keepalive carries how far the server has sent.
                    self.server_wal_end = self.server_wal_end.max(wal_end);
                    self.read_through = self.read_through.max(wal_end);
                    if reply_requested {
                        self.send_status(ready.is_empty()).await?;
                    }
                }
            },
            Backend::Error(fields) => {
                let err = self.conn.server_error(fields);
                return Err(source_error("replication stream", err));
            }
            Backend::CopyDone => return Err(SourceError::transient("the server ended the replication stream")),
            _ => {}
        }
        self.stats.server_wal_end.store(self.server_wal_end, Ordering::Relaxed);
        self.stats.bytes_read.store(self.conn.bytes_read, Ordering::Relaxed);
        Ok(())
    }

    /// Asks the server for its WAL head and what the slot retains, for the
    /// API and metrics. A failure only leaves the figures stale: it must
    /// never stop replication.
    async fn measure_log(&mut self) {
        let sql = format!(
            "SELECT h::text, pg_wal_lsn_diff(h, s.restart_lsn)::bigint, r.sent_lsn::text \
             FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid, \
             (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS h) AS head \
             WHERE s.slot_name = {}",
            quote_literal(&self.slot)
        );
        let rows = match self.sql.simple_query(&sql).await {
            Ok(rows) => rows,
            Err(e) => {
                debug!(error = %e, "cannot read the WAL head and the slot's retained WAL");
                return;
            }
        };
        let Some(row) = rows.rows.first() else { return };
        let head = row.first().cloned().flatten().and_then(|h| h.parse::<Lsn>().ok());
        let retained = row.get(1).cloned().flatten().and_then(|r| r.parse::<i64>().ok());
        // WAL the server sent but filtered out (other databases) never
        // reaches the reader; what the server sent counts as read.
        let sent = row.get(2).cloned().flatten().and_then(|s| s.parse::<Lsn>().ok()).map_or(0, |s| s.0);
        if let Some(head) = head {
            let head = head.0.max(self.server_wal_end);
            self.log.set_head(Lsn(head).to_string(), head.saturating_sub(self.read_through.max(sent)));
        }
        if let Some(retained) = retained {
            self.log.set_retained_bytes(retained.max(0) as u64);
        }
    }

    /// The flush position: see the module docs.
    fn flush_position(&self, nothing_ready: bool) -> Lsn {
        flush_position(&Progress {
            floor: self.floor,
            acked: self.acked.get(),
            last_emitted: self.last_emitted.as_ref(),
            sent_through: self.sent_through,
            idle: nothing_ready && !self.decoder.in_transaction(),
        })
    }

    async fn send_status(&mut self, nothing_ready: bool) -> Result<(), SourceError> {
        self.flushed = self.flushed.max(self.flush_position(nothing_ready));
        let update = pgoutput::status_update(self.flushed.0, sluice_core::time::now_us(), false);
        self.conn.send_copy_data(&update).await.map_err(|e| source_error("standby status update", e))?;
        self.stats.flushed_lsn.store(self.flushed.0, Ordering::Relaxed);
        debug!(
            flushed = %self.flushed,
            slot_lag_bytes = self.stats.slot_lag_bytes(),
            events_read = self.stats.events_read.load(Ordering::Relaxed),
            "standby status sent"
        );
        Ok(())
    }
}

/// The lowest flush position the reader ever reports: the start when
/// every sink holds everything before it (a fresh start from the lowest
/// checkpoint), else the lowest checkpoint. A restart inside a running
/// pipeline starts after the last event read, which sinks may not hold
/// yet; reporting that start confirmed the slot past them, and a kill then
/// lost those events for good (the torture harness caught it).
fn floor(start: Lsn, acked: Option<&Position>) -> Lsn {
    match acked {
        Some(Position::Postgres { commit_lsn, .. }) => start.min(*commit_lsn),
        _ => Lsn(0),
    }
}

struct Progress<'a> {
    floor: Lsn,
    acked: Option<Position>,
    last_emitted: Option<&'a Position>,
    sent_through: Lsn,
    /// Nothing is waiting to go to the coordinator and no transaction is open.
    idle: bool,
}

fn flush_position(p: &Progress<'_>) -> Lsn {
    let mut flush = p.floor;
    if let Some(Position::Postgres { commit_lsn, .. }) = &p.acked {
        flush = flush.max(*commit_lsn);
    }
    let all_acked = match (p.last_emitted, &p.acked) {
        (None, _) => true,
        (Some(emitted), Some(acked)) => acked >= emitted,
        (Some(_), None) => false,
    };
    if p.idle && all_acked {
        flush = flush.max(p.sent_through);
    }
    flush
}

fn malformed(err: pgoutput::Malformed) -> SourceError {
    SourceError::permanent(
        format!("the server sent a replication message Sluice cannot read: {err}"),
        "report this with the server version; Sluice speaks pgoutput protocol version 1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: u64, seq: u32) -> Position {
        Position::Postgres { commit_lsn: Lsn(lsn), seq }
    }

    fn progress(floor: Lsn, acked: Option<Position>, last_emitted: Option<&Position>, idle: bool) -> Progress<'_> {
        Progress { floor, acked, last_emitted, sent_through: Lsn(900), idle }
    }

    #[test]
    fn a_fresh_start_from_the_lowest_checkpoint_starts_at_that_checkpoint() {
        let from = at(100, 3);
        let floor = floor(Lsn(100), Some(&from));
        assert_eq!(floor, Lsn(100));
        // Everything read is acked: an idle reader moves on to the last commit sent.
        assert_eq!(flush_position(&progress(floor, Some(from.clone()), Some(&from), true)), Lsn(900));
        assert_eq!(flush_position(&progress(floor, Some(from.clone()), Some(&from), false)), Lsn(100));
    }

    #[test]
    fn a_restart_after_events_the_sinks_lack_never_confirms_past_them() {
        // The pipeline read up to 500 and restarts the source there, while
        // the sinks hold only up to 100.
        let (acked, read) = (at(100, 0), at(500, 7));
        let floor = floor(Lsn(500), Some(&acked));
        assert_eq!(floor, Lsn(100));
        // Nothing new read yet, a heartbeat past 500 arrived: still the checkpoint.
        assert_eq!(flush_position(&progress(floor, Some(acked.clone()), Some(&read), true)), Lsn(100));
        // Once the sinks hold what was read, the heartbeat counts.
        assert_eq!(flush_position(&progress(floor, Some(read.clone()), Some(&read), true)), Lsn(900));
    }

    #[test]
    fn with_no_checkpoint_nothing_is_confirmed_until_the_sinks_hold_events() {
        assert_eq!(floor(Lsn(500), None), Lsn(0));
        let read = at(500, 0);
        assert_eq!(flush_position(&progress(Lsn(0), None, Some(&read), true)), Lsn(0));
        assert_eq!(flush_position(&progress(Lsn(0), None, None, true)), Lsn(900));
    }
}
