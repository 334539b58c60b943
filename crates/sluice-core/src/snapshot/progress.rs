//! The table each running snapshot is reading, for a status line on a
//! terminal. The log lines carry the same figures every 10 s.

use crate::sync::lock;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, PartialEq)]
pub struct TableProgress {
    pub source: Arc<str>,
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

static RUNNING: Mutex<Vec<TableProgress>> = Mutex::new(Vec::new());

/// One entry per source whose snapshot is running.
pub fn running() -> Vec<TableProgress> {
    lock(&RUNNING).clone()
}

pub(crate) fn set(progress: TableProgress) {
    let mut running = lock(&RUNNING);
    match running.iter_mut().find(|p| p.source == progress.source) {
        Some(entry) => *entry = progress,
        None => running.push(progress),
    }
}

/// Removes its source's entry when the snapshot ends, fails or is dropped.
pub(crate) struct Shown(pub Arc<str>);

impl Drop for Shown {
    fn drop(&mut self) {
        lock(&RUNNING).retain(|p| p.source != self.0);
    }
}
