//! `/v2/nodes` (raw node records of the clusters the caller can see) and the RPC routes
//! `/v2/getNodeProperties` and `/v2/getClusterStatuses`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_model::{lenient, Node};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::nodes;

/// Registers `/v2/nodes`, `/v2/nodes/{id}` and the RPC routes `/v2/getNodeProperties` and
/// `/v2/getClusterStatuses`.
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
            .rule("body-id-is-path-id", "the body's id is the path's id")
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

async fn list(State(st): State<AppState>, who: Identity) -> ApiResult<Json<Vec<Node>>> {
    Ok(Json(nodes::shown(&st.engine, &who.caller()).await?))
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Node>> {
    Ok(Json(
        nodes::shown_one(&st.engine, &who.caller(), &id).await?,
    ))
}

async fn create(State(st): State<AppState>, who: Identity, body: Bytes) -> ApiResult<StatusCode> {
    let node: Node = parse_body(&body, "a node")?;
    nodes::create(&st.engine, &who.caller(), node).await?;
    Ok(StatusCode::CREATED)
}

async fn put(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let node: Node = parse_body(&body, "a node")?;
    nodes::replace(&st.engine, &who.caller(), &id, node).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    nodes::remove(&st.engine, &who.caller(), id).await?;
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
    let (props, services) = (&req.properties, &req.services);
    Ok(Json(
        nodes::properties(&st.engine, &who.caller(), req.cluster_id, props, services).await?,
    ))
}

async fn cluster_statuses(_who: Identity) -> ApiResult<()> {
    Err(ApiError::NotImplemented(
        "getClusterStatuses is not implemented; use GET /v2/clusters".into(),
    ))
}
