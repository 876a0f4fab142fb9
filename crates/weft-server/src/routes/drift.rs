//! Drift (weft's extension, docs/api.md): `POST /v2/clusters/{id}/check` asks each node's
//! provider whether its machine still exists and runs the health checks, and looks for machines
//! with the cluster's marks that belong to no node; `GET /v2/clusters/{id}/check` answers the
//! latest check. `POST /v2/clusters/{id}/nodes/{node}/replace` replaces a node's machine.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::{drift, replace};
use weft_model::{DriftReport, DriftRun, ReplaceRun};

use super::params::DryRun;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `POST /v2/clusters/{id}/check` and `POST /v2/clusters/{id}/nodes/{node}/replace`.
pub fn routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/check",
        run,
        op(
            t,
            "Check the cluster for drift now (weft extension): each machine's existence, the services' health checks, machines with the cluster's marks that belong to no node; the cluster's status does not change",
        )
        .ok(200, "the check's job", Body::Json("DriftRun"))
        .status(404, "cluster not found")
        .status(409, "the cluster is neither active nor inconsistent"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/check",
        latest,
        op(t, "The latest drift check (weft extension)")
            .ok(
                200,
                "each node's machine (running, stopped, missing, unknown) and services' health, and the orphan machines",
                Body::Json("DriftReport"),
            )
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/nodes/{node}/replace",
        replace_node,
        op(
            t,
            "Replace a node (weft extension): delete its machine if it still exists, make a new one with the same node id, hardware, image and services, set them up, and re-configure the other nodes",
        )
        .query(
            "dryrun",
            "true: answer the plan that would run and change nothing",
        )
        .query(
            "force",
            "true: replace even where the rest would break a service's availability rule (recorded on the job)",
        )
        .ok(
            200,
            "the replacement's job (ReplaceRun); with dryrun=true, the plan (PlanView)",
            Body::Json("ReplaceRun"),
        )
        .status(404, "cluster or node not found")
        .status(409, "the cluster is neither active nor inconsistent, or it changed meanwhile, or the rest would break a service's availability rule"),
    )
}

async fn run(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<DriftRun>> {
    Ok(Json(
        drift::run_check(&st.engine, &who.caller(), &id).await?,
    ))
}

async fn latest(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<DriftReport>> {
    Ok(Json(drift::latest(&st.engine, &who.caller(), &id).await?))
}

async fn replace_node(
    State(st): State<AppState>,
    who: Identity,
    Path((id, node)): Path<(String, String)>,
    Query(d): Query<DryRun>,
) -> ApiResult<Response> {
    let (job_id, plan) =
        replace::replace_node(&st.engine, &who.caller(), &id, &node, d.mode()).await?;
    if d.on() {
        return Ok(Json(plan).into_response());
    }
    Ok(Json(ReplaceRun {
        cluster_id: plan.cluster_id,
        job_id,
        node,
    })
    .into_response())
}
