//! Date and time values as ISO-8601 text, written digit by digit.
//!
//! Through `format!`, a `datetime(6)` column took about a twentieth of a
//! binlog drain's time; pushed piece by piece onto a `CompactString`,
//! which checks its layout on every push, about a fourteenth. The text is
//! built on the stack and becomes a value in one copy.

use sluice_core::CompactString;

/// The longest text written here: a `TIMESTAMP` of the largest year
/// `format_utc_micros` writes (`+292278-…T…​.123456Z`) is 30 bytes; a
/// `TIME` of the largest day count 25.
const CAPACITY: usize = 40;

/// Text on the stack, for one date or time value.
pub struct TextBuf {
    bytes: [u8; CAPACITY],
    len: usize,
}

impl Default for TextBuf {
    fn default() -> Self {
        TextBuf { bytes: [0; CAPACITY], len: 0 }
    }
}

impl TextBuf {
    /// Text past the capacity is cut off; what is written here cannot
    /// reach it (see [`CAPACITY`]).
    pub fn push_str(&mut self, text: &str) {
        let end = (self.len + text.len()).min(CAPACITY);
        self.bytes[self.len..end].copy_from_slice(&text.as_bytes()[..end - self.len]);
        self.len = end;
    }

    pub fn push(&mut self, byte: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// `value` zero-padded to `width` digits, as `{value:0width$}` writes it.
    pub fn push_padded(&mut self, value: u64, width: usize) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value);
        for _ in digits.len()..width {
            self.push(b'0');
        }
        self.push_str(digits);
    }

    /// `hh:mm:ss`.
    pub fn push_clock(&mut self, hours: u64, minutes: u8, seconds: u8) {
        self.push_padded(hours, 2);
        self.push(b':');
        self.push_padded(minutes.into(), 2);
        self.push(b':');
        self.push_padded(seconds.into(), 2);
    }

    /// `.123456` cut to the column's fractional digits, or nothing.
    pub fn push_fraction(&mut self, micros: u32, fsp: u8) {
        let fsp = u32::from(fsp.min(6));
        if fsp > 0 {
            self.push(b'.');
            self.push_padded((micros.min(999_999) / 10u32.pow(6 - fsp)).into(), fsp as usize);
        }
    }

    pub fn finish(&self) -> CompactString {
        // Only whole `&str`s and ASCII bytes go in, and no cut lands inside
        // a character: every text pushed is ASCII.
        CompactString::from(std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default())
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
    let mut out = TextBuf::default();
    // format_utc_micros ends in ".000000Z"; put the column's own fraction there.
    out.push_str(whole.strip_suffix(".000000Z").unwrap_or(&whole));
    out.push_fraction(micros, meta.first().copied().unwrap_or(0));
    out.push(b'Z');
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_times_read_as_iso_text() {
        let mut text = TextBuf::default();
        text.push_padded(7, 4);
        text.push(b'-');
        text.push_clock(838, 59, 5);
        text.push_fraction(120_000, 3);
        assert_eq!(text.finish(), "0007-838:59:05.120");
        assert_eq!(epoch_text("0", &[0]), "1970-01-01T00:00:00Z");
        assert_eq!(epoch_text("1700000000.5", &[6]), "2023-11-14T22:13:20.500000Z");
        assert_eq!(iso_datetime("2026-02-28 13:14:15", "Z"), "2026-02-28T13:14:15Z");
    }

    #[test]
    fn text_past_the_capacity_is_cut_off_without_a_panic() {
        let mut text = TextBuf::default();
        for _ in 0..CAPACITY {
            text.push_str("12");
        }
        text.push(b'3');
        assert_eq!(text.finish().len(), CAPACITY);
    }
}
