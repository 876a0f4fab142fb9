//! Job control: pause, resume and abort a cluster's running job, and abort it on the way to a
//! delete. Each step is one commit guarded by the job's revision (and, where it drops queued tasks,
//! theirs), re-run when it loses a race.
//!
//! An abort marks the job failed and drops its queued tasks, so none of them starts. Tasks already
//! running finish (or time out); the last of them settles the cluster (`work::settle_failed_job`).
//! When nothing is running the abort settles the cluster itself. A delete that asked for the abort
//! is recorded on the cluster (`ClusterBody::delete_requested`): whoever settles the cluster starts
//! the delete (`rollback::after_failed_job`), so a delete never races a task still making a machine.

use weft_model::{ClusterStatus, JobStatus};
use weft_store::{ChangeSet, ClusterRow, Expect, JobRow, TaskRow, TaskState, Write};

use crate::body::{from_body, to_body, ClusterBody, JobBody};
use crate::error::{EngineError, EngineResult};
use crate::jobs::failure_status;
use crate::view::visible;
use crate::{notify, retry_stale, store_err, Caller, Engine, JobEventKind, GATE};

/// What a cluster's latest job is doing, as read with its cluster.
pub struct Running {
    /// The cluster, as read.
    pub cluster: ClusterRow,
    /// Its latest job, as read.
    pub job: JobRow,
}

/// The cluster's latest job while the cluster is pending (a job runs, or its last tasks end).
pub async fn running_job(st: &Engine, row: &ClusterRow) -> EngineResult<Option<Running>> {
    let Some(now) = st.store.get_cluster(&row.tenant_id, row.id).await? else {
        return Ok(None);
    };
    if now.status != ClusterStatus::Pending {
        return Ok(None);
    }
    let Some(job_id) = now.latest_job.clone() else {
        return Ok(None);
    };
    let job = st.store.get_job(&now.tenant_id, &job_id).await?;
    Ok(job.map(|job| Running { cluster: now, job }))
}

/// Pauses the running job of cluster `id`, as `who` sees it (nothing to pause is no error).
pub async fn pause_cluster(st: &Engine, who: &Caller, id: &str) -> EngineResult<()> {
    pause(st, &visible(st, who, id).await?).await
}

/// Resumes the paused job of cluster `id`, as `who` sees it (nothing to resume is no error).
pub async fn resume_cluster(st: &Engine, who: &Caller, id: &str) -> EngineResult<()> {
    resume(st, &visible(st, who, id).await?).await
}

/// Pauses the cluster's running job: its queued tasks go back to waiting; running ones finish.
pub async fn pause(st: &Engine, row: &ClusterRow) -> EngineResult<()> {
    retry_stale(|| async {
        let Some(Running { job, .. }) = running_job(st, row).await? else {
            return Ok(());
        };
        if job.status != JobStatus::Running {
            return Ok(());
        }
        let tasks = tasks_in(st, &job, TaskState::Queued)
            .await?
            .into_iter()
            .map(|mut t| {
                t.state = TaskState::Pending;
                t.deps_remaining = 0;
                t
            })
            .collect();
        set_job(st, &job, JobStatus::Paused, "Paused by user.", tasks).await
    })
    .await
}

/// Resumes a paused job: the tasks whose predecessors are done are queued again.
pub async fn resume(st: &Engine, row: &ClusterRow) -> EngineResult<()> {
    retry_stale(|| async {
        let Some(Running { job, .. }) = running_job(st, row).await? else {
            return Ok(());
        };
        if job.status != JobStatus::Paused {
            return Ok(());
        }
        let now = st.now_ms();
        let tasks = tasks_in(st, &job, TaskState::Pending)
            .await?
            .into_iter()
            .filter(|t| t.deps_remaining == 0 && t.action != GATE)
            .map(|mut t| {
                t.state = TaskState::Queued;
                t.queued_at = now;
                t
            })
            .collect();
        set_job(st, &job, JobStatus::Running, "Resumed by user.", tasks).await
    })
    .await
}

/// `POST .../abort`: aborts a running create (Coopr aborts only creates). A job already ended is
/// nothing to abort; any other job is a 409. When the answer is [`Stopped::Settled`], the caller
/// runs what follows a failed job (`rollback::after_failed_job`); otherwise the last task does.
pub async fn abort(st: &Engine, row: &ClusterRow) -> EngineResult<Stopped> {
    let Some(Running { job, .. }) = running_job(st, row).await? else {
        return Ok(Stopped::Nothing);
    };
    match job.status {
        JobStatus::Failed | JobStatus::Complete => Ok(Stopped::Nothing),
        JobStatus::Running if job.action == "CLUSTER_CREATE" => {
            stop_job(st, row, "Aborted by user.", false).await
        }
        JobStatus::Running | JobStatus::Paused | JobStatus::NotSubmitted => {
            Err(EngineError::CannotAbort)
        }
    }
}

/// What [`stop_job`] left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// No job was running (the cluster is not pending).
    Nothing,
    /// The job is aborted and nothing of it runs: the cluster has settled.
    Settled,
    /// The job is aborted; tasks still running settle the cluster when they end or time out.
    Draining,
}

/// Aborts whatever job the cluster runs (any action, running or paused): the job fails with
/// `message`, its queued tasks are dropped, and the cluster settles now if no task runs. With
/// `then_delete`, the cluster records that a delete waits for the job's end.
pub async fn stop_job(
    st: &Engine,
    row: &ClusterRow,
    message: &str,
    then_delete: bool,
) -> EngineResult<Stopped> {
    let (stopped, ended) = retry_stale(|| stop_step(st, row, message, then_delete)).await?;
    if let Some(job) = ended {
        tracing::info!(cluster_id = row.id, job_id = %job.id, message, "job aborted");
        notify(
            st,
            JobEventKind::Failure,
            &job.tenant_id,
            job.cluster_id,
            &job.id,
        );
        crate::metrics::job_ended(&job.action, false);
    }
    Ok(stopped)
}

/// One try of [`stop_job`]: returns what it left and the job it failed, if it failed one.
async fn stop_step(
    st: &Engine,
    row: &ClusterRow,
    message: &str,
    then_delete: bool,
) -> EngineResult<(Stopped, Option<JobRow>)> {
    let Some(Running { cluster, job }) = running_job(st, row).await? else {
        return Ok((Stopped::Nothing, None));
    };
    let tasks = st.store.list_tasks(&job.tenant_id, &job.id).await?;
    let running = tasks.iter().any(|t| crate::ids::still_busy(t.state, &t.id));
    let active = job.status.is_underway();
    let mut cs = ChangeSet::new();
    if active {
        let mut failed = job.clone();
        failed.status = JobStatus::Failed;
        let mut jb: JobBody = from_body(&job.body)?;
        jb.message = Some(message.into());
        failed.body = to_body(&jb)?;
        cs.expect(Expect::job(&job));
        cs.write(Write::Job(failed));
        // Queued tasks never start: a take of one of them meanwhile makes this commit stale.
        for t in tasks.iter().filter(|t| t.state == TaskState::Queued) {
            let mut dropped = t.clone();
            dropped.state = TaskState::Dropped;
            cs.expect(Expect::task(t));
            cs.write(Write::Task(dropped));
        }
    }
    let mut body: ClusterBody = from_body(&cluster.body)?;
    let mut c = cluster.clone();
    if !running {
        body.message = Some(message.into());
        c.status = failure_status(&job.action);
    }
    body.delete_requested |= then_delete;
    c.body = to_body(&body)?;
    cs.expect(Expect::cluster(&cluster));
    cs.write(Write::Cluster(c));
    st.store.commit(&cs).await.map_err(store_err)?;
    let stopped = if running {
        Stopped::Draining
    } else {
        Stopped::Settled
    };
    Ok((stopped, active.then_some(job)))
}

/// The job's tasks in `state`.
async fn tasks_in(st: &Engine, job: &JobRow, state: TaskState) -> EngineResult<Vec<TaskRow>> {
    Ok(st
        .store
        .list_tasks(&job.tenant_id, &job.id)
        .await?
        .into_iter()
        .filter(|t| t.state == state)
        .collect())
}

/// Sets the job's status and message, and writes `tasks`, in one commit guarded by the job's
/// revision.
async fn set_job(
    st: &Engine,
    job: &JobRow,
    status: JobStatus,
    message: &str,
    tasks: Vec<TaskRow>,
) -> EngineResult<()> {
    let mut j = job.clone();
    j.status = status;
    let mut b: JobBody = from_body(&j.body)?;
    b.message = Some(message.into());
    j.body = to_body(&b)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::job(job));
    cs.write(Write::Job(j));
    for t in tasks {
        cs.expect(Expect::task(&t));
        cs.write(Write::Task(t));
    }
    st.store.commit(&cs).await.map_err(store_err)
}
