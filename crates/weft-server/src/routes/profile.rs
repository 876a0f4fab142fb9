//! `/v2/profile`: a free JSON object per (tenant, user), for UIs and clients to keep preferences in.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::Value;
use weft_engine::profiles;

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `/v2/profile`.
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
    Ok(Json(profiles::get(&st.engine, &id.caller()).await?))
}

async fn put(State(st): State<AppState>, id: Identity, body: Bytes) -> ApiResult<()> {
    let v: Value = parse_body(&body, "a JSON object")?;
    Ok(profiles::put(&st.engine, &id.caller(), &v).await?)
}

async fn delete(State(st): State<AppState>, id: Identity) -> ApiResult<()> {
    Ok(profiles::delete(&st.engine, &id.caller()).await?)
}
