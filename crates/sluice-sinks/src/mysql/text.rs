//! Values as MySQL literals, for `VALUES` lists. The session runs with
//! `NO_BACKSLASH_ESCAPES`, so a string literal only doubles its quotes.

use std::fmt::Write as _;

use sluice_core::Value;

use crate::db::plan::Encoding;

/// Rows as a `VALUES` list: `(1,'a'),(2,'b')`.
pub struct ValuesList;

impl Encoding for ValuesList {
    fn field(out: &mut String, value: &Value) {
        literal(out, value);
    }
    const FIELD_SEP: char = ',';
    const ROW_START: &'static str = "(";
    const ROW_END: &'static str = ")";
    const ROW_SEP: &'static str = ",";
    /// Well under the servers' default `max_allowed_packet` (16 MiB on
    /// MariaDB, 64 MiB on MySQL 8).
    const MAX_RUN_BYTES: usize = 4 << 20;
}

/// A quoted name.
pub fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

pub fn quote(out: &mut String, text: &str) {
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
}

pub fn quoted(text: &str) -> String {
    let mut out = String::new();
    quote(&mut out, text);
    out
}

/// Appends `value` as a literal the server converts to the column's type.
pub fn literal(out: &mut String, value: &Value) {
    match value {
        Value::Null | Value::Unchanged => out.push_str("NULL"),
        Value::Bool(b) => out.push_str(if *b { "1" } else { "0" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        // MySQL has no NaN or infinity; the server refuses the text, and
        // the event goes to the dead letter queue.
        Value::Float(f) if !f.is_finite() => quote(out, &f.to_string()),
        // Exponent form: an approximate-value literal, read as a double.
        Value::Float(f) => {
            let _ = write!(out, "{f:e}");
        }
        Value::Decimal(s) | Value::Text(s) | Value::Date(s) | Value::Time(s) => quote(out, s),
        // The session's time zone is UTC, which `Z` says.
        Value::Timestamp(s) | Value::TimestampTz(s) => quote(out, s.strip_suffix('Z').unwrap_or(s)),
        Value::Json(json) => quote(out, json.as_str()),
        Value::Bytes(bytes) => {
            out.push_str("X'");
            out.push_str(&hex::encode(bytes));
            out.push('\'');
        }
        Value::Array(_) => quote(out, &serde_json::to_string(value).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(value: &Value) -> String {
        let mut out = String::new();
        literal(&mut out, value);
        out
    }

    #[test]
    fn literals_keep_values_exact() {
        assert_eq!(lit(&Value::Text("it's \\ fine".into())), "'it''s \\ fine'");
        assert_eq!(lit(&Value::Bytes(vec![0, 255])), "X'00ff'");
        assert_eq!(lit(&Value::Float(1e300)), "1e300");
        assert_eq!(lit(&Value::Float(0.1)), "1e-1");
        assert_eq!(lit(&Value::TimestampTz("2026-01-02T03:04:05.5Z".into())), "'2026-01-02T03:04:05.5'");
        assert_eq!(lit(&Value::Array(vec![Value::Int(1), Value::Null])), "'[1,null]'");
        assert_eq!(lit(&Value::Null), "NULL");
        assert_eq!(ident("we`ird"), "`we``ird`");
    }
}
