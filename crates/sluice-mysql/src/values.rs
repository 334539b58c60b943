//! Binlog values to Sluice values, with what information_schema adds:
//! signedness, enum and set labels, text or binary, JSON.

use mysql_async::Value as My;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use sluice_core::{CompactString, JsonText, Position, SourceError, StackText, ToCompactString as _, Value};

use crate::clock::{epoch_text, push_clock, push_fraction};
use crate::schema::ColumnInfo;

/// Converts one column value of a row of `table` (`database.table`) read
/// at binlog `position`, which a value that cannot be decoded names.
pub fn convert(
    value: &BinlogValue<'_>,
    column_type: ColumnType,
    meta: &[u8],
    info: &ColumnInfo,
    table: &str,
    position: &Position,
) -> Result<Value, SourceError> {
    match value {
        BinlogValue::Value(v) => Ok(convert_value(v, column_type, meta, info)),
        BinlogValue::Jsonb(jsonb) => {
            let json = jsonb_to_json(jsonb).map_err(|e| {
                SourceError::permanent(
                    format!(
                        "{table}.{}: the JSON value of a row at binlog position {position} cannot be decoded: {e}",
                        info.name
                    ),
                    "nothing of this row was delivered: the pipeline stopped rather than deliver a wrong value. \
                     The binlog event cannot change, so a restart stops here again: inspect it with \
                     `mysqlbinlog --base64-output=decode-rows -v` at that file and offset and report it, or move \
                     past it with `sluice checkpoints reset --pipeline <name> --yes` and a new snapshot",
                )
            })?;
            Ok(JsonText::parse(json.to_string()).map(Value::Json).unwrap_or(Value::Text(json.to_compact_string())))
        }
        // A partial update carries only a diff against a document this
        // reader may never have seen, so no whole value can be delivered.
        BinlogValue::JsonDiff(_) => Err(SourceError::permanent(
            format!(
                "{table}.{}: the row at binlog position {position} holds a partial JSON update, which carries only a diff, not the value",
                info.name
            ),
            "set binlog_row_value_options to '' on the server (SET GLOBAL binlog_row_value_options = ''), \
             then reset this pipeline's checkpoints with `sluice checkpoints reset --pipeline <name> --yes` \
             and take a new snapshot, since the rows changed by partial updates were never delivered whole",
        )),
    }
}

/// MySQL's binary JSON as JSON. The direct conversion keeps the key order
/// the server stored; it refuses opaque scalars (a DECIMAL, DATE or TIME
/// stored inside a document), which the structured parse renders as
/// strings. Only a value neither can read is an error.
fn jsonb_to_json(jsonb: &mysql_async::binlog::jsonb::Value<'_>) -> Result<serde_json::Value, String> {
    serde_json::Value::try_from(jsonb.clone())
        .or_else(|_| jsonb.clone().parse().map(serde_json::Value::from))
        .map_err(|e| e.to_string())
}

pub(crate) fn convert_value(value: &My, column_type: ColumnType, meta: &[u8], info: &ColumnInfo) -> Value {
    use ColumnType::*;
    match value {
        My::NULL => Value::Null,
        My::Int(i) => match info.data_type.as_str() {
            "enum" => label(&info.labels, *i),
            _ if info.unsigned => Value::UInt(unsigned(*i, column_type)),
            // Sign-extend 24-bit values, whichever way the decoder read them.
            _ if column_type == MYSQL_TYPE_INT24 => Value::Int(((*i as i32) << 8 >> 8).into()),
            _ => Value::Int(*i),
        },
        My::UInt(u) => Value::UInt(*u),
        My::Float(f) => Value::Float(f.to_string().parse().unwrap_or(f64::from(*f))),
        My::Double(d) => Value::Float(*d),
        My::Date(y, mo, d, h, mi, s, us) => {
            let date_only = matches!(column_type, MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE);
            let mut text = StackText::default();
            text.push_padded((*y).into(), 4);
            text.push(b'-');
            text.push_padded((*mo).into(), 2);
            text.push(b'-');
            text.push_padded((*d).into(), 2);
            if date_only {
                return Value::Date(text.to_compact());
            }
            text.push(b'T');
            push_clock(&mut text, (*h).into(), *mi, *s);
            push_fraction(&mut text, *us, meta.first().copied().unwrap_or(0));
            Value::Timestamp(text.to_compact())
        }
        My::Time(negative, days, h, mi, s, us) => {
            let mut text = StackText::default();
            if *negative {
                text.push(b'-');
            }
            push_clock(&mut text, u64::from(*days) * 24 + u64::from(*h), *mi, *s);
            push_fraction(&mut text, *us, meta.first().copied().unwrap_or(0));
            Value::Time(text.to_compact())
        }
        My::Bytes(bytes) => bytes_value(bytes, column_type, meta, info),
    }
}

fn bytes_value(bytes: &[u8], column_type: ColumnType, meta: &[u8], info: &ColumnInfo) -> Value {
    use ColumnType::*;
    let text = || std::str::from_utf8(bytes).ok();
    match (column_type, info.data_type.as_str()) {
        (MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL, _) => {
            text().map_or_else(|| Value::Bytes(bytes.to_vec()), |t| Value::Decimal(t.into()))
        }
        (MYSQL_TYPE_YEAR, _) => {
            text().and_then(|t| t.parse().ok()).map_or_else(|| Value::Bytes(bytes.to_vec()), Value::Int)
        }
        (MYSQL_TYPE_TIMESTAMP2, _) => {
            text().map_or_else(|| Value::Bytes(bytes.to_vec()), |t| Value::TimestampTz(epoch_text(t, meta)))
        }
        (MYSQL_TYPE_BIT, _) => Value::UInt(bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))),
        (_, "set") => {
            let mask = bytes.iter().rev().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
            let names: Vec<&str> = info
                .labels
                .iter()
                .enumerate()
                .filter(|(i, _)| *i < 64 && mask & (1 << i) != 0)
                .map(|(_, l)| l.as_str())
                .collect();
            Value::Text(names.join(",").into())
        }
        _ if info.json => match text() {
            Some(t) => JsonText::parse(t.to_string()).map(Value::Json).unwrap_or(Value::Text(t.into())),
            None => Value::Bytes(bytes.to_vec()),
        },
        _ => match info.charset.as_deref() {
            Some(charset) => decode_text(bytes, charset),
            None => match binary_length(column_type, meta, info) {
                Some(length) if bytes.len() < length => {
                    let mut padded = bytes.to_vec();
                    padded.resize(length, 0);
                    Value::Bytes(padded)
                }
                _ => Value::Bytes(bytes.to_vec()),
            },
        },
    }
}

/// The declared length of a `BINARY(n)` column, whose trailing zero bytes
/// the binlog drops: from the schema history, or for a history recorded
/// before it kept the length, from the table map's metadata for the
/// column (real type and length, packed as the server's
/// `Field_string::save_field_metadata` writes them).
fn binary_length(column_type: ColumnType, meta: &[u8], info: &ColumnInfo) -> Option<usize> {
    if info.data_type != "binary" {
        return None;
    }
    if info.fixed_length.is_some() {
        return info.fixed_length;
    }
    match (column_type, meta) {
        (ColumnType::MYSQL_TYPE_STRING, [high, low, ..]) if high & 0x30 != 0x30 => {
            Some(usize::from(*low) | (usize::from((high & 0x30) ^ 0x30) << 4))
        }
        (ColumnType::MYSQL_TYPE_STRING, [_, low, ..]) => Some(usize::from(*low)),
        _ => None,
    }
}

/// Character data in its column's character set, as UTF-8 text. A set
/// Sluice cannot decode is passed on as bytes (base64), never guessed at.
fn decode_text(bytes: &[u8], charset: &str) -> Value {
    match charset {
        "utf8" | "utf8mb3" | "utf8mb4" | "ascii" => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(CompactString::from(text)),
            Err(_) => Value::Bytes(bytes.to_vec()),
        },
        // MySQL's latin1 is Windows-1252, which is ASCII below 0x80.
        "latin1" => match std::str::from_utf8(bytes) {
            Ok(text) if text.is_ascii() => Value::Text(text.into()),
            _ => Value::Text(bytes.iter().map(|b| cp1252(*b)).collect()),
        },
        _ => match std::str::from_utf8(bytes) {
            Ok(text) if text.is_ascii() => Value::Text(CompactString::from(text)),
            _ => Value::Bytes(bytes.to_vec()),
        },
    }
}

fn cp1252(byte: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž', '\u{8f}', '\u{90}', '‘',
        '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}', 'ž', 'Ÿ',
    ];
    match byte {
        0x80..=0x9F => HIGH[usize::from(byte - 0x80)],
        _ => char::from(byte),
    }
}

/// The label of an enum index (1-based; 0 is the empty error value).
fn label(labels: &[String], index: i64) -> Value {
    match usize::try_from(index).ok().and_then(|i| i.checked_sub(1)).and_then(|i| labels.get(i)) {
        Some(label) => Value::Text(label.as_str().into()),
        None => Value::Text(CompactString::default()),
    }
}

/// Reinterprets a value the binlog decoder read as signed, by the width of
/// the integer type.
fn unsigned(value: i64, column_type: ColumnType) -> u64 {
    use ColumnType::*;
    match column_type {
        MYSQL_TYPE_TINY => u64::from(value as u8),
        MYSQL_TYPE_SHORT => u64::from(value as u16),
        MYSQL_TYPE_INT24 => (value as u64) & 0xFF_FFFF,
        MYSQL_TYPE_LONG => u64::from(value as u32),
        _ => value as u64,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn info(data_type: &str) -> ColumnInfo {
        ColumnInfo {
            name: "c".into(),
            data_type: data_type.into(),
            unsigned: false,
            labels: vec!["small".into(), "large".into(), "x".into()],
            charset: Some("utf8mb4".into()),
            json: false,
            key: false,
            fixed_length: None,
            ..Default::default()
        }
    }

    pub(crate) fn json(value: Value) -> String {
        serde_json::to_string(&value).unwrap()
    }

    /// Written digit by digit, dates and times read as `format!` writes
    /// them, for every fractional precision and for hours past 99.
    #[test]
    fn dates_and_times_read_as_format_writes_them() {
        let text = |value: Value| match value {
            Value::Date(t) | Value::Timestamp(t) | Value::Time(t) => t,
            other => panic!("not a date or time: {other:?}"),
        };
        for (y, mo, d, h, mi, s, us) in
            [(2026, 2, 28, 13, 14, 15, 500_000), (1, 1, 1, 0, 0, 0, 7), (9999, 12, 31, 23, 59, 59, 999_999)]
        {
            for fsp in 0..=7u8 {
                let digits = format!("{us:06}");
                let fraction = match usize::from(fsp.min(6)) {
                    0 => String::new(),
                    n => format!(".{}", &digits[..n]),
                };
                let datetime = My::Date(y, mo, d, h, mi, s, us);
                assert_eq!(
                    text(convert_value(&datetime, ColumnType::MYSQL_TYPE_DATETIME2, &[fsp], &info("datetime"))),
                    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}")
                );
                assert_eq!(
                    text(convert_value(&datetime, ColumnType::MYSQL_TYPE_DATE, &[], &info("date"))),
                    format!("{y:04}-{mo:02}-{d:02}")
                );
                for (negative, days) in [(false, 0), (true, 34)] {
                    let time = My::Time(negative, days, h, mi, s, us);
                    let hours = u64::from(days) * 24 + u64::from(h);
                    let sign = if negative { "-" } else { "" };
                    assert_eq!(
                        text(convert_value(&time, ColumnType::MYSQL_TYPE_TIME2, &[fsp], &info("time"))),
                        format!("{sign}{hours:02}:{mi:02}:{s:02}{fraction}")
                    );
                }
            }
        }
    }

    #[test]
    fn integers_enums_sets_and_times() {
        let mut u = info("tinyint");
        u.unsigned = true;
        assert_eq!(json(convert_value(&My::Int(-1), ColumnType::MYSQL_TYPE_TINY, &[], &u)), "255");
        u.data_type = "bigint".into();
        assert_eq!(json(convert_value(&My::Int(-1), ColumnType::MYSQL_TYPE_LONGLONG, &[], &u)), "18446744073709551615");
        assert_eq!(json(convert_value(&My::Int(2), ColumnType::MYSQL_TYPE_STRING, &[], &info("enum"))), "\"large\"");
        assert_eq!(
            json(convert_value(&My::Bytes(vec![0b101]), ColumnType::MYSQL_TYPE_STRING, &[], &info("set"))),
            "\"small,x\""
        );
        assert_eq!(json(convert_value(&My::Float(0.1), ColumnType::MYSQL_TYPE_FLOAT, &[], &info("float"))), "0.1");
        let datetime = My::Date(2026, 2, 28, 13, 14, 15, 500_000);
        assert_eq!(
            json(convert_value(&datetime, ColumnType::MYSQL_TYPE_DATETIME2, &[3], &info("datetime"))),
            "\"2026-02-28T13:14:15.500\""
        );
        assert_eq!(
            json(convert_value(&datetime, ColumnType::MYSQL_TYPE_NEWDATE, &[], &info("date"))),
            "\"2026-02-28\""
        );
        let time = My::Time(true, 1, 2, 3, 4, 0);
        assert_eq!(json(convert_value(&time, ColumnType::MYSQL_TYPE_TIME2, &[0], &info("time"))), "\"-26:03:04\"");
        let ts = My::Bytes(b"1772284455.25".to_vec());
        assert_eq!(
            json(convert_value(&ts, ColumnType::MYSQL_TYPE_TIMESTAMP2, &[2], &info("timestamp"))),
            "\"2026-02-28T13:14:15.25Z\""
        );
        let dec = My::Bytes(b"-12345678901234567890.0100".to_vec());
        assert_eq!(
            json(convert_value(&dec, ColumnType::MYSQL_TYPE_NEWDECIMAL, &[], &info("decimal"))),
            "\"-12345678901234567890.0100\""
        );
        assert_eq!(json(convert_value(&My::Bytes(vec![1, 0]), ColumnType::MYSQL_TYPE_BIT, &[], &info("bit"))), "256");
        assert_eq!(
            json(convert_value(&My::Int(8_388_608), ColumnType::MYSQL_TYPE_INT24, &[], &info("mediumint"))),
            "-8388608"
        );
        let mut latin = info("varchar");
        latin.charset = Some("latin1".into());
        assert_eq!(
            json(convert_value(&My::Bytes(vec![b'h', 0xE9, 0x80]), ColumnType::MYSQL_TYPE_VARCHAR, &[], &latin)),
            "\"hé€\""
        );
        let mut big5 = info("varchar");
        big5.charset = Some("big5".into());
        assert_eq!(
            json(convert_value(&My::Bytes(vec![0xA4, 0x40]), ColumnType::MYSQL_TYPE_VARCHAR, &[], &big5)),
            "\"pEA=\""
        );
        let mut blob = info("blob");
        blob.charset = None;
        assert_eq!(json(convert_value(&My::Bytes(vec![0, 255]), ColumnType::MYSQL_TYPE_BLOB, &[], &blob)), "\"AP8=\"");
        let mut doc = info("longtext");
        doc.json = true;
        assert_eq!(
            json(convert_value(&My::Bytes(b"{\"a\":1}".to_vec()), ColumnType::MYSQL_TYPE_BLOB, &[], &doc)),
            "{\"a\":1}"
        );
    }

    #[test]
    fn fixed_length_binary_gets_its_trailing_zero_bytes_back() {
        let mut binary = info("binary");
        binary.charset = None;
        binary.fixed_length = Some(4);
        let string = ColumnType::MYSQL_TYPE_STRING;
        let meta = [0xfe, 4];
        assert_eq!(
            json(convert_value(&My::Bytes(vec![1]), string, &meta, &binary)),
            json(Value::Bytes(vec![1, 0, 0, 0]))
        );
        assert_eq!(json(convert_value(&My::Bytes(vec![]), string, &meta, &binary)), json(Value::Bytes(vec![0; 4])));
        assert_eq!(
            json(convert_value(&My::Bytes(vec![1, 2, 3, 4]), string, &meta, &binary)),
            json(Value::Bytes(vec![1, 2, 3, 4]))
        );
        // A history written before the length was kept: the table map has it.
        binary.fixed_length = None;
        assert_eq!(
            json(convert_value(&My::Bytes(vec![1]), string, &[0xfe, 16], &binary)),
            json(Value::Bytes({
                let mut v = vec![0; 16];
                v[0] = 1;
                v
            }))
        );
        let mut varbinary = info("varbinary");
        varbinary.charset = None;
        assert_eq!(
            json(convert_value(&My::Bytes(vec![1, 0]), ColumnType::MYSQL_TYPE_VARCHAR, &[8, 0], &varbinary)),
            json(Value::Bytes(vec![1, 0]))
        );
        assert_eq!(
            json(convert_value(&My::Bytes(vec![1]), ColumnType::MYSQL_TYPE_VARCHAR, &[8, 0], &varbinary)),
            json(Value::Bytes(vec![1])),
            "VARBINARY keeps the length it was given"
        );
    }

    fn binlog_position() -> Position {
        Position::Mysql(sluice_core::BinlogPos {
            file: "mariadb-bin.000007".into(),
            offset: 4242,
            seq: 0,
            gtid_before: None,
        })
    }

    #[test]
    fn undecodable_json_is_a_permanent_error_naming_table_column_and_position() {
        use mysql_async::binlog::jsonb::{JsonbString, Value as Jsonb};
        // A JSON string whose bytes are not UTF-8: neither conversion reads it.
        let damaged = BinlogValue::Jsonb(Jsonb::String(JsonbString::new(vec![b'a', 0xff, 0xfe])));
        let mut column = info("json");
        column.name = "doc".into();
        let err = convert(&damaged, ColumnType::MYSQL_TYPE_JSON, &[], &column, "shop.orders", &binlog_position())
            .expect_err("undecodable JSON must not become a value");
        assert!(!err.is_transient(), "{err}");
        let text = err.to_string();
        let position = binlog_position().to_string();
        assert!(text.contains("shop.orders.doc"), "{text}");
        assert!(text.contains(&position), "{text} lacks {position}");
        assert!(!text.contains("unreadable JSON"), "{text}");
    }

    #[test]
    fn a_partial_json_update_is_a_permanent_error_not_a_placeholder_value() {
        let diff = BinlogValue::JsonDiff(Vec::new());
        let mut column = info("json");
        column.name = "doc".into();
        let err = convert(&diff, ColumnType::MYSQL_TYPE_JSON, &[], &column, "shop.orders", &binlog_position())
            .expect_err("a diff is not the value");
        assert!(!err.is_transient(), "{err}");
        let text = err.to_string();
        assert!(text.contains("shop.orders.doc"), "{text}");
        assert!(text.contains(&binlog_position().to_string()), "{text}");
        assert!(text.contains("binlog_row_value_options"), "{text}");
    }

    #[test]
    fn json_with_an_opaque_scalar_is_decoded_not_refused() {
        use mysql_async::binlog::jsonb::{OpaqueValue, Value as Jsonb};
        // A DATE inside a document, as `JSON_ARRAY(CURDATE())` stores it.
        let packed = mysql_common_date_packed(2024, 2, 29);
        let date = BinlogValue::Jsonb(Jsonb::Opaque(OpaqueValue::new(ColumnType::MYSQL_TYPE_DATE, packed.to_vec())));
        let value = convert(&date, ColumnType::MYSQL_TYPE_JSON, &[], &info("json"), "shop.orders", &binlog_position())
            .expect("an opaque DATE is readable");
        assert!(json(value).contains("2024-02-29"));
    }

    /// MySQL's packed DATE: ((year * 13 + month) << 5 | day) << 17, shifted
    /// left 24 bits more as a datetime with no time of day.
    fn mysql_common_date_packed(year: i64, month: i64, day: i64) -> [u8; 8] {
        let ymd = ((year * 13 + month) << 5) | day;
        ((ymd << 17) << 24).to_le_bytes()
    }
}
