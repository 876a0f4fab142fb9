//! Drift checks (weft's extension): what is really there.
//!
//! A check is a job like a health run (see `health`): never the cluster's `latest_job`, leaving
//! its status alone. Each node's provider is asked whether the machine still exists (STATUS,
//! answered as `result.machine`), then each service's health check runs. A missing machine is a
//! finding, not a failed task (see `status_report`). When the check starts, the provisioners
//! are also asked for the machines that carry the cluster's marks (through the `Messenger`, as a
//! provider sweep does); those of no node of the cluster are its orphans. The cluster body keeps
//! the latest check's job and orphans ([`DriftRecord`]); [`report`] reads the rest from the job's
//! tasks.
//!
//! The janitor ([`tend`] on each of the [`active_clusters`]) checks every active cluster of a
//! tenant each `checkInterval` of the tenant, else each `check_interval` of the server (off by
//! default), records what each ended check found on the cluster, and
//! for templates with `autoReplace` replaces one node at a time (at most `auto_replace_per_hour`
//! per cluster and hour): a node whose machine is missing, or stopped with a service found
//! unhealthy, unless the cluster's services were stopped on purpose (its latest job a stop).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use weft_model::{
    AutoReplacement, ClusterStatus, DriftReport, DriftRun, FinishTaskRequest, HealthState,
    MachineReport, MachineState, NodeDrift, ProvisionerAction, SweptMachine, STATUS_RESULT_KEY,
};
use weft_planner::Operation;
use weft_store::{ChangeSet, Expect, JobRow, TaskRow, TaskState, Write};

use crate::body::{from_body, to_body, ClusterBody, DriftRecord, TaskBody};
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{job_id, job_rows, load, plan_in_place, require_status, Loaded};
use crate::view::visible;
use crate::{notify, retry_stale, store_err, Caller, Engine, JobEventKind};

/// The job action of a drift check.
pub const CHECK_ACTION: &str = "CLUSTER_CHECK";

/// How many automatic replacements a cluster remembers.
const KEEP_REPLACEMENTS: usize = 20;

const HOUR_MS: i64 = 3_600_000;

/// `POST /v2/clusters/{id}/check`: starts a check of cluster `id` (as `who` sees it). The
/// cluster must be active or inconsistent.
pub async fn run_check(st: &Engine, who: &Caller, id: &str) -> EngineResult<DriftRun> {
    let row = visible(st, who, id).await?;
    require_status(&row, &[ClusterStatus::Active, ClusterStatus::Inconsistent])?;
    let c = load(st, row).await?;
    start_check(st, &c).await
}

/// Starts a check of a loaded cluster: the orphans are looked for first, then the job, its tasks
/// and the cluster's drift record are committed at once, guarded by the cluster's revision.
#[tracing::instrument(skip_all, fields(cluster_id = c.row.id))]
pub async fn start_check(st: &Engine, c: &Loaded) -> EngineResult<DriftRun> {
    let plan = plan_in_place(c, &Operation::Check { nodes: None })?;
    let (orphans, orphans_unknown) = match find_orphans(st, c).await {
        Ok(found) => (found, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    let job_id = job_id(st, c.row.id).await?;
    let now = st.now_ms();
    let (job, tasks) = job_rows(&c.row.tenant_id, c.row.id, &job_id, &plan, now)?;
    let mut body: ClusterBody = c.body.clone();
    let record = body.drift.get_or_insert_with(DriftRecord::default);
    record.job_id = Some(job_id.clone());
    record.started = now;
    record.orphans = orphans;
    record.orphans_unknown = orphans_unknown;
    let mut row = c.row.clone();
    row.body = to_body(&body)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Cluster(row));
    cs.write(Write::Job(job));
    for t in tasks {
        cs.write(Write::Task(t));
    }
    let cid = cluster_id_text(c.row.id);
    st.store.commit(&cs).await.map_err(|e| match store_err(e) {
        EngineError::Stale(_) => EngineError::ClusterChanged(cid.clone()),
        other => other,
    })?;
    tracing::info!(cluster_id = c.row.id, job_id = %job_id, tasks = plan.tasks.len(), "drift check started");
    notify(st, JobEventKind::Start, &c.row.tenant_id, c.row.id, &job_id);
    Ok(DriftRun {
        cluster_id: cid,
        job_id,
        tasks: plan.tasks.len() as u64,
    })
}

/// The machines with the cluster's marks that belong to none of its nodes, as a provisioner
/// with the cluster's provider type lists them; `Err` says why they could not be listed.
async fn find_orphans(st: &Engine, c: &Loaded) -> Result<Vec<SweptMachine>, String> {
    let current = st
        .providers
        .current(
            st.store.as_ref(),
            &c.row.tenant_id,
            &c.body.provider.name,
            st.clock.monotonic(),
        )
        .await
        .unwrap_or_default();
    let mut fields = Value::Object(c.body.provider_fields(current.as_ref()));
    st.sealer
        .open_all(&c.row.tenant_id, &mut fields)
        .await
        .map_err(|e| e.to_string())?;
    let known: Vec<String> = c.nodes.iter().map(|n| n.id.clone()).collect();
    let found = st
        .messenger
        .machines(
            &c.row.tenant_id,
            &c.body.provider.providertype,
            &fields,
            &known,
        )
        .await?;
    Ok(orphans_of(c, found))
}

/// The machines marked with the cluster (and its tenant) whose node is not one of its nodes.
fn orphans_of(c: &Loaded, found: Vec<SweptMachine>) -> Vec<SweptMachine> {
    let cid = cluster_id_text(c.row.id);
    let known: BTreeSet<&str> = c.nodes.iter().map(|n| n.id.as_str()).collect();
    let mut out: Vec<SweptMachine> = found
        .into_iter()
        .filter(|m| m.cluster == cid && m.tenant == c.row.tenant_id)
        .filter(|m| !known.contains(m.node.as_str()))
        .collect();
    out.sort_by(|a, b| a.providerid.cmp(&b.providerid));
    out
}

/// What a STATUS task found (`None` for other tasks): the provisioner's report under
/// `result.machine`; a provisioner that answered without one, or a failure, leaves it unknown.
pub(crate) fn status_report(task: &TaskRow, req: &FinishTaskRequest) -> Option<MachineReport> {
    if task.action != ProvisionerAction::Status.upper() {
        return None;
    }
    let reported = req
        .result
        .as_ref()
        .and_then(|r| r.get(STATUS_RESULT_KEY))
        .and_then(|v| serde_json::from_value::<MachineReport>(v.clone()).ok());
    Some(match reported {
        Some(r) if req.status == Some(0) => r,
        _ => MachineReport {
            state: MachineState::Unknown,
            message: Some(
                [req.stderr.as_deref(), req.stdout.as_deref()]
                    .into_iter()
                    .flatten()
                    .map(str::trim)
                    .find(|s| !s.is_empty())
                    .map(|s| crate::body::end_of(s, 500).to_string())
                    .unwrap_or_else(|| "the provider did not say".into()),
            ),
        },
    })
}

/// `GET /v2/clusters/{id}/check`: the cluster's latest check (every machine `unknown` when it
/// never had one).
pub async fn latest(st: &Engine, who: &Caller, id: &str) -> EngineResult<DriftReport> {
    let row = visible(st, who, id).await?;
    let c = load(st, row).await?;
    report(st, &c).await
}

/// The report of the cluster's latest check, read from its job's tasks.
pub async fn report(st: &Engine, c: &Loaded) -> EngineResult<DriftReport> {
    let record = c.body.drift.clone().unwrap_or_default();
    let job: Option<JobRow> = match &record.job_id {
        Some(j) => st.store.get_job(&c.row.tenant_id, j).await?,
        None => None,
    };
    let tasks = match &job {
        Some(j) => st.store.list_tasks(&j.tenant_id, &j.id).await?,
        None => Vec::new(),
    };
    let health = crate::health::grid(st, c, job.as_ref()).await?;
    let mut machines: BTreeMap<&str, MachineReport> = BTreeMap::new();
    for t in tasks
        .iter()
        .filter(|t| t.action == ProvisionerAction::Status.upper() && t.state == TaskState::Complete)
    {
        let body: TaskBody = from_body(&t.body)?;
        if let Some(m) = body.machine {
            machines.insert(t.node_id.as_str(), m);
        }
    }
    let nodes: Vec<NodeDrift> = health
        .nodes
        .into_iter()
        .map(|n| {
            let m = machines.get(n.id.as_str());
            NodeDrift {
                machine: m.map_or(MachineState::Unknown, |m| m.state),
                message: m.and_then(|m| m.message.clone()),
                id: n.id,
                hostname: n.hostname,
                nodenum: n.nodenum,
                services: n.services,
            }
        })
        .collect();
    let drift = !record.orphans.is_empty()
        || nodes.iter().any(|n| {
            n.machine.is_drift() || n.services.iter().any(|s| s.state == HealthState::Unhealthy)
        });
    Ok(DriftReport {
        cluster_id: cluster_id_text(c.row.id),
        job_id: job.as_ref().map(|j| j.id.clone()),
        job_status: job
            .map(|j| j.status.as_str().to_string())
            .unwrap_or_default(),
        drift,
        nodes,
        orphans: record.orphans,
        orphans_unknown: record.orphans_unknown,
        replacements: record.replacements,
    })
}

/// What one janitor pass over drift did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftPass {
    /// (cluster id, job id) of the checks started.
    pub checks: Vec<(u64, String)>,
    /// Cluster ids whose ended check was recorded.
    pub recorded: Vec<u64>,
    /// (cluster id, node id, job id) of the replacements started.
    pub replaced: Vec<(u64, String, String)>,
}

/// The active clusters of every tenant whose checks are on, each with its tenant's interval in
/// milliseconds: the tenant's `checkInterval`, else the server's `check_interval` (0: off).
pub async fn active_clusters(st: &Engine) -> EngineResult<Vec<(weft_store::ClusterRow, i64)>> {
    let mut out = Vec::new();
    for tenant in st.store.list_tenants().await? {
        let interval = match tenant.spec.check_interval {
            0 => st.settings.check_interval_ms as i64,
            s => s as i64 * 1000,
        };
        if interval == 0 {
            continue;
        }
        let clusters = st.store.list_clusters(&tenant.id, None).await?;
        out.extend(
            clusters
                .into_iter()
                .filter(|c| c.status == ClusterStatus::Active)
                .map(|c| (c, interval)),
        );
    }
    Ok(out)
}

/// One active cluster's drift work: record its ended check (and replace a node when its template
/// asks for it), and start a new check once the last one is older than `interval` milliseconds. A
/// failure is logged.
pub async fn tend(
    st: &Engine,
    row: weft_store::ClusterRow,
    interval: i64,
    now: i64,
    pass: &mut DriftPass,
) {
    let id = row.id;
    if let Err(e) = tend_one(st, row, now, interval, pass).await {
        tracing::warn!(cluster_id = id, error = %e, "drift check round failed");
    }
}

/// One active cluster's drift work (see [`tend`]).
async fn tend_one(
    st: &Engine,
    row: weft_store::ClusterRow,
    now: i64,
    interval: i64,
    pass: &mut DriftPass,
) -> EngineResult<()> {
    let c = load(st, row).await?;
    let record = c.body.drift.clone().unwrap_or_default();
    if let Some(job_id) = &record.job_id {
        let Some(job) = st.store.get_job(&c.row.tenant_id, job_id).await? else {
            return start(st, &c, pass).await;
        };
        if job.status.is_underway() {
            return Ok(());
        }
        if record.recorded_job.as_deref() != Some(job_id.as_str()) {
            let r = report(st, &c).await?;
            let c = record_findings(st, c, &r).await?;
            pass.recorded.push(c.row.id);
            return auto_replace(st, &c, &r, now, pass).await;
        }
    }
    if now - record.started >= interval {
        start(st, &c, pass).await?;
    }
    Ok(())
}

async fn start(st: &Engine, c: &Loaded, pass: &mut DriftPass) -> EngineResult<()> {
    let run = start_check(st, c).await?;
    pass.checks.push((c.row.id, run.job_id));
    Ok(())
}

/// Writes what check `r` found on the cluster body; answers the cluster as written.
async fn record_findings(st: &Engine, c: Loaded, r: &DriftReport) -> EngineResult<Loaded> {
    let missing: Vec<String> = r
        .nodes
        .iter()
        .filter(|n| n.machine.is_drift())
        .map(|n| n.id.clone())
        .collect();
    let unhealthy: Vec<String> = r
        .nodes
        .iter()
        .flat_map(|n| {
            n.services
                .iter()
                .filter(|s| s.state == HealthState::Unhealthy)
                .map(move |s| format!("{}/{}", n.id, s.service))
        })
        .collect();
    if !missing.is_empty() || !unhealthy.is_empty() || !r.orphans.is_empty() {
        tracing::warn!(cluster_id = c.row.id, job_id = r.job_id.as_deref().unwrap_or(""),
            missing = ?missing, unhealthy = ?unhealthy, orphans = r.orphans.len(), "drift found");
    }
    let mut body = c.body.clone();
    let record = body.drift.get_or_insert_with(DriftRecord::default);
    record.recorded_job = r.job_id.clone();
    record.missing = missing;
    record.unhealthy = unhealthy;
    write_body(st, c, body).await
}

/// Writes a new body on the loaded cluster (compare-and-swap on its revision); answers the
/// cluster as it is after the write.
async fn write_body(st: &Engine, c: Loaded, body: ClusterBody) -> EngineResult<Loaded> {
    let mut row = c.row.clone();
    row.body = to_body(&body)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Cluster(row));
    st.store.commit(&cs).await.map_err(store_err)?;
    let row = st
        .store
        .get_cluster(&c.row.tenant_id, c.row.id)
        .await?
        .ok_or_else(|| EngineError::ClusterNotFound(cluster_id_text(c.row.id)))?;
    load(st, row).await
}

/// The node a template with `autoReplace` would have replaced now, given check `r`: the first
/// (by nodenum) whose machine is missing, or stopped while one of its services is unhealthy.
pub fn replacement_candidate(r: &DriftReport) -> Option<&NodeDrift> {
    r.nodes.iter().find(|n| is_lost(n))
}

/// A node whose machine is missing, or stopped while one of its services is unhealthy.
fn is_lost(n: &NodeDrift) -> bool {
    match n.machine {
        MachineState::Missing => true,
        MachineState::Stopped => n.services.iter().any(|s| s.state == HealthState::Unhealthy),
        _ => false,
    }
}

/// Why automatic replacement must stop on cluster `c` after check `r`: more than one node of a
/// service that holds data (`stateful`, or with a `leave` action) is lost at once, and which copy
/// to rebuild from is an operator's call.
fn lost_stateful(c: &Loaded, r: &DriftReport) -> Option<String> {
    let lost: BTreeSet<&str> = r
        .nodes
        .iter()
        .filter(|n| is_lost(n))
        .map(|n| n.id.as_str())
        .collect();
    let mut by_service: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in c.nodes.iter().filter(|n| lost.contains(n.id.as_str())) {
        for s in n.services.iter().filter(|s| s.holds_data()) {
            by_service
                .entry(s.name.as_str())
                .or_default()
                .push(n.id.as_str());
        }
    }
    let (service, nodes) = by_service.into_iter().find(|(_, v)| v.len() > 1)?;
    Some(format!(
        "Automatic replacement stopped: {} nodes of stateful service {service} are lost at once \
         ({}); replace them by hand (weft cluster replace-node) once it is known which copy of \
         its data to keep.",
        nodes.len(),
        nodes.join(", ")
    ))
}

/// Stops automatic replacement on the cluster: it turns inconsistent with `why` as its message
/// (an event for whoever follows the cluster), once.
async fn hold_replacement(st: &Engine, c: &Loaded, why: String) -> EngineResult<()> {
    if c.body.message.as_deref() == Some(why.as_str()) {
        return Ok(());
    }
    tracing::warn!(cluster_id = c.row.id, reason = %why, "automatic replacement stopped");
    let mut row = c.row.clone();
    let mut body = c.body.clone();
    body.message = Some(why);
    row.status = weft_model::ClusterStatus::Inconsistent;
    row.body = to_body(&body)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Cluster(row));
    st.store.commit(&cs).await.map_err(store_err)
}

/// Replaces one node, when the template asks for it, the cluster's services were not stopped on
/// purpose, and fewer than `auto_replace_per_hour` replacements started in the past hour.
async fn auto_replace(
    st: &Engine,
    c: &Loaded,
    r: &DriftReport,
    now: i64,
    pass: &mut DriftPass,
) -> EngineResult<()> {
    if !c.body.template.auto_replace {
        return Ok(());
    }
    let Some(node) = replacement_candidate(r).map(|n| n.id.clone()) else {
        return Ok(());
    };
    if let Some(why) = lost_stateful(c, r) {
        return hold_replacement(st, c, why).await;
    }
    if let Some(latest) = &c.row.latest_job {
        let stopped = st
            .store
            .get_job(&c.row.tenant_id, latest)
            .await?
            .is_some_and(|j| j.action == "STOP_SERVICES");
        if stopped {
            tracing::info!(cluster_id = c.row.id, node = %node, "services stopped on purpose; not replacing");
            return Ok(());
        }
    }
    let record = c.body.drift.clone().unwrap_or_default();
    let recent = record
        .replacements
        .iter()
        .filter(|a| now - a.at < HOUR_MS)
        .count();
    if recent >= st.settings.auto_replace_per_hour as usize {
        tracing::warn!(cluster_id = c.row.id, node = %node, recent,
            "node not replaced: the hourly bound of automatic replacements is reached");
        return Ok(());
    }
    // The replacement is recorded first (so that the bound holds even if the job then fails to
    // start), then the job starts from the cluster as written.
    let mut body = c.body.clone();
    let rec = body.drift.get_or_insert_with(DriftRecord::default);
    rec.replacements.push(AutoReplacement {
        node: node.clone(),
        job_id: String::new(),
        at: now,
    });
    let keep = rec.replacements.len().saturating_sub(KEEP_REPLACEMENTS);
    rec.replacements.drain(..keep);
    let fresh = write_body(st, load(st, c.row.clone()).await?, body).await?;
    let started =
        match crate::replace::start_replace(st, &fresh, &node, crate::jobs::RunMode::default())
            .await
        {
            Err(EngineError::Unavailable(why)) => {
                let why = format!("Automatic replacement stopped: {why}");
                return hold_replacement(st, &fresh, why).await;
            }
            other => other?,
        };
    let job_id = started.plan.id.clone();
    // Name the job in the record (best effort: the job runs either way).
    let _ = retry_stale(|| async {
        let row = st
            .store
            .get_cluster(&c.row.tenant_id, c.row.id)
            .await?
            .ok_or_else(|| EngineError::ClusterNotFound(cluster_id_text(c.row.id)))?;
        let now_loaded = load(st, row).await?;
        let mut body = now_loaded.body.clone();
        if let Some(a) = body
            .drift
            .as_mut()
            .and_then(|d| d.replacements.iter_mut().rev().find(|a| a.node == node))
        {
            a.job_id = job_id.clone();
        }
        write_body(st, now_loaded, body).await.map(|_| ())
    })
    .await;
    tracing::warn!(cluster_id = c.row.id, node = %node, job_id = %job_id, "node replaced automatically");
    pass.replaced.push((c.row.id, node, job_id));
    Ok(())
}
