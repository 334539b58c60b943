//! PostgreSQL types and their text output, mapped to Sluice values.
//!
//! The connection sets DateStyle ISO, TimeZone UTC, IntervalStyle
//! iso_8601 and extra_float_digits 3, so the server's text is unambiguous.
//! A value that does not parse as its type expects is passed on as text:
//! never dropped, never turned into null.

use sluice_core::{CompactString, JsonText, Value, format_compact};

use crate::pgoutput::Relation;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    Float,
    Numeric,
    Text,
    Json,
    Bytea,
    Date,
    Time,
    Timestamp,
    TimestampTz,
}

/// How to read one column's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgType {
    Scalar(Kind),
    /// Elements separated by `delimiter` (`,` for every type but box).
    Array {
        element: Box<PgType>,
        delimiter: char,
    },
}

impl PgType {
    fn array(kind: Kind) -> PgType {
        PgType::Array { element: Box::new(PgType::Scalar(kind)), delimiter: ',' }
    }
}

/// Built-in types by OID; `None` means ask the catalog.
pub fn builtin(oid: u32) -> Option<PgType> {
    use Kind::*;
    Some(match oid {
        16 => PgType::Scalar(Bool),
        17 => PgType::Scalar(Bytea),
        20 | 21 | 23 | 26 => PgType::Scalar(Int),
        700 | 701 => PgType::Scalar(Float),
        1700 => PgType::Scalar(Numeric),
        114 | 3802 => PgType::Scalar(Json),
        1082 => PgType::Scalar(Date),
        1083 | 1266 => PgType::Scalar(Time),
        1114 => PgType::Scalar(Timestamp),
        1184 => PgType::Scalar(TimestampTz),
        // char, name, text, bpchar, varchar, uuid, interval, money, xml, bit, varbit, inet, cidr, macaddr
        18 | 19 | 25 | 1042 | 1043 | 2950 | 1186 | 790 | 142 | 1560 | 1562 | 869 | 650 | 829 => PgType::Scalar(Text),
        1000 => PgType::array(Bool),
        1001 => PgType::array(Bytea),
        1005 | 1007 | 1016 | 1028 => PgType::array(Int),
        1021 | 1022 => PgType::array(Float),
        1231 => PgType::array(Numeric),
        199 | 3807 => PgType::array(Json),
        1182 => PgType::array(Date),
        1183 | 1270 => PgType::array(Time),
        1115 => PgType::array(Timestamp),
        1185 => PgType::array(TimestampTz),
        1002 | 1003 | 1009 | 1014 | 1015 | 2951 | 1187 | 791 | 143 | 1561 | 1563 | 1041 | 651 | 1040 => {
            PgType::array(Text)
        }
        _ => return None,
    })
}

/// The name of a built-in type, for a column the catalog no longer
/// describes as it was (`unknown` for any other type).
pub fn builtin_name(oid: u32) -> &'static str {
    match oid {
        16 => "bool",
        17 => "bytea",
        18 => "char",
        19 => "name",
        20 => "int8",
        21 => "int2",
        23 => "int4",
        25 => "text",
        26 => "oid",
        114 => "json",
        142 => "xml",
        650 => "cidr",
        700 => "float4",
        701 => "float8",
        790 => "money",
        829 => "macaddr",
        869 => "inet",
        1042 => "bpchar",
        1043 => "varchar",
        1082 => "date",
        1083 => "time",
        1114 => "timestamp",
        1184 => "timestamptz",
        1186 => "interval",
        1266 => "timetz",
        1560 => "bit",
        1562 => "varbit",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        _ => "unknown",
    }
}

/// Decodes a column's text output.
pub fn decode_text(ty: &PgType, text: &str) -> Value {
    match ty {
        PgType::Scalar(kind) => scalar(*kind, text),
        PgType::Array { element, delimiter } => {
            parse_array(text, element, *delimiter).unwrap_or_else(|| Value::Text(CompactString::from(text)))
        }
    }
}

/// [`decode_text`] for text the caller owns: text, numbers kept as text,
/// times and timestamps move into the value instead of being copied.
pub fn decode_owned(ty: &PgType, text: CompactString) -> Value {
    match ty {
        PgType::Scalar(Kind::Text) => Value::Text(text),
        PgType::Scalar(Kind::Numeric) => Value::Decimal(text),
        PgType::Scalar(Kind::Time) => Value::Time(text),
        PgType::Scalar(Kind::Timestamp) => Value::Timestamp(iso_timestamp(text)),
        PgType::Scalar(Kind::TimestampTz) => Value::TimestampTz(iso_timestamptz(text)),
        _ => decode_text(ty, &text),
    }
}

fn scalar(kind: Kind, text: &str) -> Value {
    let fallback = || Value::Text(CompactString::from(text));
    match kind {
        Kind::Bool => match text {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => fallback(),
        },
        Kind::Int => text.parse().map(Value::Int).unwrap_or_else(|_| fallback()),
        Kind::Float => text.parse().map(Value::Float).unwrap_or_else(|_| fallback()),
        Kind::Numeric => Value::Decimal(CompactString::from(text)),
        Kind::Text => Value::Text(CompactString::from(text)),
        Kind::Json => JsonText::parse(text.to_string()).map(Value::Json).unwrap_or_else(|_| fallback()),
        Kind::Bytea => text.strip_prefix("\\x").and_then(decode_hex).map(Value::Bytes).unwrap_or_else(fallback),
        Kind::Date => Value::Date(iso_date(text)),
        Kind::Time => Value::Time(CompactString::from(text)),
        Kind::Timestamp => Value::Timestamp(iso_timestamp(text.into())),
        Kind::TimestampTz => Value::TimestampTz(iso_timestamptz(text.into())),
    }
}

/// `2026-01-01 12:00:00.5` → `2026-01-01T12:00:00.5`, through [`iso_date`]
/// for the date part; `infinity` and `-infinity` stay as they are. Takes
/// the text so the common form is rewritten in place.
fn iso_timestamp(mut text: CompactString) -> CompactString {
    if plain_timestamp(&text) {
        text.replace_range(10..11, "T");
        return text;
    }
    let (body, bc) = split_era(&text);
    let Some((date, time)) = body.split_once(' ') else {
        return text;
    };
    match iso_year(date, bc) {
        Some(date) => format_compact!("{date}T{time}"),
        None => text,
    }
}

/// A timestamp of a four-digit AD year, `YYYY-MM-DD hh:…`: the one form
/// that only needs its space turned into `T`, and the form nearly every
/// row holds, so it skips the parsing [`iso_year`] does.
fn plain_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() > 11
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[10] == b' '
        && !text.ends_with(" BC")
}

/// With TimeZone UTC the server writes `+00`; ISO-8601 says `Z`.
fn iso_timestamptz(text: CompactString) -> CompactString {
    let mut iso = iso_timestamp(text);
    if iso.contains('T') && iso.ends_with("+00") {
        iso.truncate(iso.len() - 3);
        iso.push('Z');
    }
    iso
}

/// A date in ISO 8601 form: years 0 to 9999 as four digits, any other
/// year (PostgreSQL reaches 5874897 AD for dates, 294276 AD for
/// timestamps, 4713 BC for both) with a sign and at least six digits, as
/// ISO 8601's expanded form and JavaScript write them. BC years become
/// astronomical ones, where 1 BC is year 0 and 2 BC is -1.
fn iso_date(text: &str) -> CompactString {
    let (body, bc) = split_era(text);
    iso_year(body, bc).map_or_else(|| text.into(), CompactString::from)
}

fn split_era(text: &str) -> (&str, bool) {
    match text.strip_suffix(" BC") {
        Some(body) => (body, true),
        None => (text, false),
    }
}

/// `YYYY…-MM-DD` with its year rewritten; `None` when it is not a date.
fn iso_year(date: &str, bc: bool) -> Option<String> {
    let (year, month_day) = date.split_once('-')?;
    if year.len() < 4 || !year.bytes().all(|b| b.is_ascii_digit()) || month_day.len() != 5 {
        return None;
    }
    let year: i64 = year.parse().ok()?;
    let year = if bc { 1 - year } else { year };
    Some(if (0..=9999).contains(&year) {
        format!("{year:04}-{month_day}")
    } else {
        let sign = if year < 0 { '-' } else { '+' };
        format!("{sign}{:06}-{month_day}", year.unsigned_abs())
    })
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

/// Parses an array literal (`{1,2,NULL}`, `{{"a b",c}}`, `[0:1]={1,2}`).
/// `None` when the text is not one, and the caller keeps it as text.
fn parse_array(text: &str, element: &PgType, delimiter: char) -> Option<Value> {
    let body = match text.find('=') {
        Some(eq) if text.starts_with('[') => &text[eq + 1..],
        _ => text,
    };
    let mut chars = body.chars().peekable();
    let value = parse_level(&mut chars, element, delimiter, 0)?;
    chars.next().is_none().then_some(value)
}

/// Arrays deeper than PostgreSQL allows (6) are not arrays.
const MAX_ARRAY_DEPTH: usize = 6;

fn parse_level(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    element: &PgType,
    delimiter: char,
    depth: usize,
) -> Option<Value> {
    if depth >= MAX_ARRAY_DEPTH || chars.next()? != '{' {
        return None;
    }
    let mut items = Vec::new();
    if chars.peek() == Some(&'}') {
        chars.next();
        return Some(Value::Array(items));
    }
    loop {
        let item = match chars.peek()? {
            '{' => parse_level(chars, element, delimiter, depth + 1)?,
            '"' => {
                chars.next();
                let mut text = String::new();
                loop {
                    match chars.next()? {
                        '\\' => text.push(chars.next()?),
                        '"' => break,
                        c => text.push(c),
                    }
                }
                decode_text(element, &text)
            }
            _ => {
                let mut text = String::new();
                while let Some(&c) = chars.peek() {
                    if c == delimiter || c == '}' {
                        break;
                    }
                    text.push(c);
                    chars.next();
                }
                let text = text.trim();
                if text.eq_ignore_ascii_case("NULL") { Value::Null } else { decode_text(element, text) }
            }
        };
        items.push(item);
        match chars.next()? {
            c if c == delimiter => continue,
            '}' => return Some(Value::Array(items)),
            _ => return None,
        }
    }
}

/// Text when the bytes are UTF-8, binary (base64 in JSON) when not.
pub fn bytes_value(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::Text(CompactString::from(text)),
        Err(_) => Value::Bytes(bytes.to_vec()),
    }
}

/// The columns that name a row: the catalog's key when it is known and
/// every column of it is in the relation, otherwise the columns the
/// server flags as the replica identity (every column under FULL).
pub(crate) fn key_index(relation: &Relation, key: Option<&[String]>) -> Vec<usize> {
    let by_name: Option<Vec<usize>> =
        key.and_then(|key| key.iter().map(|name| relation.columns.iter().position(|c| c.name == *name)).collect());
    match by_name {
        Some(mut index) if !index.is_empty() => {
            index.sort_unstable();
            index
        }
        _ => relation.columns.iter().enumerate().filter(|(_, c)| c.key).map(|(i, _)| i).collect(),
    }
}

/// A stable fingerprint of a table's shape (FNV-1a over names, types and
/// key flags): the same schema always gives the same number, across
/// restarts, so replayed events are identical to the originals.
pub(crate) fn fingerprint(relation: &Relation) -> u32 {
    fingerprint_as(&relation.namespace, &relation.name, relation)
}

/// The fingerprint of `relation`'s shape under the name its changes go
/// by. A partition's is its root's: every partition of one shape gives
/// one schema version, as the snapshot of the root does, so consumers
/// that follow versions (database sinks' table caches, Avro subjects,
/// columnar files) do not see the table change with every row that lands
/// in another partition.
pub(crate) fn fingerprint_as(namespace: &str, name: &str, relation: &Relation) -> u32 {
    let mut hash: u32 = 0x811C_9DC5;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u32::from(*byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
        hash ^= 0xFF;
        hash = hash.wrapping_mul(0x0100_0193);
    };
    feed(namespace.as_bytes());
    feed(name.as_bytes());
    for column in &relation.columns {
        feed(column.name.as_bytes());
        feed(&column.type_oid.to_be_bytes());
        feed(&column.type_modifier.to_be_bytes());
        feed(&[u8::from(column.key)]);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(ty: &PgType, text: &str) -> String {
        serde_json::to_string(&decode_text(ty, text)).unwrap()
    }

    #[test]
    fn scalars_keep_their_meaning() {
        let t = |oid| builtin(oid).unwrap();
        assert_eq!(json(&t(23), "-42"), "-42");
        assert_eq!(json(&t(1700), "12345678901234567890.000000001"), "\"12345678901234567890.000000001\"");
        assert_eq!(json(&t(701), "NaN"), "\"NaN\"");
        assert_eq!(json(&t(701), "-Infinity"), "\"-Infinity\"");
        assert_eq!(json(&t(700), "1.5"), "1.5");
        assert_eq!(json(&t(16), "t"), "true");
        assert_eq!(json(&t(3802), "{\"a\": [1, 2]}"), "{\"a\": [1, 2]}");
        assert_eq!(json(&t(17), "\\x00ff10"), "\"AP8Q\"");
        assert_eq!(json(&t(1114), "2026-01-02 03:04:05.123456"), "\"2026-01-02T03:04:05.123456\"");
        assert_eq!(json(&t(1184), "2026-01-02 03:04:05+00"), "\"2026-01-02T03:04:05Z\"");
        assert_eq!(json(&t(1184), "infinity"), "\"infinity\"");
        assert_eq!(json(&t(1186), "P1Y2M3DT4H5M6S"), "\"P1Y2M3DT4H5M6S\"");
        assert_eq!(json(&t(2950), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\"");
    }

    #[test]
    fn dates_and_timestamps_outside_years_1_to_9999_take_the_expanded_iso_form() {
        let t = |oid| builtin(oid).unwrap();
        assert_eq!(json(&t(1114), "0044-03-15 00:00:00 BC"), "\"-000043-03-15T00:00:00\"");
        assert_eq!(json(&t(1114), "0001-01-01 00:00:00 BC"), "\"0000-01-01T00:00:00\"");
        assert_eq!(json(&t(1114), "294276-12-31 23:59:59.999999"), "\"+294276-12-31T23:59:59.999999\"");
        assert_eq!(json(&t(1184), "4713-01-01 00:00:00+00 BC"), "\"-004712-01-01T00:00:00Z\"");
        assert_eq!(json(&t(1184), "-infinity"), "\"-infinity\"");
        assert_eq!(json(&t(1082), "5874897-12-31"), "\"+5874897-12-31\"");
        assert_eq!(json(&t(1082), "4713-11-24 BC"), "\"-004712-11-24\"");
        assert_eq!(json(&t(1082), "2026-02-03"), "\"2026-02-03\"");
        assert_eq!(json(&t(1082), "infinity"), "\"infinity\"");
    }

    #[test]
    fn owned_text_decodes_to_the_same_values_as_borrowed_text() {
        let cases = [
            (1114, "2026-01-02 03:04:05.123456"),
            (1114, "0044-03-15 00:00:00 BC"),
            (1114, "294276-12-31 23:59:59.999999"),
            (1114, "infinity"),
            (1184, "2026-01-02 03:04:05+00"),
            (1184, "2026-01-02 03:04:05+05:30"),
            (1184, "4713-01-01 00:00:00+00 BC"),
            (1184, "-infinity"),
            (1700, "1.10"),
            (1083, "12:00:00"),
            (25, "text"),
            (23, "12x"),
            (1082, "2026-02-03"),
        ];
        for (oid, text) in cases {
            let ty = builtin(oid).unwrap();
            assert_eq!(decode_owned(&ty, text.into()), decode_text(&ty, text), "{oid}: {text}");
        }
    }

    #[test]
    fn arrays_parse_with_quotes_nulls_and_nesting() {
        assert_eq!(json(&builtin(1007).unwrap(), "{1,NULL,3}"), "[1,null,3]");
        assert_eq!(json(&builtin(1009).unwrap(), r#"{"a b","c\"d",NULL,"NULL"}"#), r#"["a b","c\"d",null,"NULL"]"#);
        assert_eq!(json(&builtin(1007).unwrap(), "{{1,2},{3,4}}"), "[[1,2],[3,4]]");
        assert_eq!(json(&builtin(1007).unwrap(), "[0:1]={5,6}"), "[5,6]");
        assert_eq!(json(&builtin(1007).unwrap(), "{}"), "[]");
        assert_eq!(json(&builtin(1231).unwrap(), "{1.10,NaN}"), "[\"1.10\",\"NaN\"]");
    }

    #[test]
    fn what_does_not_parse_stays_text() {
        assert_eq!(json(&builtin(23).unwrap(), "12x"), "\"12x\"");
        assert_eq!(json(&builtin(1007).unwrap(), "{1,2"), "\"{1,2\"");
        assert_eq!(json(&builtin(3802).unwrap(), "{oops"), "\"{oops\"");
        assert_eq!(json(&builtin(17).unwrap(), "\\xzz"), "\"\\\\xzz\"");
    }
}
