//! `/v2/clusters`: create, list, get and delete clusters, and read their status, plans, config and
//! services. A user sees only the clusters it owns; the tenant admin sees all of the tenant's. A
//! cluster the caller cannot see answers 404, as if absent.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_model::{
    lenient, ClusterCreateRequest, ClusterStatus, ClusterStatusView, ClusterSummary, PlanView,
};

use super::params::{parse_body, DryRun};
use crate::api::{op, Api, Body, Param};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::body::{from_body, ClusterBody};
use weft_engine::create::create_cluster;
use weft_engine::delete::delete_cluster;
use weft_engine::view;

/// Registers `/v2/clusters` and the reads under `/v2/clusters/{id}` (status, plans, config,
/// services).
pub fn routes(api: Api) -> Api {
    let t = "clusters";
    api.route(
        MethodFilter::GET,
        "/v2/clusters",
        list,
        op(t, "List the clusters the caller can see, newest first")
            .query("status", "comma-separated statuses to keep (pending, active, incomplete, inconsistent, terminated)")
            .ok(200, "cluster summaries", Body::Array("ClusterSummary")),
    )
    .route(
        MethodFilter::POST,
        "/v2/clusters",
        create,
        op(t, "Create a cluster: solve its layout and start its CLUSTER_CREATE job")
                .query("dryrun", "true: answer the plan that would run and create nothing")
            .body(Body::Json("ClusterCreateRequest"))
            .ok(200, "{\"id\": \"00000001\"}", Body::AnyJson)
            .status(400, "invalid request; or {\"missingFields\": [...]} (JSON)")
            .status(404, "template, provider or provider type does not exist")
            .status(
                409,
                "a tenant quota would be exceeded, no provisioner offers the provider type, or \
                 the template as stored cannot serve the request (incomplete, a size outside its \
                 range, a lease it does not allow; no layout for a dry run)",
            ),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}",
        get,
        op(t, "Cluster details: nodes, services, status, progress. Clusters of up to 1,000 nodes are answered whole; larger ones 1,000 nodes at a time: `?offset=N&limit=M` (M at most 1,000) picks the page, and the headers Weft-Nodes-Total, Weft-Nodes-Offset, Weft-Nodes-Count and Link (rel=next) say where it is (weft extension)").ok(200, "the cluster", Body::Json("ClusterDetails")).status(400, "offset or limit is not a number, or limit is not 1 to 1000").status(404, "cluster not found"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/clusters/{id}",
        delete,
        op(t, "Delete a cluster (starts a CLUSTER_DELETE job; 200 if already terminated). A job underway is aborted first: its queued tasks never start, and the delete starts when its running tasks end or time out")
            .query_as("force", "true (admins, weft extension): mark the cluster terminated without deleting its machines, for machines known to be gone; refused while a task of it runs", Param::OneOf(&["true", "false"]))
            .status(200, "delete started, or will start when the aborted job's running tasks end; with force, the cluster is terminated")
            .status(403, "force asked by a user who is not the tenant's admin")
            .status(404, "cluster not found")
            .status(409, "the cluster changed meanwhile (try again), or with force: a task of it still runs"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/status",
        status,
        op(t, "The cluster's status and its latest job's progress").ok(200, "status", Body::Json("ClusterStatusView")).status(404, "cluster not found"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/plans",
        plans,
        op(t, "Every job's plan, newest first").ok(200, "plans", Body::Array("PlanView")).status(404, "Plans for cluster X not found."),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/plans/{job_id}",
        plan,
        op(t, "One job's plan")
            .ok(200, "the plan", Body::Json("PlanView"))
            .status(400, "the job id is malformed or belongs to another cluster")
            .status(404, "cluster not found"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/config",
        config,
        op(t, "The cluster's config").ok(200, "config", Body::AnyJson).status(404, "cluster not found"),
    )
    .route(
        MethodFilter::GET,
        "/v2/clusters/{id}/services",
        services,
        op(t, "The names of the cluster's services").ok(200, "service names", Body::AnyJson).status(404, "cluster not found"),
    )
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    status: Option<String>,
}

async fn list(
    State(st): State<AppState>,
    who: Identity,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Vec<ClusterSummary>>> {
    // Unknown statuses are ignored; if none is known, there is no filter (as in Coopr).
    let wanted: Vec<ClusterStatus> = q
        .status
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter_map(|s| ClusterStatus::parse(s.trim()))
        .collect();
    Ok(Json(view::list(&st.engine, &who.caller(), &wanted).await?))
}

async fn create(
    State(st): State<AppState>,
    who: Identity,
    Query(d): Query<DryRun>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let raw: Value = parse_body(&body, "a cluster create request")?;
    weft_model::validate::known_fields(&raw, &ClusterCreateRequest::FIELDS)?;
    let req: ClusterCreateRequest = lenient::from_value(raw)?;
    match create_cluster(&st.engine, &who.caller(), req, d.on()).await? {
        weft_engine::create::Created::Id(id) => Ok(Json(json!({ "id": id }))),
        weft_engine::create::Created::Plan(plan) => Ok(Json(
            serde_json::to_value(plan).map_err(|e| ApiError::Internal(e.to_string()))?,
        )),
    }
}

/// `?offset=&limit=`: which nodes a cluster's details hold (see `view::NodePage`).
#[derive(Debug, Default, Deserialize)]
struct NodePageQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(q): Query<NodePageQuery>,
) -> ApiResult<Response> {
    if q.limit == Some(0) || q.limit.is_some_and(|l| l > view::WHOLE_UP_TO) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {}",
            view::WHOLE_UP_TO
        )));
    }
    let row = view::visible(&st.engine, &who.caller(), &id).await?;
    let page = view::NodePage {
        offset: q.offset.unwrap_or(0),
        limit: q.limit,
    };
    let (details, info) = view::details_page(&st.engine, &row, page).await?;
    let mut headers = vec![
        ("weft-nodes-total", info.total.to_string()),
        ("weft-nodes-offset", info.offset.to_string()),
        ("weft-nodes-count", info.count.to_string()),
    ];
    let next = info.offset + info.count;
    if next < info.total {
        let limit = info.count.max(1);
        headers.push((
            "link",
            format!("</v2/clusters/{id}?offset={next}&limit={limit}>; rel=\"next\""),
        ));
    }
    let mut resp = Json(details).into_response();
    for (k, v) in headers {
        if let Ok(v) = axum::http::HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
    Ok(resp)
}

async fn status(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<ClusterStatusView>> {
    let row = view::visible(&st.engine, &who.caller(), &id).await?;
    Ok(Json(view::status(&st.engine, &row).await?))
}

async fn plans(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<PlanView>>> {
    Ok(Json(view::plans(&st.engine, &who.caller(), &id).await?))
}

async fn plan(
    State(st): State<AppState>,
    who: Identity,
    Path((id, job_id)): Path<(String, String)>,
) -> ApiResult<Json<PlanView>> {
    Ok(Json(
        view::job_plan(&st.engine, &who.caller(), &id, &job_id).await?,
    ))
}

async fn config(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let row = view::visible(&st.engine, &who.caller(), &id).await?;
    let body: ClusterBody = from_body(&row.body)?;
    Ok(Json(Value::Object(body.config)))
}

async fn services(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<String>>> {
    let row = view::visible(&st.engine, &who.caller(), &id).await?;
    let body: ClusterBody = from_body(&row.body)?;
    Ok(Json(body.services))
}

/// `?force=true` on a delete (weft extension).
#[derive(Debug, Deserialize)]
struct Force {
    force: Option<String>,
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(f): Query<Force>,
) -> ApiResult<()> {
    let caller = who.caller();
    let row = view::visible(&st.engine, &caller, &id).await?;
    match f.force.as_deref() {
        None | Some("false") => {
            delete_cluster(&st.engine, &row).await?;
        }
        Some("true") => {
            weft_engine::delete::force_delete(&st.engine, &caller, &row).await?;
        }
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "force must be true or false, not {other}"
            )))
        }
    }
    Ok(())
}
