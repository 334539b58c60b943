//! The highest position Sluice has confirmed to its replication slot,
//! kept in the source's state dir.
//!
//! The server only moves a slot's `confirmed_flush_lsn` when a client
//! confirms a position (or an operator advances it), and Sluice records
//! each position before it confirms it. So a slot found confirmed past
//! both this record and the checkpoints was moved by someone else: made
//! anew under the same name (after a failover before PostgreSQL 17, say),
//! or advanced by hand. Its changes in between never reach the sinks, and
//! starting from it would hide that.

use sluice_core::{Lsn, SourceError, StateDir};

const NAME: &str = "slot_confirmed";

pub(crate) struct SlotRecord {
    state: StateDir,
    slot: String,
    confirmed: Option<Lsn>,
}

fn record_error(detail: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(
        format!("the slot record: {detail}"),
        "check the checkpoint store (the disk of --data-dir, or the store's database)",
    )
}

impl SlotRecord {
    /// The record of `slot` in `dir`; a record of another slot name, or
    /// none, knows nothing yet.
    pub(crate) fn open(state: StateDir, slot: &str) -> Result<Self, SourceError> {
        let bytes = state.read(NAME).map_err(record_error)?.unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let confirmed =
            text.split_once(' ').filter(|(name, _)| *name == slot).and_then(|(_, lsn)| lsn.trim().parse().ok());
        Ok(Self { state, slot: slot.to_string(), confirmed })
    }

    pub(crate) fn confirmed(&self) -> Option<Lsn> {
        self.confirmed
    }

    /// Records `lsn` if it is higher than the record, durably, before the
    /// slot may be confirmed to it.
    pub(crate) fn raise(&mut self, lsn: Lsn) -> Result<(), SourceError> {
        if self.confirmed.is_some_and(|known| known >= lsn) {
            return Ok(());
        }
        self.state.write(NAME, format!("{} {lsn}\n", self.slot).as_bytes()).map_err(record_error)?;
        self.confirmed = Some(lsn);
        Ok(())
    }

    /// The error for a slot confirmed at `found`, past both the record and
    /// the checkpoints (`known`, the higher of them).
    pub(crate) fn moved_error(slot: &str, found: Lsn, known: Lsn) -> SourceError {
        SourceError::permanent(
            format!(
                "replication slot {slot:?} is confirmed to {found}, past {known}, the most Sluice ever confirmed or checkpointed: it was made anew under the same name (after a failover before PostgreSQL 17, say) or advanced by another client, and the changes in between never reached the sinks"
            ),
            "reset this pipeline's checkpoints with `sluice checkpoints reset` and take a new snapshot, or set snapshot.mode: when_needed to stream from a new slot and re-read every table",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_rises_only_and_belongs_to_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let state = || StateDir::files(dir.path());
        let mut record = SlotRecord::open(state(), "s").unwrap();
        assert_eq!(record.confirmed(), None);
        record.raise(Lsn(200)).unwrap();
        record.raise(Lsn(100)).unwrap();
        assert_eq!(SlotRecord::open(state(), "s").unwrap().confirmed(), Some(Lsn(200)));
        assert_eq!(SlotRecord::open(state(), "other").unwrap().confirmed(), None);
    }
}
