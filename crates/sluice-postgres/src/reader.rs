//! The replication reader task: it owns the replication connection,
//! decodes pgoutput into events and, on its own timer, sends standby
//! status updates, so the server hears from Sluice every
//! `status_interval_secs` even while slow sinks hold the pipeline back
//! (the server drops replication clients that stay silent for
//! `wal_sender_timeout`).
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

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_core::source::ReaderHandle;
use sluice_core::{AckWatermark, Event, LogStats, Lsn, Position, SourceError};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info};

use crate::catalog::{self, quote_ident, quote_literal, source_error};
use crate::decode::{DecodeError, Decoder};
use crate::new_tables::NewTables;
use crate::partition_watch::PartitionWatch;
use crate::pgoutput::{self, Frame, HEARTBEAT_PREFIX, Message};
use crate::slot_record::SlotRecord;
use crate::source::{PgStream, SourceStats};
use crate::wire::{Backend, Connection};

/// Decoded events gathered before the reader waits for the coordinator.
const READY_LIMIT: usize = 1024;
/// How often the reader measures how far behind the server's head it is:
/// often enough that a stall shows within the runtime's stall window (5 s),
/// apart from the standby status interval, which may be minutes.
const LOG_MEASURE_INTERVAL: Duration = Duration::from_secs(2);
/// Chunks queued between the reader task and `poll`. The reader hands on
/// chunks of up to [`READY_LIMIT`] events when the server is ahead, so two
/// keep the coordinator fed without holding thousands of events more.
const CHUNK_QUEUE: usize = 2;
/// With nothing from the server for this long while reading, the
/// connection is taken for dead and reopened. The server sends keepalives
/// at half its `wal_sender_timeout` (60 s by default).
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// What streaming needs, held while an initial snapshot is read: the
/// replication connection holds the exported snapshot, then streams from
/// its point.
pub(crate) struct Handoff {
    pub replication: Connection,
    pub sql: Connection,
    pub start_lsn: Lsn,
    pub version: u32,
    pub acked: AckWatermark,
    pub tables: usize,
    /// Raised before each position the reader confirms, with a state dir.
    pub record: Option<SlotRecord>,
}

impl PgStream {
    /// Starts replication and the reader task. `from` is the last
    /// position handed on: a restart inside a running pipeline starts
    /// after events the sinks may not hold yet, and they count as read.
    pub(crate) async fn stream(
        &mut self,
        handoff: Handoff,
        from: Option<Position>,
    ) -> Result<ReaderHandle, SourceError> {
        let Handoff { mut replication, sql, start_lsn, version, acked, tables, record } = handoff;
        let config = &self.config;
        let (slot, publication) = (config.slot_name(), config.publication_name());
        let mut names = quote_ident(&publication);
        if self.inserts_publication {
            names = format!("{names},{}", quote_ident(&config.inserts_publication_name()));
        }
        let mut options = format!("proto_version '1', publication_names {}", quote_literal(&names));
        // Messages carry incremental snapshot signals and watermarks too.
        if (config.emit_messages() || self.state_dir.is_some()) && version >= 140_000 {
            options.push_str(", messages 'true'");
        }
        replication
            .start_copy_both(&format!("START_REPLICATION SLOT {} LOGICAL {start_lsn} ({options})", quote_ident(&slot)))
            .await
            .map_err(|e| source_error(&format!("cannot start replication from slot {slot:?}"), e))?;
        info!(slot, publication, from = %start_lsn, tables, "replication started");

        let (tx, rx) = mpsc::channel(CHUNK_QUEUE);
        let acked_now = acked.get();
        let mut decoder = Decoder::new(&config.id, &config.database, config.tables.clone(), config.emit_messages());
        decoder.exclude(self.skipped.clone());
        if let Some(dir) = &self.state_dir {
            decoder.keep_history(crate::schema_change::ColumnHistory::open(dir.clone())?);
        }
        let reader = Reader {
            conn: replication,
            sql,
            decoder,
            acked,
            events: tx,
            status_interval: Duration::from_secs(config.status_interval_secs),
            heartbeat: config.heartbeat_secs.map(Duration::from_secs),
            stats: self.stats.clone(),
            log: self.log.clone(),
            slot,
            read_through: 0,
            floor: floor(start_lsn, acked_now.as_ref()),
            flushed: Lsn(0),
            server_wal_end: 0,
            sent_through: Lsn(0),
            last_emitted: from,
            last_received: Instant::now(),
            record,
            new_tables: self.watches_new_tables(version).then(|| NewTables::new(config)),
            partitions: {
                let (renew, reread) = (version < 150_000, self.rereads_partitions(version));
                (renew || reread).then(|| PartitionWatch::new(config, self.state_dir.clone(), renew, reread))
            },
        };
        Ok(ReaderHandle::new(rx, tokio::spawn(reader.run())))
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
    record: Option<SlotRecord>,
    /// Publishes tables created while streaming, when Sluice manages the
    /// publication and incremental snapshots are on.
    new_tables: Option<NewTables>,
    /// Reads the partitions attached to a captured table, and before 15
    /// renews the publication after partitions come or go.
    partitions: Option<PartitionWatch>,
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
        let mut measure = tokio::time::interval(LOG_MEASURE_INTERVAL);
        measure.set_missed_tick_behavior(MissedTickBehavior::Delay);
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
                }
                _ = measure.tick() => {
                    self.measure_log().await;
                    if let Some(new_tables) = &mut self.new_tables {
                        new_tables.check(&mut self.sql).await;
                    }
                    if let Some(partitions) = &mut self.partitions {
                        partitions.check(&mut self.sql).await;
                    }
                }
                _ = heartbeat.tick(), if self.heartbeat.is_some() => {
                    let sql = format!("SELECT pg_logical_emit_message(false, {}, '')", quote_literal(HEARTBEAT_PREFIX));
                    self.sql.simple_query(&sql).await.map_err(|e| source_error("heartbeat", e))?;
                    self.stats.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
                }
                // Reading first: what the server has already sent goes into
                // one chunk, handed on once the socket has nothing more (or
                // the chunk is full), rather than a chunk per row, each of
                // which wakes the pipeline.
                message = self.conn.read_message(), if ready.len() < READY_LIMIT => {
                    let message = message.map_err(|e| source_error("replication stream", e))?;
                    self.last_received = Instant::now();
                    self.handle(message, &mut ready).await?;
                }
                permit = events.reserve(), if !ready.is_empty() => {
                    // The receiver is gone only when the source was restarted or dropped.
                    let Ok(permit) = permit else { return Ok(()) };
                    self.last_emitted = ready.last().map(|e| e.position.clone());
                    // Room for a full chunk, or one like this if larger, so the next
                    // does not move its events each time it grows; a kept vector's
                    // pages are resident.
                    let room = ready.len().max(READY_LIMIT);
                    permit.send(Ok(std::mem::replace(&mut ready, sluice_core::event_vecs::take(room))));
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
                    self.decoder.at(wal_start);
                    self.decoder.apply(message, ready).map_err(|e| match e {
                        DecodeError::History(e) => e,
                        e => SourceError::permanent(
                            format!("cannot decode the replication stream: {e}"),
                            "report this with the server version and the table definition",
                        ),
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
            "SELECT h::text, pg_wal_lsn_diff(h, s.restart_lsn)::bigint \
             FROM pg_replication_slots s, \
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
        // What the reader has taken off the connection, not what the server
        // sent: sent bytes may sit in socket buffers while the pipeline is
        // held back. WAL the server filters out (other databases) still
        // counts as read once a keepalive past it arrives (`read_through`).
        if let Some(head) = head {
            let head = head.0.max(self.server_wal_end);
            self.log.set_head(Lsn(head).to_string(), head.saturating_sub(self.read_through));
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
        if let Some(record) = &mut self.record {
            record.raise(self.flushed)?;
        }
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
