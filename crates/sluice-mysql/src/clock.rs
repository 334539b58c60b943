//! Date and time values as ISO-8601 text, written digit by digit.
//!
//! Through `format!`, a `datetime(6)` column took about a twentieth of a
//! binlog drain's time; pushed piece by piece onto a `CompactString`,
//! which checks its layout on every push, about a fourteenth. The text is
//! built on the stack and becomes a value in one copy.

use sluice_core::{CompactString, StackText};

/// `hh:mm:ss`.
pub fn push_clock(text: &mut StackText, hours: u64, minutes: u8, seconds: u8) {
    text.push_padded(hours, 2);
    text.push(b':');
    text.push_padded(minutes.into(), 2);
    text.push(b':');
    text.push_padded(seconds.into(), 2);
}

/// `.123456` cut to the column's fractional digits, or nothing.
pub fn push_fraction(text: &mut StackText, micros: u32, fsp: u8) {
    let fsp = u32::from(fsp.min(6));
    if fsp > 0 {
        text.push(b'.');
        text.push_padded((micros.min(999_999) / 10u32.pow(6 - fsp)).into(), fsp as usize);
    }
}

/// `2026-02-28 13:14:15` as `2026-02-28T13:14:15`, then `suffix`.
pub fn iso_datetime(text: &str, suffix: &str) -> CompactString {
    let mut out = CompactString::with_capacity(text.len() + suffix.len());
    match text.split_once(' ') {
        Some((date, clock)) => {
            out.push_str(date);
            out.push('T');
            out.push_str(clock);
        }
        None => out.push_str(text),
    }
    out.push_str(suffix);
    out
}

/// A TIMESTAMP as the binlog holds it (`seconds[.micros]` since the epoch)
/// to ISO-8601 UTC.
pub fn epoch_text(text: &str, meta: &[u8]) -> CompactString {
    let (secs, micros) = match text.split_once('.') {
        // The fraction is micro-seconds, written with six digits; pad in case.
        Some((s, us)) => {
            (s.parse::<i64>().unwrap_or(0), format!("{us:0<6}").get(..6).and_then(|d| d.parse().ok()).unwrap_or(0))
        }
        None => (text.parse::<i64>().unwrap_or(0), 0),
    };
    let whole = sluice_core::time::format_utc_micros(secs.saturating_mul(1_000_000));
    let mut out = StackText::default();
    // format_utc_micros ends in ".000000Z"; put the column's own fraction there.
    out.push_str(whole.strip_suffix(".000000Z").unwrap_or(&whole));
    push_fraction(&mut out, micros, meta.first().copied().unwrap_or(0));
    out.push(b'Z');
    out.to_compact()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_times_read_as_iso_text() {
        let mut text = StackText::default();
        text.push_padded(7, 4);
        text.push(b'-');
        push_clock(&mut text, 838, 59, 5);
        push_fraction(&mut text, 120_000, 3);
        assert_eq!(text.as_str(), "0007-838:59:05.120");
        assert_eq!(epoch_text("0", &[0]), "1970-01-01T00:00:00Z");
        assert_eq!(epoch_text("1700000000.5", &[6]), "2023-11-14T22:13:20.500000Z");
        assert_eq!(iso_datetime("2026-02-28 13:14:15", "Z"), "2026-02-28T13:14:15Z");
    }
}
