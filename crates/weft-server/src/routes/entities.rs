//! The six admin-defined entity kinds (`/v2/providers`, `/v2/hardwaretypes`, `/v2/imagetypes`,
//! `/v2/services`, `/v2/clustertemplates`, `/v2/partialtemplates`): list, get, get a version, create,
//! write a new version, delete all versions or one. Reads are open to every user of the tenant; writes
//! need the tenant admin. Sensitive provider fields are masked in every answer. The rules are
//! `weft_engine::entities`'.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::Value;
use weft_engine::entities;
use weft_model::{CatalogWriteAnswer, EntityKind};

use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The component schema name of a kind.
pub fn schema(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Provider => "Provider",
        EntityKind::HardwareType | EntityKind::ImageType => "MachineType",
        EntityKind::Service => "Service",
        EntityKind::ClusterTemplate => "ClusterTemplate",
        EntityKind::PartialTemplate => "PartialTemplate",
        EntityKind::ProviderType | EntityKind::AutomatorType => "PluginType",
    }
}

/// What a write answers.
const WRITTEN: &str = "written; `warnings` names each reference to an entity the catalog lacks \
(yet), each default outside the template's compatibility lists and each link that lists several \
nodes, field by field (empty when all is well)";

/// What a list answers.
const LISTED: &str = "the latest versions; an entry that names what the catalog lacks (or a \
plugin type no provisioner offers) carries `incomplete`: a list of {field, message}";

/// Registers `/v2/<kind>`, `/v2/<kind>/{name}` and `/v2/<kind>/{name}/{version}` for each
/// admin-defined entity kind.
pub fn routes(mut api: Api) -> Api {
    for kind in EntityKind::ADMIN {
        api = collection_routes(api, kind);
        api = latest_routes(api, kind);
        api = version_routes(api, kind);
    }
    api
}

/// `/v2/{kind}`: list the latest versions, create one.
fn collection_routes(api: Api, kind: EntityKind) -> Api {
    let base = format!("/v2/{}", kind.as_str());
    let (tag, label, s) = (kind.as_str(), kind.label(), schema(kind));
    api.route(
        MethodFilter::GET,
        &base,
        move |st: State<AppState>, id: Identity| list(st, id, kind),
        op(tag, format!("List the latest version of every {label}"))
            .ok(200, LISTED, Body::Array(s))
            .status(401, "identity header missing")
            .status(404, "tenant does not exist"),
    )
    .route(
        MethodFilter::POST,
        &base,
        move |st: State<AppState>, id: Identity, body: Bytes| create(st, id, kind, body),
        op(tag, format!("Create a {label} (version 1)"))
            .body(Body::Json(s))
            .ok(200, WRITTEN, Body::Json("CatalogWriteAnswer"))
            .status(400, "invalid body; the message names the field")
            .status(403, "caller is not the tenant admin")
            .status(409, "the name already exists")
            .status(413, "body over the size limit"),
    )
}

/// `/v2/{kind}/{name}`: get, write a new version of, or delete an entity's latest version.
fn latest_routes(api: Api, kind: EntityKind) -> Api {
    let one = format!("/v2/{}/{{name}}", kind.as_str());
    let (tag, label, s) = (kind.as_str(), kind.label(), schema(kind));
    api.route(
        MethodFilter::GET,
        &one,
        move |st: State<AppState>, id: Identity, Path(name): Path<String>| {
            get(st, id, kind, name, None)
        },
        op(tag, format!("Get the latest version of a {label}"))
            .ok(200, "the entity", Body::Json(s))
            .status(404, "not found"),
    )
    .route(
        MethodFilter::PUT,
        &one,
        move |st: State<AppState>, id: Identity, Path(name): Path<String>, body: Bytes| {
            put(st, id, kind, name, body)
        },
        op(
            tag,
            format!("Write a new version of a {label} (creates it if absent)"),
        )
        .body(Body::Json(s))
        .ok(200, WRITTEN, Body::Json("CatalogWriteAnswer"))
        .status(
            400,
            "invalid body, or the body's name differs from the path",
        )
        .status(403, "caller is not the tenant admin"),
    )
    .route(
        MethodFilter::DELETE,
        &one,
        move |st: State<AppState>, id: Identity, Path(name): Path<String>| {
            delete(st, id, kind, name, None)
        },
        op(
            tag,
            format!("Delete every version of a {label} (200 also if absent)"),
        )
        .status(200, "deleted")
        .status(403, "caller is not the tenant admin"),
    )
}

/// `/v2/{kind}/{name}/versions` (weft extension: every version, oldest first), and
/// `/v2/{kind}/{name}/{version}`: get or delete one version.
fn version_routes(api: Api, kind: EntityKind) -> Api {
    let version = format!("/v2/{}/{{name}}/{{version}}", kind.as_str());
    let all = format!("/v2/{}/{{name}}/versions", kind.as_str());
    let (tag, label, s) = (kind.as_str(), kind.label(), schema(kind));
    api.route(
        MethodFilter::GET,
        &all,
        move |st: State<AppState>, id: Identity, Path(name): Path<String>| {
            versions(st, id, kind, name)
        },
        op(
            tag,
            format!("Every stored version of a {label}, oldest first (weft extension)"),
        )
        .ok(200, "the versions", Body::Array(s))
        .status(404, "not found"),
    )
    .route(
        MethodFilter::GET,
        &version,
        move |st: State<AppState>, id: Identity, Path((name, v)): Path<(String, String)>| {
            get(st, id, kind, name, Some(v))
        },
        op(tag, format!("Get one version of a {label}"))
            .ok(200, "the entity", Body::Json(s))
            .status(400, "the version is not a positive number")
            .status(404, "not found"),
    )
    .route(
        MethodFilter::DELETE,
        &version,
        move |st: State<AppState>, id: Identity, Path((name, v)): Path<(String, String)>| {
            delete(st, id, kind, name, Some(v))
        },
        op(tag, format!("Delete one version of a {label}"))
            .status(200, "deleted")
            .status(400, "the version is not a positive number")
            .status(403, "caller is not the tenant admin"),
    )
}

async fn list(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
) -> ApiResult<Json<Vec<Value>>> {
    Ok(Json(entities::list(&st.engine, &id.caller(), kind).await?))
}

async fn versions(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
) -> ApiResult<Json<Vec<Value>>> {
    Ok(Json(
        entities::versions(&st.engine, &id.caller(), kind, &name).await?,
    ))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    version: Option<String>,
) -> ApiResult<Json<Value>> {
    let version = version.as_deref();
    Ok(Json(
        entities::get(&st.engine, &id.caller(), kind, &name, version).await?,
    ))
}

/// Coopr's message for a missing entity (with its double space).
pub fn not_found(kind: EntityKind, name: &str) -> ApiError {
    entities::not_found(kind, name).into()
}

async fn create(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    Ok(Json(
        entities::create(&st.engine, &id.caller(), kind, &body).await?,
    ))
}

async fn put(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    Ok(Json(
        entities::put(&st.engine, &id.caller(), kind, &name, &body).await?,
    ))
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    version: Option<String>,
) -> ApiResult<()> {
    let version = version.as_deref();
    Ok(entities::delete(&st.engine, &id.caller(), kind, &name, version).await?)
}
