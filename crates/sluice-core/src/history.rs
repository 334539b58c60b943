//! A source's schema history: each table's schemas with the log position
//! each holds from, in an append-only file of JSON lines.
//!
//! A source that decodes old log after a schema change needs the schema of
//! then, not of now; and a schema-change event replayed after a crash must
//! say what it said the first time. Both read this history, which is
//! written once, when a position is first read.

use std::collections::HashMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Position, SourceError, StateDir};

/// The history's name in its source's state.
pub const HISTORY_NAME: &str = "schema_history.jsonl";

#[derive(Serialize, Deserialize)]
struct Entry<S> {
    position: String,
    table: String,
    schema: Option<S>,
}

/// One table's schemas, each with the position it holds from; `None`
/// marks a dropped table.
type Timeline<S> = Vec<(Position, Option<Arc<S>>)>;

/// Schemas of type `S` by table.
pub struct SchemaHistory<S> {
    state: StateDir,
    entries: HashMap<String, Timeline<S>>,
}

fn history_error(state: &StateDir, detail: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(
        format!("schema history {}: {detail}", state.locate(HISTORY_NAME)),
        "check the checkpoint store (the disk of --data-dir, or the store's database); if the history is damaged, move it away and reset this source's checkpoints",
    )
}

impl<S: Serialize + DeserializeOwned + Clone> SchemaHistory<S> {
    pub fn open(state: StateDir) -> Result<Self, SourceError> {
        let bytes = state.read(HISTORY_NAME).map_err(|e| history_error(&state, e))?.unwrap_or_default();
        let mut history = SchemaHistory { state, entries: HashMap::new() };
        for line in String::from_utf8_lossy(&bytes).lines() {
            // A torn line from a crash is dropped; it is written again.
            let Ok(entry) = serde_json::from_str::<Entry<S>>(line) else { continue };
            let position: Position = entry.position.parse().map_err(|e| history_error(&history.state, e))?;
            history.insert(entry.table, position, entry.schema);
        }
        Ok(history)
    }

    fn insert(&mut self, table: String, position: Position, schema: Option<S>) {
        let list = self.entries.entry(table).or_default();
        list.push((position, schema.map(Arc::new)));
        list.sort_by(|a, b| a.0.cmp(&b.0));
    }

    /// The schema in force at `position`; `None` when the table did not
    /// exist then (or was never seen).
    pub fn at(&self, table: &str, position: &Position) -> Option<Arc<S>> {
        let list = self.entries.get(table)?;
        list.iter().rev().find(|(p, _)| p <= position).and_then(|(_, s)| s.clone())
    }

    /// The entry in force just before `position`: `None` when the table was
    /// never seen before it, `Some(None)` when it was gone then.
    pub fn before(&self, table: &str, position: &Position) -> Option<Option<Arc<S>>> {
        let list = self.entries.get(table)?;
        list.iter().rev().find(|(p, _)| p < position).map(|(_, s)| s.clone())
    }

    pub fn has_entry_at(&self, table: &str, position: &Position) -> bool {
        self.entries.get(table).is_some_and(|list| list.iter().any(|(p, _)| p == position))
    }

    pub fn knows(&self, table: &str) -> bool {
        self.entries.contains_key(table)
    }

    /// Appends a schema (or its absence: a dropped table) from `position` on.
    pub fn record(&mut self, table: &str, position: &Position, schema: Option<S>) -> Result<(), SourceError> {
        let entry = Entry { position: position.to_string(), table: table.to_string(), schema };
        let line = serde_json::to_vec(&entry).map_err(|e| history_error(&self.state, e))?;
        self.state.append_line(HISTORY_NAME, &line).map_err(|e| history_error(&self.state, e))?;
        self.insert(table.to_string(), position.clone(), entry.schema);
        Ok(())
    }
}
