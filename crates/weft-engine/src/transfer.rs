//! A tenant's whole catalog at once: exported with sensitive provider fields masked, or (for its
//! admin) sealed under a passphrase; imported in place of the catalog the tenant had, secrets
//! that an export sealed opened with the passphrase and sealed again for the store.

use serde_json::{Map, Value};
use weft_model::{lenient, CatalogWriteAnswer, EntityKind, SealedExportRequest};

use crate::entities::{catalog_entities, mask_provider, provider_to_store, sensitive_fields};
use crate::error::{EngineError, EngineResult};
use crate::seal::{ExportOpener, ExportSealer};
use crate::{gaps, Caller, Engine};

/// The latest version of every admin entity of the tenant, sensitive provider fields masked.
pub async fn export(st: &Engine, who: &Caller) -> EngineResult<Value> {
    catalog_export(st, &who.tenant.id, None).await
}

/// The catalog with its secrets, each sealed under the passphrase of `body` (admin; the body is
/// read strictly: a passphrase is text, never a number or a boolean turned into one).
pub async fn export_sealed(st: &Engine, who: &Caller, body: &[u8]) -> EngineResult<Value> {
    who.require_admin()?;
    let req: SealedExportRequest = serde_json::from_slice(body)
        .map_err(|e| EngineError::Invalid(format!("an object with a passphrase: {e}")))?;
    let sealer = ExportSealer::new(&req.passphrase)?;
    catalog_export(st, &who.tenant.id, Some(&sealer)).await
}

/// The tenant's catalog: sensitive provider fields masked, or (`sealer`) sealed under an
/// export's passphrase.
async fn catalog_export(
    st: &Engine,
    tenant: &str,
    sealer: Option<&ExportSealer>,
) -> EngineResult<Value> {
    let mut out = Map::new();
    for kind in EntityKind::ADMIN {
        let mut items = st.store.list_entities(tenant, kind).await?;
        if kind == EntityKind::Provider {
            for item in &mut items {
                match sealer {
                    None => mask_provider(st, item).await?,
                    Some(s) => seal_for_export(st, tenant, item, s).await?,
                }
            }
        }
        out.insert(kind.as_str().into(), Value::Array(items));
    }
    Ok(Value::Object(out))
}

/// A provider's sensitive fields opened from the store and sealed under the export's passphrase.
async fn seal_for_export(
    st: &Engine,
    tenant: &str,
    provider: &mut Value,
    sealer: &ExportSealer,
) -> EngineResult<()> {
    let fields = sensitive_fields(st, provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in fields {
            if let Some(v) = p.get_mut(&f) {
                st.sealer.open_all(tenant, v).await?;
                *v = sealer.seal(v);
            }
        }
    }
    Ok(())
}

/// Replaces the tenant's whole catalog with the one in `body` (admin; kinds left out end up
/// empty). Answers what each entry lacks or may not mean.
pub async fn import(st: &Engine, who: &Caller, body: &[u8]) -> EngineResult<CatalogWriteAnswer> {
    who.require_admin()?;
    let tenant = &who.tenant.id;
    let mut v = lenient::parse(body)
        .map_err(|e| EngineError::Invalid(format!("Json syntax error: {e}")))?;
    let mut opener = ExportOpener::new(passphrase(&mut v)?);
    let mut entities = catalog_entities(v)?;
    for (kind, name, doc) in entities.iter_mut() {
        if *kind == EntityKind::Provider {
            open_exported(&mut opener, name, doc)?;
            provider_to_store(st, tenant, doc).await?;
        }
        gaps::refuse_unrunnable(st, *kind, doc).await?;
    }
    st.store.replace_entities(tenant, &entities).await?;
    st.providers.forget(tenant);
    let warnings = gaps::import_warnings(st, tenant, &entities).await?;
    Ok(CatalogWriteAnswer { warnings })
}

/// The passphrase an import carries beside the six lists, taken out of the document.
fn passphrase(v: &mut Value) -> EngineResult<Option<String>> {
    match v.as_object_mut().and_then(|o| o.remove("passphrase")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(p)) => Ok(Some(p)),
        // The lenient reader's habit: numbers and booleans as their text.
        Some(v @ (Value::Bool(_) | Value::Number(_))) => Ok(Some(v.to_string())),
        Some(_) => Err(EngineError::Invalid("passphrase: expected a string".into())),
    }
}

/// Opens the values of `doc` (a provider) that an export sealed under a passphrase.
fn open_exported(opener: &mut ExportOpener, name: &str, doc: &mut Value) -> EngineResult<()> {
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
