//! Calls that change an existing cluster: lease, reconfigure, add / remove / start / stop /
//! restart / upgrade services, expand and shrink, template sync, and job control (pause, resume,
//! abort). Every call that starts a job takes `?dryrun=true`, which answers the plan that would run
//! and changes nothing.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_model::{lenient, ApplyRequest, ClusterChange, ClusterSpec, RolloutSpec};

use super::params::{parse_body, DryRun, VersionQuery};
use crate::api::{op, Api, Body, Param};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::ops::{self, ServiceAction};
use weft_engine::{control, declared, rollback};

fn changed(tag: &'static str, summary: &'static str) -> crate::api::Op {
    op(tag, summary)
        .query(
            "dryrun",
            "true: answer the plan that would run and change nothing",
        )
        .query(
            "force",
            "true: run the change even where it breaks a service's availability rule (recorded on the job)",
        )
        .status(
            200,
            "started (empty body); with dryrun=true, the plan (PlanView)",
        )
        .status(
            400,
            "invalid body, or the change breaks the template's constraints",
        )
        .status(404, "cluster not found")
        .status(
            409,
            "the cluster's status does not allow it, or the plan would break a service's availability rule (quorum, minHealthy)",
        )
}

/// Registers the routes that change an existing cluster under `/v2/clusters/{id}`.
pub fn routes(api: Api) -> Api {
    let api = lease_and_config_routes(api);
    let api = service_routes(api);
    let api = size_routes(api);
    let api = declared_routes(api);
    job_control_routes(api)
}

/// The lease and the configuration.
fn lease_and_config_routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}",
        lease,
        op(t, "Change the cluster's lease: {\"expireTime\": ms}")
            .body(Body::Json("LeaseRequest"))
            .status(200, "changed")
            .status(
                400,
                "expire time not specified, or it breaks the template's lease rules",
            )
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/clusters/{id}/config",
        reconfigure,
        changed(t, "Reconfigure: {\"config\": {...}, \"restart\": true}")
            .body(Body::Json("ReconfigureRequest")),
    )
}

/// Adding, removing, starting, stopping, restarting and upgrading services.
fn service_routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/services",
        add_services,
        changed(t, "Add services: {\"services\": [...]}").body(Body::Json("ServicesRequest")),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/services/{svc}",
        all_services,
        changed(
            t,
            "start, stop or restart every service (the last segment is the action; a restart \
             takes {\"rollout\": {...}})",
        )
        .optional_body(Body::Json("UpgradeRequest")),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/clusters/{id}/services/{svc}",
        remove_service,
        changed(t, "Remove a service from the cluster"),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/services/{svc}/{action}",
        one_service,
        changed(
            t,
            "start, stop, restart or upgrade one service ({\"batchSize\": n} for upgrade; \
             {\"rollout\": {...}} for restart and upgrade)",
        )
        .optional_body(Body::Json("UpgradeRequest")),
    )
}

/// Expanding, shrinking and moving to the template's current version.
fn size_routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/nodes",
        expand,
        changed(t, "Expand: add {\"count\": k} nodes (or ?count=k)")
            .query_as(
                "count",
                "nodes to add, when the body does not say",
                Param::Int(1),
            )
            .optional_body(Body::Json("NodeCountRequest")),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/clusters/{id}/nodes",
        shrink,
        changed(
            t,
            "Shrink: remove {\"count\": k} nodes (or ?count=k), newest first",
        )
        .query_as(
            "count",
            "nodes to remove, when the body does not say",
            Param::Int(1),
        )
        .optional_body(Body::Json("NodeCountRequest")),
    )
}

/// Template versions and declared clusters (weft extensions): sync to a version (Coopr's route,
/// completed), impact previews, apply and export.
fn declared_routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/clustertemplate/sync",
        sync_template,
        moved(
            t,
            "Move the cluster to a version of its template (the latest by default): services the \
             version adds to its defaults are added, its config changes taken where the cluster kept \
             the old defaults; no job when nothing on the nodes changes (Coopr's sync)",
        )
        .query_as(
            "version",
            "the template version (default: the latest)",
            Param::Version,
        ),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/apply",
        apply,
        moved(
            t,
            "Move the cluster to the state a declaration gives (template version, size, services, \
             config, lease) in one job; with `fingerprint`, only if the change is still the reviewed one",
        )
        .body(Body::Json("ApplyRequest"))
        .status(409, "the cluster's status does not allow it, or the fingerprint no longer matches (the cluster or the catalog changed)"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/export",
        export,
        op(t, "The cluster as a declaration: applying it changes nothing")
            .ok(200, "the declaration", Body::Json("ClusterSpec"))
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clustertemplates/{name}/impact",
        impact,
        op(
            "clustertemplates",
            "What moving each live cluster on another version of the template would do (tenant admin)",
        )
        .query_as(
            "version",
            "the version to move to (default: the latest)",
            Param::Version,
        )
        .ok(200, "one entry per cluster (ClusterChange)", Body::Array("ClusterChange"))
        .status(403, "caller is not the tenant admin")
        .status(404, "template or version not found")
        .status(
            409,
            "the stored version no longer reads or resolves against the catalog",
        ),
    )
}

/// A move of a cluster: dry run or not, forced or not, answering a [`ClusterChange`].
fn moved(tag: &'static str, summary: &'static str) -> crate::api::Op {
    op(tag, summary)
        .query(
            "dryrun",
            "true: answer what would change and the plan, and change nothing",
        )
        .query(
            "force",
            "true: run the change even where it breaks a service's availability rule (recorded on the job)",
        )
        .ok(200, "what changes (or would); `job` names the job started", Body::Json("ClusterChange"))
        .status(400, "invalid body (the message names the field), or the cluster cannot be moved there (the message says why)")
        .status(404, "cluster, template or version not found")
        .status(409, "the cluster's status does not allow it")
}

/// Pausing, resuming and aborting the running job.
fn job_control_routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::POST,
        "/v2/clusters/{id}/pause",
        pause,
        op(t, "Pause the running job")
            .status(200, "paused (or nothing to pause)")
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/resume",
        resume,
        op(t, "Resume a paused job")
            .status(200, "resumed (or nothing to resume)")
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/abort",
        abort,
        op(t, "Abort a running create")
            .status(200, "aborted (or nothing to abort)")
            .status(404, "cluster not found")
            .status(409, "Cannot be aborted at this time."),
    )
}

fn answer(plan: Option<weft_model::PlanView>) -> Response {
    match plan {
        Some(p) => Json(p).into_response(),
        None => ().into_response(),
    }
}

fn optional_body(body: &Bytes) -> ApiResult<Value> {
    let v = lenient::parse(body)?;
    Ok(if v.is_null() {
        Value::Object(Map::new())
    } else {
        v
    })
}

async fn lease(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<()> {
    let req: LeaseReq = lenient::from_value(optional_body(&body)?)?;
    Ok(ops::set_lease(&st.engine, &who.caller(), &id, req.expire_time).await?)
}

/// `POST /v2/clusters/{id}`: the lease's new end.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = LeaseRequest)]
pub struct LeaseReq {
    /// Milliseconds since the epoch; within the template's lease rules.
    #[serde(rename = "expireTime", default, deserialize_with = "lenient::opt_i64")]
    #[schema(required = true, value_type = i64, minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    expire_time: Option<i64>,
}

/// `PUT /v2/clusters/{id}/config`.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = ReconfigureRequest)]
pub struct ConfigReq {
    /// The cluster's whole new config.
    #[schema(required = true, value_type = Object)]
    config: Option<Map<String, Value>>,
    /// Restart the services after configuring them (default true).
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    restart: Option<bool>,
    /// weft extension: roll the change through the cluster (canaries, batches, health gates).
    #[schema(value_type = Option<RolloutSpec>)]
    rollout: Option<Value>,
}

/// A request's `rollout`: an object, checked field by field by the engine.
fn rollout_of(v: Option<Value>) -> ApiResult<Option<RolloutSpec>> {
    let bad = || {
        ApiError::from(weft_model::ModelError::invalid(
            "rollout",
            "rollout must be an object with canaries, maxInFlight and onFailure",
        ))
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => serde_json::from_value(v).map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

async fn reconfigure(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let invalid = || ApiError::BadRequest("Invalid request body.".into());
    let req: ConfigReq = lenient::from_value(optional_body(&body)?).map_err(|_| invalid())?;
    let config = req.config.ok_or_else(invalid)?;
    let restart = req.restart.unwrap_or(true);
    let rollout = rollout_of(req.rollout)?;
    let who = who.caller();
    let plan = ops::reconfigure(
        &st.engine,
        &who,
        &id,
        config,
        restart,
        rollout.as_ref(),
        d.mode(),
    )
    .await?;
    Ok(answer(plan))
}

/// `POST /v2/clusters/{id}/services`.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = ServicesRequest)]
pub struct ServicesReq {
    /// Services of the cluster's template to add.
    #[serde(default, deserialize_with = "lenient::strings")]
    #[schema(required = true, min_items = 1)]
    services: Vec<String>,
}

async fn add_services(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let req: ServicesReq = parse_body(&body, "{\"services\": [...]}")?;
    let plan = ops::add_services(&st.engine, &who.caller(), &id, req.services, d.mode()).await?;
    Ok(answer(plan))
}

fn service_action(action: &str) -> ApiResult<ServiceAction> {
    ServiceAction::parse(action).ok_or_else(|| {
        ApiError::NotFound(format!(
            "unknown service action {action}: expected start, stop or restart"
        ))
    })
}

async fn all_services(
    State(st): State<AppState>,
    who: Identity,
    Path((id, action)): Path<(String, String)>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let action = service_action(&action)?;
    let req: UpgradeReq = lenient::from_value(optional_body(&body)?)?;
    let rollout = rollout_of(req.rollout)?;
    let who = who.caller();
    let plan = ops::service_action(
        &st.engine,
        &who,
        &id,
        action,
        None,
        rollout.as_ref(),
        d.mode(),
    )
    .await?;
    Ok(answer(plan))
}

/// `POST /v2/clusters/{id}/services/{svc}/upgrade`.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[schema(as = UpgradeRequest)]
pub struct UpgradeReq {
    /// Nodes upgraded at once (default 1).
    #[serde(rename = "batchSize", default, deserialize_with = "lenient::opt_u64")]
    #[schema(minimum = 1, value_type = u64)]
    batch_size: Option<u64>,
    /// weft extension, for restart and upgrade: roll the change through the cluster (canaries,
    /// batches, health gates); `batchSize` is then not used.
    #[schema(value_type = Option<RolloutSpec>)]
    rollout: Option<Value>,
}

async fn one_service(
    State(st): State<AppState>,
    who: Identity,
    Path((id, svc, action)): Path<(String, String, String)>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let (e, who) = (&st.engine, who.caller());
    let req: UpgradeReq = lenient::from_value(optional_body(&body)?)?;
    let rollout = rollout_of(req.rollout)?;
    let plan = if action == "upgrade" {
        let batch = req.batch_size.unwrap_or(1).max(1) as usize;
        ops::upgrade(e, &who, &id, &svc, batch, rollout.as_ref(), d.mode()).await?
    } else {
        let action = service_action(&action)?;
        ops::service_action(e, &who, &id, action, Some(&svc), rollout.as_ref(), d.mode()).await?
    };
    Ok(answer(plan))
}

async fn remove_service(
    State(st): State<AppState>,
    who: Identity,
    Path((id, svc)): Path<(String, String)>,
    Query(d): Query<DryRun>,
) -> ApiResult<Response> {
    let plan = ops::remove_service(&st.engine, &who.caller(), &id, &svc, d.mode()).await?;
    Ok(answer(plan))
}

/// `POST` and `DELETE /v2/clusters/{id}/nodes`.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[schema(as = NodeCountRequest)]
pub struct CountReq {
    /// How many nodes to add or remove.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schema(required = true, minimum = 1, value_type = u64)]
    count: Option<u64>,
}

/// The count from the body or else the query; the engine checks it after finding the cluster.
fn count(body: &Bytes, query: Option<u64>) -> ApiResult<Option<u64>> {
    let req: CountReq = lenient::from_value(optional_body(body)?)?;
    Ok(req.count.or(query))
}

#[derive(Debug, Deserialize)]
struct NodesQuery {
    dryrun: Option<String>,
    force: Option<String>,
    count: Option<u64>,
}

async fn expand(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(q): Query<NodesQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let k = count(&body, q.count)?;
    let mode = DryRun {
        dryrun: q.dryrun,
        force: q.force,
    }
    .mode();
    let plan = ops::expand(&st.engine, &who.caller(), &id, k, mode).await?;
    Ok(answer(plan))
}

async fn shrink(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(q): Query<NodesQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let k = count(&body, q.count)?;
    let mode = DryRun {
        dryrun: q.dryrun,
        force: q.force,
    }
    .mode();
    let plan = ops::shrink(&st.engine, &who.caller(), &id, k, mode).await?;
    Ok(answer(plan))
}

async fn sync_template(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(d): Query<DryRun>,
    Query(v): Query<VersionQuery>,
) -> ApiResult<Json<ClusterChange>> {
    let version = v.version()?;
    let who = who.caller();
    Ok(Json(
        declared::sync(&st.engine, &who, &id, version, d.mode()).await?,
    ))
}

async fn apply(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Json<ClusterChange>> {
    let req: ApplyRequest = parse_body(&body, "{\"spec\": {...}}")?;
    let who = who.caller();
    Ok(Json(
        declared::apply(&st.engine, &who, &id, &req, d.mode()).await?,
    ))
}

async fn export(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<ClusterSpec>> {
    Ok(Json(
        declared::export(&st.engine, &who.caller(), &id).await?,
    ))
}

async fn impact(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
    Query(v): Query<VersionQuery>,
) -> ApiResult<Json<Vec<ClusterChange>>> {
    let version = v.version()?;
    Ok(Json(
        declared::impact(&st.engine, &who.caller(), &name, version).await?,
    ))
}

async fn pause(State(st): State<AppState>, who: Identity, Path(id): Path<String>) -> ApiResult<()> {
    Ok(control::pause_cluster(&st.engine, &who.caller(), &id).await?)
}

async fn resume(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<()> {
    Ok(control::resume_cluster(&st.engine, &who.caller(), &id).await?)
}

async fn abort(State(st): State<AppState>, who: Identity, Path(id): Path<String>) -> ApiResult<()> {
    Ok(rollback::abort_cluster(&st.engine, &who.caller(), &id).await?)
}
