//! Error classes shared by sources and sinks.
//!
//! Errors are classified by type, never by message text: `Transient` is
//! retried with backoff, `Permanent` stops the component and tells the
//! operator what to do.

/// Any underlying error kept as the `source()` of ours.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

macro_rules! classified_error {
    ($(#[$doc:meta])* $name:ident $({ $($extra:tt)* })?) => {
        $(#[$doc])*
        #[derive(Debug, thiserror::Error)]
        pub enum $name {
            $($($extra)*)?
            /// Worth retrying: a server may come back, a timeout may pass.
            #[error("{detail}")]
            Transient {
                detail: String,
                #[source]
                cause: Option<BoxError>,
            },
            /// Retrying will not help; an operator has to act on `hint`.
            #[error("{detail}; hint: {hint}")]
            Permanent {
                detail: String,
                hint: String,
                #[source]
                cause: Option<BoxError>,
            },
        }

        impl $name {
            pub fn transient(detail: impl Into<String>) -> Self {
                Self::Transient { detail: detail.into(), cause: None }
            }

            pub fn transient_from(detail: impl Into<String>, cause: impl Into<BoxError>) -> Self {
                Self::Transient { detail: detail.into(), cause: Some(cause.into()) }
            }

            pub fn permanent(detail: impl Into<String>, hint: impl Into<String>) -> Self {
                Self::Permanent { detail: detail.into(), hint: hint.into(), cause: None }
            }

            pub fn permanent_from(
                detail: impl Into<String>,
                hint: impl Into<String>,
                cause: impl Into<BoxError>,
            ) -> Self {
                Self::Permanent { detail: detail.into(), hint: hint.into(), cause: Some(cause.into()) }
            }

            pub fn is_transient(&self) -> bool {
                matches!(self, Self::Transient { .. })
            }
        }
    };
}

classified_error!(
    /// A sink could not take or persist a batch.
    SinkError {
        /// The event at `position` can never be written: too large, an
        /// invalid destination, refused by the receiver. What the sink holds
        /// of the batch is asked again with `open`; the writer puts the event
        /// in the dead letter queue and writes the batch again without it.
        #[error("{detail}")]
        Rejected { detail: String, position: crate::position::Position },
    }
);
classified_error!(
    /// A source could not produce events.
    SourceError
);

/// The checkpoint store failed. Store failures are never retried silently:
/// a checkpoint that cannot be saved is reported, and nothing moves.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint store at {path}: {detail}")]
    Io {
        path: String,
        detail: String,
        #[source]
        cause: Option<BoxError>,
    },
    #[error("checkpoint {key} would move backward from {stored} to {proposed}; nothing was written")]
    Regression { key: String, stored: String, proposed: String },
    #[error("checkpoint store call did not complete: {detail}; nothing is known to be written")]
    Interrupted { detail: String },
    #[error("checkpoint {key} holds {text:?}, which is not a position; hint: reset it with `sluice checkpoints reset`")]
    Corrupt { key: String, text: String },
    #[error(
        "the dead letter queue is full ({max} entries); hint: look at them with `sluice dlq list`, then purge them, or set dead_letter.on_full: drop_oldest"
    )]
    DeadLetterQueueFull { max: usize },
    /// The pipeline's lease moved to another owner (a later epoch): this
    /// instance lost it, and may not move its checkpoints any more.
    #[error(
        "pipeline {pipeline}: its lease is at epoch {current}, past this instance's {held}: another instance owns it now, and nothing was written"
    )]
    Fenced { pipeline: String, held: i64, current: i64 },
    /// Another process (a running `sluice run`) holds the store open.
    #[error(
        "checkpoint store at {path}: the store is open in another process; hint: stop the other sluice process using this --data-dir, or give this one its own"
    )]
    InUse { path: String },
}

/// The cause of a permanent [`SinkError`] when another writer took the
/// sink's exclusive identity (Kafka's `transactional.id`), so this one may
/// write nothing more. A fleet member that still holds the pipeline's
/// lease was fenced by a writer that lost it (a stalled instance's late
/// start): the member starts the pipeline again at a new epoch, whose
/// writer fences the stale one in turn, instead of stopping.
#[derive(Debug, thiserror::Error)]
#[error("a newer writer with the same identity fenced this one")]
pub struct SinkFenced(#[source] pub BoxError);

/// `head` followed by the causes of `e`, joined by ": ": what a network
/// error's own text leaves out (a refused connection, an unknown
/// certificate).
pub fn with_causes(head: String, e: &dyn std::error::Error) -> String {
    let mut text = head;
    let mut cause = e.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}
