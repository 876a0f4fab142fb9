//! `/v2/export`, `/v2/import` and `/v2/resolve`: the whole catalog of a tenant at once, and template
//! inheritance (the rules are `weft_engine::transfer`'s and `weft_engine::catalog`'s).

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::Value;
use weft_engine::{catalog, transfer};
use weft_model::{CatalogWriteAnswer, ClusterTemplate};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `/v2/export`, `/v2/import` and `/v2/resolve`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/export",
        export,
        op(
            "catalog",
            "Export the latest version of every admin entity of the tenant",
        )
        .ok(200, "the six kinds", Body::Json("CatalogExport")),
    )
    .route(
        MethodFilter::POST,
        "/v2/export",
        export_sealed,
        op(
            "catalog",
            "Export the catalog with its secrets, each sealed under a passphrase (AES-256-GCM, \
             key from Argon2id); `POST /v2/import` with the passphrase opens them",
        )
        .body(Body::Json("SealedExportRequest"))
        .ok(
            200,
            "the six kinds; sensitive provider fields read `passphrase:v1:...`",
            Body::Json("CatalogExport"),
        )
        .status(
            400,
            "the passphrase is missing or shorter than 12 characters",
        )
        .status(403, "caller is not the tenant admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/import",
        import,
        op(
            "catalog",
            "Replace the tenant's whole catalog (kinds left out end up empty)",
        )
        .body(Body::Json("CatalogExport"))
        .ok(
            200,
            "imported; `warnings` names what each entry lacks or may not mean, its field \
             prefixed with the entry's kind and name",
            Body::Json("CatalogWriteAnswer"),
        )
        .status(
            400,
            "Json syntax error, or an invalid entity (the message names it)",
        )
        .status(403, "caller is not the tenant admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/resolve",
        resolve,
        op(
            "catalog",
            "Resolve a template's extends and includes into one template",
        )
        .body(Body::Json("ClusterTemplate"))
        .ok(200, "the merged template", Body::Json("ClusterTemplate"))
        .status(
            400,
            "invalid template; without extends or includes, no default services or provider",
        )
        .status(404, "a parent or partial does not exist")
        .status(
            409,
            "the parent or partials, as stored, leave the result incomplete or invalid, or an \
             immutable partial's keys are overridden",
        ),
    )
}

async fn export(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Value>> {
    Ok(Json(transfer::export(&st.engine, &id.caller()).await?))
}

async fn export_sealed(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        transfer::export_sealed(&st.engine, &id.caller(), &body).await?,
    ))
}

async fn import(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    Ok(Json(
        transfer::import(&st.engine, &id.caller(), &body).await?,
    ))
}

async fn resolve(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<ClusterTemplate>> {
    let own: ClusterTemplate = parse_body(&body, "a cluster template")?;
    Ok(Json(
        catalog::resolve_as_asked(&st.engine, &id.tenant.id, own).await?,
    ))
}
