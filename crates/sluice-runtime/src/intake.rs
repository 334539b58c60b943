//! The source task: reads the source into chunks for the dispatcher.
//!
//! A transient source error restarts the source from the last position
//! handed on; what the source re-reads at or below it is dropped here, so
//! the dispatcher sees a strictly increasing stream.

use sluice_core::{AckWatermark, Event, Position, Source, SourceError, SourceStatus, or_start};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

/// The most events a new chunk has room for before the source fills it.
const MAX_CHUNK_CAPACITY: usize = 8192;

use crate::backoff::Backoff;
use crate::shutdown::Shutdown;
use crate::status::PipelineStatus;

pub(crate) struct Intake {
    pub source: Box<dyn Source>,
    pub from: Option<Position>,
    pub ack: AckWatermark,
    pub chunks: mpsc::Sender<Vec<Event>>,
    pub shutdown: Shutdown,
    pub status: std::sync::Arc<PipelineStatus>,
    /// The pause switch of [`crate::PipelineControl`].
    pub paused: watch::Receiver<bool>,
    /// The source's log generation, put in every position it reads; the
    /// source itself only sees positions in its log.
    pub generation: u32,
}

impl Intake {
    pub async fn run(mut self) -> Result<(), SourceError> {
        let mut last = self.from.clone();
        let mut backoff = Backoff::default();
        if !self.start(last.clone(), &mut backoff).await? {
            return Ok(());
        }
        info!(from = %or_start(last.as_ref()), "source started");
        // Each chunk is sent on, so the next starts empty; sized like the
        // last one, it does not grow event by event, and taken from the
        // kept vectors, its pages are already resident. A source that
        // brings its own vectors moves one in whole.
        let own_vectors = self.source.brings_its_vectors();
        let mut capacity = 0;
        loop {
            if *self.paused.borrow_and_update() {
                info!("paused through the API; the source is not read until resumed");
                tokio::select! {
                    biased;
                    _ = self.shutdown.wait() => return Ok(()),
                    _ = self.paused.wait_for(|p| !*p) => info!("resumed through the API"),
                }
            }
            let mut chunk = if own_vectors { Vec::new() } else { sluice_core::event_vecs::take(capacity) };
            let polled = tokio::select! {
                biased;
                _ = self.shutdown.wait() => return Ok(()),
                // Polls are not cancel-safe, so a pause waits for this one.
                polled = self.source.poll(&mut chunk) => polled,
            };
            match polled {
                Ok(status) => {
                    backoff.reset();
                    if self.generation > 0 {
                        for event in &mut chunk {
                            let position =
                                std::mem::replace(&mut event.position, Position::Generator { tx: 0, seq: 0 });
                            event.position = position.in_generation(self.generation);
                        }
                    }
                    if let Some(last) = &last {
                        chunk.retain(|e| e.position > *last);
                    }
                    self.status.source.read(&chunk);
                    capacity = chunk.len().min(MAX_CHUNK_CAPACITY);
                    if let Some(event) = chunk.last() {
                        last = Some(event.position.clone());
                        if self.chunks.send(chunk).await.is_err() {
                            return Ok(());
                        }
                    }
                    if status == SourceStatus::Ended {
                        info!(last = %or_start(last.as_ref()), "source ended");
                        return Ok(());
                    }
                }
                Err(err) if err.is_transient() => {
                    self.status.source.failed(err.to_string());
                    warn!(error = %err, "source failed; restarting it from the last position read");
                    if !self.start(last.clone(), &mut backoff).await? {
                        return Ok(());
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Starts the source, retrying transient failures; `false` on shutdown.
    async fn start(&mut self, from: Option<Position>, backoff: &mut Backoff) -> Result<bool, SourceError> {
        loop {
            if backoff.attempt() > 0 {
                let delay = backoff.next_delay();
                tokio::select! {
                    biased;
                    _ = self.shutdown.wait() => return Ok(false),
                    _ = tokio::time::sleep(delay) => {}
                }
            } else {
                backoff.next_delay();
            }
            match self.source.start(from.clone().map(Position::into_base), self.ack.clone()).await {
                Ok(()) => {
                    self.status.source.set_log(self.source.log_stats());
                    self.status.source.started();
                    return Ok(true);
                }
                Err(err) if err.is_transient() => {
                    self.status.source.failed(err.to_string());
                    warn!(error = %err, attempt = backoff.attempt(), "source start failed; retrying");
                }
                Err(err) => return Err(err),
            }
        }
    }
}
