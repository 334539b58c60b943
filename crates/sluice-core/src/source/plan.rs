//! Where a log source starts: the decision, apart from the I/O.
//!
//! A source first learns what its server's log still holds for it (a
//! PostgreSQL slot present, missing or invalidated; a MySQL binlog file
//! present or purged), then asks [`plan_start`] what to do, then does it
//! (create or drop a slot, take or resume a snapshot, open the stream).
//! Every start-up rule both sources share is here, so it is tested
//! without a server.

use std::sync::Arc;

use crate::error::SourceError;
use crate::position::{Position, SnapshotPos};

/// Which source asks; the two differ in a few rules, said where they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Postgres,
    Mysql,
}

impl SourceKind {
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Postgres => "postgres",
            SourceKind::Mysql => "mysql",
        }
    }

    /// A log position this kind of source writes.
    fn writes(self, position: &Position) -> bool {
        matches!(
            (self, position),
            (SourceKind::Postgres, Position::Postgres { .. }) | (SourceKind::Mysql, Position::Mysql(_))
        )
    }
}

/// `snapshot.mode`, as the start-up decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMode {
    Initial,
    Never,
    Always,
    WhenNeeded,
}

impl SnapshotMode {
    /// From the config's `snapshot.mode`, told by what it asks for
    /// (sluice-core does not know the config's types): whether a pipeline
    /// without a checkpoint reads the tables first, whether every start
    /// re-reads them, whether a lost log position re-reads them.
    pub fn from_config(initial: bool, always: bool, when_needed: bool) -> Self {
        match (initial, always, when_needed) {
            (false, _, _) => SnapshotMode::Never,
            (true, true, _) => SnapshotMode::Always,
            (true, false, true) => SnapshotMode::WhenNeeded,
            (true, false, false) => SnapshotMode::Initial,
        }
    }
}

/// What the server's log still holds for the source, found before planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogState {
    /// Every change since the checkpoint the stream resumes from (or
    /// there is no checkpoint to look at).
    Held,
    /// Nothing on the server keeps a place for this source: the
    /// PostgreSQL replication slot does not exist.
    Missing,
    /// The changes since the checkpoint are gone: the slot was
    /// invalidated, or the checkpoint's binlog file was purged.
    Lost,
}

#[derive(Debug, Clone)]
pub struct StartInput<'a> {
    pub kind: SourceKind,
    /// The lowest checkpoint of all sinks: where the source starts from.
    pub checkpoint: Option<&'a Position>,
    /// [`AckWatermark::highest_at_start`](super::AckWatermark::highest_at_start).
    pub highest_at_start: Option<&'a Position>,
    pub mode: SnapshotMode,
    /// This process started the source before: `always` re-reads the
    /// tables once per process, not on every reconnect.
    pub started_once: bool,
    pub log: LogState,
}

/// The initial snapshot a start takes, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialSnapshot {
    None,
    /// Read every table from its first row, at a point taken now.
    Fresh,
    /// Go on with an unfinished one after this row; its `stream_from` is
    /// where the stream follows it.
    Resume(SnapshotPos),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartPlan {
    pub snapshot: InitialSnapshot,
    /// The log position the stream resumes from; `None` for the slot's
    /// position or the configured start. A MySQL source resumes a snapshot
    /// checkpoint at the point the snapshot was taken.
    pub stream_from: Option<Position>,
    /// `snapshot.mode: always` on the first start of the process with a
    /// checkpoint: every table is queued for an incremental snapshot.
    pub reread: bool,
    /// The log lost the changes since the checkpoints and the mode is
    /// `when_needed`: stream from the log's head (PostgreSQL: a new slot)
    /// and queue every table for an incremental snapshot.
    pub recover: bool,
    /// Warnings for the operator, logged with [`Notice::log`].
    pub notices: Vec<Notice>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// An unfinished initial snapshot is dropped: `snapshot.mode` is now `never`.
    SnapshotAbandoned { table: Arc<str> },
    /// A sink without a checkpoint joined sinks that stream already.
    Joined(SourceKind),
}

impl Notice {
    pub fn log(&self) {
        match self {
            Notice::SnapshotAbandoned { table } => tracing::warn!(
                table = %table,
                "the snapshot was not finished, and snapshot.mode is now never: rows not read yet are skipped"
            ),
            Notice::Joined(SourceKind::Postgres) => tracing::warn!(
                "a sink without a checkpoint joined a pipeline that streams already: it gets changes from the slot's position on, not the rows already in the tables"
            ),
            Notice::Joined(SourceKind::Mysql) => tracing::warn!(
                "a sink without a checkpoint joined a pipeline that streams already: it gets changes from the configured start on, not the rows already in the tables"
            ),
        }
    }
}

/// Why a source must not start; each source words the log refusals with
/// its own names (the slot, the binlog file).
#[derive(Debug)]
pub enum Refusal {
    /// The checkpoint was written by another kind of source.
    Foreign(SourceError),
    /// [`LogState::Lost`], and the mode does not re-read.
    LogLost,
    /// [`LogState::Missing`] though sinks hold checkpoints.
    LogMissing,
}

/// Refuses a checkpoint another kind of source wrote; a snapshot row's
/// checkpoint is every source's.
pub fn check_checkpoint(kind: SourceKind, checkpoint: Option<&Position>) -> Result<(), Refusal> {
    match checkpoint {
        Some(position) if !matches!(position, Position::Snapshot(_)) && !kind.writes(position) => {
            Err(foreign(kind, position))
        }
        _ => Ok(()),
    }
}

fn foreign(kind: SourceKind, position: &Position) -> Refusal {
    Refusal::Foreign(SourceError::permanent(
        format!("checkpoint {position} was not written by a {} source", kind.name()),
        "give this source a new id, or reset its checkpoints with `sluice checkpoints reset`",
    ))
}

/// Where the stream resumes in the log, before the log is looked at (a
/// MySQL source checks that this position's binlog file still exists).
pub fn stream_point(
    kind: SourceKind,
    checkpoint: Option<&Position>,
    highest: Option<&Position>,
) -> Result<Option<Position>, Refusal> {
    check_checkpoint(kind, checkpoint)?;
    match kind {
        // A PostgreSQL stream resumes at the slot's position after a
        // snapshot checkpoint.
        SourceKind::Postgres => Ok(checkpoint.filter(|p| kind.writes(p)).cloned()),
        SourceKind::Mysql => match (checkpoint, highest) {
            (Some(Position::Snapshot(pos)), _) | (None, Some(Position::Snapshot(pos))) => {
                match pos.stream_from.parse::<Position>() {
                    Ok(position) if kind.writes(&position) => Ok(Some(position)),
                    _ => Err(foreign(kind, &Position::Snapshot(pos.clone()))),
                }
            }
            (None, _) => Ok(None),
            (Some(position), _) => Ok(Some(position.clone())),
        },
    }
}

/// Where an unfinished initial snapshot goes on from: after the lowest
/// checkpoint when that is a snapshot row; from the first row when a sink
/// without a checkpoint joined others in mid-snapshot (each sink then
/// skips what it holds). `None` when there is nothing to go on with, or
/// the snapshot is no longer wanted (its unread rows are then skipped).
fn resume_point(input: &StartInput<'_>, wanted: bool, notices: &mut Vec<Notice>) -> Option<SnapshotPos> {
    match (input.checkpoint, input.highest_at_start) {
        (Some(Position::Snapshot(pos)), _) if wanted => Some(pos.clone()),
        (Some(Position::Snapshot(pos)), _) => {
            notices.push(Notice::SnapshotAbandoned { table: pos.table.clone() });
            None
        }
        (None, Some(Position::Snapshot(pos))) if wanted => {
            Some(SnapshotPos { table: Arc::from(""), key: Arc::from(Vec::new()), stream_from: pos.stream_from.clone() })
        }
        _ => None,
    }
}

/// The start-up decision: see the module docs.
pub fn plan_start(input: &StartInput<'_>) -> Result<StartPlan, Refusal> {
    let (kind, from, highest, mode) = (input.kind, input.checkpoint, input.highest_at_start, input.mode);
    let stream_from = stream_point(kind, from, highest)?;
    let mut notices = Vec::new();
    let wanted = mode != SnapshotMode::Never;
    let mut resume = resume_point(input, wanted, &mut notices);
    let streams_already = match kind {
        SourceKind::Postgres => matches!(highest, Some(Position::Postgres { .. })),
        SourceKind::Mysql => highest.is_some_and(|h| !matches!(h, Position::Snapshot(_))),
    };
    if wanted && from.is_none() && streams_already {
        notices.push(Notice::Joined(kind));
    }
    let fresh = wanted && from.is_none() && highest.is_none();
    let reread = mode == SnapshotMode::Always && from.is_some() && !input.started_once;
    let gone = match input.log {
        LogState::Held => false,
        LogState::Lost => true,
        LogState::Missing => from.is_some() || highest.is_some(),
    };
    // Only a sink's own checkpoint says which changes are gone; a
    // PostgreSQL source needs one in the log itself, a MySQL source one
    // it can stream from (a snapshot's point counts).
    let has_checkpoint = match kind {
        SourceKind::Postgres => from.is_some(),
        SourceKind::Mysql => stream_from.is_some(),
    };
    let recover = gone && mode == SnapshotMode::WhenNeeded && has_checkpoint;
    if recover {
        // An unfinished initial snapshot cannot stream from its point
        // either: the re-read covers its tables.
        resume = None;
    } else if gone {
        return Err(if input.log == LogState::Lost { Refusal::LogLost } else { Refusal::LogMissing });
    }
    let snapshot = match resume {
        _ if fresh => InitialSnapshot::Fresh,
        Some(pos) => InitialSnapshot::Resume(pos),
        None => InitialSnapshot::None,
    };
    Ok(StartPlan { snapshot, stream_from, reread, recover, notices })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
