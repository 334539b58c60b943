use std::sync::Arc;

use sluice_core::{ColumnSchema, ColumnType, Event, Lsn, Op, Origin, Position, Row, TableSchema, Value};

use super::*;

fn schema() -> Arc<TableSchema> {
    let column = |name: &str, ty: ColumnType, nullable: bool| ColumnSchema {
        name: name.into(),
        type_name: "t".into(),
        ty,
        nullable,
        default: None,
    };
    Arc::new(TableSchema {
        columns: vec![
            column("id", ColumnType::Int32, false),
            column("amount", ColumnType::Decimal { precision: Some(10), scale: Some(2) }, true),
        ],
        primary_key: vec![0],
    })
}

fn row(id: i64, amount: &str) -> Option<Row> {
    let columns = vec![Arc::from("id"), Arc::from("amount")].into();
    Some(Row { columns, values: vec![Value::Int(id), Value::Decimal(amount.into())] })
}

fn event(op: Op, before: Option<Row>, after: Option<Row>) -> Event {
    Event {
        op,
        source_id: "shop".into(),
        database: "shop".into(),
        table: "public.orders".into(),
        key: None,
        before,
        after,
        schema_version: 1,
        position: Position::Postgres { commit_lsn: Lsn(0x100), seq: 0 },
        tx_id: "7".into(),
        tx_end: true,
        commit_time_us: 1_700_000_000_000_000,
        schema: Some(schema()),
        origin: Origin::Postgres { lsn: 0x90, last_commit_lsn: Some(0x80), tx: None },
        route: None,
        shape: Default::default(),
    }
}

fn encode(settings: DebeziumSettings, event: &Event) -> Result<Vec<Record>, crate::FormatError> {
    let mut out = Vec::new();
    Encoder::new(settings).encode(event, &mut out).map(|()| out)
}

fn json(bytes: &Option<Vec<u8>>) -> serde_json::Value {
    bytes.as_ref().map_or(serde_json::Value::Null, |b| serde_json::from_slice(b).unwrap())
}

#[test]
fn a_key_change_is_a_delete_its_tombstone_and_a_create() {
    let update = event(Op::Update, row(1, "1.00"), row(2, "1.00"));
    let records = encode(DebeziumSettings::default(), &update).unwrap();
    let kinds: Vec<_> = records.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RecordKind::Change, RecordKind::Tombstone, RecordKind::Change]);
    assert_eq!(json(&records[0].value)["op"], "d");
    assert_eq!(json(&records[0].key), serde_json::json!({"id": 1}));
    assert_eq!(records[0].headers, [("__debezium.newkey".to_string(), b"{\"id\":2}".to_vec())]);
    assert!(records[1].value.is_none());
    assert_eq!(json(&records[2].value)["op"], "c");
    assert_eq!(json(&records[2].key), serde_json::json!({"id": 2}));
    assert_eq!(records[2].headers, [("__debezium.oldkey".to_string(), b"{\"id\":1}".to_vec())]);
}

#[test]
fn tombstones_follow_deletes_only_when_asked() {
    let delete = event(Op::Delete, row(1, "1.00"), None);
    assert_eq!(encode(DebeziumSettings::default(), &delete).unwrap().len(), 2);
    let off = DebeziumSettings { tombstones: false, ..DebeziumSettings::default() };
    assert_eq!(encode(off, &delete).unwrap().len(), 1);
}

#[test]
fn a_value_without_a_debezium_form_is_refused_not_replaced() {
    let insert = event(Op::Insert, None, row(1, "NaN"));
    let err = encode(DebeziumSettings::default(), &insert).unwrap_err();
    assert!(err.0.contains("amount") && err.0.contains("NaN"), "{err}");
    let mut no_schema = event(Op::Insert, None, row(1, "1.00"));
    no_schema.schema = None;
    assert!(encode(DebeziumSettings::default(), &no_schema).unwrap_err().0.contains("column types"));
}

#[test]
fn truncates_are_skipped_unless_included_and_schemas_wrap_the_payload() {
    let truncate = event(Op::Truncate, None, None);
    assert!(encode(DebeziumSettings::default(), &truncate).unwrap().is_empty());
    let settings = DebeziumSettings { truncate: Include::Include, schemas: true, ..DebeziumSettings::default() };
    let records = encode(settings, &truncate).unwrap();
    let value = json(&records[0].value);
    assert_eq!(value["payload"]["op"], "t");
    assert_eq!(value["schema"]["name"], "shop.public.orders.Envelope");
    assert_eq!(value["payload"]["source"]["sequence"], "[\"128\",\"144\"]");
    assert!(records[0].key.is_none());
}

#[test]
fn snapshot_rows_carry_their_mark_and_log_events_false() {
    use sluice_core::schema::SnapshotMark;
    let cases = [
        (Op::Read, Origin::Snapshot(SnapshotMark::First), "first"),
        (Op::Read, Origin::Snapshot(SnapshotMark::Row), "true"),
        (Op::Read, Origin::Snapshot(SnapshotMark::LastInTable), "last_in_data_collection"),
        (Op::Read, Origin::Snapshot(SnapshotMark::Incremental), "incremental"),
        (Op::Insert, Origin::Postgres { lsn: 0x90, last_commit_lsn: None, tx: None }, "false"),
    ];
    for (op, origin, expected) in cases {
        let event = Event { origin, ..event(op, None, row(1, "1.00")) };
        let records = encode(DebeziumSettings::default(), &event).unwrap();
        assert_eq!(json(&records[0].value)["source"]["snapshot"], expected);
    }
}

/// With transaction metadata on: a BEGIN before the transaction's first
/// written record, each change numbered (a key change is two), an END with
/// the counts, and a skipped truncate left out of every number.
#[test]
fn transaction_metadata_numbers_what_is_written() {
    use sluice_core::TxCounter;
    let settings = DebeziumSettings { transaction_metadata: true, ..DebeziumSettings::default() };
    let mut counter = TxCounter::default();
    let mut events = vec![
        event(Op::Truncate, None, None),
        event(Op::Insert, None, row(1, "1.00")),
        event(Op::Update, row(1, "1.00"), row(2, "1.00")),
    ];
    for (i, event) in events.iter_mut().enumerate() {
        event.tx_end = i == 2;
        counter.stamp(event);
    }
    let mut encoder = Encoder::new(settings);
    let mut records = Vec::new();
    for event in &events {
        encoder.encode(event, &mut records).unwrap();
    }
    let values: Vec<serde_json::Value> = records.iter().map(|r| json(&r.value)).collect();
    let kinds: Vec<RecordKind> = records.iter().map(|r| r.kind).collect();
    use RecordKind::{Change, Tombstone, Transaction};
    assert_eq!(kinds, [Transaction, Change, Change, Tombstone, Change, Transaction]);
    assert_eq!(values[0]["status"], "BEGIN");
    assert_eq!(values[0]["id"], "7:144");
    let orders: Vec<(i64, i64)> = [1, 2, 4]
        .iter()
        .map(|&i| {
            let block = &values[i]["transaction"];
            (block["total_order"].as_i64().unwrap(), block["data_collection_order"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(orders, [(1, 1), (2, 2), (3, 3)], "the skipped truncate takes no number");
    assert_eq!(values[5]["status"], "END");
    assert_eq!(values[5]["event_count"], 3);
    assert_eq!(
        values[5]["data_collections"],
        serde_json::json!([{"data_collection": "public.orders", "event_count": 3}])
    );
}
