//! The typed columns of a Parquet file: each column's kind, from the
//! source's declared type where the event carries one, else from its
//! first non-null value, and how values go into it.
//!
//! | declared type | column |
//! |---|---|
//! | boolean | BOOLEAN |
//! | smallint, integer, bigint (year: INT32) | INT16, INT32, INT64 |
//! | real, double precision | FLOAT, DOUBLE |
//! | `numeric(p, s)`, p ≤ 38 | DECIMAL(p, s) |
//! | date | DATE |
//! | time | TIME(µs) |
//! | `timestamp(p)` / `timestamptz(p)` | TIMESTAMP(ms) for p ≤ 3, else TIMESTAMP(µs); with time zone: UTC-adjusted |
//! | json, jsonb | STRING with Parquet's JSON logical type |
//! | bytea, binary, blob | BINARY |
//! | text, enums, sets, uuid, time with time zone, interval, arrays, others | STRING |
//!
//! Without a declared type (`numeric` without precision, an event from an
//! older schema history), the first value decides: BOOLEAN, INT64,
//! UINT64, DOUBLE, DECIMAL(38, s) with s the larger of 9 and the value's
//! scale, DATE, TIMESTAMP(µs) (UTC-adjusted for a zoned value), BINARY,
//! else STRING. A value the column cannot hold (`NaN` in a decimal,
//! `infinity` in a date, an unsigned value past INT64) makes the sink
//! start a new file, whose first event picks a kind that holds it.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, StringBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
    TimestampMillisecondBuilder, UInt64Builder,
};
use arrow_schema::{DataType, Field};
use sluice_core::time::{parse_iso_date, parse_iso_timestamp};
use sluice_core::{ColumnType, Value};

/// Smallest scale of an inferred decimal column, so values with a few more
/// fraction digits than the first one still fit the file.
const MIN_DECIMAL_SCALE: usize = 9;
const DECIMAL_PRECISION: usize = 38;
const MICROS_PER_DAY: i64 = 86_400_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bool,
    Int16,
    Int32,
    Int,
    UInt,
    Float32,
    Float,
    /// Precision and scale.
    Decimal(u8, i8),
    Text,
    Json,
    Bytes,
    Date,
    Time,
    Timestamp(Unit),
    TimestampTz(Unit),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Millis,
    Micros,
}

pub(super) enum Column {
    /// Only nulls so far; the count.
    Undecided(usize),
    Bool(BooleanBuilder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int(Int64Builder),
    UInt(UInt64Builder),
    Float32(Float32Builder),
    Float(Float64Builder),
    Decimal(Decimal128Builder, i8),
    /// Text and JSON; the field says which.
    Text(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    TimestampMillis(TimestampMillisecondBuilder),
}

/// The column kind of a declared type; `None` where only values can say
/// (a `numeric` without precision).
pub(super) fn declared(ty: &ColumnType) -> Option<Kind> {
    let unit = |precision: u32| if precision <= 3 { Unit::Millis } else { Unit::Micros };
    Some(match ty {
        ColumnType::Bool => Kind::Bool,
        ColumnType::Int16 => Kind::Int16,
        ColumnType::Int32 | ColumnType::Year => Kind::Int32,
        ColumnType::Int64 => Kind::Int,
        ColumnType::Float32 => Kind::Float32,
        ColumnType::Float64 => Kind::Float,
        ColumnType::Decimal { precision: Some(p), scale } if (1..=DECIMAL_PRECISION as u32).contains(p) => {
            let scale = scale.unwrap_or(0);
            if scale > *p {
                return None;
            }
            Kind::Decimal(*p as u8, scale as i8)
        }
        ColumnType::Decimal { .. } => return None,
        ColumnType::Json => Kind::Json,
        ColumnType::Bytes => Kind::Bytes,
        ColumnType::Date => Kind::Date,
        ColumnType::Time { .. } => Kind::Time,
        ColumnType::Timestamp { precision } => Kind::Timestamp(unit(*precision)),
        ColumnType::TimestampTz { precision } => Kind::TimestampTz(unit(*precision)),
        ColumnType::Text { .. }
        | ColumnType::Uuid
        | ColumnType::TimeTz { .. }
        | ColumnType::Interval
        | ColumnType::Enum { .. }
        | ColumnType::Set { .. }
        | ColumnType::Bits { .. }
        | ColumnType::Xml
        | ColumnType::Money
        | ColumnType::Array(_)
        | ColumnType::Other => Kind::Text,
    })
}

/// The column kind a value asks for; `None` for null and unchanged.
pub(super) fn inferred(value: &Value) -> Option<Kind> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) => Kind::Int,
        Value::UInt(_) => Kind::UInt,
        Value::Float(_) => Kind::Float,
        Value::Decimal(text) => match decimal_digits(text) {
            Some((integer, fraction)) => {
                let scale = fraction.max(MIN_DECIMAL_SCALE);
                if integer + scale <= DECIMAL_PRECISION {
                    Kind::Decimal(DECIMAL_PRECISION as u8, scale as i8)
                } else if integer + fraction <= DECIMAL_PRECISION {
                    Kind::Decimal(DECIMAL_PRECISION as u8, fraction as i8)
                } else {
                    Kind::Text
                }
            }
            None => Kind::Text,
        },
        Value::Bytes(_) => Kind::Bytes,
        Value::Date(text) if parse_iso_date(text).is_some_and(|d| i32::try_from(d).is_ok()) => Kind::Date,
        Value::Timestamp(text) if parse_iso_timestamp(text).is_some_and(|(_, zoned)| !zoned) => {
            Kind::Timestamp(Unit::Micros)
        }
        Value::TimestampTz(text) if parse_iso_timestamp(text).is_some() => Kind::TimestampTz(Unit::Micros),
        _ => Kind::Text,
    })
}

/// Whether a column of `kind` holds `value` as it is.
pub(super) fn fits(kind: Kind, value: &Value) -> bool {
    match (kind, value) {
        (_, Value::Null | Value::Unchanged) | (Kind::Text | Kind::Json, _) => true,
        (Kind::Bool, Value::Bool(_)) | (Kind::Int, Value::Int(_)) | (Kind::UInt, Value::UInt(_)) => true,
        (Kind::Float | Kind::Float32, Value::Float(_)) | (Kind::Bytes, Value::Bytes(_)) => true,
        (Kind::Int16, Value::Int(v)) => i16::try_from(*v).is_ok(),
        (Kind::Int32, Value::Int(v)) => i32::try_from(*v).is_ok(),
        (Kind::Decimal(precision, scale), Value::Decimal(text)) => {
            decimal_digits(text).is_some_and(|(integer, fraction)| {
                fraction <= scale as usize && integer + scale as usize <= precision as usize
            })
        }
        (Kind::Date, Value::Date(_)) | (Kind::Time, Value::Time(_)) => micros(kind, value).is_some(),
        (Kind::Timestamp(_), Value::Timestamp(_)) | (Kind::TimestampTz(_), Value::TimestampTz(_)) => {
            micros(kind, value).is_some()
        }
        _ => false,
    }
}

/// A date's days, a time's microseconds since midnight, a timestamp's
/// count of the column's unit since the epoch; `None` where the column
/// cannot hold the value (a zone on a time, sub-millisecond digits in a
/// millisecond column).
fn micros(kind: Kind, value: &Value) -> Option<i64> {
    match (kind, value) {
        (Kind::Date, Value::Date(text)) => parse_iso_date(text).filter(|d| i32::try_from(*d).is_ok()),
        (Kind::Time, Value::Time(text)) => {
            let (us, zoned) = parse_iso_timestamp(&format!("1970-01-01T{text}"))?;
            (!zoned && (0..MICROS_PER_DAY).contains(&us)).then_some(us)
        }
        (Kind::Timestamp(unit), Value::Timestamp(text)) | (Kind::TimestampTz(unit), Value::TimestampTz(text)) => {
            let (us, zoned) = parse_iso_timestamp(text)?;
            if matches!(kind, Kind::Timestamp(_)) && zoned {
                return None;
            }
            match unit {
                Unit::Micros => Some(us),
                Unit::Millis => (us % 1000 == 0).then_some(us / 1000),
            }
        }
        _ => None,
    }
}

/// Integer and fraction digit counts of a plain decimal (`-12.50`).
pub(super) fn decimal_digits(text: &str) -> Option<(usize, usize)> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!integer.is_empty() && digits(integer) && digits(fraction)).then(|| {
        let significant = integer.trim_start_matches('0').len();
        (significant, fraction.len())
    })
}

/// A decimal's digits scaled to `scale`, as an integer.
pub(super) fn decimal_value(text: &str, scale: i8) -> Option<i128> {
    let negative = text.starts_with('-');
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let mut digits = String::with_capacity(integer.len() + scale as usize);
    digits.push_str(integer);
    digits.push_str(fraction);
    digits.extend(std::iter::repeat_n('0', (scale as usize).checked_sub(fraction.len())?));
    let magnitude: i128 = digits.parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// An empty column of `kind`, with `nulls` nulls first.
pub(super) fn builder(kind: Kind, nulls: usize) -> Column {
    let mut column = match kind {
        Kind::Bool => Column::Bool(BooleanBuilder::new()),
        Kind::Int16 => Column::Int16(Int16Builder::new()),
        Kind::Int32 => Column::Int32(Int32Builder::new()),
        Kind::Int => Column::Int(Int64Builder::new()),
        Kind::UInt => Column::UInt(UInt64Builder::new()),
        Kind::Float32 => Column::Float32(Float32Builder::new()),
        Kind::Float => Column::Float(Float64Builder::new()),
        Kind::Decimal(precision, scale) => Column::Decimal(
            Decimal128Builder::new()
                .with_precision_and_scale(precision, scale)
                .unwrap_or_else(|_| Decimal128Builder::new()),
            scale,
        ),
        Kind::Text | Kind::Json => Column::Text(StringBuilder::new()),
        Kind::Bytes => Column::Bytes(BinaryBuilder::new()),
        Kind::Date => Column::Date(Date32Builder::new()),
        Kind::Time => Column::Time(Time64MicrosecondBuilder::new()),
        Kind::Timestamp(Unit::Micros) => Column::Timestamp(TimestampMicrosecondBuilder::new()),
        Kind::Timestamp(Unit::Millis) => Column::TimestampMillis(TimestampMillisecondBuilder::new()),
        Kind::TimestampTz(Unit::Micros) => {
            Column::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
        }
        Kind::TimestampTz(Unit::Millis) => {
            Column::TimestampMillis(TimestampMillisecondBuilder::new().with_timezone("UTC"))
        }
    };
    for _ in 0..nulls {
        append(&mut column, kind, &Value::Null);
    }
    column
}

/// Appends `value`, which `fits` the column (a value that does not is
/// stored as null; the file's `accepts` keeps that from happening).
pub(super) fn append(column: &mut Column, kind: Kind, value: &Value) {
    let null = matches!(value, Value::Null | Value::Unchanged);
    let int = if let Value::Int(v) = value { Some(*v) } else { None };
    let float = if let Value::Float(v) = value { Some(*v) } else { None };
    match column {
        Column::Undecided(nulls) => *nulls += 1,
        Column::Bool(b) => b.append_option(if let Value::Bool(v) = value { Some(*v) } else { None }),
        Column::Int16(b) => b.append_option(int.and_then(|v| i16::try_from(v).ok())),
        Column::Int32(b) => b.append_option(int.and_then(|v| i32::try_from(v).ok())),
        Column::Int(b) => b.append_option(int),
        Column::UInt(b) => b.append_option(if let Value::UInt(v) = value { Some(*v) } else { None }),
        // A declared real arrives as the double it widened to: exact.
        Column::Float32(b) => b.append_option(float.map(|v| v as f32)),
        Column::Float(b) => b.append_option(float),
        Column::Decimal(b, scale) => {
            b.append_option(if let Value::Decimal(t) = value { decimal_value(t, *scale) } else { None });
        }
        Column::Text(b) if null => b.append_null(),
        Column::Text(b) => b.append_value(value.text()),
        Column::Bytes(b) => match value {
            Value::Bytes(v) => b.append_value(v),
            _ => b.append_null(),
        },
        Column::Date(b) => b.append_option(micros(kind, value).map(|d| d as i32)),
        Column::Time(b) => b.append_option(micros(kind, value)),
        Column::Timestamp(b) => b.append_option(micros(kind, value)),
        Column::TimestampMillis(b) => b.append_option(micros(kind, value)),
    }
}

/// The column's values so far, and its field.
pub(super) fn finish(name: &str, column: &mut Column, kind: Option<Kind>) -> (Field, ArrayRef) {
    let array: ArrayRef = match column {
        Column::Undecided(_) => Arc::new(StringBuilder::new().finish()),
        Column::Bool(b) => Arc::new(b.finish()),
        Column::Int16(b) => Arc::new(b.finish()),
        Column::Int32(b) => Arc::new(b.finish()),
        Column::Int(b) => Arc::new(b.finish()),
        Column::UInt(b) => Arc::new(b.finish()),
        Column::Float32(b) => Arc::new(b.finish()),
        Column::Float(b) => Arc::new(b.finish()),
        Column::Decimal(b, _) => Arc::new(b.finish()),
        Column::Text(b) => Arc::new(b.finish()),
        Column::Bytes(b) => Arc::new(b.finish()),
        Column::Date(b) => Arc::new(b.finish()),
        Column::Time(b) => Arc::new(b.finish()),
        Column::Timestamp(b) => Arc::new(b.finish()),
        Column::TimestampMillis(b) => Arc::new(b.finish()),
    };
    let field = Field::new(name, array.data_type().clone(), true);
    let field = match (kind, array.data_type()) {
        (Some(Kind::Json), DataType::Utf8) => field.with_extension_type(arrow_schema::extension::Json::default()),
        _ => field,
    };
    (field, array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_keep_every_digit() {
        assert_eq!(decimal_digits("-0012.50"), Some((2, 2)));
        assert_eq!(decimal_digits("NaN"), None);
        assert_eq!(decimal_value("-12.5", 9), Some(-12_500_000_000));
        assert_eq!(decimal_value("12.1234567891", 9), None);
        assert_eq!(inferred(&Value::Decimal("1.5".into())), Some(Kind::Decimal(38, 9)));
        assert_eq!(inferred(&Value::Decimal("0.1234567890123".into())), Some(Kind::Decimal(38, 13)));
        assert!(fits(Kind::Decimal(38, 9), &Value::Decimal("99999.123".into())));
        assert!(!fits(Kind::Decimal(38, 9), &Value::Decimal("1.1234567891".into())));
        assert!(!fits(Kind::Decimal(38, 9), &Value::Decimal("NaN".into())));
    }

    #[test]
    fn declared_types_bound_what_fits() {
        let numeric = declared(&ColumnType::Decimal { precision: Some(12), scale: Some(2) }).unwrap();
        assert_eq!(numeric, Kind::Decimal(12, 2));
        assert!(fits(numeric, &Value::Decimal("9999999999.99".into())));
        assert!(!fits(numeric, &Value::Decimal("99999999999.99".into())));
        assert_eq!(declared(&ColumnType::Decimal { precision: None, scale: None }), None);
        assert_eq!(declared(&ColumnType::Decimal { precision: Some(50), scale: Some(2) }), None);
        assert!(!fits(Kind::Int16, &Value::Int(40_000)));
        assert!(!fits(Kind::Int, &Value::UInt(u64::MAX)));
        let millis = declared(&ColumnType::Timestamp { precision: 3 }).unwrap();
        assert!(fits(millis, &Value::Timestamp("2024-01-01T00:00:00.123".into())));
        assert!(!fits(millis, &Value::Timestamp("2024-01-01T00:00:00.1234".into())));
        assert!(fits(Kind::Time, &Value::Time("13:45:56.123456".into())));
        assert!(!fits(Kind::Time, &Value::Time("24:00:00".into())));
        assert!(!fits(Kind::Time, &Value::Time("13:45:56+02".into())));
        assert_eq!(declared(&ColumnType::Enum { labels: vec![] }), Some(Kind::Text));
    }

    #[test]
    fn values_a_type_cannot_hold_fall_back_to_text() {
        assert_eq!(inferred(&Value::Date("infinity".into())), Some(Kind::Text));
        assert_eq!(inferred(&Value::Timestamp("2024-01-01T00:00:00".into())), Some(Kind::Timestamp(Unit::Micros)));
        assert_eq!(
            inferred(&Value::TimestampTz("2024-01-01T00:00:00Z".into())),
            Some(Kind::TimestampTz(Unit::Micros))
        );
        assert!(fits(Kind::Text, &Value::Int(3)));
        assert!(!fits(Kind::Int, &Value::Text("3".into())));
    }
}
