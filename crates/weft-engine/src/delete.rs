//! Deleting a cluster: start its CLUSTER_DELETE job. Shared by `DELETE /v2/clusters/{id}` and the
//! janitor (expired cluster leases), so both delete the same way.

use weft_model::ClusterStatus;
use weft_planner::Operation;
use weft_store::ClusterRow;

use super::cluster_id_text;
use crate::error::{EngineError, EngineResult};
use crate::jobs::{load, start_job};
use crate::Engine;

/// Starts the CLUSTER_DELETE job of `row` (as read by the caller; the commit expects that
/// revision). Returns the job id, or `None` when the cluster is already terminated (nothing to do).
/// A cluster with a job underway (status pending) is a 409, and so is a cluster that changed since
/// `row` was read.
pub async fn start_delete(st: &Engine, row: &ClusterRow) -> EngineResult<Option<String>> {
    match ClusterStatus::parse(&row.status) {
        Some(ClusterStatus::Terminated) => return Ok(None),
        Some(ClusterStatus::Pending) => {
            return Err(EngineError::JobUnderway {
                job: row.latest_job.clone().unwrap_or_default(),
                cluster: cluster_id_text(row.id),
            })
        }
        _ => {}
    }
    let c = load(st, row.clone()).await?;
    let body = c.body.clone();
    let started = start_job(
        st,
        &c,
        Operation::Delete,
        &c.nodes,
        Vec::new(),
        body,
        Vec::new(),
        false,
    )
    .await?;
    Ok(Some(started.plan.id))
}
