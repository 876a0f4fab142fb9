//! Tenants as the superadmin manages them: their workers (placed on provisioners) and quotas.
//! A tenant's settings are checked against the provisioners' free worker capacity and, when they
//! change, against what the tenant has, in the commit that writes them
//! ([`Store::save_tenant`](weft_store::Store::save_tenant)); the superadmin tenant cannot be
//! deleted, nor a tenant that still has workers. A new tenant may start with a copy of the
//! superadmin's catalog and plugin resources (bootstrap). Every change places workers anew.

use weft_model::{EntityKind, TenantSpecification, Validate};
use weft_store::{StoreError, Tenant, TenantRefusal, SUPERADMIN};

use crate::entities::provider_to_store;
use crate::error::{EngineError, EngineResult};
use crate::plugins::{copy_resources, ResourceStore};
use crate::workers::rebalance;
use crate::{Caller, Engine};

/// Every tenant's settings.
pub async fn list(st: &Engine, who: &Caller) -> EngineResult<Vec<TenantSpecification>> {
    who.require_superadmin()?;
    Ok(st
        .store
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| t.spec)
        .collect())
}

/// Tenant `name`'s settings.
pub async fn get(st: &Engine, who: &Caller, name: &str) -> EngineResult<TenantSpecification> {
    who.require_superadmin()?;
    Ok(find(st, name).await?.spec)
}

/// Every tenant's name, by id (the superadmin's).
pub async fn names(
    st: &Engine,
    who: &Caller,
) -> EngineResult<std::collections::BTreeMap<String, String>> {
    who.require_superadmin()?;
    names_by_id(st).await
}

/// Every tenant's name, by id (for answers that show tenants by name).
pub(crate) async fn names_by_id(
    st: &Engine,
) -> EngineResult<std::collections::BTreeMap<String, String>> {
    Ok(st
        .store
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| (t.id, t.spec.name))
        .collect())
}

async fn find(st: &Engine, name: &str) -> EngineResult<Tenant> {
    st.store
        .tenant_by_name(name)
        .await?
        .ok_or_else(|| EngineError::TenantNotFound(name.to_string()))
}

/// Creates a tenant from `spec` (`None`: the body named none), with a copy of the superadmin's
/// catalog and plugin resources if `bootstrap` gives where resources are kept; its workers are
/// then placed.
pub async fn create(
    st: &Engine,
    who: &Caller,
    spec: Option<TenantSpecification>,
    bootstrap: Option<&dyn ResourceStore>,
) -> EngineResult<()> {
    who.require_superadmin()?;
    let spec = checked(spec)?;
    if st.store.tenant_by_name(&spec.name).await?.is_some() {
        return Err(EngineError::TenantExists(spec.name));
    }
    insert(st, spec, bootstrap).await?;
    rebalance(st).await
}

/// Writes tenant `name`'s settings, creating it if absent (then as [`create`] does); its
/// workers are then placed.
pub async fn put(
    st: &Engine,
    who: &Caller,
    name: &str,
    spec: Option<TenantSpecification>,
    bootstrap: Option<&dyn ResourceStore>,
) -> EngineResult<()> {
    who.require_superadmin()?;
    let spec = checked(spec)?;
    if spec.name != name {
        return Err(EngineError::Invalid(format!(
            "tenant name in the body ({}) does not match the name in the path ({name})",
            spec.name
        )));
    }
    match st.store.tenant_by_name(name).await? {
        Some(existing) => save(st, &Tenant { spec, ..existing }, false).await?,
        None => insert(st, spec, bootstrap).await?,
    }
    rebalance(st).await
}

/// Copies the superadmin's catalog (entities and plugin resources) into a new tenant.
async fn copy_catalog(
    st: &Engine,
    resources: &dyn ResourceStore,
    tenant_id: &str,
) -> EngineResult<()> {
    let mut entities = Vec::new();
    for kind in EntityKind::ADMIN {
        for mut doc in st.store.list_entities(SUPERADMIN, kind).await? {
            if kind == EntityKind::Provider {
                // A sealed value opens only for its own tenant: sealed again for the new one.
                st.sealer.open_all(SUPERADMIN, &mut doc).await?;
                provider_to_store(st, tenant_id, &mut doc).await?;
            }
            let name = doc
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_string();
            entities.push((kind, name, doc));
        }
    }
    st.store.replace_entities(tenant_id, &entities).await?;
    copy_resources(st, resources, SUPERADMIN, tenant_id).await
}

/// Deletes tenant `name` and everything it owns (nothing happens if there is none).
pub async fn delete(st: &Engine, who: &Caller, name: &str) -> EngineResult<()> {
    who.require_superadmin()?;
    if name == SUPERADMIN {
        return Err(EngineError::Forbidden(
            "Superadmin cannot be deleted.".into(),
        ));
    }
    let Some(t) = st.store.tenant_by_name(name).await? else {
        return Ok(());
    };
    if t.spec.workers > 0 {
        return Err(EngineError::TenantHasWorkers {
            tenant: name.to_string(),
            workers: t.spec.workers,
        });
    }
    st.store.delete_tenant(&t.id).await?;
    rebalance(st).await
}

fn checked(spec: Option<TenantSpecification>) -> EngineResult<TenantSpecification> {
    let spec = spec.ok_or_else(|| EngineError::Invalid("tenant must be specified".into()))?;
    spec.validate()?;
    Ok(spec)
}

/// Inserts a new tenant, with a copy of the superadmin's catalog if `bootstrap` says where
/// resources are kept.
async fn insert(
    st: &Engine,
    spec: TenantSpecification,
    bootstrap: Option<&dyn ResourceStore>,
) -> EngineResult<()> {
    let tenant = Tenant {
        id: uuid::Uuid::new_v4().to_string(),
        spec,
        create_time: st.now_ms(),
    };
    save(st, &tenant, true).await?;
    match bootstrap {
        Some(resources) => copy_catalog(st, resources, &tenant.id).await,
        None => Ok(()),
    }
}

/// [`Store::save_tenant`](weft_store::Store::save_tenant), its refusals named.
async fn save(st: &Engine, tenant: &Tenant, insert: bool) -> EngineResult<()> {
    let spec = &tenant.spec;
    match st.store.save_tenant(tenant, insert).await {
        Ok(()) => Ok(()),
        Err(StoreError::Conflict(_)) => Err(EngineError::TenantExists(spec.name.clone())),
        Err(StoreError::TenantRefused(TenantRefusal::Capacity { free })) => {
            Err(EngineError::NoWorkerCapacity {
                tenant: spec.name.clone(),
                asks: spec.workers,
                free,
            })
        }
        Err(StoreError::TenantRefused(TenantRefusal::BelowUsage { clusters, nodes })) => {
            Err(EngineError::LimitsBelowUsage {
                tenant: spec.name.clone(),
                clusters,
                nodes,
                max_clusters: spec.max_clusters,
                max_nodes: spec.max_nodes,
            })
        }
        Err(e) => Err(e.into()),
    }
}
