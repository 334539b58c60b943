//! Debezium's change event, key and value, as Debezium 3.6 writes them
//! through Kafka's JsonConverter: with the Connect schema wrapper
//! (`schemas: true`) or the bare payload.

mod settings;
mod source;
#[cfg(test)]
mod tests;
mod transaction;
mod types;
mod values;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use sluice_core::{Event, Op, Row, TableSchema, Value};

pub use settings::{BinaryHandling, DebeziumSettings, DecimalHandling, Include, TimePrecision};

use crate::json;
use crate::{FormatError, Record, RecordKind};
use types::{Field, Modes};

/// What one table version becomes: its fields and, for `schemas: true`,
/// its schemas written out once.
struct Table {
    /// Kept so the pointer that keys the cache cannot be reused.
    _schema: Arc<TableSchema>,
    fields: Vec<Field>,
    key_schema: Arc<str>,
    envelope_schema: Arc<str>,
}

const MESSAGE_KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":true,"field":"prefix"}],"optional":false,"name":"io.debezium.connector.postgresql.MessageKey","version":1}"#;

pub struct Encoder {
    settings: DebeziumSettings,
    tables: HashMap<usize, Table>,
    /// The key and value schemas of BEGIN and END records.
    transaction_schemas: (Arc<str>, Arc<str>),
    /// The key and value schemas of logical decoding messages, made once:
    /// an encoding that caches per schema (Avro) must see the same ones.
    message_schemas: Option<(Arc<str>, Arc<str>)>,
}

impl Encoder {
    pub fn new(settings: DebeziumSettings) -> Self {
        let transaction_schemas = (Arc::from(transaction::KEY_SCHEMA), Arc::from(transaction::VALUE_SCHEMA));
        Self { settings, tables: HashMap::new(), transaction_schemas, message_schemas: None }
    }

    /// The `topic.prefix` of schema names: the setting, else the source id.
    fn prefix<'a>(&'a self, event: &'a Event) -> &'a str {
        self.settings.topic_prefix.as_deref().unwrap_or(&event.source_id)
    }

    /// The topic of BEGIN and END records: Debezium's `<prefix>.transaction`.
    pub fn transaction_topic(&self, event: &Event) -> String {
        format!("{}.transaction", self.prefix(event))
    }

    /// The topic Debezium gives `record` of `event`: `<prefix>.<table>`
    /// for a change, `<prefix>.message` for a logical decoding message,
    /// `<prefix>.transaction` for a BEGIN or END.
    pub fn topic(&self, event: &Event, record: &Record) -> String {
        match (record.kind, event.op) {
            (RecordKind::Transaction, _) => self.transaction_topic(event),
            (_, Op::Message) => format!("{}.message", self.prefix(event)),
            _ => format!("{}.{}", self.prefix(event), source::collection(event)),
        }
    }

    pub fn encode(&mut self, event: &Event, out: &mut Vec<Record>) -> Result<(), FormatError> {
        let place = if self.settings.transaction_metadata { transaction::place(event) } else { None };
        let Some(place) = place else { return self.encode_event(event, out, None) };
        let written = transaction::Written {
            truncates: self.settings.truncate == Include::Include,
            messages: self.settings.messages == Include::Include,
        };
        let id = transaction::id(event, None);
        let (order, opens) = written.order(place);
        if written.event(event) && opens {
            let value = transaction::begin(event, &id);
            out.push(self.transaction_record(&id, value));
        }
        self.encode_event(event, out, Some((&id, order)))?;
        if let Some((end_id, value)) = transaction::end(event, place, written) {
            out.push(self.transaction_record(&end_id, value));
        }
        Ok(())
    }

    fn transaction_record(&self, id: &str, value: String) -> Record {
        let (key_schema, value_schema) = &self.transaction_schemas;
        self.record_of(
            RecordKind::Transaction,
            (key_schema, Some(transaction::key(id))),
            (value_schema, Some(value)),
            Vec::new(),
        )
    }

    /// A record of a key and a value payload under their Connect schemas:
    /// wrapped with the schema for `schemas: true`, or the payload alone
    /// with the schemas beside it where the encoding (Avro) wants them.
    fn record_of(
        &self,
        kind: RecordKind,
        (key_schema, key): (&Arc<str>, Option<String>),
        (value_schema, value): (&Arc<str>, Option<String>),
        headers: Vec<(String, Vec<u8>)>,
    ) -> Record {
        let apart = self.settings.schemas_apart;
        Record {
            kind,
            key_schema: (apart && key.is_some()).then(|| key_schema.clone()),
            value_schema: (apart && value.is_some()).then(|| value_schema.clone()),
            key: key.map(|k| self.wrap(key_schema, k)),
            value: value.map(|v| self.wrap(value_schema, v)),
            headers,
        }
    }

    /// The records of one event; `tx` is its transaction id and order
    /// when transaction metadata is on.
    fn encode_event(
        &mut self,
        event: &Event,
        out: &mut Vec<Record>,
        tx: Option<(&str, transaction::Order)>,
    ) -> Result<(), FormatError> {
        let refuse =
            |why: String| FormatError(format!("event {} cannot be written as Debezium's: {why}", event.position));
        match event.op {
            Op::Schema => return Ok(()),
            Op::Truncate if self.settings.truncate == Include::Skip => return Ok(()),
            Op::Message if self.settings.messages == Include::Skip => return Ok(()),
            Op::Message => return self.message(event, out, tx).map_err(refuse),
            _ => {}
        }
        let schema =
            event.schema.clone().ok_or_else(|| refuse("the source gave no column types for its table".into()))?;
        let key = Arc::as_ptr(&schema) as usize;
        if !self.tables.contains_key(&key) {
            let table = self.table(event, schema);
            self.tables.insert(key, table);
        }
        let table = &self.tables[&key];
        let new_key = key_payload(event, event.after.as_ref(), table).map_err(refuse)?;
        let old_key = match (event.op, &event.before) {
            (Op::Update, Some(before)) => key_payload(event, Some(before), table).map_err(refuse)?,
            _ => None,
        };
        let tombstones = self.settings.tombstones;
        if let (Some(old), Some(new)) = (&old_key, &new_key)
            && old != new
        {
            // A new primary key is a new row to a keyed consumer: Debezium
            // writes a delete of the old key, its tombstone, and a create.
            let new_header = vec![("__debezium.newkey".to_string(), new.clone().into_bytes())];
            let delete = self.change(event, table, "d", (event.before.as_ref(), None), tx).map_err(refuse)?;
            out.push(self.record(RecordKind::Change, table, Some(old), Some(delete), new_header.clone()));
            if tombstones {
                out.push(self.record(RecordKind::Tombstone, table, Some(old), None, new_header));
            }
            // The create is the key change's second record.
            let next =
                tx.map(|(id, order)| (id, transaction::Order { total: order.total + 1, table: order.table + 1 }));
            let create = self.change(event, table, "c", (None, event.after.as_ref()), next).map_err(refuse)?;
            let old_header = vec![("__debezium.oldkey".to_string(), old.clone().into_bytes())];
            out.push(self.record(RecordKind::Change, table, Some(new), Some(create), old_header));
            return Ok(());
        }
        let key = match event.op {
            Op::Delete => key_payload(event, event.before.as_ref(), table).map_err(refuse)?,
            Op::Truncate => None,
            _ => new_key,
        };
        let images = (event.before.as_ref(), event.after.as_ref());
        let payload = self.change(event, table, event.op.code(), images, tx).map_err(refuse)?;
        out.push(self.record(RecordKind::Change, table, key.as_ref(), Some(payload), Vec::new()));
        if event.op == Op::Delete && tombstones {
            out.push(self.record(RecordKind::Tombstone, table, key.as_ref(), None, Vec::new()));
        }
        Ok(())
    }

    fn record(
        &self,
        kind: RecordKind,
        table: &Table,
        key: Option<&String>,
        payload: Option<String>,
        headers: Vec<(String, Vec<u8>)>,
    ) -> Record {
        self.record_of(kind, (&table.key_schema, key.cloned()), (&table.envelope_schema, payload), headers)
    }

    /// The value payload of one change.
    fn change(
        &self,
        event: &Event,
        table: &Table,
        op: &str,
        (before, after): (Option<&Row>, Option<&Row>),
        tx: Option<(&str, transaction::Order)>,
    ) -> Result<String, String> {
        let mut payload = String::with_capacity(256);
        payload.push_str("{\"before\":");
        self.row(&mut payload, before, table)?;
        payload.push_str(",\"after\":");
        self.row(&mut payload, after, table)?;
        payload.push_str(",\"source\":");
        source::write(&mut payload, event, self.prefix(event));
        payload.push_str(",\"transaction\":");
        write_transaction(&mut payload, tx);
        let now_us = sluice_core::time::now_us();
        let _ = write!(
            payload,
            ",\"op\":\"{op}\",\"ts_ms\":{},\"ts_us\":{},\"ts_ns\":{}}}",
            now_us.div_euclid(1000),
            now_us,
            now_us.saturating_mul(1000)
        );
        Ok(payload)
    }

    /// Takes the payload by value: without schemas it is the bytes as they are.
    fn wrap(&self, schema: &str, payload: String) -> Vec<u8> {
        if !self.settings.schemas || self.settings.schemas_apart {
            return payload.into_bytes();
        }
        let mut out = String::with_capacity(schema.len() + payload.len() + 24);
        out.push_str("{\"schema\":");
        out.push_str(schema);
        out.push_str(",\"payload\":");
        out.push_str(&payload);
        out.push('}');
        out.into_bytes()
    }

    fn table(&self, event: &Event, schema: Arc<TableSchema>) -> Table {
        let time = self.settings.time_precision.unwrap_or(match source::Connector::of(event) {
            source::Connector::Postgres => TimePrecision::Adaptive,
            _ => TimePrecision::AdaptiveTimeMicroseconds,
        });
        let modes = Modes { decimal: self.settings.decimal_handling, time, binary: self.settings.binary_handling };
        let fields: Vec<Field> = schema.columns.iter().map(|c| types::field(&c.ty, &modes)).collect();
        let name = format!("{}.{}", self.prefix(event), source::collection(event));
        let mut value_schema = String::new();
        for (i, (column, field)) in schema.columns.iter().zip(&fields).enumerate() {
            value_schema.push_str(if i == 0 { "[" } else { "," });
            let default = column.default.as_ref().and_then(|d| default_json(d, field, &self.settings));
            types::write_column_schema(&mut value_schema, column, field, default.as_deref());
        }
        if schema.columns.is_empty() {
            value_schema.push('[');
        }
        value_schema.push(']');
        let mut key_fields = String::new();
        for (i, index) in schema.primary_key.iter().enumerate() {
            key_fields.push_str(if i == 0 { "[" } else { "," });
            let column = &schema.columns[*index];
            let default = column.default.as_ref().and_then(|d| default_json(d, &fields[*index], &self.settings));
            types::write_column_schema(&mut key_fields, column, &fields[*index], default.as_deref());
        }
        key_fields.push(']');
        let key_schema = format!(r#"{{"type":"struct","fields":{key_fields},"optional":false,"name":"{name}.Key"}}"#);
        let row = |field: &str| {
            format!(
                r#"{{"type":"struct","fields":{value_schema},"optional":true,"name":"{name}.Value","field":"{field}"}}"#
            )
        };
        let envelope_schema = format!(
            r#"{{"type":"struct","fields":[{before},{after},{source},{transaction},{{"type":"string","optional":false,"field":"op"}},{{"type":"int64","optional":true,"field":"ts_ms"}},{{"type":"int64","optional":true,"field":"ts_us"}},{{"type":"int64","optional":true,"field":"ts_ns"}}],"optional":false,"name":"{name}.Envelope","version":2}}"#,
            before = row("before"),
            after = row("after"),
            source = source::schema(event),
            transaction = source::TRANSACTION_SCHEMA,
        );
        Table { _schema: schema, fields, key_schema: key_schema.into(), envelope_schema: envelope_schema.into() }
    }

    fn row(&self, out: &mut String, row: Option<&Row>, table: &Table) -> Result<(), String> {
        let Some(row) = row else {
            out.push_str("null");
            return Ok(());
        };
        let schema = &table._schema;
        out.push('{');
        for (i, (column, field)) in schema.columns.iter().zip(&table.fields).enumerate() {
            if i > 0 {
                out.push(',');
            }
            json::push_str(out, &column.name);
            out.push(':');
            // A key-only old image (a delete under the default replica
            // identity) lacks the other columns. Debezium fills each with
            // its default, or a NOT NULL column with its type's zero.
            let missing;
            let value = match row.get(&column.name) {
                Some(value) => value,
                None => {
                    missing = match &column.default {
                        Some(default) => default.clone(),
                        None if !column.nullable => types::zero(&column.ty),
                        None => Value::Null,
                    };
                    &missing
                }
            };
            values::write(out, value, &field.conv, &self.settings.unavailable_value)
                .map_err(|e| format!("column {:?}: {e}", column.name))?;
        }
        out.push('}');
        Ok(())
    }

    /// A logical decoding message, on Debezium's `<prefix>.message` shape.
    fn message(
        &mut self,
        event: &Event,
        out: &mut Vec<Record>,
        tx: Option<(&str, transaction::Order)>,
    ) -> Result<(), String> {
        let row = event.after.as_ref().ok_or("a message without content")?;
        let prefix = row.get("prefix").map(|v| v.text().into_owned()).unwrap_or_default();
        let content = match row.get("content") {
            Some(Value::Bytes(b)) => b.clone(),
            Some(other) => other.text().into_owned().into_bytes(),
            None => Vec::new(),
        };
        let mut payload = String::from("{\"op\":\"m\",");
        let now_us = sluice_core::time::now_us();
        let _ = write!(payload, "\"ts_ms\":{},\"source\":", now_us.div_euclid(1000));
        source::write(&mut payload, event, self.prefix(event));
        payload.push_str(",\"transaction\":");
        write_transaction(&mut payload, tx);
        payload.push_str(",\"message\":{\"prefix\":");
        json::push_str(&mut payload, &prefix);
        payload.push_str(",\"content\":");
        values::write(&mut payload, &Value::Bytes(content), &types::Conv::Binary(BinaryHandling::Bytes), "")?;
        payload.push_str("}}");
        let mut key = String::from("{\"prefix\":");
        json::push_str(&mut key, &prefix);
        key.push('}');
        // Messages come from PostgreSQL only, so their source schema is one.
        let schemas = self
            .message_schemas
            .get_or_insert_with(|| {
                let value_schema = format!(
                    r#"{{"type":"struct","fields":[{{"type":"string","optional":false,"field":"op"}},{{"type":"int64","optional":true,"field":"ts_ms"}},{},{},{{"type":"struct","fields":[{{"type":"string","optional":true,"field":"prefix"}},{{"type":"bytes","optional":true,"field":"content"}}],"optional":false,"name":"io.debezium.connector.postgresql.Message","version":1,"field":"message"}}],"optional":false,"name":"io.debezium.connector.postgresql.MessageValue","version":1}}"#,
                    source::schema(event),
                    source::TRANSACTION_SCHEMA
                );
                (MESSAGE_KEY_SCHEMA.into(), value_schema.into())
            })
            .clone();
        out.push(self.record_of(RecordKind::Change, (&schemas.0, Some(key)), (&schemas.1, Some(payload)), Vec::new()));
        Ok(())
    }
}

fn write_transaction(out: &mut String, tx: Option<(&str, transaction::Order)>) {
    match tx {
        Some((id, order)) => transaction::block(out, id, order),
        None => out.push_str("null"),
    }
}

/// The key struct of `image`: its primary key columns; `None` for a
/// table without a primary key or an event without the image.
fn key_payload(event: &Event, image: Option<&Row>, table: &Table) -> Result<Option<String>, String> {
    let schema = &table._schema;
    if schema.primary_key.is_empty() {
        return Ok(None);
    }
    let Some(image) = image.or(event.key.as_ref()) else { return Ok(None) };
    let mut out = String::from("{");
    for (i, index) in schema.primary_key.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let column = &schema.columns[*index];
        json::push_str(&mut out, &column.name);
        out.push(':');
        let value = image.get(&column.name).unwrap_or(&Value::Null);
        values::write(&mut out, value, &table.fields[*index].conv, "")?;
    }
    out.push('}');
    Ok(Some(out))
}

/// A column default in the schema, where Debezium would show one.
fn default_json(value: &Value, field: &Field, settings: &DebeziumSettings) -> Option<String> {
    let mut out = String::new();
    values::write(&mut out, value, &field.conv, &settings.unavailable_value).ok()?;
    Some(out)
}
