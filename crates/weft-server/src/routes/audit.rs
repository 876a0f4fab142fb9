//! `/v2/audit`: the audit trail, read by tenant admins (their tenant) and the superadmin (every
//! tenant, or one with `?tenant=`), and its chains verified.

use axum::extract::{Query, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use weft_engine::audit::AuditFilter;
use weft_model::audit::{AuditRecord, ChainReport};

use crate::api::{op, Api, Body, Param, MAX_INT};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Registers `/v2/audit` and `/v2/audit/verify`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/audit",
        list,
        op(
            "audit",
            "The audit trail, newest first: every request that may change state and every refusal (401, 403), with who, from where, what and the outcome (tenant admins: their tenant; the superadmin: all)",
        )
        .query("tenant", "a tenant's name (superadmin only; default: every tenant)")
        .query("user", "only this user's records")
        .query("entity", "only records of this entity (clusters, providers, apikeys, ...)")
        .query("action", "only this action (create, update, delete, read, or an operation's name)")
        .query_as("from", "from this time (ms since the epoch, inclusive)", Param::Time)
        .query_as("to", "before this time (ms since the epoch)", Param::Time)
        .query_as("offset", "records to skip", Param::Int(0))
        .query_as("limit", "records to answer (default 100; at most 1000 are answered)", Param::Int(1))
        .ok(200, "records", Body::Array("AuditRecord"))
        .status(403, "not an admin"),
    )
    .route(
        MethodFilter::GET,
        "/v2/audit/verify",
        verify,
        op(
            "audit",
            "Verify each tenant's chain of records: a record edited, inserted or removed other than by retention is found (tenant admins: their tenant; the superadmin: all)",
        )
        .ok(200, "one report per tenant", Body::Array("ChainReport"))
        .status(403, "not an admin"),
    )
}

#[derive(Debug, Deserialize)]
struct AuditParams {
    tenant: Option<String>,
    user: Option<String>,
    entity: Option<String>,
    action: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    offset: Option<u64>,
    limit: Option<u64>,
}

async fn list(
    State(st): State<AppState>,
    who: Identity,
    Query(p): Query<AuditParams>,
) -> ApiResult<Json<Vec<AuditRecord>>> {
    let f = AuditFilter {
        tenant: p.tenant,
        user: p.user,
        entity: p.entity,
        action: p.action,
        from: time(p.from, "from")?,
        to: time(p.to, "to")?,
        offset: count(p.offset, "offset")?,
        limit: count(p.limit, "limit")?,
    };
    Ok(Json(
        weft_engine::audit::list(&st.engine, &who.caller(), f).await?,
    ))
}

/// A count parameter: at most [`MAX_INT`], as the document says.
fn count(n: Option<u64>, name: &str) -> ApiResult<Option<u64>> {
    match n {
        Some(v) if v > MAX_INT => Err(ApiError::BadRequest(format!("{name}: at most {MAX_INT}"))),
        _ => Ok(n),
    }
}

/// A time parameter: milliseconds since the epoch, not negative.
fn time(t: Option<i64>, name: &str) -> ApiResult<Option<i64>> {
    match t {
        Some(v) if v < 0 => Err(ApiError::BadRequest(format!(
            "{name}: milliseconds since the epoch, 0 or more"
        ))),
        _ => Ok(t),
    }
}

async fn verify(State(st): State<AppState>, who: Identity) -> ApiResult<Json<Vec<ChainReport>>> {
    Ok(Json(
        weft_engine::audit::verify(&st.engine, &who.caller()).await?,
    ))
}
