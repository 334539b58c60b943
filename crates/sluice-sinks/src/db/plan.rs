//! A chunk of events as statements: per target table, runs of changes
//! that one statement can apply together. A run holds one kind of change
//! with one column list.
//!
//! A table's changes fall into segments in which no key comes twice:
//! within one, the changes touch different rows, so the order they are
//! applied in cannot change the result, and each kind of change is one
//! statement (deletes first, so a row that gives up a unique value does
//! so before another takes it). A key seen again, or a truncate, starts
//! the next segment. Tables are applied one after another, which only
//! tables tied by foreign keys could tell apart, and every change of the
//! batch commits at once.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;

use sluice_core::time::format_utc_micros;
use sluice_core::{Event, OldKey, Op, Row, Shape, SinkError, ToCompactString as _, Value};

use super::{ApplyMode, ColumnFilter};

/// The columns of a changelog table, in order; each sink types them.
pub const CHANGELOG_COLUMNS: [&str; 9] =
    ["event_id", "op", "position", "tx_id", "commit_time", "source_table", "key", "before", "after"];

/// How a sink writes rows into a run's data: COPY text for PostgreSQL,
/// a VALUES list for MySQL.
pub trait Encoding {
    /// Appends `value` as one field.
    fn field(out: &mut String, value: &Value);
    const FIELD_SEP: char;
    const ROW_START: &'static str;
    const ROW_END: &'static str;
    const ROW_SEP: &'static str;
    /// A run's data grows to about this size, then the next row starts a
    /// new run (a statement's size limit).
    const MAX_RUN_BYTES: usize;
}

/// A target table as a sink knows it.
#[derive(Debug)]
pub struct Table {
    /// The quoted name.
    pub name: String,
    /// `schema.table`, for messages.
    pub display: String,
    pub key: Vec<Arc<str>>,
    /// The target's columns and their types.
    pub columns: Vec<(String, String)>,
    /// The source schema version the table was last checked against.
    pub version: Option<u32>,
}

impl Table {
    pub fn has(&self, column: &str) -> bool {
        self.columns.iter().any(|(c, _)| c == column)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rows the source inserted (or a snapshot read): new to the target
    /// unless it already held them, so a sink may try a plain insert
    /// first and upsert only if a key is taken.
    Insert,
    /// Insert, or update the row with the same key.
    Upsert,
    /// Delete by key.
    Delete,
    Truncate,
    /// Append to a changelog table.
    Append,
}

#[derive(Debug)]
pub struct Run {
    pub kind: Kind,
    pub columns: Vec<Arc<str>>,
    /// The rows in the sink's encoding.
    pub data: String,
}

/// The runs of one target table.
#[derive(Debug)]
pub struct TablePlan {
    pub name: String,
    pub display: String,
    pub key: Vec<Arc<str>>,
    pub runs: Vec<Run>,
    /// Where the current segment's runs begin, and its keys.
    segment: usize,
    keys: HashSet<String>,
}

#[derive(Debug)]
pub struct Plan<E> {
    pub tables: Vec<TablePlan>,
    encoding: PhantomData<E>,
}

impl<E> Default for Plan<E> {
    fn default() -> Self {
        Self { tables: Vec::new(), encoding: PhantomData }
    }
}

/// A refusal that names the table and what the event lacks.
fn missing_key(event: &Event, column: &str) -> SinkError {
    SinkError::permanent(
        format!(
            "a {} event of table {} at {} carries no value for key column {column}",
            event.op.code(),
            event.table,
            event.position
        ),
        "give the source table a primary key or REPLICA IDENTITY FULL, or declare a key the events carry under keys:",
    )
}

impl<E: Encoding> Plan<E> {
    /// Adds `event`, whose target `table` already fits it.
    pub fn add(
        &mut self,
        table: &Table,
        event: &Event,
        mode: ApplyMode,
        filter: &ColumnFilter,
    ) -> Result<(), SinkError> {
        let plan = match self.tables.iter().position(|t| t.name == table.name) {
            Some(i) => &mut self.tables[i],
            None => {
                self.tables.push(TablePlan {
                    name: table.name.clone(),
                    display: table.display.clone(),
                    key: table.key.clone(),
                    runs: Vec::new(),
                    segment: 0,
                    keys: HashSet::new(),
                });
                self.tables.last_mut().ok_or_else(|| SinkError::transient("plan lost its table"))?
            }
        };
        if mode == ApplyMode::Changelog {
            return plan.append::<E>(event);
        }
        match (&event.shape, event.op) {
            // The flat shapes of `unwrap`: a tombstone deletes the key; a
            // row is written whatever the op (a rewritten delete is the
            // old row marked `__deleted`), and an update that moved the
            // row does to the old key what the transform said.
            (Shape::Tombstone, _) => {
                let image = event.key.as_ref().or(event.before.as_ref());
                plan.delete::<E>(event, image.ok_or_else(|| missing_key(event, "(no row image)"))?)
            }
            (Shape::Row(old_key), _) => {
                let after = event.after.as_ref().ok_or_else(|| missing_key(event, "(no row image)"))?;
                if event.changes_key()
                    && let Some(before) = &event.before
                {
                    match old_key {
                        OldKey::Nothing => {}
                        OldKey::Tombstone => plan.delete::<E>(event, before)?,
                        OldKey::Row => plan.upsert::<E>(Kind::Upsert, event, before, table, filter)?,
                    }
                }
                let kind = if matches!(event.op, Op::Insert | Op::Read) { Kind::Insert } else { Kind::Upsert };
                plan.upsert::<E>(kind, event, after, table, filter)
            }
            (_, Op::Insert | Op::Read | Op::Update) => {
                let after = event.after.as_ref().ok_or_else(|| missing_key(event, "(no row image)"))?;
                if event.op == Op::Update
                    && let Some(before) = &event.before
                    && let Some(old) = plan.key_text::<E>(before)
                    && plan.key_text::<E>(after).is_some_and(|new| new != old)
                {
                    plan.delete::<E>(event, before)?;
                }
                let kind = if event.op == Op::Update { Kind::Upsert } else { Kind::Insert };
                plan.upsert::<E>(kind, event, after, table, filter)
            }
            (_, Op::Delete) => {
                let image = match &event.key {
                    Some(key) if plan.key_text::<E>(key).is_some() => key,
                    _ => event.before.as_ref().ok_or_else(|| missing_key(event, "(no row image)"))?,
                };
                plan.delete::<E>(event, image)
            }
            (_, Op::Truncate) => {
                if plan.runs.last().is_none_or(|r| r.kind != Kind::Truncate) {
                    plan.runs.push(Run { kind: Kind::Truncate, columns: Vec::new(), data: String::new() });
                }
                // Whatever follows comes after the truncate.
                plan.segment = plan.runs.len();
                plan.keys.clear();
                Ok(())
            }
            (_, Op::Message | Op::Schema) => Ok(()),
        }
    }
}

impl TablePlan {
    /// The key's values of `row` as COPY text; `None` if it lacks one.
    fn key_text<E: Encoding>(&self, row: &Row) -> Option<String> {
        let mut text = String::new();
        for (i, column) in self.key.iter().enumerate() {
            let value = row.get(column).filter(|v| !matches!(v, Value::Unchanged))?;
            if i > 0 {
                text.push(E::FIELD_SEP);
            }
            E::field(&mut text, value);
        }
        Some(text)
    }

    /// The run to add a row of `kind` with `columns` and `key` to, its
    /// data ready for the row's first field.
    fn run_for<E: Encoding>(&mut self, kind: Kind, columns: &[Arc<str>], key: Option<String>) -> &mut Run {
        if let Some(key) = key {
            if self.keys.contains(&key) {
                // The key again: its earlier change must be applied first.
                self.segment = self.runs.len();
                self.keys.clear();
            }
            self.keys.insert(key);
        }
        let found = self.runs[self.segment..]
            .iter()
            .position(|r| r.kind == kind && r.columns == columns && r.data.len() < E::MAX_RUN_BYTES);
        let index = match found {
            Some(i) => self.segment + i,
            None => {
                let run = Run { kind, columns: columns.to_vec(), data: String::new() };
                // Deletes go first in their segment.
                let at = if kind == Kind::Delete { self.segment } else { self.runs.len() };
                self.runs.insert(at, run);
                at
            }
        };
        let run = &mut self.runs[index];
        if !run.data.is_empty() {
            run.data.push_str(E::ROW_SEP);
        }
        run.data.push_str(E::ROW_START);
        run
    }

    fn delete<E: Encoding>(&mut self, event: &Event, image: &Row) -> Result<(), SinkError> {
        let key = match self.key_text::<E>(image) {
            Some(key) => key,
            None => {
                let column = self.key.iter().find(|c| image.get(c).is_none()).map_or("?", |c| &**c);
                return Err(missing_key(event, column));
            }
        };
        let columns = self.key.clone();
        let run = self.run_for::<E>(Kind::Delete, &columns, Some(key.clone()));
        run.data.push_str(&key);
        run.data.push_str(E::ROW_END);
        Ok(())
    }

    fn upsert<E: Encoding>(
        &mut self,
        kind: Kind,
        event: &Event,
        after: &Row,
        table: &Table,
        filter: &ColumnFilter,
    ) -> Result<(), SinkError> {
        let Some(key) = self.key_text::<E>(after) else {
            let column = self.key.iter().find(|c| after.get(c).is_none()).map_or("?", |c| &**c);
            return Err(missing_key(event, column));
        };
        let written = |(column, value): &(&Arc<str>, &Value)| {
            !matches!(value, Value::Unchanged) && filter.keeps(&event.table, column) && table.has(column)
        };
        let pairs: Vec<(&Arc<str>, &Value)> = after.columns.iter().zip(&after.values).filter(written).collect();
        let columns: Vec<Arc<str>> = pairs.iter().map(|(c, _)| Arc::clone(c)).collect();
        let run = self.run_for::<E>(kind, &columns, Some(key));
        for (i, (_, value)) in pairs.iter().enumerate() {
            if i > 0 {
                run.data.push(E::FIELD_SEP);
            }
            E::field(&mut run.data, value);
        }
        run.data.push_str(E::ROW_END);
        Ok(())
    }

    fn append<E: Encoding>(&mut self, event: &Event) -> Result<(), SinkError> {
        let columns: Vec<Arc<str>> = CHANGELOG_COLUMNS.iter().map(|c| Arc::from(*c)).collect();
        let fields = [
            Value::Text(event.id().to_compact_string()),
            Value::Text(event.op.code().into()),
            Value::Text(event.position.to_compact_string()),
            Value::Text((&*event.tx_id).into()),
            Value::TimestampTz(format_utc_micros(event.commit_time_us).into()),
            Value::Text((&*event.table).into()),
            row_json(event, &event.key)?,
            row_json(event, &event.before)?,
            row_json(event, &event.after)?,
        ];
        let run = self.run_for::<E>(Kind::Append, &columns, None);
        for (i, value) in fields.iter().enumerate() {
            if i > 0 {
                run.data.push(E::FIELD_SEP);
            }
            E::field(&mut run.data, value);
        }
        run.data.push_str(E::ROW_END);
        Ok(())
    }
}

/// A row image as a JSON document (unchanged columns left out), or NULL.
fn row_json(event: &Event, row: &Option<Row>) -> Result<Value, SinkError> {
    let Some(row) = row else { return Ok(Value::Null) };
    let text = serde_json::to_string(row).map_err(|e| SinkError::Rejected {
        detail: format!("event {} cannot be written as JSON: {e}", event.position),
        position: event.position.clone(),
    })?;
    Ok(Value::Text(text.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Origin, Position};

    /// Fields as their text, rows one per line.
    struct Lines;

    impl Encoding for Lines {
        fn field(out: &mut String, value: &Value) {
            out.push_str(&value.text());
        }
        const FIELD_SEP: char = ',';
        const ROW_START: &'static str = "";
        const ROW_END: &'static str = "";
        const ROW_SEP: &'static str = " ";
        const MAX_RUN_BYTES: usize = usize::MAX;
    }

    fn event(seq: u32, op: Op, id: i64) -> Event {
        let columns: sluice_core::Columns = vec![Arc::from("id"), Arc::from("v")].into();
        let row = Row { columns, values: vec![Value::Int(id), Value::Int(i64::from(seq))] };
        let key = Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(id)] };
        Event {
            op,
            source_id: "s".into(),
            database: "db".into(),
            table: "public.t".into(),
            key: Some(key),
            before: (op == Op::Delete).then(|| row.clone()),
            after: (op != Op::Delete).then_some(row),
            schema_version: 1,
            position: Position::Generator { tx: 1, seq },
            tx_id: "1".into(),
            tx_end: false,
            commit_time_us: 0,
            schema: None,
            origin: Origin::None,
            route: None,
            shape: Default::default(),
        }
    }

    #[test]
    fn a_key_seen_again_starts_a_segment_and_deletes_lead_theirs() {
        let table = Table {
            name: "t".into(),
            display: "public.t".into(),
            key: vec![Arc::from("id")],
            columns: vec![("id".into(), "bigint".into()), ("v".into(), "bigint".into())],
            version: Some(1),
        };
        let mut plan = Plan::<Lines>::default();
        let changes =
            [(Op::Insert, 1), (Op::Insert, 2), (Op::Delete, 1), (Op::Insert, 3), (Op::Update, 2), (Op::Delete, 4)];
        for (seq, (op, id)) in changes.into_iter().enumerate() {
            plan.add(&table, &event(seq as u32, op, id), ApplyMode::Apply, &ColumnFilter::default()).unwrap();
        }
        let runs: Vec<(Kind, &str)> = plan.tables[0].runs.iter().map(|r| (r.kind, r.data.as_str())).collect();
        assert_eq!(
            runs,
            vec![(Kind::Insert, "1,0 2,1"), (Kind::Delete, "1 4"), (Kind::Insert, "3,3"), (Kind::Upsert, "2,4")],
            "the second segment starts at the delete of 1, its deletes first"
        );
    }
}
