//! Waiting for the sink writers when a pipeline stops.
//!
//! A stop an operator asked for (SIGTERM, SIGINT) drains: each writer
//! writes and flushes what it holds. A slow sink could make that take as
//! long as its backlog, so the wait is bounded by `shutdown_grace_secs`,
//! and every few seconds it says which sinks it still waits for. Past the
//! grace the writers left are stopped where they are, as a crash would
//! stop them: their checkpoints stay at what they made durable, and the
//! next start reads the rest again, which every sink is built to take.
//! A pipeline whose source ended by itself waits for its sinks in full.

use std::sync::OnceLock;
use std::time::Duration;

use sluice_core::SinkError;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::{info, warn};

/// How often a drain says what it waits for.
const NOTE_EVERY: Duration = Duration::from_secs(5);

pub(crate) type WriterTask = (String, JoinHandle<Result<(), SinkError>>);

/// How each writer ended: a writer stopped at the grace counts as ended
/// without error.
pub(crate) async fn join_writers(
    writers: Vec<WriterTask>,
    stop_asked: &OnceLock<Instant>,
    grace: Duration,
) -> Vec<(String, Result<Result<(), SinkError>, JoinError>)> {
    let mut ended = Vec::new();
    let mut names: Vec<String> = writers.iter().map(|(name, _)| name.clone()).collect();
    for (sink, mut writer) in writers {
        let result = loop {
            let note = tokio::time::sleep(NOTE_EVERY);
            tokio::select! {
                result = &mut writer => break result,
                () = note => {}
            }
            let Some(asked) = stop_asked.get() else { continue };
            let waited = asked.elapsed();
            if waited >= grace {
                warn!(
                    sinks = ?names, grace_secs = grace.as_secs(),
                    "shutdown_grace_secs passed: these sinks stop without draining; what they had not made durable \
                     is read again from their checkpoints on the next start"
                );
                writer.abort();
                break writer.await;
            }
            info!(
                sinks = ?names, left_secs = (grace - waited).as_secs(),
                "draining: waiting for these sinks to write and flush what they hold"
            );
        };
        names.retain(|name| *name != sink);
        let result = match result {
            Err(e) if e.is_cancelled() => Ok(Ok(())),
            other => other,
        };
        ended.push((sink, result));
    }
    ended
}
