//! Plugin types (`/v2/plugins/{providertypes|automatortypes}`) and plugin resources.
//!
//! Plugin types are global: provisioners register them on the internal port and they are kept under
//! the superadmin tenant; every tenant reads the same ones; only the superadmin deletes them. Plugin
//! resources (scripts, keys, archives) belong to a tenant and are managed by its admin: upload makes
//! an inactive version, stage and recall mark what the next sync makes live, and provisioners download
//! the bytes on the internal port. The rules are `weft_engine::plugins`'.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::handler::Handler;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use weft_engine::plugins::{self, ResourceType};
use weft_model::ResourceMeta;

use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers the external `/v2/plugins/...` routes: plugin types, resources (uploads up to
/// `resource_limit` bytes), staging and `/v2/plugins/sync`.
pub fn external_routes(api: Api, resource_limit: usize) -> Api {
    let api = type_routes(api);
    let api = resource_routes(api, resource_limit);
    release_routes(api)
}

/// Plugin types: list, get, delete.
fn type_routes(api: Api) -> Api {
    let t = "plugins";
    api.route(
        MethodFilter::GET,
        "/v2/plugins/{ptype}",
        list_types,
        op(t, "List provider types or automator types").ok(
            200,
            "plugin types",
            Body::Array("PluginType"),
        ),
    )
    .route(
        MethodFilter::GET,
        "/v2/plugins/{ptype}/{name}",
        get_type,
        op(t, "Get a plugin type")
            .ok(200, "the plugin type", Body::Json("PluginType"))
            .status(404, "not found"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/plugins/{ptype}/{name}",
        delete_type,
        op(t, "Delete every version of a plugin type (superadmin)")
            .status(200, "deleted")
            .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/plugins/{ptype}/{name}/{rtype}",
        delete_type_version,
        op(
            t,
            "Delete one version of a plugin type (superadmin); the last segment is the version",
        )
        .status(200, "deleted")
        .status(400, "the version is not a positive number")
        .status(403, "not the superadmin (empty body)"),
    )
}

/// A plugin's resources: list, upload a version, delete.
fn resource_routes(api: Api, resource_limit: usize) -> Api {
    let t = "plugins";
    api.route(
        MethodFilter::GET,
        "/v2/plugins/{ptype}/{name}/{rtype}",
        list_resources,
        op(
            t,
            "List the resources of one resource type, by name (admin)",
        )
        .query("status", "active, inactive, staged or recalled")
        .ok(
            200,
            "resource name -> versions",
            Body::MapOf("ResourceMeta"),
        )
        .status(400, "invalid status filter.")
        .status(403, "not the tenant admin")
        .status(404, "unknown plugin or resource type"),
    )
    .route(
        MethodFilter::POST,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}",
        upload.layer(DefaultBodyLimit::max(resource_limit)),
        op(
            t,
            "Upload a new version of a resource (raw bytes; starts inactive) (admin)",
        )
        .body(Body::Bytes)
        .ok(200, "the new version", Body::Json("ResourceMeta"))
        .status(403, "not the tenant admin")
        .status(404, "unknown plugin or resource type")
        .status(413, "body over the resource size limit"),
    )
    .route(
        MethodFilter::GET,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}",
        list_versions,
        op(t, "List every version of one resource (admin)")
            .query("status", "active, inactive, staged or recalled")
            .ok(200, "versions", Body::Array("ResourceMeta"))
            .status(403, "not the tenant admin"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}",
        delete_resource,
        op(
            t,
            "Delete every version of a resource (all must be inactive) (admin)",
        )
        .status(200, "deleted")
        .status(403, "not the tenant admin")
        .status(409, "Resource not in a deletable state."),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}",
        delete_resource_version,
        op(t, "Delete one inactive version of a resource (admin)")
            .status(200, "deleted")
            .status(400, "bad version")
            .status(403, "not the tenant admin")
            .status(409, "Resource not in a deletable state."),
    )
}

/// Staging and recalling resource versions, and the sync that makes them live.
fn release_routes(api: Api) -> Api {
    let t = "plugins";
    api.route(
        MethodFilter::POST,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}/stage",
        stage,
        op(t, "Stage a version for the next sync (admin)")
            .status(200, "staged")
            .status(400, "bad version")
            .status(403, "not the tenant admin")
            .status(404, "version not found"),
    )
    .route(
        MethodFilter::POST,
        "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}/recall",
        recall,
        op(t, "Recall a version at the next sync (admin)")
            .status(200, "recalled")
            .status(400, "bad version")
            .status(403, "not the tenant admin")
            .status(404, "version not found"),
    )
    .route(
        MethodFilter::POST,
        "/v2/plugins/sync",
        sync,
        op(t, "Make staged versions live and recalled ones inactive, and push them to provisioners (admin)")
            .status(200, "synced")
            .status(403, "not the tenant admin"),
    )
}

/// Registers the internal port's plugin routes, through which provisioners fetch resource bytes
/// (`/v2/tenants/{tenant_id}/...`).
pub fn internal_routes(api: Api) -> Api {
    api.route(
        MethodFilter::PUT,
        "/v2/plugins/{ptype}/{name}",
        register_type,
        op("plugins", "Register a plugin type (a provisioner at start)")
            .body(Body::Json("PluginType"))
            .status(200, "written as a new version")
            .status(400, "invalid body or name mismatch"),
    )
    .route(
        MethodFilter::GET,
        "/v2/tenants/{tenant_id}/{ptype}/{name}/{rtype}/{rname}/versions/{version}",
        download,
        op(
            "plugins",
            "Download the bytes of a resource version (provisioner workers)",
        )
        .ok(200, "the bytes", Body::Bytes)
        .status(400, "bad version")
        .status(404, "Resource not found."),
    )
}

/// A path's `{ptype}/{name}/{rtype}`.
type TypePath = (String, String, String);
/// A path's `{ptype}/{name}/{rtype}/{rname}`.
type NamePath = (String, String, String, String);
/// A path's `{ptype}/{name}/{rtype}/{rname}/versions/{version}`.
type VersionPath = (String, String, String, String, String);

fn at(ptype: String, plugin: String, rtype: String) -> ResourceType {
    ResourceType {
        ptype,
        plugin,
        rtype,
    }
}

async fn list_types(
    State(st): State<AppState>,
    _id: Identity,
    Path(ptype): Path<String>,
) -> ApiResult<Json<Vec<Value>>> {
    Ok(Json(plugins::list_types(&st.engine, &ptype).await?))
}

async fn get_type(
    State(st): State<AppState>,
    _id: Identity,
    Path((ptype, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(plugins::get_type(&st.engine, &ptype, &name).await?))
}

async fn delete_type(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, name)): Path<(String, String)>,
) -> ApiResult<()> {
    Ok(plugins::delete_type(&st.engine, &id.caller(), &ptype, &name, None).await?)
}

async fn delete_type_version(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, name, version)): Path<TypePath>,
) -> ApiResult<()> {
    let version = Some(version.as_str());
    Ok(plugins::delete_type(&st.engine, &id.caller(), &ptype, &name, version).await?)
}

async fn register_type(
    State(st): State<AppState>,
    Path((ptype, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<()> {
    Ok(plugins::register_type(&st.engine, &ptype, &name, &body).await?)
}

#[derive(Debug, Deserialize)]
struct StatusFilter {
    status: Option<String>,
}

async fn list_resources(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype)): Path<TypePath>,
    Query(q): Query<StatusFilter>,
) -> ApiResult<Json<BTreeMap<String, Vec<ResourceMeta>>>> {
    let at = at(ptype, plugin, rtype);
    let status = q.status.as_deref();
    Ok(Json(
        plugins::list_resources(&st.engine, &id.caller(), &at, status).await?,
    ))
}

async fn list_versions(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<NamePath>,
    Query(q): Query<StatusFilter>,
) -> ApiResult<Json<Vec<ResourceMeta>>> {
    let at = at(ptype, plugin, rtype);
    let status = q.status.as_deref();
    Ok(Json(
        plugins::list_versions(&st.engine, &id.caller(), &at, &rname, status).await?,
    ))
}

async fn upload(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<NamePath>,
    body: Bytes,
) -> ApiResult<Json<ResourceMeta>> {
    let (at, who) = (at(ptype, plugin, rtype), id.caller());
    let resources = st.resources.as_ref();
    Ok(Json(
        plugins::upload(&st.engine, resources, &who, at, &rname, body).await?,
    ))
}

async fn stage(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname, version)): Path<VersionPath>,
) -> ApiResult<()> {
    let at = at(ptype, plugin, rtype);
    let version = (rname.as_str(), version.as_str());
    Ok(plugins::transition(&st.engine, &id.caller(), at, version, true).await?)
}

async fn recall(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname, version)): Path<VersionPath>,
) -> ApiResult<()> {
    let at = at(ptype, plugin, rtype);
    let version = (rname.as_str(), version.as_str());
    Ok(plugins::transition(&st.engine, &id.caller(), at, version, false).await?)
}

async fn delete_resource(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<NamePath>,
) -> ApiResult<()> {
    let (at, who) = (at(ptype, plugin, rtype), id.caller());
    let resources = st.resources.as_ref();
    Ok(plugins::delete_resource(&st.engine, resources, &who, at, &rname, None).await?)
}

async fn delete_resource_version(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname, version)): Path<VersionPath>,
) -> ApiResult<()> {
    let (at, who) = (at(ptype, plugin, rtype), id.caller());
    let (resources, version) = (st.resources.as_ref(), Some(version.as_str()));
    Ok(plugins::delete_resource(&st.engine, resources, &who, at, &rname, version).await?)
}

async fn sync(State(st): State<AppState>, id: Identity) -> ApiResult<()> {
    Ok(plugins::sync(&st.engine, &id.caller()).await?)
}

async fn download(
    State(st): State<AppState>,
    Path((tenant_id, ptype, plugin, rtype, rname, version)): Path<(
        String,
        String,
        String,
        String,
        String,
        String,
    )>,
) -> ApiResult<Response> {
    let name = (at(ptype, plugin, rtype), rname.as_str());
    let resources = st.resources.as_ref();
    let bytes = plugins::download(&st.engine, resources, &tenant_id, name, &version).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}
