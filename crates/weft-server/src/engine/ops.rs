//! Operations on an existing cluster: each builds the layout after the change (with the solver when
//! the layout changes), plans the job, and starts it with [`start_job`], or only shows its plan when
//! asked for a dry run.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_model::{ClusterStatus, EntityKind, MachineType, Node, PlanView, Service};
use weft_planner::{Operation, PlanInput};
use weft_solver::{Catalog, Change, ExistingNode, Layout, TypeOffer};
use weft_store::{ChangeSet, ClusterRow, Expect, NodeRow, Write};

use super::body::{from_body, to_body, ClusterBody};
use super::create::{hostname, job_id, job_rows, typed_list, MachineTypes};
use super::work::plan_nodes;
use super::{cluster_id_text, notify, store_err, view, JobEventKind};
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};

/// A cluster with its body and nodes, as read.
pub struct Loaded {
    pub row: ClusterRow,
    pub body: ClusterBody,
    pub nodes: Vec<Node>,
    pub node_rows: Vec<NodeRow>,
}

pub async fn load(st: &AppState, row: ClusterRow) -> ApiResult<Loaded> {
    let body: ClusterBody = from_body(&row.body)?;
    let node_rows = st.store.list_nodes(&row.tenant_id, row.id).await?;
    let nodes = node_rows
        .iter()
        .map(|n| from_body(&n.body))
        .collect::<ApiResult<_>>()?;
    Ok(Loaded {
        row,
        body,
        nodes,
        node_rows,
    })
}

/// 409 unless the cluster's status is one of `allowed`.
pub fn require_status(row: &ClusterRow, allowed: &[ClusterStatus]) -> ApiResult<()> {
    match ClusterStatus::parse(&row.status) {
        Some(s) if allowed.contains(&s) => Ok(()),
        _ => Err(ApiError::Conflict(format!(
            "cluster {} is {}; this needs it {}",
            cluster_id_text(row.id),
            row.status,
            allowed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" or ")
        ))),
    }
}

/// Solves a change of the cluster's layout against its template and the tenant's current catalog.
pub async fn solve_change(
    st: &AppState,
    c: &Loaded,
    change: &Change,
) -> ApiResult<(Layout, Vec<Service>, Vec<MachineType>, Vec<MachineType>)> {
    let tenant = &c.row.tenant_id;
    let hardware: Vec<MachineType> = typed_list(st, tenant, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed_list(st, tenant, EntityKind::ImageType).await?;
    let services: Vec<Service> = typed_list(st, tenant, EntityKind::Service).await?;
    let hw = TypeOffer::hardware_for(&hardware, &c.body.provider.name);
    let img = TypeOffer::images_for(&images, &c.body.provider.name);
    let catalog = Catalog {
        template: &c.body.template,
        hardware: &hw,
        images: &img,
        services: Some(&services),
    };
    let existing: Vec<ExistingNode> = c
        .nodes
        .iter()
        .map(|n| ExistingNode {
            id: n.id.clone(),
            hardwaretype: n.properties.hardwaretype.clone(),
            imagetype: n.properties.imagetype.clone(),
            services: n.properties.services.iter().cloned().collect(),
        })
        .collect();
    let layout = weft_solver::change(&catalog, &existing, change)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((layout, services, hardware, images))
}

/// The nodes after a solved change: existing nodes with their new service lists (definitions from
/// the catalog for services they gain), and new nodes numbered after the highest nodenum.
pub fn nodes_after(
    c: &Loaded,
    layout: &Layout,
    services: &[Service],
    hardware: &[MachineType],
    images: &[MachineType],
) -> Vec<Node> {
    let types = MachineTypes {
        provider: &c.body.provider.name,
        hardware,
        images,
        services,
    };
    let by_id: BTreeMap<&str, &Node> = c.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut next = c
        .nodes
        .iter()
        .map(|n| n.properties.nodenum)
        .max()
        .map_or(1000, |n| n + 1);
    let mut out = Vec::new();
    for ln in &layout.nodes {
        match ln.id.as_deref().and_then(|id| by_id.get(id)) {
            Some(old) => {
                let mut n = (*old).clone();
                let mut defs: Vec<Service> = Vec::new();
                for s in &ln.services {
                    match old.services.iter().find(|d| &d.name == s) {
                        Some(d) => defs.push(d.clone()),
                        None => defs.extend(services.iter().find(|d| &d.name == s).cloned()),
                    }
                }
                n.properties.automators = {
                    let set: std::collections::BTreeSet<String> = defs
                        .iter()
                        .flat_map(|d| d.provisioner.actions.values().map(|a| a.automator.clone()))
                        .collect();
                    set.into_iter().collect()
                };
                n.properties.services = ln.services.clone();
                n.services = defs;
                out.push(n);
            }
            None => {
                let name = hostname(&c.row.name, c.row.id, next, &c.body.dns_suffix);
                out.push(types.new_node(
                    c.row.id,
                    next,
                    name,
                    &ln.hardwaretype,
                    &ln.imagetype,
                    &ln.services,
                ));
                next += 1;
            }
        }
    }
    out
}

/// The plan a dry run answers: Coopr's stage view, with task ids numbered from 001 and no job id.
pub fn preview(plan: &weft_planner::Plan, cluster_id: String) -> ApiResult<PlanView> {
    let stages = plan.stage_view(|i| format!("{:03}", i + 1));
    let stages = serde_json::from_value(stages).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(PlanView {
        id: String::new(),
        cluster_id,
        action: plan.action.clone(),
        current_stage: 0,
        stages,
    })
}

/// What a call that changes a cluster answers: the job's plan (for a dry run, the plan that would run).
pub struct Started {
    pub plan: PlanView,
}

/// Plans `op` from `before` to `after` and, unless `dry_run`, starts it: the cluster becomes
/// pending with `body`, changed and new nodes are written, and the nodes in `retire` are removed
/// when the job succeeds. One commit, guarded by the cluster's revision.
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(skip_all, fields(cluster_id = c.row.id))]
pub async fn start_job(
    st: &AppState,
    c: &Loaded,
    op: Operation,
    before: &[Node],
    mut after: Vec<Node>,
    mut body: ClusterBody,
    retire: Vec<String>,
    dry_run: bool,
) -> ApiResult<Started> {
    let mut defs: BTreeMap<String, Service> = BTreeMap::new();
    for n in before.iter().chain(after.iter()) {
        for s in &n.services {
            defs.entry(s.name.clone()).or_insert_with(|| s.clone());
        }
    }
    let input = PlanInput {
        before: plan_nodes(before),
        after: plan_nodes(&after),
        services: defs.into_values().collect(),
        config: Value::Object(body.config.clone()),
    };
    let plan = weft_planner::plan(&op, &input).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let cid = cluster_id_text(c.row.id);
    if dry_run {
        return Ok(Started {
            plan: preview(&plan, cid)?,
        });
    }
    let job_id = job_id(st, c.row.id).await?;
    let (job, tasks) = job_rows(&c.row.tenant_id, c.row.id, &job_id, &plan, now_ms())?;
    let mut cluster = c.row.clone();
    body.message = None;
    body.retiring = retire;
    body.upgrade_from = match &op {
        Operation::Upgrade {
            service,
            batch_size,
        } => before
            .iter()
            .flat_map(|n| n.services.iter())
            .find(|s| &s.name == service)
            .map(|s| super::body::UpgradeFrom {
                service: s.clone(),
                batch_size: *batch_size,
            }),
        _ => None,
    };
    let staying: std::collections::BTreeSet<(&str, &str)> = after
        .iter()
        .flat_map(|n| {
            n.services
                .iter()
                .map(move |s| (n.id.as_str(), s.name.as_str()))
        })
        .collect();
    body.leaving = Vec::new();
    for n in before {
        for s in &n.services {
            if !staying.contains(&(n.id.as_str(), s.name.as_str()))
                && !body.leaving.iter().any(|l| l.name == s.name)
            {
                body.leaving.push(s.clone());
            }
        }
    }
    cluster.status = if job.status == "complete" {
        super::work::success_status(&job.action)
    } else {
        ClusterStatus::Pending
    }
    .as_str()
    .into();
    cluster.latest_job = Some(job_id.clone());
    cluster.body = to_body(&body)?;
    // Host pools: a host for each new node, taken before anything is recorded (409 if short).
    let (tenant_id, provider) = (&c.row.tenant_id, &c.body.provider);
    let hosts =
        crate::hostpool::take_for_new(st, tenant_id, provider, c.row.id, &c.nodes, &mut after)
            .await?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&c.row));
    cs.write(Write::Cluster(cluster));
    let old: BTreeMap<&str, (&Node, &NodeRow)> = c
        .nodes
        .iter()
        .zip(&c.node_rows)
        .map(|(n, r)| (n.id.as_str(), (n, r)))
        .collect();
    for n in &after {
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
    cs.write(Write::Job(job.clone()));
    for t in tasks {
        cs.write(Write::Task(t));
    }
    let committed = st.store.commit(&cs).await;
    hosts.settle(st, committed.is_ok()).await; // host pools: in use, or back in the pool
    committed.map_err(|e| match store_err(e) {
        ApiError::Internal(m) if m.starts_with("stale") => {
            ApiError::Conflict(format!("cluster {cid} changed meanwhile; try again"))
        }
        other => other,
    })?;
    tracing::info!(cluster_id = c.row.id, job_id = %job_id, action = %plan.action, "cluster job started");
    notify(st, JobEventKind::Start, &c.row.tenant_id, c.row.id, &job_id);
    Ok(Started {
        plan: view::plan(st, &job).await?,
    })
}

/// After a job failed and its cluster settled: a cluster whose delete aborted the job, or a create
/// that asked for it, is deleted, and a failed upgrade is rolled back to the service's previous definition. Errors are logged: the failure
/// itself is already recorded.
pub async fn after_failed_job(st: &AppState, tenant_id: &str, cluster_id: u64) {
    if let Err(e) = rollback(st, tenant_id, cluster_id).await {
        tracing::warn!(cluster_id, error = %e, "automatic rollback did not start");
    }
}

async fn rollback(st: &AppState, tenant_id: &str, cluster_id: u64) -> ApiResult<()> {
    let Some(row) = st.store.get_cluster(tenant_id, cluster_id).await? else {
        return Ok(());
    };
    if row.status == ClusterStatus::Pending.as_str() {
        return Ok(()); // not settled yet: the job's last finish comes back here
    }
    let Some(job_id) = row.latest_job.clone() else {
        return Ok(());
    };
    let Some(job) = st.store.get_job(tenant_id, &job_id).await? else {
        return Ok(());
    };
    if job.status != weft_model::JobStatus::Failed.as_str() {
        return Ok(());
    }
    let c = load(st, row).await?;
    if c.body.delete_requested {
        tracing::info!(cluster_id, job_id = %job.id, "job aborted for a delete: deleting the cluster");
        super::delete::start_delete(st, &c.row).await?;
    } else if job.action == "CLUSTER_CREATE" && c.body.rollback_on_failure {
        tracing::info!(cluster_id, job_id = %job.id, "create failed: deleting the cluster, as asked");
        super::delete::start_delete(st, &c.row).await?;
    } else if job.action == "UPGRADE_SERVICE" {
        let Some(from) = c.body.upgrade_from.clone() else {
            return Ok(());
        };
        let name = from.service.name.clone();
        let after: Vec<Node> = c
            .nodes
            .iter()
            .map(|n| {
                let mut n = n.clone();
                for s in n.services.iter_mut().filter(|s| s.name == name) {
                    *s = from.service.clone();
                }
                n
            })
            .collect();
        let op = Operation::RollbackUpgrade {
            service: name,
            batch_size: from.batch_size,
            nodes: None,
        };
        let mut body = c.body.clone();
        body.upgrade_from = None;
        tracing::info!(cluster_id, job_id = %job.id, "upgrade failed: rolling back");
        start_job(st, &c, op, &c.nodes, after, body, vec![], false).await?;
    }
    Ok(())
}

/// Starts (or, for a dry run, plans) an operation that keeps the layout: reconfigure, start, stop,
/// restart. Returns the plan only for a dry run.
pub async fn in_place(
    st: &AppState,
    c: &Loaded,
    op: Operation,
    body: ClusterBody,
    dry_run: bool,
) -> ApiResult<Option<PlanView>> {
    let s = start_job(st, c, op, &[], c.nodes.clone(), body, vec![], dry_run).await?;
    Ok(dry_run.then_some(s.plan))
}

/// Solves `change`, then starts (or plans) `op` from the current layout to the solved one; nodes
/// the solver takes away leave when the job succeeds. Returns the plan only for a dry run.
pub async fn relayout(
    st: &AppState,
    c: &Loaded,
    change: &Change,
    op: Operation,
    body: ClusterBody,
    dry_run: bool,
) -> ApiResult<Option<PlanView>> {
    let (layout, services, hw, img) = solve_change(st, c, change).await?;
    let after = nodes_after(c, &layout, &services, &hw, &img);
    let s = start_job(
        st,
        c,
        op,
        &c.nodes,
        after,
        body,
        layout.removed.clone(),
        dry_run,
    )
    .await?;
    Ok(dry_run.then_some(s.plan))
}
