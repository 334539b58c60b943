//! The flat shapes a transform gives an event, as Debezium's single
//! message transforms write them: `ExtractNewRecordState`'s row alone or
//! tombstone (`unwrap`), and the outbox `EventRouter`'s message
//! (`outbox`). Keys stay the table's keys, as the transforms leave them.

use std::sync::Arc;

use sluice_core::{Event, MessageShape, OldKey, Value};

use super::out::JsonOut;
use super::{Encoder, Table, key_text, values};
use crate::{Record, RecordKind};

/// A record worked out while the table is borrowed: its value as JSON
/// text, made into bytes (wrapped, or an Avro datum) after.
struct Pending {
    kind: RecordKind,
    key: Option<Vec<u8>>,
    value: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Encoder {
    /// A row-shaped event: its row is the value. An update that moved
    /// the row to another key writes what `old_key` says for the old key
    /// first, as Debezium's delete of the old key becomes under the
    /// transform, with the key-change headers Debezium keeps.
    pub(super) fn flat_row(
        &mut self,
        event: &Event,
        table: usize,
        old_key: OldKey,
        out: &mut Vec<Record>,
    ) -> Result<(), String> {
        let table = &self.tables[&table];
        // Debezium's transform rebuilds the row's struct, required, even
        // with no field to add; a null value keeps the `after` field's
        // optional schema.
        let schema = Arc::clone(&table.row_schemas.1);
        let key_schema = Arc::clone(&table.key_schema);
        let null_schema = Arc::clone(&table.row_schemas.0);
        let mut pending = Vec::with_capacity(2);
        let mut headers = Vec::new();
        if event.changes_key() {
            let old = key_text(event, event.before.as_ref(), table)?.unwrap_or_default();
            let new = key_text(event, event.after.as_ref(), table)?.unwrap_or_default();
            let key = self.key_bytes(event, event.before.as_ref(), table)?;
            let new_header = vec![("__debezium.newkey".to_string(), new.into_bytes())];
            match old_key {
                OldKey::Nothing => {}
                OldKey::Tombstone => {
                    pending.push(Pending { kind: RecordKind::Tombstone, key, value: None, headers: new_header })
                }
                OldKey::Row => {
                    let value = Some(self.row_text(event.before.as_ref(), table)?);
                    pending.push(Pending { kind: RecordKind::Change, key, value, headers: new_header });
                }
            }
            headers.push(("__debezium.oldkey".to_string(), old.into_bytes()));
        }
        let key = self.key_bytes(event, event.after.as_ref(), table)?;
        let value = Some(self.row_text(event.after.as_ref(), table)?);
        pending.push(Pending { kind: RecordKind::Change, key, value, headers });
        for record in pending {
            let record = match record.value {
                Some(text) => {
                    let value = self.json_bytes(&schema, text)?;
                    self.record_of(record.kind, (&key_schema, record.key), (&schema, Some(value)), record.headers)
                }
                // The old key's null value is under the row as extracted.
                None => self.null_value(record.key, (&key_schema, &null_schema), record.headers)?,
            };
            out.push(record);
        }
        Ok(())
    }

    /// A tombstone-shaped event: its key and no value. Debezium's
    /// transform leaves the row's schema on the record with the value
    /// null, which Kafka's JSON converter writes as a null payload (with
    /// the schema, for `schemas: true`) and its Avro converter as a true
    /// tombstone; this writes what each would.
    pub(super) fn flat_tombstone(&mut self, event: &Event, table: usize, out: &mut Vec<Record>) -> Result<(), String> {
        let table = &self.tables[&table];
        let key = self.key_bytes(event, event.before.as_ref().or(event.key.as_ref()), table)?;
        let (key_schema, schema) = (Arc::clone(&table.key_schema), Arc::clone(&table.row_schemas.0));
        out.push(self.null_value(key, (&key_schema, &schema), Vec::new())?);
        Ok(())
    }

    /// A record of `key` and a null value under the row's `schema`.
    fn null_value(
        &mut self,
        key: Option<Vec<u8>>,
        (key_schema, schema): (&Arc<str>, &Arc<str>),
        headers: Vec<(String, Vec<u8>)>,
    ) -> Result<Record, String> {
        if self.settings.avro {
            return Ok(self.record_of(RecordKind::Tombstone, (key_schema, key), (schema, None), headers));
        }
        let value = self.json_bytes(schema, "null".into())?;
        Ok(self.record_of(RecordKind::Change, (key_schema, key), (schema, Some(value)), headers))
    }

    /// An outbox message: one column as the value and one as the key,
    /// each with its column's schema, and columns as headers in the text
    /// Kafka Connect's default header converter writes.
    pub(super) fn flat_message(
        &mut self,
        event: &Event,
        table: usize,
        message: &MessageShape,
        out: &mut Vec<Record>,
    ) -> Result<(), String> {
        let table = &self.tables[&table];
        let row = event.after.as_ref().ok_or("an outbox event without its row")?;
        let key = match &message.key {
            Some(column) => Some(self.column_text(table, row.get(column), column)?),
            None => None,
        };
        let value = self.column_text(table, row.get(&message.value), &message.value)?;
        let headers = message
            .headers
            .iter()
            .filter_map(|(name, column)| match row.get(column) {
                None | Some(Value::Null | Value::Unchanged) => None,
                Some(value) => Some((name.to_string(), value.text().into_owned().into_bytes())),
            })
            .collect();
        let key_schema = key.as_ref().map_or_else(|| Arc::clone(&table.key_schema), |(schema, _)| Arc::clone(schema));
        let key = key.map(|(schema, text)| self.json_bytes(&schema, text)).transpose()?;
        let (value_schema, value) = value;
        let value = self.json_bytes(&value_schema, value)?;
        out.push(self.record_of(RecordKind::Change, (&key_schema, key), (&value_schema, Some(value)), headers));
        Ok(())
    }

    /// A row as the value struct's JSON text.
    fn row_text(&self, row: Option<&sluice_core::Row>, table: &Table) -> Result<String, String> {
        let mut json = JsonOut::with_capacity(256);
        self.row(&mut json, row, table)?;
        Ok(json.text)
    }

    /// One column's value on its own as JSON text, and the column's schema.
    fn column_text(&self, table: &Table, value: Option<&Value>, column: &str) -> Result<(Arc<str>, String), String> {
        let index = table
            ._schema
            .columns
            .iter()
            .position(|c| &*c.name == column)
            .ok_or_else(|| format!("the outbox column {column:?} is not in the table"))?;
        let mut json = JsonOut::with_capacity(128);
        let unavailable = &self.settings.unavailable_value;
        values::write(&mut json, value.unwrap_or(&Value::Null), &table.fields[index].conv, unavailable)
            .map_err(|e| format!("column {column:?}: {e}"))?;
        Ok((Arc::clone(&table.column_schemas[index]), json.text))
    }
}
