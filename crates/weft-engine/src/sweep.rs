//! Provider sweeps (a weft addition): the machines that carry weft's marks for the caller's
//! tenant on a provider's account but belong to no live node of the tenant, and on request their
//! removal. The tenant admin only.
//!
//! The engine reads the provider with its secrets, collects the tenant's live node ids (nodes of
//! clusters not terminated) and asks a provisioner that has the provider type to list and delete
//! ([`Messenger::sweep`](crate::Messenger::sweep)). Only machines marked with this tenant's id
//! are answered, by the provisioner and again here, so another tenant's machines in the same
//! account never look orphaned.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use weft_model::{ClusterStatus, EntityKind, SweepReport};

use crate::entities::not_found;
use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine, SweepError};

/// Sweeps provider `name` of the caller's tenant; `delete`: also delete what is found.
pub async fn sweep(
    st: &Engine,
    who: &Caller,
    name: &str,
    delete: bool,
) -> EngineResult<SweepReport> {
    who.require_admin()?;
    let tenant = who.tenant.id.clone();
    let provider = st
        .store
        .get_entity(&tenant, EntityKind::Provider, name, None)
        .await?
        .ok_or_else(|| not_found(EntityKind::Provider, name))?;
    let providertype = provider
        .get("providertype")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut fields = provider.get("provisioner").cloned().unwrap_or(json!({}));
    st.sealer.open_all(&tenant, &mut fields).await?;
    let body = json!({
        "providertype": providertype,
        "fields": fields,
        "tenant": tenant,
        "live": live_nodes(st, &tenant).await?,
        "delete": delete,
    });
    let mut report = st
        .messenger
        .sweep(&tenant, &providertype, &body)
        .await
        .map_err(|e| match e {
            SweepError::Refused(m) => EngineError::Invalid(m),
            SweepError::NoProvisioner(m) => EngineError::NoProvisioner(m),
            SweepError::Failed(m) => EngineError::Internal(m),
        })?;
    report.machines.retain(|m| m.tenant == tenant);
    tracing::info!(tenant_id = %tenant, provider = %name, found = report.machines.len(),
        deleted = report.deleted.len(), "provider swept");
    Ok(report)
}

/// The ids of the tenant's nodes in clusters that are not terminated.
async fn live_nodes(st: &Engine, tenant: &str) -> EngineResult<BTreeSet<String>> {
    let live: BTreeSet<u64> = st
        .store
        .list_clusters(tenant, None)
        .await?
        .into_iter()
        .filter(|c| c.status != ClusterStatus::Terminated)
        .map(|c| c.id)
        .collect();
    Ok(st
        .store
        .list_tenant_nodes(tenant)
        .await?
        .into_iter()
        .filter(|n| live.contains(&n.cluster_id))
        .map(|n| n.id)
        .collect())
}
