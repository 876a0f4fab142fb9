//! The provisioner side of a job: `take` leases the oldest queued task of a tenant to a worker and
//! builds its payload (contract §5.11); `finish` records the result, updates the node, releases the
//! task's successors, retries or fails, and completes the job and the cluster.
//!
//! The retry rule: a failed task is run again (up to `max_action_retries` executions) unless its
//! worker classified the failure as not retryable (the finish's `failure`); a fatal failure fails
//! the job at once, its message naming the task, its host, the reason and "not retried". A
//! CREATE that fails for good gets a clean-up DELETE of whatever it may have made: before its
//! retry (the CREATE waits for it), or after a fatal failure (`ids::cleanup_id`, run although
//! the job has failed; the cluster settles once it ends). Either is marked `cleanup`.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft_model::{
    ClusterStatus, FinishTaskRequest, HealthReport, JobStatus, Node, ProvisionerAction,
    TakeTaskRequest, TaskNodesRequest, HEALTH_RESULT_KEY, NODES_BY_REVISION,
};
use weft_planner::MacroContext;
use weft_store::{ChangeSet, ClusterRow, ClusterStamp, Expect, JobRow, TaskRow, TaskState, Write};

use super::body::{end_of, from_body, to_body, ClusterBody, JobBody, TaskBody};
use super::{cluster_id_text, notify, retry_stale, store_err, JobEventKind};
use crate::cache::{CachedNode, LeasedTask, Snapshot};
use crate::error::{EngineError, EngineResult};
use crate::ids::end_gate;
use crate::jobs::{failure_status, success_status};
use crate::view;
use crate::Engine;

/// Task output kept per action, from the end.
const MAX_LOG: usize = 2048;

struct Worker {
    provisioner_id: String,
    tenant_id: String,
    owner: String,
    /// Set by the janitor: fail the task only if its lease ran out before this time.
    expired_before: Option<i64>,
}

fn required(v: &Option<String>, field: &str) -> EngineResult<String> {
    v.clone()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| EngineError::Invalid(format!("{field} must be specified")))
}

async fn worker(
    st: &Engine,
    w: &Option<String>,
    p: &Option<String>,
    t: &Option<String>,
) -> EngineResult<Worker> {
    let worker_id = required(w, "workerId")?;
    let provisioner_id = required(p, "provisionerId")?;
    let tenant_id = required(t, "tenantId")?;
    holds_tenant(st, &provisioner_id, &tenant_id).await?;
    let owner = format!("{provisioner_id}.{worker_id}");
    Ok(Worker {
        provisioner_id,
        tenant_id,
        owner,
        expired_before: None,
    })
}

/// Refuses a provisioner that is not registered, or that asks for the tasks (and so the cloud
/// secrets) of a tenant it holds no workers of: assigned by the server or reported live in its
/// heartbeats. The refusal is logged with both ids.
async fn holds_tenant(st: &Engine, provisioner_id: &str, tenant_id: &str) -> EngineResult<()> {
    match st
        .provisioners
        .tenants_of(st.store.as_ref(), provisioner_id, st.clock.monotonic())
        .await?
    {
        None => Err(EngineError::NotRegistered(provisioner_id.to_string())),
        Some(held) if held.contains(tenant_id) => Ok(()),
        Some(_) => {
            tracing::warn!(provisioner = %provisioner_id, tenant = %tenant_id,
                "refused: a provisioner asked for tasks of a tenant it holds no workers of");
            Err(EngineError::NotYourTenant {
                provisioner: provisioner_id.to_string(),
                tenant: tenant_id.to_string(),
            })
        }
    }
}

/// `POST /v2/tasks/take`: the next task's payload (JSON text), or `None` when the tenant's queue
/// is empty. A worker that can do [`NODES_BY_REVISION`] gets the payload without `config.nodes`
/// (provider tasks) or with `nodesRevision` in its place (see [`task_nodes`]).
pub async fn take(st: &Engine, req: TakeTaskRequest) -> EngineResult<Option<String>> {
    let w = worker(st, &req.worker_id, &req.provisioner_id, &req.tenant_id).await?;
    release_lost(st, &w, None).await?;
    take_as(st, &w, req.can(NODES_BY_REVISION)).await
}

/// [`take`] for a worker whose lost leases have been released.
async fn take_as(st: &Engine, w: &Worker, by_revision: bool) -> EngineResult<Option<String>> {
    let timeout = st.settings.task_timeout_ms;
    loop {
        let now = st.now_ms();
        let Some(taken) = st
            .store
            .take_next(&w.tenant_id, &w.owner, now, now + timeout)
            .await?
        else {
            return Ok(None);
        };
        let task = taken.task;
        match taken.job.as_ref().map(|(s, _)| *s) {
            Some(JobStatus::Paused) => {
                // Queued just before its job was paused: back to waiting, as if never taken.
                let cs = ChangeSet {
                    expect: vec![Expect::task(&task)],
                    writes: vec![Write::Task(given_back(&task, TaskState::Pending))],
                };
                match st.store.commit(&cs).await {
                    Ok(()) | Err(weft_store::StoreError::Stale(_)) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Some(JobStatus::Running) => {}
            // Its job failed (or was aborted) after the task was queued: never run it (but a
            // clean-up DELETE, which exists because the job failed).
            Some(JobStatus::NotSubmitted | JobStatus::Complete | JobStatus::Failed) | None
                if !crate::ids::is_cleanup_id(&task.id) =>
            {
                drop_task(st, &task).await?;
                continue;
            }
            Some(JobStatus::NotSubmitted | JobStatus::Complete | JobStatus::Failed) | None => {}
        }
        match payload(st, &task, taken.cluster, by_revision).await {
            Ok(p) => {
                tracing::info!(task_id = %task.id, job_id = %task.job_id, cluster_id = task.cluster_id,
                    provisioner = %w.provisioner_id, action = %task.action, "task taken");
                st.leases.remember(task, taken.job);
                return Ok(Some(p));
            }
            Err(message) => {
                // The payload cannot be built (a macro that does not expand, say): the task fails
                // as if the worker had reported it, and goes through the normal retries.
                let fail = FinishTaskRequest {
                    status: Some(-1),
                    stderr: Some(message),
                    ..Default::default()
                };
                retry_stale(|| finish_step(st, w, &task.id, &fail)).await?;
            }
        }
    }
}

/// A task given back untried in `state`: no lease, and the attempt `take` counted uncounted.
fn given_back(task: &TaskRow, state: TaskState) -> TaskRow {
    let mut back = task.clone();
    back.state = state;
    back.deps_remaining = 0;
    back.attempts = back.attempts.saturating_sub(1);
    back.lease_owner = None;
    back.started_at = previous_start(task);
    back
}

/// A worker runs one task at a time, so a take or a finish (of `finishing`) from a worker that
/// the store shows holding another lease means the answer that gave it that task was lost: the
/// server died, or the connection broke, between the take's commit and its answer, and the
/// worker never ran the task. Each such task goes back to the queue at once, its attempt not
/// counted, instead of waiting out its lease (the task time-out). A task finished, failed or
/// released by someone else meanwhile is left alone.
async fn release_lost(st: &Engine, w: &Worker, finishing: Option<&str>) -> EngineResult<()> {
    for task in st.store.leases_of(&w.tenant_id, &w.owner).await? {
        if finishing == Some(task.id.as_str()) {
            continue;
        }
        st.leases.take(&w.tenant_id, &task.id);
        let cs = ChangeSet {
            expect: vec![Expect::task(&task)],
            writes: vec![Write::Task(given_back(&task, TaskState::Queued))],
        };
        match st.store.commit(&cs).await {
            Ok(()) => tracing::warn!(task_id = %task.id, job_id = %task.job_id,
                cluster_id = task.cluster_id, worker = %w.owner,
                "the worker asked again while holding this task: its answer was lost; released"),
            Err(weft_store::StoreError::Stale(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// When the attempt before the one `take` just started began (0 if none): what a task given back
/// untried keeps, so that its node's history still shows its earlier attempts.
fn previous_start(task: &TaskRow) -> i64 {
    from_body::<TaskBody>(&task.body)
        .ok()
        .and_then(|b| b.retried.last().map(|a| a.start_time))
        .unwrap_or(0)
}

/// Drops a task just taken whose job no longer runs. Like a finish of a failed job's task, it gives
/// the cluster its failure status if no task of the job is still running: the last task to stop
/// may be this one, which never ran.
async fn drop_task(st: &Engine, task: &TaskRow) -> EngineResult<()> {
    let settled = retry_stale(|| async {
        let Some(now) = st.store.get_task(&task.tenant_id, &task.id).await? else {
            return Ok(false);
        };
        if now.state != TaskState::InProgress || now.lease_owner != task.lease_owner {
            return Ok(false);
        }
        let mut dropped = now.clone();
        dropped.state = TaskState::Dropped;
        dropped.lease_owner = None;
        dropped.started_at = previous_start(task);
        let mut cs = ChangeSet::new();
        cs.expect(Expect::task(&now));
        cs.write(Write::Task(dropped));
        let job = st.store.get_job(&task.tenant_id, &task.job_id).await?;
        let cluster = st
            .store
            .get_cluster(&task.tenant_id, task.cluster_id)
            .await?;
        if let (Some(job), Some(cluster)) = (&job, &cluster) {
            settle_failed_job(st, &mut cs, job, cluster, &task.id).await?;
        }
        st.store.commit(&cs).await.map_err(store_err)?;
        Ok(true)
    })
    .await?;
    if settled {
        crate::rollback::after_failed_job(st, &task.tenant_id, task.cluster_id).await;
    }
    Ok(())
}

/// Whether a value holds a string with a `%`: only then can macros change it.
fn has_macros(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('%'),
        Value::Array(a) => a.iter().any(has_macros),
        Value::Object(o) => o.values().any(has_macros),
        _ => false,
    }
}

/// A payload's `config`, with the `nodes` map spliced in already serialized.
struct Config<'a> {
    fields: &'a Map<String, Value>,
    nodes: Option<&'a serde_json::value::RawValue>,
}

impl serde::Serialize for Config<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.fields {
            m.serialize_entry(k, v)?;
        }
        if let Some(n) = self.nodes {
            m.serialize_entry("nodes", n)?;
        }
        m.end()
    }
}

/// `POST /v2/tasks/nodes`: the `nodes` map of a cluster of the worker's tenant as of now, as the
/// changes since `since` when that is a revision this server handed out (JSON text of a
/// `weft_model::TaskNodes`).
pub async fn task_nodes(st: &Engine, req: TaskNodesRequest) -> EngineResult<String> {
    let provisioner_id = required(&req.provisioner_id, "provisionerId")?;
    let tenant_id = required(&req.tenant_id, "tenantId")?;
    let cluster = required(&req.cluster_id, "clusterId")?;
    let cluster_id = crate::ids::parse_cluster_id(&cluster).ok_or_else(|| {
        EngineError::Invalid(format!("clusterId {cluster:?} is not a cluster id"))
    })?;
    holds_tenant(st, &provisioner_id, &tenant_id).await?;
    let Some(stamp) = st.store.cluster_stamp(&tenant_id, cluster_id).await? else {
        return Err(EngineError::ClusterNotFound(cluster));
    };
    let snap = st
        .payloads
        .snapshot(st.store.as_ref(), &tenant_id, cluster_id, Some(stamp))
        .await
        .map_err(EngineError::Internal)?;
    snap.nodes_since(req.since.as_deref())
        .map_err(EngineError::Internal)
}

/// CREATE, CONFIRM, DELETE and STATUS: tasks of a provider plugin, which reads no other node.
fn is_provider_task(task: &TaskRow) -> bool {
    task.service.is_empty()
        && [
            ProvisionerAction::Create,
            ProvisionerAction::Confirm,
            ProvisionerAction::Delete,
            ProvisionerAction::Status,
        ]
        .iter()
        .any(|a| a.upper() == task.action)
}

/// The payload of a provider task for a worker that caches the `nodes` map: no map at all, and
/// built from the cluster body and the task's own node without a snapshot of the cluster.
async fn provider_payload(
    st: &Engine,
    task: &TaskRow,
    stamp: Option<ClusterStamp>,
) -> Result<String, String> {
    let (body, me) = st
        .payloads
        .node_view(
            st.store.as_ref(),
            &task.tenant_id,
            task.cluster_id,
            &task.node_id,
            stamp,
        )
        .await?;
    let mut config = Map::new();
    config.insert("cluster".into(), Value::Object(body.config.clone()));
    let current = current_provider(st, task, &body).await;
    add_node_config(st, &mut config, &body, &me, task, current.as_ref()).await?;
    serialize_payload(task, &config, Nodes::Neither)
}

/// The task JSON a worker receives (contract §5.11): with the whole `nodes` map, or (`by_revision`)
/// with the revision of the map instead. `Err` carries a message for the task's failure.
async fn payload(
    st: &Engine,
    task: &TaskRow,
    stamp: Option<ClusterStamp>,
    by_revision: bool,
) -> Result<String, String> {
    if by_revision && is_provider_task(task) {
        return provider_payload(st, task, stamp).await;
    }
    let snap = st
        .payloads
        .snapshot(st.store.as_ref(), &task.tenant_id, task.cluster_id, stamp)
        .await?;
    let me = snap
        .node(&task.node_id)
        .ok_or("the task's node no longer exists")?;
    let mut config = Map::new();
    let cluster_config = Value::Object(snap.body.config.clone());
    if task.service.is_empty() {
        config.insert("cluster".into(), cluster_config);
    } else {
        let (cluster, service) = service_config(&snap, me, task, cluster_config)?;
        config.insert("cluster".into(), cluster);
        config.insert("service".into(), service);
        let membership = crate::membership::of_task(st, task, snap.layout_all())
            .await
            .map_err(|e| e.to_string())?;
        if let Some(m) = membership {
            config.insert("membership".into(), m);
        }
    }
    let current = current_provider(st, task, &snap.body).await;
    add_node_config(
        st,
        &mut config,
        &snap.body,
        &me.node,
        task,
        current.as_ref(),
    )
    .await?;
    // Results are written last and may shadow anything, `nodes` included.
    let nodes = if config.contains_key("nodes") {
        Nodes::Neither
    } else if by_revision {
        Nodes::Revision(snap.revision().text())
    } else {
        Nodes::Map(snap.nodes_json()?)
    };
    serialize_payload(task, &config, nodes)
}

/// A service task's cluster config and `service` section, macros expanded against the nodes that
/// stay (or every node, when this task's own node is leaving).
fn service_config(
    snap: &Snapshot,
    me: &CachedNode,
    task: &TaskRow,
    cluster_config: Value,
) -> Result<(Value, Value), String> {
    let svc = me
        .services
        .iter()
        .chain(snap.body.leaving.iter())
        .find(|s| s.name == task.service)
        .ok_or("the task's service is not on its node")?;
    let spec = ProvisionerAction::ALL
        .into_iter()
        .find(|a| a.upper() == task.action)
        .and_then(|a| svc.provisioner.actions.get(&a))
        .cloned()
        .unwrap_or_default();
    let fields = serde_json::to_value(&spec.fields).unwrap_or(Value::Null);
    let (cluster_config, fields) = if has_macros(&cluster_config) || has_macros(&fields) {
        let layout = if snap.body.retiring.contains(&me.node.id) {
            snap.layout_all()
        } else {
            snap.layout()
        };
        let ctx = MacroContext::new(layout, &snap.owner).map_err(|e| e.to_string())?;
        let c = ctx
            .expand_value(Some(&me.node.id), &cluster_config)
            .map_err(|e| format!("cluster config: {e}"))?;
        let f = ctx
            .expand_value(Some(&me.node.id), &fields)
            .map_err(|e| format!("service {} fields: {e}", svc.name))?;
        (c, f)
    } else {
        (cluster_config, fields)
    };
    let mut action = json!({"type": spec.automator, "fields": fields});
    if task.action == ProvisionerAction::Healthcheck.upper() {
        let h = spec.healthcheck_spec();
        action["timeout"] = json!(h.timeout);
        action["tries"] = json!(h.tries);
        action["interval"] = json!(h.interval);
    }
    let service = json!({"name": svc.name, "action": action});
    Ok((cluster_config, service))
}

/// The cluster's provider as the tenant's catalog has it now; `None` when it is gone (or cannot be
/// read), and the cluster's own copy is used.
async fn current_provider(
    st: &Engine,
    task: &TaskRow,
    body: &ClusterBody,
) -> Option<weft_model::Provider> {
    match st
        .providers
        .current(
            st.store.as_ref(),
            &task.tenant_id,
            &body.provider.name,
            st.clock.monotonic(),
        )
        .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(task_id = %task.id, error = %e, "reading the provider; using the cluster's copy");
            None
        }
    }
}

/// The node's properties, the automators to bootstrap, the provider with its fields as they are
/// now ([`ClusterBody::provider_fields`]), and the node's provisioner results (last: they may shadow anything).
/// Its secrets are opened here, the one place they leave the store for a provisioner.
async fn add_node_config(
    st: &Engine,
    config: &mut Map<String, Value>,
    body: &ClusterBody,
    me: &Node,
    task: &TaskRow,
    current: Option<&weft_model::Provider>,
) -> Result<(), String> {
    let props = serde_json::to_value(&me.properties).map_err(|e| e.to_string())?;
    if let Value::Object(p) = props {
        config.extend(p);
    }
    let task_body: TaskBody = from_body(&task.body).map_err(|e: EngineError| e.to_string())?;
    if !task_body.automators.is_empty() {
        config.insert("automators".into(), json!(task_body.automators));
    }
    let mut provider = serde_json::to_value(&body.provider).map_err(|e| e.to_string())?;
    provider["provisioner"] = Value::Object(body.provider_fields(current));
    let open = |e: EngineError| format!("opening the task's secrets: {e}");
    let tenant = &task.tenant_id;
    st.sealer
        .open_all(tenant, &mut provider["provisioner"])
        .await
        .map_err(open)?;
    config.insert("provider".into(), provider);
    for (k, v) in &me.provisioner_results {
        let mut v = v.clone();
        st.sealer.open_all(tenant, &mut v).await.map_err(open)?;
        config.insert(k.clone(), v);
    }
    Ok(())
}

/// What a payload says of the cluster's `nodes` map.
enum Nodes<'a> {
    /// The map itself, as `config.nodes` (contract §5.11).
    Map(&'a serde_json::value::RawValue),
    /// `nodesRevision`: the revision of the map the worker reads through [`task_nodes`].
    Revision(String),
    /// Nothing: a provider task of a worker that caches the map, or results that shadow `nodes`.
    Neither,
}

/// Writes the payload: the ids (and the map's revision) first, so a worker may read them from the
/// head, `config` last.
fn serialize_payload(
    task: &TaskRow,
    config: &Map<String, Value>,
    nodes: Nodes<'_>,
) -> Result<String, String> {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Payload<'a> {
        task_id: &'a str,
        job_id: &'a str,
        cluster_id: String,
        task_name: &'a str,
        node_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        nodes_revision: Option<String>,
        config: Config<'a>,
    }
    let (nodes, nodes_revision) = match nodes {
        Nodes::Map(m) => (Some(m), None),
        Nodes::Revision(r) => (None, Some(r)),
        Nodes::Neither => (None, None),
    };
    // Sized for the nodes map up front: growing a buffer of hundreds of KB by doubling copies it
    // several times.
    let mut out = Vec::with_capacity(nodes.map_or(0, |n| n.get().len()) + 4096);
    serde_json::to_writer(
        &mut out,
        &Payload {
            task_id: &task.id,
            job_id: &task.job_id,
            cluster_id: cluster_id_text(task.cluster_id),
            task_name: &task.action,
            node_id: &task.node_id,
            nodes_revision,
            config: Config {
                fields: config,
                nodes,
            },
        },
    )
    .map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

/// `POST /v2/tasks/finish`.
pub async fn finish(st: &Engine, req: FinishTaskRequest) -> EngineResult<()> {
    let w = worker(st, &req.worker_id, &req.provisioner_id, &req.tenant_id).await?;
    finish_as(st, &w, &req).await
}

/// [`finish`] for a worker already checked.
async fn finish_as(st: &Engine, w: &Worker, req: &FinishTaskRequest) -> EngineResult<()> {
    let task_id = required(&req.task_id, "taskId")?;
    if req.status.is_none() {
        return Err(EngineError::Invalid("status must be specified".into()));
    }
    release_lost(st, w, Some(&task_id)).await?;
    retry_stale(|| finish_step(st, w, &task_id, req)).await
}

/// `POST /v2/tasks/finish` with `next`: records the finish, then takes the worker's next task as
/// [`take`] does. A finish that arrives twice is applied once, so a worker whose answer was lost
/// sends it again and gets a task then.
pub async fn finish_and_take(
    st: &Engine,
    mut req: FinishTaskRequest,
) -> EngineResult<Option<String>> {
    let next = req.next.take().unwrap_or_default();
    let by_revision = TakeTaskRequest {
        capabilities: next.capabilities,
        ..Default::default()
    }
    .can(NODES_BY_REVISION);
    let w = worker(st, &req.worker_id, &req.provisioner_id, &req.tenant_id).await?;
    finish_as(st, &w, &req).await?;
    // The finish released whatever else the worker held: it holds nothing now.
    take_as(st, &w, by_revision).await
}

/// Fails a task whose lease ran out before `now` (the janitor), through the same retry and failure
/// logic as a worker's finish with status -1 and `message` as its stderr. The lease is taken from
/// its holder, so that holder's late finish gets 417. Does nothing if the task has been finished or
/// leased again since it was read.
pub(crate) async fn fail_expired(
    st: &Engine,
    task: &TaskRow,
    now: i64,
    message: &str,
) -> EngineResult<()> {
    let Some(owner) = task.lease_owner.clone() else {
        return Ok(());
    };
    let w = Worker {
        provisioner_id: owner.split('.').next().unwrap_or_default().to_string(),
        tenant_id: task.tenant_id.clone(),
        owner,
        expired_before: Some(now),
    };
    let fail = FinishTaskRequest {
        status: Some(-1),
        stderr: Some(message.to_string()),
        ..Default::default()
    };
    match retry_stale(|| finish_step(st, &w, &task.id, &fail)).await {
        // Finished or re-leased by someone else meanwhile: nothing to time out.
        Err(EngineError::NotOwner) => Ok(()),
        other => other,
    }
}

/// Fails over every task leased by a worker of `provisioner_id`, whatever its deadline: the
/// provisioner registered again (a new incarnation, which knows nothing of its predecessor's
/// leases) or was dropped for missing its heartbeats. Each task goes through the same retry logic
/// as a failed finish, so it is queued again at once (a CREATE first gets a DELETE of what it may
/// have made). A late finish from the old incarnation then gets 417. Returns the ids failed over.
pub async fn fail_over_leases(
    st: &Engine,
    provisioner_id: &str,
    why: &str,
) -> EngineResult<Vec<String>> {
    let mut failed = Vec::new();
    for task in st.store.tasks_leased_by(provisioner_id).await? {
        match fail_expired(st, &task, i64::MAX, why).await {
            Ok(()) => {
                tracing::warn!(task_id = %task.id, job_id = %task.job_id, cluster_id = task.cluster_id,
                    provisioner = provisioner_id, "lease of a gone provisioner failed over");
                failed.push(task.id);
            }
            Err(e) => tracing::error!(task_id = %task.id, job_id = %task.job_id,
                cluster_id = task.cluster_id, error = %e, "could not fail over task"),
        }
    }
    Ok(failed)
}

fn not_owner() -> EngineError {
    EngineError::NotOwner
}

/// Keeps the end of a log, as Coopr did.
fn trim_log(s: &str) -> String {
    if s.len() <= MAX_LOG {
        return s.to_string();
    }
    format!("[snipped]{}", end_of(s, MAX_LOG))
}

#[tracing::instrument(skip_all, fields(task_id = %task_id, job_id = tracing::field::Empty, cluster_id = tracing::field::Empty))]
async fn finish_step(
    st: &Engine,
    w: &Worker,
    task_id: &str,
    req: &FinishTaskRequest,
) -> EngineResult<()> {
    let now = st.now_ms();
    let tenant = &w.tenant_id;
    let (task, job) = leased_task(st, w, task_id).await?;
    let span = tracing::Span::current();
    span.record("job_id", task.job_id.as_str());
    span.record("cluster_id", task.cluster_id);
    if !still_to_finish(w, &task)? {
        return Ok(());
    }
    let (job_status, job_rev) =
        job.ok_or_else(|| EngineError::Internal("task without job".into()))?;
    // A health check that fails is a finding, not a failed task: it is not retried (the
    // provisioner already tried) and it does not fail the health run.
    let health = health_report(&task, req);
    // Likewise a STATUS: a missing machine (or a provider that could not say) is a finding.
    let machine = crate::drift::status_report(&task, req);
    let ok = req.status == Some(0) || health.is_some() || machine.is_some();
    let mut cs = ChangeSet::new();
    cs.expect(Expect::task(&task));
    update_node(st, &mut cs, tenant, &task, req, ok).await?;
    let mut done = task.clone();
    if w.expired_before.is_some() {
        // Timed out: the worker that held the lease no longer owns the task.
        done.lease_owner = None;
    }
    let tbody = result_body(&task, req, health, machine, now)?;
    let job_paused = job_status == JobStatus::Paused;
    let job_running = job_status == JobStatus::Running || job_paused;
    if job_running && tbody.health.as_ref().is_some_and(|h| !h.healthy) {
        if let Some(job) = crate::gate::rollout_job(st, &task).await? {
            return gate_failed(st, cs, &task, done, tbody, &job, now).await;
        }
    }
    if ok && job_running {
        done.state = TaskState::Complete;
        done.body = to_body(&tbody)?;
        cs.write(Write::Task(done));
        return complete_task(st, cs, &task, job_rev, job_paused, now).await;
    }
    let finished = Finished {
        task,
        done,
        tbody,
        ok,
        job_running,
        job_paused,
        now,
    };
    finish_off_course(st, cs, finished, req).await
}

/// The task's record as its finish leaves it: exit status, time, the ends of its output, and a
/// health check's or a STATUS's finding.
fn result_body(
    task: &TaskRow,
    req: &FinishTaskRequest,
    health: Option<weft_model::HealthReport>,
    machine: Option<weft_model::MachineReport>,
    now: i64,
) -> EngineResult<TaskBody> {
    let mut tbody: TaskBody = from_body(&task.body)?;
    tbody.status_code = req.status;
    tbody.finish_time = now;
    tbody.stdout = req.stdout.as_deref().map(trim_log);
    tbody.stderr = req.stderr.as_deref().map(trim_log);
    tbody.health = health;
    tbody.machine = machine;
    Ok(tbody)
}

/// A finished task that does not simply complete: how it ended, and where its job stood.
struct Finished {
    task: TaskRow,
    done: TaskRow,
    tbody: TaskBody,
    ok: bool,
    job_running: bool,
    job_paused: bool,
    now: i64,
}

/// A task that succeeded after its job failed or was aborted completes and settles the job; a
/// task that failed is retried (while its job runs, the failure is retryable and tries are left)
/// or fails for good, failing its job. Commits, then tells of a failed job and starts what its
/// failure asks for (a rollback).
async fn finish_off_course(
    st: &Engine,
    mut cs: ChangeSet,
    f: Finished,
    req: &FinishTaskRequest,
) -> EngineResult<()> {
    let Finished {
        task,
        mut done,
        mut tbody,
        ok,
        job_running,
        job_paused,
        now,
    } = f;
    let tenant = &task.tenant_id;
    let job = st
        .store
        .get_job(tenant, &task.job_id)
        .await?
        .ok_or_else(|| EngineError::Internal("task without job".into()))?;
    let cluster = st
        .store
        .get_cluster(tenant, task.cluster_id)
        .await?
        .ok_or_else(|| EngineError::Internal("task without cluster".into()))?;
    let mut outcome: Option<JobEventKind> = None;
    if ok {
        // Its job failed or was aborted while the task ran.
        done.state = TaskState::Complete;
        done.body = to_body(&tbody)?;
        cs.write(Write::Task(done));
        settle_failed_job(st, &mut cs, &job, &cluster, &task.id).await?;
    } else {
        let host = host_of(st, &task).await?;
        tbody.message = Some(failure_message(&task, req, &host));
        tbody.failure = req.failure.clone();
        let fatal = req.failure.as_ref().is_some_and(|f| !f.retryable);
        if job_running && !fatal && task.attempts < st.settings.max_action_retries {
            retry_task(&mut cs, &task, done, tbody, job_paused, now)?;
            // Retried only while the job still runs.
            cs.expect(Expect::job(&job));
            tracing::warn!(task_id = %task.id, job_id = %job.id, attempt = task.attempts, "task failed; retrying");
        } else {
            if job_running {
                tracing::warn!(task_id = %task.id, job_id = %job.id, fatal, "task failed for good; job failed");
                outcome = Some(JobEventKind::Failure);
            }
            fail_for_good(
                st,
                &mut cs,
                &task,
                done,
                tbody,
                &job,
                &cluster,
                job_running,
                now,
            )
            .await?;
        }
    }
    st.store.commit(&cs).await.map_err(store_err)?;
    crate::metrics::task_finished(&task, st.settings.task_timeout_ms, now);
    if let Some(kind) = outcome {
        crate::metrics::job_ended(&job.action, kind == JobEventKind::Success);
        notify(st, kind, tenant, cluster.id, &job.id);
    }
    // A failed job may have just settled its cluster: roll back what asked to be.
    crate::rollback::after_failed_job(st, tenant, cluster.id).await;
    Ok(())
}

/// A rollout's health gate found the task's service unhealthy: the rollout stops before its next
/// batch, pausing or failing the job (`gate`); a failed job settles the cluster and starts what
/// follows (a revert).
async fn gate_failed(
    st: &Engine,
    mut cs: ChangeSet,
    task: &TaskRow,
    done: TaskRow,
    tbody: TaskBody,
    job: &JobRow,
    now: i64,
) -> EngineResult<()> {
    let tenant = &task.tenant_id;
    let stop = crate::gate::stop_rollout(st, &mut cs, done, tbody, job).await?;
    let failed = match stop {
        crate::gate::Stop::Paused => None,
        crate::gate::Stop::Failed(failed) => {
            let cluster = st
                .store
                .get_cluster(tenant, task.cluster_id)
                .await?
                .ok_or_else(|| EngineError::Internal("task without cluster".into()))?;
            settle_failed_job(st, &mut cs, &failed, &cluster, &task.id).await?;
            Some(failed)
        }
    };
    st.store.commit(&cs).await.map_err(store_err)?;
    crate::metrics::task_finished(task, st.settings.task_timeout_ms, now);
    tracing::warn!(task_id = %task.id, job_id = %job.id, cluster_id = task.cluster_id,
        service = %task.service, node = %task.node_id, paused = failed.is_none(),
        "health gate failed; rollout stopped");
    if let Some(job) = failed {
        crate::metrics::job_ended(&job.action, false);
        notify(st, JobEventKind::Failure, tenant, task.cluster_id, &job.id);
        crate::rollback::after_failed_job(st, tenant, task.cluster_id).await;
    }
    Ok(())
}

/// The task being finished and its job's status and revision: the copy `take` kept, if it
/// agrees with this finish (the change set expects the revisions it has, so a stale copy only
/// costs a retry that reads the store), else the store's.
async fn leased_task(st: &Engine, w: &Worker, task_id: &str) -> EngineResult<LeasedTask> {
    let leased = st.leases.take(&w.tenant_id, task_id).filter(|(t, _)| {
        w.expired_before.is_none()
            && t.state == TaskState::InProgress
            && t.lease_owner.as_deref() == Some(w.owner.as_str())
    });
    match leased {
        Some(copy) => Ok(copy),
        None => {
            let leased = st.store.task_with_job(&w.tenant_id, task_id).await?;
            leased.ok_or_else(not_owner)
        }
    }
}

/// Whether the finish still has work: `Ok(false)` for one that arrives twice (applied once) or a
/// lease that did not expire after all; [`EngineError::NotOwner`] for a worker without the lease.
fn still_to_finish(w: &Worker, task: &TaskRow) -> EngineResult<bool> {
    if task.lease_owner.as_deref() != Some(w.owner.as_str()) {
        return Err(not_owner());
    }
    if w.expired_before
        .is_some_and(|t| task.state != TaskState::InProgress || task.lease_deadline >= t)
    {
        return Ok(false);
    }
    match task.state {
        TaskState::InProgress => Ok(true),
        TaskState::Complete | TaskState::Failed | TaskState::Queued | TaskState::Pending => {
            Ok(false)
        }
        _ => Err(not_owner()),
    }
}

/// What a HEALTHCHECK task found (`None` for other tasks): the provisioner's report under
/// `result.health`; else healthy when it exited 0 (a provisioner that knows no reports), and
/// unhealthy with the failure's message when it did not (or its lease ran out).
fn health_report(task: &TaskRow, req: &FinishTaskRequest) -> Option<HealthReport> {
    if task.action != ProvisionerAction::Healthcheck.upper() {
        return None;
    }
    let reported = req
        .result
        .as_ref()
        .and_then(|r| r.get(HEALTH_RESULT_KEY))
        .and_then(|v| HealthReport::deserialize(v).ok());
    Some(match reported {
        Some(r) if req.status == Some(0) => r,
        _ if req.status == Some(0) => HealthReport {
            healthy: true,
            tries: 1,
            message: None,
        },
        _ => HealthReport {
            healthy: false,
            tries: 0,
            message: Some(failure_message(
                task,
                req,
                &format!("node {}", task.node_id),
            )),
        },
    })
}

/// The task's node gets the addresses and hostname of a success and the results the worker sent
/// (a health check's results stay with its task).
async fn update_node(
    st: &Engine,
    cs: &mut ChangeSet,
    tenant: &str,
    task: &TaskRow,
    req: &FinishTaskRequest,
    ok: bool,
) -> EngineResult<()> {
    if task.action == ProvisionerAction::Healthcheck.upper()
        || task.action == ProvisionerAction::Status.upper()
    {
        return Ok(());
    }
    let addresses = req.ipaddresses.as_ref().is_some_and(|m| !m.is_empty());
    let hostname = req.hostname.as_ref().filter(|h| !h.trim().is_empty());
    let results = req.result.as_ref().is_some_and(|m| !m.is_empty());
    if !((ok && (addresses || hostname.is_some())) || results) {
        return Ok(());
    }
    let Some(row) = st.store.get_node(tenant, &task.node_id).await? else {
        return Ok(());
    };
    let mut node: Node = from_body(&row.body)?;
    if ok {
        if let Some(ips) = &req.ipaddresses {
            node.properties.ipaddresses.extend(ips.clone());
        }
        if let Some(h) = hostname {
            node.properties.hostname = Some(h.clone());
        }
    }
    if let Some(result) = &req.result {
        for (k, v) in result {
            node.provisioner_results.insert(k.clone(), v.clone());
        }
        view::seal_results(st, tenant, &mut node.provisioner_results).await?;
    }
    let mut new = row.clone();
    new.body = to_body(&node)?;
    cs.expect(Expect::node(&row));
    cs.write(Write::Node(new));
    Ok(())
}

/// Commits a task that succeeded in a running (or paused) job: its successors are released (queued
/// unless the job is paused), and the job completes when its end gate does.
async fn complete_task(
    st: &Engine,
    mut cs: ChangeSet,
    task: &TaskRow,
    job_rev: i64,
    job_paused: bool,
    now: i64,
) -> EngineResult<()> {
    let tenant = &task.tenant_id;
    // Unchanged while this commits: a job paused, failed or aborted meanwhile re-runs the step.
    cs.expect(Expect::JobRev {
        tenant_id: tenant.clone(),
        id: task.job_id.clone(),
        rev: job_rev,
    });
    cs.write(Write::Release {
        tenant_id: tenant.clone(),
        ids: task.successors.clone(),
        queue: !job_paused,
        now,
    });
    let ended = st.store.commit_released(&cs).await.map_err(store_err)?;
    crate::metrics::task_finished(task, st.settings.task_timeout_ms, now);
    if ended.iter().any(|g| *g == end_gate(&task.job_id)) {
        complete_job(st, tenant, &task.job_id).await?;
    }
    Ok(())
}

/// What a failed task's message says: action, service, host, status, the reason its worker gave
/// and the end of its output; a fatal failure ends with "not retried: <reason>", a clean-up
/// says it is one.
fn failure_message(task: &TaskRow, req: &FinishTaskRequest, host: &str) -> String {
    let output = req
        .stderr
        .as_deref()
        .map(trim_log)
        .filter(|s| !s.trim().is_empty())
        .or(req.stdout.as_deref().map(trim_log))
        .unwrap_or_default();
    let what = format!(
        "{}{} {}on {host}",
        task.action,
        if crate::ids::is_cleanup_id(&task.id) {
            " (clean-up)"
        } else {
            ""
        },
        if task.service.is_empty() {
            String::new()
        } else {
            format!("of {} ", task.service)
        },
    );
    let status = req.status.unwrap_or(1);
    match &req.failure {
        Some(f) if !f.retryable => format!(
            "{what} failed (status {status}, {}): {}; not retried: {}",
            f.reason,
            output.trim_end(),
            f.reason
        ),
        Some(f) => format!("{what} failed (status {status}, {}): {output}", f.reason),
        None => format!("{what} failed (status {status}): {output}"),
    }
}

/// Puts a failed task back for another attempt (its history keeps the failed one); a failed
/// CREATE first gets a DELETE of whatever it made.
fn retry_task(
    cs: &mut ChangeSet,
    task: &TaskRow,
    mut done: TaskRow,
    mut tbody: TaskBody,
    job_paused: bool,
    now: i64,
) -> EngineResult<()> {
    done.lease_owner = None;
    tbody.retried.push(super::body::Attempt {
        start_time: task.started_at,
        finish_time: now,
        stdout: tbody.stdout.take(),
        stderr: tbody.stderr.take(),
        failure: tbody.failure.take(),
    });
    let excess = tbody.retried.len().saturating_sub(super::body::MAX_RETRIED);
    tbody.retried.drain(..excess);
    if task.action == ProvisionerAction::Create.upper() {
        let id = format!("{}-r{}", task.id, task.attempts);
        add_cleanup(cs, task, id, vec![task.id.clone()], now)?;
        done.state = TaskState::Pending;
        done.deps_remaining = 1;
    } else if job_paused {
        done.state = TaskState::Pending;
        done.deps_remaining = 0;
    } else {
        done.state = TaskState::Queued;
        done.queued_at = now;
    }
    done.body = to_body(&tbody)?;
    cs.write(Write::Task(done));
    Ok(())
}

/// Records a task that failed for good and fails its job (when it still runs); a CREATE that
/// failed fatally gets its clean-up DELETE now, as its retry would have. Then the cluster settles
/// as [`settle_failed_job`] says.
#[allow(clippy::too_many_arguments)]
async fn fail_for_good(
    st: &Engine,
    cs: &mut ChangeSet,
    task: &TaskRow,
    mut done: TaskRow,
    tbody: TaskBody,
    job: &JobRow,
    cluster: &ClusterRow,
    job_running: bool,
    now: i64,
) -> EngineResult<()> {
    done.state = TaskState::Failed;
    let message = tbody.message.clone().unwrap_or_default();
    let fatal = tbody.failure.as_ref().is_some_and(|f| !f.retryable);
    done.body = to_body(&tbody)?;
    cs.write(Write::Task(done));
    if !job_running {
        // A task of a job that failed meanwhile, or the clean-up after a fatal CREATE: the
        // job's message (the cause) stays; a clean-up that failed is added to it.
        let job = if tbody.cleanup {
            with_cleanup_note(job, &message)?
        } else {
            job.clone()
        };
        return settle_failed_job(st, cs, &job, cluster, &task.id).await;
    }
    let job = failed(job, message)?;
    if fatal && task.action == ProvisionerAction::Create.upper() {
        // The cluster settles when the clean-up ends (its finish comes back here).
        add_cleanup(cs, task, crate::ids::cleanup_id(&task.id), vec![], now)?;
        cs.expect(Expect::job(&job));
        cs.write(Write::Job(job));
        return Ok(());
    }
    settle_failed_job(st, cs, &job, cluster, &task.id).await
}

/// The job with a note that its clean-up DELETE failed too (`message`) after its message.
fn with_cleanup_note(job: &JobRow, message: &str) -> EngineResult<JobRow> {
    let mut j = job.clone();
    let mut jb: JobBody = from_body(&job.body)?;
    let note = format!("The clean-up failed too: {message}");
    jb.message = Some(match jb.message.take() {
        Some(m) => format!("{m} {note}"),
        None => note,
    });
    j.body = to_body(&jb)?;
    Ok(j)
}

/// Adds the clean-up DELETE `id` of a failed CREATE's node, queued now; `successors` wait for it
/// (the CREATE's retry), or none do (after a fatal failure).
fn add_cleanup(
    cs: &mut ChangeSet,
    task: &TaskRow,
    id: String,
    successors: Vec<String>,
    now: i64,
) -> EngineResult<()> {
    let cleanup = TaskRow {
        id,
        action: ProvisionerAction::Delete.upper().into(),
        service: String::new(),
        state: TaskState::Queued,
        attempts: 0,
        deps_remaining: 0,
        successors,
        lease_owner: None,
        lease_deadline: 0,
        queued_at: now,
        started_at: 0,
        rev: 0,
        body: to_body(&TaskBody {
            cleanup: true,
            ..TaskBody::default()
        })?,
        ..task.clone()
    };
    cs.expect(Expect::TaskRev {
        tenant_id: task.tenant_id.clone(),
        id: cleanup.id.clone(),
        rev: 0,
    });
    cs.write(Write::Task(cleanup));
    Ok(())
}

/// How a failed task's node is named in messages: its hostname, else its id.
async fn host_of(st: &Engine, task: &TaskRow) -> EngineResult<String> {
    let node = st.store.get_node(&task.tenant_id, &task.node_id).await?;
    let hostname = node
        .and_then(|row| from_body::<Node>(&row.body).ok())
        .and_then(|n| n.properties.hostname)
        .filter(|h| !h.trim().is_empty());
    Ok(hostname.unwrap_or_else(|| format!("node {}", task.node_id)))
}

/// The job, failed with `message`.
fn failed(job: &JobRow, message: String) -> EngineResult<JobRow> {
    let mut failed_job = job.clone();
    let mut jbody: JobBody = from_body(&job.body)?;
    jbody.message = Some(message);
    failed_job.status = JobStatus::Failed;
    failed_job.body = to_body(&jbody)?;
    Ok(failed_job)
}

/// Completes a job whose end gate has completed, and sets its cluster's status. Called by the
/// finish that completed the gate, and by the janitor for a job a server stopped in between. Does
/// nothing if the job is no longer running or paused.
pub(crate) async fn complete_job(st: &Engine, tenant: &str, job_id: &str) -> EngineResult<()> {
    retry_stale(|| async {
        let Some(job) = st.store.get_job(tenant, job_id).await? else {
            return Ok(());
        };
        if !job.status.is_underway() {
            return Ok(());
        }
        let cluster = st
            .store
            .get_cluster(tenant, job.cluster_id)
            .await?
            .ok_or_else(|| EngineError::Internal("job without cluster".into()))?;
        let mut cs = ChangeSet::new();
        finish_job(&mut cs, &job, &cluster, st.now_ms())?;
        st.store.commit(&cs).await.map_err(store_err)?;
        tracing::info!(job_id = %job.id, cluster_id = cluster.id, "job complete");
        crate::metrics::job_ended(&job.action, true);
        notify(st, JobEventKind::Success, tenant, cluster.id, &job.id);
        Ok(())
    })
    .await
}

/// Writes a failed job and, once none of its tasks is still running, gives the cluster its failure
/// status and the job's message.
async fn settle_failed_job(
    st: &Engine,
    cs: &mut ChangeSet,
    job: &JobRow,
    cluster: &ClusterRow,
    finishing: &str,
) -> EngineResult<()> {
    // `job` carries the revision it was read at: the write is a compare-and-swap on it.
    cs.expect(Expect::job(job));
    cs.write(Write::Job(job.clone()));
    let running = st
        .store
        .list_task_heads(&job.tenant_id, &job.id)
        .await?
        .iter()
        .any(|t| t.id != finishing && crate::ids::still_busy(t.state, &t.id));
    if !running
        && cluster.status == ClusterStatus::Pending
        && cluster.latest_job.as_deref() == Some(&job.id)
    {
        let jbody: JobBody = from_body(&job.body)?;
        let mut c = cluster.clone();
        let mut body: ClusterBody = from_body(&c.body)?;
        body.message = jbody.message;
        c.status = failure_status(&job.action);
        c.body = to_body(&body)?;
        cs.expect(Expect::cluster(cluster));
        cs.write(Write::Cluster(c));
    }
    Ok(())
}

/// Marks a job complete (at `now`) and sets its cluster's status.
fn finish_job(
    cs: &mut ChangeSet,
    job: &JobRow,
    cluster: &ClusterRow,
    now: i64,
) -> EngineResult<()> {
    let mut j = job.clone();
    j.status = JobStatus::Complete;
    cs.expect(Expect::job(job));
    cs.write(Write::Job(j));
    if cluster.latest_job.as_deref() == Some(&job.id) {
        let mut c = cluster.clone();
        c.status = success_status(&job.action);
        let mut body: ClusterBody = from_body(&c.body)?;
        body.message = None;
        // A shrink's removed nodes leave the cluster once their DELETEs are done; a deleted
        // cluster's nodes all leave.
        body.end_spans(Some(&body.retiring.clone()), now);
        if c.status == ClusterStatus::Terminated {
            body.end_spans(None, now);
        }
        for id in body.retiring.drain(..) {
            cs.write(Write::DeleteNode {
                tenant_id: c.tenant_id.clone(),
                id,
            });
        }
        c.body = to_body(&body)?;
        cs.expect(Expect::cluster(cluster));
        cs.write(Write::Cluster(c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_keep_their_end() {
        assert_eq!(trim_log("short"), "short");
        let long = "x".repeat(3000) + "END";
        let t = trim_log(&long);
        assert!(t.starts_with("[snipped]") && t.ends_with("END"));
        assert_eq!(t.len(), "[snipped]".len() + MAX_LOG);
    }
}
