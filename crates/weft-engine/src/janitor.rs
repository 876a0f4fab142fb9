//! The janitor: the background work no request triggers (Coopr's `ClusterCleanup`).
//!
//! [`run_once`] is one round at a given time: tasks whose lease ran out fail (status -1, through the
//! same retry and failure logic as a worker's finish), jobs whose end gate completed without the
//! job (a server stopped in between) complete, clusters whose lease ran out get their
//! CLUSTER_DELETE job, and provisioners silent for longer than `provisioner_timeout` are dropped and
//! their tenants' workers placed elsewhere. Tests call it with a chosen `now`.
//!
//! Several servers may share one PostgreSQL database; only the one holding the store's `janitor`
//! leadership ([`weft_store::Store::try_lead`]) runs rounds. [`Janitor::lead`] is one leadership
//! step (keep it, notice it is lost, try to take it); [`spawn`] runs lead-then-round every
//! `janitor_interval`.

use std::time::Duration;

use weft_store::LeaderGuard;

use super::delete::start_delete;
use super::work::{complete_job, fail_expired, fail_over_leases};
use crate::error::EngineResult;
use crate::workers;
use crate::{now_ms, Engine};

/// The leadership role name the janitor takes in the store.
pub const ROLE: &str = "janitor";

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorReport {
    /// Ids of the tasks failed because their lease ran out.
    pub timed_out_tasks: Vec<String>,
    /// (cluster id, CLUSTER_DELETE job id) of the clusters whose lease ran out.
    pub expired_clusters: Vec<(u64, String)>,
    /// Ids of the provisioners dropped for missing heartbeats.
    pub dropped_provisioners: Vec<String>,
    /// Ids of the tasks a dropped provisioner held, failed over before their lease ran out.
    pub failed_over_tasks: Vec<String>,
    /// Ids of the jobs completed because their end gate was complete (a server stopped between).
    pub completed_jobs: Vec<String>,
}

/// One janitor round at time `now` (milliseconds since the epoch). A failure on one task or
/// cluster is logged and the round goes on with the next one; only store errors while listing
/// abort the round.
pub async fn run_once(st: &Engine, now: i64) -> EngineResult<JanitorReport> {
    let mut report = JanitorReport::default();
    let timeout_s = st.settings.task_timeout_ms / 1000;
    for task in st.store.expired_tasks(now).await? {
        let message = format!("timed out after {timeout_s} s");
        match fail_expired(st, &task, now, &message).await {
            Ok(()) => {
                tracing::warn!(task_id = %task.id, job_id = %task.job_id, cluster_id = task.cluster_id,
                    owner = task.lease_owner.as_deref().unwrap_or(""), "task lease expired; task failed");
                report.timed_out_tasks.push(task.id.clone());
            }
            Err(e) => {
                tracing::error!(task_id = %task.id, job_id = %task.job_id, cluster_id = task.cluster_id,
                    error = %e, "could not time out task");
            }
        }
    }
    for job in st.store.ended_jobs().await? {
        // A server stopped between completing a job's end gate and the job.
        match complete_job(st, &job.tenant_id, &job.id).await {
            Ok(()) => {
                tracing::info!(job_id = %job.id, cluster_id = job.cluster_id, "ended job completed");
                report.completed_jobs.push(job.id.clone());
            }
            Err(e) => {
                tracing::error!(job_id = %job.id, cluster_id = job.cluster_id, error = %e,
                    "could not complete ended job");
            }
        }
    }
    for cluster in st.store.expired_clusters(now).await? {
        match start_delete(st, &cluster).await {
            Ok(Some(job_id)) => {
                tracing::info!(cluster_id = cluster.id, job_id = %job_id, "cluster lease expired; deleting");
                report.expired_clusters.push((cluster.id, job_id));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(cluster_id = cluster.id, error = %e, "could not delete expired cluster");
            }
        }
    }
    // Host pools: hosts whose node is gone or whose cluster is terminated go back to their pool.
    if let Err(e) = crate::hostpool::sweep(st, now).await {
        tracing::warn!(error = %e, "giving pool hosts back");
    }
    let silent_since = now - st.settings.provisioner_timeout_ms;
    for p in st.store.list_provisioners().await? {
        if p.last_heartbeat_ms < silent_since && st.store.delete_provisioner(&p.id).await? {
            st.provisioners.forget(&p.id);
            tracing::warn!(provisioner = %p.id, last_heartbeat_ms = p.last_heartbeat_ms,
                "provisioner missed its heartbeats; dropped");
            let why = format!("provisioner {} missed its heartbeats", p.id);
            report
                .failed_over_tasks
                .extend(fail_over_leases(st, &p.id, &why).await?);
            report.dropped_provisioners.push(p.id);
        }
    }
    if !report.dropped_provisioners.is_empty() {
        workers::rebalance(st).await?;
    }
    Ok(report)
}

/// One server's janitor: its leadership, if it holds it.
pub struct Janitor {
    st: Engine,
    guard: Option<LeaderGuard>,
}

impl Janitor {
    pub fn new(st: Engine) -> Janitor {
        Janitor { st, guard: None }
    }

    /// One leadership step: checks that a held leadership is still held (dropping it if not), or
    /// tries to take it. Returns whether this server leads now.
    pub async fn lead(&mut self) -> EngineResult<bool> {
        if let Some(g) = self.guard.as_mut() {
            if g.is_held().await {
                return Ok(true);
            }
            tracing::warn!(role = ROLE, "janitor leadership lost");
            self.guard = None;
        }
        self.guard = self.st.store.try_lead(ROLE).await?;
        if self.guard.is_some() {
            tracing::info!(role = ROLE, "this server now runs the janitor");
        }
        Ok(self.guard.is_some())
    }

    /// Whether the last [`lead`](Janitor::lead) left this server leading.
    pub fn is_leader(&self) -> bool {
        self.guard.is_some()
    }

    /// One tick of the loop: [`lead`](Janitor::lead), then [`run_once`] at `now` if leading.
    pub async fn tick(&mut self, now: i64) -> EngineResult<Option<JanitorReport>> {
        if !self.lead().await? {
            return Ok(None);
        }
        run_once(&self.st, now).await.map(Some)
    }

    /// Gives the leadership up at once, so another server's next step takes it.
    pub async fn resign(&mut self) {
        if let Some(g) = self.guard.take() {
            if let Err(e) = g.release().await {
                tracing::warn!(role = ROLE, error = %e, "releasing janitor leadership");
            }
        }
    }
}

/// Runs the janitor every `janitor_interval` for as long as the returned task lives. Errors are
/// logged; the next tick tries again.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    let every = Duration::from_millis(st.settings.janitor_interval_ms.max(1));
    tokio::spawn(async move {
        let mut janitor = Janitor::new(st);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match janitor.tick(now_ms()).await {
                Ok(Some(r)) if r != JanitorReport::default() => {
                    tracing::info!(
                        timed_out_tasks = r.timed_out_tasks.len(),
                        expired_clusters = r.expired_clusters.len(),
                        dropped_provisioners = r.dropped_provisioners.len(),
                        "janitor round"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "janitor round failed"),
            }
        }
    })
}
