//! Health runs (weft's extension): a job that runs the `healthcheck` action of every service that
//! declares one, and the node x service grid of what the latest run found.
//!
//! A health run changes neither the cluster's layout nor its status, and it is never the cluster's
//! `latest_job`: the cluster stays active while it runs and after it ends, whatever it finds, and
//! lifecycle operations are not blocked by it. An unhealthy service is a finding recorded on its
//! task (see `work::health_report`), never a failed job. The checks use the service definitions
//! the nodes were built with, as every other task of the cluster does.
//!
//! [`start_checks`] and [`grid`] take a loaded cluster and are what a later health gate (a rolling
//! change checking each batch) would call; [`run_checks`] and [`latest`] are the API's entries.

use std::collections::{BTreeMap, BTreeSet};

use weft_model::{
    ClusterHealth, ClusterStatus, HealthRun, HealthState, NodeHealth, ProvisionerAction,
    ServiceHealth,
};
use weft_planner::Operation;
use weft_store::{ChangeSet, Expect, JobRow, TaskRow, TaskState, Write};

use crate::body::{end_of, from_body, TaskBody};
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{job_id, job_rows, load, plan_in_place, require_status, Loaded};
use crate::view::visible;
use crate::{notify, store_err, Caller, Engine, JobEventKind};

/// The job action of a health run.
pub const HEALTH_ACTION: &str = "CLUSTER_HEALTHCHECK";

/// How much of a check's output the grid shows (its end).
const MAX_OUTPUT: usize = 2000;

/// `POST /v2/clusters/{id}/health`: starts a health run on every node of cluster `id` (as `who`
/// sees it). The cluster must be active (or inconsistent: a failed change is when one wants to know).
pub async fn run_checks(st: &Engine, who: &Caller, id: &str) -> EngineResult<HealthRun> {
    let row = visible(st, who, id).await?;
    require_status(&row, &[ClusterStatus::Active, ClusterStatus::Inconsistent])?;
    let c = load(st, row).await?;
    start_checks(st, &c, None).await
}

/// Starts a health run on the cluster's nodes (or only on `nodes`): one commit of the job and its
/// tasks, guarded by the cluster's revision; the cluster row itself is not written.
#[tracing::instrument(skip_all, fields(cluster_id = c.row.id))]
pub async fn start_checks(
    st: &Engine,
    c: &Loaded,
    nodes: Option<BTreeSet<String>>,
) -> EngineResult<HealthRun> {
    let plan = plan_in_place(c, &Operation::Healthcheck { nodes })?;
    let job_id = job_id(st, c.row.id).await?;
    let (job, tasks) = job_rows(&c.row.tenant_id, c.row.id, &job_id, &plan, st.now_ms())?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Job(job));
    for t in tasks {
        cs.write(Write::Task(t));
    }
    let cid = cluster_id_text(c.row.id);
    st.store.commit(&cs).await.map_err(|e| match store_err(e) {
        EngineError::Stale(_) => EngineError::ClusterChanged(cid.clone()),
        other => other,
    })?;
    tracing::info!(cluster_id = c.row.id, job_id = %job_id, checks = plan.tasks.len(), "health run started");
    notify(st, JobEventKind::Start, &c.row.tenant_id, c.row.id, &job_id);
    Ok(HealthRun {
        cluster_id: cid,
        job_id,
        checks: plan.tasks.len() as u64,
    })
}

/// `GET /v2/clusters/{id}/health`: the grid of the cluster's latest health run (every checked
/// service `unknown` when it never had one).
pub async fn latest(st: &Engine, who: &Caller, id: &str) -> EngineResult<ClusterHealth> {
    let row = visible(st, who, id).await?;
    let c = load(st, row).await?;
    let jobs = st.store.list_jobs(&c.row.tenant_id, c.row.id).await?;
    // Newest first.
    let job = jobs.into_iter().find(|j| j.action == HEALTH_ACTION);
    grid(st, &c, job.as_ref()).await
}

/// The node x service grid of health run `job` on the cluster's current nodes (services a node no
/// longer has are left out; ones the run did not check are `unknown`, or `none` without a check).
pub async fn grid(st: &Engine, c: &Loaded, job: Option<&JobRow>) -> EngineResult<ClusterHealth> {
    let tasks = match job {
        Some(j) => st.store.list_tasks(&j.tenant_id, &j.id).await?,
        None => Vec::new(),
    };
    let by_cell: BTreeMap<(&str, &str), &TaskRow> = tasks
        .iter()
        .filter(|t| t.action == ProvisionerAction::Healthcheck.upper())
        .map(|t| ((t.node_id.as_str(), t.service.as_str()), t))
        .collect();
    let mut nodes: Vec<NodeHealth> = Vec::with_capacity(c.nodes.len());
    for n in &c.nodes {
        let mut services = Vec::with_capacity(n.services.len());
        for s in &n.services {
            let declared = s
                .provisioner
                .actions
                .contains_key(&ProvisionerAction::Healthcheck);
            let task = by_cell.get(&(n.id.as_str(), s.name.as_str())).copied();
            services.push(cell(&s.name, declared, task)?);
        }
        nodes.push(NodeHealth {
            id: n.id.clone(),
            hostname: n.properties.hostname.clone().unwrap_or_default(),
            nodenum: n.properties.nodenum,
            services,
        });
    }
    nodes.sort_by_key(|n| n.nodenum);
    let healthy = nodes
        .iter()
        .flat_map(|n| &n.services)
        .all(|s| matches!(s.state, HealthState::Healthy | HealthState::None));
    Ok(ClusterHealth {
        cluster_id: cluster_id_text(c.row.id),
        job_id: job.map(|j| j.id.clone()),
        job_status: job
            .map(|j| j.status.as_str().to_string())
            .unwrap_or_default(),
        healthy,
        nodes,
    })
}

/// One cell: what the check's task found, if it finished.
fn cell(service: &str, declared: bool, task: Option<&TaskRow>) -> EngineResult<ServiceHealth> {
    let mut out = ServiceHealth {
        service: service.to_string(),
        state: if declared {
            HealthState::Unknown
        } else {
            HealthState::None
        },
        tries: None,
        checked_at: None,
        output: None,
    };
    let Some(task) = task.filter(|t| t.state == TaskState::Complete) else {
        return Ok(out);
    };
    let body: TaskBody = from_body(&task.body)?;
    let Some(report) = body.health else {
        return Ok(out);
    };
    out.state = if report.healthy {
        HealthState::Healthy
    } else {
        HealthState::Unhealthy
    };
    out.tries = Some(report.tries);
    out.checked_at = (body.finish_time > 0).then_some(body.finish_time);
    let text: Vec<&str> = [
        report.message.as_deref(),
        body.stdout.as_deref(),
        body.stderr.as_deref(),
    ]
    .into_iter()
    .flatten()
    .map(str::trim)
    .filter(|s| !s.is_empty())
    .collect();
    out.output = (!text.is_empty()).then(|| end_of(&text.join("\n"), MAX_OUTPUT).to_string());
    Ok(out)
}
