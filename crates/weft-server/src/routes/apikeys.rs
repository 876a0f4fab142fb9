//! `/v2/apikeys`: the superadmin makes and revokes API keys. A key's secret is shown once, when it is
//! made; the store keeps only its SHA-256.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::apikeys;
use weft_model::{ApiKeyCreated, ApiKeyInfo, ApiKeyRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `/v2/apikeys` and `/v2/apikeys/{id}`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/apikeys",
        list,
        op(
            "apikeys",
            "List API keys, without their secrets (superadmin)",
        )
        .ok(200, "keys", Body::Array("ApiKeyInfo"))
        .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::POST,
        "/v2/apikeys",
        create,
        op(
            "apikeys",
            "Make an API key for a user of a tenant (superadmin); the secret is shown once",
        )
        .body(Body::Json("ApiKeyRequest"))
        .ok(200, "the key", Body::Json("ApiKeyCreated"))
        .status(400, "invalid body")
        .status(403, "not the superadmin (empty body)")
        .status(404, "tenant does not exist"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/apikeys/{id}",
        delete,
        op(
            "apikeys",
            "Revoke an API key (superadmin; 200 also if unknown)",
        )
        .status(200, "revoked")
        .status(403, "not the superadmin (empty body)"),
    )
}

async fn list(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Vec<ApiKeyInfo>>> {
    Ok(Json(apikeys::list(&st.engine, &id.caller()).await?))
}

async fn create(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<ApiKeyCreated>> {
    let req: ApiKeyRequest = parse_body(&body, "{tenant, user, admin}")?;
    Ok(Json(apikeys::create(&st.engine, &id.caller(), &req).await?))
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    Path(key_id): Path<String>,
) -> ApiResult<()> {
    Ok(apikeys::delete(&st.engine, &id.caller(), &key_id).await?)
}
