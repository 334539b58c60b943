//! The event as a script sees it, and its rows back from the script.

use sluice_core::{Event, JsonText, Row, ToCompactString as _, Value};
use vrl::value::{KeyString, ObjectMap, Value as VrlValue};

use super::shapes::Shapes;
use super::{IMAGES, Uses};
use crate::TransformError;

/// The event as the script sees it: the fields it uses. The text of the
/// columns it sees is moved out, not copied: [`put_back`] replaces or
/// removes each of them, and on a failure the event is not used again.
pub(super) fn exposed(event: &mut Event, uses: &Uses) -> ObjectMap {
    let mut object = ObjectMap::new();
    if uses.has("source") {
        let mut source = ObjectMap::new();
        source.insert("id".into(), VrlValue::from(event.source_id.to_string()));
        source.insert("position".into(), VrlValue::from(event.position.to_string()));
        source.insert("tx_id".into(), VrlValue::from(event.tx_id.to_string()));
        source.insert("commit_time_us".into(), VrlValue::Integer(event.commit_time_us));
        source.insert("schema_version".into(), VrlValue::Integer(i64::from(event.schema_version)));
        object.insert("source".into(), VrlValue::Object(source));
    }
    let text = [("op", event.op.code()), ("db", &*event.database), ("table", &*event.table)];
    for (field, value) in text.into_iter().filter(|(field, _)| uses.has(field)) {
        object.insert(field.into(), VrlValue::from(value));
    }
    let images = [&mut event.key, &mut event.before, &mut event.after];
    for (index, (field, image)) in IMAGES.into_iter().zip(images).enumerate().filter(|(_, (f, _))| uses.has(f)) {
        let value = image.as_mut().map_or(VrlValue::Null, |row| VrlValue::Object(row_out(row, uses.columns(index))));
        object.insert(field.into(), value);
    }
    object
}

/// Whether the script sees `column`: every one, or those in `only`.
fn sees(only: Option<&[String]>, column: &str) -> bool {
    only.is_none_or(|only| only.iter().any(|c| c == column))
}

/// The columns of `row` the source sent, or those of them in `only`.
fn row_out(row: &mut Row, only: Option<&[String]>) -> ObjectMap {
    // Inserted one by one: collecting sorts through a vector made for it.
    let mut object = ObjectMap::new();
    for (column, value) in row.columns.iter().zip(&mut row.values) {
        if !matches!(value, Value::Unchanged) && sees(only, column) {
            object.insert(KeyString::from(&**column), value_out(value));
        }
    }
    object
}

/// `value` for the script; its text or bytes are taken, leaving the kind
/// for [`value_back`] to go by.
fn value_out(value: &mut Value) -> VrlValue {
    match value {
        Value::Text(s)
        | Value::Decimal(s)
        | Value::Date(s)
        | Value::Time(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s) => VrlValue::from(std::mem::take(s).into_string()),
        Value::Null | Value::Unchanged => VrlValue::Null,
        Value::Bool(b) => VrlValue::Boolean(*b),
        Value::Int(i) => VrlValue::Integer(*i),
        Value::UInt(u) => i64::try_from(*u).map_or_else(|_| VrlValue::from(u.to_string()), VrlValue::Integer),
        Value::Float(f) => VrlValue::from(serde_json::json!(f)),
        Value::Bytes(b) => VrlValue::Bytes(std::mem::take(b).into()),
        Value::Json(json) => {
            serde_json::from_str::<serde_json::Value>(json.as_str()).map_or(VrlValue::Null, VrlValue::from)
        }
        Value::Array(items) => VrlValue::Array(items.iter_mut().map(value_out).collect()),
    }
}

/// A row image back from the script, into `image`: the old columns in
/// their order, then the new ones in the script's; a value keeps its old
/// kind where the script left it the same kind of thing (a decimal stays a
/// decimal). A column the source did not send stays unsent unless the
/// script set it, and with `only` the columns outside it, which the
/// script never saw, stay as they were.
pub(super) fn put_back(
    field: &str,
    value: Option<VrlValue>,
    image: &mut Option<Row>,
    only: Option<&[String]>,
    shapes: &Shapes,
) -> Result<(), TransformError> {
    let mut map = match value {
        None | Some(VrlValue::Null) => {
            *image = None;
            return Ok(());
        }
        Some(VrlValue::Object(map)) => map,
        Some(other) => {
            return Err(TransformError(format!("`.{field}` must be an object or null, not {}", kind(&other))));
        }
    };
    let Some(mut row) = image.take() else {
        let added: Vec<&str> = map.keys().map(KeyString::as_str).collect();
        let columns = shapes.columns(shapes.empty(), &[], &added);
        let values = map.into_values().map(|v| value_back(v, None)).collect();
        *image = Some(Row { columns, values });
        return Ok(());
    };
    let mut gone = Vec::new();
    for (index, (column, value)) in row.columns.iter().zip(row.values.iter_mut()).enumerate() {
        if !sees(only, column) {
            continue;
        }
        match map.remove(&**column) {
            Some(new) => *value = value_back(new, Some(value)),
            None if matches!(value, Value::Unchanged) => {}
            None => gone.push(index),
        }
    }
    // The common script changes values only: the column list stays shared.
    if !gone.is_empty() || !map.is_empty() {
        let added: Vec<&str> = map.keys().map(KeyString::as_str).collect();
        let columns = shapes.columns(&row.columns, &gone, &added);
        let mut values = Vec::with_capacity(columns.len());
        for (index, value) in row.values.drain(..).enumerate() {
            if !gone.contains(&index) {
                values.push(value);
            }
        }
        values.extend(map.into_values().map(|v| value_back(v, None)));
        row = Row { columns, values };
    }
    *image = Some(row);
    Ok(())
}

fn value_back(value: VrlValue, previous: Option<&Value>) -> Value {
    let text = |s: String| match previous {
        Some(Value::Decimal(_)) => Value::Decimal(s.into()),
        Some(Value::Date(_)) => Value::Date(s.into()),
        Some(Value::Time(_)) => Value::Time(s.into()),
        Some(Value::Timestamp(_)) => Value::Timestamp(s.into()),
        Some(Value::TimestampTz(_)) => Value::TimestampTz(s.into()),
        _ => Value::Text(s.into()),
    };
    match value {
        VrlValue::Null => Value::Null,
        VrlValue::Boolean(b) => Value::Bool(b),
        VrlValue::Integer(i) => Value::Int(i),
        VrlValue::Float(f) => Value::Float(f.into_inner()),
        // Without a copy where the script left the bytes alone.
        VrlValue::Bytes(b) => match (previous, String::from_utf8(Vec::from(b))) {
            (Some(Value::Bytes(_)), Ok(s)) => Value::Bytes(s.into_bytes()),
            (_, Err(e)) => Value::Bytes(e.into_bytes()),
            (_, Ok(s)) => text(s),
        },
        VrlValue::String(s) => text(s.to_string()),
        VrlValue::Timestamp(t) => Value::TimestampTz(t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_compact_string()),
        VrlValue::Array(items) if !matches!(previous, Some(Value::Json(_))) => {
            Value::Array(items.into_iter().map(|v| value_back(v, None)).collect())
        }
        VrlValue::Regex(r) => Value::Text(r.to_compact_string()),
        other => {
            let json: Result<serde_json::Value, _> = other.try_into();
            json.ok().and_then(|j| JsonText::parse(j.to_string()).ok()).map_or(Value::Null, Value::Json)
        }
    }
}

pub(super) fn kind(value: &VrlValue) -> &'static str {
    match value {
        VrlValue::Object(_) => "an object",
        VrlValue::Array(_) => "an array",
        VrlValue::Null => "null",
        VrlValue::Boolean(_) => "a boolean",
        VrlValue::Integer(_) | VrlValue::Float(_) => "a number",
        VrlValue::Timestamp(_) => "a timestamp",
        _ => "a string",
    }
}
