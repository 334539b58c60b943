//! Waiting on time: for a deadline that may not be set, and for a sink
//! call that must not take longer than the batch deadline.

use std::time::Duration;

use sluice_core::SinkError;

/// Sleeps until `due`, or forever when there is none, so a `select!` arm
/// for an unset deadline never fires.
pub(crate) async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Runs one sink call under the batch deadline; a timeout is transient.
pub(crate) async fn with_deadline<T>(
    deadline: Duration,
    what: &str,
    call: impl Future<Output = Result<T, SinkError>>,
) -> Result<T, SinkError> {
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(SinkError::transient(format!(
            "sink {what} exceeded sink_batch_deadline_secs ({}s)",
            deadline.as_secs()
        ))),
    }
}
