//! What machines cost: prices in the catalog, read as exact decimals, and the estimate a plan
//! carries (weft extensions).
//!
//! A hardware type's per-provider entry may carry `price` (per hour, decimal text such as
//! `"0.0208"`, kept a string so that Coopr's clients still read `providermap` as a map of string
//! maps); an image type's entry may carry `price` too (a licence per hour, added to the
//! hardware's). A provider may declare `currency` (ISO 4217, `USD`) and `priceMultiplier`
//! (decimal text, `"0.8"` for a 20% discount). A node whose hardware type has no price for its
//! provider has no estimate: it is listed as unpriced, never counted as free.
//!
//! Amounts are whole micro-units (millionths of the currency unit), so sums over many nodes and
//! hours stay exact to the cent.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::ModelError;

/// Micro-units in one unit of a currency.
pub const MICROS: u64 = 1_000_000;

/// The key of a price in a hardware or image type's per-provider map.
pub const PRICE_KEY: &str = "price";

/// Reads a non-negative decimal (`"0.0208"`, `"12"`, at most 6 digits after the point) as
/// micro-units; `field` names it in the error.
pub fn parse_micros(field: &str, text: &str) -> Result<u64, ModelError> {
    let bad = || {
        ModelError::invalid(
            field,
            format!(
                "{field} must be a non-negative decimal with at most 6 digits after the point, not {text:?}"
            ),
        )
    };
    let t = text.trim();
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if whole.is_empty() && frac.is_empty()
        || frac.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || whole.len() > 12
    {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let frac: u64 = format!("{frac:0<6}").parse().map_err(|_| bad())?;
    Ok(whole * MICROS + frac)
}

/// Micro-units as a decimal with at least two digits after the point (`12.50`, `0.0208`).
pub fn format_micros(micros: u64) -> String {
    let whole = micros / MICROS;
    let frac = format!("{:06}", micros % MICROS);
    let trimmed = frac.trim_end_matches('0');
    let digits = if trimmed.len() < 2 {
        &frac[..2]
    } else {
        trimmed
    };
    format!("{whole}.{digits}")
}

/// `amount` scaled by `factor` (both in micro-units), rounded to the nearest micro-unit.
pub fn scale(amount: u64, factor: u64) -> u64 {
    let p = u128::from(amount) * u128::from(factor);
    u64::try_from((p + u128::from(MICROS / 2)) / u128::from(MICROS)).unwrap_or(u64::MAX)
}

/// Checks a currency code: three upper-case letters (ISO 4217).
pub fn check_currency(field: &str, code: &str) -> Result<(), ModelError> {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(())
    } else {
        Err(ModelError::invalid(
            field,
            format!(
                "{field} must be an ISO 4217 code of three upper-case letters (USD), not {code:?}"
            ),
        ))
    }
}

/// A cluster's cost as a plan would leave it, before and after (weft extension of a plan's
/// answer). Amounts are decimal text in `currency`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CostEstimate {
    /// The currency of every amount (the provider's).
    pub currency: String,
    /// The cluster's cost per hour before the operation (`0.00` for a create).
    #[serde(rename = "perHourBefore")]
    pub per_hour_before: String,
    /// The cluster's cost per hour after it.
    #[serde(rename = "perHourAfter")]
    pub per_hour_after: String,
    /// The cost per day before (24 hours).
    #[serde(rename = "perDayBefore")]
    pub per_day_before: String,
    /// The cost per day after.
    #[serde(rename = "perDayAfter")]
    pub per_day_after: String,
    /// The cost over what is left of the cluster's lease after the operation, when it has one.
    #[serde(rename = "overLease", default, skip_serializing_if = "Option::is_none")]
    pub over_lease: Option<String>,
    /// Nodes (hardware/image type names) with no price for the provider: the estimate leaves
    /// them out, so it is a floor; empty when every node is priced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced: Vec<String>,
}

impl CostEstimate {
    /// An estimate from per-hour amounts in micro-units, and the lease left in milliseconds.
    pub fn new(
        currency: &str,
        before: u64,
        after: u64,
        lease_left_ms: Option<u64>,
        unpriced: Vec<String>,
    ) -> CostEstimate {
        CostEstimate {
            currency: currency.to_string(),
            per_hour_before: format_micros(before),
            per_hour_after: format_micros(after),
            per_day_before: format_micros(before.saturating_mul(24)),
            per_day_after: format_micros(after.saturating_mul(24)),
            over_lease: lease_left_ms.map(|ms| {
                let micros = u128::from(after) * u128::from(ms) / 3_600_000;
                format_micros(u64::try_from(micros).unwrap_or(u64::MAX))
            }),
            unpriced,
        }
    }
}

/// A report's bound as people write it: ms since the epoch, or a UTC date (`2026-11-29`: its
/// midnight); `field` names it in the error.
pub fn instant(field: &str, v: &str) -> Result<i64, ModelError> {
    if let Ok(ms) = v.trim().parse::<i64>() {
        return Ok(ms);
    }
    let bad = || {
        ModelError::invalid(
            field,
            format!("{field} must be YYYY-MM-DD or ms since the epoch, not {v:?}"),
        )
    };
    let parts: Vec<&str> = v.trim().split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(bad());
    };
    let (y, m, d): (i64, i64, i64) = (
        y.parse().map_err(|_| bad())?,
        m.parse().map_err(|_| bad())?,
        d.parse().map_err(|_| bad())?,
    );
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    // Days since the epoch of a civil date (proleptic Gregorian).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok((era * 146_097 + doe - 719_468) * 86_400_000)
}

/// How a cost report groups what it adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CostGroupBy {
    /// One line per cluster.
    #[default]
    Cluster,
    /// One line per cluster template.
    Template,
    /// One line per tenant (every tenant's for the superadmin).
    Tenant,
}

/// One line of a cost report.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CostLine {
    /// The cluster id, template name or tenant name.
    pub key: String,
    /// A cluster's name (cluster lines only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The currency of `amount`.
    pub currency: String,
    /// What accrued over the period, decimal text.
    pub amount: String,
    /// The same in micro-units (exact; for sums and charts).
    pub micros: u64,
}

/// What accrued in one day of a report's period (UTC days), per currency.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CostPoint {
    /// The day's start (ms since the epoch, UTC midnight).
    pub day: i64,
    /// The currency.
    pub currency: String,
    /// Micro-units accrued that day.
    pub micros: u64,
}

/// `GET /v2/costs`: what the caller's clusters accrued over `[from, to)`, from each priced node's
/// time in its cluster and the price in force when it was added.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CostReport {
    /// The period's start (ms since the epoch).
    pub from: i64,
    /// The period's end (ms since the epoch, excluded).
    pub to: i64,
    /// How the lines are grouped.
    #[serde(rename = "groupBy")]
    pub group_by: CostGroupBy,
    /// One line per group and currency, the largest first.
    pub lines: Vec<CostLine>,
    /// The total per currency.
    pub totals: Vec<CostLine>,
    /// Per day and currency, in time order; empty for a period longer than 366 days.
    pub series: Vec<CostPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_exact_decimals() {
        assert_eq!(parse_micros("p", "0.0208").unwrap(), 20_800);
        assert_eq!(parse_micros("p", "12").unwrap(), 12_000_000);
        assert_eq!(parse_micros("p", ".5").unwrap(), 500_000);
        assert_eq!(parse_micros("p", "3.141592").unwrap(), 3_141_592);
        for bad in ["", ".", "-1", "1e3", "0.1234567", "1,5", "abc", "1.2.3"] {
            let e = parse_micros("providermap.aws.price", bad).unwrap_err();
            assert!(
                e.to_string().contains("providermap.aws.price"),
                "{bad}: {e}"
            );
        }
        assert_eq!(format_micros(20_800), "0.0208");
        assert_eq!(format_micros(12_500_000), "12.50");
        assert_eq!(format_micros(0), "0.00");
        assert_eq!(scale(20_800, 800_000), 16_640);
    }

    #[test]
    fn dates_are_utc_midnights_and_bad_ones_are_named() {
        assert_eq!(instant("from", "1970-01-02").unwrap(), 86_400_000);
        assert_eq!(instant("from", "2026-11-29").unwrap(), 1_795_910_400_000);
        assert_eq!(instant("from", "12345").unwrap(), 12_345);
        let e = instant("to", "2026-13-01").unwrap_err();
        assert!(e.to_string().contains("to must be"), "{e}");
        assert!(instant("to", "yesterday").is_err());
    }

    #[test]
    fn an_estimate_over_a_lease_is_pro_rata() {
        let e = CostEstimate::new("USD", 0, 41_600, Some(36 * 3_600_000), vec![]);
        assert_eq!(e.per_hour_after, "0.0416");
        assert_eq!(e.per_day_after, "0.9984");
        assert_eq!(e.over_lease.as_deref(), Some("1.4976"));
        assert!(check_currency("currency", "usd").is_err());
        assert!(check_currency("currency", "EUR").is_ok());
    }
}
