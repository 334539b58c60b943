//! JSON written straight into a buffer for the envelope's hot fields: byte
//! for byte what `serde_json` writes for them, without its escaping loop
//! for the texts that need none (most of them).

use std::fmt::Display;
use std::io::Write;

use crate::value::{Row, Value};

/// Whether JSON takes `bytes` as they are: no quote, backslash or control
/// character (`serde_json` escapes exactly these). Eight bytes at a time,
/// with the bit tricks for "some byte is zero" and "some byte is less than
/// n", which are exact as yes-or-no answers.
fn plain(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let less_than = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS != 0;
    let has = |word: u64, byte: u8| less_than(word ^ (ONES * u64::from(byte)), 1);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word = u64::from_ne_bytes(word.try_into().unwrap_or_default());
        if less_than(word, 0x20) | has(word, b'"') | has(word, b'\\') {
            return false;
        }
    }
    !words.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) -> serde_json::Result<()> {
    if !plain(text.as_bytes()) {
        return serde_json::to_writer(out, text);
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
    Ok(())
}

/// What `Display` prints, as a JSON string (as `serde`'s `collect_str`).
pub(crate) fn write_display(out: &mut Vec<u8>, value: &impl Display) -> serde_json::Result<()> {
    let start = out.len();
    out.push(b'"');
    write!(out, "{value}").map_err(serde_json::Error::io)?;
    if plain(&out[start + 1..]) {
        out.push(b'"');
        return Ok(());
    }
    out.truncate(start);
    serde_json::to_writer(out, &value.to_string())
}

pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) -> serde_json::Result<()> {
    match value {
        Value::Null | Value::Unchanged => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        Value::UInt(u) => out.extend_from_slice(itoa::Buffer::new().format(*u).as_bytes()),
        Value::Decimal(s)
        | Value::Text(s)
        | Value::Date(s)
        | Value::Time(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s) => return write_str(out, s),
        other => return serde_json::to_writer(out, other),
    }
    Ok(())
}

/// A row as its `Serialize` writes it: an object in column order, without
/// the unchanged columns; `null` for no row.
pub(crate) fn write_row(out: &mut Vec<u8>, row: Option<&Row>) -> serde_json::Result<()> {
    let Some(row) = row else {
        out.extend_from_slice(b"null");
        return Ok(());
    };
    out.push(b'{');
    let mut first = true;
    for (column, value) in row.columns.iter().zip(&row.values) {
        if matches!(value, Value::Unchanged) {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_str(out, column)?;
        out.push(b':');
        write_value(out, value)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::value::JsonText;

    #[test]
    fn texts_and_values_are_written_as_serde_json_writes_them() {
        let long = "a plain text that is longer than one word of eight bytes";
        let mut texts: Vec<String> =
            ["", "plain", long, "quote\"", "back\\slash", "tab\t", "\u{1f}", "\u{7f}\u{e9}\u{2028} !#[]~"]
                .map(String::from)
                .into();
        // Every byte a text may hold, at every place in a word and in the
        // remainder after the words.
        for byte in (0u8..0x80).chain([0xc3]) {
            let character = if byte == 0xc3 { 'é' } else { char::from(byte) };
            for at in 0..17 {
                texts.push(format!("{}{character}{}", &long[..at], &long[at..20]));
            }
        }
        for text in &texts {
            let text = text.as_str();
            let mut out = Vec::new();
            write_str(&mut out, text).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(text).unwrap(), "{text:?}");
            let mut out = Vec::new();
            write_display(&mut out, &text).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(text).unwrap(), "{text:?}");
        }
        let values = [
            Value::Null,
            Value::Unchanged,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(i64::MIN),
            Value::UInt(u64::MAX),
            Value::Float(0.1),
            Value::Float(f64::INFINITY),
            Value::Decimal("-1.50".into()),
            Value::Text("line\nbreak".into()),
            Value::Timestamp("2026-12-06 01:02:03".into()),
            Value::Bytes(vec![0, 255]),
            Value::Json(JsonText::parse("{\"a\": [1]}".into()).unwrap()),
            Value::Array(vec![Value::Int(1), Value::Text("x".into())]),
        ];
        for value in &values {
            let mut out = Vec::new();
            write_value(&mut out, value).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(value).unwrap(), "{value:?}");
        }
        let columns: Vec<Arc<str>> = (0..values.len()).map(|i| Arc::from(format!("c\"{i}").as_str())).collect();
        let row = Row { columns: columns.into(), values: values.to_vec() };
        let mut out = Vec::new();
        write_row(&mut out, Some(&row)).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&row).unwrap());
    }
}
