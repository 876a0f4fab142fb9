//! `GET /v2/costs` (a weft addition): what the caller's clusters accrued over a period, grouped
//! per cluster, template or tenant, as JSON or CSV. See `weft_engine::showback`.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use weft_model::cost::CostGroupBy;

use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Registers `GET /v2/costs`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/costs",
        costs,
        op(
            "costs",
            "What clusters accrued over a period, from each priced node's time in its cluster (weft extension): an admin sees the tenant's clusters, a user their own, the superadmin every tenant with groupBy=tenant",
        )
        .query("from", "start of the period: ms since the epoch or YYYY-MM-DD (UTC); default 30 days before to")
        .query("to", "end of the period (excluded), as from; default now")
        .query("groupBy", "cluster (default), template or tenant")
        .query("format", "json (default) or csv")
        .ok(200, "the report (CostReport), or CSV with format=csv", Body::Json("CostReport"))
        .status(400, "a parameter is wrong (named)"),
    )
}

#[derive(Debug, Deserialize)]
struct CostQuery {
    from: Option<String>,
    to: Option<String>,
    #[serde(rename = "groupBy")]
    group_by: Option<String>,
    format: Option<String>,
}

/// `from`/`to` as ms since the epoch or a UTC date (`2026-11-29`).
fn instant(field: &str, v: &str) -> ApiResult<i64> {
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(ms);
    }
    let bad = || {
        ApiError::BadRequest(format!(
            "{field} must be ms since the epoch or YYYY-MM-DD, not {v:?}"
        ))
    };
    let parts: Vec<&str> = v.split('-').collect();
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

async fn costs(
    State(st): State<AppState>,
    who: Identity,
    Query(q): Query<CostQuery>,
) -> ApiResult<Response> {
    let group_by = match q.group_by.as_deref() {
        None | Some("cluster") => CostGroupBy::Cluster,
        Some("template") => CostGroupBy::Template,
        Some("tenant") => CostGroupBy::Tenant,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "groupBy must be cluster, template or tenant, not {other:?}"
            )))
        }
    };
    let to = q.to.as_deref().map(|v| instant("to", v)).transpose()?;
    let from = match q.from.as_deref() {
        Some(v) => instant("from", v)?,
        None => to.unwrap_or_else(crate::state::now_ms) - 30 * 86_400_000,
    };
    let report =
        weft_engine::showback::report(&st.engine, &who.caller(), from, to, group_by).await?;
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(report).into_response()),
        Some("csv") => Ok((
            [(header::CONTENT_TYPE, "text/csv; charset=utf-8")],
            weft_engine::showback::csv(&report),
        )
            .into_response()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "format must be json or csv, not {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::instant;

    #[test]
    fn dates_are_utc_midnights_and_bad_ones_are_named() {
        assert_eq!(instant("from", "1970-01-02").unwrap(), 86_400_000);
        assert_eq!(instant("from", "2026-11-29").unwrap(), 1_795_910_400_000);
        assert_eq!(instant("from", "12345").unwrap(), 12_345);
        let e = instant("to", "2026-13-01").unwrap_err();
        assert!(e.to_string().contains("to must be"), "{e}");
        assert!(instant("to", "yesterday").is_err());
    }
}
