//! Health runs (weft's extension, docs/api.md): `POST /v2/clusters/{id}/health` runs the services'
//! `healthcheck` actions now; `GET /v2/clusters/{id}/health` answers the latest run's node x
//! service grid.

use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::health;
use weft_model::{ClusterHealth, HealthRun};

use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `POST /v2/clusters/{id}/health`.
pub fn routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/health",
        run,
        op(
            t,
            "Run the health checks of the cluster's services now (weft extension); the cluster's status does not change",
        )
        .ok(200, "the health run's job", Body::Json("HealthRun"))
        .status(404, "cluster not found")
        .status(409, "the cluster is neither active nor inconsistent"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/health",
        latest,
        op(
            t,
            "The latest health run as a node x service grid (weft extension)",
        )
        .ok(
            200,
            "healthy, unhealthy, unknown (not checked yet) or none (no check) per service and node",
            Body::Json("ClusterHealth"),
        )
        .status(404, "cluster not found"),
    )
}

async fn run(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<HealthRun>> {
    Ok(Json(
        health::run_checks(&st.engine, &who.caller(), &id).await?,
    ))
}

async fn latest(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<ClusterHealth>> {
    Ok(Json(health::latest(&st.engine, &who.caller(), &id).await?))
}
