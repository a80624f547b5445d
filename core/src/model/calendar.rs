//! Days since the Unix epoch to proleptic Gregorian dates and back (Howard Hinnant's
//! `civil_from_days` / `days_from_civil`): daily partitions are named by date, the UI shows
//! dates, and alert webhooks' RFC 3339 times are read, without a calendar crate.

use super::Nanos;

/// (year, month 1–12, day 1–31) of day `z` since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Day since 1970-01-01 of a date (the inverse of `civil_from_days`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix nanoseconds of an RFC 3339 time (`2026-12-04T01:02:03.5Z`, `…+02:00`); `None` when it
/// is not one, or is before 1970 (Go's zero time, `0001-01-01T00:00:00Z`, means "not set").
pub fn rfc3339_ns(s: &str) -> Option<Nanos> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    // Fractional seconds, to nanoseconds (digits past the ninth are dropped).
    let mut at = 19;
    let mut frac = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        for (k, c) in b[at + 1..at + 1 + digits].iter().enumerate() {
            if k < 9 {
                frac = frac * 10 + i64::from(c - b'0');
            }
        }
        frac *= 10i64.pow(9u32.saturating_sub(digits as u32));
        at += 1 + digits;
    }
    let offset_s = match (b.get(at), s.len() - at) {
        (Some(b'Z' | b'z'), 1) => 0,
        (Some(&sign @ (b'+' | b'-')), 6) if b[at + 3] == b':' => {
            let off = num(at + 1..at + 3)? * 3600 + num(at + 4..at + 6)? * 60;
            if sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    (secs >= 0).then(|| secs.checked_mul(1_000_000_000)?.checked_add(frac))?
}

/// The RFC 3339 UTC text of Unix nanoseconds, to the millisecond (`2026-12-04T01:02:03.500Z`).
pub fn rfc3339(ns: Nanos) -> String {
    let (secs, ms) = (
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) / 1_000_000,
    );
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_as_alertmanager_sends_them() {
        let t = 1_796_343_723_000_000_000; // 2026-12-04T00:22:03Z
        assert_eq!(rfc3339_ns("2026-12-04T00:22:03Z"), Some(t));
        assert_eq!(rfc3339_ns("2026-12-04T00:22:03.5Z"), Some(t + 500_000_000));
        assert_eq!(
            rfc3339_ns("2026-12-04T00:22:03.123456789123Z"),
            Some(t + 123_456_789)
        );
        assert_eq!(rfc3339_ns("2026-12-04T02:22:03+02:00"), Some(t));
        assert_eq!(rfc3339_ns("2026-12-03T23:22:03.000-01:00"), Some(t));
        assert_eq!(rfc3339(t + 500_000_000), "2026-12-04T00:22:03.500Z");
        assert_eq!(rfc3339_ns(&rfc3339(t + 7_000_000)), Some(t + 7_000_000));
        // Go's zero time: an alert still firing has no end.
        assert_eq!(rfc3339_ns("0001-01-01T00:00:00Z"), None);
        for bad in [
            "",
            "2026-12-04",
            "2026-13-04T00:00:00Z",
            "2026-12-04T00:00:00",
            "2026-12-04T00:00:00.Z",
            "2026-12-04T00:00:00+0200",
            "2026-12-04T00:00:00Zjunk",
            "２026-12-04T00:00:00Z",
        ] {
            assert_eq!(rfc3339_ns(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dates_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        for z in [-800_000, -1, 0, 59, 60, 10_957, 20_787, 47_482, 2_000_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }
}
