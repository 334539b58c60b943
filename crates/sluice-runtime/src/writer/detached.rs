//! A detached optional sink: probed until it answers, then caught up.
//!
//! While detached the writer takes nothing from its buffer, so the other
//! sinks and the source go on while the buffer fills. A probe reopens the
//! sink and writes what the writer holds (the batch that failed); once
//! one succeeds the sink is reattached and drains its buffer. If the
//! buffer overflowed meanwhile, the writer reaches the gap after what it
//! kept and asks for a re-read of the source from its own checkpoint.

use std::sync::atomic::Ordering;

use sluice_core::{Position, SinkError, or_start};
use tracing::{error, info, warn};

use super::{SinkWriter, State, Stop};
use crate::backoff::Backoff;
use crate::control::{Control, ReattachError};
use crate::status::Detachment;

impl SinkWriter {
    /// Passes `outcome` on, unless it detached the sink: then waits for the
    /// sink to answer a probe, and returns once it is reattached.
    pub(super) async fn unless_detached(&mut self, state: &mut State, outcome: Result<(), Stop>) -> Result<(), Stop> {
        match outcome {
            Err(Stop::DetachedAfterFailure(err)) => self.probe_until_reattached(state, err).await,
            other => other,
        }
    }

    async fn probe_until_reattached(&mut self, state: &mut State, err: SinkError) -> Result<(), Stop> {
        error!(
            error = %err,
            durable = %or_start(state.durable.as_ref()),
            probe_every_secs = self.probe_every.as_secs(),
            "optional sink detached after failing for sink_batch_deadline_secs (wall clock): the other sinks go on; \
             its buffer keeps what it can and the sink is probed until it answers"
        );
        self.sink_status().detach(Detachment { reason: err.to_string(), needs_resync: false });
        self.detached = true;
        loop {
            let reply = self.wait_for_probe().await?;
            match self.probe(state).await {
                Ok(()) => {
                    self.detached = false;
                    self.sink_status().reattached();
                    info!(durable = %or_start(state.durable.as_ref()), "sink answered a probe and is reattached; catching up from its buffer");
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok("reattached; catching up from its buffer".to_string()));
                    }
                    return Ok(());
                }
                Err(Stop::ProbeFailed(err)) => {
                    warn!(error = %err, "probe of the detached sink failed; it stays detached");
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(ReattachError::ProbeFailed(err.to_string())));
                    }
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Waits until the next probe is due or the API asks for one now; the
    /// API's request comes with its reply.
    async fn wait_for_probe(&mut self) -> Result<Option<ProbeReply>, Stop> {
        let sleep = tokio::time::sleep(self.probe_every);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.wait() => return Err(Stop::Abandoned),
                () = self.batches.closed() => {
                    info!("the source ended while the sink was detached; it catches up from its checkpoint on the next start");
                    return Err(Stop::Abandoned);
                }
                Some(request) = self.control.recv() => match request {
                    Control::Reattach { reply } => return Ok(Some(reply)),
                    Control::Redeliver { reply, .. } => {
                        let _ = reply.send(Err("the sink is detached; reattach it first".to_string()));
                    }
                    detach @ Control::Detach { .. } => {
                        self.serve(detach).await?;
                    }
                },
                _ = &mut sleep => return Ok(None),
            }
        }
    }

    /// One probe: reopen the sink and write what the writer holds again.
    async fn probe(&mut self, state: &mut State) -> Result<(), Stop> {
        self.sink_status().retries.fetch_add(1, Ordering::Relaxed);
        self.reopen(state, &mut Backoff::default()).await?;
        self.deliver(state).await
    }

    /// The buffer dropped batches after `after`: everything before the gap
    /// is written, so the source must be read again from the sink's own
    /// checkpoint. The pipeline stops in order and the process runs it
    /// again; the other sinks skip what they hold.
    pub(super) fn ask_reread(&mut self, state: &State, after: Option<Position>) {
        warn!(
            kept_through = %or_start(after.as_ref()),
            durable = %or_start(state.durable.as_ref()),
            "the sink's buffer overflowed; it wrote what was kept, and the source is read again from its checkpoint"
        );
        self.rereads.request(&self.sink_id);
        self.shutdown.trigger();
    }
}

type ProbeReply = tokio::sync::oneshot::Sender<Result<String, ReattachError>>;
