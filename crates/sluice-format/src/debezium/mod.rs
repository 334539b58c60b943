//! Debezium's change event, key and value, as Debezium 3.6 writes them
//! through Kafka's JsonConverter: with the Connect schema wrapper
//! (`schemas: true`) or the bare payload; or, for Avro, as the datums
//! Kafka Connect's Avro converter writes, straight from the event.

mod flat;
pub(crate) mod out;
mod settings;
mod source;
#[cfg(test)]
mod tests;
mod transaction;
mod types;
mod values;

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::{Event, Op, Row, Shape, TableSchema, Value};

pub use settings::{BinaryHandling, DebeziumSettings, DecimalHandling, Include, TimePrecision};

use crate::{FormatError, Record, RecordKind};
use out::{JsonOut, Out};
use types::{Field, Modes};

#[cfg(feature = "avro")]
type Avro = Arc<crate::AvroSchema>;

/// What one table version becomes: its fields and, for `schemas: true`,
/// its schemas written out once.
struct Table {
    /// Kept so the pointer that keys the cache cannot be reused.
    _schema: Arc<TableSchema>,
    fields: Vec<Field>,
    key_schema: Arc<str>,
    envelope_schema: Arc<str>,
    /// The row alone as a record's value (a transform's flat shape):
    /// `.0` optional, as the `after` field is (a null value's schema),
    /// `.1` required, as Debezium's transform rebuilds a row's.
    row_schemas: (Arc<str>, Arc<str>),
    /// Each column's schema on its own, as an outbox message's key or
    /// value.
    column_schemas: Vec<Arc<str>>,
    /// The Avro schemas of key and envelope, when writing Avro.
    #[cfg(feature = "avro")]
    avro: Option<(Avro, Avro)>,
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
    /// Avro schemas of the records written as JSON first (BEGIN and END,
    /// messages), by the address of their Connect schema, which the entry
    /// holds.
    #[cfg(feature = "avro")]
    avro: HashMap<usize, (Arc<str>, Avro)>,
}

impl Encoder {
    pub fn new(settings: DebeziumSettings) -> Self {
        let transaction_schemas = (Arc::from(transaction::KEY_SCHEMA), Arc::from(transaction::VALUE_SCHEMA));
        Self {
            settings,
            tables: HashMap::new(),
            transaction_schemas,
            message_schemas: None,
            #[cfg(feature = "avro")]
            avro: HashMap::new(),
        }
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
        let refuse =
            |why: String| FormatError(format!("event {} cannot be written as Debezium's: {why}", event.position));
        if written.event(event) && opens {
            let value = transaction::begin(event, &id);
            let record = self.transaction_record(&id, value).map_err(refuse)?;
            out.push(record);
        }
        self.encode_event(event, out, Some((&id, order)))?;
        if let Some((end_id, value)) = transaction::end(event, place, written) {
            let record = self.transaction_record(&end_id, value).map_err(refuse)?;
            out.push(record);
        }
        Ok(())
    }

    fn transaction_record(&mut self, id: &str, value: String) -> Result<Record, String> {
        let (key_schema, value_schema) = self.transaction_schemas.clone();
        let key = self.json_bytes(&key_schema, transaction::key(id))?;
        let value = self.json_bytes(&value_schema, value)?;
        Ok(self.record_of(RecordKind::Transaction, (&key_schema, Some(key)), (&value_schema, Some(value)), Vec::new()))
    }

    /// A payload written as JSON text, as the record carries it: wrapped
    /// for `schemas: true`, or an Avro datum when writing Avro.
    fn json_bytes(&mut self, schema: &Arc<str>, text: String) -> Result<Vec<u8>, String> {
        #[cfg(feature = "avro")]
        if self.settings.avro {
            let address = Arc::as_ptr(schema) as *const u8 as usize;
            let avro = match self.avro.entry(address) {
                std::collections::hash_map::Entry::Occupied(known) => known.get().1.clone(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    let avro = Arc::new(crate::AvroSchema::from_connect(schema).map_err(|e| e.to_string())?);
                    slot.insert((schema.clone(), avro.clone()));
                    avro
                }
            };
            let mut datum = Vec::with_capacity(text.len() / 2);
            avro.write(text.as_bytes(), &mut datum).map_err(|e| e.to_string())?;
            return Ok(datum);
        }
        Ok(self.wrap(schema, text))
    }

    /// A record of a key and a value, with their Connect schemas beside
    /// them where the encoding (Avro) wants them.
    fn record_of(
        &self,
        kind: RecordKind,
        (key_schema, key): (&Arc<str>, Option<Vec<u8>>),
        (value_schema, value): (&Arc<str>, Option<Vec<u8>>),
        headers: Vec<(String, Vec<u8>)>,
    ) -> Record {
        let apart = self.settings.avro;
        Record {
            kind,
            key_schema: (apart && key.is_some()).then(|| key_schema.clone()),
            value_schema: (apart && value.is_some()).then(|| value_schema.clone()),
            key,
            value,
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
            let table = self.table(event, schema)?;
            self.tables.insert(key, table);
        }
        match &event.shape {
            Shape::Envelope => {}
            Shape::Row(old_key) => return self.flat_row(event, key, *old_key, out).map_err(refuse),
            Shape::Tombstone => return self.flat_tombstone(event, key, out).map_err(refuse),
            Shape::Message(message) => return self.flat_message(event, key, message, out).map_err(refuse),
        }
        let table = &self.tables[&key];
        let old_key = match (event.op, &event.before) {
            (Op::Update, Some(before)) => key_text(event, Some(before), table).map_err(refuse)?,
            _ => None,
        };
        let tombstones = self.settings.tombstones;
        if let Some(old) = &old_key
            && let Some(new) = key_text(event, event.after.as_ref(), table).map_err(refuse)?
            && *old != new
        {
            // A new primary key is a new row to a keyed consumer: Debezium
            // writes a delete of the old key, its tombstone, and a create.
            let old_bytes = self.key_bytes(event, event.before.as_ref(), table).map_err(refuse)?;
            let new_bytes = self.key_bytes(event, event.after.as_ref(), table).map_err(refuse)?;
            let new_header = vec![("__debezium.newkey".to_string(), new.into_bytes())];
            let delete = self.change_bytes(event, table, "d", (event.before.as_ref(), None), tx).map_err(refuse)?;
            out.push(self.record(RecordKind::Change, table, old_bytes.clone(), Some(delete), new_header.clone()));
            if tombstones {
                out.push(self.record(RecordKind::Tombstone, table, old_bytes, None, new_header));
            }
            // The create is the key change's second record.
            let next =
                tx.map(|(id, order)| (id, transaction::Order { total: order.total + 1, table: order.table + 1 }));
            let create = self.change_bytes(event, table, "c", (None, event.after.as_ref()), next).map_err(refuse)?;
            let old_header = vec![("__debezium.oldkey".to_string(), old.clone().into_bytes())];
            out.push(self.record(RecordKind::Change, table, new_bytes, Some(create), old_header));
            return Ok(());
        }
        let key = match event.op {
            Op::Delete => self.key_bytes(event, event.before.as_ref(), table).map_err(refuse)?,
            Op::Truncate => None,
            _ => self.key_bytes(event, event.after.as_ref(), table).map_err(refuse)?,
        };
        let images = (event.before.as_ref(), event.after.as_ref());
        let payload = self.change_bytes(event, table, event.op.code(), images, tx).map_err(refuse)?;
        let tombstone = (event.op == Op::Delete && tombstones).then(|| key.clone());
        out.push(self.record(RecordKind::Change, table, key, Some(payload), Vec::new()));
        if let Some(key) = tombstone {
            out.push(self.record(RecordKind::Tombstone, table, key, None, Vec::new()));
        }
        Ok(())
    }

    fn record(
        &self,
        kind: RecordKind,
        table: &Table,
        key: Option<Vec<u8>>,
        payload: Option<Vec<u8>>,
        headers: Vec<(String, Vec<u8>)>,
    ) -> Record {
        self.record_of(kind, (&table.key_schema, key), (&table.envelope_schema, payload), headers)
    }

    /// The key of `image` as the record carries it: JSON (wrapped for
    /// `schemas: true`) or an Avro datum; `None` for a table without a
    /// primary key or an event without the image.
    fn key_bytes(&self, event: &Event, image: Option<&Row>, table: &Table) -> Result<Option<Vec<u8>>, String> {
        if table._schema.primary_key.is_empty() {
            return Ok(None);
        }
        let Some(image) = image.or(event.key.as_ref()) else { return Ok(None) };
        #[cfg(feature = "avro")]
        if let Some((key, _)) = &table.avro {
            let mut out = crate::avro::AvroOut::new(key, 32);
            write_key(&mut out, image, table)?;
            return Ok(Some(out.datum));
        }
        let mut out = JsonOut::with_capacity(64);
        write_key(&mut out, image, table)?;
        Ok(Some(self.wrap(&table.key_schema, out.text)))
    }

    /// The value of one change as the record carries it.
    fn change_bytes(
        &self,
        event: &Event,
        table: &Table,
        op: &str,
        images: (Option<&Row>, Option<&Row>),
        tx: Option<(&str, transaction::Order)>,
    ) -> Result<Vec<u8>, String> {
        #[cfg(feature = "avro")]
        if let Some((_, envelope)) = &table.avro {
            let mut out = crate::avro::AvroOut::new(envelope, 256);
            self.change(&mut out, event, table, op, images, tx)?;
            return Ok(out.datum);
        }
        let mut out = JsonOut::with_capacity(512);
        self.change(&mut out, event, table, op, images, tx)?;
        Ok(self.wrap(&table.envelope_schema, out.text))
    }

    /// The value payload of one change.
    fn change<O: Out>(
        &self,
        out: &mut O,
        event: &Event,
        table: &Table,
        op: &str,
        (before, after): (Option<&Row>, Option<&Row>),
        tx: Option<(&str, transaction::Order)>,
    ) -> Result<(), String> {
        out.begin_struct()?;
        out.key("before")?;
        self.row(out, before, table)?;
        out.key("after")?;
        self.row(out, after, table)?;
        out.key("source")?;
        source::write(out, event, self.prefix(event))?;
        out.key("transaction")?;
        match tx {
            Some((id, order)) => transaction::block(out, id, order)?,
            None => out.null()?,
        }
        out.key("op")?;
        out.str(op)?;
        let now_us = sluice_core::time::now_us();
        out.key("ts_ms")?;
        out.long(now_us.div_euclid(1000))?;
        out.key("ts_us")?;
        out.long(now_us)?;
        out.key("ts_ns")?;
        out.long(now_us.saturating_mul(1000))?;
        out.end_struct()
    }

    /// Takes the payload by value: without schemas it is the bytes as they are.
    fn wrap(&self, schema: &str, payload: String) -> Vec<u8> {
        if !self.settings.schemas || self.settings.avro {
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

    fn table(&self, event: &Event, schema: Arc<TableSchema>) -> Result<Table, FormatError> {
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
        let row_schema = |optional: bool| -> Arc<str> {
            format!(r#"{{"type":"struct","fields":{value_schema},"optional":{optional},"name":"{name}.Value"}}"#).into()
        };
        let row_schemas = (row_schema(true), row_schema(false));
        let column_schemas = schema
            .columns
            .iter()
            .zip(&fields)
            .map(|(column, field)| {
                let mut text = String::new();
                types::write_schema_open(&mut text, field, column.nullable);
                if let Some(default) = column.default.as_ref().and_then(|d| default_json(d, field, &self.settings)) {
                    text.push_str(",\"default\":");
                    text.push_str(&default);
                }
                text.push('}');
                Arc::from(text)
            })
            .collect();
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
        #[cfg(feature = "avro")]
        let avro = if self.settings.avro {
            let convert = |connect: &str| crate::AvroSchema::from_connect(connect).map(Arc::new);
            Some((convert(&key_schema)?, convert(&envelope_schema)?))
        } else {
            None
        };
        Ok(Table {
            _schema: schema,
            fields,
            key_schema: key_schema.into(),
            envelope_schema: envelope_schema.into(),
            row_schemas,
            column_schemas,
            #[cfg(feature = "avro")]
            avro,
        })
    }

    fn row<O: Out>(&self, out: &mut O, row: Option<&Row>, table: &Table) -> Result<(), String> {
        let Some(row) = row else { return out.null() };
        let schema = &table._schema;
        out.begin_struct()?;
        for (column, field) in schema.columns.iter().zip(&table.fields) {
            out.key(&column.name)?;
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
        out.end_struct()
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
        let mut payload = JsonOut::with_capacity(256);
        payload.begin_struct()?;
        payload.key("op")?;
        payload.str("m")?;
        payload.key("ts_ms")?;
        payload.long(sluice_core::time::now_us().div_euclid(1000))?;
        payload.key("source")?;
        source::write(&mut payload, event, self.prefix(event))?;
        payload.key("transaction")?;
        match tx {
            Some((id, order)) => transaction::block(&mut payload, id, order)?,
            None => payload.null()?,
        }
        payload.key("message")?;
        payload.begin_struct()?;
        payload.key("prefix")?;
        payload.str(&prefix)?;
        payload.key("content")?;
        payload.bytes(&content)?;
        payload.end_struct()?;
        payload.end_struct()?;
        let mut key = JsonOut::with_capacity(32);
        key.begin_struct()?;
        key.key("prefix")?;
        key.str(&prefix)?;
        key.end_struct()?;
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
        let key = self.json_bytes(&schemas.0, key.text)?;
        let value = self.json_bytes(&schemas.1, payload.text)?;
        out.push(self.record_of(RecordKind::Change, (&schemas.0, Some(key)), (&schemas.1, Some(value)), Vec::new()));
        Ok(())
    }
}

/// The key struct of `image`, as JSON text: to compare an update's old and
/// new keys, and for the key-change headers. `None` for a table without a
/// primary key or an event without the image.
fn key_text(event: &Event, image: Option<&Row>, table: &Table) -> Result<Option<String>, String> {
    if table._schema.primary_key.is_empty() {
        return Ok(None);
    }
    let Some(image) = image.or(event.key.as_ref()) else { return Ok(None) };
    let mut out = JsonOut::with_capacity(64);
    write_key(&mut out, image, table)?;
    Ok(Some(out.text))
}

/// The key struct: the primary key columns of `image`.
fn write_key<O: Out>(out: &mut O, image: &Row, table: &Table) -> Result<(), String> {
    let schema = &table._schema;
    out.begin_struct()?;
    for index in &schema.primary_key {
        let column = &schema.columns[*index];
        out.key(&column.name)?;
        let value = image.get(&column.name).unwrap_or(&Value::Null);
        values::write(out, value, &table.fields[*index].conv, "")?;
    }
    out.end_struct()
}

/// A column default in the schema, where Debezium would show one.
fn default_json(value: &Value, field: &Field, settings: &DebeziumSettings) -> Option<String> {
    let mut out = JsonOut::default();
    values::write(&mut out, value, &field.conv, &settings.unavailable_value).ok()?;
    Some(out.text)
}
