//! `GET /v2/costs` (a weft addition): what the caller's clusters accrued over a period, grouped
//! per cluster, template or tenant, as JSON or CSV. See `weft_engine::showback`.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use weft_model::cost::CostGroupBy;

use crate::api::{op, Api, Body, Param};
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
        .query_as("from", "start of the period, ms since the epoch (default: 30 days before to)", Param::Time)
        .query_as("to", "end of the period (excluded), ms since the epoch (default: now); a period that ends before it starts is empty", Param::Time)
        .query_as("groupBy", "cluster (default), template or tenant", Param::OneOf(&["cluster", "template", "tenant"]))
        .query_as("format", "json (default) or csv", Param::OneOf(&["json", "csv"]))
        .ok(200, "the report (CostReport), or CSV with format=csv", Body::JsonOrCsv("CostReport"))
        .status(400, "a parameter is wrong (named)"),
    )
}

/// A time parameter: ms since the epoch, 0 to 2^63 - 1.
fn ms(field: &str, v: &str) -> ApiResult<i64> {
    v.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| ApiError::BadRequest(format!("{field}: ms since the epoch, not {v:?}")))
}

#[derive(Debug, Deserialize)]
struct CostQuery {
    from: Option<String>,
    to: Option<String>,
    #[serde(rename = "groupBy")]
    group_by: Option<String>,
    format: Option<String>,
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
    let to = q.to.as_deref().map(|v| ms("to", v)).transpose()?;
    let from = match q.from.as_deref() {
        Some(v) => ms("from", v)?,
        None => to.unwrap_or_else(crate::state::now_ms) - 30 * 86_400_000,
    };
    let report =
        weft_engine::showback::report(&st.engine, &who.caller(), from, to, group_by).await?;
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(report).into_response()),
        Some("csv") => Ok((
            [(header::CONTENT_TYPE, "text/csv")],
            weft_engine::showback::csv(&report),
        )
            .into_response()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "format must be json or csv, not {other:?}"
        ))),
    }
}
