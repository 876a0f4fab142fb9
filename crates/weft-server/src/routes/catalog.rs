//! `/v2/export`, `/v2/import` and `/v2/resolve`: the whole catalog of a tenant at once, and template
//! inheritance.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde_json::{Map, Value};
use weft_model::{lenient, CatalogWriteAnswer, ClusterTemplate, EntityKind, SealedExportRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::entities::{catalog_entities, mask_provider, provider_to_store, sensitive_fields};

pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/export",
        export,
        op(
            "catalog",
            "Export the latest version of every admin entity of the tenant",
        )
        .ok(200, "the six kinds", Body::Json("CatalogExport")),
    )
    .route(
        MethodFilter::POST,
        "/v2/export",
        export_sealed,
        op(
            "catalog",
            "Export the catalog with its secrets, each sealed under a passphrase (AES-256-GCM, \
             key from Argon2id); `POST /v2/import` with the passphrase opens them",
        )
        .body(Body::Json("SealedExportRequest"))
        .ok(
            200,
            "the six kinds; sensitive provider fields read `passphrase:v1:...`",
            Body::Json("CatalogExport"),
        )
        .status(
            400,
            "the passphrase is missing or shorter than 12 characters",
        )
        .status(403, "caller is not the tenant admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/import",
        import,
        op(
            "catalog",
            "Replace the tenant's whole catalog (kinds left out end up empty)",
        )
        .body(Body::Json("CatalogExport"))
        .ok(
            200,
            "imported; `warnings` names what each entry lacks or may not mean, its field \
             prefixed with the entry's kind and name",
            Body::Json("CatalogWriteAnswer"),
        )
        .status(
            400,
            "Json syntax error, or an invalid entity (the message names it)",
        )
        .status(403, "caller is not the tenant admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/resolve",
        resolve,
        op(
            "catalog",
            "Resolve a template's extends and includes into one template",
        )
        .body(Body::Json("ClusterTemplate"))
        .ok(200, "the merged template", Body::Json("ClusterTemplate"))
        .status(
            400,
            "invalid template; without extends or includes, no default services or provider",
        )
        .status(404, "a parent or partial does not exist")
        .status(
            409,
            "the parent or partials, as stored, leave the result incomplete or invalid, or an \
             immutable partial's keys are overridden",
        ),
    )
}

async fn export(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Value>> {
    catalog_export(&st, &id, None).await.map(Json)
}

async fn export_sealed(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    id.require_admin()?;
    // Read strictly: a passphrase is text, never a number or a boolean turned into one.
    let req: SealedExportRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("an object with a passphrase: {e}")))?;
    let sealer = weft_engine::seal::ExportSealer::new(&req.passphrase)?;
    catalog_export(&st, &id, Some(&sealer)).await.map(Json)
}

/// The tenant's catalog: sensitive provider fields masked, or (`sealer`) sealed under an
/// export's passphrase.
async fn catalog_export(
    st: &AppState,
    id: &Identity,
    sealer: Option<&weft_engine::seal::ExportSealer>,
) -> ApiResult<Value> {
    let mut out = Map::new();
    for kind in EntityKind::ADMIN {
        let mut items = st.store.list_entities(&id.tenant.id, kind).await?;
        if kind == EntityKind::Provider {
            for item in &mut items {
                match sealer {
                    None => mask_provider(&st.engine, item).await?,
                    Some(s) => seal_for_export(st, &id.tenant.id, item, s).await?,
                }
            }
        }
        out.insert(kind.as_str().into(), Value::Array(items));
    }
    Ok(Value::Object(out))
}

/// A provider's sensitive fields opened from the store and sealed under the export's passphrase.
async fn seal_for_export(
    st: &AppState,
    tenant: &str,
    provider: &mut Value,
    sealer: &weft_engine::seal::ExportSealer,
) -> ApiResult<()> {
    let fields = sensitive_fields(&st.engine, provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in fields {
            if let Some(v) = p.get_mut(&f) {
                st.engine.sealer.open_all(tenant, v).await?;
                *v = sealer.seal(v);
            }
        }
    }
    Ok(())
}

/// Opens the values of `doc` (a provider) that an export sealed under a passphrase.
fn open_exported(
    opener: &mut weft_engine::seal::ExportOpener,
    name: &str,
    doc: &mut Value,
) -> ApiResult<()> {
    if let Some(p) = doc.get_mut("provisioner").and_then(Value::as_object_mut) {
        for (k, v) in p.iter_mut() {
            let field = format!("providers[{name}].provisioner.{k}");
            if let Some(plain) = opener.open(v, &field)? {
                *v = plain;
            }
        }
    }
    Ok(())
}

async fn import(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<CatalogWriteAnswer>> {
    id.require_admin()?;
    let mut v = lenient::parse(&body)
        .map_err(|e| ApiError::BadRequest(format!("Json syntax error: {e}")))?;
    let passphrase = match v.as_object_mut().and_then(|o| o.remove("passphrase")) {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => Some(p),
        // The lenient reader's habit: numbers and booleans as their text.
        Some(v @ (Value::Bool(_) | Value::Number(_))) => Some(v.to_string()),
        Some(_) => return Err(ApiError::BadRequest("passphrase: expected a string".into())),
    };
    let mut opener = weft_engine::seal::ExportOpener::new(passphrase);
    let mut entities = catalog_entities(v)?;
    for (kind, name, doc) in entities.iter_mut() {
        if *kind == EntityKind::Provider {
            open_exported(&mut opener, name, doc)?;
            provider_to_store(&st.engine, &id.tenant.id, doc).await?;
        }
        weft_engine::gaps::refuse_unrunnable(&st.engine, *kind, doc).await?;
    }
    st.store.replace_entities(&id.tenant.id, &entities).await?;
    st.engine.providers.forget(&id.tenant.id);
    let warnings = weft_engine::gaps::import_warnings(&st.engine, &id.tenant.id, &entities).await?;
    Ok(Json(CatalogWriteAnswer { warnings }))
}

async fn resolve(
    State(st): State<AppState>,
    id: Identity,
    body: Bytes,
) -> ApiResult<Json<ClusterTemplate>> {
    let own: ClusterTemplate = parse_body(&body, "a cluster template")?;
    let (extends, includes) = (own.extends.clone(), own.includes.clone());
    let mut merged =
        weft_engine::catalog::resolve_in_tenant(&st.engine, &id.tenant.id, own).await?;
    // As Coopr answers: the merged template still names what it extends and includes.
    merged.extends = extends;
    merged.includes = includes;
    Ok(Json(merged))
}
