//! `/v2/tenants`: the superadmin creates, changes and deletes tenants (their workers and quotas).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::tenants;
use weft_model::{TenantSpecification, TenantWriteRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `/v2/tenants` and `/v2/tenants/{name}`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/tenants",
        list,
        op("tenants", "List every tenant (superadmin)")
            .ok(200, "tenants", Body::Array("TenantSpecification"))
            .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::POST,
        "/v2/tenants",
        create,
        op("tenants", "Create a tenant (superadmin)")
            .body(Body::Json("TenantWriteRequest"))
            .status(200, "created")
            .status(400, "invalid body or tenant missing")
            .status(403, "not the superadmin (empty body)")
            .status(409, "the name exists, or not enough worker capacity"),
    )
    .route(
        MethodFilter::GET,
        "/v2/tenants/{name}",
        get,
        op("tenants", "Get a tenant (superadmin)")
            .ok(200, "the tenant", Body::Json("TenantSpecification"))
            .status(403, "not the superadmin (empty body)")
            .status(404, "tenant not found"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/tenants/{name}",
        put,
        op(
            "tenants",
            "Change a tenant, or create it if absent (superadmin)",
        )
        .body(Body::Json("TenantWriteRequest"))
        .status(200, "written")
        .status(400, "invalid body or name mismatch")
        .status(403, "not the superadmin (empty body)")
        .status(409, "not enough worker capacity"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/tenants/{name}",
        delete,
        op(
            "tenants",
            "Delete a tenant and everything it owns (superadmin; 200 also if absent)",
        )
        .status(200, "deleted")
        .status(403, "not the superadmin, or deleting superadmin")
        .status(409, "the tenant still has workers"),
    )
}

async fn list(
    State(st): State<AppState>,
    id: Identity,
) -> ApiResult<Json<Vec<TenantSpecification>>> {
    Ok(Json(tenants::list(&st.engine, &id.caller()).await?))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<TenantSpecification>> {
    Ok(Json(tenants::get(&st.engine, &id.caller(), &name).await?))
}

fn read_request(body: &Bytes) -> ApiResult<TenantWriteRequest> {
    parse_body(body, "{\"tenant\": {...}}")
}

async fn create(State(st): State<AppState>, id: Identity, body: Bytes) -> ApiResult<()> {
    let req = read_request(&body)?;
    let bootstrap = req.bootstrap.then_some(st.resources.as_ref());
    Ok(tenants::create(&st.engine, &id.caller(), req.tenant, bootstrap).await?)
}

async fn put(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<()> {
    let req = read_request(&body)?;
    let bootstrap = req.bootstrap.then_some(st.resources.as_ref());
    Ok(tenants::put(&st.engine, &id.caller(), &name, req.tenant, bootstrap).await?)
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
) -> ApiResult<()> {
    Ok(tenants::delete(&st.engine, &id.caller(), &name).await?)
}
