//! Idle clusters: a template's `administration.idle` policy (`weft_model::IdlePolicy`). An
//! active cluster whose latest job is older than `hours` is idle (`view::idle_since`); with
//! `autoStop` the janitor first records an `IDLE_WARNING` job on it (a job of no task: an event
//! on the stream and to webhooks, and a line in the cluster's job history) `warnHours` before,
//! then stops its services with a forced STOP_SERVICES job, or deletes the cluster with
//! `deleteMachines`. A cluster whose services were stopped (on purpose or by this) is left
//! alone until it changes again. The janitor looks at most once a minute.

use std::sync::atomic::Ordering;

use weft_model::{ClusterStatus, JobStatus};
use weft_planner::Operation;
use weft_store::{ChangeSet, ClusterRow, Expect, JobRow, Write};

use crate::body::{from_body, to_body, ClusterBody, JobBody};
use crate::error::EngineResult;
use crate::jobs::{job_id, load, RunMode};
use crate::Engine;

/// How often the janitor looks for idle clusters.
const EVERY_MS: i64 = 60_000;

/// What a pass did: (cluster id, job id) of the warnings recorded and the stops (or deletes)
/// started.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IdlePass {
    /// Warnings recorded.
    pub warned: Vec<(u64, String)>,
    /// Stops or deletes started.
    pub stopped: Vec<(u64, String)>,
}

/// One pass over every tenant's active clusters of templates with an `autoStop` policy, unless
/// one ran less than a minute ago. A failure on one cluster is logged; the pass goes on.
pub async fn tend(st: &Engine, now: i64) -> EngineResult<IdlePass> {
    let mut pass = IdlePass::default();
    let last = st.idle_pass_at.load(Ordering::Relaxed);
    if last != 0 && now - last < EVERY_MS {
        return Ok(pass);
    }
    st.idle_pass_at.store(now, Ordering::Relaxed);
    for tenant in st.store.list_tenants().await? {
        for row in st.store.list_clusters(&tenant.id, None).await? {
            if row.status != ClusterStatus::Active {
                continue;
            }
            if let Err(e) = tend_one(st, &row, now, &mut pass).await {
                tracing::warn!(cluster_id = row.id, error = %e, "idle policy not applied");
            }
        }
    }
    Ok(pass)
}

async fn tend_one(
    st: &Engine,
    row: &ClusterRow,
    now: i64,
    pass: &mut IdlePass,
) -> EngineResult<()> {
    let body: ClusterBody = from_body(&row.body)?;
    let Some(policy) = body
        .template
        .administration
        .idle
        .clone()
        .filter(|p| p.auto_stop)
    else {
        return Ok(());
    };
    let latest = match &row.latest_job {
        Some(j) => st.store.get_job(&row.tenant_id, j).await?,
        None => None,
    };
    let (since, action) = latest.as_ref().map_or((row.create_time, ""), |j| {
        (j.create_time, j.action.as_str())
    });
    if action == "STOP_SERVICES" || action == "CLUSTER_DELETE" {
        return Ok(());
    }
    if now - since >= policy.idle_ms() {
        let c = load(st, row.clone()).await?;
        let job = if policy.delete_machines {
            crate::delete::start_delete(st, row).await?
        } else {
            let stop = Operation::Stop { service: None };
            let forced = RunMode {
                dry_run: false,
                force: true,
            };
            crate::ops::in_place(st, &c, stop, c.body.clone(), forced).await?;
            st.store
                .get_cluster(&row.tenant_id, row.id)
                .await?
                .and_then(|r| r.latest_job)
        };
        tracing::warn!(
            cluster_id = row.id,
            idle_since = since,
            "idle cluster stopped by its template's policy"
        );
        pass.stopped.push((row.id, job.unwrap_or_default()));
    } else if now - since >= policy.warn_ms() && body.idle_warned != Some(since) {
        let id = warn(st, row, body, since, policy.idle_ms(), now).await?;
        pass.warned.push((row.id, id));
    }
    Ok(())
}

/// Records the warning: a completed `IDLE_WARNING` job (not the cluster's latest) saying when the
/// cluster stops, and on the cluster the change it was recorded for.
async fn warn(
    st: &Engine,
    row: &ClusterRow,
    mut body: ClusterBody,
    since: i64,
    idle_ms: i64,
    now: i64,
) -> EngineResult<String> {
    let id = job_id(st, row.id).await?;
    let hours = |ms: i64| (ms as f64 / 3_600_000.0 * 10.0).round() / 10.0;
    let message = format!(
        "Idle for {} hours: nothing has changed the cluster since its last job; its template's idle policy stops it in {} hours unless it changes first.",
        hours(now - since),
        hours(since + idle_ms - now)
    );
    let job = JobRow {
        tenant_id: row.tenant_id.clone(),
        cluster_id: row.id,
        id: id.clone(),
        action: "IDLE_WARNING".into(),
        status: JobStatus::Complete,
        create_time: now,
        rev: 0,
        steps_done: 0,
        steps_total: 0,
        body: to_body(&JobBody {
            message: Some(message),
            ..Default::default()
        })?,
    };
    body.idle_warned = Some(since);
    let mut cluster = row.clone();
    cluster.body = to_body(&body)?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(row));
    cs.write(Write::Cluster(cluster));
    cs.write(Write::Job(job));
    st.store.commit(&cs).await.map_err(crate::store_err)?;
    tracing::warn!(cluster_id = row.id, job_id = %id, "idle cluster warned");
    Ok(id)
}
