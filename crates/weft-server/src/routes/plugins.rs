//! Plugin types (`/v2/plugins/{providertypes|automatortypes}`) and plugin resources.
//!
//! Plugin types are global: provisioners register them on the internal port and they are kept under
//! the superadmin tenant; every tenant reads the same ones; only the superadmin deletes them. Plugin
//! resources (scripts, keys, archives) belong to a tenant and are managed by its admin: upload makes
//! an inactive version, stage and recall mark what the next sync makes live, and provisioners download
//! the bytes on the internal port.

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
use weft_model::{validate_name, EntityKind, PluginType, ResourceMeta, ResourceStatus};
use weft_store::{ResourceDelete, ResourceKey, SUPERADMIN};

use super::params::{parse_body, parse_version};
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::entities::normalize;

fn plugin_kind(ptype: &str) -> ApiResult<EntityKind> {
    match ptype {
        "providertypes" => Ok(EntityKind::ProviderType),
        "automatortypes" => Ok(EntityKind::AutomatorType),
        other => Err(ApiError::NotFound(format!(
            "unknown plugin type {other}: expected providertypes or automatortypes"
        ))),
    }
}

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

async fn list_types(
    State(st): State<AppState>,
    _id: Identity,
    Path(ptype): Path<String>,
) -> ApiResult<Json<Vec<Value>>> {
    let kind = plugin_kind(&ptype)?;
    Ok(Json(st.store.list_entities(SUPERADMIN, kind).await?))
}

async fn get_type(
    State(st): State<AppState>,
    _id: Identity,
    Path((ptype, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let kind = plugin_kind(&ptype)?;
    let doc = st
        .store
        .get_entity(SUPERADMIN, kind, &name, None)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("{} {name} not found.", kind.label())))?;
    Ok(Json(doc))
}

async fn delete_type(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, name)): Path<(String, String)>,
) -> ApiResult<()> {
    id.require_superadmin()?;
    let kind = plugin_kind(&ptype)?;
    Ok(st
        .store
        .delete_entity(SUPERADMIN, kind, &name, None)
        .await?)
}

async fn delete_type_version(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, name, version)): Path<(String, String, String)>,
) -> ApiResult<()> {
    id.require_superadmin()?;
    let kind = plugin_kind(&ptype)?;
    let version = parse_version(&version)?;
    Ok(st
        .store
        .delete_entity(SUPERADMIN, kind, &name, Some(version))
        .await?)
}

async fn register_type(
    State(st): State<AppState>,
    Path((ptype, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<()> {
    let kind = plugin_kind(&ptype)?;
    let value: Value = parse_body(&body, "a plugin type object")?;
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "request body must be a plugin type object".into(),
        ));
    }
    let (name, doc) = normalize(kind, value, Some(&name))?;
    st.store.put_entity(SUPERADMIN, kind, &name, &doc).await?;
    Ok(())
}

/// Checks the caller and that `{ptype}/{name}` has resource type `rtype`.
async fn resource_scope(
    st: &AppState,
    id: &Identity,
    ptype: &str,
    plugin: &str,
    rtype: &str,
) -> ApiResult<()> {
    id.require_admin()?;
    let kind = plugin_kind(ptype)?;
    let doc = st
        .store
        .get_entity(SUPERADMIN, kind, plugin, None)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("{} {plugin} not found.", kind.label())))?;
    let pt: PluginType =
        serde_json::from_value(doc).map_err(|e| ApiError::Internal(e.to_string()))?;
    if !pt.resource_types.contains_key(rtype) {
        return Err(ApiError::NotFound(format!(
            "{rtype} for {} {plugin} not found.",
            kind.label()
        )));
    }
    Ok(())
}

fn key(id: &Identity, ptype: String, plugin: String, rtype: String, name: String) -> ResourceKey {
    ResourceKey {
        tenant_id: id.tenant.id.clone(),
        ptype,
        plugin,
        rtype,
        name,
    }
}

#[derive(Debug, Deserialize)]
struct StatusFilter {
    status: Option<String>,
}

fn status_filter(q: &StatusFilter) -> ApiResult<Option<ResourceStatus>> {
    q.status
        .as_deref()
        .map(|s| {
            ResourceStatus::parse(s)
                .ok_or_else(|| ApiError::BadRequest("invalid status filter.".into()))
        })
        .transpose()
}

async fn list_resources(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype)): Path<(String, String, String)>,
    Query(q): Query<StatusFilter>,
) -> ApiResult<Json<BTreeMap<String, Vec<ResourceMeta>>>> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    let filter = status_filter(&q)?;
    let mut out: BTreeMap<String, Vec<ResourceMeta>> = BTreeMap::new();
    for row in st
        .store
        .list_resources(&id.tenant.id, &ptype, &plugin, &rtype, None)
        .await?
    {
        if filter.is_none_or(|f| f == row.meta.status) {
            out.entry(row.key.name).or_default().push(row.meta);
        }
    }
    Ok(Json(out))
}

async fn list_versions(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<(String, String, String, String)>,
    Query(q): Query<StatusFilter>,
) -> ApiResult<Json<Vec<ResourceMeta>>> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    let filter = status_filter(&q)?;
    let rows = st
        .store
        .list_resources(&id.tenant.id, &ptype, &plugin, &rtype, Some(&rname))
        .await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| r.meta)
            .filter(|m| filter.is_none_or(|f| f == m.status))
            .collect(),
    ))
}

async fn upload(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Json<ResourceMeta>> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    validate_name("resource name", &rname)?;
    let key = key(&id, ptype, plugin, rtype, rname);
    let version = st.store.create_resource_version(&key).await?;
    if let Err(e) = st.resources.put(&key, version, body).await {
        // Without its bytes the version must not exist: take the record back.
        let _ = st.store.delete_resource(&key, Some(version)).await;
        return Err(ApiError::Internal(format!("storing resource bytes: {e}")));
    }
    Ok(Json(ResourceMeta {
        name: key.name,
        version,
        status: ResourceStatus::Inactive,
    }))
}

async fn transition(
    st: AppState,
    id: Identity,
    (ptype, plugin, rtype, rname, version): (String, String, String, String, String),
    stage: bool,
) -> ApiResult<()> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    let version = parse_version(&version)?;
    let key = key(&id, ptype, plugin, rtype, rname);
    let found = if stage {
        st.store.stage_resource(&key, version).await?
    } else {
        st.store.recall_resource(&key, version).await?
    };
    if found {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "resource {} version {version} not found.",
            key.name
        )))
    }
}

async fn stage(
    State(st): State<AppState>,
    id: Identity,
    Path(p): Path<(String, String, String, String, String)>,
) -> ApiResult<()> {
    transition(st, id, p, true).await
}

async fn recall(
    State(st): State<AppState>,
    id: Identity,
    Path(p): Path<(String, String, String, String, String)>,
) -> ApiResult<()> {
    transition(st, id, p, false).await
}

async fn remove(st: &AppState, key: &ResourceKey, version: Option<u64>) -> ApiResult<()> {
    let rows = st
        .store
        .list_resources(
            &key.tenant_id,
            &key.ptype,
            &key.plugin,
            &key.rtype,
            Some(&key.name),
        )
        .await?;
    match st.store.delete_resource(key, version).await? {
        ResourceDelete::NotDeletable => Err(ApiError::Conflict(
            "Resource not in a deletable state.".into(),
        )),
        ResourceDelete::Deleted => {
            for row in rows
                .iter()
                .filter(|r| version.is_none_or(|v| v == r.meta.version))
            {
                if let Err(e) = st.resources.delete(key, row.meta.version).await {
                    tracing::warn!(resource = %key.name, version = row.meta.version, error = %e, "could not remove resource bytes");
                }
            }
            Ok(())
        }
    }
}

async fn delete_resource(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname)): Path<(String, String, String, String)>,
) -> ApiResult<()> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    remove(&st, &key(&id, ptype, plugin, rtype, rname), None).await
}

async fn delete_resource_version(
    State(st): State<AppState>,
    id: Identity,
    Path((ptype, plugin, rtype, rname, version)): Path<(String, String, String, String, String)>,
) -> ApiResult<()> {
    resource_scope(&st, &id, &ptype, &plugin, &rtype).await?;
    let version = parse_version(&version)?;
    remove(&st, &key(&id, ptype, plugin, rtype, rname), Some(version)).await
}

async fn sync(State(st): State<AppState>, id: Identity) -> ApiResult<()> {
    id.require_admin()?;
    st.store.sync_resources(&id.tenant.id).await?;
    crate::outbound::spawn_resources(&st.courier, &id.tenant.id);
    Ok(())
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
    let version = parse_version(&version)?;
    plugin_kind(&ptype)?;
    let key = ResourceKey {
        tenant_id,
        ptype,
        plugin,
        rtype,
        name: rname,
    };
    let known = st
        .store
        .list_resources(
            &key.tenant_id,
            &key.ptype,
            &key.plugin,
            &key.rtype,
            Some(&key.name),
        )
        .await?
        .iter()
        .any(|r| r.meta.version == version);
    let bytes = match known {
        true => st
            .resources
            .get(&key, version)
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?,
        false => None,
    };
    let bytes = bytes.ok_or_else(|| ApiError::NotFound("Resource not found.".into()))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// Copies every resource version of `from` into `to` (a bootstrapped tenant), keeping what was
/// live or staged live after a sync.
pub async fn copy_resources(st: &AppState, from: &str, to: &str) -> ApiResult<()> {
    for kind in [EntityKind::ProviderType, EntityKind::AutomatorType] {
        for doc in st.store.list_entities(SUPERADMIN, kind).await? {
            let Ok(pt) = serde_json::from_value::<PluginType>(doc) else {
                continue;
            };
            for rtype in pt.resource_types.keys() {
                for row in st
                    .store
                    .list_resources(from, kind.as_str(), &pt.name, rtype, None)
                    .await?
                {
                    let Some(bytes) = st
                        .resources
                        .get(&row.key, row.meta.version)
                        .await
                        .map_err(|e| ApiError::Internal(e.to_string()))?
                    else {
                        continue;
                    };
                    let key = ResourceKey {
                        tenant_id: to.to_string(),
                        ..row.key.clone()
                    };
                    let v = st.store.create_resource_version(&key).await?;
                    st.resources
                        .put(&key, v, bytes)
                        .await
                        .map_err(|e| ApiError::Internal(e.to_string()))?;
                    if matches!(
                        row.meta.status,
                        ResourceStatus::Active | ResourceStatus::Staged
                    ) {
                        st.store.stage_resource(&key, v).await?;
                    }
                }
            }
        }
    }
    st.store.sync_resources(to).await?;
    Ok(())
}
