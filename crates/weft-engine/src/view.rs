//! Rows as the API shows them: cluster summaries and details, status, plans.

use weft_model::{
    Account, ClusterDetails, ClusterStatus, ClusterStatusView, ClusterSummary, EntityRef,
    JobStatus, Node, NodeAction, NodeActionStatus, PlanTask, PlanView, Progress,
};
use weft_store::{ClusterRow, JobRow, NodeRow, TaskRow, TaskState};

use super::body::{from_body, ClusterBody, JobBody, TaskBody};
use super::{cluster_id_text, parse_cluster_id};
use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine, Role};

/// What a sensitive field's value reads as in any answer.
pub const MASK: &str = "********";

/// The cluster `id` if the caller may see it (its own, or any of the tenant's for an admin);
/// [`EngineError::ClusterNotFound`] otherwise.
pub async fn visible(st: &Engine, who: &Caller, id: &str) -> EngineResult<ClusterRow> {
    let missing = || EngineError::ClusterNotFound(id.to_string());
    let n = parse_cluster_id(id).ok_or_else(missing)?;
    let row = st
        .store
        .get_cluster(&who.tenant.id, n)
        .await?
        .ok_or_else(missing)?;
    if !who.is_admin() && row.owner != who.user {
        return Err(missing());
    }
    Ok(row)
}

/// The progress of a job: its action (lower case), status and completed tasks (gates not counted,
/// as the store keeps them in the job's row, which also holds the total: the body is not read).
pub fn progress(job: &JobRow) -> EngineResult<Progress> {
    let done = job.steps_done;
    Ok(Progress {
        action: job.action.to_ascii_lowercase(),
        actionstatus: job.status,
        stepstotal: job.steps_total,
        stepscompleted: done.min(job.steps_total),
    })
}

/// At most this many actions are shown per node, the newest.
const MAX_NODE_ACTIONS: u32 = 200;

/// Secret parts of the results a node keeps from its provider (`ssh-auth`'s key or password):
/// given to provisioners with each task, never shown.
const SECRET_RESULTS: [(&str, &str); 2] = [("ssh-auth", "key"), ("ssh-auth", "password")];

/// A node as the API shows it: its record, its action history (read from its tasks), and its
/// secrets masked.
pub async fn node(st: &Engine, row: &NodeRow) -> EngineResult<Node> {
    let mut node: Node = from_body(&row.body)?;
    let tasks = st
        .store
        .node_tasks(&row.tenant_id, &row.id, MAX_NODE_ACTIONS)
        .await?;
    let max = st.settings.max_action_retries;
    for t in &tasks {
        node.actions.extend(actions(t, max)?);
    }
    let excess = node.actions.len().saturating_sub(MAX_NODE_ACTIONS as usize);
    node.actions.drain(..excess);
    mask_results(&mut node.provisioner_results);
    Ok(node)
}

/// Replaces the secret parts of node results with the mask.
pub fn mask_results(results: &mut serde_json::Map<String, serde_json::Value>) {
    for (outer, inner) in SECRET_RESULTS {
        if let Some(v) = results
            .get_mut(outer)
            .and_then(|o| o.as_object_mut())
            .and_then(|o| o.get_mut(inner))
        {
            *v = serde_json::Value::String(MASK.into());
        }
    }
}

/// Seals the secret parts of node results (a part already sealed stays as it is).
pub async fn seal_results(
    st: &Engine,
    tenant: &str,
    results: &mut serde_json::Map<String, serde_json::Value>,
) -> EngineResult<()> {
    for (outer, inner) in SECRET_RESULTS {
        if let Some(v) = results
            .get_mut(outer)
            .and_then(|o| o.as_object_mut())
            .and_then(|o| o.get_mut(inner))
        {
            *v = st.sealer.seal(tenant, v).await?;
        }
    }
    Ok(())
}

/// Puts back the secret parts of `old` results where `new` carries the mask (a record read, edited
/// and written back keeps its secrets).
pub fn unmask_results(
    new: &mut serde_json::Map<String, serde_json::Value>,
    old: &serde_json::Map<String, serde_json::Value>,
) {
    for (outer, inner) in SECRET_RESULTS {
        let masked = new
            .get(outer)
            .and_then(|o| o.get(inner))
            .is_some_and(|v| v == MASK);
        if !masked {
            continue;
        }
        let kept = old.get(outer).and_then(|o| o.get(inner)).cloned();
        if let (Some(kept), Some(o)) = (kept, new.get_mut(outer).and_then(|o| o.as_object_mut())) {
            o.insert(inner.to_string(), kept);
        }
    }
}

/// A task's entries in its node's history: one per attempt, failed retried ones first, each
/// numbered (`attempt` of `max_attempts`) so that retries read as such.
fn actions(t: &TaskRow, max_attempts: u32) -> EngineResult<Vec<NodeAction>> {
    let body: TaskBody = from_body(&t.body)?;
    let entry =
        |attempt: u32, submit_time, status_time, status, stdout, stderr, failure| NodeAction {
            task_id: t.id.clone(),
            service: t.service.clone(),
            action: t.action.clone(),
            submit_time,
            status_time,
            status,
            stdout,
            stderr,
            attempt: attempt.max(1),
            max_attempts,
            failure,
            cleanup: body.cleanup,
        };
    let current = match t.state {
        TaskState::InProgress => Some(NodeActionStatus::InProgress),
        TaskState::Complete => Some(NodeActionStatus::Complete),
        TaskState::Failed => Some(NodeActionStatus::Failed),
        // Waiting for a retry: its failed attempt is in `retried` already.
        _ => None,
    };
    // `attempts` counts executions started; the kept failures are the latest of the earlier ones.
    let earlier = t.attempts.saturating_sub(u32::from(current.is_some()));
    let first_kept = earlier.saturating_sub(body.retried.len() as u32);
    let mut out: Vec<NodeAction> = body
        .retried
        .iter()
        .zip(first_kept + 1..)
        .map(|(a, n)| {
            entry(
                n,
                a.start_time,
                a.finish_time,
                NodeActionStatus::Failed,
                a.stdout.clone(),
                a.stderr.clone(),
                a.failure.clone(),
            )
        })
        .collect();
    if let Some(status) = current {
        let status_time = if status == NodeActionStatus::InProgress {
            t.started_at
        } else {
            body.finish_time.max(t.started_at)
        };
        out.push(entry(
            t.attempts,
            t.started_at,
            status_time,
            status,
            body.stdout.clone(),
            body.stderr.clone(),
            body.failure
                .clone()
                .filter(|_| status == NodeActionStatus::Failed),
        ));
    }
    Ok(out)
}

/// The cluster's latest job (its head: no body), and the cluster row no older than it. A job that
/// ends and the cluster status it sets are committed together, but `row` was read before the job:
/// if the job has ended while the row still shows the cluster pending, the row is read again.
async fn latest_job(st: &Engine, row: &ClusterRow) -> EngineResult<(ClusterRow, Option<JobRow>)> {
    let Some(id) = &row.latest_job else {
        return Ok((row.clone(), None));
    };
    let job = st.store.get_job_head(&row.tenant_id, id).await?;
    let ended = job.as_ref().is_some_and(|j| !j.status.is_underway());
    if ended && row.status == ClusterStatus::Pending {
        if let Some(now) = st.store.get_cluster(&row.tenant_id, row.id).await? {
            return Ok((now, job));
        }
    }
    Ok((row.clone(), job))
}

/// The clusters `who` may see (all of the tenant's for an admin), newest first, those with a
/// status in `wanted` (all if it is empty). Each summary reads the cluster's row and its latest
/// job's, whose counts the store keeps: the cost does not grow with the clusters' nodes.
pub async fn list(
    st: &Engine,
    who: &Caller,
    wanted: &[ClusterStatus],
) -> EngineResult<Vec<ClusterSummary>> {
    let _permit = st.light_read().await?;
    let owner = (!who.is_admin()).then_some(who.user.as_str());
    let rows = st.store.list_clusters(&who.tenant.id, owner).await?;
    let mut out = Vec::new();
    for row in rows {
        if wanted.is_empty() || wanted.contains(&row.status) {
            out.push(summary(st, &row).await?);
        }
    }
    Ok(out)
}

/// A cluster's summary: its row and its latest job's (no node or task is read).
pub async fn summary(st: &Engine, row: &ClusterRow) -> EngineResult<ClusterSummary> {
    let (row, job) = latest_job(st, row).await?;
    let row = &row;
    let body: ClusterBody = from_body(&row.body)?;
    let job_time = job.as_ref().map(|j| (j.create_time, j.action.as_str()));
    let progress = match &job {
        Some(j) => Some(progress(j)?),
        None => None,
    };
    Ok(ClusterSummary {
        id: cluster_id_text(row.id),
        name: row.name.clone(),
        description: body.description.clone(),
        owner_id: row.owner.clone(),
        create_time: row.create_time,
        expire_time: row.expire_time,
        num_nodes: row.node_count,
        status: row.status,
        provider: EntityRef {
            name: body.provider.name.clone(),
            description: body.provider.description.clone(),
            version: body.provider.version,
        },
        cluster_template: EntityRef {
            name: body.template.name.clone(),
            description: None,
            version: body.template.version,
        },
        progress,
        idle_since: idle_since(&body.template, row, job_time, st.now_ms()),
        services: body.services,
    })
}

/// Since when an active cluster of template `t` has been idle (its latest change, `changed`),
/// if its template's idle policy says it is at `now`; a cluster stopped on purpose is not.
pub fn idle_since(
    t: &weft_model::ClusterTemplate,
    row: &ClusterRow,
    changed: Option<(i64, &str)>,
    now: i64,
) -> Option<i64> {
    let policy = t.administration.idle.as_ref()?;
    if row.status != ClusterStatus::Active {
        return None;
    }
    let (since, action) = changed.unwrap_or((row.create_time, ""));
    (action != "STOP_SERVICES" && now - since >= policy.idle_ms()).then_some(since)
}

/// Clusters of up to this many nodes are answered whole, in Coopr's shape; a larger one a page
/// of this many nodes at a time, unless the caller asks for a smaller page.
pub const WHOLE_UP_TO: usize = 1000;

/// Which of a cluster's nodes an answer holds (`?offset=&limit=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodePage {
    /// The first node of the page, counted from 0 in `nodenum` order.
    pub offset: usize,
    /// At most [`WHOLE_UP_TO`]; `None`: every node of a cluster up to that size, else that many.
    pub limit: Option<usize>,
}

/// What part of the nodes an answer holds: `count` nodes from `offset` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    /// The first node held, counted from 0.
    pub offset: usize,
    /// How many nodes the answer holds.
    pub count: usize,
    /// How many nodes the cluster has.
    pub total: usize,
}

impl NodePage {
    /// The range of `total` nodes this page covers.
    pub fn range(self, total: usize) -> std::ops::Range<usize> {
        let limit = self.limit.unwrap_or(WHOLE_UP_TO).min(WHOLE_UP_TO);
        let start = self.offset.min(total);
        start..(start + limit).min(total)
    }
}

/// The whole cluster, every node of it (callbacks); for clusters up to [`WHOLE_UP_TO`] nodes
/// what the API answers, and beyond that the first page.
pub async fn details(st: &Engine, row: &ClusterRow) -> EngineResult<ClusterDetails> {
    Ok(details_page(st, row, NodePage::default()).await?.0)
}

/// The cluster with the nodes of `page`, each with its action history. Every node's properties
/// are read (links expand against all of them), but only the page's histories, and at most
/// [`HEAVY_READS`](crate::HEAVY_READS) such answers are built at once.
pub async fn details_page(
    st: &Engine,
    row: &ClusterRow,
    page: NodePage,
) -> EngineResult<(ClusterDetails, PageInfo)> {
    let _permit = st.heavy_read().await?;
    let (row, job) = latest_job(st, row).await?;
    let row = &row;
    let body: ClusterBody = from_body(&row.body)?;
    let rows = st.store.list_nodes(&row.tenant_id, row.id).await?;
    let all = rows
        .iter()
        .map(|n| from_body::<Node>(&n.body))
        .collect::<EngineResult<Vec<Node>>>()?;
    let layout = super::body::plan_nodes(&all);
    drop(all);
    let range = page.range(rows.len());
    let info = PageInfo {
        offset: range.start,
        count: range.len(),
        total: rows.len(),
    };
    let mut nodes: Vec<Node> = Vec::with_capacity(range.len());
    for n in &rows[range] {
        nodes.push(node(st, n).await?);
    }
    drop(rows);
    let job_time = job.as_ref().map(|j| (j.create_time, j.action.as_str()));
    let idle_since = idle_since(&body.template, row, job_time, st.now_ms());
    let progress = match &job {
        Some(j) => Some(progress(j)?),
        None => None,
    };
    let waiting = match &progress {
        Some(p) => waiting(st, row, p).await?,
        None => None,
    };
    let links = cluster_links(&body.template.links, &layout, &row.owner);
    Ok((
        ClusterDetails {
            id: cluster_id_text(row.id),
            name: row.name.clone(),
            description: body.description,
            account: Account {
                user_id: row.owner.clone(),
                tenant_id: row.tenant_id.clone(),
            },
            create_time: row.create_time,
            expire_time: row.expire_time,
            provider: body.provider,
            cluster_template: body.template,
            nodes,
            services: body.services,
            latest_job_id: row.latest_job.clone(),
            status: row.status,
            config: body.config,
            links,
            progress,
            message: body.message,
            waiting,
            idle_since,
        },
        info,
    ))
}

/// A template's links expanded against the cluster's nodes: Coopr's one string, and one URL per
/// node where a link names a service on several nodes. A macro that cannot expand yet (no address)
/// leaves the link's text as the template has it.
fn cluster_links(
    links: &[weft_model::Link],
    layout: &[weft_planner::PlanNode],
    owner: &str,
) -> Vec<weft_model::ClusterLink> {
    let ctx = weft_planner::MacroContext::new(layout, owner).ok();
    links
        .iter()
        .map(|l| {
            let url = ctx.as_ref().and_then(|c| c.expand_str(None, &l.url).ok());
            let urls = ctx
                .as_ref()
                .and_then(|c| c.expand_each(&l.url).ok())
                .filter(|u| u.len() > 1)
                .unwrap_or_default();
            weft_model::ClusterLink {
                label: l.label.clone(),
                url: url.unwrap_or_else(|| l.url.clone()),
                urls,
            }
        })
        .collect()
}

/// A cluster's status: its row and its latest job's (no node or task is read).
pub async fn status(st: &Engine, row: &ClusterRow) -> EngineResult<ClusterStatusView> {
    let _permit = st.light_read().await?;
    let (row, job) = latest_job(st, row).await?;
    let row = &row;
    let job = job.ok_or_else(|| EngineError::ClusterNotFound(cluster_id_text(row.id)))?;
    let p = progress(&job)?;
    let waiting = waiting(st, row, &p).await?;
    Ok(ClusterStatusView {
        clusterid: cluster_id_text(row.id),
        status: row.status,
        action: p.action,
        actionstatus: p.actionstatus,
        stepstotal: p.stepstotal,
        stepscompleted: p.stepscompleted,
        waiting,
    })
}

/// Why the running job of `row` cannot have its tasks taken now, if something says so: no
/// provisioner alive, none that has registered the cluster's provider type, or a tenant with no
/// workers. Read only while a job runs (a few small reads).
pub async fn waiting(st: &Engine, row: &ClusterRow, p: &Progress) -> EngineResult<Option<String>> {
    if p.actionstatus != JobStatus::Running || p.stepscompleted >= p.stepstotal {
        return Ok(None);
    }
    let alive = st.any_provisioner_alive().await?;
    if !alive {
        return Ok(Some("waiting: no provisioner is running".into()));
    }
    let body: ClusterBody = from_body(&row.body)?;
    let ptype = &body.provider.providertype;
    let offered = st
        .store
        .get_entity(
            weft_store::SUPERADMIN,
            weft_model::EntityKind::ProviderType,
            ptype,
            None,
        )
        .await?
        .is_some();
    if !offered {
        return Ok(Some(format!(
            "waiting: no provisioner offers provider type {ptype}"
        )));
    }
    let tenant = st.store.tenant_by_id(&row.tenant_id).await?;
    Ok(match tenant {
        Some(t) if t.spec.workers == 0 => Some(format!(
            "waiting: tenant {} has no workers (a superadmin sets them)",
            t.spec.name
        )),
        _ => None,
    })
}

/// The plans of every job of cluster `id`, as `who` sees it, oldest first.
pub async fn plans(st: &Engine, who: &Caller, id: &str) -> EngineResult<Vec<PlanView>> {
    let none = || EngineError::PlansNotFound(id.to_string());
    let row = visible(st, who, id).await.map_err(|_| none())?;
    let _permit = st.heavy_read().await?;
    let jobs = st.store.list_jobs(&who.tenant.id, row.id).await?;
    if jobs.is_empty() {
        return Err(none());
    }
    let mut out = Vec::with_capacity(jobs.len());
    for j in &jobs {
        out.push(plan(st, j).await?);
    }
    Ok(out)
}

/// The plan of job `job_id` of cluster `id`, as `who` sees it.
pub async fn job_plan(st: &Engine, who: &Caller, id: &str, job_id: &str) -> EngineResult<PlanView> {
    let row = visible(st, who, id).await?;
    let prefix = format!("{}-", cluster_id_text(row.id));
    let bad = || EngineError::Invalid(format!("job {job_id} is not a job of cluster {id}"));
    if !job_id.starts_with(&prefix) {
        return Err(bad());
    }
    let job = st
        .store
        .get_job(&who.tenant.id, job_id)
        .await?
        .filter(|j| j.cluster_id == row.id)
        .ok_or_else(bad)?;
    let _permit = st.heavy_read().await?;
    plan(st, &job).await
}

/// A job's plan in Coopr's format. The current stage is the first with a task not complete.
pub async fn plan(st: &Engine, job: &JobRow) -> EngineResult<PlanView> {
    let body: JobBody = from_body(&job.body)?;
    let tasks = st.store.list_task_heads(&job.tenant_id, &job.id).await?;
    let by_id: std::collections::BTreeMap<&str, &weft_store::TaskHead> =
        tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let stages: Vec<Vec<PlanTask>> = body
        .stages
        .iter()
        .map(|stage| {
            stage
                .iter()
                .filter_map(|id| by_id.get(id.as_str()))
                .map(|t| PlanTask {
                    id: t.id.clone(),
                    task_name: t.action.clone(),
                    node_id: t.node_id.clone(),
                    service: t.service.clone(),
                })
                .collect()
        })
        .collect();
    let current = body
        .stages
        .iter()
        .position(|s| {
            s.iter().any(|id| {
                by_id
                    .get(id.as_str())
                    .is_some_and(|t| t.state != TaskState::Complete)
            })
        })
        .unwrap_or(body.stages.len());
    let rollout = body.rollout.map(|mut r| {
        r.changed_nodes = changed_nodes(&body.stages, &by_id);
        Box::new(r)
    });
    Ok(PlanView {
        id: job.id.clone(),
        cluster_id: cluster_id_text(job.cluster_id),
        action: job.action.clone(),
        current_stage: current as u64,
        stages,
        rollout,
        cost: None,
    })
}

/// The nodes of a job whose change has started (a task other than a health check has run or
/// runs), in stage order: what a rollout changed, and what its revert undoes.
pub fn changed_nodes(
    stages: &[Vec<String>],
    tasks: &std::collections::BTreeMap<&str, &weft_store::TaskHead>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in stages
        .iter()
        .flatten()
        .filter_map(|id| tasks.get(id.as_str()))
    {
        let check = t.action == weft_model::ProvisionerAction::Healthcheck.upper();
        if t.attempts > 0 && !check && !out.contains(&t.node_id) {
            out.push(t.node_id.clone());
        }
    }
    out
}

/// Each tenant's queued and in-progress task counts, by tenant name: the superadmin's are every
/// tenant's, an admin's their own tenant's; plain users are refused.
pub async fn queue_counts(
    st: &Engine,
    who: &Caller,
) -> EngineResult<std::collections::BTreeMap<String, (u64, u64)>> {
    let tenants = match who.role {
        Role::SuperAdmin => st.store.list_tenants().await?,
        Role::Admin => vec![who.tenant.clone()],
        Role::User => {
            return Err(EngineError::Forbidden(format!(
                "user {} is not an admin",
                who.user
            )))
        }
    };
    let counts = st.store.queue_counts().await?;
    Ok(tenants
        .into_iter()
        .map(|t| {
            let c = counts.get(&t.id).copied().unwrap_or((0, 0));
            (t.spec.name, c)
        })
        .collect())
}

/// The states of job `job_id`'s tasks on cluster `id` (gates left out), by task id: all of them,
/// or only those of `nodes` that have started (a cluster shown a page of nodes at a time).
pub async fn task_states(
    st: &Engine,
    who: &Caller,
    id: &str,
    job_id: &str,
    nodes: &[&str],
) -> EngineResult<std::collections::BTreeMap<String, TaskState>> {
    let row = visible(st, who, id).await?;
    let tasks = if nodes.is_empty() {
        st.store.list_tasks(&row.tenant_id, job_id).await?
    } else {
        let mut all = Vec::new();
        for node in nodes {
            let on_node = st.store.node_tasks(&row.tenant_id, node, 500).await?;
            all.extend(on_node.into_iter().filter(|t| t.job_id == job_id));
        }
        all
    };
    Ok(tasks
        .into_iter()
        .filter(|t| t.cluster_id == row.id && t.action != crate::GATE)
        .map(|t| (t.id, t.state))
        .collect())
}

/// Cluster `id`'s jobs, newest first.
pub async fn jobs_newest_first(st: &Engine, who: &Caller, id: &str) -> EngineResult<Vec<JobRow>> {
    let row = visible(st, who, id).await?;
    let mut jobs = st.store.list_jobs(&row.tenant_id, row.id).await?;
    jobs.sort_by(|a, b| b.create_time.cmp(&a.create_time).then(b.id.cmp(&a.id)));
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_small_clusters_whole_and_large_ones_in_bounded_steps() {
        let default = NodePage::default();
        assert_eq!(default.range(3), 0..3);
        assert_eq!(default.range(WHOLE_UP_TO), 0..WHOLE_UP_TO);
        assert_eq!(default.range(10_000), 0..WHOLE_UP_TO);
        let p = |offset, limit| NodePage { offset, limit };
        assert_eq!(p(9_500, None).range(10_000), 9_500..10_000);
        assert_eq!(p(5, Some(1_000_000)).range(10_000), 5..1_005);
        assert_eq!(p(20, Some(5)).range(10), 10..10);
    }
}
