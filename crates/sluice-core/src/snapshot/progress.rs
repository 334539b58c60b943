//! The table each running snapshot is reading, initial or incremental:
//! for a status line on a terminal, the API and the dashboard. The log
//! lines carry the same figures every 10 s.

use crate::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TableProgress {
    /// Which source's: the API lists them under its pipeline.
    #[serde(skip)]
    pub source: Arc<str>,
    /// An incremental snapshot (one table re-read while streaming), not
    /// the initial one.
    pub incremental: bool,
    pub table: Arc<str>,
    /// Tables finished before this one, and all tables of the snapshot.
    pub tables_done: usize,
    pub tables: usize,
    pub rows: u64,
    /// The server's estimate; 0 when it has none.
    pub estimated_rows: u64,
    pub rows_per_sec: u64,
    /// Seconds this table still needs at the rate so far, when known.
    pub eta_secs: Option<u64>,
}

/// Where a table's read is, at the rate since `started`.
pub(crate) struct Reading<'a> {
    pub source: &'a Arc<str>,
    pub incremental: bool,
    pub table: &'a Arc<str>,
    pub tables: (usize, usize),
    pub rows: u64,
    pub estimated_rows: u64,
    pub started: Instant,
}

impl Reading<'_> {
    pub fn show(&self) {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { self.rows as f64 / secs } else { 0.0 };
        let left = self.estimated_rows.saturating_sub(self.rows);
        set(TableProgress {
            source: self.source.clone(),
            incremental: self.incremental,
            table: self.table.clone(),
            tables_done: self.tables.0,
            tables: self.tables.1,
            rows: self.rows,
            estimated_rows: self.estimated_rows,
            rows_per_sec: rate.round() as u64,
            eta_secs: (rate > 0.0 && left > 0).then(|| (left as f64 / rate).round() as u64),
        });
    }
}

static RUNNING: Mutex<Vec<TableProgress>> = Mutex::new(Vec::new());

/// An incremental snapshot of one table that ended: read to its end, or
/// refused (the table cannot be read by key).
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Counts up from 1 in this process: a client that saw `seq` n waits
    /// for a greater one.
    pub seq: u64,
    pub source: Arc<str>,
    pub table: Arc<str>,
    pub rows: u64,
    /// Why the table was refused; `None` when it was read.
    pub refused: Option<String>,
    pub at_us: i64,
}

/// How many ended snapshots are kept for clients to find.
const ENDED_KEPT: usize = 64;

static ENDED: Mutex<Vec<Ended>> = Mutex::new(Vec::new());

/// The incremental snapshots that ended lately, oldest first.
pub fn ended() -> Vec<Ended> {
    lock(&ENDED).clone()
}

pub(crate) fn end(source: &str, table: &str, rows: u64, refused: Option<String>) {
    let mut ended = lock(&ENDED);
    let seq = ended.last().map_or(1, |e| e.seq + 1);
    if ended.len() == ENDED_KEPT {
        ended.remove(0);
    }
    ended.push(Ended { seq, source: source.into(), table: table.into(), rows, refused, at_us: crate::time::now_us() });
}

/// One entry per source and kind of snapshot running.
pub fn running() -> Vec<TableProgress> {
    lock(&RUNNING).clone()
}

fn set(progress: TableProgress) {
    let mut running = lock(&RUNNING);
    match running.iter_mut().find(|p| p.source == progress.source && p.incremental == progress.incremental) {
        Some(entry) => *entry = progress,
        None => running.push(progress),
    }
}

/// Removes its source's entry of its kind when the snapshot ends, fails
/// or is dropped.
pub(crate) struct Shown {
    pub source: Arc<str>,
    pub incremental: bool,
}

impl Drop for Shown {
    fn drop(&mut self) {
        lock(&RUNNING).retain(|p| p.source != self.source || p.incremental != self.incremental);
    }
}
