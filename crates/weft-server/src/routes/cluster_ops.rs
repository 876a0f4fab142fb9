//! Calls that change an existing cluster: lease, reconfigure, add / remove / start / stop /
//! restart / upgrade services, expand and shrink, template sync, and job control (pause, resume,
//! abort). Every call that starts a job takes `?dryrun=true`, which answers the plan that would run
//! and changes nothing.

use std::collections::BTreeSet;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_model::{lenient, ClusterStatus, ClusterTemplate, EntityKind, Service};
use weft_planner::Operation;
use weft_solver::Change;
use weft_store::{ChangeSet, Expect, Write};

use super::clusters::visible;
use super::parse_body;
use crate::api::{op, Api, Body, Param};
use crate::auth::Identity;
use crate::engine::body::to_body;
use crate::engine::control;
use crate::engine::create::typed_list;
use crate::engine::ops::{
    in_place, load, relayout, require_status, solve_change, start_job, Loaded,
};
use crate::engine::{cluster_id_text, store_err};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

use ClusterStatus::{Active, Inconsistent};

#[derive(Debug, Deserialize)]
pub struct DryRun {
    dryrun: Option<String>,
}

impl DryRun {
    pub fn on(&self) -> bool {
        self.dryrun
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case("true") || d == "1")
    }
}

fn changed(tag: &'static str, summary: &'static str) -> crate::api::Op {
    op(tag, summary)
        .query(
            "dryrun",
            "true: answer the plan that would run and change nothing",
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
        .status(409, "the cluster's status does not allow it")
}

pub fn routes(api: Api) -> Api {
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
    .route(
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
            "start, stop or restart every service (the last segment is the action)",
        ),
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
            "start, stop, restart or upgrade one service ({\"batchSize\": n} for upgrade)",
        )
        .optional_body(Body::Json("UpgradeRequest")),
    )
    .route(
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
    .route(
        MethodFilter::POST,
        "/v2/clusters/{id}/clustertemplate/sync",
        sync_template,
        op(
            t,
            "Swap in the current version of the cluster's template, if the cluster satisfies it",
        )
        .status(200, "synced")
        .status(
            400,
            "the cluster would break the new template's constraints",
        )
        .status(404, "cluster or template not found")
        .status(409, "the cluster is not active"),
    )
    .route(
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
    let row = visible(&st, &who, &id).await?;
    let req: LeaseReq = lenient::from_value(optional_body(&body)?)?;
    let t = req
        .expire_time
        .ok_or_else(|| ApiError::BadRequest("expire time not specified".into()))?;
    if matches!(
        ClusterStatus::parse(&row.status),
        Some(ClusterStatus::Terminated | ClusterStatus::Pending)
    ) {
        return Err(ApiError::BadRequest(format!(
            "cluster {id} is {}: its lease cannot change now",
            row.status
        )));
    }
    let c = load(&st, row.clone()).await?;
    let l = c.body.template.administration.leaseduration;
    if t < row.create_time {
        return Err(ApiError::BadRequest(
            "expireTime may not be before the cluster's creation".into(),
        ));
    }
    if l.max != 0 {
        if l.step != 0 && t - row.expire_time > l.step as i64 {
            return Err(ApiError::BadRequest(format!(
                "the lease may grow by at most {} ms at a time",
                l.step
            )));
        }
        if t > row.create_time + l.max as i64 {
            return Err(ApiError::BadRequest(format!(
                "the lease may not end more than {} ms after creation",
                l.max
            )));
        }
    }
    let mut new = row.clone();
    new.expire_time = t;
    let cs = ChangeSet {
        expect: vec![Expect::cluster(&row)],
        writes: vec![Write::Cluster(new)],
    };
    st.store.commit(&cs).await.map_err(store_err)
}

/// `POST /v2/clusters/{id}`: the lease's new end.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = LeaseRequest)]
pub struct LeaseReq {
    /// Milliseconds since the epoch; within the template's lease rules.
    #[serde(rename = "expireTime", default, deserialize_with = "lenient::opt_i64")]
    #[schema(required = true, value_type = i64, minimum = 0)]
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
}

async fn reconfigure(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let row = visible(&st, &who, &id).await?;
    let req: ConfigReq = lenient::from_value(optional_body(&body)?)
        .map_err(|_| ApiError::BadRequest("Invalid request body.".into()))?;
    let config = req
        .config
        .ok_or_else(|| ApiError::BadRequest("Invalid request body.".into()))?;
    require_status(&row, &[Active, Inconsistent])?;
    let c = load(&st, row).await?;
    let mut body = c.body.clone();
    body.config = config;
    let op = Operation::Reconfigure {
        restart: req.restart.unwrap_or(true),
    };
    Ok(answer(in_place(&st, &c, op, body, d.on()).await?))
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
    let row = visible(&st, &who, &id).await?;
    let req: ServicesReq = parse_body(&body, "{\"services\": [...]}")?;
    if req.services.is_empty() {
        return Err(ApiError::BadRequest(
            "services must name at least one service".into(),
        ));
    }
    require_status(&row, &[Active])?;
    let c = load(&st, row).await?;
    let mut body = c.body.clone();
    for s in &req.services {
        if !body.services.contains(s) {
            body.services.push(s.clone());
        }
    }
    let change = Change::AddServices(req.services);
    Ok(answer(
        relayout(&st, &c, &change, Operation::AddServices, body, d.on()).await?,
    ))
}

fn runtime_op(action: &str, service: Option<String>) -> ApiResult<Operation> {
    Ok(match action {
        "start" => Operation::Start { service },
        "stop" => Operation::Stop { service },
        "restart" => Operation::Restart { service },
        other => {
            return Err(ApiError::NotFound(format!(
                "unknown service action {other}: expected start, stop or restart"
            )))
        }
    })
}

async fn all_services(
    State(st): State<AppState>,
    who: Identity,
    Path((id, action)): Path<(String, String)>,
    Query(d): Query<DryRun>,
) -> ApiResult<Response> {
    let row = visible(&st, &who, &id).await?;
    let op = runtime_op(&action, None)?;
    require_status(&row, &[Active])?;
    let c = load(&st, row).await?;
    let body = c.body.clone();
    Ok(answer(in_place(&st, &c, op, body, d.on()).await?))
}

fn require_service(c: &Loaded, svc: &str) -> ApiResult<()> {
    if c.body.services.iter().any(|s| s == svc) {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "service {svc} is not on cluster {}",
            cluster_id_text(c.row.id)
        )))
    }
}

/// `POST /v2/clusters/{id}/services/{svc}/upgrade`.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[schema(as = UpgradeRequest)]
pub struct UpgradeReq {
    /// Nodes upgraded at once (default 1).
    #[serde(rename = "batchSize", default, deserialize_with = "lenient::opt_u64")]
    #[schema(minimum = 1, value_type = u64)]
    batch_size: Option<u64>,
}

async fn one_service(
    State(st): State<AppState>,
    who: Identity,
    Path((id, svc, action)): Path<(String, String, String)>,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Response> {
    let row = visible(&st, &who, &id).await?;
    let c = load(&st, row.clone()).await?;
    require_service(&c, &svc)?;
    if action == "upgrade" {
        let req: UpgradeReq = lenient::from_value(optional_body(&body)?)?;
        require_status(&row, &[Active])?;
        let defs: Vec<Service> = typed_list(&st, &row.tenant_id, EntityKind::Service).await?;
        let new_def = defs
            .into_iter()
            .find(|s| s.name == svc)
            .ok_or_else(|| ApiError::NotFound(format!("service {svc} no longer exists")))?;
        let after: Vec<_> = c
            .nodes
            .iter()
            .map(|n| {
                let mut n = n.clone();
                for s in n.services.iter_mut().filter(|s| s.name == svc) {
                    *s = new_def.clone();
                }
                n
            })
            .collect();
        let batch = req.batch_size.unwrap_or(1).max(1) as usize;
        let op = Operation::Upgrade {
            service: svc,
            batch_size: batch,
        };
        let s = start_job(&st, &c, op, &c.nodes, after, c.body.clone(), vec![], d.on()).await?;
        return Ok(answer(d.on().then_some(s.plan)));
    }
    let op = runtime_op(&action, Some(svc))?;
    require_status(&row, &[Active])?;
    let body = c.body.clone();
    Ok(answer(in_place(&st, &c, op, body, d.on()).await?))
}

async fn remove_service(
    State(st): State<AppState>,
    who: Identity,
    Path((id, svc)): Path<(String, String)>,
    Query(d): Query<DryRun>,
) -> ApiResult<Response> {
    let row = visible(&st, &who, &id).await?;
    let c = load(&st, row.clone()).await?;
    require_service(&c, &svc)?;
    require_status(&row, &[Active])?;
    let mut body = c.body.clone();
    body.services.retain(|s| s != &svc);
    let change = Change::RemoveService(svc.clone());
    let op = Operation::RemoveService { service: svc };
    Ok(answer(relayout(&st, &c, &change, op, body, d.on()).await?))
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

fn count(body: &Bytes, query: Option<u64>) -> ApiResult<u64> {
    let req: CountReq = lenient::from_value(optional_body(body)?)?;
    match req.count.or(query) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(ApiError::BadRequest(
            "count must be a number of nodes greater than 0".into(),
        )),
    }
}

#[derive(Debug, Deserialize)]
struct NodesQuery {
    dryrun: Option<String>,
    count: Option<u64>,
}

async fn expand(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(q): Query<NodesQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let d = DryRun { dryrun: q.dryrun };
    let row = visible(&st, &who, &id).await?;
    let k = count(&body, q.count)?;
    require_status(&row, &[Active])?;
    let (_, nodes) = st.store.count_clusters(&who.tenant.id).await?;
    if nodes + k > who.tenant.spec.max_nodes {
        return Err(ApiError::Conflict(format!(
            "tenant {} would exceed its quota maxNodes ({}): it has {nodes} nodes and asks for {k} more",
            who.tenant.spec.name, who.tenant.spec.max_nodes
        )));
    }
    let c = load(&st, row).await?;
    let body = c.body.clone();
    Ok(answer(
        relayout(&st, &c, &Change::Expand(k), Operation::Expand, body, d.on()).await?,
    ))
}

async fn shrink(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(q): Query<NodesQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let d = DryRun { dryrun: q.dryrun };
    let row = visible(&st, &who, &id).await?;
    let k = count(&body, q.count)?;
    require_status(&row, &[Active])?;
    let c = load(&st, row).await?;
    let body = c.body.clone();
    Ok(answer(
        relayout(&st, &c, &Change::Shrink(k), Operation::Shrink, body, d.on()).await?,
    ))
}

async fn sync_template(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<()> {
    let row = visible(&st, &who, &id).await?;
    require_status(&row, &[Active])?;
    let mut c = load(&st, row.clone()).await?;
    let name = c.body.template.name.clone();
    let doc = st
        .store
        .get_entity(&row.tenant_id, EntityKind::ClusterTemplate, &name, None)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("cluster template {name} does not exist.")))?;
    let fresh = crate::routes::catalog::resolve_in_tenant(
        &st,
        &row.tenant_id,
        lenient::from_value::<ClusterTemplate>(doc)?,
    )
    .await?;
    if let Err(why) = runs_within(&fresh, &c) {
        return Err(ApiError::BadRequest(format!(
            "cluster {id} does not satisfy the current version of template {name}: {why}"
        )));
    }
    let old = std::mem::replace(&mut c.body.template, fresh.clone());
    let (layout, ..) = solve_change(&st, &c, &Change::Retemplate(c.body.services.clone()))
        .await
        .map_err(|e| {
            ApiError::BadRequest(format!(
                "cluster {id} does not satisfy the current version of template {name}: {e}"
            ))
        })?;
    let same = layout.removed.is_empty()
        && layout.nodes.len() == c.nodes.len()
        && layout.nodes.iter().zip(&c.nodes).all(|(l, n)| {
            l.id.as_deref() == Some(&n.id)
                && l.services.iter().collect::<BTreeSet<_>>()
                    == n.properties.services.iter().collect()
        });
    if !same {
        return Err(ApiError::BadRequest(format!(
            "cluster {id} does not satisfy the current version of template {name}: its layout would have to change"
        )));
    }
    drop(old);
    let mut new = row.clone();
    new.body = to_body(&c.body)?;
    let cs = ChangeSet {
        expect: vec![Expect::cluster(&row)],
        writes: vec![Write::Cluster(new)],
    };
    st.store.commit(&cs).await.map_err(store_err)
}

/// Whether what the cluster runs (its services, and its nodes' hardware and image types) is
/// within `template`'s compatibility lists (an empty list allows anything); `Err` names the first
/// thing that is not.
fn runs_within(template: &ClusterTemplate, c: &Loaded) -> Result<(), String> {
    let compat = &template.compatibility;
    let allowed = |list: &[String], x: &str| list.is_empty() || list.iter().any(|l| l == x);
    if let Some(s) = c
        .body
        .services
        .iter()
        .find(|s| !allowed(&compat.services, s))
    {
        return Err(format!(
            "it runs service {s}, which the template no longer allows"
        ));
    }
    for n in &c.nodes {
        let p = &n.properties;
        if !allowed(&compat.hardwaretypes, &p.hardwaretype) {
            return Err(format!(
                "node {} has hardware type {}, which the template no longer allows",
                n.id, p.hardwaretype
            ));
        }
        if !allowed(&compat.imagetypes, &p.imagetype) {
            return Err(format!(
                "node {} has image type {}, which the template no longer allows",
                n.id, p.imagetype
            ));
        }
    }
    Ok(())
}

async fn pause(State(st): State<AppState>, who: Identity, Path(id): Path<String>) -> ApiResult<()> {
    let row = visible(&st, &who, &id).await?;
    control::pause(&st, &row).await
}

async fn resume(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<()> {
    let row = visible(&st, &who, &id).await?;
    control::resume(&st, &row).await
}

async fn abort(State(st): State<AppState>, who: Identity, Path(id): Path<String>) -> ApiResult<()> {
    let row = visible(&st, &who, &id).await?;
    if control::abort(&st, &row).await? == control::Stopped::Settled {
        crate::engine::ops::after_failed_job(&st, &row.tenant_id, row.id).await;
    }
    Ok(())
}
