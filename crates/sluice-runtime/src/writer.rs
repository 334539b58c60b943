//! One writer task per sink.
//!
//! The writer owns its sink and is the only caller of it. It filters each
//! batch to the events above the sink's own position, so a sink never sees
//! an event twice from the coordinator; retries a failed batch, after
//! letting the sink recover, with capped exponential backoff; and reports
//! the sink's durable watermark to the checkpointer.
//!
//! Batches a buffering sink accepted but has not made durable are kept
//! (`retained`) until they are durable, because a failure makes the sink
//! drop its buffer and they must be written again.
//!
//! An optional sink that keeps failing for `sink_batch_deadline_secs` of
//! wall-clock time (the failing calls included) is detached: the writer
//! stops taking batches, so its buffer fills while the other sinks go on,
//! and probes the sink every `reattach_probe_secs` (or at once through the
//! API) by writing what it holds again. When the sink answers it catches
//! up from the buffer; if the buffer overflowed meanwhile, it asks for the
//! source to be read again from its checkpoint ([`detached`]).

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_config::DeadLetterConfig;
use sluice_core::{DeadLetterQueue, EventChunks, Position, Sink, SinkError, SliceChunks, collect_chunks, or_start};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::backoff::Backoff;
use crate::batch::Batch;
use crate::buffer::{Rereads, SinkBuffer, Taken};
use crate::control::{Control, ReattachError};
use crate::deadline::{sleep_until, with_deadline};
use crate::latency::{Latency, now_us};
use crate::shutdown::Shutdown;
use crate::status::{Detachment, PipelineStatus, SinkState, SinkStatus, lock};
use merged::MergedChunks;

mod at_most_once;
mod dead_letter;
mod detached;
mod merged;
mod open;
mod retained;
mod transformed;

/// What writers tell the checkpointer.
#[derive(Debug)]
pub(crate) enum Report {
    /// The sink opened; it starts from `start` (its stored checkpoint or
    /// what it holds itself, whichever is higher).
    Opened { sink: usize, start: Option<Position> },
    /// The sink's durable watermark moved; `events` counts the events of
    /// this run's stream up to it.
    Durable { sink: usize, position: Position, events: u64 },
    /// The sink was detached so the source no longer waits for it: its
    /// checkpoint stays, but no longer holds the source back.
    Released { sink: usize },
}

/// How a writer ended early.
enum Stop {
    /// An optional sink kept failing for the deadline, or failed in a way
    /// retrying cannot fix: it is detached and probed (see [`detached`]).
    DetachedAfterFailure(SinkError),
    /// A probe of a detached sink failed; it stays detached.
    ProbeFailed(SinkError),
    /// An optional sink was cut off (by the SLO monitor) to stop it pinning
    /// the source's log; its checkpoint no longer holds the source back,
    /// so it misses events and needs a resync.
    DetachedForPinning(String),
    /// Shutdown came while the writer was retrying.
    Abandoned,
    /// A required sink failed in a way retrying cannot fix.
    Fatal(SinkError),
}

pub(crate) struct SinkWriter {
    pub index: usize,
    pub sink: Box<dyn Sink>,
    pub sink_id: String,
    /// Whether a failure detaches the sink instead of retrying forever.
    pub may_detach: bool,
    /// A batch the sink fails to write is dropped and counted, and each
    /// batch's checkpoint is stored before the batch is written.
    pub at_most_once: bool,
    pub deadline: Duration,
    pub stored: Option<Position>,
    pub batches: Arc<SinkBuffer>,
    /// How often a detached sink is probed.
    pub probe_every: Duration,
    /// Where a sink whose buffer overflowed asks for a re-read.
    pub rereads: Arc<Rereads>,
    pub reports: mpsc::Sender<Report>,
    pub shutdown: Shutdown,
    pub source_id: String,
    pub dead_letters: Arc<dyn DeadLetterQueue>,
    pub dead_letter: DeadLetterConfig,
    /// Where retained batches beyond [`retained::RETAINED_MEMORY_BYTES`] go.
    pub retain_dir: PathBuf,
    pub status: Arc<PipelineStatus>,
    pub control: mpsc::Receiver<Control>,
    /// Where a sink detached for pinning the log is marked, so it stays
    /// detached until an operator resyncs it: the pipeline's detach marks,
    /// and this sink's mark's name there.
    pub detach_marks: sluice_core::StateDir,
    pub detach_mark: String,
    pub metrics: SinkMetrics,
    /// The source's log generation: what a sink holds of an older one
    /// says nothing about the log read now.
    pub generation: u32,
    /// The sink's own transforms, run on each write after the pipeline's.
    pub transforms: Arc<sluice_transform::Transforms>,
    /// Since when the writer has been trying to make progress: the start
    /// of the current delivery or of the last call that succeeded. A
    /// failure measures how long the sink has failed from here, so the
    /// time the failing calls took counts too.
    pub trying_since: Option<Instant>,
    /// The sink was detached and is being probed: a failed call is a
    /// failed probe, not retried.
    pub detached: bool,
    /// Whether batches queued behind a write go in one write together
    /// ([`Sink::merges_writes`]).
    pub merges: bool,
}

/// The sink's batch size histogram and drop counter, looked up once.
pub(crate) struct SinkMetrics {
    pub batch_events: metrics::Histogram,
    pub dropped: metrics::Counter,
}

impl SinkMetrics {
    pub fn new(pipeline: &str, sink: &str) -> Self {
        let labels = [("pipeline", pipeline.to_string()), ("sink", sink.to_string())];
        Self {
            batch_events: metrics::histogram!("sluice_sink_batch_events", &labels),
            dropped: metrics::counter!("sluice_sink_dropped_events_total", &labels),
        }
    }
}

struct State {
    /// Positions sent to the dead letter queue, left out of writes.
    skip: BTreeSet<Position>,
    /// Everything at or below this was handed to the sink.
    position: Option<Position>,
    durable: Option<Position>,
    retained: VecDeque<Arc<Batch>>,
    /// Where the sink stood when it opened: batches past it were written
    /// by this run, and only their latency is measured.
    opened_at: Option<Position>,
    latency: Latency,
    /// The highest position handed to the sink so far: a write at or
    /// below it sends events again (a retry after a failure).
    handed: Option<Position>,
}

impl State {
    /// Whether the batch holds an event sent to the dead letter queue.
    fn skips_within(&self, batch: &Batch) -> bool {
        self.skip.range(batch.first().clone()..=batch.last().clone()).next().is_some()
    }

    /// The retained batches the sink has not been handed yet.
    fn unwritten(&self) -> impl Iterator<Item = &Arc<Batch>> {
        self.retained.iter().filter(|b| self.position.as_ref().is_none_or(|p| b.last() > p))
    }
}

impl SinkWriter {
    fn sink_status(&self) -> &SinkStatus {
        &self.status.sinks[self.index]
    }

    pub async fn run(mut self) -> Result<(), SinkError> {
        let mut state = State {
            position: self.stored.clone(),
            durable: self.stored.clone(),
            retained: VecDeque::new(),
            skip: BTreeSet::new(),
            opened_at: None,
            latency: Latency::default(),
            handed: None,
        };
        let outcome = self.deliver_until_stopped(&mut state).await;
        log_latency(&state.latency);
        // Whatever the outcome, the dispatcher must never wait for this
        // writer again.
        self.batches.abandon();
        match outcome {
            Ok(()) => {
                self.close().await;
                self.sink_status().set_state(SinkState::Closed);
                Ok(())
            }
            Err(Stop::DetachedForPinning(reason)) => {
                error!(
                    %reason,
                    durable = %or_start(state.durable.as_ref()),
                    mark = %self.detach_marks.locate(&self.detach_mark),
                    "optional sink DETACHED so it stops pinning the source's log; it now misses events and needs a resync: \
                     reset its checkpoint (`sluice checkpoints reset --sink`) and re-read its tables"
                );
                self.sink_status().detach(Detachment { reason, needs_resync: true });
                self.close().await;
                self.control.close();
                Ok(())
            }
            Err(Stop::Abandoned | Stop::DetachedAfterFailure(_) | Stop::ProbeFailed(_)) => {
                warn!(durable = %or_start(state.durable.as_ref()), "shutdown while the sink was failing; its checkpoint stays where it is");
                Ok(())
            }
            Err(Stop::Fatal(err)) => {
                self.sink_status().set_state(SinkState::Failed);
                Err(err)
            }
        }
    }

    /// Serves an API request between batches; `true` when the sink failed
    /// a call and must be reopened before it writes again.
    async fn serve(&mut self, request: Control) -> Result<bool, Stop> {
        match request {
            Control::Redeliver { letter, mut event, reply } => {
                // A letter holds the event before the sink's own transforms.
                match self.transforms.apply(&mut event) {
                    Ok(sluice_transform::Verdict::Keep) => {}
                    Ok(sluice_transform::Verdict::Drop) => {
                        info!(key = %letter.key, "dead letter dropped by the sink's transforms; nothing to deliver");
                        let _ = reply.send(Ok(()));
                        return Ok(false);
                    }
                    Err(error) => {
                        let _ = reply.send(Err(format!("the sink's {error}")));
                        return Ok(false);
                    }
                }
                let (result, failed) =
                    match with_deadline(self.deadline, "redeliver", self.sink.redeliver(&event)).await {
                        Ok(()) => {
                            info!(key = %letter.key, "dead letter delivered again");
                            (Ok(()), false)
                        }
                        Err(SinkError::Rejected { detail, .. }) => {
                            (Err(format!("the sink still refuses it: {detail}")), true)
                        }
                        Err(err) => (Err(err.to_string()), true),
                    };
                let _ = reply.send(result);
                Ok(failed)
            }
            Control::Detach { reason } => {
                let mark = serde_json::json!({ "sink": self.sink_id, "reason": reason, "at_us": now_us() });
                if let Err(e) = self.detach_marks.write(&self.detach_mark, mark.to_string().as_bytes()) {
                    // Without the mark a restart would let the sink pin the
                    // log again; keep it attached rather than half-detached.
                    error!(error = %e, mark = %self.detach_marks.locate(&self.detach_mark), "cannot record the sink's detachment; it stays attached");
                    return Ok(false);
                }
                self.report(Report::Released { sink: self.index }).await;
                Err(Stop::DetachedForPinning(reason))
            }
            Control::Reattach { reply } => {
                let _ = reply.send(Err(ReattachError::NotDetached));
                Ok(false)
            }
        }
    }

    /// Opens the sink and writes every batch it is given, serving requests
    /// between batches, until the dispatcher closes the buffer.
    async fn deliver_until_stopped(&mut self, state: &mut State) -> Result<(), Stop> {
        self.open(state).await?;
        self.sink_status().succeeded();
        self.report(Report::Opened { sink: self.index, start: state.position.clone() }).await;
        loop {
            let due = self.sink.flush_due().map(tokio::time::Instant::from_std);
            let taken = tokio::select! {
                Some(request) = self.control.recv() => {
                    // Like any failed call, a failed redelivery may leave
                    // the sink inconsistent (an aborted transaction).
                    if self.serve(request).await? {
                        self.reopen(state, &mut Backoff::default()).await?;
                    }
                    continue;
                }
                taken = self.batches.take() => taken,
                () = sleep_until(due) => {
                    let flushed = self.flush(state).await;
                    self.unless_detached(state, flushed).await?;
                    self.prune(state);
                    continue;
                }
            };
            let batch = match taken {
                Taken::Batch(batch) => batch,
                Taken::Closed => break,
                Taken::Gap { after } => {
                    let flushed = self.flush(state).await;
                    self.unless_detached(state, flushed).await?;
                    self.ask_reread(state, after);
                    break;
                }
            };
            let since = batch.waiting_since_us(self.status.source.commit_times_are_real());
            let _ =
                self.sink_status().waiting_since_us.compare_exchange(0, since, Ordering::Relaxed, Ordering::Relaxed);
            state.retained.push_back(batch);
            self.take_queued(state);
            let delivered = self.deliver(state).await;
            self.unless_detached(state, delivered).await?;
            self.spill_retained(state)?;
            if self.sink_status().state() == SinkState::CatchingUp && self.batches.is_empty() {
                info!("sink caught up with its buffer after reattaching");
                self.sink_status().set_state(SinkState::Running);
            }
        }
        self.flush(state).await
    }

    /// Writes every retained batch past the sink's position, retrying
    /// until the sink takes them all.
    async fn deliver(&mut self, state: &mut State) -> Result<(), Stop> {
        let mut backoff = Backoff::default();
        self.trying_since = Some(Instant::now());
        'attempt: loop {
            let mut index = 0;
            while index < state.retained.len() {
                let batch = state.retained[index].clone();
                index += 1;
                let chunks = batch.chunks(state.position.as_ref()).map_err(|e| {
                    Stop::Fatal(SinkError::permanent(
                        format!("cannot read back a spilled batch: {e}"),
                        "check the disk of --data-dir",
                    ))
                })?;
                let Some(mut chunks) = chunks else {
                    if state.durable.as_ref().is_some_and(|d| d >= batch.last()) {
                        // Held from before (a replay after a restart): the
                        // sink is as far along the stream as this batch.
                        let me = self.sink_status();
                        me.durable_events.fetch_max(batch.through_events, Ordering::Relaxed);
                        me.durable_bytes.fetch_max(batch.through_bytes, Ordering::Relaxed);
                    }
                    if state.handed.as_ref().is_none_or(|h| h < batch.last()) {
                        self.sink_status().replay_skipped.fetch_add(batch.event_count() as u64, Ordering::Relaxed);
                        state.handed = Some(batch.last().clone());
                    }
                    continue;
                };
                let merged = self.merged_after(state, index - 1);
                index += merged.len();
                let mut all = match merged.is_empty() {
                    true => None,
                    false => Some(MergedChunks::new(std::iter::once(&batch).chain(&merged), state.position.as_ref())?),
                };
                let chunks: &mut dyn EventChunks = match &mut all {
                    Some(all) => all,
                    None => &mut chunks,
                };
                let last = chunks.last_position().clone();
                let count = chunks.event_count() as u64;
                let from = state.position.clone();
                // Handed over now, whatever comes of it: a retry after a
                // failure sends these events again.
                let again = state.handed.as_ref().is_some_and(|h| *h >= last);
                if !again {
                    state.handed = Some(last.clone());
                }
                if self.at_most_once {
                    // Stored before it is written: a crash from here on
                    // loses the batch rather than hand it over again.
                    self.note_durable(state, Some(last.clone())).await;
                    self.wait_stored(&last).await?;
                }
                let written = if state.skips_within(&batch) {
                    // Events sent to the dead letter queue are left out.
                    let mut events = collect_chunks(chunks).await.map_err(Stop::Fatal)?;
                    events.retain(|e| !state.skip.contains(&e.position));
                    // Still a write, empty or not, so the sink's position
                    // moves to the batch's end.
                    let mut rest = SliceChunks::ending_at(&events, batch.last());
                    self.write(&mut rest).await
                } else {
                    self.write(chunks).await
                };
                match written {
                    Ok(durable) => {
                        self.trying_since = Some(Instant::now());
                        self.count_written(std::iter::once(&batch).chain(&merged), count, again);
                        state.position = Some(last);
                        self.note_durable(state, durable).await;
                    }
                    Err(SinkError::Rejected { detail, position }) => {
                        self.reject(state, position, detail).await?;
                        self.reopen(state, &mut backoff).await?;
                        continue 'attempt;
                    }
                    Err(err) if self.at_most_once => {
                        self.drop_batch(state, (&batch, from), err).await?;
                        continue 'attempt;
                    }
                    Err(err) => {
                        self.recover(state, err, &mut backoff).await?;
                        continue 'attempt;
                    }
                }
            }
            self.prune(state);
            return Ok(());
        }
    }

    /// The status counters of a write of `count` events from `batches`
    /// that succeeded; `again` when it sent them a second time.
    fn count_written<'a>(&self, batches: impl Iterator<Item = &'a Arc<Batch>> + Clone, count: u64, again: bool) {
        let me = self.sink_status();
        me.succeeded();
        me.events.fetch_add(count, Ordering::Relaxed);
        me.batches.fetch_add(batches.clone().count() as u64, Ordering::Relaxed);
        me.bytes.fetch_add(batches.clone().map(|b| b.byte_size as u64).sum(), Ordering::Relaxed);
        if again {
            me.replayed.fetch_add(count, Ordering::Relaxed);
        } else {
            let held: usize = batches.map(|b| b.event_count()).sum();
            me.replay_skipped.fetch_add((held as u64).saturating_sub(count), Ordering::Relaxed);
        }
        self.metrics.batch_events.record(count as f64);
    }

    /// One write under the deadline, through the sink's own transforms.
    async fn write(&mut self, chunks: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        if self.transforms.is_empty() {
            return with_deadline(self.deadline, "write", self.sink.write(chunks)).await;
        }
        let mut transformed = transformed::Transformed::new(chunks, &self.transforms);
        with_deadline(self.deadline, "write", self.sink.write(&mut transformed)).await
    }

    /// Drops retained batches that are wholly durable, recording their latency.
    fn prune(&self, state: &mut State) {
        let Some(durable) = &state.durable else {
            return;
        };
        state.skip.retain(|p| p > durable);
        let now = now_us();
        let measures = self.status.source.commit_times_are_real();
        while let Some(batch) = state.retained.front()
            && batch.last() <= durable
        {
            if measures && state.opened_at.as_ref().is_none_or(|o| batch.first() > o) {
                batch.record_latency(&state.latency, now);
                for (seconds, count) in batch.latencies(now) {
                    self.sink_status().latency.record(seconds, count);
                }
            }
            state.retained.pop_front();
        }
        let waiting = state.retained.front().map_or(0, |b| b.waiting_since_us(measures));
        self.sink_status().waiting_since_us.store(waiting, Ordering::Relaxed);
    }

    async fn flush(&mut self, state: &mut State) -> Result<(), Stop> {
        let mut backoff = Backoff::default();
        loop {
            self.deliver(state).await?;
            self.trying_since = Some(Instant::now());
            match with_deadline(self.deadline, "flush", self.sink.flush()).await {
                Ok(durable) => {
                    self.note_durable(state, durable).await;
                    return Ok(());
                }
                Err(err) => self.recover(state, err, &mut backoff).await?,
            }
        }
    }

    /// Decides whether to retry `err`, and sleeps before the retry.
    async fn back_off(&mut self, err: SinkError, backoff: &mut Backoff) -> Result<(), Stop> {
        self.sink_status().failed_call(err.to_string());
        if self.detached {
            return Err(Stop::ProbeFailed(err));
        }
        if !err.is_transient() {
            return Err(if self.may_detach { Stop::DetachedAfterFailure(err) } else { Stop::Fatal(err) });
        }
        // An optional sink is detached once it has failed for one deadline
        // of wall-clock time, the failing calls included.
        let failing_for = self.trying_since.map_or(Duration::ZERO, |since| since.elapsed());
        if self.may_detach && failing_for >= self.deadline {
            return Err(Stop::DetachedAfterFailure(err));
        }
        let delay = backoff.next_delay();
        self.sink_status().retries.fetch_add(1, Ordering::Relaxed);
        warn!(error = %err, attempt = backoff.attempt(), retry_in_ms = delay.as_millis() as u64, "sink call failed; retrying");
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.wait() => return Err(Stop::Abandoned),
                // A failing sink is the one most likely to be detached.
                Some(request) = self.control.recv() => match request {
                    Control::Redeliver { reply, .. } => {
                        let _ = reply.send(Err("the sink is failing and retrying a batch; try again once it recovers".to_string()));
                    }
                    other => {
                        self.serve(other).await?;
                    }
                },
                _ = &mut sleep => return Ok(()),
            }
        }
    }

    async fn note_durable(&mut self, state: &mut State, durable: Option<Position>) {
        let Some(durable) = durable else { return };
        if state.durable.as_ref().is_some_and(|d| *d >= durable) {
            return;
        }
        state.durable = Some(durable.clone());
        let me = self.sink_status();
        *lock(&me.durable) = Some(durable.clone());
        if let Some(batch) = state.retained.iter().take_while(|b| *b.last() <= durable).last() {
            me.durable_events.store(batch.through_events, Ordering::Relaxed);
            me.durable_bytes.store(batch.through_bytes, Ordering::Relaxed);
        }
        let events = me.durable_events.load(Ordering::Relaxed);
        self.report(Report::Durable { sink: self.index, position: durable, events }).await;
    }

    async fn report(&mut self, report: Report) {
        // The checkpointer outlives every writer; a send can only fail if
        // it died, and then the pipeline is already stopping.
        let _ = self.reports.send(report).await;
    }

    async fn close(&mut self) {
        match with_deadline(self.deadline, "close", self.sink.close()).await {
            Ok(()) => info!(sink = %self.sink_id, "sink closed"),
            Err(err) => warn!(sink = %self.sink_id, error = %err, "sink close failed"),
        }
    }
}

/// Logs the run's latency, if any event was measured: a source with
/// synthetic commit times (the generator) gives no line at all.
fn log_latency(latency: &Latency) {
    let ms = |q: f64| latency.quantile_us(q).map_or(0.0, |us| us as f64 / 1000.0);
    if latency.count() > 0 {
        info!(
            events = latency.count(),
            p50_ms = ms(0.5),
            p99_ms = ms(0.99),
            max_ms = latency.max_us() as f64 / 1000.0,
            "latency from source commit to durable in the sink"
        );
    }
    if latency.out_of_range() > 0 {
        info!(
            events = latency.out_of_range(),
            "events that committed 25 days or more before they were durable are left out of the latency figures"
        );
    }
}
