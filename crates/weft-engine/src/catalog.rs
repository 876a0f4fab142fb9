//! The tenant's catalog as the engine reads it: templates resolved through their parents and
//! partials (and as `POST /v2/resolve` answers), whole kinds as typed lists, and which templates
//! cannot make a cluster now.

use std::collections::BTreeMap;

use weft_model::resolve::{merge_template, resolve_template};
use weft_model::{
    lenient, ClusterTemplate, EntityKind, ParameterType, PartialTemplate, PluginType, Provider,
};
use weft_store::SUPERADMIN;

use crate::error::{EngineError, EngineResult};
use crate::Engine;

/// The tenant's template `name` as saved (not resolved).
pub async fn saved_template(
    st: &Engine,
    tenant_id: &str,
    name: &str,
) -> EngineResult<ClusterTemplate> {
    let doc = st
        .store
        .get_entity(tenant_id, EntityKind::ClusterTemplate, name, None)
        .await?
        .ok_or_else(|| EngineError::NotInCatalog {
            kind: "cluster template",
            name: name.to_string(),
        })?;
    Ok(lenient::from_value(doc)?)
}

/// Resolves a template's parents and partials from the tenant's catalog. The template alone
/// (no parent, no partials) answers for its own faults; with them, a result the stored catalog
/// makes incomplete or invalid is [`EngineError::Unservable`].
pub async fn resolve_in_tenant(
    st: &Engine,
    tenant_id: &str,
    own: ClusterTemplate,
) -> EngineResult<ClusterTemplate> {
    let alone = own.extends.is_none() && own.includes.is_empty();
    resolve_chain(st, tenant_id, own)
        .await
        .map_err(|e| if alone { e } else { e.against_catalog() })
}

/// A template resolved as `POST /v2/resolve` answers it: merged through its parents and
/// partials, still naming what it extends and includes (as Coopr answers).
pub async fn resolve_as_asked(
    st: &Engine,
    tenant_id: &str,
    own: ClusterTemplate,
) -> EngineResult<ClusterTemplate> {
    let (extends, includes) = (own.extends.clone(), own.includes.clone());
    let mut merged = resolve_in_tenant(st, tenant_id, own).await?;
    merged.extends = extends;
    merged.includes = includes;
    Ok(merged)
}

async fn resolve_chain(
    st: &Engine,
    tenant_id: &str,
    own: ClusterTemplate,
) -> EngineResult<ClusterTemplate> {
    // Walk up the extends chain first (bounded, so a cycle is an error, not a hang).
    let mut chain = vec![own];
    while let Some(parent) = chain.last().and_then(|t| t.extends.clone()) {
        if chain.len() > 16 || chain.iter().any(|t| t.name == parent.name) {
            return Err(EngineError::Invalid(format!(
                "template inheritance through {} is circular",
                parent.name
            )));
        }
        chain.push(saved_template(st, tenant_id, &parent.name).await?);
    }
    let mut resolved: Option<ClusterTemplate> = None;
    while let Some(t) = chain.pop() {
        let mut partials = Vec::new();
        for inc in &t.includes {
            let doc = st
                .store
                .get_entity(tenant_id, EntityKind::PartialTemplate, &inc.name, None)
                .await?
                .ok_or_else(|| EngineError::NotInCatalog {
                    kind: "partial template",
                    name: inc.name.clone(),
                })?;
            partials.push(lenient::from_value::<PartialTemplate>(doc)?);
        }
        let merged = if chain.is_empty() {
            resolve_template(&t, resolved.as_ref(), &partials)?
        } else {
            merge_template(&t, resolved.as_ref(), &partials)?
        };
        resolved = Some(merged);
    }
    resolved.ok_or_else(|| EngineError::Internal("empty template chain".into()))
}

/// Every entity of a kind in the tenant, typed; entities that no longer parse are skipped.
pub async fn typed_list<T: serde::de::DeserializeOwned>(
    st: &Engine,
    tenant_id: &str,
    kind: EntityKind,
) -> EngineResult<Vec<T>> {
    Ok(st
        .store
        .list_entities(tenant_id, kind)
        .await?
        .into_iter()
        .filter_map(|v| lenient::from_value(v).ok())
        .collect())
}

/// Why each of the tenant's templates cannot make a cluster now, for those that cannot (templates
/// missing from the map can): its default provider is not in the catalog, no provisioner has
/// registered the provider's type, the provider lacks the admin fields (credentials) its type
/// requires, or no provisioner is alive. A template that names no default provider is not
/// judged (the user picks one). Lists and forms mark such templates instead of offering them.
pub async fn unusable_templates(
    st: &Engine,
    tenant_id: &str,
) -> EngineResult<BTreeMap<String, String>> {
    let alive = st.any_provisioner_alive().await?;
    let mut out = BTreeMap::new();
    for own in typed_list::<ClusterTemplate>(st, tenant_id, EntityKind::ClusterTemplate).await? {
        let name = own.name.clone();
        let why = match resolve_in_tenant(st, tenant_id, own).await {
            Err(e) => Some(e.to_string()),
            Ok(t) => match t.defaults.provider.as_deref().filter(|p| !p.is_empty()) {
                None => None,
                Some(p) => provider_problem(st, tenant_id, p, alive).await?,
            },
        };
        if let Some(why) = why {
            out.insert(name, why);
        }
    }
    Ok(out)
}

/// What keeps provider `name` from making machines now, if anything.
async fn provider_problem(
    st: &Engine,
    tenant_id: &str,
    name: &str,
    alive: bool,
) -> EngineResult<Option<String>> {
    let Some(doc) = st
        .store
        .get_entity(tenant_id, EntityKind::Provider, name, None)
        .await?
    else {
        return Ok(Some(format!("provider {name} is not in the catalog")));
    };
    let provider: Provider = lenient::from_value(doc)?;
    let ptype = &provider.providertype;
    let Some(doc) = st
        .store
        .get_entity(SUPERADMIN, EntityKind::ProviderType, ptype, None)
        .await?
    else {
        return Ok(Some(format!(
            "no provisioner has registered provider type {ptype}"
        )));
    };
    let ptype: PluginType = lenient::from_value(doc)?;
    if let Some(missing) = missing_admin_fields(&ptype, &provider) {
        return Ok(Some(format!(
            "provider {name} lacks its credentials ({})",
            missing.join(", ")
        )));
    }
    Ok((!alive).then(|| "no provisioner is running".to_string()))
}

/// The admin fields of the smallest required set the provider does not fill, when none is filled.
fn missing_admin_fields(ptype: &PluginType, provider: &Provider) -> Option<Vec<String>> {
    let spec = ptype.parameters.get(&ParameterType::Admin)?;
    let filled = |f: &String| {
        provider
            .provisioner
            .get(f)
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
    };
    if spec.required.is_empty() || spec.required.iter().any(|set| set.iter().all(filled)) {
        return None;
    }
    spec.required
        .iter()
        .map(|set| {
            set.iter()
                .filter(|f| !filled(f))
                .cloned()
                .collect::<Vec<_>>()
        })
        .min_by_key(Vec::len)
}
