//! What follows a failed job: a create that asked for it is deleted, and a failed upgrade is rolled
//! back to the service's previous definition. A user's abort ends here too: it fails the job.

use weft_model::{ClusterStatus, OnFailure, RolloutOutcome};
use weft_planner::{Operation, RolloutPlan};
use weft_store::{ChangeSet, Expect, JobRow, Write};

/// A revert undoes what its job was allowed to do: the availability rules that job passed are
/// not asked again (a revert refused halfway would leave the cluster worse).
const UNDO: RunMode = RunMode {
    dry_run: false,
    force: true,
};

use crate::body::{from_body, to_body, ClusterBody, JobBody};
use crate::control::{abort, Stopped};
use crate::delete::start_delete;
use crate::error::EngineResult;
use crate::jobs::{load, start_job, with_definition, JobOp, Loaded, RunMode};
use crate::view::{changed_nodes, visible};
use crate::{store_err, Caller, Engine};

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
    if row.status == ClusterStatus::Pending {
        return Ok(()); // not settled yet: the job's last finish comes back here
    }
    let Some(job_id) = row.latest_job.clone() else {
        return Ok(());
    };
    let Some(job) = st.store.get_job(tenant_id, &job_id).await? else {
        return Ok(());
    };
    if job.status != weft_model::JobStatus::Failed {
        return Ok(());
    }
    let c = load(st, row).await?;
    let jb: JobBody = from_body(&job.body)?;
    if c.body.delete_requested {
        tracing::info!(cluster_id, job_id = %job.id, "job aborted for a delete: deleting the cluster");
        start_delete(st, &c.row).await?;
    } else if job.action == "CLUSTER_CREATE" && c.body.rollback_on_failure {
        tracing::info!(cluster_id, job_id = %job.id, "create failed: deleting the cluster, as asked");
        start_delete(st, &c.row).await?;
    } else if jb.rollout.is_some() {
        revert_rollout(st, &c, &job, jb).await?;
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
        start_job(st, &c, op, &c.nodes, after, body, vec![], UNDO).await?;
    }
    Ok(())
}

/// After a failed rolling change: with `onFailure: rollback`, the nodes it changed are reverted in
/// a job of their own (an upgrade to the service's previous definition, a reconfigure to the
/// previous config), in batches of the rollout's size without gates. A restart has nothing to
/// revert, and a rollout that pauses reverts nothing when a task fails for good. Either way the
/// failed job's rollout report says what was done, and a revert that did not happen says why.
async fn revert_rollout(st: &Engine, c: &Loaded, job: &JobRow, jb: JobBody) -> EngineResult<()> {
    let Some(report) = jb.rollout.clone() else {
        return Ok(());
    };
    if report.outcome.is_some() {
        return Ok(()); // decided already
    }
    let tasks = st.store.list_task_heads(&job.tenant_id, &job.id).await?;
    let by_id = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let changed = changed_nodes(&jb.stages, &by_id);
    let outcome = match revert_job(c, job, &jb, &changed) {
        Err(why) => Err(why),
        Ok((op, after, body)) => {
            tracing::info!(cluster_id = c.row.id, job_id = %job.id, nodes = ?changed, "rollout failed: reverting the nodes it changed");
            match start_job(st, c, op, &c.nodes, after, body, vec![], UNDO).await {
                Ok(s) => Ok((s.plan.id, changed)),
                Err(e) => Err(format!("the revert could not start: {e}")),
            }
        }
    };
    record_outcome(st, job, outcome).await
}

/// The job that reverts `changed` after the failed rollout `job`, or why there is none.
fn revert_job(
    c: &Loaded,
    job: &JobRow,
    jb: &JobBody,
    changed: &[String],
) -> Result<(JobOp, Vec<weft_model::Node>, ClusterBody), String> {
    let Some(report) = &jb.rollout else {
        return Err("not a rollout".into());
    };
    if report.policy.on_failure == OnFailure::Pause {
        return Err("onFailure is pause and a task failed for good: nothing was reverted".into());
    }
    if changed.is_empty() {
        return Err("no node had been changed: nothing to revert".into());
    }
    let only: std::collections::BTreeSet<String> = changed.iter().cloned().collect();
    let batch = report.policy.max_in_flight.of(changed.len());
    let plan = RolloutPlan {
        canaries: 0,
        max_in_flight: weft_model::MaxInFlight::Count(batch as u64),
        gates: false,
        nodes: Some(only.clone()),
    };
    let mut body = c.body.clone();
    match job.action.as_str() {
        "UPGRADE_SERVICE" => {
            let Some(from) = body.upgrade_from.take() else {
                return Err("the service's previous definition was not kept".into());
            };
            let op = Operation::RollbackUpgrade {
                service: from.service.name.clone(),
                batch_size: batch,
                nodes: Some(only),
            };
            Ok((op.into(), with_definition(&c.nodes, &from.service), body))
        }
        "CLUSTER_CONFIGURE" | "CLUSTER_CONFIGURE_WITH_RESTART" => {
            let Some(before) = jb.config_before.clone() else {
                return Err("the previous config was not kept".into());
            };
            body.config = before;
            let restart = job.action.ends_with("RESTART");
            let op = JobOp {
                op: Operation::Reconfigure { restart },
                rollout: Some(plan),
                policy: None,
                config_before: None,
            };
            Ok((op, c.nodes.clone(), body))
        }
        _ => Err(format!(
            "a restart changes nothing that can be reverted; nodes restarted: {}",
            changed.join(", ")
        )),
    }
}

/// Writes what became of a failed rollout into its job's report (and, when nothing was reverted,
/// into the cluster's message).
async fn record_outcome(
    st: &Engine,
    job: &JobRow,
    outcome: Result<(String, Vec<String>), String>,
) -> EngineResult<()> {
    let Some(now) = st.store.get_job(&job.tenant_id, &job.id).await? else {
        return Ok(());
    };
    let mut jb: JobBody = from_body(&now.body)?;
    let Some(report) = jb.rollout.as_mut() else {
        return Ok(());
    };
    let mut cs = ChangeSet::new();
    match outcome {
        Ok((revert, nodes)) => {
            let text = format!("Job {revert} reverts nodes {}.", nodes.join(", "));
            report.outcome = Some(RolloutOutcome::RollingBack);
            report.revert_job = Some(revert);
            report.message = Some(match report.message.take() {
                Some(m) => format!("{m} {text}"),
                None => text,
            });
        }
        Err(why) => {
            tracing::warn!(job_id = %job.id, cluster_id = job.cluster_id, why = %why, "rollout not reverted");
            let text = format!("Not reverted: {why}.");
            report.outcome = Some(RolloutOutcome::NotReverted);
            report.message = Some(match report.message.take() {
                Some(m) => format!("{m} {text}"),
                None => text.clone(),
            });
            if let Some(cluster) = st.store.get_cluster(&job.tenant_id, job.cluster_id).await? {
                let mut c = cluster.clone();
                let mut body: ClusterBody = from_body(&c.body)?;
                body.message = Some(match body.message.take() {
                    Some(m) => format!("{m} {text}"),
                    None => text,
                });
                c.body = to_body(&body)?;
                cs.expect(Expect::cluster(&cluster));
                cs.write(Write::Cluster(c));
            }
        }
    }
    let mut j = now.clone();
    j.body = to_body(&jb)?;
    cs.expect(Expect::job(&now));
    cs.write(Write::Job(j));
    st.store.commit(&cs).await.map_err(store_err)
}
