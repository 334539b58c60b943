//! UTC timestamp formatting without a date-time dependency.

use std::borrow::Cow;

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Formats microseconds since the Unix epoch as ISO-8601 UTC with six
/// fractional digits, e.g. `2023-11-14T22:13:20.123456Z`.
pub fn format_utc_micros(micros: i64) -> String {
    utc_micros_text(micros, &mut [0; UTC_MICROS_LEN]).into_owned()
}

/// [`format_utc_micros`]'s text, in `buffer` when the year is 0 to 9999
/// (every event's JSON carries its commit time, so that case allocates
/// nothing), else in a string of its own.
pub fn utc_micros_text(micros: i64, buffer: &mut [u8; UTC_MICROS_LEN]) -> Cow<'_, str> {
    if let Some(text) = write_utc_micros(micros, buffer) {
        return Cow::Borrowed(text);
    }
    let (year, month, day, hour, minute, second, fraction) = parts(micros);
    Cow::Owned(format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{fraction:06}Z"))
}

/// The length of [`format_utc_micros`]'s text for years 0 to 9999.
pub const UTC_MICROS_LEN: usize = 27;

/// [`format_utc_micros`] into `out`, without allocating: every event's
/// JSON carries its commit time. `None` for a year outside 0 to 9999,
/// whose text is longer.
pub fn write_utc_micros(micros: i64, out: &mut [u8; UTC_MICROS_LEN]) -> Option<&str> {
    let (last, text) = LAST_TEXT.get();
    if last == micros {
        *out = text;
        return std::str::from_utf8(out).ok();
    }
    let (year, month, day, hour, minute, second, fraction) = parts(micros);
    let year = u32::try_from(year).ok().filter(|y| *y <= 9999)?;
    let mut at = 0;
    for (value, width, after) in [
        (year, 4, b'-'),
        (month, 2, b'-'),
        (day, 2, b'T'),
        (hour, 2, b':'),
        (minute, 2, b':'),
        (second, 2, b'.'),
        (fraction, 6, b'Z'),
    ] {
        let mut rest = value;
        for slot in out[at..at + width].iter_mut().rev() {
            *slot = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        out[at + width] = after;
        at += width + 1;
    }
    LAST_TEXT.set((micros, *out));
    std::str::from_utf8(out).ok()
}

thread_local! {
    /// The last time written and its text: the events of a transaction
    /// share their commit time, and each prints it. `i64::MIN` is outside
    /// the years written, so it never matches.
    static LAST_TEXT: std::cell::Cell<(i64, [u8; UTC_MICROS_LEN])> =
        const { std::cell::Cell::new((i64::MIN, [0; UTC_MICROS_LEN])) };
}

type Parts = (i64, u32, u32, u32, u32, u32, u32);

fn parts(micros: i64) -> Parts {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000) as u32;
    let second_of_day = seconds.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    (year, month, day, second_of_day / 3600, second_of_day % 3600 / 60, second_of_day % 60, fraction)
}

/// The date `days` after 1970-01-01 in the proleptic Gregorian calendar
/// (Howard Hinnant's civil-from-days algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since the Unix epoch of an HTTP date in its preferred form
/// (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`); `None` for anything else.
pub fn parse_http_date(text: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (_, rest) = text.trim().split_once(", ")?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, clock, "GMT"] = fields.as_slice() else { return None };
    let day: u32 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| m == month)? as u32 + 1;
    let year: i64 = year.parse().ok()?;
    let clock: Vec<i64> = clock.split(':').map(|part| part.parse().ok()).collect::<Option<_>>()?;
    let [hour @ 0..=23, minute @ 0..=59, second @ 0..=60] = clock.as_slice() else { return None };
    if !(1..=31).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of an ISO-8601 date `YYYY-MM-DD` (years 0 to 9999).
pub fn parse_iso_date(text: &str) -> Option<i64> {
    // ISO 8601's expanded years (`+294276-12-31`, `-004712-01-01`) carry a
    // sign and more than four digits; plain years are four digits.
    let (sign, unsigned) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => (1, text),
    };
    let (year, month_day) = unsigned.split_once('-')?;
    let plain = sign == 1 && !text.starts_with('+');
    if (plain && year.len() != 4) || (!plain && year.len() < 6) || month_day.len() != 5 {
        return None;
    }
    let digits = |part: &str| -> Option<i64> { part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok())? };
    let (month, day) = month_day.split_once('-')?;
    if month.len() != 2 || day.len() != 2 {
        return None;
    }
    let year = sign * digits(year)?;
    let (month, day) = (u32::try_from(digits(month)?).ok()?, u32::try_from(digits(day)?).ok()?);
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Microseconds since the Unix epoch of an ISO-8601 timestamp
/// `YYYY-MM-DDTHH:MM:SS[.fraction][Z|±HH[:MM]]`; a zone is applied, and
/// the flag says whether there was one. Digits past microseconds are cut.
pub fn parse_iso_timestamp(text: &str) -> Option<(i64, bool)> {
    let split = text.find(['T', ' '])?;
    let days = parse_iso_date(&text[..split])?;
    let rest = &text[split + 1..];
    let clock = rest.get(..8)?;
    let parts: Vec<i64> = clock.split(':').map(|p| p.parse().ok().filter(|_| p.len() == 2)).collect::<Option<_>>()?;
    let [hour @ 0..=23, minute @ 0..=59, second @ 0..=60] = parts.as_slice() else { return None };
    let mut rest = &rest[8..];
    let mut micros = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept = format!("{:0<6}", &fraction[..digits.min(6)]);
        micros = kept.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset_secs = match rest {
        "" => None,
        "Z" => Some(0),
        zone => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
            if !(digits.len() == 2 || digits.len() == 4) || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let hours: i64 = digits[..2].parse().ok()?;
            let minutes: i64 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
            Some(sign * (hours * 3600 + minutes * 60))
        }
    };
    // Checked: PostgreSQL's last timestamp (294276 AD) lies past what i64
    // microseconds since 1970 can hold; such a value is not a timestamp here.
    let seconds = days.checked_mul(86_400)? + hour * 3600 + minute * 60 + second - offset_secs.unwrap_or(0);
    Some((seconds.checked_mul(1_000_000)?.checked_add(micros)?, offset_secs.is_some()))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (the inverse of
/// `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let mp = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_commit_time_is_the_formatted_one() {
        let slow = |micros: i64| {
            let (year, month, day, hour, minute, second, fraction) = parts(micros);
            format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{fraction:06}Z")
        };
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut samples = vec![0, -1, 1, 951_782_400_000_000, -62_167_219_200_000_000, 253_402_300_799_999_999];
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            samples.push((seed % 400_000_000_000_000_000) as i64 - 100_000_000_000_000_000);
        }
        for micros in samples {
            assert_eq!(format_utc_micros(micros), slow(micros), "{micros}");
        }
        assert_eq!(format_utc_micros(0), "1970-01-01T00:00:00.000000Z");
        // Past year 9999 the text is longer and takes the slow path.
        assert_eq!(format_utc_micros(253_402_300_800_000_000), "10000-01-01T00:00:00.000000Z");
    }

    #[test]
    fn parses_iso_dates_and_timestamps() {
        assert_eq!(parse_iso_date("1970-01-01"), Some(0));
        assert_eq!(parse_iso_date("2024-02-29"), Some(19_782));
        assert_eq!(parse_iso_date("2023-02-29"), None);
        assert_eq!(parse_iso_date("infinity"), None);
        assert_eq!(parse_iso_date("-000001-12-31"), Some(days_from_civil(-1, 12, 31)));
        assert_eq!(parse_iso_date("+010000-01-01"), Some(days_from_civil(10_000, 1, 1)));
        assert_eq!(parse_iso_date("0000-02-29"), Some(days_from_civil(0, 2, 29)));
        assert_eq!(parse_iso_date("10000-01-01"), None);
        assert_eq!(parse_iso_date("+2024-01-01"), None);
        assert_eq!(parse_iso_timestamp("+294276-12-31T23:59:59.999999"), None);
        assert_eq!(parse_iso_timestamp("-004712-01-01T00:00:00Z").map(|(_, zoned)| zoned), Some(true));
        let at = |text| parse_iso_timestamp(text);
        assert_eq!(at("1970-01-01T00:00:01"), Some((1_000_000, false)));
        assert_eq!(at("1970-01-01T00:00:01.5Z"), Some((1_500_000, true)));
        assert_eq!(at("1970-01-01 01:00:00.1234567+01"), Some((123_456, true)));
        assert_eq!(at("1970-01-01T00:00:00-05:30"), Some((19_800_000_000, true)));
        assert_eq!(
            at("2026-11-29T16:35:33.000001Z").map(|(us, _)| format_utc_micros(us)).as_deref(),
            Some("2026-11-29T16:35:33.000001Z")
        );
        for bad in [
            "2024-01-01",
            "2024-01-01T25:00:00",
            "2024-01-01T00:00:00.",
            "2024-01-01T00:00:00 BC",
            "2024-01-01T00:00:00+1",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    #[test]
    fn parses_http_dates() {
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_http_date("Sun, 29 Nov 2026 16:35:33 GMT").map(|s| s * 1_000_000).map(format_utc_micros).as_deref(),
            Some("2026-11-29T16:35:33.000000Z")
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("120"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(format_utc_micros(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(format_utc_micros(951_782_400_000_000), "2000-02-29T00:00:00.000000Z");
        assert_eq!(format_utc_micros(4_102_444_799_000_001), "2099-12-31T23:59:59.000001Z");
    }
}
