//! Starting jobs: a cluster as read ([`Loaded`]), a plan turned into job and task rows, and
//! [`start_job`], which records a planned operation on an existing cluster in one commit. What a
//! finished or failed job leaves the cluster as.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};
use weft_model::{
    ClusterStatus, JobStatus, MachineType, Node, NodeProperties, PlanView, Rollout, RolloutReport,
    Service,
};
use weft_planner::{Operation, Plan, PlanInput, RolloutPlan, Vertex};
use weft_store::{ChangeSet, ClusterRow, Expect, JobRow, NodeRow, TaskRow, TaskState, Write};

use crate::body::{from_body, plan_nodes, to_body, ClusterBody, JobBody, TaskBody};
use crate::error::{EngineError, EngineResult};
use crate::ids::{cluster_id_text, GATE};
use crate::{notify, store_err, view, Engine, JobEventKind};

/// A cluster with its body and nodes, as read.
#[derive(Clone)]
pub struct Loaded {
    /// The cluster row.
    pub row: ClusterRow,
    /// The cluster's body, parsed.
    pub body: ClusterBody,
    /// The cluster's nodes, parsed from their rows, by `nodenum`.
    pub nodes: Vec<Node>,
    /// The node rows, in the same order as `nodes`.
    pub node_rows: Vec<NodeRow>,
}

/// Reads the body and the nodes of the cluster `row`.
pub async fn load(st: &Engine, row: ClusterRow) -> EngineResult<Loaded> {
    let body: ClusterBody = from_body(&row.body)?;
    let node_rows = st.store.list_nodes(&row.tenant_id, row.id).await?;
    let nodes = node_rows
        .iter()
        .map(|n| from_body(&n.body))
        .collect::<EngineResult<_>>()?;
    Ok(Loaded {
        row,
        body,
        nodes,
        node_rows,
    })
}

/// The nodes with every copy of `def`'s service replaced by `def` (an upgrade, or its rollback).
pub fn with_definition(nodes: &[Node], def: &Service) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            for s in n.services.iter_mut().filter(|s| s.name == def.name) {
                *s = def.clone();
            }
            n
        })
        .collect()
}

/// 409 unless the cluster's status is one of `allowed`.
pub fn require_status(row: &ClusterRow, allowed: &[ClusterStatus]) -> EngineResult<()> {
    if allowed.contains(&row.status) {
        Ok(())
    } else {
        Err(EngineError::WrongStatus {
            cluster: cluster_id_text(row.id),
            status: row.status.as_str().to_string(),
            needs: allowed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" or "),
        })
    }
}

/// The plan a dry run answers: Coopr's stage view, with task ids numbered from 001 and no job id.
pub fn preview(plan: &weft_planner::Plan, cluster_id: String) -> EngineResult<PlanView> {
    let stages = plan.stage_view(|i| format!("{:03}", i + 1));
    let stages =
        serde_json::from_value(stages).map_err(|e| EngineError::Internal(e.to_string()))?;
    Ok(PlanView {
        id: String::new(),
        cluster_id,
        action: plan.action.clone(),
        current_stage: 0,
        stages,
        rollout: None,
        cost: None,
    })
}

/// An operation to start, and how it rolls when it is a rolling change.
#[derive(Debug, Clone)]
pub struct JobOp {
    /// The operation to plan.
    pub op: Operation,
    /// The plan's batches and gates.
    pub rollout: Option<RolloutPlan>,
    /// The policy the job records (what a failed gate does).
    pub policy: Option<Rollout>,
    /// A rolling reconfigure: the config a revert restores.
    pub config_before: Option<Map<String, Value>>,
}

impl From<Operation> for JobOp {
    fn from(op: Operation) -> Self {
        JobOp {
            op,
            rollout: None,
            policy: None,
            config_before: None,
        }
    }
}

/// How a call that changes a cluster runs: only planned (`dry_run`), and past the services'
/// availability rules (`force`: an operator who knows better; the job records it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunMode {
    /// Plan only: nothing is recorded and the plan is answered.
    pub dry_run: bool,
    /// Plan even where a service's availability rule would not hold.
    pub force: bool,
}

impl RunMode {
    /// A dry run (or a real one), not forced.
    pub fn dry(dry_run: bool) -> RunMode {
        RunMode {
            dry_run,
            force: false,
        }
    }
}

/// What a call that changes a cluster answers: the job's plan (for a dry run, the plan that would
/// run).
pub struct Started {
    /// The job's plan, as the plans API shows it.
    pub plan: PlanView,
}

/// Plans `op` from `before` to `after` and, unless `dry_run`, starts it: the cluster becomes
/// pending with `body`, changed and new nodes are written, and the nodes in `retire` are removed
/// when the job succeeds. One commit, guarded by the cluster's revision.
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(skip_all, fields(cluster_id = c.row.id))]
pub async fn start_job(
    st: &Engine,
    c: &Loaded,
    op: impl Into<JobOp>,
    before: &[Node],
    mut after: Vec<Node>,
    mut body: ClusterBody,
    retire: Vec<String>,
    mode: RunMode,
) -> EngineResult<Started> {
    let JobOp {
        op,
        rollout,
        policy,
        config_before,
    } = op.into();
    let plan = plan_change(&op, rollout, before, &after, &body, mode.force)?;
    let cid = cluster_id_text(c.row.id);
    let report = policy.map(|policy| RolloutReport {
        policy,
        changed_nodes: vec![],
        failed_gate: None,
        outcome: None,
        revert_job: None,
        message: None,
    });
    let now = st.now_ms();
    let mut priced = price_change(st, c, &after, now).await?;
    if mode.dry_run {
        let mut plan = preview(&plan, cid)?;
        plan.rollout = report.map(Box::new);
        plan.cost = priced.estimate;
        return Ok(Started { plan });
    }
    let job_id = job_id(st, c.row.id).await?;
    let (mut job, tasks) = job_rows(&c.row.tenant_id, c.row.id, &job_id, &plan, now)?;
    record_policy(&mut job, report, config_before, mode.force)?;
    body.cost_micros_per_hour = priced.per_hour;
    body.currency = body.currency.or(priced.currency.take());
    body.cost_spans.append(&mut priced.opened);
    body.message = None;
    body.retiring = retire;
    body.upgrade_from = upgrade_from(&op, before);
    body.leaving = leaving(before, &after);
    let mut cluster = c.row.clone();
    cluster.status = match job.status {
        JobStatus::Complete => success_status(&job.action),
        JobStatus::NotSubmitted | JobStatus::Running | JobStatus::Paused | JobStatus::Failed => {
            ClusterStatus::Pending
        }
    };
    cluster.latest_job = Some(job_id.clone());
    cluster.body = to_body(&body)?;
    // Host pools: a host for each new node, taken before anything is recorded (409 if short).
    let (tenant_id, provider) = (&c.row.tenant_id, &c.body.provider);
    let hosts =
        crate::hostpool::take_for_new(st, tenant_id, provider, c.row.id, &c.nodes, &mut after)
            .await?;
    let mut cs = ChangeSet::new();
    cs.expect.extend(priced.quota);
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Cluster(cluster));
    write_nodes(&mut cs, c, &after)?;
    cs.write(Write::Job(job.clone()));
    for t in tasks {
        cs.write(Write::Task(t));
    }
    let committed = st.store.commit(&cs).await;
    hosts.settle(st, committed.is_ok()).await; // host pools: in use, or back in the pool
    committed.map_err(|e| match store_err(e) {
        EngineError::Stale(_) => EngineError::ClusterChanged(cid.clone()),
        other => other,
    })?;
    tracing::info!(cluster_id = c.row.id, job_id = %job_id, action = %plan.action, "cluster job started");
    notify(st, JobEventKind::Start, &c.row.tenant_id, c.row.id, &job_id);
    Ok(Started {
        plan: view::plan(st, &job).await?,
    })
}

/// What moving cluster `c` to the nodes `after` at `now` does to its cost.
async fn price_change(
    st: &Engine,
    c: &Loaded,
    after: &[Node],
    now: i64,
) -> EngineResult<crate::cost::JobCost> {
    let lease_left_ms = (c.row.expire_time > 0).then(|| (c.row.expire_time - now).max(0) as u64);
    let change = crate::cost::Change {
        tenant_id: &c.row.tenant_id,
        provider: &c.body.provider,
        template: &c.body.template,
        old: &c.nodes,
        new: after,
        lease_left_ms,
        now,
    };
    crate::cost::of_change(st, change).await
}

/// Writes on a new job what it must remember: a rollout's report and the config a revert
/// restores, and whether it was forced past the services' availability rules.
fn record_policy(
    job: &mut JobRow,
    report: Option<RolloutReport>,
    config_before: Option<Map<String, Value>>,
    force: bool,
) -> EngineResult<()> {
    if report.is_some() || force {
        let mut jb: JobBody = from_body(&job.body)?;
        jb.rollout = report;
        jb.config_before = config_before;
        jb.forced = force;
        job.body = to_body(&jb)?;
    }
    if force {
        tracing::warn!(cluster_id = job.cluster_id, job_id = %job.id, action = %job.action,
            "job forced past the services' availability rules");
    }
    Ok(())
}

/// The plan of an operation that keeps the cluster's layout and config (health runs, checks).
pub fn plan_in_place(c: &Loaded, op: &Operation) -> EngineResult<Plan> {
    plan_change(op, None, &[], &c.nodes, &c.body, false)
}

/// The plan of `op` from the nodes `before` to the nodes `after`, with every service definition
/// either side uses.
fn plan_change(
    op: &Operation,
    rollout: Option<RolloutPlan>,
    before: &[Node],
    after: &[Node],
    body: &ClusterBody,
    force: bool,
) -> EngineResult<Plan> {
    let mut defs: BTreeMap<String, Service> = BTreeMap::new();
    for n in before.iter().chain(after.iter()) {
        for s in &n.services {
            defs.entry(s.name.clone()).or_insert_with(|| s.clone());
        }
    }
    let input = PlanInput {
        before: plan_nodes(before),
        after: plan_nodes(after),
        services: defs.into_values().collect(),
        config: Value::Object(body.config.clone()),
        rollout,
        force,
    };
    weft_planner::plan(op, &input).map_err(|e| match e {
        e @ weft_planner::PlanError::Unavailable { .. } => EngineError::Unavailable(e.to_string()),
        e => EngineError::NoPlan(e.to_string()),
    })
}

/// For an upgrade, the service's definition before it (what a failed upgrade rolls back to).
fn upgrade_from(op: &Operation, before: &[Node]) -> Option<crate::body::UpgradeFrom> {
    match op {
        Operation::Upgrade {
            service,
            batch_size,
        } => before
            .iter()
            .flat_map(|n| n.services.iter())
            .find(|s| &s.name == service)
            .map(|s| crate::body::UpgradeFrom {
                service: s.clone(),
                batch_size: *batch_size,
            }),
        _ => None,
    }
}

/// The services that some node runs `before` and no longer runs `after` (each once).
fn leaving(before: &[Node], after: &[Node]) -> Vec<Service> {
    let staying: BTreeSet<(&str, &str)> = after
        .iter()
        .flat_map(|n| {
            n.services
                .iter()
                .map(move |s| (n.id.as_str(), s.name.as_str()))
        })
        .collect();
    let mut out: Vec<Service> = Vec::new();
    for n in before {
        for s in &n.services {
            if !staying.contains(&(n.id.as_str(), s.name.as_str()))
                && !out.iter().any(|l| l.name == s.name)
            {
                out.push(s.clone());
            }
        }
    }
    out
}

/// Writes the nodes of `after` that are new or changed, each changed one under its revision.
fn write_nodes(cs: &mut ChangeSet, c: &Loaded, after: &[Node]) -> EngineResult<()> {
    let old: BTreeMap<&str, (&Node, &NodeRow)> = c
        .nodes
        .iter()
        .zip(&c.node_rows)
        .map(|(n, r)| (n.id.as_str(), (n, r)))
        .collect();
    for n in after {
        match old.get(n.id.as_str()) {
            Some((o, _)) if *o == n => {}
            Some((_, row)) => {
                cs.expect(Expect::node(row));
                cs.write(Write::Node(NodeRow {
                    body: to_body(n)?,
                    ..(*row).clone()
                }));
            }
            None => {
                cs.write(Write::Node(NodeRow {
                    tenant_id: c.row.tenant_id.clone(),
                    cluster_id: c.row.id,
                    id: n.id.clone(),
                    nodenum: n.properties.nodenum,
                    rev: 0,
                    body: to_body(n)?,
                }));
            }
        }
    }
    Ok(())
}

/// What a new node is made from: the provider's hardware and image types and the service catalog.
pub struct MachineTypes<'a> {
    /// The provider's name.
    pub provider: &'a str,
    /// The provider's hardware types.
    pub hardware: &'a [MachineType],
    /// The provider's image types.
    pub images: &'a [MachineType],
    /// The tenant's services.
    pub services: &'a [Service],
}

impl MachineTypes<'_> {
    /// A node with a fresh id: its services' definitions, flavor, image and ssh user from the
    /// provider maps, and the automators its services use.
    pub fn new_node(
        &self,
        cluster_id: u64,
        nodenum: u64,
        hostname: String,
        hardwaretype: &str,
        imagetype: &str,
        services: &[String],
    ) -> Node {
        let defs: Vec<Service> = services
            .iter()
            .filter_map(|s| self.services.iter().find(|d| &d.name == s).cloned())
            .collect();
        let automators: BTreeSet<String> = defs
            .iter()
            .flat_map(|s| s.provisioner.actions.values().map(|a| a.automator.clone()))
            .collect();
        let pm = |types: &[MachineType], name: &str, key: &str| {
            types
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.providermap.get(self.provider))
                .and_then(|m| m.get(key))
                .cloned()
        };
        Node {
            id: uuid::Uuid::new_v4().to_string(),
            cluster_id: cluster_id_text(cluster_id),
            services: defs,
            properties: NodeProperties {
                ipaddresses: BTreeMap::new(),
                hostname: Some(hostname),
                nodenum,
                hardwaretype: hardwaretype.into(),
                imagetype: imagetype.into(),
                flavor: pm(self.hardware, hardwaretype, "flavor"),
                image: pm(self.images, imagetype, "image"),
                sshuser: pm(self.images, imagetype, "sshuser").unwrap_or_else(|| "root".into()),
                services: services.to_vec(),
                automators: automators.into_iter().collect(),
            },
            actions: Vec::new(),
            provisioner_results: Map::new(),
            links: Vec::new(),
        }
    }
}

/// The completed SOLVE_LAYOUT job of a create whose layout was found.
pub fn solved_job(tenant_id: &str, cluster_id: u64, id: String, now: i64) -> EngineResult<JobRow> {
    Ok(JobRow {
        tenant_id: tenant_id.to_string(),
        cluster_id,
        id,
        action: "SOLVE_LAYOUT".into(),
        status: JobStatus::Complete,
        create_time: now,
        rev: 0,
        steps_done: 0,
        steps_total: 0,
        body: to_body(&JobBody::default())?,
    })
}

/// A new job id for a cluster: `<clusterId>-<NNN>` from the global job counter.
pub async fn job_id(st: &Engine, cluster_id: u64) -> EngineResult<String> {
    let n = st.store.next_id("jobs").await?;
    Ok(format!("{}-{n:03}", cluster_id_text(cluster_id)))
}

/// The job and task rows of a plan. Tasks whose predecessors are all done are queued; gates with no
/// pending predecessor are complete at once; one last gate (`<job>-end`) follows every sink.
pub fn job_rows(
    tenant_id: &str,
    cluster_id: u64,
    job_id: &str,
    plan: &Plan,
    now: i64,
) -> EngineResult<(JobRow, Vec<TaskRow>)> {
    let g = graph(plan, job_id);
    let at = RowsOf {
        tenant_id,
        cluster_id,
        job_id,
        now,
    };
    let end = crate::ids::end_gate(job_id);
    let mut rows = Vec::with_capacity(g.ids.len() + 1);
    for v in 0..g.ids.len() {
        rows.push(vertex_row(&at, plan, &g, v, &end)?);
    }
    rows.push(end_row(&at, end, g.end_deps));
    let job = job_row(&at, plan, g.end_deps)?;
    Ok((job, rows))
}

/// Where a job's rows belong, and when they are made.
struct RowsOf<'a> {
    tenant_id: &'a str,
    cluster_id: u64,
    job_id: &'a str,
    now: i64,
}

/// A plan's vertices (its tasks, then its gates) as their rows hold them: ids, successors,
/// predecessors not done, first states (gates done from the start complete, tasks with nothing
/// to wait for queued), and how many sinks the end gate still waits for.
struct Graph {
    ids: Vec<String>,
    succ: Vec<BTreeSet<usize>>,
    deps: Vec<u32>,
    state: Vec<TaskState>,
    end_deps: u32,
}

fn task_id(job_id: &str, i: usize) -> String {
    format!("{job_id}-{:03}", i + 1)
}

fn graph(plan: &Plan, job_id: &str) -> Graph {
    let n_tasks = plan.tasks.len();
    let index = |v: &Vertex| match v {
        Vertex::Task(i) => *i,
        Vertex::Gate(g) => n_tasks + *g,
    };
    let total = n_tasks + plan.gates;
    let ids: Vec<String> = (0..total)
        .map(|v| {
            if v < n_tasks {
                task_id(job_id, v)
            } else {
                format!("{job_id}-g{}", v - n_tasks)
            }
        })
        .collect();
    let mut succ: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); total];
    for e in &plan.edges {
        succ[index(&e.from)].insert(index(&e.to));
    }
    let mut deps = vec![0u32; total];
    for s in &succ {
        for &t in s {
            deps[t] += 1;
        }
    }
    let mut end_deps = (0..total).filter(|&v| succ[v].is_empty()).count() as u32;
    // Settle gates that are done from the start, in dependency order.
    let mut state: Vec<TaskState> = vec![TaskState::Pending; total];
    let mut stack: Vec<usize> = (n_tasks..total).filter(|&g| deps[g] == 0).collect();
    while let Some(g) = stack.pop() {
        state[g] = TaskState::Complete;
        if succ[g].is_empty() {
            end_deps -= 1;
        }
        for &t in &succ[g] {
            deps[t] -= 1;
            if deps[t] == 0 && t >= n_tasks {
                stack.push(t);
            }
        }
    }
    for (i, s) in state.iter_mut().enumerate().take(n_tasks) {
        if deps[i] == 0 {
            *s = TaskState::Queued;
        }
    }
    Graph {
        ids,
        succ,
        deps,
        state,
        end_deps,
    }
}

/// The row of vertex `v` (a task of the plan, or a gate); a sink leads to the end gate `end`.
fn vertex_row(at: &RowsOf, plan: &Plan, g: &Graph, v: usize, end: &str) -> EngineResult<TaskRow> {
    let (node_id, action, service, automators) = match plan.tasks.get(v) {
        Some(t) => (
            t.node_id.clone(),
            t.action.upper().to_string(),
            t.service.clone().unwrap_or_default(),
            t.automators.clone(),
        ),
        None => (String::new(), GATE.to_string(), String::new(), Vec::new()),
    };
    let mut successors: Vec<String> = g.succ[v].iter().map(|&t| g.ids[t].clone()).collect();
    if g.succ[v].is_empty() {
        successors.push(end.to_string());
    }
    Ok(TaskRow {
        tenant_id: at.tenant_id.into(),
        cluster_id: at.cluster_id,
        job_id: at.job_id.into(),
        id: g.ids[v].clone(),
        node_id,
        action,
        service,
        state: g.state[v],
        attempts: 0,
        deps_remaining: g.deps[v],
        successors,
        lease_owner: None,
        lease_deadline: 0,
        queued_at: if g.state[v] == TaskState::Queued {
            at.now
        } else {
            0
        },
        started_at: 0,
        rev: 0,
        body: to_body(&TaskBody {
            automators,
            ..Default::default()
        })?,
    })
}

/// The job's end gate, which waits for `end_deps` sinks.
fn end_row(at: &RowsOf, end: String, end_deps: u32) -> TaskRow {
    TaskRow {
        tenant_id: at.tenant_id.into(),
        cluster_id: at.cluster_id,
        job_id: at.job_id.into(),
        id: end,
        node_id: String::new(),
        action: GATE.into(),
        service: String::new(),
        state: if end_deps == 0 {
            TaskState::Complete
        } else {
            TaskState::Pending
        },
        attempts: 0,
        deps_remaining: end_deps,
        successors: Vec::new(),
        lease_owner: None,
        lease_deadline: 0,
        queued_at: 0,
        started_at: 0,
        rev: 0,
        body: json!({}),
    }
}

/// The job row: running, or complete at once when nothing is left to do; its body keeps Coopr's
/// stages.
fn job_row(at: &RowsOf, plan: &Plan, end_deps: u32) -> EngineResult<JobRow> {
    let stages: Vec<Vec<String>> = plan
        .stages()
        .into_iter()
        .map(|s| s.into_iter().map(|i| task_id(at.job_id, i)).collect())
        .collect();
    Ok(JobRow {
        tenant_id: at.tenant_id.into(),
        cluster_id: at.cluster_id,
        id: at.job_id.into(),
        action: plan.action.clone(),
        status: if end_deps == 0 {
            JobStatus::Complete
        } else {
            JobStatus::Running
        },
        create_time: at.now,
        rev: 0,
        steps_done: 0,
        steps_total: plan.tasks.len() as u64,
        body: to_body(&JobBody {
            stages,
            total: plan.tasks.len() as u64,
            ..Default::default()
        })?,
    })
}

/// A node's hostname: `<cluster name>-<cluster id>-<nodenum>` (the name lower case, leading
/// digits dropped, `_` and `.` as `-`; Coopr glued the id to the name, which read as a typo), cut
/// to a 63-character label, then `.` and the DNS suffix.
pub fn hostname(name: &str, cluster_id: u64, nodenum: u64, suffix: &str) -> String {
    let base: String = name
        .to_ascii_lowercase()
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .chars()
        .map(|c| if c == '_' || c == '.' { '-' } else { c })
        .collect();
    let tail = format!("{cluster_id}-{nodenum}");
    let room = 63usize.saturating_sub(tail.len() + 1);
    let base: String = base.chars().take(room).collect();
    let base = base.trim_matches('-');
    let suffix = suffix.strip_prefix('.').unwrap_or(suffix);
    if base.is_empty() {
        format!("{tail}.{suffix}")
    } else {
        format!("{base}-{tail}.{suffix}")
    }
}

/// The cluster status a completed job leaves behind.
pub fn success_status(action: &str) -> ClusterStatus {
    if action == "CLUSTER_DELETE" {
        ClusterStatus::Terminated
    } else {
        ClusterStatus::Active
    }
}

/// The cluster status a failed job leaves behind.
pub fn failure_status(action: &str) -> ClusterStatus {
    match action {
        "SOLVE_LAYOUT" => ClusterStatus::Terminated,
        "CLUSTER_CREATE" | "CLUSTER_DELETE" => ClusterStatus::Incomplete,
        _ => ClusterStatus::Inconsistent,
    }
}
