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

use std::io::Write;
use std::path::PathBuf;

use sluice_core::{Lsn, SourceError};

pub(crate) struct SlotRecord {
    path: PathBuf,
    slot: String,
    confirmed: Option<Lsn>,
}

fn record_error(path: &std::path::Path, detail: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(format!("{}: {detail}", path.display()), "check the disk of --data-dir")
}

impl SlotRecord {
    /// The record of `slot` in `dir`; a record of another slot name, or
    /// none, knows nothing yet.
    pub(crate) fn open(dir: PathBuf, slot: &str) -> Self {
        let path = dir.join("slot_confirmed");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let confirmed =
            text.split_once(' ').filter(|(name, _)| *name == slot).and_then(|(_, lsn)| lsn.trim().parse().ok());
        Self { path, slot: slot.to_string(), confirmed }
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
        let temporary = self.path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::File::create(&temporary)?;
            writeln!(file, "{} {lsn}", self.slot)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)
        };
        write().map_err(|e| record_error(&self.path, e))?;
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
        let mut record = SlotRecord::open(dir.path().to_path_buf(), "s");
        assert_eq!(record.confirmed(), None);
        record.raise(Lsn(200)).unwrap();
        record.raise(Lsn(100)).unwrap();
        assert_eq!(SlotRecord::open(dir.path().to_path_buf(), "s").confirmed(), Some(Lsn(200)));
        assert_eq!(SlotRecord::open(dir.path().to_path_buf(), "other").confirmed(), None);
    }
}
