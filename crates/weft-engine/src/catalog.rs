//! The tenant's catalog as the engine reads it: templates resolved through their parents and
//! partials, and whole kinds as typed lists.

use weft_model::resolve::{merge_template, resolve_template};
use weft_model::{lenient, ClusterTemplate, EntityKind, PartialTemplate};

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

/// Resolves a template's parents and partials from the tenant's catalog.
pub async fn resolve_in_tenant(
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
