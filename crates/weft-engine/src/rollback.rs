//! What follows a failed job: a create that asked for it is deleted, and a failed upgrade is rolled
//! back to the service's previous definition. A user's abort ends here too: it fails the job.

use weft_model::ClusterStatus;
use weft_planner::Operation;

use crate::control::{abort, Stopped};
use crate::delete::start_delete;
use crate::error::EngineResult;
use crate::jobs::{load, start_job, with_definition};
use crate::view::visible;
use crate::{Caller, Engine};

/// `POST .../abort`: aborts the running create of cluster `id`, as `who` sees it; when nothing of
/// it still runs, what follows a failed job starts at once (otherwise its last task starts it).
pub async fn abort_cluster(st: &Engine, who: &Caller, id: &str) -> EngineResult<()> {
    let row = visible(st, who, id).await?;
    if abort(st, &row).await? == Stopped::Settled {
        after_failed_job(st, &row.tenant_id, row.id).await;
    }
    Ok(())
}

/// After a job failed and its cluster settled: a cluster whose delete aborted the job, or a create
/// that asked for it, is deleted, and a failed upgrade is rolled back to the service's previous
/// definition. Errors are logged: the failure itself is already recorded.
pub async fn after_failed_job(st: &Engine, tenant_id: &str, cluster_id: u64) {
    if let Err(e) = rollback(st, tenant_id, cluster_id).await {
        tracing::warn!(cluster_id, error = %e, "automatic rollback did not start");
    }
}

async fn rollback(st: &Engine, tenant_id: &str, cluster_id: u64) -> EngineResult<()> {
    let Some(row) = st.store.get_cluster(tenant_id, cluster_id).await? else {
        return Ok(());
    };
    if row.status == ClusterStatus::Pending.as_str() {
        return Ok(()); // not settled yet: the job's last finish comes back here
    }
    let Some(job_id) = row.latest_job.clone() else {
        return Ok(());
    };
    let Some(job) = st.store.get_job(tenant_id, &job_id).await? else {
        return Ok(());
    };
    if job.status != weft_model::JobStatus::Failed.as_str() {
        return Ok(());
    }
    let c = load(st, row).await?;
    if c.body.delete_requested {
        tracing::info!(cluster_id, job_id = %job.id, "job aborted for a delete: deleting the cluster");
        start_delete(st, &c.row).await?;
    } else if job.action == "CLUSTER_CREATE" && c.body.rollback_on_failure {
        tracing::info!(cluster_id, job_id = %job.id, "create failed: deleting the cluster, as asked");
        start_delete(st, &c.row).await?;
    } else if job.action == "UPGRADE_SERVICE" {
        let Some(from) = c.body.upgrade_from.clone() else {
            return Ok(());
        };
        let name = from.service.name.clone();
        let after = with_definition(&c.nodes, &from.service);
        let op = Operation::RollbackUpgrade {
            service: name,
            batch_size: from.batch_size,
            nodes: None,
        };
        let mut body = c.body.clone();
        body.upgrade_from = None;
        tracing::info!(cluster_id, job_id = %job.id, "upgrade failed: rolling back");
        start_job(st, &c, op, &c.nodes, after, body, vec![], false).await?;
    }
    Ok(())
}
