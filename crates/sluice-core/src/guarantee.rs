//! What a sink promises about duplicates, stated the way the docs state it.

use std::fmt;

/// A sink's delivery guarantee. Nothing is ever lost on any sink; the
/// guarantee is about duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarantee {
    /// No duplicates even across a kill -9 at any instruction, because the
    /// sink stores its position atomically with the data. `condition` names
    /// what the guarantee depends on, e.g. `read_committed consumers`.
    ExactlyOnce { condition: Option<&'static str> },
    /// Replays after a crash or a retry can repeat events; `dedup` names the
    /// field a consumer uses to drop them.
    AtLeastOnce { dedup: &'static str },
    /// Each event is written once or not at all: a batch the sink fails
    /// to write is dropped, not written again, and its events counted.
    AtMostOnce,
}

impl Guarantee {
    pub fn is_exactly_once(&self) -> bool {
        matches!(self, Guarantee::ExactlyOnce { .. })
    }
}

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Guarantee::ExactlyOnce { condition: None } => f.write_str("exactly-once"),
            Guarantee::ExactlyOnce { condition: Some(c) } => write!(f, "exactly-once ({c})"),
            Guarantee::AtLeastOnce { dedup } => write!(f, "at-least-once (dedup: {dedup})"),
            Guarantee::AtMostOnce => f.write_str("at-most-once (dropped events counted)"),
        }
    }
}
