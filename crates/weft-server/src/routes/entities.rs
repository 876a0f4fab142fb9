//! The six admin-defined entity kinds (`/v2/providers`, `/v2/hardwaretypes`, `/v2/imagetypes`,
//! `/v2/services`, `/v2/clustertemplates`, `/v2/partialtemplates`): list, get, get a version, create,
//! write a new version, delete all versions or one. Reads are open to every user of the tenant; writes
//! need the tenant admin. Sensitive provider fields are masked in every answer.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::Value;
use weft_model::{
    lenient, CatalogWriteAnswer, ClusterTemplate, EntityKind, MachineType, PartialTemplate,
    PluginType, Provider, Service, Validate,
};
use weft_store::{Store, SUPERADMIN};

use super::params::{parse_body, parse_version};
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// What a sensitive field's value reads as in any answer.
pub use weft_engine::view::MASK;

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

/// `/v2/{kind}/{name}/{version}`: get or delete one version.
fn version_routes(api: Api, kind: EntityKind) -> Api {
    let version = format!("/v2/{}/{{name}}/{{version}}", kind.as_str());
    let (tag, label, s) = (kind.as_str(), kind.label(), schema(kind));
    api.route(
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
    let mut items = st.store.list_entities(&id.tenant.id, kind).await?;
    let mut lacking =
        weft_engine::gaps::incomplete(&st.engine, &id.tenant.id, kind, &items).await?;
    for item in &mut items {
        if kind == EntityKind::Provider {
            mask_provider(st.store.as_ref(), item).await?;
        }
        let lacks = item["name"].as_str().and_then(|n| lacking.remove(n));
        if let (Some(lacks), Some(obj)) = (lacks, item.as_object_mut()) {
            let lacks =
                serde_json::to_value(lacks).map_err(|e| ApiError::Internal(e.to_string()))?;
            obj.insert("incomplete".into(), lacks);
        }
    }
    Ok(Json(items))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    version: Option<String>,
) -> ApiResult<Json<Value>> {
    let version = version.as_deref().map(parse_version).transpose()?;
    let mut item = st
        .store
        .get_entity(&id.tenant.id, kind, &name, version)
        .await?
        .ok_or_else(|| not_found(kind, &name))?;
    if kind == EntityKind::Provider {
        mask_provider(st.store.as_ref(), &mut item).await?;
    }
    Ok(Json(item))
}

/// Coopr's message for a missing entity (with its double space).
pub fn not_found(kind: EntityKind, name: &str) -> ApiError {
    ApiError::NotFound(format!("{} {}  not found.", kind.label(), name))
}

async fn create(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    id.require_admin()?;
    let value = lenient_value(&body, kind)?;
    let (name, mut doc) = normalize(kind, value, None)?;
    weft_engine::gaps::refuse_unrunnable(&st.engine, kind, &doc).await?;
    if kind == EntityKind::Provider {
        provider_to_store(&st.engine, &id.tenant.id, &mut doc).await?;
    }
    match st
        .store
        .create_entity(&id.tenant.id, kind, &name, &doc)
        .await
    {
        Err(weft_store::StoreError::Conflict(_)) => Err(ApiError::Conflict(format!(
            "{} {} already exists",
            kind.label(),
            name
        ))),
        other => {
            other?;
            written(&st, &id, kind, &doc).await
        }
    }
}

/// The answer to a write: what the catalog lacks for the entity, or what it may not mean.
async fn written(
    st: &AppState,
    id: &Identity,
    kind: EntityKind,
    doc: &Value,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    let warnings = weft_engine::gaps::write_warnings(&st.engine, &id.tenant.id, kind, doc).await?;
    Ok(Json(CatalogWriteAnswer { warnings }))
}

async fn put(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    id.require_admin()?;
    let value = lenient_value(&body, kind)?;
    let (name, mut doc) = normalize(kind, value, Some(&name))?;
    weft_engine::gaps::refuse_unrunnable(&st.engine, kind, &doc).await?;
    if kind == EntityKind::Provider {
        provider_to_store(&st.engine, &id.tenant.id, &mut doc).await?;
    }
    st.store
        .put_entity(&id.tenant.id, kind, &name, &doc)
        .await?;
    // Credentials are read when used: the next task of every cluster gets the new fields.
    st.engine.providers.forget(&id.tenant.id);
    written(&st, &id, kind, &doc).await
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    kind: EntityKind,
    name: String,
    version: Option<String>,
) -> ApiResult<()> {
    id.require_admin()?;
    let version = version.as_deref().map(parse_version).transpose()?;
    st.store
        .delete_entity(&id.tenant.id, kind, &name, version)
        .await?;
    st.engine.providers.forget(&id.tenant.id);
    Ok(())
}

fn lenient_value(body: &Bytes, kind: EntityKind) -> ApiResult<Value> {
    let v: Value = parse_body(body, &format!("a {} object", kind.label()))?;
    if !v.is_object() {
        return Err(ApiError::BadRequest(format!(
            "request body must be a {} object",
            kind.label()
        )));
    }
    Ok(v)
}

/// Reads an entity of `kind` leniently, validates it, and returns its name and canonical JSON (the
/// form that is stored and answered). With `path_name`, the body's name must match it (a body without
/// a name takes the path's).
pub fn normalize(
    kind: EntityKind,
    mut value: Value,
    path_name: Option<&str>,
) -> ApiResult<(String, Value)> {
    if let (Some(p), Some(obj)) = (path_name, value.as_object_mut()) {
        match obj.get("name") {
            None | Some(Value::Null) => {
                obj.insert("name".into(), Value::String(p.to_string()));
            }
            Some(Value::String(n)) if n == p => {}
            Some(other) => {
                let shown = other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string());
                return Err(ApiError::BadRequest(format!(
                    "name in the body ({shown}) does not match the name in the path ({p})"
                )));
            }
        }
    }
    fn typed<T: serde::de::DeserializeOwned + serde::Serialize + Validate>(
        v: Value,
        name_of: fn(&T) -> &str,
    ) -> ApiResult<(String, Value)> {
        let t: T = lenient::from_value(v)?;
        t.validate()?;
        let name = name_of(&t).to_string();
        let doc = serde_json::to_value(&t).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok((name, doc))
    }
    match kind {
        EntityKind::Provider => typed::<Provider>(value, |t| &t.name),
        EntityKind::HardwareType | EntityKind::ImageType => {
            typed::<MachineType>(value, |t| &t.name)
        }
        EntityKind::Service => typed::<Service>(value, |t| &t.name),
        EntityKind::ClusterTemplate => typed::<ClusterTemplate>(value, |t| &t.name),
        EntityKind::PartialTemplate => typed::<PartialTemplate>(value, |t| &t.name),
        EntityKind::ProviderType | EntityKind::AutomatorType => {
            typed::<PluginType>(value, |t| &t.name)
        }
    }
}

/// The fields that the provider type of `provider` marks sensitive.
pub async fn sensitive_fields(store: &dyn Store, provider: &Value) -> ApiResult<Vec<String>> {
    let Some(ptype) = provider.get("providertype").and_then(Value::as_str) else {
        return Ok(Vec::new());
    };
    let Some(doc) = store
        .get_entity(SUPERADMIN, EntityKind::ProviderType, ptype, None)
        .await?
    else {
        return Ok(Vec::new());
    };
    let pt: PluginType =
        serde_json::from_value(doc).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(pt
        .sensitive_fields()
        .into_iter()
        .map(str::to_string)
        .collect())
}

/// Replaces the value of every sensitive provider field with [`MASK`].
pub async fn mask_provider(store: &dyn Store, provider: &mut Value) -> ApiResult<()> {
    let fields = sensitive_fields(store, provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in fields {
            if let Some(v) = p.get_mut(&f) {
                *v = Value::String(MASK.into());
            }
        }
    }
    Ok(())
}

/// A provider as it is stored: its sensitive fields sealed (a field written back masked keeps the
/// stored secret).
pub async fn provider_to_store(
    engine: &weft_engine::Engine,
    tenant_id: &str,
    provider: &mut Value,
) -> ApiResult<()> {
    unmask_provider(engine.store.as_ref(), tenant_id, provider).await?;
    let fields = sensitive_fields(engine.store.as_ref(), provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        engine
            .sealer
            .seal_fields(tenant_id, p, fields.iter().map(String::as_str))
            .await?;
    }
    Ok(())
}

/// A provider written back with masked values keeps the stored secrets for those fields.
async fn unmask_provider(
    store: &dyn Store,
    tenant_id: &str,
    provider: &mut Value,
) -> ApiResult<()> {
    let Some(name) = provider
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Ok(());
    };
    let masked: Vec<String> = provider
        .get("provisioner")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(_, v)| v.as_str() == Some(MASK))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    if masked.is_empty() {
        return Ok(());
    }
    let stored = store
        .get_entity(tenant_id, EntityKind::Provider, &name, None)
        .await?;
    let stored_fields = stored
        .as_ref()
        .and_then(|s| s.get("provisioner"))
        .and_then(Value::as_object);
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in masked {
            match stored_fields.and_then(|s| s.get(&f)) {
                Some(old) => {
                    p.insert(f, old.clone());
                }
                None => {
                    p.remove(&f);
                }
            }
        }
    }
    Ok(())
}
