//! The source contract, and the parts of a log source written once: the
//! start-up decision ([`plan`]) and the phases after it ([`driver`]).

pub mod driver;
pub mod plan;

use crate::sync::lock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

#[doc(hidden)]
pub use async_trait::async_trait;
pub use driver::{AfterSnapshot, Driver, Stream};

use crate::error::SourceError;
use crate::event::Event;
use crate::position::Position;

/// Whether a source has more to give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStatus {
    Open,
    /// A finite source delivered its last event.
    Ended,
}

/// A reader of one database's change log.
///
/// Contract:
/// - `start(from)` positions the reader. Every event after `from` must then
///   be delivered, in log order. Events at or before `from` may be delivered
///   again (a source that can only resume at a transaction boundary re-reads
///   the whole transaction); the coordinator filters them per sink.
/// - `poll` appends at least one event to `out`, waiting as long as it takes,
///   or returns `Ended`. A transaction may span several polls; its last event
///   has `tx_end` set.
/// - `poll` is dropped mid-await only at shutdown, so it need not be
///   cancel-safe beyond leaving nothing half-acknowledged.
/// - The source may release log space (acknowledge the server, let the
///   server recycle WAL) only up to [`AckWatermark::get`], which the
///   coordinator advances to the lowest stored checkpoint of all sinks.
#[async_trait]
pub trait Source: Send {
    /// The source's id from the config; part of every checkpoint key.
    fn id(&self) -> &str;

    async fn start(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError>;

    async fn poll(&mut self, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError>;

    /// What the source learns about the server's log as it reads, for
    /// the API and metrics; `None` for a source without a server.
    fn log_stats(&self) -> Option<Arc<LogStats>> {
        None
    }

    /// This source replaces one that already ran in this process (a
    /// pipeline run again to re-read its log for a sink): it starts as a
    /// restart in the same process would, so `snapshot.mode: always`
    /// takes no new snapshot.
    fn continues_in_process(&mut self) {}

    /// `poll` hands on vectors its reader filled, moving one into an empty
    /// `out` whole: the caller need not bring room of its own.
    fn brings_its_vectors(&self) -> bool {
        false
    }
}

/// The server's log as a source last saw it. Updated by the source's
/// reader, read by the API and metrics; a figure is `None` until known.
#[derive(Debug)]
pub struct LogStats {
    head: Mutex<Option<String>>,
    behind_bytes: AtomicI64,
    retained_bytes: AtomicI64,
    /// When a measurement first found the source behind, in the run of
    /// measurements that all did (µs); 0 when the last one found it caught up.
    behind_since_us: AtomicI64,
}

impl Default for LogStats {
    fn default() -> Self {
        Self {
            head: Mutex::new(None),
            behind_bytes: AtomicI64::new(-1),
            retained_bytes: AtomicI64::new(-1),
            behind_since_us: AtomicI64::new(0),
        }
    }
}

impl LogStats {
    /// The server's log head, as the source names positions, and how many
    /// bytes of log lie between the last position read and it.
    pub fn set_head(&self, head: String, behind_bytes: u64) {
        *lock(&self.head) = Some(head);
        self.behind_bytes.store(i64::try_from(behind_bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
        if behind_bytes == 0 {
            self.behind_since_us.store(0, Ordering::Relaxed);
        } else {
            let now = crate::time::now_us();
            let _ = self.behind_since_us.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Since when every measurement found the source behind the head;
    /// `None` when the last one found it caught up.
    pub fn behind_since_us(&self) -> Option<i64> {
        Some(self.behind_since_us.load(Ordering::Relaxed)).filter(|at| *at > 0)
    }

    /// Log the server keeps for this source alone (a PostgreSQL slot's WAL).
    pub fn set_retained_bytes(&self, bytes: u64) {
        self.retained_bytes.store(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    pub fn head(&self) -> Option<String> {
        lock(&self.head).clone()
    }

    pub fn behind_bytes(&self) -> Option<u64> {
        u64::try_from(self.behind_bytes.load(Ordering::Relaxed)).ok()
    }

    pub fn retained_bytes(&self) -> Option<u64> {
        u64::try_from(self.retained_bytes.load(Ordering::Relaxed)).ok()
    }
}

/// The position up to which every sink's checkpoint is stored, shared by
/// the coordinator (writer) and the source (reader). It only moves forward.
///
/// It also tells the source the highest checkpoint any sink held when the
/// pipeline started: `start(None)` alone cannot tell a pipeline that never
/// delivered anything from one where a sink without a checkpoint joined
/// others that have one.
#[derive(Debug, Clone, Default)]
pub struct AckWatermark {
    lowest: Arc<Mutex<Option<Position>>>,
    highest_at_start: Arc<Mutex<Option<Position>>>,
}

impl AckWatermark {
    pub fn get(&self) -> Option<Position> {
        lock(&self.lowest).clone()
    }

    /// Moves the watermark to `position` if that is forward; returns whether it moved.
    /// Sources see positions in their log only: the generation, which the
    /// coordinator adds, is taken off.
    pub fn advance(&self, position: &Position) -> bool {
        let position = position.base();
        let mut current = lock(&self.lowest);
        if current.as_ref().is_some_and(|c| c >= position) {
            return false;
        }
        *current = Some(position.clone());
        true
    }

    /// Set by the coordinator before the source starts.
    pub fn set_highest_at_start(&self, position: Option<Position>) {
        *lock(&self.highest_at_start) = position.map(Position::into_base);
    }

    /// The highest stored checkpoint of any sink when the pipeline
    /// started; `None` when no sink held one.
    pub fn highest_at_start(&self) -> Option<Position> {
        lock(&self.highest_at_start).clone()
    }
}

/// A source's reader task and the channel it sends its events on. The
/// task is stopped when the handle is dropped (a restart or shutdown).
pub struct ReaderHandle {
    events: tokio::sync::mpsc::Receiver<Result<Vec<Event>, SourceError>>,
    task: tokio::task::JoinHandle<()>,
}

impl ReaderHandle {
    pub fn new(
        events: tokio::sync::mpsc::Receiver<Result<Vec<Event>, SourceError>>,
        task: tokio::task::JoinHandle<()>,
    ) -> Self {
        Self { events, task }
    }

    /// The next events, or the reader's error; a reader that ended
    /// without one (it panicked) is `what` stopping, which is retried.
    pub async fn next(&mut self, what: &str) -> Result<Vec<Event>, SourceError> {
        match self.events.recv().await {
            Some(result) => result,
            None => Err(SourceError::transient(format!("the {what} stopped"))),
        }
    }
}

impl Drop for ReaderHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
