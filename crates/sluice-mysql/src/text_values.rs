//! Column values as a snapshot query reads them (text protocol, results
//! in utf8mb4, session time zone UTC), shaped like the same values from
//! the binlog, so a row reads the same from either.

use mysql_async::Value as My;
use mysql_async::consts::ColumnType;
use sluice_core::{CompactString, JsonText, Value};

use crate::clock::iso_datetime;
use crate::schema::ColumnInfo;
use crate::values::convert_value;

/// How a column's text becomes a value, worked out once per column: a
/// snapshot reads millions of values of the same few columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Bit,
    /// Binary data, taken as it is.
    Bytes,
    UInt,
    Int,
    Float,
    Decimal,
    Date,
    Datetime,
    Timestamp,
    Time,
    /// Character data (enum and set labels too); bytes if not UTF-8.
    Text,
    /// A MariaDB JSON column.
    Json,
}

impl TextKind {
    pub fn of(info: &ColumnInfo) -> TextKind {
        let data_type = info.data_type.as_str();
        if data_type == "bit" {
            return TextKind::Bit;
        }
        if info.charset.is_none() && !is_shown_as_text(data_type) {
            return TextKind::Bytes;
        }
        match data_type {
            "tinyint" | "smallint" | "mediumint" | "int" | "bigint" if info.unsigned => TextKind::UInt,
            "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "year" => TextKind::Int,
            "float" | "double" => TextKind::Float,
            "decimal" => TextKind::Decimal,
            "date" => TextKind::Date,
            "datetime" => TextKind::Datetime,
            "timestamp" => TextKind::Timestamp,
            "time" => TextKind::Time,
            "enum" | "set" => TextKind::Text,
            _ if info.json => TextKind::Json,
            _ if info.charset.is_some() => TextKind::Text,
            _ => TextKind::Bytes,
        }
    }
}

/// [`text_value_as`] with the column's kind worked out here.
pub fn text_value(value: &My, info: &ColumnInfo) -> Value {
    text_value_as(value, TextKind::of(info), info)
}

/// One column of a text-protocol row; `kind` is [`TextKind::of`] `info`.
pub fn text_value_as(value: &My, kind: TextKind, info: &ColumnInfo) -> Value {
    let bytes = match value {
        My::NULL => return Value::Null,
        My::Bytes(bytes) => bytes.as_slice(),
        // The text protocol sends only bytes; anything else is from a
        // prepared statement, where the binlog conversion fits.
        other => return convert_value(other, ColumnType::MYSQL_TYPE_NULL, &[], info),
    };
    match kind {
        TextKind::Bit => return Value::UInt(bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))),
        TextKind::Bytes => return Value::Bytes(bytes.to_vec()),
        _ => {}
    }
    let Ok(text) = std::str::from_utf8(bytes) else { return Value::Bytes(bytes.to_vec()) };
    let or_text = |parsed: Option<Value>| parsed.unwrap_or_else(|| Value::Text(CompactString::from(text)));
    match kind {
        TextKind::UInt => or_text(text.parse().ok().map(Value::UInt)),
        TextKind::Int => or_text(text.parse().ok().map(Value::Int)),
        TextKind::Float => or_text(text.parse().ok().map(Value::Float)),
        TextKind::Decimal => Value::Decimal(CompactString::from(text)),
        TextKind::Date => Value::Date(CompactString::from(text)),
        TextKind::Datetime => Value::Timestamp(iso_datetime(text, "")),
        TextKind::Timestamp => Value::TimestampTz(iso_datetime(text, "Z")),
        TextKind::Time => Value::Time(CompactString::from(text)),
        TextKind::Json => {
            JsonText::parse(text.to_string()).map(Value::Json).unwrap_or(Value::Text(CompactString::from(text)))
        }
        TextKind::Text | TextKind::Bit | TextKind::Bytes => Value::Text(CompactString::from(text)),
    }
}

/// Types with no character set that the server still writes as text.
fn is_shown_as_text(data_type: &str) -> bool {
    matches!(
        data_type,
        "tinyint"
            | "smallint"
            | "mediumint"
            | "int"
            | "bigint"
            | "year"
            | "float"
            | "double"
            | "decimal"
            | "date"
            | "datetime"
            | "timestamp"
            | "time"
            | "json"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::tests::{info, json};

    #[test]
    fn text_protocol_values_read_like_the_binlog() {
        let text = |t: &str, info: &ColumnInfo| json(text_value(&My::Bytes(t.as_bytes().to_vec()), info));
        let mut unsigned = info("bigint");
        unsigned.unsigned = true;
        assert_eq!(text("18446744073709551615", &unsigned), "18446744073709551615");
        assert_eq!(text("-8388608", &info("mediumint")), "-8388608");
        assert_eq!(text("2026-02-28 13:14:15.500", &info("datetime")), "\"2026-02-28T13:14:15.500\"");
        assert_eq!(text("2026-02-28 13:14:15.25", &info("timestamp")), "\"2026-02-28T13:14:15.25Z\"");
        assert_eq!(text("-26:03:04", &info("time")), "\"-26:03:04\"");
        assert_eq!(text("-12345678901234567890.0100", &info("decimal")), "\"-12345678901234567890.0100\"");
        assert_eq!(text("small,x", &info("set")), "\"small,x\"");
        assert_eq!(text("0.1", &info("float")), "0.1");
        assert_eq!(json(text_value(&My::Bytes(vec![1, 0]), &info("bit"))), "256");
        assert_eq!(json(text_value(&My::NULL, &info("int"))), "null");
        let mut blob = info("blob");
        blob.charset = None;
        assert_eq!(json(text_value(&My::Bytes(vec![0, 255]), &blob)), "\"AP8=\"");
        let mut doc = info("longtext");
        doc.json = true;
        assert_eq!(text("{\"a\":1}", &doc), "{\"a\":1}");
        // A MySQL JSON column without MariaDB's flag and without a
        // character set: shown as text by the server, kept as bytes.
        let mut mysql_json = info("json");
        mysql_json.charset = None;
        assert_eq!(json(text_value(&My::Bytes(b"{}".to_vec()), &mysql_json)), "\"e30=\"");
        // Text that is not UTF-8 is passed on as bytes.
        assert_eq!(json(text_value(&My::Bytes(vec![0xff]), &info("varchar"))), "\"/w==\"");
    }
}
