//! Events a sink rejects one by one go to the dead letter queue, so the
//! rest of the stream flows on.

use sluice_config::OnFull;
use sluice_core::{DeadLetter, Position, SinkError, collect_chunks};
use std::sync::atomic::Ordering;
use tracing::error;

use super::{SinkWriter, State, Stop};

impl SinkWriter {
    /// Puts the event at `position` in the dead letter queue, durably, and
    /// leaves it out of every later write.
    pub(super) async fn reject(&mut self, state: &mut State, position: Position, detail: String) -> Result<(), Stop> {
        let mut found = None;
        for batch in state.retained.iter().filter(|b| b.first() <= &position && &position <= b.last()) {
            let events = match batch.events() {
                Some(events) => events.to_vec(),
                None => {
                    let Some(mut chunks) = batch.chunks(None).ok().flatten() else { continue };
                    collect_chunks(&mut chunks).await.map_err(Stop::Fatal)?
                }
            };
            found = events.into_iter().find(|e| e.position == position);
            if found.is_some() {
                break;
            }
        }
        let event = found.ok_or_else(|| {
            Stop::Fatal(SinkError::permanent(
                format!("the sink rejected position {position}, which is not in the batches it was given: {detail}"),
                "this is a bug in the sink; report it",
            ))
        })?;
        let letter = DeadLetter {
            key: format!("{}::sink::{}::{position}", self.source_id, self.sink_id),
            source_id: self.source_id.clone(),
            sink_id: self.sink_id.clone(),
            position: position.to_string(),
            // The reason is shown by the API and `sluice dlq`; the event
            // itself is data and is kept as it is.
            error: sluice_core::redact::credentials(&detail).into_owned(),
            event: serde_json::to_string(&event).unwrap_or_default(),
            encoded: DeadLetter::encode_event(&event),
            recorded_at_us: sluice_core::time::now_us(),
        };
        let queue = self.dead_letters.clone();
        let (max, drop_oldest) = (self.dead_letter.max_entries, self.dead_letter.on_full == OnFull::DropOldest);
        let stored = tokio::task::spawn_blocking(move || queue.put(&letter, max, drop_oldest)).await;
        match stored {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                return Err(Stop::Fatal(SinkError::permanent(
                    format!("cannot keep a rejected event ({detail}): {err}"),
                    "nothing was dropped; the pipeline stopped so the event is not lost",
                )));
            }
            Err(err) => {
                return Err(Stop::Fatal(SinkError::permanent(
                    format!("dead letter task failed: {err}"),
                    "report this as a bug",
                )));
            }
        }
        error!(%position, error = %detail, "event sent to the dead letter queue; see `sluice dlq list`");
        self.sink_status().dead_lettered.fetch_add(1, Ordering::Relaxed);
        state.skip.insert(position);
        Ok(())
    }
}
