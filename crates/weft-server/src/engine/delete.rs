//! Deleting a cluster: plan its CLUSTER_DELETE job and start it. Shared by `DELETE /v2/clusters/{id}`
//! and the janitor (expired cluster leases), so both delete the same way.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_model::{ClusterStatus, Node, Service};
use weft_planner::{Operation, PlanInput};
use weft_store::{ChangeSet, ClusterRow, Expect, Write};

use super::body::{from_body, to_body, ClusterBody};
use super::create::{job_id, job_rows};
use super::work::plan_nodes;
use super::{cluster_id_text, notify, store_err, JobEventKind};
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};

/// Starts the CLUSTER_DELETE job of `row` (as read by the caller; the commit expects that
/// revision). Returns the job id, or `None` when the cluster is already terminated (nothing to do).
/// A cluster with a job underway (status pending) is a 409, and so is a cluster that changed since
/// `row` was read.
pub async fn start_delete(st: &AppState, row: &ClusterRow) -> ApiResult<Option<String>> {
    match ClusterStatus::parse(&row.status) {
        Some(ClusterStatus::Terminated) => return Ok(None),
        Some(ClusterStatus::Pending) => {
            return Err(ApiError::Conflict(format!(
                "Job {} is still underway for cluster {}",
                row.latest_job.clone().unwrap_or_default(),
                cluster_id_text(row.id)
            )))
        }
        _ => {}
    }
    let nodes: Vec<Node> = st
        .store
        .list_nodes(&row.tenant_id, row.id)
        .await?
        .iter()
        .map(|n| from_body(&n.body))
        .collect::<ApiResult<_>>()?;
    let mut defs: BTreeMap<String, Service> = BTreeMap::new();
    for n in &nodes {
        for s in &n.services {
            defs.entry(s.name.clone()).or_insert_with(|| s.clone());
        }
    }
    let body: ClusterBody = from_body(&row.body)?;
    let input = PlanInput {
        before: plan_nodes(&nodes),
        after: Vec::new(),
        services: defs.into_values().collect(),
        config: Value::Object(body.config.clone()),
    };
    let plan = weft_planner::plan(&Operation::Delete, &input)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let job_id = job_id(st, row.id).await?;
    let (job, tasks) = job_rows(&row.tenant_id, row.id, &job_id, &plan, now_ms())?;
    let mut cluster = row.clone();
    cluster.status = if job.status == "complete" {
        ClusterStatus::Terminated
    } else {
        ClusterStatus::Pending
    }
    .as_str()
    .into();
    cluster.latest_job = Some(job_id.clone());
    let mut cbody = body;
    cbody.message = None;
    cluster.body = to_body(&cbody)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(row));
    cs.write(Write::Cluster(cluster));
    cs.write(Write::Job(job));
    for t in tasks {
        cs.write(Write::Task(t));
    }
    st.store.commit(&cs).await.map_err(|e| match store_err(e) {
        ApiError::Internal(m) if m.starts_with("stale") => ApiError::Conflict(format!(
            "cluster {} changed while it was being deleted; try again",
            cluster_id_text(row.id)
        )),
        other => other,
    })?;
    tracing::info!(cluster_id = row.id, job_id = %job_id, "cluster delete job started");
    notify(st, JobEventKind::Start, &row.tenant_id, row.id, &job_id);
    Ok(Some(job_id))
}
