//! Replacing a node (weft's extension): the node's machine is deleted if it still exists and a
//! new one is made with the same node id, hardware, image and services; its services are
//! installed, configured and started from scratch, and the other nodes re-configure theirs (those
//! that need one of its services at runtime also restart). A normal job through [`start_job`]:
//! the cluster is pending while it runs and active (or inconsistent) after it.
//!
//! What a node knew of its old machine (addresses, provider id, host keys) stays on the node
//! until the new machine's CREATE and CONFIRM overwrite it; DELETE of a machine that is gone
//! is success for every provider, so a node whose machine vanished is replaced the same way.

use weft_model::{ClusterStatus, PlanView};
use weft_planner::Operation;

use crate::error::{EngineError, EngineResult};
use crate::jobs::{load, require_status, start_job, Loaded, RunMode, Started};
use crate::view::visible;
use crate::{Caller, Engine};

/// `POST /v2/clusters/{id}/nodes/{node}/replace`: starts (or, for a dry run, plans) the
/// replacement of node `node` of cluster `id` as `who` sees it. The cluster must be active or
/// inconsistent (a failed replacement may be run again).
pub async fn replace_node(
    st: &Engine,
    who: &Caller,
    id: &str,
    node: &str,
    mode: RunMode,
) -> EngineResult<(String, PlanView)> {
    let row = visible(st, who, id).await?;
    require_status(&row, &[ClusterStatus::Active, ClusterStatus::Inconsistent])?;
    let c = load(st, row).await?;
    let s = start_replace(st, &c, node, mode).await?;
    Ok((s.plan.id.clone(), s.plan))
}

/// Starts the replacement of `node` on a loaded cluster (the janitor's entry too).
#[tracing::instrument(skip_all, fields(cluster_id = c.row.id, node = node))]
pub async fn start_replace(
    st: &Engine,
    c: &Loaded,
    node: &str,
    mode: RunMode,
) -> EngineResult<Started> {
    if !c.nodes.iter().any(|n| n.id == node) {
        return Err(EngineError::NodeNotFound(node.to_string()));
    }
    // A machine the latest drift check found missing or stopped cannot run its services' LEAVE.
    let lost = found_lost(st, c, node).await?;
    let op = Operation::ReplaceNode {
        node: node.to_string(),
        alive: !lost,
    };
    let s = start_job(
        st,
        c,
        op,
        &[],
        c.nodes.clone(),
        c.body.clone(),
        vec![],
        mode,
    )
    .await?;
    if !mode.dry_run {
        tracing::info!(cluster_id = c.row.id, node, job_id = %s.plan.id, "node replacement started");
    }
    Ok(s)
}

/// Whether the cluster's latest drift check found `node`'s machine missing or stopped: as the
/// janitor recorded it, or read from the check's STATUS task when the check (one asked for
/// through the API too) ran after the cluster's latest change.
async fn found_lost(st: &Engine, c: &Loaded, node: &str) -> EngineResult<bool> {
    let Some(record) = &c.body.drift else {
        return Ok(false);
    };
    if record.missing.iter().any(|m| m == node) {
        return Ok(true);
    }
    let tenant = &c.row.tenant_id;
    let Some(check) = &record.job_id else {
        return Ok(false);
    };
    let Some(check) = st.store.get_job(tenant, check).await? else {
        return Ok(false);
    };
    let changed = match &c.row.latest_job {
        Some(j) => st
            .store
            .get_job(tenant, j)
            .await?
            .map_or(0, |j| j.create_time),
        None => 0,
    };
    if check.create_time < changed {
        return Ok(false);
    }
    let status = weft_model::ProvisionerAction::Status.upper();
    for t in st.store.list_tasks(tenant, &check.id).await? {
        if t.node_id == node && t.action == status && t.state == weft_store::TaskState::Complete {
            let body: crate::body::TaskBody = crate::body::from_body(&t.body)?;
            return Ok(body.machine.is_some_and(|m| m.state.is_drift()));
        }
    }
    Ok(false)
}
