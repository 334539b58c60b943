//! `vrl`: scripts over events.

use sluice_core::{ColumnType, Op, Value};

use crate::tests::{build_error, insert, transforms};
use crate::{TransformConfig, Verdict};

fn config(yaml: &str) -> TransformConfig {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn a_script_changes_the_rows_and_the_route_and_the_schema_follows() {
    let script = transforms(
        "- type: vrl\n  source: |\n    .after.status = upcase!(.after.status)\n    del(.after.note)\n    .after.tag = \"t-\" + to_string!(.after.id)\n    .route = \"people\"\n",
    );
    let mut event = insert(7, "new");
    assert_eq!(script.apply(&mut event).unwrap(), Verdict::Keep);
    let after = event.after.as_ref().unwrap();
    let columns: Vec<&str> = after.columns.iter().map(|c| &**c).collect();
    assert_eq!(columns, ["id", "email", "status", "tag"]);
    assert_eq!(after.get("status"), Some(&Value::Text("NEW".into())));
    assert_eq!(after.get("tag"), Some(&Value::Text("t-7".into())));
    assert_eq!(after.get("id"), Some(&Value::Int(7)), "an integer stays one");
    assert_eq!(event.route.as_deref(), Some("people"));
    let schema = event.schema.as_ref().unwrap();
    let names: Vec<&str> = schema.columns.iter().map(|c| &*c.name).collect();
    assert_eq!(names, ["id", "email", "status", "tag"]);
    assert_eq!(schema.columns[3].ty, ColumnType::Text { length: None });
    assert_eq!(schema.primary_key, [0]);
    assert_eq!((event.op, &*event.table), (Op::Insert, "public.users"), "the rest is the source's");
}

#[test]
fn abort_drops_and_a_runtime_error_names_the_line_and_column() {
    let script = transforms(
        "- type: vrl\n  source: |\n    if .after.status == \"skip\" { abort }\n    .after.parsed = parse_json!(.after.email)\n",
    );
    assert_eq!(script.apply(&mut insert(1, "skip")).unwrap(), Verdict::Drop);
    let error = script.apply(&mut insert(2, "new")).unwrap_err().to_string();
    assert!(error.contains("line 2, column 17"), "{error}");
    assert!(error.contains("parse_json"), "{error}");
}

#[test]
fn compile_errors_name_the_line_and_column_and_the_rest_is_read_only() {
    let error = build_error("- type: vrl\n  source: |\n    .after.a = 1\n    .after.b = upcase(\n");
    assert!(error.contains("line "), "{error}");
    let error = build_error("- type: vrl\n  source: |\n    .after.a = 1\n    .after.b = downcase(.after.a)\n");
    assert!(error.contains("line 2, column 21") && error.contains("invalid argument type"), "{error}");
    let error = build_error("- type: vrl\n  source: '.op = \"d\"'\n");
    assert!(error.contains("read-only"), "{error}");
    let error = build_error("- type: vrl\n  file: /nonexistent/script.vrl\n");
    assert!(error.contains("cannot read \"/nonexistent/script.vrl\""), "{error}");
    let error = build_error("- type: vrl\n  source: '.'\n  file: x.vrl\n");
    assert!(error.contains("one of them"), "{error}");
}

#[test]
fn nondeterministic_calls_are_found() {
    let clock = config("type: vrl\nsource: '.after.seen = now()'\n");
    assert_eq!(clock.nondeterministic().unwrap().as_deref(), Some("now()"));
    let id = config("type: vrl\nsource: '.after.id2 = uuid_v4()'\n");
    assert_eq!(id.nondeterministic().unwrap().as_deref(), Some("uuid_v4()"));
    let pure = config("type: vrl\nsource: '.after.email = downcase(string!(.after.email))'\n");
    assert_eq!(pure.nondeterministic().unwrap(), None);
}

#[test]
fn the_documented_example_gives_the_documented_result() {
    use std::sync::Arc;
    let docs = include_str!("../../../docs/transforms.md");
    let vrl = &docs[docs.find("## `vrl`").unwrap()..];
    let yaml = &vrl[vrl.find("```yaml\n").unwrap() + 8..];
    let yaml = &yaml[..yaml.find("```").unwrap()];
    let script = transforms(yaml);
    let columns: Vec<Arc<str>> = ["id", "status", "amount", "region", "internal_notes"].map(Arc::from).to_vec();
    let row = sluice_core::Row {
        columns: columns.into(),
        values: vec![
            Value::Int(1),
            Value::Text("paid".into()),
            Value::Decimal("12.50".into()),
            Value::Text("EU".into()),
            Value::Text("x".into()),
        ],
    };
    let mut event = crate::tests::event(Op::Insert, "public.orders", None, Some(row.clone()));
    assert_eq!(script.apply(&mut event).unwrap(), Verdict::Keep);
    let after = event.after.as_ref().unwrap();
    let columns: Vec<&str> = after.columns.iter().map(|c| &**c).collect();
    assert_eq!(columns, ["id", "status", "amount", "region", "amount_cents"]);
    assert_eq!(
        after.values[1..],
        [Value::Text("PAID".into()), Value::Decimal("12.50".into()), Value::Text("EU".into()), Value::Int(1250)]
    );
    assert_eq!(event.route.as_deref(), Some("orders_eu"));
    let mut gone = crate::tests::event(Op::Delete, "public.orders", Some(row), None);
    assert_eq!(script.apply(&mut gone).unwrap(), Verdict::Drop);
}

#[test]
fn a_script_that_only_deletes_or_only_routes_still_counts() {
    let deletes = transforms("- { type: vrl, source: 'del(.after.note)' }");
    let mut event = insert(3, "new");
    deletes.apply(&mut event).unwrap();
    let columns: Vec<&str> = event.after.as_ref().unwrap().columns.iter().map(|c| &**c).collect();
    assert_eq!(columns, ["id", "email", "status"]);
    let routes = transforms("- { type: vrl, source: '.route = \"elsewhere\"' }");
    let mut event = insert(3, "new");
    routes.apply(&mut event).unwrap();
    assert_eq!(event.route.as_deref(), Some("elsewhere"));
    assert_eq!(
        event,
        {
            let mut e = insert(3, "new");
            e.route = Some("elsewhere".into());
            e
        },
        "nothing else changes"
    );
}

#[test]
fn columns_a_script_never_names_stay_as_they_were() {
    use std::sync::Arc;
    // Only `status` is named: the email, a bytes value here, is never made
    // into a VRL value, so it keeps its kind, and the column list stays
    // the one the source built.
    let script = transforms("- { type: vrl, source: '.after.status = upcase!(.after.status)' }");
    let mut event = insert(4, "new");
    let after = event.after.as_mut().unwrap();
    after.values[1] = Value::Bytes(vec![0xff, 0x00]);
    let columns = Arc::clone(&after.columns);
    script.apply(&mut event).unwrap();
    let after = event.after.as_ref().unwrap();
    assert!(Arc::ptr_eq(&after.columns, &columns), "the column list is shared, not rebuilt");
    assert_eq!(after.values, [Value::Int(4), Value::Bytes(vec![0xff, 0x00]), Value::Text("NEW".into()), Value::Null]);
}

#[test]
fn a_script_that_takes_the_row_whole_sees_every_column() {
    let script = transforms("- { type: vrl, source: '.after.names = join!(keys!(.after), \",\")' }");
    let mut event = insert(5, "new");
    script.apply(&mut event).unwrap();
    let after = event.after.as_ref().unwrap();
    assert_eq!(after.get("names"), Some(&Value::Text("email,id,note,status".into())));
    assert_eq!(after.get("email"), Some(&Value::Text("u5@example.com".into())));
}

#[test]
fn a_column_the_source_did_not_send_takes_what_the_script_sets() {
    for source in ["'.after.note = \"set\"'", "'.after = merge!(.after, {\"note\": \"set\"})'"] {
        let script = transforms(&format!("- {{ type: vrl, source: {source} }}"));
        let mut event = insert(6, "new");
        let mut untouched = insert(6, "new");
        for e in [&mut event, &mut untouched] {
            e.after.as_mut().unwrap().values[3] = Value::Unchanged;
        }
        script.apply(&mut event).unwrap();
        let columns: Vec<&str> = event.after.as_ref().unwrap().columns.iter().map(|c| &**c).collect();
        assert_eq!(columns, ["id", "email", "status", "note"], "{source}: no second `note`");
        assert_eq!(event.after.as_ref().unwrap().get("note"), Some(&Value::Text("set".into())), "{source}");
        let keep = transforms("- { type: vrl, source: '.after.status = \"new\"' }");
        keep.apply(&mut untouched).unwrap();
        assert_eq!(untouched.after.as_ref().unwrap().get("note"), Some(&Value::Unchanged), "unset stays unsent");
    }
}

#[test]
fn rows_of_one_shape_share_their_column_list_and_schema() {
    use std::sync::Arc;
    let script = transforms(
        "- type: vrl\n  source: |\n    del(.after.note)\n    .after.size = if .after.status == \"big\" { 10 } else { null }\n",
    );
    // As a source gives them: rows of one table share its column list.
    let first = insert(0, "new");
    let mut out: Vec<_> = ["new", "new", "big", "big"]
        .into_iter()
        .enumerate()
        .map(|(id, status)| {
            let mut event = first.clone();
            let after = event.after.as_mut().unwrap();
            after.values[0] = Value::Int(id as i64);
            after.values[2] = Value::Text(status.into());
            script.apply(&mut event).unwrap();
            event
        })
        .collect();
    let (small, big) = (out.remove(0), out.remove(1));
    let (small_after, big_after) = (small.after.as_ref().unwrap(), big.after.as_ref().unwrap());
    let columns: Vec<&str> = big_after.columns.iter().map(|c| &**c).collect();
    assert_eq!(columns, ["id", "email", "status", "size"]);
    assert!(Arc::ptr_eq(&small_after.columns, &big_after.columns), "one list for the shape");
    assert!(Arc::ptr_eq(&out[0].after.as_ref().unwrap().columns, &small_after.columns));
    let (small_schema, big_schema) = (small.schema.as_ref().unwrap(), big.schema.as_ref().unwrap());
    assert!(Arc::ptr_eq(small_schema, out[0].schema.as_ref().unwrap()), "one schema for the same kinds");
    assert_eq!(small_schema.columns[3].ty, ColumnType::Text { length: None }, "a null is declared text");
    assert_eq!(big_schema.columns[3].ty, ColumnType::Int64, "the kinds of the values decide, not the rows before");
    assert!(Arc::ptr_eq(big_schema, out[1].schema.as_ref().unwrap()));
}
