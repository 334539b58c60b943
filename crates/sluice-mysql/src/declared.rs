//! A table's columns as the server declares them, for formats that
//! describe columns (Debezium's schemas), from the recorded schema.

use std::sync::Arc;

use sluice_core::{ColumnSchema, ColumnType, Value};

use crate::schema::{ColumnInfo, TableSchema};
use crate::text_values::text_value;

pub fn table_schema(schema: &TableSchema) -> sluice_core::TableSchema {
    let columns: Vec<ColumnSchema> = schema.columns.iter().map(column).collect();
    let mut keyed: Vec<(u32, usize)> =
        schema.columns.iter().enumerate().filter_map(|(i, c)| Some((c.key_order?, i))).collect();
    if keyed.is_empty() {
        // History recorded before key order was kept: the key columns in column order.
        keyed = schema.columns.iter().enumerate().filter(|(_, c)| c.key).map(|(i, _)| (0, i)).collect();
    }
    keyed.sort_unstable();
    sluice_core::TableSchema { columns, primary_key: keyed.into_iter().map(|(_, i)| i).collect() }
}

fn column(info: &ColumnInfo) -> ColumnSchema {
    let ty = column_type(info);
    let default = info.default.as_deref().and_then(|d| constant_default(d, info));
    ColumnSchema {
        name: info.name.as_str().into(),
        type_name: info.data_type.as_str().into(),
        ty,
        nullable: info.nullable.unwrap_or(true),
        default,
    }
}

/// The number in `name(n)` or the first of `name(p,s)`, and the second.
fn modifiers(column_type: &str) -> (Option<u32>, Option<u32>) {
    let Some(inner) = column_type.split_once('(').and_then(|(_, rest)| rest.split_once(')')).map(|(i, _)| i) else {
        return (None, None);
    };
    let mut numbers = inner.split(',').map(|n| n.trim().parse().ok());
    (numbers.next().flatten(), numbers.next().flatten())
}

pub fn column_type(info: &ColumnInfo) -> ColumnType {
    let (first, second) = modifiers(&info.column_type);
    let labels = || info.labels.iter().map(|l| Arc::from(l.as_str())).collect();
    match (info.data_type.as_str(), info.unsigned) {
        ("tinyint", _) | ("smallint", false) => ColumnType::Int16,
        ("smallint", true) | ("mediumint", _) | ("int" | "integer", false) => ColumnType::Int32,
        ("int" | "integer", true) | ("bigint", _) => ColumnType::Int64,
        ("float", _) => ColumnType::Float32,
        ("double" | "real", _) => ColumnType::Float64,
        ("decimal" | "numeric", _) => ColumnType::Decimal { precision: first, scale: Some(second.unwrap_or(0)) },
        ("bit", _) if first.unwrap_or(1) <= 1 => ColumnType::Bool,
        ("bit", _) => ColumnType::Bits { length: first.unwrap_or(1) },
        ("date", _) => ColumnType::Date,
        ("time", _) => ColumnType::Time { precision: first.unwrap_or(0) },
        ("datetime", _) => ColumnType::Timestamp { precision: first.unwrap_or(0) },
        ("timestamp", _) => ColumnType::TimestampTz { precision: first.unwrap_or(0) },
        ("year", _) => ColumnType::Year,
        ("enum", _) => ColumnType::Enum { labels: labels() },
        ("set", _) => ColumnType::Set { labels: labels() },
        // MySQL's own JSON type; MariaDB's JSON is text, which Debezium
        // writes as a plain string.
        ("json", _) => ColumnType::Json,
        ("uuid", _) => ColumnType::Uuid,
        ("binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob", _) => ColumnType::Bytes,
        ("char" | "varchar", _) => ColumnType::Text { length: first },
        _ if info.charset.is_some() => ColumnType::Text { length: None },
        _ => ColumnType::Other,
    }
}

/// A constant default (`42`, `'hello'`) as a value of the column's type;
/// `NULL` and expressions (`current_timestamp()`) have none.
fn constant_default(text: &str, info: &ColumnInfo) -> Option<Value> {
    let literal = match text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        Some(quoted) => quoted.replace("''", "'"),
        None if text.parse::<f64>().is_ok() => text.to_string(),
        None => return None,
    };
    let value = mysql_async::Value::Bytes(literal.into_bytes());
    Some(text_value(&value, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(data_type: &str, column_type: &str, unsigned: bool) -> ColumnInfo {
        ColumnInfo {
            name: "c".into(),
            data_type: data_type.into(),
            column_type: column_type.into(),
            unsigned,
            charset: matches!(data_type, "varchar" | "char" | "text").then(|| "utf8mb4".into()),
            ..Default::default()
        }
    }

    #[test]
    fn declared_types_follow_debeziums_mapping() {
        assert_eq!(column_type(&info("tinyint", "tinyint(1)", false)), ColumnType::Int16);
        assert_eq!(column_type(&info("int", "int(10) unsigned", true)), ColumnType::Int64);
        assert_eq!(
            column_type(&info("decimal", "decimal(12,2)", false)),
            ColumnType::Decimal { precision: Some(12), scale: Some(2) }
        );
        assert_eq!(column_type(&info("bit", "bit(1)", false)), ColumnType::Bool);
        assert_eq!(column_type(&info("bit", "bit(5)", false)), ColumnType::Bits { length: 5 });
        assert_eq!(column_type(&info("datetime", "datetime(6)", false)), ColumnType::Timestamp { precision: 6 });
        assert_eq!(column_type(&info("timestamp", "timestamp", false)), ColumnType::TimestampTz { precision: 0 });
        assert_eq!(column_type(&info("text", "text", false)), ColumnType::Text { length: None });
    }

    #[test]
    fn only_constant_defaults_are_kept() {
        let int = info("int", "int(11)", false);
        assert_eq!(constant_default("42", &int), Some(Value::Int(42)));
        assert_eq!(
            constant_default("'it''s'", &info("varchar", "varchar(10)", false)),
            Some(Value::Text("it's".into()))
        );
        assert_eq!(constant_default("NULL", &int), None);
        assert_eq!(constant_default("current_timestamp()", &int), None);
    }
}
