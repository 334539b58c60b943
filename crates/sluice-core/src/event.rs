//! The change event every source emits and every sink receives.

use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use sha1::Digest as _;
use uuid::Uuid;

use crate::position::Position;
use crate::schema::{Origin, TableSchema};
use crate::time::UTC_MICROS_LEN;
use crate::value::Row;

mod marks;

pub use marks::Marks;

/// What happened to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Update,
    Delete,
    /// A row read by a snapshot rather than from the log.
    Read,
    Truncate,
    /// A message the database wrote into its log for consumers (PostgreSQL
    /// `pg_logical_emit_message`), e.g. for the outbox pattern.
    Message,
    /// A schema change (DDL) the source saw in its log.
    Schema,
}

impl Op {
    /// The one-letter code used on the wire: `c`, `u`, `d`, `r`, `t`, `m`, `s`.
    pub fn code(self) -> &'static str {
        match self {
            Op::Insert => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
            Op::Message => "m",
            Op::Schema => "s",
        }
    }
}

/// A deterministic event id: UUIDv5 of the source id and the position.
///
/// A replayed event gets the same id as the original, which is what lets
/// consumers of at-least-once sinks drop duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub Uuid);

/// The namespace of Sluice event ids (a fixed random UUID; never change it,
/// or every id changes).
const EVENT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6c1f_3a52_9d0e_4b8a_a1c7_52e9_0f3d_7b64);

impl EventId {
    /// UUIDv5 of `<source id>/<position>`, hashed as it is printed, with
    /// no text in between.
    pub fn new(source_id: &str, position: &Position) -> Self {
        Self::hashed(source_id, |hasher| position.write_text(&mut |piece| hasher.update(piece.as_bytes())))
    }

    /// [`EventId::new`] from the position's text, already printed.
    pub fn of_text(source_id: &str, position: &str) -> Self {
        Self::hashed(source_id, |hasher| hasher.update(position.as_bytes()))
    }

    fn hashed(source_id: &str, position: impl FnOnce(&mut sha1::Sha1)) -> Self {
        let mut hasher = Self::hasher(source_id);
        position(&mut hasher);
        Self::of_hasher(hasher)
    }

    /// A hasher that has taken in what comes before the position.
    fn hasher(source_id: &str) -> sha1::Sha1 {
        let mut hasher = sha1::Sha1::new();
        hasher.update(EVENT_ID_NAMESPACE.as_bytes());
        hasher.update(source_id.as_bytes());
        hasher.update(b"/");
        hasher
    }

    /// The id from a [`EventId::hasher`] that has taken in the whole position.
    fn of_hasher(hasher: sha1::Sha1) -> Self {
        let digest = hasher.finalize();
        let mut bytes = [0; 16];
        bytes.copy_from_slice(&digest[..16]);
        EventId(uuid::Builder::from_sha1_bytes(bytes).into_uuid())
    }

    /// The id's text (as `Display` writes it) in `out`, without allocating.
    pub fn write<'a>(&self, out: &'a mut [u8; ID_LEN]) -> &'a str {
        self.0.hyphenated().encode_lower(out)
    }
}

/// The length of an event id's text.
pub const ID_LEN: usize = uuid::fmt::Hyphenated::LENGTH;

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// One row change, with its lineage.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub op: Op,
    pub source_id: Arc<str>,
    pub database: Arc<str>,
    /// Schema-qualified where the source has schemas (`public.orders`).
    pub table: Arc<str>,
    /// The primary key (or replica identity) columns of the row.
    pub key: Option<Row>,
    pub before: Option<Row>,
    pub after: Option<Row>,
    /// The version of the table schema the event was decoded with.
    pub schema_version: u32,
    pub position: Position,
    pub tx_id: Arc<str>,
    /// True on the last event of its source transaction.
    pub tx_end: bool,
    /// Commit time of the source transaction, microseconds since the Unix epoch, UTC.
    pub commit_time_us: i64,
    /// The table's declared columns, where the source knows them; shared
    /// by every event decoded with the same table version.
    pub schema: Option<Arc<TableSchema>>,
    /// Where in the source's log the event was read.
    pub origin: Origin,
    /// The name a `route` transform gave the event's destination, which
    /// sinks use where they would use the table's (`${table}` in topic,
    /// stream, subject and URL templates, the database sinks' target
    /// table, the object sinks' `table=` prefix). The event itself, its
    /// envelope's table included, stays the source's.
    pub route: Option<Arc<str>>,
    /// What a sink writes for the event: the format's envelope, or the
    /// flat shape a transform (`unwrap`, `outbox`) gave it.
    pub shape: Shape,
}

/// The form an event takes in a sink, which a transform may change from
/// the envelope to a flat one. Each format writes the flat shapes its own
/// way (Debezium's as `ExtractNewRecordState` and the outbox
/// `EventRouter` do); the event's op, images and lineage stay as they
/// were, so the database sinks and the dead letter queue still know what
/// happened.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Shape {
    /// The format's change envelope.
    #[default]
    Envelope,
    /// The row alone: `after` is the record's value, which a transform
    /// may have given columns the table lacks (`__op`, `__deleted`).
    Row(OldKey),
    /// The key with no value: a compacted topic forgets the key.
    Tombstone,
    /// One column of `after` as the value, another as the key, and
    /// others as headers: an outbox row's message.
    Message(Arc<MessageShape>),
}

/// What a row-shaped update that moved its row to another primary key
/// writes for the old key, before the new row: formats that key records
/// (Debezium) write the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OldKey {
    /// Nothing.
    #[default]
    Nothing,
    /// A tombstone.
    Tombstone,
    /// `before`, which the transform made the old key's flat row.
    Row,
}

/// The columns of `after` a message is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageShape {
    pub key: Option<Arc<str>>,
    pub value: Arc<str>,
    /// Header name and column.
    pub headers: Vec<(Arc<str>, Arc<str>)>,
}

impl Shape {
    pub fn is_envelope(&self) -> bool {
        matches!(self, Shape::Envelope)
    }
}

impl Event {
    /// The name the event's destination is made from: its route, or its
    /// table.
    pub fn destination(&self) -> &str {
        self.route.as_deref().unwrap_or(&self.table)
    }

    /// Computed on demand so sinks that never need it pay nothing.
    pub fn id(&self) -> EventId {
        EventId::new(&self.source_id, &self.position)
    }

    /// An update that moves its row to another primary key, which
    /// Debezium writes as a delete and a create.
    pub fn changes_key(&self) -> bool {
        let (Op::Update, Some(schema), Some(before), Some(after)) = (self.op, &self.schema, &self.before, &self.after)
        else {
            return false;
        };
        schema.primary_key.iter().filter_map(|&i| schema.columns.get(i)).any(|column| {
            matches!((before.get(&column.name), after.get(&column.name)), (Some(old), Some(new)) if old != new)
        })
    }

    /// A rough size of the change: its values and table name, what the
    /// byte counters of sources, sinks and lag count.
    pub fn approx_byte_size(&self) -> usize {
        self.sizes().0
    }

    /// [`Self::approx_byte_size`] and roughly what the event takes in
    /// memory (itself, its rows' value slots and what the values own), in
    /// one walk over the values. The second is several times the first for
    /// narrow rows; the batcher's byte limit counts it, so a large
    /// transaction moves to disk before it has filled that much of the heap.
    pub fn sizes(&self) -> (usize, usize) {
        let slots = std::mem::size_of::<crate::value::Value>();
        let mut approx = self.table.len() + 64;
        let mut heap = std::mem::size_of::<Event>();
        for row in [&self.key, &self.before, &self.after].into_iter().flatten() {
            let values = row.approx_byte_size();
            approx += values;
            heap += values + row.values.len() * slots;
        }
        (approx, heap)
    }
}

/// The JSON envelope sinks write, one object per event.
impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Envelope::new(self).serialize(serializer)
    }
}

/// An envelope field: its name, and its JSON key with the comma that
/// comes before every field but the first, written as one piece.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    key: &'static str,
}

macro_rules! field {
    ($name:literal) => {
        Field { name: $name, key: concat!(",\"", $name, "\":") }
    };
}

/// An event with its id computed once. A sink that puts the id in a
/// header or field as well as in the JSON body uses this, so the hash runs
/// once per event, not twice.
pub struct Envelope<'a> {
    pub event: &'a Event,
    pub id: std::borrow::Cow<'a, str>,
    /// The event's position as text, where the caller printed it already
    /// ([`Marks`]); else the envelope prints it.
    pub position: Option<&'a str>,
}

impl<'a> Envelope<'a> {
    pub fn new(event: &'a Event) -> Self {
        Self { event, id: event.id().to_string().into(), position: None }
    }
}

impl Envelope<'_> {
    /// The envelope's JSON appended to `out`: the bytes its `Serialize`
    /// gives to `serde_json`, with constant names and texts that need no
    /// escaping (the op, the commit time) written without the serializer.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        if !matches!(self.event.shape, Shape::Envelope) {
            return serde_json::to_writer(out, self);
        }
        let unchanged = self.unchanged();
        out.push(b'{');
        self.fields(&unchanged, &mut JsonFields { out, first: true })?;
        out.push(b'}');
        Ok(())
    }

    fn unchanged(&self) -> Vec<&str> {
        self.event.after.as_ref().map(|a| a.unchanged().collect()).unwrap_or_default()
    }

    /// The envelope's fields in order: the one description both writers
    /// follow.
    fn fields<F: Fields>(&self, unchanged: &[&str], out: &mut F) -> Result<(), F::Error> {
        let event = self.event;
        out.text(field!("id"), &self.id)?;
        out.plain(field!("op"), event.op.code())?;
        out.text(field!("source"), &event.source_id)?;
        out.text(field!("db"), &event.database)?;
        out.text(field!("table"), &event.table)?;
        out.row(field!("key"), event.key.as_ref())?;
        out.row(field!("before"), event.before.as_ref())?;
        out.row(field!("after"), event.after.as_ref())?;
        // Only when there are some, so every other event keeps its bytes.
        if !unchanged.is_empty() {
            out.value(field!("unchanged"), unchanged)?;
        }
        out.value(field!("schema_version"), &event.schema_version)?;
        match self.position {
            Some(text) => out.text(field!("position"), text)?,
            None => out.position(field!("position"), &event.position)?,
        }
        out.text(field!("tx_id"), &event.tx_id)?;
        out.value(field!("tx_end"), &event.tx_end)?;
        out.plain(field!("commit_time"), &crate::time::utc_micros_text(event.commit_time_us, &mut [0; UTC_MICROS_LEN]))
    }
}

/// Where [`Envelope::fields`] goes: a serde map, or JSON bytes directly.
trait Fields {
    type Error;
    fn value<T: Serialize + ?Sized>(&mut self, field: Field, value: &T) -> Result<(), Self::Error>;
    /// Text JSON takes as it is: no quote, backslash or control character.
    fn plain(&mut self, field: Field, text: &str) -> Result<(), Self::Error>;
    fn text(&mut self, field: Field, text: &str) -> Result<(), Self::Error> {
        self.value(field, text)
    }
    fn row(&mut self, field: Field, row: Option<&Row>) -> Result<(), Self::Error> {
        self.value(field, &row)
    }
    fn position(&mut self, field: Field, position: &Position) -> Result<(), Self::Error> {
        self.value(field, position)
    }
}

struct MapFields<M>(M);

impl<M: SerializeMap> Fields for MapFields<M> {
    type Error = M::Error;
    fn value<T: Serialize + ?Sized>(&mut self, field: Field, value: &T) -> Result<(), M::Error> {
        self.0.serialize_entry(field.name, value)
    }
    fn plain(&mut self, field: Field, text: &str) -> Result<(), M::Error> {
        self.0.serialize_entry(field.name, text)
    }
}

struct JsonFields<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl JsonFields<'_> {
    #[inline]
    fn key(&mut self, field: Field) {
        let key = if std::mem::take(&mut self.first) { field.key.get(1..).unwrap_or_default() } else { field.key };
        self.out.extend_from_slice(key.as_bytes());
    }
}

impl Fields for JsonFields<'_> {
    type Error = serde_json::Error;
    fn value<T: Serialize + ?Sized>(&mut self, field: Field, value: &T) -> serde_json::Result<()> {
        self.key(field);
        serde_json::to_writer(&mut *self.out, value)
    }
    fn plain(&mut self, field: Field, text: &str) -> serde_json::Result<()> {
        self.key(field);
        self.out.push(b'"');
        self.out.extend_from_slice(text.as_bytes());
        self.out.push(b'"');
        Ok(())
    }
    fn text(&mut self, field: Field, text: &str) -> serde_json::Result<()> {
        self.key(field);
        crate::json::write_str(self.out, text);
        Ok(())
    }
    fn row(&mut self, field: Field, row: Option<&Row>) -> serde_json::Result<()> {
        self.key(field);
        match row {
            Some(row) => row.write_json(self.out),
            None => {
                self.out.extend_from_slice(b"null");
                Ok(())
            }
        }
    }
    fn position(&mut self, field: Field, position: &Position) -> serde_json::Result<()> {
        self.key(field);
        self.out.push(b'"');
        position.write_text(&mut |piece| crate::json::write_str_contents(self.out, piece));
        self.out.push(b'"');
        Ok(())
    }
}

impl Serialize for Envelope<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.event;
        match &event.shape {
            Shape::Envelope => {}
            Shape::Row(_) => return event.after.serialize(serializer),
            Shape::Tombstone => return serializer.serialize_none(),
            Shape::Message(message) => {
                let value = event.after.as_ref().and_then(|a| a.get(&message.value));
                return value.serialize(serializer);
            }
        }
        let unchanged = self.unchanged();
        let mut map = MapFields(serializer.serialize_map(Some(13 + usize::from(!unchanged.is_empty())))?);
        self.fields(&unchanged, &mut map)?;
        map.0.end()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::value::Value;

    pub(crate) fn event(tx: u64, seq: u32) -> Event {
        Event {
            op: Op::Insert,
            source_id: "gen1".into(),
            database: "shop".into(),
            table: "orders".into(),
            key: None,
            before: None,
            after: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(1)] }),
            schema_version: 1,
            position: Position::Generator { tx, seq },
            tx_id: tx.to_string().into(),
            tx_end: false,
            commit_time_us: 1_700_000_000_123_456,
            schema: None,
            origin: crate::schema::Origin::None,
            route: None,
            shape: Default::default(),
        }
    }

    #[test]
    fn event_id_depends_only_on_source_and_position() {
        let a = event(5, 2);
        let mut replay = event(5, 2);
        replay.table = "other".into();
        assert_eq!(a.id(), replay.id());
        assert_ne!(a.id(), event(5, 3).id());
        let mut other_source = event(5, 2);
        other_source.source_id = "gen2".into();
        assert_ne!(a.id(), other_source.id());
        // Hashed as printed: the UUIDv5 of the text, whatever the position.
        for position in ["gen:5:2", "pg:16/B374D848:3", "my:bin.000001:4:0:0-1-9", "e2/pg:0/FF:0"] {
            let position: Position = position.parse().unwrap();
            let name = format!("src/{position}");
            let expected = EventId(Uuid::new_v5(&EVENT_ID_NAMESPACE, name.as_bytes()));
            assert_eq!(EventId::new("src", &position), expected, "{position}");
            // Printed once for both, as a sink writing both prints it.
            let mut marked = event(0, 0);
            (marked.source_id, marked.position) = ("src".into(), position.clone());
            let mut marks = Marks::default();
            assert_eq!(marks.of(&marked), (expected.to_string().as_str(), position.to_string().as_str()));
            assert_eq!(marks.id(), expected);
        }
    }

    #[test]
    fn a_later_log_generation_gets_new_ids_and_generation_zero_keeps_the_old_ones() {
        // The ids events had before generations existed: unchanged.
        let a = event(5, 2);
        let name = "gen1/gen:5:2";
        assert_eq!(a.id(), EventId(Uuid::new_v5(&EVENT_ID_NAMESPACE, name.as_bytes())));
        let mut zero = event(5, 2);
        zero.position = zero.position.in_generation(0);
        assert_eq!(zero.id(), a.id());
        // After a log reset the same coordinates name another event:
        // a consumer that drops repeats by id must not drop it.
        let mut later = event(5, 2);
        later.position = later.position.in_generation(1);
        assert_ne!(later.id(), a.id());
        let mut latest = event(5, 2);
        latest.position = latest.position.in_generation(2);
        assert_ne!(latest.id(), later.id());
    }

    #[test]
    fn envelope_carries_lineage() {
        let json: serde_json::Value = serde_json::to_value(event(5, 2)).unwrap();
        assert_eq!(json["op"], "c");
        assert_eq!(json["source"], "gen1");
        assert_eq!(json["db"], "shop");
        assert_eq!(json["position"], "gen:5:2");
        assert_eq!(json["tx_id"], "5");
        assert_eq!(json["after"]["id"], 1);
        assert_eq!(json["commit_time"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(json["id"], event(5, 2).id().to_string());
        assert!(json.get("unchanged").is_none());
    }

    #[test]
    fn the_written_envelope_is_byte_for_byte_the_serialized_one() {
        let mut odd = event(5, 2);
        odd.database = "a\"b\\c\u{1}\u{e9}".into();
        odd.table = "public.\"quoted\"\n".into();
        odd.tx_id = "tx\t1".into();
        odd.tx_end = true;
        odd.commit_time_us = 253_402_300_800_000_000;
        odd.op = Op::Update;
        odd.before = odd.after.clone();
        odd.after = Some(Row {
            columns: vec![Arc::from("id"), Arc::from("b\"ody"), Arc::from("f")].into(),
            values: vec![Value::Text("\u{2028}x".into()), Value::Unchanged, Value::Float(f64::NAN)],
        });
        let mut negative = event(1, 0);
        negative.commit_time_us = -1;
        negative.key = None;
        let mut message = event(2, 0);
        message.shape = Shape::Tombstone;
        for event in [event(5, 2), odd, negative, message] {
            let envelope = Envelope::new(&event);
            let mut written = Vec::new();
            envelope.write_json(&mut written).unwrap();
            let serialized = serde_json::to_string(&envelope).unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), serialized);
            let mut marks = Marks::default();
            let (id, position) = marks.of(&event);
            let marked = Envelope { event: &event, id: id.into(), position: Some(position) };
            let mut written = Vec::new();
            marked.write_json(&mut written).unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), serialized);
        }
    }

    #[test]
    fn unchanged_columns_are_listed_beside_the_after_image() {
        let mut update = event(5, 2);
        update.op = Op::Update;
        update.after = Some(Row {
            columns: vec![Arc::from("id"), Arc::from("body")].into(),
            values: vec![Value::Int(1), Value::Unchanged],
        });
        let json: serde_json::Value = serde_json::to_value(update).unwrap();
        assert_eq!(json["after"], serde_json::json!({"id": 1}));
        assert_eq!(json["unchanged"], serde_json::json!(["body"]));
    }
}
