//! `/v2/apikeys`: the superadmin makes and revokes API keys. A key's secret is shown once, when it is
//! made; the store keeps only its SHA-256.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_model::{validate_name, ApiKeyCreated, ApiKeyInfo, ApiKeyRequest};
use weft_store::{ApiKeyRecord, Store};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::{hash_key, new_key, Identity};
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};

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
    id.require_superadmin()?;
    let mut out = Vec::new();
    for k in st.store.list_api_keys().await? {
        let tenant = st
            .store
            .tenant_by_id(&k.tenant_id)
            .await?
            .map(|t| t.spec.name)
            .unwrap_or(k.tenant_id);
        out.push(ApiKeyInfo {
            id: k.id,
            tenant,
            user: k.user,
            admin: k.admin,
            create_time: k.create_time,
        });
    }
    Ok(Json(out))
}

async fn create(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<ApiKeyCreated>> {
    id.require_superadmin()?;
    let req: ApiKeyRequest = parse_body(&body, "{tenant, user, admin}")?;
    Ok(Json(make_key(st.store.as_ref(), &req).await?))
}

/// Makes and stores a key; also used by `weft admin apikey create`, which works on the store directly.
pub async fn make_key(store: &dyn Store, req: &ApiKeyRequest) -> ApiResult<ApiKeyCreated> {
    validate_name("tenant", &req.tenant)?;
    if req.user.trim().is_empty() {
        return Err(ApiError::BadRequest("user must be specified".into()));
    }
    let tenant = store
        .tenant_by_name(&req.tenant)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {} does not exist.", req.tenant)))?;
    let key = new_key();
    let record = ApiKeyRecord {
        id: uuid::Uuid::new_v4().to_string(),
        hash: hash_key(&key),
        tenant_id: tenant.id,
        user: req.user.clone(),
        admin: req.admin,
        create_time: now_ms(),
    };
    store.insert_api_key(&record).await?;
    Ok(ApiKeyCreated {
        id: record.id,
        key,
        tenant: req.tenant.clone(),
        user: record.user,
        admin: record.admin,
    })
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    Path(key_id): Path<String>,
) -> ApiResult<()> {
    id.require_superadmin()?;
    st.store.delete_api_key(&key_id).await?;
    Ok(())
}
