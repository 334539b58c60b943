//! Opening a sink, and reopening it after a failed call so it is
//! consistent again.

use sluice_core::{Position, SinkError};
use tracing::warn;

use super::{SinkWriter, State, Stop};
use crate::backoff::Backoff;
use crate::deadline::with_deadline;

impl SinkWriter {
    /// What the sink holds, unless it is of another log generation: the
    /// log it came from was reset, and its coordinates (a binlog file
    /// number, an LSN) compare with nothing in the log read now. A newer
    /// generation than the store's means the store was replaced (a new
    /// data dir); trusting it would hide every event, so it is ignored too.
    fn current_generation(&self, holds: Option<Position>) -> Option<Position> {
        match holds {
            Some(held) if held.generation() < self.generation => {
                warn!(
                    %held, held_generation = held.generation(), generation = self.generation,
                    "the sink holds a position of the source's log from before a checkpoint reset; \
                     ignored: the sink gets every event of the new log"
                );
                None
            }
            Some(held) if held.generation() > self.generation => {
                warn!(
                    %held, held_generation = held.generation(), generation = self.generation,
                    "the sink holds a position of a later log generation than the checkpoint store knows \
                     (was the data dir replaced?); ignored: the sink gets the events again"
                );
                None
            }
            other => other,
        }
    }

    /// Opens the sink, retrying transient failures.
    pub(super) async fn open(&mut self, state: &mut State) -> Result<(), Stop> {
        let mut backoff = Backoff::default();
        self.trying_since = Some(std::time::Instant::now());
        loop {
            match self.open_unless_shutdown().await? {
                Ok(reported) => {
                    let holds_nothing = reported.is_none() && self.sink.reads_back_what_it_holds();
                    let holds = self.current_generation(reported);
                    // The higher of the stored checkpoint and what the sink
                    // holds: a sink that stores its position with its data
                    // may be ahead of the store after a crash.
                    if self.sink.guarantee().is_exactly_once()
                        && let Some(stored) = &state.durable
                    {
                        match &holds {
                            Some(held) if held < stored => warn!(
                                %held, %stored,
                                "sink holds less than its stored checkpoint: the events after what it holds were \
                                 dropped by the pipeline's transforms, or its data was truncated or replaced; events \
                                 up to the checkpoint are not written again; to rewrite them, reset the checkpoint"
                            ),
                            None if holds_nothing => warn!(
                                %stored,
                                "sink holds no event although a checkpoint is stored: its data was deleted, emptied, \
                                 expired or replaced (or a new target was configured), or every event was dropped by \
                                 the pipeline's transforms; writing from the checkpoint on, events up to it are not \
                                 written again; to rewrite them, reset the checkpoint"
                            ),
                            _ => {}
                        }
                    }
                    let start = state.durable.clone().max(holds);
                    state.position = start.clone();
                    state.opened_at = start.clone();
                    state.durable = start;
                    return Ok(());
                }
                Err(err) => self.back_off(err, &mut backoff).await?,
            }
        }
    }

    /// One `open`, given up when shutdown starts: a sink that is not open
    /// holds nothing to drain, and an open may block for its whole timeout
    /// (a Kafka client waiting on brokers it cannot reach). Giving it up is
    /// what a crash at that point would do, which every sink's open
    /// recovers from.
    async fn open_unless_shutdown(&mut self) -> Result<Result<Option<Position>, SinkError>, Stop> {
        tokio::select! {
            biased;
            _ = self.shutdown.wait() => Err(Stop::Abandoned),
            opened = with_deadline(self.deadline, "open", self.sink.open()) => Ok(opened),
        }
    }

    /// After a failed call: wait, reopen the sink so it is consistent again,
    /// and rewind to what is durable so retained batches are written again.
    pub(super) async fn recover(
        &mut self,
        state: &mut State,
        err: SinkError,
        backoff: &mut Backoff,
    ) -> Result<(), Stop> {
        self.back_off(err, backoff).await?;
        self.reopen(state, backoff).await
    }

    /// Reopens the sink and rewinds to what is durable.
    pub(super) async fn reopen(&mut self, state: &mut State, backoff: &mut Backoff) -> Result<(), Stop> {
        loop {
            match self.open_unless_shutdown().await? {
                Ok(holds) => {
                    state.position = state.durable.clone().max(self.current_generation(holds));
                    return Ok(());
                }
                Err(err) => self.back_off(err, backoff).await?,
            }
        }
    }

    /// One `open`, neither retried nor given up at shutdown (it has its
    /// deadline): what the sink says it holds.
    pub(super) async fn open_once(&mut self) -> Result<Option<Position>, SinkError> {
        let holds = with_deadline(self.deadline, "open", self.sink.open()).await?;
        Ok(self.current_generation(holds))
    }
}
