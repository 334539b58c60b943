//! A lossless binary encoding of events, for spilling batches to disk.
//!
//! The JSON envelope is not lossless (a decimal and a text are both
//! strings), so spilled events use this format instead. It is private to
//! one process run: spill files are deleted at start, so the format may
//! change between versions. Decoding never panics on any input.

use std::sync::Arc;

use crate::event::{Event, MessageShape, OldKey, Op, Shape};
use crate::position::Position;
use crate::value::{CompactString, JsonText, Row, Value};

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The input ended inside a record; more bytes may complete it.
    #[error("incomplete record")]
    Incomplete,
    /// The bytes are not a record of this format.
    #[error("invalid record: {0}")]
    Invalid(&'static str),
}

pub fn encode(event: &Event, out: &mut Vec<u8>) {
    out.push(op_code(event.op));
    put_str(out, &event.source_id);
    put_str(out, &event.database);
    put_str(out, &event.table);
    for row in [&event.key, &event.before, &event.after] {
        match row {
            None => out.push(0),
            Some(row) => {
                out.push(1);
                put_row(out, row);
            }
        }
    }
    out.extend_from_slice(&event.schema_version.to_le_bytes());
    put_str(out, &event.position.to_string());
    put_str(out, &event.tx_id);
    out.push(u8::from(event.tx_end));
    out.extend_from_slice(&event.commit_time_us.to_le_bytes());
    crate::codec_meta::put_schema(out, event.schema.as_deref());
    crate::codec_meta::put_origin(out, &event.origin);
    // One marker byte: bit 0 says a route follows; the bits above it are
    // the shape, so a letter with neither still ends in a 0.
    let shape: u8 = match &event.shape {
        Shape::Envelope => 0,
        Shape::Row(OldKey::Nothing) => 1,
        Shape::Row(OldKey::Tombstone) => 2,
        Shape::Row(OldKey::Row) => 3,
        Shape::Tombstone => 4,
        Shape::Message(_) => 5,
    };
    out.push(u8::from(event.route.is_some()) | shape << 1);
    if let Some(route) = &event.route {
        put_str(out, route);
    }
    if let Shape::Message(message) = &event.shape {
        put_str(out, message.key.as_deref().unwrap_or(""));
        put_str(out, &message.value);
        put_len(out, message.headers.len());
        for (name, column) in &message.headers {
            put_str(out, name);
            put_str(out, column);
        }
    }
}

/// The route and shape after the marker byte.
fn take_shape(input: &mut &[u8]) -> Result<(Option<Arc<str>>, Shape), CodecError> {
    // A letter stored before routes existed ends before the marker.
    let marker = if input.is_empty() { 0 } else { take_u8(input)? };
    let route = if marker & 1 == 1 { Some(Arc::from(take_str(input)?)) } else { None };
    let shape = match marker >> 1 {
        0 => Shape::Envelope,
        1 => Shape::Row(OldKey::Nothing),
        2 => Shape::Row(OldKey::Tombstone),
        3 => Shape::Row(OldKey::Row),
        4 => Shape::Tombstone,
        5 => {
            let key = take_str(input)?;
            let key = (!key.is_empty()).then(|| Arc::from(key));
            let value = Arc::from(take_str(input)?);
            let count = take_len(input)?;
            let mut headers = Vec::with_capacity(count.min(64));
            for _ in 0..count {
                headers.push((Arc::from(take_str(input)?), Arc::from(take_str(input)?)));
            }
            Shape::Message(Arc::new(MessageShape { key, value, headers }))
        }
        _ => return Err(CodecError::Invalid("bad route marker")),
    };
    Ok((route, shape))
}

/// Decodes one event from the front of `input` and advances it.
pub fn decode(input: &mut &[u8]) -> Result<Event, CodecError> {
    let op = match take_u8(input)? {
        0 => Op::Insert,
        1 => Op::Update,
        2 => Op::Delete,
        3 => Op::Read,
        4 => Op::Truncate,
        5 => Op::Message,
        6 => Op::Schema,
        _ => return Err(CodecError::Invalid("unknown op")),
    };
    let source_id = Arc::from(take_str(input)?);
    let database = Arc::from(take_str(input)?);
    let table = Arc::from(take_str(input)?);
    let mut rows = [None, None, None];
    for row in &mut rows {
        *row = match take_u8(input)? {
            0 => None,
            1 => Some(take_row(input)?),
            _ => return Err(CodecError::Invalid("bad row marker")),
        };
    }
    let [key, before, after] = rows;
    let schema_version = u32::from_le_bytes(take_array(input)?);
    let position: Position = take_str(input)?.parse().map_err(|_| CodecError::Invalid("bad position"))?;
    let tx_id = Arc::from(take_str(input)?);
    let tx_end = match take_u8(input)? {
        0 => false,
        1 => true,
        _ => return Err(CodecError::Invalid("bad tx_end")),
    };
    let commit_time_us = i64::from_le_bytes(take_array(input)?);
    let schema = crate::codec_meta::take_schema(input)?.map(Arc::new);
    let origin = crate::codec_meta::take_origin(input)?;
    let (route, shape) = take_shape(input)?;
    Ok(Event {
        op,
        source_id,
        database,
        table,
        key,
        before,
        after,
        schema_version,
        position,
        tx_id,
        tx_end,
        commit_time_us,
        schema,
        origin,
        route,
        shape,
    })
}

fn op_code(op: Op) -> u8 {
    match op {
        Op::Insert => 0,
        Op::Update => 1,
        Op::Delete => 2,
        Op::Read => 3,
        Op::Truncate => 4,
        Op::Message => 5,
        Op::Schema => 6,
    }
}

pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) {
    // Lengths above u32 cannot occur for one value held in memory as an
    // event; saturate rather than wrap if they ever did, and decoding
    // will then report the record invalid instead of misreading it.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn put_row(out: &mut Vec<u8>, row: &Row) {
    put_len(out, row.columns.len());
    for column in row.columns.iter() {
        put_str(out, column);
    }
    put_len(out, row.values.len());
    for value in &row.values {
        put_value(out, value);
    }
}

pub(crate) fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(0),
        Value::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
        Value::Int(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::UInt(u) => {
            out.push(3);
            out.extend_from_slice(&u.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(4);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Decimal(s) => tagged_str(out, 5, s),
        Value::Text(s) => tagged_str(out, 6, s),
        Value::Bytes(b) => {
            out.push(7);
            put_len(out, b.len());
            out.extend_from_slice(b);
        }
        Value::Json(j) => tagged_str(out, 8, j.as_str()),
        Value::Date(s) => tagged_str(out, 9, s),
        Value::Time(s) => tagged_str(out, 10, s),
        Value::Timestamp(s) => tagged_str(out, 11, s),
        Value::TimestampTz(s) => tagged_str(out, 12, s),
        Value::Array(items) => {
            out.push(13);
            put_len(out, items.len());
            for item in items {
                put_value(out, item);
            }
        }
        Value::Unchanged => out.push(14),
    }
}

fn tagged_str(out: &mut Vec<u8>, tag: u8, s: &str) {
    out.push(tag);
    put_str(out, s);
}

pub(crate) fn take_u8(input: &mut &[u8]) -> Result<u8, CodecError> {
    let (first, rest) = input.split_first().ok_or(CodecError::Incomplete)?;
    *input = rest;
    Ok(*first)
}

pub(crate) fn take_array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], CodecError> {
    let (head, rest) = input.split_first_chunk::<N>().ok_or(CodecError::Incomplete)?;
    *input = rest;
    Ok(*head)
}

pub(crate) fn take_len(input: &mut &[u8]) -> Result<usize, CodecError> {
    let len = u32::from_le_bytes(take_array(input)?) as usize;
    Ok(len)
}

pub(crate) fn take_bytes<'a>(input: &mut &'a [u8]) -> Result<&'a [u8], CodecError> {
    let len = take_len(input)?;
    if input.len() < len {
        return Err(CodecError::Incomplete);
    }
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    Ok(bytes)
}

pub(crate) fn take_str<'a>(input: &mut &'a [u8]) -> Result<&'a str, CodecError> {
    std::str::from_utf8(take_bytes(input)?).map_err(|_| CodecError::Invalid("string is not UTF-8"))
}

/// A count read from input, refused when the input cannot possibly hold
/// that many items (each takes at least `min_item_len` bytes), so garbage
/// cannot make us allocate gigabytes.
pub(crate) fn take_count(input: &mut &[u8], min_item_len: usize) -> Result<usize, CodecError> {
    let count = take_len(input)?;
    if count.saturating_mul(min_item_len) > input.len() {
        return Err(CodecError::Incomplete);
    }
    Ok(count)
}

fn take_row(input: &mut &[u8]) -> Result<Row, CodecError> {
    let column_count = take_count(input, 4)?;
    let mut columns = Vec::with_capacity(column_count);
    for _ in 0..column_count {
        columns.push(Arc::from(take_str(input)?));
    }
    let value_count = take_count(input, 1)?;
    let mut values = Vec::with_capacity(value_count);
    for _ in 0..value_count {
        values.push(take_value(input, 0)?);
    }
    Ok(Row { columns: columns.into(), values })
}

/// Arrays nest at most this deep, so hostile input cannot overflow the stack.
const MAX_ARRAY_DEPTH: usize = 32;

pub(crate) fn take_value(input: &mut &[u8], depth: usize) -> Result<Value, CodecError> {
    let text = |input: &mut &[u8]| take_str(input).map(CompactString::from);
    Ok(match take_u8(input)? {
        0 => Value::Null,
        1 => Value::Bool(take_u8(input)? != 0),
        2 => Value::Int(i64::from_le_bytes(take_array(input)?)),
        3 => Value::UInt(u64::from_le_bytes(take_array(input)?)),
        4 => Value::Float(f64::from_bits(u64::from_le_bytes(take_array(input)?))),
        5 => Value::Decimal(text(input)?),
        6 => Value::Text(text(input)?),
        7 => Value::Bytes(take_bytes(input)?.to_vec()),
        8 => Value::Json(
            JsonText::parse(take_str(input)?.to_string()).map_err(|_| CodecError::Invalid("bad JSON value"))?,
        ),
        9 => Value::Date(text(input)?),
        10 => Value::Time(text(input)?),
        11 => Value::Timestamp(text(input)?),
        12 => Value::TimestampTz(text(input)?),
        13 => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(CodecError::Invalid("arrays nested too deep"));
            }
            let count = take_count(input, 1)?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(take_value(input, depth + 1)?);
            }
            Value::Array(items)
        }
        14 => Value::Unchanged,
        _ => return Err(CodecError::Invalid("unknown value tag")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::Lsn;

    fn every_value() -> Vec<Value> {
        vec![
            Value::Null,
            Value::Bool(true),
            Value::Int(-5),
            Value::UInt(u64::MAX),
            Value::Float(f64::NAN),
            Value::Float(-0.5),
            Value::Decimal("1.10".into()),
            Value::Text("ünïcode".into()),
            Value::Bytes(vec![0, 1, 255]),
            Value::Json(JsonText::parse("{\"a\":[1,null]}".into()).unwrap()),
            Value::Date("2026-01-01".into()),
            Value::Time("12:00:00+02".into()),
            Value::Timestamp("2026-01-01T00:00:00".into()),
            Value::TimestampTz("2026-01-01T00:00:00Z".into()),
            Value::Array(vec![Value::Int(1), Value::Array(vec![Value::Null])]),
            Value::Unchanged,
        ]
    }

    fn sample() -> Event {
        let values = every_value();
        let columns: Vec<Arc<str>> = (0..values.len()).map(|i| Arc::from(format!("c{i}"))).collect();
        Event {
            op: Op::Update,
            source_id: "pg".into(),
            database: "shop".into(),
            table: "public.orders".into(),
            key: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(1)] }),
            before: None,
            after: Some(Row { columns: columns.into(), values }),
            schema_version: 7,
            position: Position::Postgres { commit_lsn: Lsn(0xABCDEF), seq: 9 },
            tx_id: "771".into(),
            tx_end: true,
            commit_time_us: -12,
            schema: Some(Arc::new(sample_schema())),
            origin: crate::schema::Origin::Mysql {
                server_id: 3,
                file: "bin.000002".into(),
                pos: 4096,
                row: 1,
                thread: Some(12),
                gtid: Some("0-3-9".into()),
                mariadb: true,
                tx: Some(crate::tx_place::TxPlace {
                    before: crate::tx_place::TxCounts { rows: 3, truncates: 1, messages: 2 },
                    table_before: crate::tx_place::TxCounts { rows: 1, truncates: 0, messages: 0 },
                    totals: Some(
                        vec![(
                            "public.orders".into(),
                            crate::tx_place::TxCounts { rows: 5, truncates: 1, messages: 0 },
                        )]
                        .into(),
                    ),
                    commit_end: Some(0x1234),
                }),
            },
            route: Some("analytics.orders".into()),
            shape: Shape::Envelope,
        }
    }

    fn sample_schema() -> crate::schema::TableSchema {
        use crate::schema::{ColumnSchema, ColumnType};
        let types = [
            ColumnType::Decimal { precision: Some(12), scale: Some(2) },
            ColumnType::Decimal { precision: None, scale: None },
            ColumnType::Text { length: Some(20) },
            ColumnType::TimestampTz { precision: 3 },
            ColumnType::Enum { labels: vec!["a".into(), "b".into()] },
            ColumnType::Array(Box::new(ColumnType::Array(Box::new(ColumnType::Int16)))),
            ColumnType::Other,
            ColumnType::Set { labels: vec!["x".into()] },
            ColumnType::Bits { length: 5 },
            ColumnType::Year,
            ColumnType::Xml,
            ColumnType::Money,
        ];
        let columns = types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| ColumnSchema {
                name: format!("c{i}").into(),
                type_name: "t".into(),
                ty,
                nullable: i % 2 == 0,
                default: (i == 1).then_some(Value::Int(5)),
            })
            .collect();
        crate::schema::TableSchema { columns, primary_key: vec![0, 2] }
    }

    #[test]
    fn every_value_round_trips() {
        let event = sample();
        let mut bytes = Vec::new();
        encode(&event, &mut bytes);
        encode(&event, &mut bytes);
        let mut input = bytes.as_slice();
        for _ in 0..2 {
            let decoded = decode(&mut input).unwrap();
            // NaN != NaN, so compare the JSON forms, which keep NaN as text.
            assert_eq!(serde_json::to_string(&decoded).unwrap(), serde_json::to_string(&event).unwrap());
            assert_eq!(decoded.position, event.position);
            assert_eq!(decoded.schema, event.schema);
            assert_eq!(decoded.origin, event.origin);
            assert_eq!(decoded.route, event.route);
            assert_eq!(format!("{:?}", decoded.after), format!("{:?}", event.after));
        }
        assert!(input.is_empty());
    }

    #[test]
    fn snapshot_marks_round_trip() {
        use crate::schema::{Origin, SnapshotMark};
        let marks = [
            SnapshotMark::Row,
            SnapshotMark::FirstInTable,
            SnapshotMark::LastInTable,
            SnapshotMark::First,
            SnapshotMark::Last,
            SnapshotMark::Incremental,
        ];
        for mark in marks {
            let event = Event { origin: Origin::Snapshot(mark), ..sample() };
            let mut bytes = Vec::new();
            encode(&event, &mut bytes);
            assert_eq!(decode(&mut bytes.as_slice()).unwrap().origin, event.origin);
        }
    }

    #[test]
    fn shapes_round_trip_with_and_without_a_route() {
        let message = MessageShape {
            key: Some("aggregateid".into()),
            value: "payload".into(),
            headers: vec![("id".into(), "id".into()), ("kind".into(), "type".into())],
        };
        let shapes = [
            Shape::Envelope,
            Shape::Row(OldKey::Nothing),
            Shape::Row(OldKey::Tombstone),
            Shape::Row(OldKey::Row),
            Shape::Tombstone,
            Shape::Message(Arc::new(message.clone())),
            Shape::Message(Arc::new(MessageShape { key: None, headers: Vec::new(), ..message })),
        ];
        for shape in shapes {
            for route in [None, Some(Arc::from("elsewhere"))] {
                let event = Event { shape: shape.clone(), route, ..sample() };
                let mut bytes = Vec::new();
                encode(&event, &mut bytes);
                let decoded = decode(&mut bytes.as_slice()).unwrap();
                // The sample's NaN makes whole events unequal; the rest
                // of the letter has its own tests.
                assert_eq!((decoded.shape, decoded.route), (event.shape, event.route));
            }
        }
    }

    #[test]
    fn truncated_input_is_incomplete_and_garbage_is_refused() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes);
        // Where a letter stored before routes existed ended: it decodes.
        let mut unrouted = Vec::new();
        encode(&Event { route: None, ..sample() }, &mut unrouted);
        let old_end = unrouted.len() - 1;
        for cut in 0..bytes.len() {
            let mut input = &bytes[..cut];
            match decode(&mut input) {
                Ok(event) => assert!(cut == old_end && event.route.is_none(), "cut at {cut} decoded"),
                Err(_) => assert_ne!(cut, old_end),
            }
        }
        let mut garbage: &[u8] = &[9, 0, 0, 0, 0];
        assert_eq!(decode(&mut garbage).unwrap_err(), CodecError::Invalid("unknown op"));
        let mut huge_count: &[u8] = &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 255, 255, 255];
        assert!(decode(&mut huge_count).is_err());
    }

    #[test]
    fn no_input_makes_the_decoder_panic() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes);
        // Flip every byte in turn: decoding must return, never panic.
        for index in 0..bytes.len() {
            let mut mutated = bytes.clone();
            mutated[index] ^= 0xFF;
            let _ = decode(&mut mutated.as_slice());
        }
    }
}
