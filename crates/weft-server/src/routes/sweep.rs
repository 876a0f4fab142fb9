//! `POST /v2/providers/{name}/sweep` (a weft addition): the machines that carry weft's marks for
//! the caller's tenant on a provider's account but belong to no live node of the tenant, and with
//! `?delete=true` their removal. The tenant admin only.
//!
//! The server reads the provider with its secrets, collects the tenant's live node ids (nodes of
//! clusters not terminated) and asks a provisioner that has the provider type to list and delete
//! (`POST /v2/sweep` on the provisioner's API, with the provisioner token). Only machines marked
//! with this tenant's id are answered, by the provisioner and again here, so another tenant's
//! machines in the same account never look orphaned.

use std::collections::BTreeSet;

use axum::extract::{Path, Query, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_model::{EntityKind, SweepReport};

use super::entities::not_found;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::POST,
        "/v2/providers/{name}/sweep",
        sweep,
        op(
            "providers",
            "List the machines with weft's marks for this tenant that belong to no live node (tenant admin); delete=true also deletes them",
        )
        .query("delete", "true: delete the machines found")
        .ok(200, "the machines found, and what was deleted", Body::Json("SweepReport"))
        .status(400, "the provider type cannot list its machines, or a field is wrong")
        .status(403, "caller is not the tenant admin")
        .status(404, "no such provider")
        .status(409, "no live provisioner has the provider type")
        .status(500, "a provisioner failed"),
    )
}

#[derive(Debug, Deserialize)]
pub struct DeleteFlag {
    delete: Option<String>,
}

impl DeleteFlag {
    fn on(&self) -> bool {
        self.delete
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case("true") || d == "1")
    }
}

async fn sweep(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
    Query(flag): Query<DeleteFlag>,
) -> ApiResult<Json<SweepReport>> {
    who.require_admin()?;
    let tenant = who.tenant.id.clone();
    let provider = st
        .store
        .get_entity(&tenant, EntityKind::Provider, &name, None)
        .await?
        .ok_or_else(|| not_found(EntityKind::Provider, &name))?;
    let providertype = provider
        .get("providertype")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut fields = provider.get("provisioner").cloned().unwrap_or(json!({}));
    st.engine.sealer.open_all(&tenant, &mut fields).await?;
    let body = json!({
        "providertype": providertype,
        "fields": fields,
        "tenant": tenant,
        "live": live_nodes(&st, &tenant).await?,
        "delete": flag.on(),
    });
    let mut report =
        crate::outbound::ask_sweep(&st.outbound, &*st.store, &tenant, &providertype, &body).await?;
    report.machines.retain(|m| m.tenant == tenant);
    tracing::info!(tenant_id = %tenant, provider = %name, found = report.machines.len(),
        deleted = report.deleted.len(), "provider swept");
    Ok(Json(report))
}

/// The ids of the tenant's nodes in clusters that are not terminated.
async fn live_nodes(st: &AppState, tenant: &str) -> ApiResult<BTreeSet<String>> {
    let live: BTreeSet<u64> = st
        .store
        .list_clusters(tenant, None)
        .await?
        .into_iter()
        .filter(|c| c.status != "terminated")
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
