//! A table's declared columns, for formats that describe them (Debezium's
//! schemas): the types and modifiers of the Relation message, with what
//! only the catalog knows (NOT NULL, defaults, enum labels, the primary key).

use std::sync::Arc;

use sluice_core::{ColumnSchema, ColumnType, SourceError, TableSchema, Value};

use crate::catalog::source_error;
use crate::pgoutput::Relation;
use crate::types::{PgType, builtin_name, decode_text};
use crate::wire::Connection;

/// One column as the catalog describes it now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogColumn {
    pub name: String,
    pub type_name: String,
    pub type_oid: u32,
    pub not_null: bool,
    pub default: Option<String>,
    /// Labels of an enum type (or of an array of one's elements).
    pub enum_labels: Option<Vec<Arc<str>>>,
}

pub async fn catalog_columns(conn: &mut Connection, oid: u32) -> Result<Vec<CatalogColumn>, SourceError> {
    let rows = conn
        .simple_query(&format!(
            "SELECT a.attname, t.typname, a.atttypid, a.attnotnull, pg_get_expr(d.adbin, d.adrelid) AS def, \
               (SELECT string_agg(quote_literal(e.enumlabel), ',' ORDER BY e.enumsortorder) FROM pg_enum e \
                WHERE e.enumtypid = CASE WHEN t.typelem <> 0 THEN t.typelem ELSE t.oid END) AS labels \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = {oid} AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
        ))
        .await
        .map_err(|e| source_error("column catalog query", e))?;
    Ok(rows
        .rows
        .iter()
        .map(|row| {
            let field = |name: &str| rows.get(row, name).map(str::to_string);
            CatalogColumn {
                name: field("attname").unwrap_or_default(),
                type_name: field("typname").unwrap_or_default(),
                type_oid: field("atttypid").and_then(|t| t.parse().ok()).unwrap_or_default(),
                not_null: field("attnotnull").as_deref() == Some("t"),
                default: field("def"),
                enum_labels: field("labels").map(|l| split_labels(&l)),
            }
        })
        .collect())
}

/// Splits `'a','b,c'` (quote_literal's output, joined by commas).
fn split_labels(text: &str) -> Vec<Arc<str>> {
    let mut labels = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('\'', false) => quoted = true,
            ('\'', true) if chars.peek() == Some(&'\'') => {
                current.push('\'');
                chars.next();
            }
            ('\'', true) => quoted = false,
            (',', false) => labels.push(Arc::from(std::mem::take(&mut current))),
            (c, true) => current.push(c),
            _ => {}
        }
    }
    labels.push(Arc::from(current));
    labels
}

/// The schema of a relation: types from the Relation message (what the
/// rows were written with), the rest from the catalog by column name.
pub fn table_schema(
    relation: &Relation,
    types: &[PgType],
    catalog: &[CatalogColumn],
    primary: &[String],
) -> TableSchema {
    let columns: Vec<ColumnSchema> = relation
        .columns
        .iter()
        .zip(types)
        .map(|(column, pg_type)| {
            // The catalog is of now and the message may be older: a column
            // renamed or retyped since is not the one the catalog names.
            let known = catalog.iter().find(|c| c.name == column.name && c.type_oid == column.type_oid);
            let labels = known.and_then(|c| c.enum_labels.clone());
            let ty = column_type(column.type_oid, column.type_modifier, labels);
            let default = known.and_then(|c| c.default.as_deref()).and_then(|d| constant_default(d, pg_type));
            ColumnSchema {
                name: column.name.as_str().into(),
                type_name: known.map_or_else(|| builtin_name(column.type_oid), |c| c.type_name.as_str()).into(),
                ty,
                nullable: !known.is_some_and(|c| c.not_null),
                default,
            }
        })
        .collect();
    let primary_key = primary.iter().filter_map(|name| columns.iter().position(|c| &*c.name == name)).collect();
    TableSchema { columns, primary_key }
}

/// The declared type of a column of type `oid` with modifier `typmod`.
pub fn column_type(oid: u32, typmod: i32, enum_labels: Option<Vec<Arc<str>>>) -> ColumnType {
    let fraction = || if typmod >= 0 { typmod as u32 } else { 6 };
    let length = || (typmod >= 4).then(|| (typmod - 4) as u32);
    match oid {
        16 => ColumnType::Bool,
        21 => ColumnType::Int16,
        23 => ColumnType::Int32,
        20 | 26 => ColumnType::Int64,
        700 => ColumnType::Float32,
        701 => ColumnType::Float64,
        1700 if typmod >= 4 => {
            let modifier = (typmod - 4) as u32;
            ColumnType::Decimal { precision: Some(modifier >> 16), scale: Some(modifier & 0xFFFF) }
        }
        1700 => ColumnType::Decimal { precision: None, scale: None },
        1042 | 1043 => ColumnType::Text { length: length() },
        18 | 19 | 25 => ColumnType::Text { length: None },
        17 => ColumnType::Bytes,
        114 | 3802 => ColumnType::Json,
        2950 => ColumnType::Uuid,
        1082 => ColumnType::Date,
        1083 => ColumnType::Time { precision: fraction() },
        1266 => ColumnType::TimeTz { precision: fraction() },
        1114 => ColumnType::Timestamp { precision: fraction() },
        1184 => ColumnType::TimestampTz { precision: fraction() },
        1186 => ColumnType::Interval,
        142 => ColumnType::Xml,
        790 => ColumnType::Money,
        // Debezium maps bit(1) to a boolean and longer bit strings to Bits.
        1560 if typmod == 1 => ColumnType::Bool,
        1560 | 1562 if typmod > 0 => ColumnType::Bits { length: typmod as u32 },
        _ => match (array_element(oid), enum_labels) {
            (Some(element), labels) => ColumnType::Array(Box::new(column_type(element, typmod, labels))),
            (None, Some(labels)) => ColumnType::Enum { labels },
            (None, None) => ColumnType::Other,
        },
    }
}

/// The element type of the built-in array types Debezium maps.
fn array_element(oid: u32) -> Option<u32> {
    Some(match oid {
        1000 => 16,
        1001 => 17,
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1021 => 700,
        1022 => 701,
        1231 => 1700,
        1009 => 25,
        1014 => 1042,
        1015 => 1043,
        199 => 114,
        3807 => 3802,
        2951 => 2950,
        1182 => 1082,
        1183 => 1083,
        1115 => 1114,
        1185 => 1184,
        1187 => 1186,
        _ => return None,
    })
}

/// A default that is a constant (`0`, `'x'::text`, `true`) as a value of
/// the column's type; an expression (`now()`, `nextval(…)`) has none.
fn constant_default(expr: &str, pg_type: &PgType) -> Option<Value> {
    // A sequence (serial columns): Debezium gives such a column 0.
    if expr.starts_with("nextval(") {
        return Some(decode_text(pg_type, "0"));
    }
    let text = match expr.strip_prefix('\'') {
        Some(quoted) => {
            let end = quoted.rfind('\'')?;
            let rest = &quoted[end + 1..];
            if !(rest.is_empty() || rest.starts_with("::")) {
                return None;
            }
            quoted[..end].replace("''", "'")
        }
        None => {
            let bare = expr.split("::").next()?.trim_matches(|c| c == '(' || c == ')');
            let numeric = bare.parse::<f64>().is_ok();
            if !(numeric || bare == "true" || bare == "false") {
                return None;
            }
            match bare {
                "true" => "t".to_string(),
                "false" => "f".to_string(),
                other => other.to_string(),
            }
        }
    };
    Some(decode_text(pg_type, &text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::builtin;

    #[test]
    fn modifiers_become_precision_scale_and_length() {
        assert_eq!(
            column_type(1700, (12 << 16 | 2) + 4, None),
            ColumnType::Decimal { precision: Some(12), scale: Some(2) }
        );
        assert_eq!(column_type(1700, -1, None), ColumnType::Decimal { precision: None, scale: None });
        assert_eq!(column_type(1043, 24, None), ColumnType::Text { length: Some(20) });
        assert_eq!(column_type(1114, 3, None), ColumnType::Timestamp { precision: 3 });
        assert_eq!(column_type(1184, -1, None), ColumnType::TimestampTz { precision: 6 });
        assert_eq!(column_type(1007, -1, None), ColumnType::Array(Box::new(ColumnType::Int32)));
        let labels: Vec<Arc<str>> = vec!["a".into(), "b,c".into(), "d'e".into()];
        assert_eq!(split_labels("'a','b,c','d''e'"), labels);
        assert_eq!(column_type(99999, -1, Some(labels.clone())), ColumnType::Enum { labels });
    }

    #[test]
    fn only_constant_defaults_are_kept() {
        let int = builtin(23).unwrap();
        let text = builtin(25).unwrap();
        assert_eq!(constant_default("0", &int), Some(Value::Int(0)));
        assert_eq!(constant_default("'it''s'::text", &text), Some(Value::Text("it's".into())));
        assert_eq!(constant_default("now()", &text), None);
        assert_eq!(constant_default("nextval('t_id_seq'::regclass)", &int), Some(Value::Int(0)));
        assert_eq!(constant_default("true", &builtin(16).unwrap()), Some(Value::Bool(true)));
    }
}
