//! How a database sink applies the events of a chunk: as set statements,
//! or, after a row failed one, event by event to find the row.

use async_trait::async_trait;
use sluice_core::{Event, Op, SinkError};

use super::plan::{Encoding, Plan};

/// What a database sink does for [`apply`].
#[async_trait]
pub trait Applier: Send {
    type Encoding: Encoding + Send;
    type Error: std::fmt::Display + Send;

    /// `postgres sink "id"`, for messages.
    fn name(&self) -> String;

    /// Whether the last try found a refused row: the next one goes event
    /// by event. Cleared by the sink when a batch commits.
    fn careful(&mut self) -> &mut bool;

    /// Fits `event`'s target table and adds the event to `plan`.
    async fn add(&mut self, plan: &mut Plan<Self::Encoding>, event: &Event) -> Result<(), SinkError>;

    /// Runs the plan's statements; on failure, the error and what the
    /// statement was doing.
    async fn execute(&mut self, plan: &Plan<Self::Encoding>) -> Result<(), (Self::Error, String)>;

    /// An error one row causes (a constraint, a value out of range).
    fn is_row_error(e: &Self::Error) -> bool;

    fn error(e: Self::Error, doing: &str) -> SinkError;
}

/// Applies `events` in the open transaction. A row error in a set
/// statement is transient and makes the next try careful; a row error in
/// careful mode rejects that event, for the dead letter queue.
/// Schema-change events are not rows: the target evolves from the row
/// events' own schemas.
pub async fn apply<A: Applier>(sink: &mut A, events: &[Event]) -> Result<(), SinkError> {
    if *sink.careful() {
        for event in events.iter().filter(|e| e.op != Op::Schema) {
            let mut plan = Plan::default();
            sink.add(&mut plan, event).await?;
            if let Err((e, doing)) = sink.execute(&plan).await {
                return Err(if A::is_row_error(&e) {
                    SinkError::Rejected {
                        detail: format!("the target refused the change while {doing}: {e}"),
                        position: event.position.clone(),
                    }
                } else {
                    A::error(e, &doing)
                });
            }
        }
        return Ok(());
    }
    let mut plan = Plan::default();
    for event in events.iter().filter(|e| e.op != Op::Schema) {
        sink.add(&mut plan, event).await?;
    }
    match sink.execute(&plan).await {
        Ok(()) => Ok(()),
        Err((e, doing)) if A::is_row_error(&e) => {
            *sink.careful() = true;
            Err(SinkError::transient(format!(
                "{}: the target refused a row while {doing}: {e}; the batch is written again event by event to find it",
                sink.name()
            )))
        }
        Err((e, doing)) => Err(A::error(e, &doing)),
    }
}
