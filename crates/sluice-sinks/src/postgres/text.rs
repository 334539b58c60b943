//! Values in PostgreSQL's text input forms, for COPY's text format, and
//! quoted names and literals. Every value a source decodes goes back into the form the
//! server reads, so nothing passes through a float or a client-side parser.


use sluice_core::Value;

use crate::db::plan::Encoding;

/// Rows in COPY's text format.
pub struct CopyText;

impl Encoding for CopyText {
    fn field(out: &mut String, value: &Value) {
        copy_field(out, value);
    }
    const FIELD_SEP: char = '\t';
    const ROW_START: &'static str = "";
    const ROW_END: &'static str = "\n";
    const ROW_SEP: &'static str = "";
    /// COPY streams its data, so one run may be any size.
    const MAX_RUN_BYTES: usize = usize::MAX;
}

/// Appends `value` as one field of a COPY text row (`\N` for NULL).
pub fn copy_field(out: &mut String, value: &Value) {
    match input_text(value) {
        None => out.push_str("\\N"),
        Some(text) => {
            for c in text.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\t' => out.push_str("\\t"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
        }
    }
}

/// A string literal; standard_conforming_strings is on on every supported
/// server, so only quotes are doubled.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A quoted identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The text PostgreSQL reads back as `value`; `None` for NULL (and for an
/// unchanged value, which callers leave out before this).
pub fn input_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(b) => if *b { "t" } else { "f" }.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) if f.is_nan() => "NaN".to_string(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Decimal(s) | Value::Text(s) | Value::Time(s) => s.to_string(),
        Value::Date(s) | Value::Timestamp(s) | Value::TimestampTz(s) => pg_era(s),
        Value::Bytes(bytes) => format!("\\x{}", hex::encode(bytes)),
        Value::Json(json) => json.as_str().to_string(),
        Value::Array(items) => array_literal(items),
    })
}

/// `{a,"b c",NULL}`; nested arrays for more dimensions.
fn array_literal(items: &[Value]) -> String {
    let mut out = String::from("{");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match item {
            Value::Array(inner) => out.push_str(&array_literal(inner)),
            other => match input_text(other) {
                None => out.push_str("NULL"),
                Some(text) => {
                    out.push('"');
                    for c in text.chars() {
                        if matches!(c, '"' | '\\') {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            },
        }
    }
    out.push('}');
    out
}

/// Sources write years outside 0001–9999 in ISO 8601's expanded form
/// (`-000043-03-15`, astronomical: year 0 is 1 BC); PostgreSQL reads
/// `0044-03-15 BC`.
fn pg_era(iso: &str) -> String {
    let (year, rest) = match iso.as_bytes().first() {
        Some(b'+' | b'-') => match iso[1..].find('-') {
            Some(end) => (&iso[..end + 1], &iso[end + 1..]),
            None => return iso.to_string(),
        },
        _ => match iso.find('-') {
            Some(end) => (&iso[..end], &iso[end..]),
            None => return iso.to_string(),
        },
    };
    let Ok(year) = year.trim_start_matches('+').parse::<i64>() else {
        return iso.to_string();
    };
    if year >= 1 {
        return format!("{year:04}{rest}");
    }
    // The era goes after the time, before nothing else: `… 12:00:00Z BC`
    // is not read, so the offset (always `Z` here) is moved in front of it.
    let (body, zone) = match rest.strip_suffix('Z') {
        Some(body) => (body, "+00"),
        None => (rest, ""),
    };
    format!("{:04}{body}{zone} BC", 1 - year)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(value: &Value) -> String {
        let mut out = String::new();
        copy_field(&mut out, value);
        out
    }

    #[test]
    fn copy_fields_escape_what_the_format_reserves() {
        assert_eq!(copy(&Value::Null), "\\N");
        assert_eq!(copy(&Value::Text("a\tb\nc\\d".into())), "a\\tb\\nc\\\\d");
        assert_eq!(copy(&Value::Bytes(vec![0, 255])), "\\\\x00ff");
        assert_eq!(copy(&Value::Float(f64::NEG_INFINITY)), "-Infinity");
        assert_eq!(copy(&Value::Float(0.1)), "0.1");
        assert_eq!(copy(&Value::Bool(false)), "f");
    }

    #[test]
    fn arrays_quote_every_element_and_keep_nulls() {
        let items = vec![Value::Text("a \"b\"".into()), Value::Null, Value::Text("c\\".into())];
        assert_eq!(input_text(&Value::Array(items)).unwrap(), r#"{"a \"b\"",NULL,"c\\"}"#);
        let nested = Value::Array(vec![Value::Array(vec![Value::Int(1)]), Value::Array(vec![Value::Int(2)])]);
        assert_eq!(input_text(&nested).unwrap(), r#"{{"1"},{"2"}}"#);
    }

    #[test]
    fn expanded_years_become_eras() {
        assert_eq!(pg_era("2024-01-02"), "2024-01-02");
        assert_eq!(pg_era("0000-03-15"), "0001-03-15 BC");
        assert_eq!(pg_era("-000043-03-15T10:00:00"), "0044-03-15T10:00:00 BC");
        assert_eq!(pg_era("-000043-03-15T10:00:00Z"), "0044-03-15T10:00:00+00 BC");
        assert_eq!(pg_era("+012345-01-01"), "12345-01-01");
        assert_eq!(pg_era("infinity"), "infinity");
    }

    #[test]
    fn literals_double_quotes() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
    }
}
