//! Deleting a cluster: start its CLUSTER_DELETE job. Shared by `DELETE /v2/clusters/{id}`, the
//! janitor (expired cluster leases) and the rollback of a failed create, so all delete the same way.
//!
//! A delete is always possible. A cluster whose job runs has that job aborted first
//! ([`control::stop_job`](crate::control::stop_job)): when nothing of it is running the delete
//! starts at once; otherwise the task that ends last settles the cluster, and the delete starts
//! then (`rollback::after_failed_job`), so it never races a task that is still making a machine.

use weft_model::ClusterStatus;
use weft_planner::Operation;
use weft_store::{ChangeSet, ClusterRow, Expect, Write};

use crate::body::{from_body, to_body, ClusterBody};
use crate::control::{running_job, stop_job, Stopped};
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{load, start_job, RunMode};
use crate::{Caller, Engine};

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
pub async fn delete_cluster(st: &Engine, row: &ClusterRow) -> EngineResult<Deleting> {
    if row.status == ClusterStatus::Pending {
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
    if now.status != ClusterStatus::Terminated && never_ran(st, &now).await? {
        // No provisioner ever took a task of it (none offers its provider type, say): there is
        // no machine to delete, and a delete job would wait for a provisioner just the same.
        let message = "Deleted before any of its tasks ran: no machine was made.";
        terminate_now(st, &now, message.into()).await?;
        return Ok(Deleting::Nothing);
    }
    Ok(match start_delete(st, &now).await? {
        Some(job) => Deleting::Job(job),
        None => Deleting::Nothing,
    })
}

/// Starts the CLUSTER_DELETE job of `row` (as read by the caller; the commit expects that
/// revision). Returns the job id, or `None` when the cluster is already terminated (nothing to do).
/// A cluster with a job underway (status pending) is a 409 here: [`delete_cluster`] aborts it
/// first. A cluster that changed since `row` was read is a 409 too.
pub async fn start_delete(st: &Engine, row: &ClusterRow) -> EngineResult<Option<String>> {
    match row.status {
        ClusterStatus::Terminated => return Ok(None),
        ClusterStatus::Pending => {
            return Err(EngineError::JobUnderway {
                job: row.latest_job.clone().unwrap_or_default(),
                cluster: cluster_id_text(row.id),
            })
        }
        ClusterStatus::Active | ClusterStatus::Incomplete | ClusterStatus::Inconsistent => {}
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
        RunMode::default(),
    )
    .await?;
    Ok(Some(started.plan.id))
}

/// Deletes the cluster `row` by force: an admin who knows its machines are gone (a closed cloud
/// account, credentials lost for good) ends a cluster that a normal delete cannot. Nothing is
/// asked of any provisioner: the cluster is marked terminated, with a message saying who forced it
/// and that weft deleted none of its machines (which the host-pool returns and the UI read as any
/// termination). A job underway is aborted first; while any of its tasks still runs, the force is
/// refused (409), so no machine being made is forgotten.
pub async fn force_delete(st: &Engine, who: &Caller, row: &ClusterRow) -> EngineResult<()> {
    who.require_admin()?;
    if row.status == ClusterStatus::Terminated {
        return Ok(());
    }
    if row.status == ClusterStatus::Pending {
        let why = "Aborted: the cluster is being deleted by force.";
        if stop_job(st, row, why, false).await? == Stopped::Draining {
            return Err(EngineError::JobUnderway {
                job: row.latest_job.clone().unwrap_or_default(),
                cluster: cluster_id_text(row.id),
            });
        }
    }
    let now = st
        .store
        .get_cluster(&row.tenant_id, row.id)
        .await?
        .ok_or_else(|| EngineError::ClusterNotFound(cluster_id_text(row.id)))?;
    let nodes = now.node_count;
    let message = format!(
        "Deleted by force by {}: weft deleted none of its {nodes} machines; remove any that remain by hand.",
        who.user
    );
    terminate_now(st, &now, message).await?;
    tracing::warn!(cluster_id = row.id, user = %who.user, nodes, "cluster deleted by force: no machine was deleted");
    Ok(())
}

/// Marks the cluster `row` (as read) terminated at once, with `message`: no task runs.
async fn terminate_now(st: &Engine, row: &ClusterRow, message: String) -> EngineResult<()> {
    let mut c = row.clone();
    let mut body: ClusterBody = from_body(&c.body)?;
    body.message = Some(message);
    body.end_spans(None, st.now_ms());
    c.body = to_body(&body)?;
    c.status = ClusterStatus::Terminated;
    let mut cs = ChangeSet::default();
    cs.expect(Expect::cluster(row));
    cs.write(Write::Cluster(c));
    st.store
        .commit(&cs)
        .await
        .map_err(|e| match crate::store_err(e) {
            EngineError::Stale(_) => EngineError::ClusterChanged(cluster_id_text(row.id)),
            other => other,
        })
}

/// Whether no task of any job of the cluster was ever taken by a worker (so no machine of it can
/// exist). Read only on a delete.
async fn never_ran(st: &Engine, row: &ClusterRow) -> EngineResult<bool> {
    for job in st.store.list_jobs(&row.tenant_id, row.id).await? {
        let tasks = st.store.list_tasks(&row.tenant_id, &job.id).await?;
        if tasks.iter().any(|t| t.started_at > 0 || t.attempts > 0) {
            return Ok(false);
        }
    }
    Ok(true)
}
