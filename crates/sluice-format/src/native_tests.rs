//! The native value a sink writes without records is its record's value.

use std::sync::Arc;

use sluice_core::{Event, MessageShape, OldKey, Op, Origin, Position, Row, Shape, Value};

use crate::{Carrier, Encoder, FormatConfig, Headers, RecordKind};

const FILE: Carrier = Carrier { name: "file", keys: false, headers: Headers::None, avro: crate::AvroSupport::None };

fn event(shape: Shape) -> Event {
    let row = Row {
        columns: vec![Arc::from("id"), "body".into(), "topic".into()].into(),
        values: vec![Value::Int(7), Value::Text("say \"hi\"\n".into()), Value::Text("orders".into())],
    };
    Event {
        op: Op::Update,
        source_id: "shop".into(),
        database: "shop".into(),
        table: "public.orders".into(),
        key: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(7)] }),
        before: Some(row.clone()),
        after: Some(row),
        schema_version: 3,
        position: Position::Generator { tx: 9, seq: 2 },
        tx_id: "9".into(),
        tx_end: true,
        commit_time_us: 1_700_000_000_000_000,
        schema: None,
        origin: Origin::None,
        route: None,
        shape,
    }
}

#[test]
fn a_native_value_written_directly_is_the_records_value() {
    let message = MessageShape { key: Some("id".into()), value: "body".into(), headers: vec![] };
    let shapes = [Shape::Envelope, Shape::Row(OldKey::default()), Shape::Message(Arc::new(message)), Shape::Tombstone];
    let mut encoder = Encoder::new(&FormatConfig::default(), FILE);
    for shape in shapes {
        let event = event(shape);
        let mut records = Vec::new();
        encoder.encode(&event, &mut records).unwrap();
        let [record] = records.as_slice() else { panic!("one record for {:?}", event.shape) };
        let mut direct = b"before|".to_vec();
        let wrote = crate::write_native_value(&event, &mut Default::default(), &mut direct).unwrap();
        assert_eq!(wrote, record.kind != RecordKind::Tombstone, "{:?}", event.shape);
        let expected = [b"before|".as_slice(), record.value.as_deref().filter(|_| wrote).unwrap_or_default()].concat();
        assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(expected).unwrap(), "{:?}", event.shape);
    }
}
