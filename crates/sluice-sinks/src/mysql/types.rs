//! The MySQL / MariaDB column type for each source column, written as
//! `information_schema.COLUMNS.COLUMN_TYPE` shows it (after
//! [`normalize`]), and which existing types can take a source type's values.

use sluice_core::{ColumnSchema, ColumnType, Value};

/// The longest `varchar` an InnoDB key can hold in utf8mb4 (3,072 bytes).
const KEY_CHARS: u32 = 768;

/// The target type of a source column; `key` for a column of the key,
/// which must have a bounded length.
pub fn target_type(column: &ColumnSchema, key: bool) -> String {
    let ty = of(&column.ty, &column.type_name);
    match ty.as_str() {
        "longtext" if key => format!("varchar({KEY_CHARS})"),
        "longblob" if key => "varbinary(3072)".into(),
        _ => ty,
    }
}

fn of(ty: &ColumnType, type_name: &str) -> String {
    let fraction = |name: &str, p: u32| if p == 0 { name.to_string() } else { format!("{name}({})", p.min(6)) };
    let labels = |name: &str, labels: &[std::sync::Arc<str>]| {
        let quoted: Vec<String> = labels.iter().map(|l| super::text::quoted(l)).collect();
        format!("{name}({})", quoted.join(","))
    };
    match ty {
        ColumnType::Bool => "tinyint(1)".into(),
        ColumnType::Int16 => "smallint".into(),
        ColumnType::Int32 => "int".into(),
        ColumnType::Int64 => "bigint".into(),
        ColumnType::Year => "year".into(),
        ColumnType::Float32 => "float".into(),
        ColumnType::Float64 => "double".into(),
        ColumnType::Decimal { precision: Some(p), scale } if *p <= 65 && scale.unwrap_or(0) <= 30 => {
            format!("decimal({p},{})", scale.unwrap_or(0))
        }
        // Beyond MySQL's decimal: the widest one, as close as it can hold.
        ColumnType::Decimal { .. } => "decimal(65,30)".into(),
        ColumnType::Text { length: Some(n) } if matches!(type_name, "bpchar" | "char") && *n <= 255 => {
            format!("char({n})")
        }
        ColumnType::Text { length: Some(n) } if *n <= 16_383 => format!("varchar({n})"),
        ColumnType::Enum { labels: l } if !l.is_empty() => labels("enum", l),
        ColumnType::Set { labels: l } if !l.is_empty() => labels("set", l),
        ColumnType::Bytes => "longblob".into(),
        ColumnType::Json | ColumnType::Array(_) => "json".into(),
        ColumnType::Uuid => "char(36)".into(),
        ColumnType::Date => "date".into(),
        ColumnType::Time { precision } => fraction("time", *precision),
        ColumnType::Timestamp { precision } | ColumnType::TimestampTz { precision } => fraction("datetime", *precision),
        ColumnType::TimeTz { .. } | ColumnType::Interval => "varchar(64)".into(),
        ColumnType::Bits { length } => format!("varchar({length})"),
        _ => "longtext".into(),
    }
}

/// The type of a column whose source declares none, from one of its values.
pub fn type_of_value(value: &Value, key: bool) -> &'static str {
    match value {
        Value::Bool(_) => "tinyint(1)",
        Value::Int(_) => "bigint",
        Value::UInt(_) => "bigint unsigned",
        Value::Float(_) => "double",
        Value::Json(_) => "json",
        Value::Bytes(_) if key => "varbinary(3072)",
        Value::Bytes(_) => "longblob",
        _ if key => "varchar(768)",
        _ => "longtext",
    }
}

const INTEGERS: [&str; 5] = ["tinyint", "smallint", "mediumint", "int", "bigint"];

/// A `COLUMN_TYPE` without integer display widths (`int(11)` → `int`,
/// as MySQL 8 writes it; `tinyint(1)` stays, it means boolean), and
/// MariaDB's `json` (an alias of `longtext`) as `longtext`.
pub fn normalize(column_type: &str) -> String {
    let ty = column_type.to_ascii_lowercase();
    if let Some(open) = ty.find('(') {
        let name = &ty[..open];
        if INTEGERS.contains(&name) && !ty.starts_with("tinyint(1)") {
            let close = ty[open..].find(')').map_or(ty.len(), |c| open + c + 1);
            return format!("{name}{}", &ty[close..]);
        }
    }
    ty
}

fn split(ty: &str) -> (&str, Vec<u32>) {
    let Some(open) = ty.find('(') else { return (ty, Vec::new()) };
    let close = ty[open..].find(')').map_or(ty.len(), |c| open + c);
    (&ty[..open], ty[open + 1..close].split(',').filter_map(|a| a.trim().parse().ok()).collect())
}

/// Whether a column of (normalized) type `target` takes every value of
/// type `wanted` without loss.
pub fn holds(target: &str, wanted: &str) -> bool {
    if target == wanted || (target == "longtext" && wanted == "json") {
        return true;
    }
    let rank = |ty: &str| INTEGERS.iter().position(|i| *i == ty);
    let (t_name, t_args) = split(target);
    let (w_name, w_args) = split(wanted);
    let texts = ["varchar", "char", "enum", "set"];
    match (t_name, w_name) {
        (t, w) if rank(t).is_some() && rank(w).is_some() && !target.contains("unsigned") => {
            rank(t) > rank(w) || (rank(t) == rank(w) && !wanted.contains("unsigned"))
        }
        ("decimal", "decimal") => match (t_args.as_slice(), w_args.as_slice()) {
            ([tp, ts], [wp, ws]) => ts == ws && tp >= wp,
            _ => false,
        },
        ("decimal", w) if rank(w).is_some() => t_args.get(1) == Some(&0) && t_args[0] >= 20,
        ("double", "float") => true,
        ("longtext" | "mediumtext" | "text", w) if texts.contains(&w) => true,
        ("longtext", "mediumtext" | "text") | ("mediumtext", "text") => true,
        ("varchar", "varchar" | "char") => t_args.first() >= w_args.first(),
        ("longblob", "varbinary" | "blob" | "mediumblob") => true,
        ("datetime" | "time", w) if w == t_name => t_args.first().unwrap_or(&0) >= w_args.first().unwrap_or(&0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_compare_as_mysql_8_writes_them() {
        assert_eq!(normalize("int(11)"), "int");
        assert_eq!(normalize("bigint(20) unsigned"), "bigint unsigned");
        assert_eq!(normalize("tinyint(1)"), "tinyint(1)");
        assert_eq!(normalize("DECIMAL(12,2)"), "decimal(12,2)");
    }

    #[test]
    fn wider_types_hold_narrower_ones() {
        assert!(holds("bigint", "int"));
        assert!(!holds("int", "bigint"));
        assert!(holds("decimal(14,2)", "decimal(12,2)"));
        assert!(holds("decimal(20,0)", "bigint"));
        assert!(holds("varchar(40)", "varchar(20)"));
        assert!(!holds("varchar(10)", "varchar(20)"));
        assert!(holds("longtext", "json"));
        assert!(holds("datetime(6)", "datetime(3)"));
        assert!(!holds("datetime", "datetime(3)"));
        assert!(!holds("int", "longtext"));
    }
}
