//! The target column type for each source column, and which existing
//! target types can take a source type's values. Types are written the
//! way the server's `format_type` writes them, so a type read back from
//! the catalog compares with a wanted one as text.

use sluice_core::{ColumnSchema, ColumnType, Value};

/// Types every PostgreSQL server has, carried under their own name when a
/// PostgreSQL source declares them; any other type the sink does not know
/// (user-defined types, MySQL's spatial types) becomes `text`.
const BUILTIN: &[&str] = &[
    "inet", "cidr", "macaddr", "macaddr8", "tsvector", "tsquery", "pg_lsn", "int4range", "int8range", "numrange",
    "tsrange", "tstzrange", "daterange",
];

/// The target type of a source column.
pub fn target_type(column: &ColumnSchema) -> String {
    of(&column.ty, &column.type_name)
}

fn of(ty: &ColumnType, type_name: &str) -> String {
    let precision = |name: &str, p: u32, zone: &str| {
        if p >= 6 { format!("{name} {zone}") } else { format!("{name}({p}) {zone}") }
    };
    match ty {
        ColumnType::Bool => "boolean".into(),
        ColumnType::Int16 | ColumnType::Year => "smallint".into(),
        ColumnType::Int32 => "integer".into(),
        ColumnType::Int64 => "bigint".into(),
        ColumnType::Float32 => "real".into(),
        ColumnType::Float64 => "double precision".into(),
        ColumnType::Decimal { precision: Some(p), scale } => format!("numeric({p},{})", scale.unwrap_or(0)),
        ColumnType::Decimal { .. } => "numeric".into(),
        ColumnType::Text { length: Some(n) } if matches!(type_name, "bpchar" | "char") => format!("character({n})"),
        ColumnType::Text { length: Some(n) } => format!("character varying({n})"),
        ColumnType::Text { length: None } | ColumnType::Enum { .. } | ColumnType::Set { .. } => "text".into(),
        ColumnType::Bytes => "bytea".into(),
        ColumnType::Json if type_name == "json" => "json".into(),
        ColumnType::Json => "jsonb".into(),
        ColumnType::Uuid => "uuid".into(),
        ColumnType::Date => "date".into(),
        ColumnType::Time { precision: p } => precision("time", *p, "without time zone"),
        ColumnType::TimeTz { precision: p } => precision("time", *p, "with time zone"),
        ColumnType::Timestamp { precision: p } => precision("timestamp", *p, "without time zone"),
        ColumnType::TimestampTz { precision: p } => precision("timestamp", *p, "with time zone"),
        ColumnType::Interval => "interval".into(),
        ColumnType::Bits { length } if type_name == "varbit" => format!("bit varying({length})"),
        ColumnType::Bits { length } => format!("bit({length})"),
        ColumnType::Xml => "xml".into(),
        ColumnType::Money => "money".into(),
        ColumnType::Array(inner) => format!("{}[]", of(inner, type_name.trim_start_matches('_'))),
        ColumnType::Other if BUILTIN.contains(&type_name) => type_name.to_string(),
        ColumnType::Other => "text".into(),
    }
}

/// The type of a column whose source declares none (the generator), from
/// one of its values.
pub fn type_of_value(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "boolean",
        Value::Int(_) => "bigint",
        Value::UInt(_) => "numeric",
        Value::Float(_) => "double precision",
        Value::Json(_) => "jsonb",
        Value::Bytes(_) => "bytea",
        _ => "text",
    }
}

/// `character varying(20)` → (`character varying`, [20]).
fn split(ty: &str) -> (&str, Vec<u32>) {
    let Some(open) = ty.find('(') else { return (ty, Vec::new()) };
    let Some(close) = ty[open..].find(')') else { return (ty, Vec::new()) };
    let args = ty[open + 1..open + close].split(',').filter_map(|a| a.trim().parse().ok()).collect();
    (ty[..open].trim_end(), args)
}

/// `timestamp(3) with time zone` → `timestamp with time zone`.
fn without_modifier(ty: &str) -> String {
    match (ty.find('('), ty.find(')')) {
        (Some(open), Some(close)) if open < close => format!("{}{}", &ty[..open], &ty[close + 1..]),
        _ => ty.to_string(),
    }
}

/// Whether a column of type `target` takes every value of type `wanted`
/// without loss.
pub fn holds(target: &str, wanted: &str) -> bool {
    if target == wanted {
        return true;
    }
    if let (Some(t), Some(w)) = (target.strip_suffix("[]"), wanted.strip_suffix("[]")) {
        return holds(t, w);
    }
    let integers = ["smallint", "integer", "bigint"];
    let rank = |ty: &str| integers.iter().position(|i| *i == ty);
    let (t_name, t_args) = split(target);
    let (w_name, w_args) = split(wanted);
    match (t_name, w_name) {
        (t, w) if rank(t).is_some() && rank(w).is_some() => rank(t) >= rank(w),
        ("numeric", w) if rank(w).is_some() => t_args.is_empty() || t_args[0] >= 19 + u32::from(w == "bigint"),
        ("numeric", "numeric") => match (t_args.as_slice(), w_args.as_slice()) {
            ([], _) => true,
            ([tp, ts], [wp, ws]) => ts == ws && tp >= wp,
            _ => false,
        },
        ("double precision", "real") => true,
        ("text", "character varying" | "character") => true,
        ("character varying", "character varying" | "character") => {
            t_args.is_empty() || w_args.first().is_some_and(|w| t_args[0] >= *w)
        }
        ("jsonb", "json") => true,
        (t, _) if t.starts_with("time") && without_modifier(target) == without_modifier(wanted) => {
            t_args.first().copied().unwrap_or(6) >= w_args.first().copied().unwrap_or(6)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn column(ty: ColumnType, type_name: &str) -> ColumnSchema {
        ColumnSchema { name: Arc::from("c"), type_name: type_name.into(), ty, nullable: true, default: None }
    }

    #[test]
    fn types_read_as_format_type_writes_them() {
        let cases = [
            (ColumnType::Decimal { precision: Some(12), scale: Some(2) }, "numeric", "numeric(12,2)"),
            (ColumnType::Text { length: Some(20) }, "varchar", "character varying(20)"),
            (ColumnType::Text { length: Some(3) }, "bpchar", "character(3)"),
            (ColumnType::Timestamp { precision: 3 }, "timestamp", "timestamp(3) without time zone"),
            (ColumnType::TimestampTz { precision: 6 }, "timestamptz", "timestamp with time zone"),
            (ColumnType::Array(Box::new(ColumnType::Int32)), "_int4", "integer[]"),
            (ColumnType::Other, "inet", "inet"),
            (ColumnType::Other, "geometry", "text"),
            (ColumnType::Enum { labels: vec![] }, "mood", "text"),
        ];
        for (ty, name, want) in cases {
            assert_eq!(target_type(&column(ty, name)), want);
        }
    }

    #[test]
    fn wider_types_hold_narrower_ones_and_not_the_reverse() {
        assert!(holds("bigint", "integer"));
        assert!(!holds("integer", "bigint"));
        assert!(holds("numeric(20,0)", "bigint"));
        assert!(!holds("numeric(10,0)", "bigint"));
        assert!(holds("numeric(14,2)", "numeric(12,2)"));
        assert!(!holds("numeric(12,3)", "numeric(12,2)"));
        assert!(holds("character varying(30)", "character varying(20)"));
        assert!(!holds("character varying(10)", "character varying(20)"));
        assert!(holds("text", "character varying(20)"));
        assert!(!holds("integer", "text"));
        assert!(holds("timestamp with time zone", "timestamp(3) with time zone"));
        assert!(!holds("timestamp without time zone", "timestamp with time zone"));
        assert!(holds("bigint[]", "integer[]"));
    }
}
