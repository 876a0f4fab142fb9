//! The janitor: the background work no request triggers (Coopr's `ClusterCleanup`).
//!
//! [`run_once`] is one round at a given time: tasks whose lease ran out fail (status -1, through the
//! same retry and failure logic as a worker's finish), jobs whose end gate completed without the
//! job (a server stopped in between) complete, clusters whose lease ran out get their
//! CLUSTER_DELETE job, and provisioners silent for longer than `provisioner_timeout` are dropped and
//! their tenants' workers placed elsewhere; with `check_interval`, active clusters are checked for
//! drift and nodes of `autoReplace` templates replaced (see `drift`). Tests call it with a chosen
//! `now`.
//!
//! Several servers may share one PostgreSQL database; only the one holding the store's `janitor`
//! lease ([`weft_store::Lease`], as long as `janitor_interval`) runs rounds. [`Janitor::lead`] is
//! one leadership step (renew the lease, notice it is lost, try to take it); [`spawn`] takes that
//! step every third of the lease and runs a round every `janitor_interval`. A round checks the
//! lease before each item and ends as soon as it is lost (a leader that was stopped and woke up),
//! and the items' writes are compare-and-swap on the rows' revisions, so whatever a stale leader
//! read before it stopped cannot overwrite the new leader's work.

use std::time::Duration;

use weft_store::Lease;

use super::delete::start_delete;
use super::work::{complete_job, fail_expired, fail_over_leases};
use crate::error::EngineResult;
use crate::workers;
use crate::Engine;

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
    /// Drift checks started and recorded, nodes replaced (only with `check_interval`).
    pub drift: crate::drift::DriftPass,
    /// Idle clusters warned and stopped (templates with an `idle` policy).
    pub idle: crate::idle::IdlePass,
}

/// One janitor round at time `now` (milliseconds since the epoch). A failure on one task or
/// cluster is logged and the round goes on with the next one; only store errors while listing
/// abort the round.
pub async fn run_once(st: &Engine, now: i64) -> EngineResult<JanitorReport> {
    run_pass(st, now, None).await
}

/// Whether a leader's round may go on: while its lease holds (renewed past half), always for a
/// round without one.
async fn may_go_on(st: &Engine, lease: &mut Option<&mut Lease>) -> bool {
    let Some(l) = lease else { return true };
    if l.keep(&*st.store, st.now_ms()).await {
        return true;
    }
    tracing::warn!(
        role = ROLE,
        term = l.term(),
        "janitor leadership lost; round ends"
    );
    false
}

/// [`run_once`], ended early once `lease` (if given) is lost.
async fn run_pass(
    st: &Engine,
    now: i64,
    mut lease: Option<&mut Lease>,
) -> EngineResult<JanitorReport> {
    let mut report = JanitorReport::default();
    let finished = time_out_tasks(st, now, &mut lease, &mut report).await?
        && complete_ended_jobs(st, &mut lease, &mut report).await?
        && delete_expired_clusters(st, now, &mut lease, &mut report).await?
        && give_hosts_back(st, now, &mut lease).await
        && drop_silent_provisioners(st, now, &mut lease, &mut report).await?
        && check_drift(st, now, &mut lease, &mut report).await?
        && tend_idle(st, now, &mut lease, &mut report).await
        && purge_audit(st, now).await
        && purge_events(st, now).await;
    if finished && !report.dropped_provisioners.is_empty() {
        workers::rebalance(st).await?;
    }
    Ok(report)
}

/// The audit trail: records whose request's change committed but whose answer never came (its
/// server stopped) are chained, then records older than the retention setting go (a failure is
/// logged; the next round tries again).
async fn purge_audit(st: &Engine, now: i64) -> bool {
    match crate::audit::settle(st, now).await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(records = n, "audit records of unanswered requests chained"),
        Err(e) => {
            tracing::warn!(error = %e, "chaining unanswered audit records failed; the next round tries again")
        }
    }
    let keep = st.settings.audit_retention_ms;
    if keep <= 0 {
        return true;
    }
    match crate::audit::purge(st, now, keep).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(records = n, "audit records past their retention removed"),
        Err(e) => tracing::warn!(error = %e, "audit retention failed; the next round tries again"),
    }
    true
}

/// Retention of the event stream's backlog and of the webhooks' delivery log (a failure is logged;
/// the next round tries again).
async fn purge_events(st: &Engine, now: i64) -> bool {
    let keep = st.settings.event_retention_ms;
    if keep <= 0 {
        return true;
    }
    match crate::feed::purge(st, now, keep).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(events = n, "events past their retention removed"),
        Err(e) => tracing::warn!(error = %e, "event retention failed; the next round tries again"),
    }
    // The delivery log of webhooks goes with the events it delivered.
    if let Err(e) = st.store.purge_deliveries(now.saturating_sub(keep)).await {
        tracing::warn!(error = %e, "webhook delivery log retention failed; the next round tries again");
    }
    true
}

/// Drift checks of active clusters, and automatic replacements (see `drift`); off unless the
/// server's `check_interval` or a tenant's `checkInterval` is set. A failure on one cluster is
/// logged; the round goes on.
async fn check_drift(
    st: &Engine,
    now: i64,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> EngineResult<bool> {
    for (row, interval) in crate::drift::active_clusters(st).await? {
        if !may_go_on(st, lease).await {
            return Ok(false);
        }
        crate::drift::tend(st, row, interval, now, &mut report.drift).await;
    }
    Ok(true)
}

/// Idle clusters: warned, then stopped, as their templates say (a failure is logged; the next
/// pass tries again).
async fn tend_idle(
    st: &Engine,
    now: i64,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> bool {
    if !may_go_on(st, lease).await {
        return false;
    }
    match crate::idle::tend(st, now).await {
        Ok(pass) => report.idle = pass,
        Err(e) => tracing::error!(error = %e, "idle clusters not checked"),
    }
    true
}

/// Fails the tasks whose lease ran out (each then retries or fails its job). Each step of a pass
/// answers whether the pass may go on: false once the leadership is lost.
async fn time_out_tasks(
    st: &Engine,
    now: i64,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> EngineResult<bool> {
    let timeout_s = st.settings.task_timeout_ms / 1000;
    for task in st.store.expired_tasks(now).await? {
        if !may_go_on(st, lease).await {
            return Ok(false);
        }
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
    Ok(true)
}

/// Completes jobs whose end gate completed when a server stopped before the job did.
async fn complete_ended_jobs(
    st: &Engine,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> EngineResult<bool> {
    for job in st.store.ended_jobs().await? {
        if !may_go_on(st, lease).await {
            return Ok(false);
        }
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
    Ok(true)
}

/// Starts the delete of every cluster whose lease ran out.
async fn delete_expired_clusters(
    st: &Engine,
    now: i64,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> EngineResult<bool> {
    for cluster in st.store.expired_clusters(now).await? {
        if !may_go_on(st, lease).await {
            return Ok(false);
        }
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
    Ok(true)
}

/// Host pools: hosts whose node is gone or whose cluster is terminated go back to their pool.
async fn give_hosts_back(st: &Engine, now: i64, lease: &mut Option<&mut Lease>) -> bool {
    if !may_go_on(st, lease).await {
        return false;
    }
    if let Err(e) = crate::hostpool::sweep(st, now).await {
        tracing::warn!(error = %e, "giving pool hosts back");
    }
    true
}

/// Drops provisioners that missed their heartbeats and fails over the tasks they held.
async fn drop_silent_provisioners(
    st: &Engine,
    now: i64,
    lease: &mut Option<&mut Lease>,
    report: &mut JanitorReport,
) -> EngineResult<bool> {
    let silent_since = now - st.settings.provisioner_timeout_ms;
    for p in st.store.list_provisioners().await? {
        if !may_go_on(st, lease).await {
            return Ok(false);
        }
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
    Ok(true)
}

/// One server's janitor: its lease on the leadership, if it holds it.
pub struct Janitor {
    st: Engine,
    /// Who this janitor is in the `leaders` row: `<host>/<pid>/<random>`.
    holder: String,
    lease: Option<Lease>,
}

impl Janitor {
    /// A janitor for this server, not holding the leadership yet; its holder name is
    /// `<host>/<pid>/<random>`.
    pub fn new(st: Engine) -> Janitor {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        let host = host.trim();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let holder = format!(
            "{}/{}/{}",
            if host.is_empty() { "host" } else { host },
            std::process::id(),
            &id[..8]
        );
        Janitor {
            st,
            holder,
            lease: None,
        }
    }

    /// This janitor's name in the store's `leaders` row.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// One leadership step now: see [`lead_at`](Janitor::lead_at).
    pub async fn lead(&mut self) -> EngineResult<bool> {
        self.lead_at(self.st.now_ms()).await
    }

    /// One leadership step at `now`: renews a held lease (dropping it if it is lost), or tries to
    /// take the lease. Returns whether this server leads now.
    pub async fn lead_at(&mut self, now: i64) -> EngineResult<bool> {
        let store = &*self.st.store;
        if let Some(l) = self.lease.as_mut() {
            if l.renew(store, now).await? {
                return Ok(true);
            }
            tracing::warn!(role = ROLE, term = l.term(), "janitor leadership lost");
            self.lease = None;
        }
        let lease_ms = self.st.settings.janitor_interval_ms as i64;
        self.lease = Lease::take(store, ROLE, &self.holder, lease_ms, now).await?;
        if let Some(l) = &self.lease {
            tracing::info!(role = ROLE, term = l.term(), holder = %self.holder, "this server now runs the janitor");
        }
        Ok(self.lease.is_some())
    }

    /// Whether the last [`lead`](Janitor::lead) left this server leading.
    pub fn is_leader(&self) -> bool {
        self.lease.is_some()
    }

    /// One tick of the loop: [`lead_at`](Janitor::lead_at), then a round at `now` if leading,
    /// which ends early if the lease is lost meanwhile.
    pub async fn tick(&mut self, now: i64) -> EngineResult<Option<JanitorReport>> {
        if !self.lead_at(now).await? {
            return Ok(None);
        }
        run_pass(&self.st, now, self.lease.as_mut()).await.map(Some)
    }

    /// Gives the leadership up at once, so another server's next step takes it.
    pub async fn resign(&mut self) {
        if let Some(l) = self.lease.take() {
            if let Err(e) = l.resign(&*self.st.store).await {
                tracing::warn!(role = ROLE, error = %e, "resigning janitor leadership");
            }
        }
    }
}

/// Runs the janitor for as long as the returned task lives: a leadership step every third of the
/// lease (`janitor_interval`), and a round every `janitor_interval` while leading (at once after
/// taking over). Errors are logged; the next tick tries again.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    let interval = st.settings.janitor_interval_ms.max(3) as i64;
    let every = Duration::from_millis(interval as u64 / 3);
    tokio::spawn(async move {
        let mut janitor = Janitor::new(st);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_round = 0;
        loop {
            ticks.tick().await;
            let now = janitor.st.now_ms();
            let was_leader = janitor.is_leader();
            match janitor.lead_at(now).await {
                Ok(true) if !was_leader || now >= next_round => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "janitor leadership step failed");
                    continue;
                }
            }
            next_round = now + interval;
            match run_pass(&janitor.st, now, janitor.lease.as_mut()).await {
                Ok(r) if r != JanitorReport::default() => {
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
