//! `/v2/nodes` (raw node records of the clusters the caller can see) and the RPC routes
//! `/v2/getNodeProperties` and `/v2/getClusterStatuses`.

use std::collections::BTreeSet;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_model::{lenient, Node};
use weft_store::{ChangeSet, Expect, NodeRow, Write};

use super::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::engine::body::{from_body, to_body};
use crate::engine::{parse_cluster_id, store_err, view};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn routes(api: Api) -> Api {
    let t = "nodes";
    api.route(
        MethodFilter::GET,
        "/v2/nodes",
        list,
        op(t, "Every node of the clusters the caller can see").ok(
            200,
            "nodes",
            Body::Array("Node"),
        ),
    )
    .route(
        MethodFilter::POST,
        "/v2/nodes",
        create,
        op(t, "Write a node record (admin)")
            .body(Body::Json("Node"))
            .status(201, "created")
            .status(400, "id empty or invalid body")
            .status(403, "not the tenant admin"),
    )
    .route(
        MethodFilter::GET,
        "/v2/nodes/{id}",
        get,
        op(t, "One node")
            .ok(200, "the node", Body::Json("Node"))
            .status(404, "node not found"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/nodes/{id}",
        put,
        op(t, "Replace a node record (admin)")
            .body(Body::Json("Node"))
            .status(204, "written")
            .status(400, "the body's id differs from the path")
            .status(403, "not the tenant admin")
            .status(404, "node not found"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/nodes/{id}",
        delete,
        op(t, "Delete a node record (admin; 204 also if absent)")
            .status(204, "deleted")
            .status(403, "not the tenant admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/getNodeProperties",
        node_properties,
        op(
            "rpc",
            "Properties of the nodes of a cluster that carry all the given services",
        )
        .body(Body::Json("NodePropertiesRequest"))
        .ok(
            200,
            "node id -> properties ({} for a cluster the caller cannot see)",
            Body::AnyJson,
        )
        .status(400, "not JSON, or clusterId missing"),
    )
    .route(
        MethodFilter::POST,
        "/v2/getClusterStatuses",
        cluster_statuses,
        op(
            "rpc",
            "Not implemented (Coopr never answered it); use GET /v2/clusters",
        )
        .status(501, "not implemented"),
    )
}

/// The node rows the caller may see.
async fn visible_nodes(st: &AppState, who: &Identity) -> ApiResult<Vec<NodeRow>> {
    let rows = st.store.list_tenant_nodes(&who.tenant.id).await?;
    if who.is_admin() {
        return Ok(rows);
    }
    let mine: BTreeSet<u64> = st
        .store
        .list_clusters(&who.tenant.id, Some(&who.user))
        .await?
        .iter()
        .map(|c| c.id)
        .collect();
    Ok(rows
        .into_iter()
        .filter(|r| mine.contains(&r.cluster_id))
        .collect())
}

async fn list(State(st): State<AppState>, who: Identity) -> ApiResult<Json<Vec<Node>>> {
    let mut nodes = Vec::new();
    for r in visible_nodes(&st, &who).await? {
        nodes.push(view::node(&st, &r).await?);
    }
    Ok(Json(nodes))
}

async fn find(st: &AppState, who: &Identity, id: &str) -> ApiResult<NodeRow> {
    visible_nodes(st, who)
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("node {id} not found.")))
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Node>> {
    let row = find(&st, &who, &id).await?;
    Ok(Json(view::node(&st, &row).await?))
}

async fn write(
    st: &AppState,
    who: &Identity,
    mut node: Node,
    expect_absent: bool,
) -> ApiResult<()> {
    // The history is read from tasks, and masked secrets written back keep their values.
    node.actions.clear();
    if let Some(old) = st.store.get_node(&who.tenant.id, &node.id).await? {
        let old: Node = from_body(&old.body)?;
        view::unmask_results(&mut node.provisioner_results, &old.provisioner_results);
    }
    let cluster_id = parse_cluster_id(&node.cluster_id).ok_or_else(|| {
        ApiError::BadRequest(format!("clusterId {} is not a cluster id", node.cluster_id))
    })?;
    st.store
        .get_cluster(&who.tenant.id, cluster_id)
        .await?
        .ok_or_else(|| {
            ApiError::BadRequest(format!("cluster {} does not exist", node.cluster_id))
        })?;
    let mut cs = ChangeSet::new();
    if expect_absent {
        cs.expect(Expect::NodeRev {
            tenant_id: who.tenant.id.clone(),
            id: node.id.clone(),
            rev: 0,
        });
    }
    cs.write(Write::Node(NodeRow {
        tenant_id: who.tenant.id.clone(),
        cluster_id,
        id: node.id.clone(),
        nodenum: node.properties.nodenum,
        rev: 0,
        body: to_body(&node)?,
    }));
    st.store.commit(&cs).await.map_err(|e| match store_err(e) {
        ApiError::Internal(m) if m.starts_with("stale") => {
            ApiError::Conflict(format!("node {} already exists", node.id))
        }
        other => other,
    })
}

async fn create(State(st): State<AppState>, who: Identity, body: Bytes) -> ApiResult<StatusCode> {
    who.require_admin()?;
    let node: Node = parse_body(&body, "a node")?;
    if node.id.trim().is_empty() {
        return Err(ApiError::BadRequest("node id must be specified".into()));
    }
    write(&st, &who, node, true).await?;
    Ok(StatusCode::CREATED)
}

async fn put(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    who.require_admin()?;
    let node: Node = parse_body(&body, "a node")?;
    if node.id != id {
        return Err(ApiError::BadRequest(format!(
            "node id in the body ({}) does not match the path ({id})",
            node.id
        )));
    }
    find(&st, &who, &id).await?;
    write(&st, &who, node, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    who.require_admin()?;
    let cs = ChangeSet {
        expect: vec![],
        writes: vec![Write::DeleteNode {
            tenant_id: who.tenant.id.clone(),
            id,
        }],
    };
    st.store.commit(&cs).await.map_err(store_err)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v2/getNodeProperties`.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = NodePropertiesRequest)]
pub struct PropsReq {
    #[serde(
        rename = "clusterId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    #[schema(required = true, min_length = 1, value_type = String)]
    cluster_id: Option<String>,
    #[serde(default, deserialize_with = "lenient::strings")]
    properties: Vec<String>,
    #[serde(default, deserialize_with = "lenient::strings")]
    services: Vec<String>,
}

async fn node_properties(
    State(st): State<AppState>,
    who: Identity,
    body: Bytes,
) -> ApiResult<Json<Map<String, Value>>> {
    let req: PropsReq = parse_body(&body, "{\"clusterId\": ..}")?;
    let id = req
        .cluster_id
        .ok_or_else(|| ApiError::BadRequest("clusterId must be specified".into()))?;
    let Ok(row) = super::clusters::visible(&st, &who, &id).await else {
        return Ok(Json(Map::new()));
    };
    let mut out = Map::new();
    for r in st.store.list_nodes(&row.tenant_id, row.id).await? {
        let node: Node = from_body(&r.body)?;
        if !req
            .services
            .iter()
            .all(|s| node.properties.services.contains(s))
        {
            continue;
        }
        let mut props = serde_json::to_value(&node.properties)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if let (false, Some(o)) = (req.properties.is_empty(), props.as_object_mut()) {
            o.retain(|k, _| req.properties.contains(k));
        }
        out.insert(node.id, props);
    }
    Ok(Json(out))
}

async fn cluster_statuses(_who: Identity) -> ApiResult<()> {
    Err(ApiError::NotImplemented(
        "getClusterStatuses is not implemented; use GET /v2/clusters".into(),
    ))
}
