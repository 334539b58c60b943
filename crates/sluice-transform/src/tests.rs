use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use sluice_core::{
    ColumnSchema, ColumnType, Event, Lsn, Op, Origin, Position, Row, TableSchema, Value, format_compact,
};

use crate::{TransformConfig, Transforms, Verdict};

/// A column of the test schemas: every one nullable but `id`.
pub(crate) fn column(name: &str, ty: ColumnType) -> ColumnSchema {
    ColumnSchema { name: name.into(), type_name: "t".into(), ty, nullable: name != "id", default: None }
}

pub(crate) fn schema() -> Arc<TableSchema> {
    Arc::new(TableSchema {
        columns: vec![
            column("id", ColumnType::Int64),
            column("email", ColumnType::Text { length: None }),
            column("status", ColumnType::Text { length: None }),
            column("note", ColumnType::Text { length: None }),
        ],
        primary_key: vec![0],
    })
}

pub(crate) fn row(id: i64, email: Value, status: &str, note: Value) -> Row {
    let columns = vec![Arc::from("id"), "email".into(), "status".into(), "note".into()].into();
    Row { columns, values: vec![Value::Int(id), email, Value::Text(status.into()), note] }
}

pub(crate) fn event(op: Op, table: &str, before: Option<Row>, after: Option<Row>) -> Event {
    let id = before.as_ref().or(after.as_ref()).and_then(|r| r.get("id")).cloned().unwrap_or(Value::Null);
    Event {
        op,
        source_id: "shop".into(),
        database: "shop".into(),
        table: table.into(),
        key: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![id] }),
        before,
        after,
        schema_version: 1,
        position: Position::Postgres { commit_lsn: Lsn(0x100), seq: 3 },
        tx_id: "7".into(),
        tx_end: true,
        commit_time_us: 1_700_000_000_000_000,
        schema: Some(schema()),
        origin: Origin::None,
        route: None,
        shape: Default::default(),
    }
}

pub(crate) fn insert(id: i64, status: &str) -> Event {
    event(
        Op::Insert,
        "public.users",
        None,
        Some(row(id, Value::Text(format_compact!("u{id}@example.com")), status, Value::Null)),
    )
}

pub(crate) fn update(id: i64, old: &str, new: &str) -> Event {
    let email = || Value::Text(format_compact!("u{id}@example.com"));
    event(
        Op::Update,
        "public.users",
        Some(row(id, email(), old, Value::Null)),
        Some(row(id, email(), new, Value::Null)),
    )
}

pub(crate) fn transforms(yaml: &str) -> Transforms {
    let configs: Vec<TransformConfig> = serde_yaml::from_str(yaml).unwrap();
    Transforms::build(&configs).unwrap()
}

pub(crate) fn build_error(yaml: &str) -> String {
    match serde_yaml::from_str::<Vec<TransformConfig>>(yaml) {
        Ok(configs) => Transforms::build(&configs).expect_err("the config is refused"),
        Err(e) => e.to_string(),
    }
}

fn kept(transforms: &Transforms, mut event: Event) -> Option<Event> {
    match transforms.apply(&mut event) {
        Ok(Verdict::Keep) => Some(event),
        Ok(Verdict::Drop) => None,
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn a_filter_drops_what_matches_every_condition_and_keep_inverts_it() {
    let drop =
        transforms("- { type: filter, ops: [c], tables: ['public.*'], where: [{ column: status, in: [test, spam] }] }");
    assert!(kept(&drop, insert(1, "test")).is_none());
    assert!(kept(&drop, insert(2, "paid")).is_some(), "the status test fails");
    assert!(kept(&drop, update(3, "paid", "test")).is_some(), "not an insert");
    let mut other = insert(4, "spam");
    other.table = "audit.users".into();
    assert!(kept(&drop, other).is_some(), "another schema");

    let keep = transforms("- { type: filter, action: keep, where: [{ column: status, equals: paid }] }");
    assert!(kept(&keep, insert(5, "paid")).is_some());
    assert!(kept(&keep, insert(6, "new")).is_none());
}

#[test]
fn conditions_test_nulls_regexes_numbers_and_changes() {
    let null = transforms("- { type: filter, action: keep, where: [{ column: note, is_null: true }] }");
    assert!(kept(&null, insert(1, "a")).is_some());
    let regex = transforms(r"- { type: filter, where: [{ column: email, regex: '^u1\d*@' }] }");
    assert!(kept(&regex, insert(12, "a")).is_none());
    assert!(kept(&regex, insert(22, "a")).is_some());
    let number = transforms("- { type: filter, where: [{ column: id, equals: 7 }] }");
    assert!(kept(&number, insert(7, "a")).is_none());
    assert!(kept(&number, insert(8, "a")).is_some());
    let changed = transforms("- { type: filter, action: keep, where: [{ column: status, changed: true }] }");
    assert!(kept(&changed, update(1, "new", "paid")).is_some());
    assert!(kept(&changed, update(1, "paid", "paid")).is_none());
    assert!(kept(&changed, insert(1, "paid")).is_none(), "an insert changes nothing");
    // A value the source did not send (TOAST) is not known to have changed.
    let mut toast = update(1, "new", "paid");
    toast.after.as_mut().unwrap().values[2] = Value::Unchanged;
    assert!(kept(&changed, toast).is_none());
}

#[test]
fn schema_changes_and_messages_pass_a_filter_that_does_not_name_them() {
    let keep = transforms("- { type: filter, action: keep, where: [{ column: status, equals: paid }] }");
    let ddl = event(Op::Schema, "public.users", None, None);
    assert!(kept(&keep, ddl).is_some());
    let drop_ddl = transforms("- { type: filter, ops: [s], tables: ['public.*'] }");
    assert!(kept(&drop_ddl, event(Op::Schema, "public.users", None, None)).is_none());
    assert!(kept(&drop_ddl, insert(1, "a")).is_some());
}

#[test]
fn a_delete_is_tested_on_its_old_row() {
    let drop = transforms("- { type: filter, where: [{ column: status, equals: test }] }");
    let delete = event(Op::Delete, "public.users", Some(row(1, Value::Null, "test", Value::Null)), None);
    assert!(kept(&drop, delete).is_none());
}

#[test]
fn columns_exclude_and_rename_rows_and_schema_but_keep_the_key() {
    let columns = transforms("- { type: columns, exclude: [note, id], rename: { email: contact, id: user_id } }");
    let out = kept(&columns, update(1, "new", "paid")).unwrap();
    for row in [out.before.as_ref().unwrap(), out.after.as_ref().unwrap()] {
        assert_eq!(row.columns.iter().map(|c| &**c).collect::<Vec<_>>(), ["user_id", "contact", "status"]);
        assert_eq!(row.values[0], Value::Int(1));
    }
    assert_eq!(out.key.as_ref().unwrap().columns[0].as_ref(), "user_id");
    let schema = out.schema.as_ref().unwrap();
    assert_eq!(schema.columns.iter().map(|c| &*c.name).collect::<Vec<_>>(), ["user_id", "contact", "status"]);
    assert_eq!(schema.primary_key, [0]);
    assert_eq!(out.position, update(1, "new", "paid").position);
    assert_eq!(out.id(), update(1, "new", "paid").id(), "a transform never changes an event's id");

    let include = transforms("- { type: columns, include: [status] }");
    let out = kept(&include, insert(2, "paid")).unwrap();
    let after = out.after.unwrap();
    assert_eq!(after.columns.iter().map(|c| &**c).collect::<Vec<_>>(), ["id", "status"]);
}

#[test]
fn masks_hide_values_everywhere_and_type_them_as_text() {
    let fixed = transforms("- { type: mask, columns: [email, id], with: { fixed: '***' } }");
    let out = kept(&fixed, update(5, "a", "b")).unwrap();
    for row in [&out.key, &out.before, &out.after] {
        let row = row.as_ref().unwrap();
        assert_eq!(row.get("id"), Some(&Value::Text("***".into())));
        assert!(row.get("email").is_none_or(|v| *v == Value::Text("***".into())));
    }
    assert!(matches!(out.schema.as_ref().unwrap().columns[1].ty, ColumnType::Text { .. }));
    assert!(matches!(out.schema.as_ref().unwrap().columns[0].ty, ColumnType::Text { .. }));

    let hashed = transforms("- { type: mask, columns: [email, note], with: { sha256: { salt: pepper } } }");
    let out = kept(&hashed, insert(1, "a")).unwrap();
    let after = out.after.unwrap();
    // Python: hashlib.sha256(b"pepperu1@example.com").hexdigest()
    assert_eq!(
        after.get("email"),
        Some(&Value::Text("47ce0cd5c63317134e85eaf44c97cc2288a3c88b3b3cf7cfb2f1d6589c364b1b".into()))
    );
    assert_eq!(after.get("note"), Some(&Value::Null), "NULL stays NULL");

    let truncated = transforms("- { type: mask, columns: [email], with: { truncate: 3 } }");
    let after = kept(&truncated, insert(1, "a")).unwrap().after.unwrap();
    assert_eq!(after.get("email"), Some(&Value::Text("u1@".into())));
}

#[test]
fn steps_run_in_order_and_count_what_they_do() {
    let list = transforms(
        "- { type: mask, columns: [status], with: { fixed: x } }\n- { type: filter, where: [{ column: status, equals: x }], ops: [d] }",
    );
    assert!(kept(&list, insert(1, "a")).is_some());
    let delete = event(Op::Delete, "public.users", Some(row(1, Value::Null, "a", Value::Null)), None);
    assert!(kept(&list, delete).is_none(), "the filter sees the masked value");
    let counts: Vec<(&str, u64, u64, u64)> = list
        .counts()
        .map(|(kind, c)| (kind, c.events_in.load(Relaxed), c.events_out.load(Relaxed), c.dropped.load(Relaxed)))
        .collect();
    assert_eq!(counts, [("mask", 2, 2, 0), ("filter", 2, 1, 1)]);
}

#[test]
fn bad_settings_name_the_step_and_the_field() {
    assert!(build_error("- { type: unknown }").contains("unknown variant `unknown`"));
    let regex = build_error("- { type: filter, where: [{ column: email, regex: '(' }] }");
    assert!(
        regex.starts_with("transform 1 (filter): where: the regex for column \"email\" does not compile"),
        "{regex}"
    );
    let two = build_error("- { type: filter, where: [{ column: a, equals: 1, is_null: true }] }");
    assert!(two.contains("column \"a\" has 2 tests"), "{two}");
    assert!(build_error("- { type: filter, ops: [x] }").contains("\"x\" is not an op"));
    assert!(build_error("- { type: columns, include: [a], exclude: [b] }").contains("not both"));
    assert!(build_error("- { type: columns, rename: { a: c, b: c } }").contains("two columns are renamed to \"c\""));
    assert!(build_error("- { type: mask, columns: [a], with: { sha256: { salt: '' } } }").contains("salt is empty"));
    assert!(build_error("- { type: mask, columns: [], with: { fixed: x } }").contains("at least one column"));
    assert!(build_error("- { type: mask, columns: [a], with: { fixed: x, truncate: 2 } }").contains("exactly one of"));
    assert!(build_error("- { type: filter, typo: 1 }").contains("unknown field `typo`"));
}

/// Upper-cases the status, then fails on status `BAD`.
struct Picky;

impl crate::Transform for Picky {
    fn apply(&self, event: &mut Event) -> Result<Verdict, crate::TransformError> {
        let after = event.after.as_mut().expect("an insert");
        let status = after.values[2].text().to_uppercase();
        after.values[2] = Value::Text(status.clone().into());
        if status == "BAD" { Err(crate::TransformError("status BAD".into())) } else { Ok(Verdict::Keep) }
    }
}

#[test]
fn a_failing_step_names_itself_and_the_steps_after_it_do_not_run() {
    let mask =
        crate::config::TransformConfig::Mask(serde_yaml::from_str("{ columns: [email], with: { fixed: x } }").unwrap());
    let list = Transforms {
        steps: vec![
            crate::Step { kind: "mask", transform: mask.build().unwrap(), counts: Default::default() },
            crate::Step { kind: "picky", transform: Box::new(Picky), counts: Default::default() },
            crate::Step { kind: "mask", transform: mask.build().unwrap(), counts: Default::default() },
        ],
    };
    let mut good = insert(1, "ok");
    assert_eq!(list.apply(&mut good), Ok(Verdict::Keep));
    assert_eq!(good.after.as_ref().unwrap().get("status"), Some(&Value::Text("OK".into())));
    let mut bad = insert(2, "bad");
    let error = list.apply(&mut bad).unwrap_err();
    assert_eq!(error.to_string(), "transform 2 (picky): status BAD");
    let counts: Vec<u64> = list.counts().map(|(_, c)| c.events_in.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(counts, [2, 2, 1], "the mask after the failing step saw the good event only");
    let errored: Vec<u64> = list.counts().map(|(_, c)| c.errored.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(errored, [0, 1, 0]);
}

#[test]
fn a_mask_names_the_columns_a_table_lacks() {
    let config: crate::MaskConfig = serde_yaml::from_str("{ columns: [email, emial], with: { fixed: x } }").unwrap();
    let mask = crate::mask::Mask::new(&config).unwrap();
    assert_eq!(mask.missing(&schema()), ["emial"]);
}

#[test]
fn a_route_names_the_destination_and_leaves_the_event_its_table() {
    let routes = transforms(
        r#"
- { type: route, regex: 'public\.users_(\d{4})', to: "archive.users_all_$1" }
- { type: route, tables: [other.*], to: "${db}_${schema}_${name}" }
"#,
    );
    let mut sharded = insert(1, "new");
    sharded.table = "public.users_2024".into();
    let routed = kept(&routes, sharded.clone()).unwrap();
    assert_eq!(routed.destination(), "archive.users_all_2024");
    assert_eq!((&*routed.table, &routed.position, routed.id()), (&*sharded.table, &sharded.position, sharded.id()));
    // The regex covers whole names only.
    let mut longer = insert(1, "new");
    longer.table = "public.users_20245".into();
    assert_eq!(kept(&routes, longer).unwrap().route, None);
    let mut other = insert(1, "new");
    other.table = "other.t".into();
    assert_eq!(kept(&routes, other).unwrap().destination(), "shop_other_t");
    assert_eq!(kept(&routes, insert(1, "new")).unwrap().destination(), "public.users");
}

#[test]
fn a_route_that_gives_no_name_is_an_error_naming_the_table() {
    let routes = transforms(r#"[{ type: route, regex: 'public\.users(_\d+)?', to: "$1" }]"#);
    let mut event = insert(1, "new");
    let error = routes.apply(&mut event).unwrap_err();
    assert!(error.to_string().contains("gives table public.users an empty destination"), "{error}");
    assert_eq!(event.route, None);
    assert!(build_error(r#"[{ type: route, regex: "(", to: x }]"#).contains("transform 1 (route): regex:"));
}
