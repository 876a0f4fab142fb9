//! Provisioners: they register and heartbeat on the internal port; the superadmin lists them on the
//! external port (tenant ids shown as tenant names).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::provisioners;
use weft_model::{Heartbeat, Provisioner, ProvisionerRegistration};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers the superadmin's reads of `/v2/provisioners` on the external port.
pub fn external_routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/provisioners",
        list,
        op("provisioners", "List provisioners (superadmin)")
            .ok(200, "provisioners", Body::Array("Provisioner"))
            .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::GET,
        "/v2/provisioners/{id}",
        get,
        op("provisioners", "Get a provisioner (superadmin)")
            .ok(200, "the provisioner", Body::Json("Provisioner"))
            .status(403, "not the superadmin (empty body)")
            .status(404, "Provisioner X not found."),
    )
}

/// Registers the internal port's provisioner routes: registration (`PUT`), removal (`DELETE`)
/// and heartbeat (`POST .../heartbeat`) of `/v2/provisioners/{id}`.
pub fn internal_routes(api: Api) -> Api {
    api.route(
        MethodFilter::PUT,
        "/v2/provisioners/{id}",
        register,
        op(
            "provisioners",
            "Register a provisioner; tenants' workers are re-placed",
        )
        .body(Body::Json("ProvisionerRegistration"))
        .status(200, "registered")
        .status(
            400,
            "id mismatch, host or port missing, capacityTotal not positive, or not JSON",
        ),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/provisioners/{id}",
        unregister,
        op(
            "provisioners",
            "Unregister a provisioner (200 also if unknown)",
        )
        .status(200, "removed"),
    )
    .route(
        MethodFilter::POST,
        "/v2/provisioners/{id}/heartbeat",
        heartbeat,
        op("provisioners", "Report live workers per tenant id")
            .body(Body::Json("Heartbeat"))
            .ok(
                200,
                "recorded; a heartbeat that lists its plugin types gets those the server lacks",
                Body::Json("HeartbeatAnswer"),
            )
            .status(404, "unknown provisioner: register again"),
    )
}

async fn list(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Vec<Provisioner>>> {
    Ok(Json(provisioners::list(&st.engine, &id.caller()).await?))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    Path(pid): Path<String>,
) -> ApiResult<Json<Provisioner>> {
    Ok(Json(
        provisioners::get(&st.engine, &id.caller(), &pid).await?,
    ))
}

async fn register(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    body: Bytes,
) -> ApiResult<()> {
    let reg: ProvisionerRegistration = parse_body(&body, "{id, host, port, capacityTotal}")?;
    let tls = st.settings.tls.is_some();
    Ok(provisioners::register(&st.engine, &pid, reg, tls).await?)
}

async fn unregister(State(st): State<AppState>, Path(pid): Path<String>) -> ApiResult<()> {
    Ok(provisioners::unregister(&st.engine, &pid).await?)
}

async fn heartbeat(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let hb: Heartbeat = parse_body(&body, "{\"usage\": {...}}")?;
    Ok(
        match provisioners::heartbeat(&st.engine, &pid, &hb).await? {
            Some(answer) => Json(answer).into_response(),
            None => StatusCode::OK.into_response(),
        },
    )
}
