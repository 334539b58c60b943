//! The phases every log source goes through once started, written once:
//!
//! ```text
//! start ─► [initial snapshot: Run::next() until done] ─► open the stream ─► reader task
//!                                                                              │
//! poll() ◄── incremental snapshot filter (signals, watermarks, chunks) ◄───────┘
//! ```
//!
//! A source keeps a [`Driver`] and supplies what differs: how to open its
//! log stream once an initial snapshot is read ([`Stream::open_after_snapshot`])
//! and how to recognise incremental snapshot signals and watermarks in its
//! events ([`Stream::mark`]).

use async_trait::async_trait;
use tracing::info;

use super::{ReaderHandle, SourceStatus};
use crate::error::SourceError;
use crate::event::Event;
use crate::position::Position;
use crate::snapshot::Run;
use crate::snapshot::incremental::{ChunkReader, Incremental, Mark};

/// What a source supplies to its [`Driver`].
#[async_trait]
pub trait Stream: Send {
    /// What opening the stream needs once the initial snapshot is read
    /// (connections held since the snapshot was taken, the position).
    type Handoff: Send;
    /// The reader of incremental snapshot chunks.
    type Chunks: ChunkReader;

    /// Opens the log stream after the initial snapshot.
    async fn open_after_snapshot(&mut self, done: AfterSnapshot<'_, Self>) -> Result<ReaderHandle, SourceError>;

    /// Tells incremental snapshot signals and watermarks from changes.
    fn mark(&self, event: &Event) -> Option<Mark>;
}

/// An initial snapshot read to the end, and what opening the stream needs.
pub struct AfterSnapshot<'a, S: Stream + ?Sized> {
    pub handoff: S::Handoff,
    /// The last position handed on, from the snapshot or, when it read
    /// nothing, from the checkpoint it resumed.
    pub last: Option<Position>,
    /// For a stream that queues tables to re-read as it opens.
    pub incremental: Option<&'a mut Incremental<S::Chunks>>,
}

/// A snapshot being read, and what streaming needs once it is done.
struct Pending<H> {
    run: Run,
    /// The last position handed on: where streaming counts as read from.
    last: Option<Position>,
    /// Where the stream starts, for the log line, when the source knows it.
    stream_from: Option<String>,
    handoff: H,
}

/// The state of a started source: an initial snapshot being read, or the
/// log being streamed, plus incremental snapshots on top of the stream.
pub struct Driver<S: Stream> {
    /// `postgres`, `mysql`: names the source in errors.
    kind: &'static str,
    /// Names the reader task in errors ("replication reader").
    reader_name: &'static str,
    reader: Option<ReaderHandle>,
    snapshot: Option<Pending<S::Handoff>>,
    incremental: Option<Incremental<S::Chunks>>,
}

impl<S: Stream> Driver<S> {
    pub fn new(kind: &'static str, reader_name: &'static str) -> Self {
        Self { kind, reader_name, reader: None, snapshot: None, incremental: None }
    }

    /// Forgets the previous start's reader and snapshot (a restart) and
    /// takes the incremental snapshot state for this one.
    pub fn restart(&mut self, incremental: Option<Incremental<S::Chunks>>) {
        self.reader = None;
        self.snapshot = None;
        self.incremental = incremental;
    }

    pub fn incremental(&mut self) -> Option<&mut Incremental<S::Chunks>> {
        self.incremental.as_mut()
    }

    /// Streams from `reader` from now on.
    pub fn streaming(&mut self, reader: ReaderHandle) {
        self.reader = Some(reader);
    }

    /// Hands on the rows of `run` first, then opens the stream with
    /// `handoff`. `last` is the checkpoint the snapshot resumes from.
    pub fn snapshotting(&mut self, run: Run, last: Option<Position>, stream_from: Option<String>, handoff: S::Handoff) {
        self.snapshot = Some(Pending { run, last, stream_from, handoff });
    }

    /// [`Source::poll`](super::Source::poll) for a source driven by this.
    pub async fn poll(&mut self, source: &mut S, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError> {
        if let Some(pending) = self.snapshot.as_mut() {
            match pending.run.next().await {
                Some(Ok(events)) => {
                    pending.last = events.last().map(|e| e.position.clone()).or(pending.last.take());
                    hand_on(events, out);
                    return Ok(SourceStatus::Open);
                }
                Some(Err(err)) => {
                    self.snapshot = None;
                    return Err(err);
                }
                None => self.end_snapshot(source).await?,
            }
        }
        if let Some(incremental) = self.incremental.as_mut() {
            incremental.start_queued_table().await?;
        }
        let reader = self
            .reader
            .as_mut()
            .ok_or_else(|| SourceError::transient(format!("{} source polled before start", self.kind)))?;
        match reader.next(self.reader_name).await {
            Ok(events) => {
                match self.incremental.as_mut() {
                    Some(incremental) => incremental.filter(events, out, |e| source.mark(e)).await?,
                    None => hand_on(events, out),
                }
                Ok(SourceStatus::Open)
            }
            Err(err) => {
                // The reader stopped; the next start opens a new one.
                self.reader = None;
                Err(err)
            }
        }
    }

    async fn end_snapshot(&mut self, source: &mut S) -> Result<(), SourceError> {
        let Some(done) = self.snapshot.take() else { return Ok(()) };
        match &done.stream_from {
            Some(stream_from) => info!(stream_from = %stream_from, "snapshot done; streaming from the snapshot point"),
            None => info!("snapshot done; streaming from the snapshot point"),
        }
        let done = AfterSnapshot { handoff: done.handoff, last: done.last, incremental: self.incremental.as_mut() };
        let reader = source.open_after_snapshot(done).await?;
        self.reader = Some(reader);
        Ok(())
    }
}

/// Moves a chunk read into `out`. An empty `out` takes the chunk's own
/// allocation: copying it would hold two of them at once and grow `out`
/// past the chunk's length, a large share of a snapshot's memory. The
/// vector left over either way is kept for the reader's next chunk.
fn hand_on(mut events: Vec<Event>, out: &mut Vec<Event>) {
    if out.is_empty() {
        std::mem::swap(out, &mut events);
    } else {
        out.append(&mut events);
    }
    crate::event_vecs::give(events);
}

/// Implements [`Source`](super::Source) for a source struct with a
/// `stream: S` and a `driver: Driver<S>` field, where `S` implements
/// [`Stream`], and an inherent `async fn begin(&mut self, from, acked)`
/// that starts it; `id` and `log` are the paths of its id and its
/// `Arc<LogStats>` below `self`.
#[macro_export]
macro_rules! driven_source {
    ($source:ty, id: $($id:ident).+, log: $($log:ident).+) => {
        #[$crate::source::async_trait]
        impl $crate::Source for $source {
            fn id(&self) -> &str {
                &self.$($id).+
            }

            async fn start(
                &mut self,
                from: Option<$crate::Position>,
                acked: $crate::AckWatermark,
            ) -> Result<(), $crate::SourceError> {
                self.begin(from, acked).await
            }

            fn log_stats(&self) -> Option<std::sync::Arc<$crate::LogStats>> {
                Some(self.$($log).+.clone())
            }

            fn continues_in_process(&mut self) {
                self.stream.started_once = true;
            }

            fn brings_its_vectors(&self) -> bool {
                true
            }

            async fn poll(&mut self, out: &mut Vec<$crate::Event>) -> Result<$crate::SourceStatus, $crate::SourceError> {
                self.driver.poll(&mut self.stream, out).await
            }
        }
    };
}
