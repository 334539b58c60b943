//! Column values in Debezium's representation.

use std::fmt::Write as _;

use base64::Engine as _;
use sluice_core::Value;
use sluice_core::time::{parse_iso_date, parse_iso_timestamp};

use super::out::Out;
use super::settings::BinaryHandling;
use super::types::Conv;

/// Debezium's average month, in days, for intervals.
const DAYS_PER_MONTH_AVG: f64 = 365.25 / 12.0;

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Writes `value` as `conv` says; an error names what cannot be represented.
pub fn write<O: Out>(out: &mut O, value: &Value, conv: &Conv, unavailable: &str) -> Result<(), String> {
    match (value, conv) {
        (Value::Null, _) => out.null(),
        (Value::Unchanged, Conv::Binary(mode)) => binary(out, unavailable.as_bytes(), *mode),
        (Value::Unchanged, Conv::Array(_)) => {
            out.begin_array(1)?;
            out.str(unavailable)?;
            out.end_array()
        }
        (Value::Unchanged, Conv::Text) => out.str(unavailable),
        (Value::Unchanged, _) => Err("an unchanged value of a column that cannot hold the placeholder".into()),
        (Value::Bool(b), Conv::Bool) => out.bool(*b),
        // MySQL's bit(1) arrives as a number.
        (Value::UInt(u), Conv::Bool) => out.bool(*u != 0),
        (Value::UInt(u), Conv::Bits { length }) => {
            let bytes = u.to_le_bytes();
            out.bytes(&bytes[..(*length as usize).div_ceil(8).clamp(1, 8)])
        }
        // PostgreSQL's bit strings arrive as their text, most significant bit first.
        (Value::Text(bits), Conv::Bool) if bits == "0" || bits == "1" => out.bool(bits == "1"),
        (Value::Text(bits), Conv::Bits { .. }) => out.bytes(&bit_string_bytes(bits)?),
        // PostgreSQL's money arrives as its text, in the server's currency format.
        (Value::Text(money), conv @ (Conv::DecimalBytes { .. } | Conv::DecimalString | Conv::DecimalDouble)) => {
            decimal(out, &money_decimal(money)?, conv)
        }
        (Value::Int(i), Conv::Int) => out.long(*i),
        // Debezium's `bigint.unsigned.handling.mode=long`: an unsigned
        // bigint above i64::MAX wraps, as in Debezium, to fit Connect's int64.
        (Value::UInt(u), Conv::Int) => out.long(*u as i64),
        (Value::Float(f), Conv::Float) => out.double(*f),
        (Value::Decimal(text), conv) => decimal(out, text, conv),
        (Value::Bytes(bytes), Conv::Binary(mode)) => binary(out, bytes, *mode),
        (Value::Json(doc), Conv::Text) => out.str(doc.as_str()),
        (Value::Date(text), Conv::Date) => {
            out.long(parse_iso_date(text).ok_or_else(|| format!("date {text:?} has no day number"))?)
        }
        (Value::Time(text), Conv::TimeMillis) => out.long(time_of_day_micros(text)? / 1000),
        (Value::Time(text), Conv::TimeMicros) => out.long(time_of_day_micros(text)?),
        (Value::Time(text), Conv::ZonedTime { precision }) => out.str(&zoned_time(text, *precision)?),
        (Value::Timestamp(text) | Value::TimestampTz(text), Conv::TimestampMillis) => {
            out.long(timestamp_micros(text)?.div_euclid(1000))
        }
        (Value::Timestamp(text) | Value::TimestampTz(text), Conv::TimestampMicros) => out.long(timestamp_micros(text)?),
        (Value::TimestampTz(text), Conv::ZonedTimestamp { precision }) => out.str(&zoned_timestamp(text, *precision)?),
        (Value::Text(text), Conv::IntervalMicros) => out.long(interval_micros(text)?),
        (Value::Array(items), Conv::Array(item)) => {
            out.begin_array(items.len())?;
            for value in items {
                write(out, value, item, unavailable)?;
            }
            out.end_array()
        }
        (Value::Bytes(b), Conv::Uuid) if b.len() == 16 => {
            let hex = hex::encode(b);
            out.str(&format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]))
        }
        (Value::Text(text), Conv::Text | Conv::Uuid) => out.str(text),
        (value, Conv::Text | Conv::Uuid) => out.str(&value.text()),
        (value, conv) => Err(format!("a value {value:?} does not fit the column's Debezium type ({conv:?})")),
    }
}

/// Bytes as the binary handling mode has them: Connect bytes, or a string
/// of their base64 or hex.
fn binary<O: Out>(out: &mut O, bytes: &[u8], mode: BinaryHandling) -> Result<(), String> {
    match mode {
        BinaryHandling::Bytes => out.bytes(bytes),
        BinaryHandling::Base64 => out.str(&base64::engine::general_purpose::STANDARD.encode(bytes)),
        BinaryHandling::Hex => out.str(&hex::encode(bytes)),
    }
}

fn decimal<O: Out>(out: &mut O, text: &str, conv: &Conv) -> Result<(), String> {
    match conv {
        Conv::DecimalString | Conv::Text => out.str(text),
        Conv::DecimalDouble => out.double(text.parse().map_err(|_| format!("decimal {text:?} is not a number"))?),
        Conv::DecimalBytes { scale } => out.bytes(&unscaled(text, Some(*scale))?.1),
        Conv::VariableDecimal => {
            let (scale, bytes) = unscaled(text, None)?;
            out.begin_struct()?;
            out.key("scale")?;
            out.long(i64::from(scale))?;
            out.key("value")?;
            out.bytes(&bytes)?;
            out.end_struct()
        }
        other => Err(format!("a decimal does not fit the column's Debezium type ({other:?})")),
    }
}

/// A bit string (`1010000011`) as Debezium's `Bits`: the number it
/// spells, little-endian, one byte per eight bits or part of them.
fn bit_string_bytes(bits: &str) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0u8; bits.len().div_ceil(8).max(1)];
    for (i, bit) in bits.bytes().rev().enumerate() {
        match bit {
            b'1' => bytes[i / 8] |= 1 << (i % 8),
            b'0' => {}
            _ => return Err(format!("bit string {bits:?} holds something other than 0 and 1")),
        }
    }
    Ok(bytes)
}

/// A money text (`$1,234.50`, `-$3.00`, `($3.00)`) as a plain decimal.
fn money_decimal(money: &str) -> Result<String, String> {
    let negative = money.contains('-') || money.starts_with('(');
    let digits: String = money.chars().filter(|c| c.is_ascii_digit() || *c == '.').collect();
    if digits.is_empty() || digits.matches('.').count() > 1 {
        return Err(format!("money {money:?} is not an amount"));
    }
    Ok(if negative { format!("-{digits}") } else { digits })
}

/// The unscaled value of a decimal as Java's `BigInteger.toByteArray`
/// writes it (big-endian two's complement, shortest form), and its scale:
/// `scale` when given (the text padded to it), else the text's own.
pub fn unscaled(text: &str, scale: Option<u32>) -> Result<(u32, Vec<u8>), String> {
    let refuse = || format!("decimal {text:?} has no exact Debezium form (NaN and infinity have none)");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(refuse());
    }
    let scale = scale.unwrap_or(fraction.len() as u32);
    let kept = fraction.len().min(scale as usize);
    if fraction[kept..].bytes().any(|b| b != b'0') {
        return Err(format!("decimal {text:?} has more fraction digits than the column's scale {scale}"));
    }
    let padding = scale as usize - kept;
    let all = whole.bytes().chain(fraction[..kept].bytes()).chain(std::iter::repeat_n(b'0', padding));
    // Up to 18 digits fit an i64: the common case, without the long
    // arithmetic below.
    if whole.len() + kept + padding <= 18 {
        let magnitude = all.fold(0i64, |n, digit| n * 10 + i64::from(digit - b'0'));
        return Ok((scale, shortest_twos_complement(if negative { -magnitude } else { magnitude })));
    }
    // Base-256 magnitude, big-endian, built digit by digit.
    let mut magnitude: Vec<u8> = Vec::new();
    for digit in all {
        let mut carry = u32::from(digit - b'0');
        for byte in magnitude.iter_mut().rev() {
            let next = u32::from(*byte) * 10 + carry;
            *byte = (next & 0xFF) as u8;
            carry = next >> 8;
        }
        while carry > 0 {
            magnitude.insert(0, (carry & 0xFF) as u8);
            carry >>= 8;
        }
    }
    let start = magnitude.iter().position(|b| *b != 0).unwrap_or(magnitude.len());
    let magnitude = &magnitude[start..];
    if magnitude.is_empty() {
        return Ok((scale, vec![0]));
    }
    if !negative {
        let mut bytes = Vec::with_capacity(magnitude.len() + 1);
        if magnitude[0] & 0x80 != 0 {
            bytes.push(0);
        }
        bytes.extend_from_slice(magnitude);
        return Ok((scale, bytes));
    }
    let twos = |width: usize| -> Vec<u8> {
        let mut bytes = vec![0u8; width - magnitude.len()];
        bytes.extend_from_slice(magnitude);
        for byte in bytes.iter_mut() {
            *byte = !*byte;
        }
        for byte in bytes.iter_mut().rev() {
            let (sum, overflow) = byte.overflowing_add(1);
            *byte = sum;
            if !overflow {
                break;
            }
        }
        bytes
    };
    let short = twos(magnitude.len());
    Ok((scale, if short[0] & 0x80 != 0 { short } else { twos(magnitude.len() + 1) }))
}

/// `n` big-endian in as few bytes as keep its sign, as
/// `BigInteger.toByteArray` writes it.
fn shortest_twos_complement(n: i64) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let redundant = |pair: &[u8]| (pair[0] == 0 && pair[1] & 0x80 == 0) || (pair[0] == 0xFF && pair[1] & 0x80 != 0);
    let start = bytes.windows(2).take_while(|pair| redundant(pair)).count();
    bytes[start..].to_vec()
}

/// Microseconds of `[-]H:MM:SS[.fraction][zone]` (zone ignored): a time
/// of day, or a MySQL `TIME`, which runs from -838:59:59 to 838:59:59.
fn time_of_day_micros(text: &str) -> Result<i64, String> {
    let refuse = || format!("time {text:?} does not parse");
    let clock = strip_zone(text);
    let (sign, clock) = match clock.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, clock),
    };
    let (whole, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let parts: Vec<i64> = whole.split(':').map(|p| p.parse().map_err(|_| refuse())).collect::<Result<_, _>>()?;
    let [hours, minutes, seconds] = parts.as_slice() else { return Err(refuse()) };
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse());
    }
    let micros: i64 = format!("{:0<6}", &fraction[..fraction.len().min(6)]).parse().map_err(|_| refuse())?;
    Ok(sign * (((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros))
}

fn strip_zone(text: &str) -> &str {
    let end = text.get(8..).and_then(|rest| rest.find(['+', '-', 'Z'])).map_or(text.len(), |i| i + 8);
    &text[..end]
}

fn timestamp_micros(text: &str) -> Result<i64, String> {
    parse_iso_timestamp(text)
        .map(|(micros, _)| micros)
        .ok_or_else(|| format!("timestamp {text:?} has no Debezium form (infinity has none)"))
}

/// A time with zone, in UTC, as `HH:MM:SS[.fraction]Z`.
fn zoned_time(text: &str, precision: u32) -> Result<String, String> {
    let local = strip_zone(text);
    let zone = &text[local.len()..];
    let zone = if zone.is_empty() { "Z" } else { zone };
    let (micros, _) = parse_iso_timestamp(&format!("1970-01-02T{local}{zone}"))
        .ok_or_else(|| format!("time {text:?} does not parse"))?;
    let of_day = micros.rem_euclid(MICROS_PER_DAY);
    let mut out = String::with_capacity(16);
    clock(&mut out, of_day, precision);
    out.push('Z');
    Ok(out)
}

/// `HH:MM:SS` and `precision` fraction digits (at most 6), as Debezium
/// prints a zoned time of a column with that precision.
fn clock(out: &mut String, micros_of_day: i64, precision: u32) {
    let seconds = micros_of_day / 1_000_000;
    let fraction = micros_of_day % 1_000_000;
    let _ = write!(out, "{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60);
    let digits = precision.min(6);
    if digits > 0 {
        // The leading `digits` of the six-digit fraction.
        let _ = write!(out, ".{:0width$}", fraction / 10i64.pow(6 - digits), width = digits as usize);
    }
}

/// A timestamp with zone as Debezium's `ZonedTimestamp`: ISO-8601 in UTC.
fn zoned_timestamp(text: &str, precision: u32) -> Result<String, String> {
    let micros = timestamp_micros(text)?;
    let (year, month, day) = sluice_core::time::civil_from_days(micros.div_euclid(MICROS_PER_DAY));
    let mut out = String::with_capacity(32);
    let _ = write!(out, "{year:04}-{month:02}-{day:02}T");
    clock(&mut out, micros.rem_euclid(MICROS_PER_DAY), precision);
    out.push('Z');
    Ok(out)
}

/// An ISO-8601 duration (`P1Y2M3DT4H5M6.5S`, parts may be negative) in
/// microseconds, as Debezium's `MicroDuration` counts it.
fn interval_micros(text: &str) -> Result<i64, String> {
    let refuse = || format!("interval {text:?} is not an ISO-8601 duration");
    let body = text.strip_prefix('P').ok_or_else(refuse)?;
    let (date_part, time_part) = body.split_once('T').unwrap_or((body, ""));
    let mut parts = [0f64; 6];
    let mut read = |part: &str, units: &[(char, usize)]| -> Result<(), String> {
        let mut number = String::new();
        for c in part.chars() {
            match units.iter().find(|(unit, _)| *unit == c) {
                Some((_, index)) => {
                    parts[*index] = number.parse().map_err(|_| refuse())?;
                    number.clear();
                }
                None => number.push(c),
            }
        }
        if number.is_empty() { Ok(()) } else { Err(refuse()) }
    };
    read(date_part, &[('Y', 0), ('M', 1), ('D', 2)])?;
    read(time_part, &[('H', 3), ('M', 4), ('S', 5)])?;
    let [years, months, days, hours, minutes, seconds] = parts;
    let days = (years * 12.0 + months) * DAYS_PER_MONTH_AVG + days;
    let seconds = ((days * 24.0 + hours) * 60.0 + minutes) * 60.0 + seconds;
    Ok((seconds * 1e6) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str, scale: Option<u32>) -> String {
        unscaled(text, scale).unwrap().1.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn bit_strings_and_money_texts_convert_or_are_refused() {
        assert_eq!(bit_string_bytes("1010000011").unwrap(), [0x83, 0x02]);
        assert_eq!(bit_string_bytes("101").unwrap(), [0x05]);
        assert!(bit_string_bytes("10x").is_err());
        assert_eq!(money_decimal("$1,234.50").unwrap(), "1234.50");
        assert_eq!(money_decimal("-$3.00").unwrap(), "-3.00");
        assert_eq!(money_decimal("($3.00)").unwrap(), "-3.00");
        assert!(money_decimal("$").is_err());
    }

    /// `n` as `BigInteger.toByteArray` writes it, through i128.
    fn reference(n: i128) -> String {
        let bytes = n.to_be_bytes();
        let start = (0..15)
            .take_while(|&i| {
                (bytes[i] == 0 && bytes[i + 1] & 0x80 == 0) || (bytes[i] == 0xFF && bytes[i + 1] & 0x80 != 0)
            })
            .count();
        bytes[start..].iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn short_and_long_decimals_agree_with_a_wider_integer() {
        let mut n: i128 = 1;
        // Through 18 digits (the i64 path) and on to 30 (the long one),
        // both signs, at each byte boundary and beside it.
        for _ in 0..100 {
            for m in [n - 1, n, n + 1, -n - 1, -n, -n + 1] {
                let text = format!("{}{}.{:02}", if m < 0 { "-" } else { "" }, m.abs() / 100, m.abs() % 100);
                assert_eq!(hex(&text, Some(2)), reference(m), "{text}");
            }
            n = if n < 10_i128.pow(29) { n * 3 + 7 } else { n };
        }
        assert_eq!(hex("-0.00", Some(2)), "00");
        assert_eq!(hex("99999999999999999.9", Some(1)), reference(999_999_999_999_999_999));
        assert_eq!(hex("999999999999999999.9", Some(1)), reference(9_999_999_999_999_999_999));
    }

    #[test]
    fn decimals_become_java_big_integer_bytes() {
        assert_eq!(hex("0", Some(2)), "00");
        assert_eq!(hex("1.27", Some(2)), "7f");
        assert_eq!(hex("1.28", Some(2)), "0080");
        assert_eq!(hex("-1.28", Some(2)), "80");
        assert_eq!(hex("-1.29", Some(2)), "ff7f");
        assert_eq!(hex("-2.56", Some(2)), "ff00");
        assert_eq!(hex("12.5", Some(2)), "04e2");
        assert_eq!(unscaled("12.500", None).unwrap().0, 3);
        assert!(unscaled("NaN", Some(2)).is_err());
        assert!(unscaled("1.234", Some(2)).is_err());
        // 2^64: beyond any machine integer.
        assert_eq!(hex("18446744073709551616", Some(0)), "010000000000000000");
    }

    #[test]
    fn times_and_intervals_count_as_debezium_does() {
        assert_eq!(time_of_day_micros("12:34:56.789").unwrap(), 45_296_789_000);
        assert_eq!(time_of_day_micros("-838:59:59").unwrap(), -3_020_399_000_000);
        assert_eq!(time_of_day_micros("24:00:00").unwrap(), 86_400_000_000);
        assert_eq!(zoned_time("12:34:56.5+02", 3).unwrap(), "10:34:56.500Z");
        assert_eq!(zoned_timestamp("2026-01-02T03:04:05.120Z", 6).unwrap(), "2026-01-02T03:04:05.120000Z");
        assert_eq!(zoned_timestamp("2026-01-02T03:04:05Z", 0).unwrap(), "2026-01-02T03:04:05Z");
        assert_eq!(zoned_timestamp("0001-01-01T00:00:00Z", 6).unwrap(), "0001-01-01T00:00:00.000000Z");
        assert_eq!(interval_micros("P1DT2H").unwrap(), 93_600_000_000);
        assert_eq!(interval_micros("P1M").unwrap(), 2_629_800_000_000);
        assert_eq!(interval_micros("PT-1.5S").unwrap(), -1_500_000);
        assert!(interval_micros("1 day").is_err());
    }
}
