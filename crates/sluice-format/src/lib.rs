//! The format layer: how a sink turns events into the bytes it moves.
//!
//! Every sink that writes bytes takes a [`FormatConfig`] and encodes each
//! event through an [`Encoder`] into zero or more [`Record`]s: a value,
//! perhaps a key, and headers. The sink only decides where a record goes.
//! The native envelope is the default and stays byte for byte what Sluice
//! always wrote.

#[cfg(feature = "avro")]
mod avro;
mod cloudevents;
mod config;
pub mod debezium;
#[cfg(test)]
mod native_tests;
mod registry;

use std::sync::Arc;

use sluice_core::event::Marks;
use sluice_core::{Event, EventId, Shape};

#[cfg(feature = "avro")]
pub use avro::{AvroCodec, AvroContainer, AvroSchema};
pub use cloudevents::{CloudEventsMode, CloudEventsSettings};
pub use config::{AvroSupport, Carrier, Encoding, Envelope, FormatConfig, Headers, SubjectStrategy};
pub use debezium::DebeziumSettings;
pub use registry::RegistryConfig;

/// What one event becomes on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub kind: RecordKind,
    /// The message key, where the format defines one. `None` leaves the
    /// key to the sink's own rule (the native envelope's key).
    pub key: Option<Vec<u8>>,
    /// `None` for a tombstone: a key with no value, which tells a
    /// compacted topic to forget the key.
    pub value: Option<Vec<u8>>,
    /// Headers the format asks for, named and encoded for the sink's
    /// binding (CloudEvents binary mode, Debezium's key-change headers).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The Connect schema of the key and of the value, where the format
    /// gives them apart from the payloads for an encoding that needs them
    /// (Avro); `None` otherwise.
    pub key_schema: Option<Arc<str>>,
    pub value_schema: Option<Arc<str>>,
}

impl Record {
    /// A change record with a value and no key of its own.
    pub fn value(value: Vec<u8>, headers: Vec<(String, Vec<u8>)>) -> Self {
        Record {
            kind: RecordKind::Change,
            key: None,
            value: Some(value),
            headers,
            key_schema: None,
            value_schema: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// The event itself.
    Change,
    /// The tombstone that follows a delete (Debezium).
    Tombstone,
    /// A transaction's BEGIN or END (Debezium's transaction metadata),
    /// which Kafka carries on a topic of its own.
    Transaction,
}

/// Why an event cannot be written in a format. The event goes to the dead
/// letter queue with this reason; nothing is substituted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// Encodes events in one sink's format.
pub struct Encoder {
    kind: Kind,
    /// The format and carrier in full: two encoders with the same identity
    /// write the same records, so sinks may share them.
    identity: String,
    marks: Marks,
}

/// The records of a run of events in one vector, where each event's are
/// (or why it has none), and the identity of the encoder that made them.
#[derive(Debug)]
pub struct Encoded {
    pub identity: String,
    records: Vec<Record>,
    events: Vec<Result<std::ops::Range<usize>, FormatError>>,
    /// Each event's id, where its format hashed it (not Debezium's), so
    /// a sink that also writes it in a header need not hash it again.
    ids: Vec<Option<EventId>>,
}

impl Encoded {
    /// The records of the event at `index`; `None` past the end.
    pub fn event(&self, index: usize) -> Option<Result<&[Record], &FormatError>> {
        Some(match self.events.get(index)? {
            Ok(range) => Ok(&self.records[range.clone()]),
            Err(e) => Err(e),
        })
    }

    /// The id of the event at `index`, where the format hashed it.
    pub fn id(&self, index: usize) -> Option<EventId> {
        self.ids.get(index).copied().flatten()
    }
}

enum Kind {
    Native,
    Debezium(debezium::Encoder),
    CloudEvents(cloudevents::Encoder),
}

impl Encoder {
    /// The encoder of `config` for a sink that carries what `carrier` says.
    pub fn new(config: &FormatConfig, carrier: Carrier) -> Self {
        let kind = match config.envelope {
            Envelope::Native => Kind::Native,
            Envelope::Debezium => Kind::Debezium(debezium::Encoder::new(config.debezium(carrier.keys))),
            Envelope::Cloudevents => {
                Kind::CloudEvents(cloudevents::Encoder::new(config.cloudevents(), carrier.headers))
            }
        };
        // The carrier's name changes nothing the encoder writes.
        let identity = format!("{config:?} keys={} headers={:?}", carrier.keys, carrier.headers);
        Self { kind, identity, marks: Marks::default() }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The records of each of `events`.
    pub fn encode_all(&mut self, events: &[Event]) -> Encoded {
        let mut records = Vec::with_capacity(events.len());
        let mut ids = Vec::with_capacity(events.len());
        let events = events
            .iter()
            .map(|event| {
                let start = records.len();
                let (id, encoded) = self.encode_one(event, &mut records);
                ids.push(id);
                match encoded {
                    Ok(()) => Ok(start..records.len()),
                    Err(e) => {
                        records.truncate(start);
                        Err(e)
                    }
                }
            })
            .collect();
        Encoded { identity: self.identity.clone(), records, events, ids }
    }

    /// True for the native envelope, whose sinks keep their own keys.
    pub fn is_native(&self) -> bool {
        matches!(self.kind, Kind::Native)
    }

    /// Where a record of kind [`RecordKind::Transaction`] goes on a sink
    /// with topics: Debezium's `<prefix>.transaction`.
    pub fn transaction_topic(&self, event: &Event) -> Option<String> {
        match &self.kind {
            Kind::Debezium(encoder) => Some(encoder.transaction_topic(event)),
            _ => None,
        }
    }

    /// The topic Debezium would write `record` to, for a sink without
    /// topics of its own that still names registry subjects by topic.
    pub fn topic(&self, event: &Event, record: &Record) -> Option<String> {
        match &self.kind {
            Kind::Debezium(encoder) => Some(encoder.topic(event, record)),
            _ => None,
        }
    }

    /// Whether the format sets every record's key (Debezium: a keyless
    /// table's records have none), so a sink must not add its own.
    pub fn defines_keys(&self) -> bool {
        matches!(self.kind, Kind::Debezium(_))
    }

    /// Appends the records of `event` to `out`; an event a format leaves
    /// out (a truncate Debezium is told to skip) adds none.
    pub fn encode(&mut self, event: &Event, out: &mut Vec<Record>) -> Result<(), FormatError> {
        self.encode_one(event, out).1
    }

    /// [`Encoder::encode`], and the event's id where the format hashed it.
    fn encode_one(&mut self, event: &Event, out: &mut Vec<Record>) -> (Option<EventId>, Result<(), FormatError>) {
        // Only the envelopes that carry the id pay for its hash.
        if let Kind::Debezium(encoder) = &mut self.kind {
            return (None, encoder.encode(event, out));
        }
        let (id, position) = self.marks.of(event);
        let encoded = self.kind.encode(event, id, Some(position), out);
        (Some(self.marks.id()), encoded)
    }

    /// As [`Encoder::encode`], with the event's id already computed by a
    /// sink that also puts it in a header, so it is hashed once.
    pub fn encode_with_id(&mut self, event: &Event, id: &str, out: &mut Vec<Record>) -> Result<(), FormatError> {
        self.kind.encode(event, id, None, out)
    }
}

impl Kind {
    /// `position` is the event's position as text, if printed already.
    fn encode(
        &mut self,
        event: &Event,
        id: &str,
        position: Option<&str>,
        out: &mut Vec<Record>,
    ) -> Result<(), FormatError> {
        match self {
            Kind::Native => {
                // Room for a typical event, so the buffer seldom grows.
                let mut value = Vec::with_capacity(512);
                native_json(event, (id, position), &mut value)?;
                match &event.shape {
                    Shape::Tombstone => out.push(Record {
                        kind: RecordKind::Tombstone,
                        value: None,
                        ..Record::value(value, Vec::new())
                    }),
                    Shape::Message(message) => out.push(native_message(event, message, value)),
                    _ => out.push(Record::value(value, Vec::new())),
                }
                Ok(())
            }
            Kind::Debezium(encoder) => encoder.encode(event, out),
            Kind::CloudEvents(encoder) => encoder.encode(event, (id, position), out),
        }
    }
}

/// The native envelope's JSON of `event` (its record's value) appended
/// to `out`; on an error `out` is as it was.
/// `position` is the event's position as text, if printed already.
fn native_json(event: &Event, (id, position): (&str, Option<&str>), out: &mut Vec<u8>) -> Result<(), FormatError> {
    let start = out.len();
    sluice_core::Envelope { event, id: id.into(), position }.write_json(out).map_err(|e| {
        out.truncate(start);
        FormatError(format!("cannot encode event {}: {e}", event.position))
    })
}

/// For a sink that writes values alone (a file's lines): the value of
/// `event`'s native record appended to `out`, the bytes
/// [`Encoder::encode`] puts in it, without building a record. `Ok(false)`,
/// with nothing appended, for a tombstone, which has no value.
/// `marks` is kept from one event to the next.
pub fn write_native_value(event: &Event, marks: &mut Marks, out: &mut Vec<u8>) -> Result<bool, FormatError> {
    if matches!(event.shape, Shape::Tombstone) {
        return Ok(false);
    }
    let (id, position) = marks.of(event);
    native_json(event, (id, Some(position)), out)?;
    Ok(true)
}

/// An outbox message in the native format: the value column's JSON (the
/// envelope serializes a message-shaped event as just that), keyed by the
/// key column's text, with the header columns' text.
fn native_message(event: &Event, message: &sluice_core::MessageShape, value: Vec<u8>) -> Record {
    let text = |column: &str| match event.after.as_ref().and_then(|row| row.get(column)) {
        None | Some(sluice_core::Value::Null | sluice_core::Value::Unchanged) => None,
        Some(value) => Some(value.text().into_owned().into_bytes()),
    };
    let headers = message.headers.iter().filter_map(|(name, column)| Some((name.to_string(), text(column)?))).collect();
    Record { key: message.key.as_deref().and_then(text), ..Record::value(value, headers) }
}
