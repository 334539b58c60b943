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
