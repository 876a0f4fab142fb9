//! Reading the times clouds write (token and credential expiries), once for every cloud.

/// Seconds since the epoch of an RFC 3339 / ISO 8601 time as clouds write them
/// (`2026-11-29T17:04:05Z`, `2026-11-24T21:59:33.000000Z`, `2014-01-15T14:40:32-06:00`, and
/// without a zone as UTC); a fraction of a second is dropped (the time only comes earlier);
/// `None` when it is not one.
pub fn unix_seconds(s: &str) -> Option<i64> {
    let (date, time) = s.trim().split_once(['T', 't'])?;
    let (clock, offset) = match time.strip_suffix(['Z', 'z']) {
        Some(clock) => (clock, 0),
        None if !time.contains(['+', '-']) => (time, 0),
        None => {
            let at = time.rfind(['+', '-'])?;
            let (oh, om) = time[at + 1..].split_once(':')?;
            let sign = if time[at..].starts_with('-') { -1 } else { 1 };
            (
                &time[..at],
                sign * (num(oh, 23)? * 3600 + num(om, 59)? * 60),
            )
        }
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, _)| whole);
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (d.next()?, d.next()?, d.next()?);
    let mut t = clock.splitn(3, ':');
    let (hh, mm, ss) = (t.next()?, t.next()?, t.next()?);
    if y.len() != 4 {
        return None;
    }
    let days = days_since_epoch(num(y, 9999)?, num(m, 12)?, num(day, 31)?)?;
    Some(days * 86_400 + num(hh, 23)? * 3600 + num(mm, 59)? * 60 + num(ss, 60)? - offset)
}

/// A number of two or more digits, at most `max`.
fn num(s: &str, max: i64) -> Option<i64> {
    if s.len() < 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n <= max)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (years counted from March, so that the
/// leap day ends a year; eras of 400 years).
fn days_since_epoch(y: i64, m: i64, d: i64) -> Option<i64> {
    if m < 1 || d < 1 {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (m + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + d - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_clouds_write_them() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_seconds("2026-11-24T21:59:33.000000Z"),
            Some(1_795_557_573)
        );
        assert_eq!(
            unix_seconds("2026-11-24T15:59:33.5-06:00"),
            unix_seconds("2026-11-24T21:59:33Z")
        );
        assert_eq!(unix_seconds("2000-02-29T00:00:00"), Some(951_782_400));
        for bad in [
            "yesterday",
            "2026-13-01T00:00:00Z",
            "26-11-24T21:59:33Z",
            "2026-11-24",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad}");
        }
    }
}
