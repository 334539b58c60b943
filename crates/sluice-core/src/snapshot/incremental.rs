//! Incremental snapshots: one table re-read while streaming goes on,
//! asked for by a signal written into the database's log.
//!
//! ```text
//! signal ─► for each chunk: write low watermark ─► SELECT next rows by key
//!                           ─► write high watermark
//! stream:  … low … changes to the table (their keys leave the chunk) … high
//!                                            └─► rest of the chunk as op r
//! ```
//!
//! A row the stream changes between the watermarks may have been read
//! before or after the change, so it is dropped from the chunk: the stream
//! carries it in its newer state. So is a row changed, before the low
//! watermark, by a transaction the read could not see yet: PostgreSQL
//! writes a commit to the WAL a moment before other sessions see it, so
//! the log order alone does not prove what the read saw
//! ([`ChunkReader::unseen`]). For the same reason each read first waits
//! until the transactions already handed on are visible
//! ([`ChunkReader::wait_visible`]). Every other row of the chunk is as the
//! database held it at the high watermark, so the chunk goes out there, at
//! the high watermark's position (the watermark's own transaction holds
//! nothing else), and no row is ever emitted stale after a newer change.
//! The rows' positions are stream positions, so each sink's checkpoint and
//! dedup work as for any change.
//!
//! The rows are not in the log: after a crash the chunks a sink may lack
//! are read again, from the last chunk every sink holds (kept in a state
//! file next to the checkpoints), at new positions further on.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{hex, progress, unhex};
use crate::error::SourceError;
use crate::event::Event;
use crate::position::Position;
use crate::value::{Row, Value};

/// What a source found in its log for incremental snapshots.
pub enum Mark {
    /// A request, as JSON `{"source": ID, "table": NAME}`.
    Signal(String),
    /// A watermark this module wrote: `RUN:CHUNK:low|high`.
    Watermark(String),
    /// Something else of the source's own bookkeeping: never handed on.
    Internal,
}

/// What a signal asks for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Signal {
    pub source: String,
    pub table: String,
}

/// One table's rows read by key, for a source's incremental snapshots.
#[async_trait]
pub trait ChunkReader: Send {
    /// Gets ready to read `table` after the encoded key `after`, and gives
    /// the server's estimate of its rows (0 when it has none). `Ok(Err)`
    /// says why the table cannot be read by key: it is refused, not fatal.
    async fn open(&mut self, table: &str, after: Option<&[u8]>) -> Result<Result<u64, String>, SourceError>;

    /// Writes the watermark `low` into the log, reads the next rows by key,
    /// then writes `high`.
    async fn read_chunk(&mut self, low: &str, high: &str) -> Result<ChunkRows, SourceError>;

    /// Whether the last chunk's read could not see the changes of
    /// transaction `tx_id`, though it may be before the low watermark in
    /// the log. The default, for sources whose log order is the order in
    /// which commits become visible, answers no.
    fn unseen(&self, _tx_id: &str) -> bool {
        false
    }

    /// Waits until a read would see every one of `tx_ids`, transactions
    /// the stream has handed on. The default, for sources whose log order
    /// is the order in which commits become visible, returns at once.
    async fn wait_visible(&mut self, _tx_ids: &[Arc<str>]) -> Result<(), SourceError> {
        Ok(())
    }
}

pub struct ChunkRows {
    /// Each row as an op `r` event; its position, transaction and commit
    /// time are set when it goes out.
    pub rows: Vec<Event>,
    /// The encoded key of the last row read, to go on after.
    pub last_key: Option<Vec<u8>>,
    /// The chunk was full: more rows may follow.
    pub full: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The signal position last taken: a replayed signal at or before it
    /// is not a new request.
    last_signal: Option<String>,
    /// Tables asked for and not done yet, the first one being read.
    queue: VecDeque<Table>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Table {
    name: String,
    /// Chunks handed on: the position of each one's last row and the key
    /// (hex) of its last row read.
    chunks: Vec<(String, String)>,
}

/// How many of the latest transactions handed on each chunk's read waits
/// to see. One still unseen when the read starts committed a moment before
/// a watermark the stream has since delivered, so it is among the latest.
pub const HANDED_ON_TXS: usize = 4096;

/// The table being read.
struct Active {
    table: String,
    /// Tells this process's watermarks from replayed ones of an earlier run.
    run: String,
    chunk: u64,
    pending: Option<Pending>,
}

/// A chunk read, waiting for its high watermark.
struct Pending {
    low_seen: bool,
    rows: Vec<Event>,
    changed: HashSet<String>,
    last_key: Option<Vec<u8>>,
    full: bool,
}

/// The table being read, for [`progress`].
struct Counting {
    table: Arc<str>,
    estimated_rows: u64,
    rows: u64,
    started: Instant,
}

pub struct Incremental<R> {
    reader: R,
    counting: Option<Counting>,
    /// Tables read since the queue was last empty.
    tables_done: usize,
    /// Keeps this source's progress entry while tables are queued.
    shown: Option<progress::Shown>,
    source_id: String,
    /// The source's state, which keeps [`STATE_NAME`].
    store: crate::StateDir,
    state: State,
    active: Option<Active>,
    /// The latest transactions handed on, newest last.
    handed_on: VecDeque<Arc<str>>,
}

/// The progress's name in its source's state.
pub const STATE_NAME: &str = "incremental_snapshot.json";

fn state_error(store: &crate::StateDir, detail: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(
        format!("incremental snapshot state {}: {detail}", store.locate(STATE_NAME)),
        "check the checkpoint store (the disk of --data-dir, or the store's database); if the state is damaged, move it away (the snapshots it lists stop)",
    )
}

/// A key as text, to compare a stream event's key with a chunk row's.
fn key_text(key: &Row) -> String {
    serde_json::to_string(&key.values).unwrap_or_default()
}

/// Column `column` of the event's row, when it is text: where sources
/// find a signal's or watermark's content.
pub fn text_at(event: &Event, column: usize) -> Option<&str> {
    match event.after.as_ref()?.values.get(column)? {
        Value::Text(text) => Some(text),
        _ => None,
    }
}

impl<R: ChunkReader> Incremental<R> {
    /// Loads the progress kept in `store`; `acked` is where the stream
    /// restarts (the lowest checkpoint), so chunks past it are read again.
    pub fn open(
        reader: R,
        source_id: &str,
        store: crate::StateDir,
        acked: Option<&Position>,
    ) -> Result<Self, SourceError> {
        let mut state: State = match store.read(STATE_NAME).map_err(|e| state_error(&store, e))? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| state_error(&store, e))?,
            None => State::default(),
        };
        if let Some(table) = state.queue.front_mut() {
            let held = |chunk: &(String, String)| {
                let position: Option<Position> = chunk.0.parse().ok();
                matches!((position, acked), (Some(p), Some(a)) if p <= *a)
            };
            let keep = table.chunks.iter().take_while(|c| held(c)).count();
            if keep < table.chunks.len() {
                info!(
                    table = table.name,
                    chunks_kept = keep,
                    chunks_again = table.chunks.len() - keep,
                    "incremental snapshot resumes after the last chunk every sink holds"
                );
            }
            table.chunks.truncate(keep);
        }
        Ok(Self {
            reader,
            counting: None,
            tables_done: 0,
            shown: None,
            source_id: source_id.to_string(),
            store,
            state,
            active: None,
            handed_on: VecDeque::new(),
        })
    }

    fn save(&self) -> Result<(), SourceError> {
        let bytes = serde_json::to_vec(&self.state).map_err(|e| state_error(&self.store, e))?;
        self.store.write(STATE_NAME, &bytes).map_err(|e| state_error(&self.store, e))
    }

    /// Queues `tables` for re-reading, as a signal would (the source asks
    /// for itself: `snapshot.mode` always or when_needed). Reading starts
    /// with the next events.
    pub fn enqueue(&mut self, tables: impl IntoIterator<Item = String>) -> Result<(), SourceError> {
        for name in tables {
            if !self.state.queue.iter().any(|t| t.name == name) {
                self.state.queue.push_back(Table { name, chunks: Vec::new() });
            }
        }
        self.save()
    }

    /// Starts reading the first queued table if none is being read. A
    /// source calls it before it waits for the stream: the first chunk's
    /// watermarks are what wake an idle stream.
    pub async fn start_queued_table(&mut self) -> Result<(), SourceError> {
        if self.active.is_none() && !self.state.queue.is_empty() {
            self.activate().await?;
        }
        Ok(())
    }

    /// Passes `events` on to `out`, taking out the ones `mark` recognises
    /// and putting each chunk's rows in at its high watermark.
    pub async fn filter(
        &mut self,
        events: Vec<Event>,
        out: &mut Vec<Event>,
        mark: impl Fn(&Event) -> Option<Mark>,
    ) -> Result<(), SourceError> {
        self.start_queued_table().await?;
        for event in events {
            match mark(&event) {
                Some(Mark::Signal(content)) => {
                    self.signal(&event, &content).await?;
                    continue;
                }
                Some(Mark::Watermark(content)) => {
                    self.watermark(&event, &content, out).await?;
                    continue;
                }
                Some(Mark::Internal) => continue,
                None => {}
            }
            let reader = &self.reader;
            if let Some(active) = self.active.as_mut()
                && let Some(pending) = active.pending.as_mut().filter(|p| p.low_seen || reader.unseen(&event.tx_id))
                // Rows carry the name the stream gives the table's changes,
                // which for a partition is its root's, not the name asked for.
                && pending.rows.first().map_or(active.table.as_str(), |row| &*row.table) == &*event.table
                && let Some(key) = &event.key
            {
                pending.changed.insert(key_text(key));
                if let Some(before) = &event.before {
                    pending.changed.insert(key_text(&project(before, key)));
                }
            }
            if self.handed_on.back().is_none_or(|tx| *tx != event.tx_id) {
                if self.handed_on.len() == HANDED_ON_TXS {
                    self.handed_on.pop_front();
                }
                self.handed_on.push_back(event.tx_id.clone());
            }
            out.push(event);
        }
        Ok(())
    }

    async fn signal(&mut self, event: &Event, content: &str) -> Result<(), SourceError> {
        let seen = self.state.last_signal.as_ref().and_then(|p| p.parse::<Position>().ok());
        if seen.is_some_and(|p| event.position <= p) {
            return Ok(());
        }
        let signal: Signal = match serde_json::from_str(content) {
            Ok(signal) => signal,
            Err(e) => {
                warn!(content, error = %e, "an incremental snapshot signal that is not {{\"source\":..., \"table\":...}}: ignored");
                return Ok(());
            }
        };
        if signal.source != self.source_id {
            return Ok(());
        }
        self.state.last_signal = Some(event.position.to_string());
        if self.state.queue.iter().any(|t| t.name == signal.table) {
            info!(table = signal.table, "incremental snapshot asked for again while queued or running: once is enough");
        } else {
            info!(table = signal.table, "incremental snapshot asked for");
            self.state.queue.push_back(Table { name: signal.table, chunks: Vec::new() });
        }
        self.save()?;
        if self.active.is_none() {
            self.activate().await?;
        }
        Ok(())
    }

    /// Starts reading the first queued table, after its last chunk held.
    async fn activate(&mut self) -> Result<(), SourceError> {
        while let Some(table) = self.state.queue.front().cloned() {
            let after = match table.chunks.last() {
                Some((_, key)) => Some(unhex(key).ok_or_else(|| {
                    state_error(&self.store, format!("the key of {}'s last chunk is not hex", table.name))
                })?),
                None => None,
            };
            let estimated_rows = match self.reader.open(&table.name, after.as_deref()).await? {
                Ok(estimate) => estimate,
                Err(why) => {
                    warn!(table = table.name, why, "incremental snapshot refused");
                    progress::end(&self.source_id, &table.name, 0, Some(why));
                    self.state.queue.pop_front();
                    self.save()?;
                    continue;
                }
            };
            self.counting =
                Some(Counting { table: table.name.as_str().into(), estimated_rows, rows: 0, started: Instant::now() });
            self.show();
            info!(table = table.name, resume = after.is_some(), "incremental snapshot starting");
            let run = format!("{:x}", crate::time::now_us());
            self.active = Some(Active { table: table.name, run, chunk: table.chunks.len() as u64, pending: None });
            return self.read_chunk().await;
        }
        self.counting = None;
        self.tables_done = 0;
        self.shown = None;
        Ok(())
    }

    fn show(&mut self) {
        let Some(counting) = &self.counting else { return };
        let source: Arc<str> = self.source_id.as_str().into();
        self.shown.get_or_insert_with(|| progress::Shown { source: source.clone(), incremental: true });
        progress::Reading {
            source: &source,
            incremental: true,
            table: &counting.table,
            tables: (self.tables_done, self.tables_done + self.state.queue.len()),
            rows: counting.rows,
            estimated_rows: counting.estimated_rows,
            started: counting.started,
        }
        .show();
    }

    async fn read_chunk(&mut self) -> Result<(), SourceError> {
        let Some(active) = self.active.as_mut() else { return Ok(()) };
        let mark = |side: &str| format!("{}:{}:{side}", active.run, active.chunk);
        self.reader.wait_visible(self.handed_on.make_contiguous()).await?;
        let chunk = self.reader.read_chunk(&mark("low"), &mark("high")).await?;
        active.pending = Some(Pending {
            low_seen: false,
            rows: chunk.rows,
            changed: HashSet::new(),
            last_key: chunk.last_key,
            full: chunk.full,
        });
        Ok(())
    }

    async fn watermark(&mut self, event: &Event, content: &str, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let Some(active) = self.active.as_mut() else { return Ok(()) };
        let ours = format!("{}:{}:", active.run, active.chunk);
        let Some(side) = content.strip_prefix(&ours) else { return Ok(()) };
        let Some(pending) = active.pending.as_mut() else { return Ok(()) };
        if side == "low" {
            pending.low_seen = true;
            return Ok(());
        }
        let Some(pending) = active.pending.take() else { return Ok(()) };
        let changed = pending.changed;
        let kept: Vec<Event> = pending
            .rows
            .into_iter()
            .filter(|row| row.key.as_ref().is_none_or(|k| !changed.contains(&key_text(k))))
            .collect();
        let count = kept.len();
        for (seq, row) in kept.into_iter().enumerate() {
            out.push(Event {
                position: event.position.with_seq(seq as u32),
                tx_id: "snapshot".into(),
                tx_end: seq + 1 == count,
                commit_time_us: event.commit_time_us,
                ..row
            });
        }
        if let Some(last_key) = pending.last_key
            && let Some(table) = self.state.queue.front_mut()
        {
            let at = event.position.with_seq(count.saturating_sub(1) as u32);
            table.chunks.push((at.to_string(), hex(&last_key)));
        }
        active.chunk += 1;
        if let Some(counting) = self.counting.as_mut() {
            counting.rows += count as u64;
        }
        if pending.full {
            self.save()?;
            self.show();
            return self.read_chunk().await;
        }
        info!(table = active.table, chunks = active.chunk, "incremental snapshot done");
        progress::end(&self.source_id, &active.table, self.counting.as_ref().map_or(0, |c| c.rows), None);
        self.active = None;
        self.state.queue.pop_front();
        self.tables_done += 1;
        self.save()?;
        self.activate().await
    }
}

/// `key`'s columns, with their values from `row`.
fn project(row: &Row, key: &Row) -> Row {
    let values = key
        .columns
        .iter()
        .map(|c| row.columns.iter().position(|n| n == c).map_or(Value::Null, |i| row.values[i].clone()))
        .collect();
    Row { columns: key.columns.clone(), values }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
