//! Health gates of rolling changes: a HEALTHCHECK task of a rollout job that finds its service
//! unhealthy stops the rollout before its next batch (the next batch waits for every check of the
//! gate). What happens then is the job's `onFailure`:
//! - `pause`: the job pauses, its queued tasks go back to waiting, and the failed check waits too,
//!   so that resuming the job after a fix runs the check again;
//! - `rollback`: the job fails (its queued tasks are dropped) and what follows a failed job
//!   (`rollback::after_failed_job`) reverts the nodes the rollout changed.
//!
//! The job's rollout report names the check that failed and what was done.

use weft_model::{GateFailure, JobStatus, OnFailure, RolloutOutcome};
use weft_store::{ChangeSet, Expect, JobRow, TaskRow, TaskState, Write};

use crate::body::{end_of, from_body, to_body, ClusterBody, JobBody, TaskBody};
use crate::error::EngineResult;
use crate::Engine;

/// The rollout job of an unhealthy gate check, if `task` is one (read only then: gates are rare).
pub(crate) async fn rollout_job(st: &Engine, task: &TaskRow) -> EngineResult<Option<JobRow>> {
    let Some(job) = st.store.get_job(&task.tenant_id, &task.job_id).await? else {
        return Ok(None);
    };
    let body: JobBody = from_body(&job.body)?;
    Ok(body.rollout.is_some().then_some(job))
}

/// How a stopped rollout leaves its job.
pub(crate) enum Stop {
    /// The job is paused (all written to the change set).
    Paused,
    /// The job, failed: the caller settles the cluster and starts what follows.
    Failed(Box<JobRow>),
}

/// Adds to `cs` what a failed gate check does: the check's task (`done`, with its result in
/// `tbody`), the job's status, report and queued tasks, and for a pause the cluster's message.
pub(crate) async fn stop_rollout(
    st: &Engine,
    cs: &mut ChangeSet,
    mut done: TaskRow,
    mut tbody: TaskBody,
    job: &JobRow,
) -> EngineResult<Stop> {
    let mut jb: JobBody = from_body(&job.body)?;
    let why = tbody
        .health
        .as_ref()
        .and_then(|h| h.message.clone())
        .unwrap_or_else(|| "unhealthy".into());
    let Some(report) = jb.rollout.as_mut() else {
        return Err(crate::error::EngineError::Internal("not a rollout".into()));
    };
    let pause = report.policy.on_failure == OnFailure::Pause;
    let message = format!(
        "Health gate failed: {} on node {} is unhealthy ({}). {}",
        done.service,
        done.node_id,
        end_of(why.trim(), 300),
        if pause {
            "The rollout is paused before its next batch; resume the job after a fix."
        } else {
            "The rollout stopped before its next batch (onFailure: rollback)."
        }
    );
    report.failed_gate = Some(GateFailure {
        node: done.node_id.clone(),
        service: done.service.clone(),
        task_id: done.id.clone(),
        message: why,
    });
    report.outcome = pause.then_some(RolloutOutcome::Paused);
    report.message = Some(message.clone());
    jb.message = Some(message.clone());
    tbody.message = Some(message.clone());

    done.lease_owner = None;
    let (status, queued_to) = if pause {
        done.state = TaskState::Pending;
        done.deps_remaining = 0;
        (JobStatus::Paused, TaskState::Pending)
    } else {
        done.state = TaskState::Failed;
        (JobStatus::Failed, TaskState::Dropped)
    };
    done.body = to_body(&tbody)?;
    cs.write(Write::Task(done.clone()));
    // Queued tasks (checks of the same gate) wait, or never start; a take meanwhile makes the
    // commit stale.
    for t in st.store.list_tasks(&job.tenant_id, &job.id).await? {
        if t.state == TaskState::Queued && t.id != done.id {
            let mut w = t.clone();
            w.state = queued_to;
            w.deps_remaining = 0;
            cs.expect(Expect::task(&t));
            cs.write(Write::Task(w));
        }
    }
    let mut stopped = job.clone();
    stopped.status = status;
    stopped.body = to_body(&jb)?;
    if !pause {
        return Ok(Stop::Failed(Box::new(stopped)));
    }
    cs.expect(Expect::job(job));
    cs.write(Write::Job(stopped));
    if let Some(cluster) = st.store.get_cluster(&job.tenant_id, job.cluster_id).await? {
        let mut c = cluster.clone();
        let mut body: ClusterBody = from_body(&c.body)?;
        body.message = Some(message);
        c.body = to_body(&body)?;
        cs.expect(Expect::cluster(&cluster));
        cs.write(Write::Cluster(c));
    }
    Ok(Stop::Paused)
}
