//! Schema-change events for PostgreSQL, whose log holds no DDL.
//!
//! pgoutput sends a table's Relation message again before the table's
//! first change after an `ALTER TABLE` (and at its first change in each
//! replication session). Its column list is compared with the one the
//! schema history holds from before that change: a difference is a
//! schema-change event, placed just before the change. The history
//! records the new list at that position once, so a replay after a crash
//! sends the same event at the same position, while a Relation message
//! that only opens a session changes nothing.

use sluice_core::history::SchemaHistory;
use sluice_core::schema_change::{Before, ColumnEntry, change_row};
use sluice_core::{Event, Op};

use crate::decode::{DecodeError, Decoder};

/// Column lists by table (each partition under its own name, since
/// partitions of one table may order their columns differently).
pub type ColumnHistory = SchemaHistory<Vec<ColumnEntry>>;

impl Decoder {
    /// After the Relation message of captured relation `oid`, named `own`.
    pub(crate) fn schema_change(&mut self, oid: u32, own: &str, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        let position = self.peek_position();
        let (Some(history), Some(position), Some(info)) = (self.history.as_mut(), position, self.relations.get(&oid))
        else {
            return Ok(());
        };
        let columns = ColumnEntry::list(&info.schema);
        let before = history.before(own, &position);
        let same = before.as_ref().is_some_and(|old| old.as_deref() == Some(&columns));
        if !same && !history.has_entry_at(own, &position) {
            history.record(own, &position, Some(columns)).map_err(DecodeError::History)?;
        }
        // A table first seen here has no change to tell.
        let Some(Some(old)) = before else { return Ok(()) };
        let now = history.at(own, &position);
        if now.as_deref() == Some(&*old) {
            return Ok(());
        }
        let row = change_row(&self.database, None, Before::Columns(&old), now.as_deref().map(Vec::as_slice));
        self.emit(Op::Schema, oid, None, None, Some(row), out)?;
        // The row is the change's description, not the table's: formats
        // that type rows by the table's schema must not describe it so.
        if let Some(event) = self.held.as_mut() {
            event.schema = None;
            event.schema_version = 0;
        }
        Ok(())
    }
}
