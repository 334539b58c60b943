//! Column values as sources decode them, and their JSON form.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
pub use compact_str::{CompactString, ToCompactString, format_compact};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

/// One column value.
///
/// Exact types stay exact: decimals and temporal values keep the text the
/// database produced, so no value ever passes through `f64` by accident.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// An exact decimal in its text form, e.g. `"12.50"`.
    Decimal(CompactString),
    Text(CompactString),
    /// Binary data; base64 in JSON.
    Bytes(Vec<u8>),
    /// A JSON document, emitted as JSON rather than as a string.
    Json(JsonText),
    /// ISO-8601 `YYYY-MM-DD`.
    Date(CompactString),
    /// ISO-8601 time of day, with an offset when the column has one.
    Time(CompactString),
    /// ISO-8601 timestamp without a time zone.
    Timestamp(CompactString),
    /// ISO-8601 timestamp in UTC, ending in `Z`.
    TimestampTz(CompactString),
    Array(Vec<Value>),
    /// The source did not send this column because it did not change
    /// (PostgreSQL's unchanged TOAST values, MySQL's minimal row images).
    /// It has no value form: a row leaves it out, and the envelope lists
    /// such columns apart (`unchanged`), so no real value, not even the
    /// JSON document `{"unchanged": true}`, can be taken for it.
    Unchanged,
}

impl Value {
    /// The value as plain text: text-like values as they are, JSON as its
    /// document, anything else as its JSON form without quotes (`null`,
    /// `12`, `NaN`, base64 bytes). For names built from values (topics,
    /// URLs) and for string columns.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow;
        match self {
            Value::Text(s)
            | Value::Decimal(s)
            | Value::Date(s)
            | Value::Time(s)
            | Value::Timestamp(s)
            | Value::TimestampTz(s) => Cow::Borrowed(s),
            Value::Json(json) => Cow::Borrowed(json.as_str()),
            Value::Int(i) => Cow::Owned(i.to_string()),
            Value::UInt(u) => Cow::Owned(u.to_string()),
            other => match serde_json::to_value(other) {
                Ok(serde_json::Value::String(s)) => Cow::Owned(s),
                Ok(json) => Cow::Owned(json.to_string()),
                Err(_) => Cow::Borrowed(""),
            },
        }
    }

    /// A rough count of the heap and inline bytes, for batch size limits.
    pub fn approx_byte_size(&self) -> usize {
        match self {
            Value::Null | Value::Unchanged | Value::Bool(_) => 1,
            Value::Int(_) | Value::UInt(_) | Value::Float(_) => 8,
            Value::Decimal(s)
            | Value::Text(s)
            | Value::Date(s)
            | Value::Time(s)
            | Value::Timestamp(s)
            | Value::TimestampTz(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::Json(j) => j.as_str().len(),
            Value::Array(items) => items.iter().map(Value::approx_byte_size).sum::<usize>() + 8,
        }
    }
}

/// A validated JSON document kept as text.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// Fails when `text` is not one valid JSON value.
    pub fn parse(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(JsonText)
    }

    /// The document of a value Sluice built itself, which always serializes.
    pub fn of(value: &serde_json::Value) -> Self {
        JsonText(serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_none(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Int(i) => serializer.serialize_i64(*i),
            Value::UInt(u) => serializer.serialize_u64(*u),
            // JSON has no NaN or infinity; a string keeps them instead of
            // turning them into null.
            Value::Float(f) if f.is_nan() => serializer.serialize_str("NaN"),
            Value::Float(f) if f.is_infinite() && *f > 0.0 => serializer.serialize_str("Infinity"),
            Value::Float(f) if f.is_infinite() => serializer.serialize_str("-Infinity"),
            Value::Float(f) => serializer.serialize_f64(*f),
            Value::Decimal(s)
            | Value::Text(s)
            | Value::Date(s)
            | Value::Time(s)
            | Value::Timestamp(s)
            | Value::TimestampTz(s) => serializer.serialize_str(s),
            Value::Bytes(b) => serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            Value::Json(j) => j.0.serialize(serializer),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            // Rows leave these out (see `Row`); a lone one has no value.
            Value::Unchanged => serializer.serialize_none(),
        }
    }
}

/// Column names of one table version, shared by every row decoded with it.
pub type Columns = Arc<[Arc<str>]>;

/// A row image: values in the order of `columns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub columns: Columns,
    pub values: Vec<Value>,
}

impl Row {
    pub fn get(&self, column: &str) -> Option<&Value> {
        let index = self.columns.iter().position(|c| &**c == column)?;
        self.values.get(index)
    }

    pub fn approx_byte_size(&self) -> usize {
        self.values.iter().map(Value::approx_byte_size).sum::<usize>() + 16
    }

    /// The columns the source did not send because they did not change.
    pub fn unchanged(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().zip(&self.values).filter(|(_, v)| matches!(v, Value::Unchanged)).map(|(c, _)| &**c)
    }
}

/// An object of the columns the row has values for: an unchanged column
/// is left out, and listed apart by the envelope.
impl Serialize for Row {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (column, value) in self.columns.iter().zip(&self.values) {
            if !matches!(value, Value::Unchanged) {
                map.serialize_entry(&**column, value)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(value: &Value) -> String {
        serde_json::to_string(value).unwrap()
    }

    #[test]
    fn exact_and_special_values_keep_their_meaning() {
        assert_eq!(json(&Value::Decimal("12345678901234567890.01".into())), "\"12345678901234567890.01\"");
        assert_eq!(json(&Value::Float(f64::NAN)), "\"NaN\"");
        assert_eq!(json(&Value::Float(f64::NEG_INFINITY)), "\"-Infinity\"");
        assert_eq!(json(&Value::Bytes(vec![0, 255])), "\"AP8=\"");
        assert_eq!(Value::Null.text(), "null");
        assert_eq!(Value::Float(f64::NAN).text(), "NaN");
        assert_eq!(Value::Bytes(vec![0, 255]).text(), "AP8=");
        assert_eq!(Value::Decimal("1.50".into()).text(), "1.50");
        assert_eq!(json(&Value::Null), "null");
        let doc = JsonText::parse("{\"a\": [1, 2]}".into()).unwrap();
        assert_eq!(json(&Value::Json(doc)), "{\"a\": [1, 2]}");
        assert!(JsonText::parse("{oops".into()).is_err());
    }

    #[test]
    fn row_serializes_as_an_object_in_column_order() {
        let row = Row {
            columns: vec![Arc::from("id"), Arc::from("name")].into(),
            values: vec![Value::Int(7), Value::Text("ada".into())],
        };
        assert_eq!(serde_json::to_string(&row).unwrap(), "{\"id\":7,\"name\":\"ada\"}");
        assert_eq!(row.get("name"), Some(&Value::Text("ada".into())));
        assert_eq!(row.get("missing"), None);
    }

    #[test]
    fn an_unchanged_column_is_left_out_so_no_value_can_look_like_it() {
        let doc = JsonText::parse("{\"unchanged\": true}".into()).unwrap();
        let row = Row {
            columns: vec![Arc::from("id"), Arc::from("doc"), Arc::from("big")].into(),
            values: vec![Value::Int(7), Value::Json(doc), Value::Unchanged],
        };
        assert_eq!(serde_json::to_string(&row).unwrap(), "{\"id\":7,\"doc\":{\"unchanged\": true}}");
        assert_eq!(row.unchanged().collect::<Vec<_>>(), ["big"]);
    }
}
