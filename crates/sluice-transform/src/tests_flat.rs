//! `unwrap` and `outbox`: the flat shapes.

use std::sync::Arc;

use sluice_core::{ColumnType, Event, OldKey, Op, Origin, Row, Shape, TableSchema, Value};

use crate::Verdict;
use crate::tests::{build_error, column, event, insert, row, transforms, update};

fn names(row: &Row) -> Vec<&str> {
    row.columns.iter().map(|c| &**c).collect()
}

fn delete(id: i64) -> Event {
    event(Op::Delete, "public.users", Some(row(id, Value::Null, "gone", Value::Null)), None)
}

#[test]
fn unwrap_rewrite_adds_the_fields_and_marks_deletes() {
    let unwrap = transforms(
        "- { type: unwrap, delete_handling: rewrite, add_fields: [op, table, lsn, source.ts_ms, 'db:database'] }",
    );
    let mut created = insert(1, "new");
    created.origin = Origin::Postgres { lsn: 0x2a, last_commit_lsn: None, tx: None };
    assert_eq!(unwrap.apply(&mut created).unwrap(), Verdict::Keep);
    assert_eq!(created.shape, Shape::Row(OldKey::Nothing));
    let after = created.after.as_ref().unwrap();
    assert_eq!(
        names(after),
        ["id", "email", "status", "note", "__deleted", "__op", "__table", "__lsn", "__source_ts_ms", "__database"]
    );
    assert_eq!(
        after.values[4..],
        [
            Value::Text("false".into()),
            Value::Text("c".into()),
            Value::Text("users".into()),
            Value::Int(0x2a),
            Value::Int(1_700_000_000_000),
            Value::Text("shop".into())
        ]
    );
    let schema = created.schema.as_ref().unwrap();
    let added: Vec<(&str, &ColumnType, bool)> =
        schema.columns[4..].iter().map(|c| (&*c.name, &c.ty, c.nullable)).collect();
    assert_eq!(added[0], ("__deleted", &ColumnType::Text { length: None }, true));
    assert_eq!(added[3], ("__lsn", &ColumnType::Int64, true));
    // The position and lineage stay the source's.
    assert_eq!(created.position, insert(1, "new").position);

    let mut gone = delete(2);
    assert_eq!(unwrap.apply(&mut gone).unwrap(), Verdict::Keep);
    let after = gone.after.as_ref().unwrap();
    assert_eq!(after.get("status"), Some(&Value::Text("gone".into())), "a delete's row is its old row");
    assert_eq!(after.get("__op"), Some(&Value::Text("d".into())));
    assert_eq!(after.get("__deleted"), Some(&Value::Text("true".into())));
    assert_eq!(gone.op, Op::Delete, "the op stays, for the database sinks");
}

#[test]
fn unwrap_tombstone_and_drop_handle_deletes_and_truncates_go() {
    let tombstone = transforms("- { type: unwrap }");
    let mut gone = delete(2);
    assert_eq!(tombstone.apply(&mut gone).unwrap(), Verdict::Keep);
    assert_eq!(gone.shape, Shape::Tombstone);
    assert!(gone.after.is_none() && gone.before.is_some(), "a tombstone keeps the key to write");
    let mut changed = update(3, "a", "b");
    tombstone.apply(&mut changed).unwrap();
    assert_eq!(changed.shape, Shape::Row(OldKey::Nothing));
    assert_eq!(names(changed.after.as_ref().unwrap()), ["id", "email", "status", "note"]);

    let drop = transforms("- { type: unwrap, delete_handling: drop }");
    assert_eq!(drop.apply(&mut delete(2)).unwrap(), Verdict::Drop);
    let mut truncate = event(Op::Truncate, "public.users", None, None);
    assert_eq!(drop.apply(&mut truncate).unwrap(), Verdict::Drop);
    let mut message = event(Op::Message, "app", None, Some(row(1, Value::Null, "m", Value::Null)));
    assert_eq!(drop.apply(&mut message).unwrap(), Verdict::Keep);
    assert_eq!(message.shape, Shape::Envelope, "a log message passes unchanged");
}

#[test]
fn unwrap_writes_the_old_key_of_a_moved_row_as_the_mode_says() {
    let moved = || {
        let mut event = update(3, "a", "b");
        event.after.as_mut().unwrap().values[0] = Value::Int(4);
        event
    };
    let cases = [("tombstone", OldKey::Tombstone), ("drop", OldKey::Nothing), ("rewrite", OldKey::Row)];
    for (mode, old_key) in cases {
        let unwrap = transforms(&format!("- {{ type: unwrap, delete_handling: {mode}, add_fields: [op] }}"));
        let mut event = moved();
        unwrap.apply(&mut event).unwrap();
        assert_eq!(event.shape, Shape::Row(old_key), "{mode}");
        assert_eq!(event.after.as_ref().unwrap().get("__op"), Some(&Value::Text("c".into())), "{mode}");
        if old_key == OldKey::Row {
            let before = event.before.as_ref().unwrap();
            assert_eq!(before.get("__op"), Some(&Value::Text("d".into())));
            assert_eq!(before.get("__deleted"), Some(&Value::Text("true".into())));
        }
    }
}

#[test]
fn unwrap_adds_the_binlog_fields_for_mysql_only() {
    let unwrap = transforms("- { type: unwrap, add_fields: [lsn, file, pos, table] }");
    let mut event = insert(1, "new");
    event.table = "users".into();
    event.origin = Origin::Mysql {
        server_id: 7,
        file: "binlog.000003".into(),
        pos: 880,
        row: 0,
        thread: None,
        gtid: None,
        mariadb: true,
        tx: None,
    };
    unwrap.apply(&mut event).unwrap();
    let after = event.after.as_ref().unwrap();
    assert_eq!(names(after)[4..], ["__file", "__pos", "__table"], "Debezium's MySQL source has no lsn");
    assert_eq!(after.values[4..], [Value::Text("binlog.000003".into()), Value::Int(880), Value::Text("users".into())]);
}

#[test]
fn unwrap_refuses_fields_a_replay_would_change_or_it_cannot_add() {
    assert!(build_error("- { type: unwrap, add_fields: [ts_ms] }").contains("source.ts_ms"));
    assert!(build_error("- { type: unwrap, add_fields: [total_order] }").contains("transaction"));
    assert!(build_error("- { type: unwrap, add_fields: [nonsense] }").contains("lsn"));
    assert!(build_error("- { type: unwrap, add_fields: [op, 'table:op'] }").contains("__op"));
    assert!(
        build_error("- { type: unwrap, delete_handling: rewrite, add_fields: ['op:deleted'] }").contains("__deleted")
    );
}

fn outbox_schema() -> Arc<TableSchema> {
    let text = || ColumnType::Text { length: None };
    Arc::new(TableSchema {
        columns: vec![
            column("id", ColumnType::Uuid),
            column("aggregatetype", text()),
            column("aggregateid", text()),
            column("type", text()),
            column("payload", ColumnType::Json),
        ],
        primary_key: vec![0],
    })
}

fn outbox_row(kind: Value) -> Event {
    let columns = vec![Arc::from("id"), "aggregatetype".into(), "aggregateid".into(), "type".into(), "payload".into()];
    let values = vec![
        Value::Text("6f1c0e3a-0000-4000-8000-000000000001".into()),
        kind,
        Value::Text("order-17".into()),
        Value::Text("OrderCreated".into()),
        Value::Json(sluice_core::JsonText::parse(r#"{"total":12}"#.into()).unwrap()),
    ];
    let mut event = event(Op::Insert, "public.outbox", None, Some(Row { columns: columns.into(), values }));
    event.schema = Some(outbox_schema());
    event
}

#[test]
fn outbox_rows_become_routed_messages_and_the_rest_pass_or_go() {
    let outbox =
        transforms("- { type: outbox, tables: [public.outbox], headers: [{ column: type, name: eventType }] }");
    let mut event = outbox_row(Value::Text("Order".into()));
    assert_eq!(outbox.apply(&mut event).unwrap(), Verdict::Keep);
    assert_eq!(event.route.as_deref(), Some("outbox.event.Order"));
    let Shape::Message(message) = &event.shape else { panic!("not a message: {:?}", event.shape) };
    assert_eq!(message.key.as_deref(), Some("aggregateid"));
    assert_eq!(&*message.value, "payload");
    let headers: Vec<(&str, &str)> = message.headers.iter().map(|(n, c)| (&**n, &**c)).collect();
    assert_eq!(headers, [("id", "id"), ("eventType", "type")]);

    let mut cleanup = outbox_row(Value::Text("Order".into()));
    cleanup.op = Op::Delete;
    (cleanup.before, cleanup.after) = (cleanup.after.take(), None);
    assert_eq!(outbox.apply(&mut cleanup).unwrap(), Verdict::Drop, "deleting sent rows sends nothing");
    let mut other = insert(1, "new");
    assert_eq!(outbox.apply(&mut other).unwrap(), Verdict::Keep);
    assert_eq!(other.shape, Shape::Envelope, "other tables pass unchanged");

    let mut nameless = outbox_row(Value::Null);
    let error = outbox.apply(&mut nameless).unwrap_err();
    assert!(error.to_string().contains("aggregatetype"), "{error}");
}

#[test]
fn outbox_updates_skip_or_fail_and_configs_are_checked() {
    let mut changed = outbox_row(Value::Text("Order".into()));
    changed.op = Op::Update;
    let skip = transforms("- { type: outbox, tables: [public.outbox] }");
    assert_eq!(skip.apply(&mut changed.clone()).unwrap(), Verdict::Drop);
    let fail = transforms("- { type: outbox, tables: [public.outbox], updates: error }");
    assert!(fail.apply(&mut changed).is_err());
    assert!(build_error("- { type: outbox, tables: [] }").contains("tables"));
    assert!(build_error("- { type: outbox, tables: [o], to: 'x.${aggregatetype}' }").contains("routedByValue"));
    let mut renamed = outbox_row(Value::Text("Order".into()));
    let custom = transforms("- { type: outbox, tables: [public.outbox], to: 'events-${routedByValue}', key: null }");
    custom.apply(&mut renamed).unwrap();
    assert_eq!(renamed.route.as_deref(), Some("events-Order"));
    assert!(matches!(&renamed.shape, Shape::Message(m) if m.key.is_none()));
}
