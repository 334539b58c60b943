//! UTC timestamp formatting without a date-time dependency.

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Formats microseconds since the Unix epoch as ISO-8601 UTC with six
/// fractional digits, e.g. `2023-11-14T22:13:20.123456Z`.
pub fn format_utc_micros(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:06}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The date `days` after 1970-01-01 in the proleptic Gregorian calendar
/// (Howard Hinnant's civil-from-days algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
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
