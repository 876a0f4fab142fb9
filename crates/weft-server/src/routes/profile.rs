//! `/v2/profile`: a free JSON object per (tenant, user), for UIs and clients to keep preferences in.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::Value;

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/profile",
        get,
        op("profile", "Get the caller's profile")
            .ok(200, "the profile", Body::AnyJson)
            .status(404, "no profile stored"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/profile",
        put,
        op("profile", "Store the caller's profile (any JSON object)")
            .body(Body::AnyJson)
            .status(200, "stored")
            .status(400, "not a JSON object"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/profile",
        delete,
        op("profile", "Delete the caller's profile").status(200, "deleted"),
    )
}

async fn get(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Value>> {
    st.store
        .get_profile(&id.tenant.id, &id.user)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("profile for user {} not found.", id.user)))
}

async fn put(State(st): State<AppState>, id: Identity, body: Bytes) -> ApiResult<()> {
    let v: Value = parse_body(&body, "a JSON object")?;
    if !v.is_object() {
        return Err(ApiError::BadRequest("profile must be a JSON object".into()));
    }
    Ok(st.store.put_profile(&id.tenant.id, &id.user, &v).await?)
}

async fn delete(State(st): State<AppState>, id: Identity) -> ApiResult<()> {
    Ok(st.store.delete_profile(&id.tenant.id, &id.user).await?)
}
