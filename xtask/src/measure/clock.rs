//! Wall-clock times as RFC 3339 text (UTC), for reports and k6's sale times, and back (the
//! webhook events' `timestamp`).

use std::time::{SystemTime, UNIX_EPOCH};

/// UTC now as 2026-11-23T02:59:58Z.
pub fn utc_now() -> String {
    rfc3339(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64)
}

/// Unix seconds as 2026-11-23T02:59:58Z (RFC 3339, UTC).
pub fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `2026-11-29T10:00:00.123456Z` (UTC, `Z`, up to 6 fraction digits) as Unix µs.
pub fn rfc3339_micros(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    if fraction.len() > 6 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros = format!("{fraction:0<6}").parse::<i64>().ok()?;
    // Howard Hinnant's days_from_civil.
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + m * 60 + s) * 1_000_000) + micros)
}

#[cfg(test)]
#[test]
fn rfc3339_text_reads_back_to_its_unix_time() {
    for secs in [0, 951_782_400, 1_764_410_400, 4_102_444_799] {
        assert_eq!(rfc3339_micros(&rfc3339(secs)), Some(secs * 1_000_000));
    }
    assert_eq!(rfc3339_micros("2026-11-29T10:00:00.123456Z"), Some(1_795_946_400_123_456));
    assert_eq!(rfc3339_micros("2026-11-29T10:00:00.5Z"), Some(1_795_946_400_500_000));
    assert_eq!(rfc3339_micros("2026-11-29T10:00:00"), None);
}
