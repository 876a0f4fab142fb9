//! Durations in one form for every flag: a number and a unit, `90s`, `10m`, `48h`, `2d`, also
//! combined (`1h30m`). `--lease 48h` and `extend-lease --until +48h` read the same way.

use std::time::Duration;

/// Parses `48h`, `90s`, `1h30m`, `2d`. A bare number is an error naming the units.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let bad =
        || format!("{s:?}: give a duration as a number and a unit: 90s, 10m, 48h, 2d (also 1h30m)");
    let mut total: u64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit_end = rest[digits..]
            .find(|c: char| c.is_ascii_digit())
            .map_or(rest.len(), |i| digits + i);
        let secs = match &rest[digits..unit_end] {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(secs)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs(total))
}

/// The same form back: `48h`, `1h30m`, `0s`.
pub(crate) fn format(d: Duration) -> String {
    let mut s = d.as_secs();
    if s == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if s >= size {
            out.push_str(&format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_units_and_combinations() {
        assert_eq!(parse("48h").unwrap(), Duration::from_secs(48 * 3600));
        assert_eq!(parse("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("2d").unwrap(), Duration::from_secs(2 * 86_400));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        for bad in ["", "48", "h", "3w", "1.5h", "-1h", "99999999999999999999d"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_what_it_reads() {
        for s in ["48h", "1h30m", "90s", "2d", "1d2h3m4s"] {
            let d = parse(s).unwrap();
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
    }
}
