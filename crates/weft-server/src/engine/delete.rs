//! Deleting a cluster: start its CLUSTER_DELETE job. Shared by `DELETE /v2/clusters/{id}`, the
//! janitor (expired cluster leases) and the rollback of a failed create, so all delete the same way.
//!
//! A delete is always possible. A cluster whose job runs has that job aborted first
//! ([`control::stop_job`](super::control::stop_job)): when nothing of it is running the delete
//! starts at once; otherwise the task that ends last settles the cluster, and the delete starts
//! then (`ops::after_failed_job`), so it never races a task that is still making a machine.

use weft_model::ClusterStatus;
use weft_planner::Operation;
use weft_store::ClusterRow;

use super::control::{running_job, stop_job, Stopped};
use super::ops::{load, start_job};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// What a delete request started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleting {
    /// The cluster was already terminated: nothing to do.
    Nothing,
    /// The delete job runs (a new one, or one that was already running).
    Job(String),
    /// The running job is aborted; the delete starts when its last running task ends.
    AfterAbort,
}

/// Deletes the cluster `row` (as read by the caller): starts its CLUSTER_DELETE job, aborting a job
/// underway first.
pub async fn delete_cluster(st: &AppState, row: &ClusterRow) -> ApiResult<Deleting> {
    if row.status == ClusterStatus::Pending.as_str() {
        if let Some(r) = running_job(st, row).await? {
            if r.job.action == "CLUSTER_DELETE" {
                return Ok(Deleting::Job(r.job.id));
            }
        }
        match stop_job(st, row, "Aborted: the cluster is being deleted.", true).await? {
            Stopped::Draining => return Ok(Deleting::AfterAbort),
            Stopped::Settled | Stopped::Nothing => {}
        }
    }
    // Read again: the abort (or a job that ended meanwhile) changed the row.
    let Some(now) = st.store.get_cluster(&row.tenant_id, row.id).await? else {
        return Ok(Deleting::Nothing);
    };
    Ok(match start_delete(st, &now).await? {
        Some(job) => Deleting::Job(job),
        None => Deleting::Nothing,
    })
}

/// Starts the CLUSTER_DELETE job of `row` (as read by the caller; the commit expects that
/// revision). Returns the job id, or `None` when the cluster is already terminated (nothing to do).
/// A cluster with a job underway (status pending) is a 409 here: [`delete_cluster`] aborts it
/// first. A cluster that changed since `row` was read is a 409 too.
pub async fn start_delete(st: &AppState, row: &ClusterRow) -> ApiResult<Option<String>> {
    match ClusterStatus::parse(&row.status) {
        Some(ClusterStatus::Terminated) => return Ok(None),
        Some(ClusterStatus::Pending) => {
            return Err(ApiError::Conflict(format!(
                "Job {} is still underway for cluster {}",
                row.latest_job.clone().unwrap_or_default(),
                super::cluster_id_text(row.id)
            )))
        }
        _ => {}
    }
    let c = load(st, row.clone()).await?;
    let mut body = c.body.clone();
    body.delete_requested = false;
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
