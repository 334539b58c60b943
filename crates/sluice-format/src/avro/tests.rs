use std::sync::Arc;

use apache_avro::types::Value as Avro;
use serde_json::{Value, json};
use sluice_core::{ColumnSchema, ColumnType, Event, Lsn, Op, Origin, Position, Row, TableSchema, Value as Cell};

use super::{AvroCodec, AvroContainer, AvroSchema};
use crate::{Carrier, Encoder, FormatConfig, Headers, Record};

const KAFKA: Carrier =
    Carrier { name: "kafka", keys: true, headers: Headers::Kafka, avro: crate::AvroSupport::Registry };

fn event(op: Op) -> Event {
    let column = |name: &str, ty: ColumnType, nullable: bool| ColumnSchema {
        name: name.into(),
        type_name: "t".into(),
        ty,
        nullable,
        default: None,
    };
    let schema = Arc::new(TableSchema {
        columns: vec![
            column("id", ColumnType::Int16, false),
            column("amount", ColumnType::Decimal { precision: Some(12), scale: Some(2) }, true),
            column("tags", ColumnType::Array(Box::new(ColumnType::Text { length: None })), true),
            column("ratio", ColumnType::Float64, true),
        ],
        primary_key: vec![0],
    });
    let columns: Arc<[Arc<str>]> = vec![Arc::from("id"), "amount".into(), "tags".into(), "ratio".into()].into();
    let row = Row {
        columns,
        values: vec![
            Cell::Int(7),
            Cell::Decimal("-12.50".into()),
            Cell::Array(vec![Cell::Text("a".into()), Cell::Null]),
            Cell::Float(f64::NAN),
        ],
    };
    Event {
        op,
        source_id: "shop".into(),
        database: "shop".into(),
        table: "public.orders".into(),
        key: None,
        before: None,
        after: Some(row),
        schema_version: 1,
        position: Position::Postgres { commit_lsn: Lsn(0x100), seq: 0 },
        tx_id: "7".into(),
        tx_end: true,
        commit_time_us: 1_700_000_000_000_000,
        schema: Some(schema),
        origin: Origin::Postgres { lsn: 0x90, last_commit_lsn: Some(0x80), tx: None },
        route: None,
        shape: Default::default(),
    }
}

/// The event's records in Avro: datums, with their Connect schemas.
fn records(event: &Event) -> Vec<Record> {
    records_in(event, json!({"envelope": "debezium", "encoding": "avro"}))
}

/// The event's records as bare JsonConverter payloads.
fn json_records(event: &Event) -> Vec<Record> {
    records_in(event, json!({"envelope": "debezium"}))
}

fn records_in(event: &Event, config: Value) -> Vec<Record> {
    let config: FormatConfig = serde_json::from_value(config).unwrap();
    let mut out = Vec::new();
    Encoder::new(&config, KAFKA).encode(event, &mut out).unwrap();
    out
}

/// Decodes `datum` with apache-avro's reader, the independent check.
fn decode(schema: &AvroSchema, datum: &[u8]) -> Avro {
    let parsed = apache_avro::Schema::parse_str(schema.text()).unwrap();
    let mut reader = datum;
    let value = apache_avro::reader::datum::GenericDatumReader::builder(&parsed)
        .build()
        .unwrap()
        .read_value(&mut reader)
        .unwrap();
    assert!(reader.is_empty(), "{} bytes left after the datum", reader.len());
    value
}

fn field<'a>(record: &'a Avro, name: &str) -> &'a Avro {
    match record {
        Avro::Record(fields) => &fields.iter().find(|(n, _)| n == name).unwrap().1,
        other => panic!("not a record: {other:?}"),
    }
}

fn unwrap_union(value: &Avro) -> &Avro {
    match value {
        Avro::Union(_, inner) => inner,
        other => other,
    }
}

#[test]
fn records_carry_their_connect_schemas() {
    let records = records(&event(Op::Insert));
    let record = &records[0];
    assert!(record.key_schema.as_deref().unwrap().contains("shop.public.orders.Key"));
    assert!(record.value_schema.as_deref().unwrap().contains("shop.public.orders.Envelope"));
}

#[test]
fn the_envelope_schema_has_avro_converter_names_unions_and_properties() {
    let records = records(&event(Op::Insert));
    let schema = AvroSchema::from_connect(records[0].value_schema.as_deref().unwrap()).unwrap();
    assert_eq!(schema.name(), "shop.public.orders.Envelope");
    let json: Value = serde_json::from_str(schema.text()).unwrap();
    assert_eq!((json["name"].as_str(), json["namespace"].as_str()), (Some("Envelope"), Some("shop.public.orders")));
    assert_eq!(json["connect.name"], "shop.public.orders.Envelope");
    assert_eq!(json["connect.version"], 2);
    let fields = json["fields"].as_array().unwrap();
    let before = &fields[0];
    assert_eq!(before["default"], Value::Null);
    assert_eq!(before["type"][0], "null");
    let row = &before["type"][1];
    assert_eq!((row["name"].as_str(), row.get("namespace")), (Some("Value"), None));
    // The second use of the row record names it, relative to the namespace.
    assert_eq!(fields[1]["type"], json!(["null", "Value"]));
    let id = &row["fields"][0];
    assert_eq!(id, &json!({"name": "id", "type": {"type": "int", "connect.type": "int16"}}));
    let amount = &row["fields"][1]["type"][1];
    assert_eq!(amount["logicalType"], "decimal");
    assert_eq!((amount["precision"].as_u64(), amount["scale"].as_u64()), (Some(12), Some(2)));
    assert_eq!(amount["connect.name"], "org.apache.kafka.connect.data.Decimal");
    let source = &fields[2]["type"];
    assert_eq!(
        (source["name"].as_str(), source["namespace"].as_str()),
        (Some("Source"), Some("io.debezium.connector.postgresql"))
    );
    assert_eq!(fields[4], json!({"name": "op", "type": "string"}));
}

#[test]
fn datums_decode_with_apache_avro_to_the_event_values() {
    let records = records(&event(Op::Insert));
    let record = &records[0];
    let value_schema = AvroSchema::from_connect(record.value_schema.as_deref().unwrap()).unwrap();
    let decoded = decode(&value_schema, record.value.as_ref().unwrap());
    assert_eq!(unwrap_union(field(&decoded, "before")), &Avro::Null);
    let after = unwrap_union(field(&decoded, "after"));
    assert_eq!(field(after, "id"), &Avro::Int(7));
    match unwrap_union(field(after, "amount")) {
        Avro::Decimal(d) => assert_eq!(Vec::<u8>::try_from(d.clone()).unwrap(), (-1250i16).to_be_bytes()),
        other => panic!("amount: {other:?}"),
    }
    let tags = unwrap_union(field(after, "tags"));
    let strings = Avro::String("a".into());
    assert_eq!(tags, &Avro::Array(vec![Avro::Union(1, Box::new(strings)), Avro::Union(0, Box::new(Avro::Null))]));
    assert!(matches!(unwrap_union(field(after, "ratio")), Avro::Double(f) if f.is_nan()));
    assert_eq!(field(&decoded, "op"), &Avro::String("c".into()));
    let key_schema = AvroSchema::from_connect(record.key_schema.as_deref().unwrap()).unwrap();
    assert_eq!(decode(&key_schema, record.key.as_ref().unwrap()), Avro::Record(vec![("id".into(), Avro::Int(7))]));
}

#[test]
fn a_default_puts_its_branch_first_and_a_value_that_does_not_fit_is_refused() {
    let connect = r#"{"type":"struct","name":"a.B","optional":false,"fields":[
        {"type":"string","optional":true,"default":"false","field":"snapshot","name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,false"}},
        {"type":"int32","optional":false,"field":"n"}]}"#;
    let schema = AvroSchema::from_connect(connect).unwrap();
    let json: Value = serde_json::from_str(schema.text()).unwrap();
    let snapshot = &json["fields"][0];
    assert_eq!(snapshot["default"], "false");
    assert_eq!(snapshot["type"][1], "null");
    assert_eq!(snapshot["type"][0]["connect.default"], "false");
    assert_eq!(snapshot["type"][0]["connect.parameters"], json!({"allowed": "true,false"}));
    let mut out = Vec::new();
    schema.write(br#"{"snapshot":null,"n":3}"#, &mut out).unwrap();
    assert_eq!(out, [2, 6], "null is the union's second branch");
    let err = schema.write(br#"{"snapshot":"x","n":3000000000}"#, &mut Vec::new()).unwrap_err();
    assert!(err.0.contains("\"n\"") && err.0.contains("does not fit"), "{err}");
}

#[test]
fn the_streaming_writer_writes_what_the_tree_writer_does_and_gives_way_when_it_cannot() {
    let mut event = event(Op::Insert);
    for op in [Op::Insert, Op::Delete] {
        event.op = op;
        if op == Op::Delete {
            event.before = event.after.take();
        }
        let connect = records(&event)[0].value_schema.clone().unwrap();
        let schema = AvroSchema::from_connect(&connect).unwrap();
        for record in json_records(&event) {
            let Some(value) = &record.value else { continue };
            let (mut fast, mut tree) = (Vec::new(), Vec::new());
            assert!(super::stream::write(&schema.node, value, &mut fast), "the fast path gave way");
            let json: Value = serde_json::from_slice(value).unwrap();
            super::datum::write(&schema.node, &json, &mut tree).unwrap();
            assert_eq!(fast, tree);
        }
    }
    let connect = r#"{"type":"struct","name":"a.B","optional":false,"fields":[
        {"type":"int64","optional":false,"field":"n"},{"type":"double","optional":true,"field":"x"}]}"#;
    let schema = AvroSchema::from_connect(connect).unwrap();
    let mut out = vec![9];
    assert!(!super::stream::write(&schema.node, br#"{"x":1,"n":2}"#, &mut out), "members out of order");
    assert_eq!(out, [9], "what the fast path wrote is taken back");
    schema.write(br#"{"x":1,"n":2}"#, &mut out).unwrap();
    assert_eq!(out, [9, 4, 2, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
}

#[test]
fn container_files_read_back_with_apache_avro_in_every_codec_across_blocks() {
    let records = records(&event(Op::Insert));
    let record = &records[0];
    let schema = AvroSchema::from_connect(record.value_schema.as_deref().unwrap()).unwrap();
    let datum = record.value.clone().unwrap();
    let expected = decode(&schema, &datum);
    let expected = &expected;
    // Enough datums to fill several blocks.
    let count = 2 * (64 * 1024 / datum.len()) + 3;
    for codec in [AvroCodec::Null, AvroCodec::Deflate, AvroCodec::Snappy, AvroCodec::Zstandard] {
        let mut file = AvroContainer::new(Vec::new(), &schema, codec).unwrap();
        for _ in 0..count {
            file.push(&datum).unwrap();
        }
        let bytes = file.finish().unwrap();
        let reader = apache_avro::Reader::new(&bytes[..]).unwrap();
        let values: Vec<Avro> = reader.map(|v| v.unwrap()).collect();
        assert_eq!(values.len(), count, "{codec:?}");
        // Compared as text: the event's NaN is not equal to itself.
        let expected = format!("{expected:?}");
        assert!(values.iter().all(|v| format!("{v:?}") == expected), "{codec:?}");
    }
}

/// The decoded datum without the envelope's `ts_*` fields, which hold the
/// moment of writing; as text, since NaN is not equal to itself.
fn timeless(schema: &AvroSchema, datum: &[u8]) -> String {
    match decode(schema, datum) {
        Avro::Record(fields) => {
            format!("{:?}", fields.into_iter().filter(|(n, _)| !n.starts_with("ts_")).collect::<Vec<_>>())
        }
        other => format!("{other:?}"),
    }
}

#[test]
fn the_direct_writer_writes_what_the_json_payload_becomes() {
    let insert = event(Op::Insert);
    let mut key_change = event(Op::Update);
    let mut old = key_change.after.clone().unwrap();
    old.values[0] = Cell::Int(6);
    key_change.before = Some(old);
    let mut key_only_delete = event(Op::Delete);
    key_only_delete.after = None;
    key_only_delete.before = Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Cell::Int(7)] });
    let mut unchanged = event(Op::Update);
    unchanged.after.as_mut().unwrap().values[2] = Cell::Unchanged;
    let mut mysql = event(Op::Insert);
    mysql.position =
        Position::Mysql(sluice_core::BinlogPos { file: "bin.000003".into(), offset: 4, seq: 0, gtid_before: None });
    mysql.origin = Origin::Mysql {
        server_id: 1,
        file: "bin.000003".into(),
        pos: 400,
        row: 2,
        thread: Some(9),
        gtid: Some("0-1-5".into()),
        mariadb: true,
        tx: None,
    };
    for event in [insert, key_change, key_only_delete, unchanged, mysql] {
        let (direct, json) = (records(&event), json_records(&event));
        assert_eq!(direct.len(), json.len(), "{:?}", event.op);
        for (direct, json) in direct.iter().zip(&json) {
            if let (Some(datum), Some(payload)) = (&direct.value, &json.value) {
                let schema = AvroSchema::from_connect(direct.value_schema.as_deref().unwrap()).unwrap();
                let mut transcoded = Vec::new();
                schema.write(payload, &mut transcoded).unwrap();
                assert_eq!(timeless(&schema, datum), timeless(&schema, &transcoded), "{:?} value", event.op);
            }
            if let (Some(datum), Some(payload)) = (&direct.key, &json.key) {
                let schema = AvroSchema::from_connect(direct.key_schema.as_deref().unwrap()).unwrap();
                let mut transcoded = Vec::new();
                schema.write(payload, &mut transcoded).unwrap();
                assert_eq!(datum, &transcoded, "{:?} key", event.op);
            }
            assert_eq!((direct.kind, direct.value.is_some()), (json.kind, json.value.is_some()));
        }
    }
}
