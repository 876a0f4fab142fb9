//! Moving a cluster to a declared state in one job: a template version, a set of services, a
//! size, a config and a lease, all at once (template sync and `weft apply`). The layout comes from
//! the solver in steps (services removed, then the new template with the services added, then
//! the size); the job is a CHANGE_TEMPLATE when the layout changes (restarting the services that
//! stay when the config changes too), a reconfigure with restart
//! (rolling by the template's policy) when only the config does, and none when only the
//! template's version or the lease does. Every answer carries a fingerprint of the cluster state
//! and of the change, so that a reviewed plan runs only on the state it was made from.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use weft_model::{
    diff, ClusterChange, ClusterTemplate, EntityKind, MachineType, Node, PlanView, Service,
};
use weft_planner::Operation;
use weft_solver::{Catalog, Change, ExistingNode, Layout, LayoutNode, TypeOffer};
use weft_store::{ChangeSet, Expect, Write};

use crate::body::to_body;
use crate::catalog::typed_list;
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{start_job, JobOp, Loaded, RunMode};
use crate::ops::{
    check_node_quota, existing_nodes, nodes_after, rolling, rollout_policy, runs_within,
    with_own_services,
};
use crate::{store_err, Caller, Engine};

/// Where a cluster should be.
#[derive(Debug, Clone)]
pub struct Target {
    /// The template version, resolved.
    pub template: ClusterTemplate,
    /// The services to run.
    pub services: Vec<String>,
    /// The number of nodes.
    pub size: u64,
    /// The config.
    pub config: Map<String, Value>,
    /// The new lease end (ms since the epoch, 0 forever); `None` keeps it.
    pub expire_time: Option<i64>,
    /// Config paths where the cluster's own value was kept (shown in the answer).
    pub config_kept: Vec<String>,
    /// Services added may take new nodes when the existing ones cannot hold them (a sync; a
    /// declaration's size is kept as declared).
    pub may_grow: bool,
}

/// The solved layout of a target and the catalog it was solved against.
struct Solved {
    layout: Layout,
    services: Vec<Service>,
    hardware: Vec<MachineType>,
    images: Vec<MachineType>,
}

/// What moving `c` to `target` does, and unless `mode.dry_run`, does it: starts the job (or
/// records the new template version or lease when no task is needed). `expect`: the fingerprint
/// of a reviewed plan, refused (409) when the state or the change differ from it. A dry run
/// answers why the cluster cannot move in `blocked`; a real run answers it as an error.
pub async fn move_cluster(
    st: &Engine,
    who: &Caller,
    c: &Loaded,
    target: Target,
    mode: RunMode,
    expect: Option<&str>,
) -> EngineResult<ClusterChange> {
    let mut change = outline(c, &target);
    let solved = match blocked_by(c, &target, st.settings.max_cluster_size) {
        Some(why) => Err(why),
        None => solve_target(st, c, &target).await,
    };
    let solved = match solved {
        Ok(s) => s,
        Err(why) if mode.dry_run => {
            change.changes = true;
            change.blocked = Some(why);
            change.fingerprint = fingerprint(c, &change);
            return Ok(change);
        }
        Err(why) => return Err(unsatisfied(c, &target, why)),
    };
    let after = nodes_after(
        c,
        &solved.layout,
        &solved.services,
        &solved.hardware,
        &solved.images,
    );
    describe_layout(c, &after, &solved.layout, &mut change);
    let job = job_of(c, &target, &change)?;
    let body = body_after(c, &target);
    if let Some(op) = &job {
        let dry = RunMode {
            dry_run: true,
            ..mode
        };
        let removed = solved.layout.removed.clone();
        let plan = start_job(
            st,
            c,
            op.clone(),
            &c.nodes,
            after.clone(),
            body.clone(),
            removed,
            dry,
        )
        .await?
        .plan;
        change.summary = summary(&plan);
        change.plan = Some(plan);
    }
    change.changes = job.is_some() || !change.template_diff.is_empty() || change.lease.is_some();
    change.fingerprint = fingerprint(c, &change);
    if let Some(want) = expect {
        check_fingerprint(c, want, &change.fingerprint)?;
    }
    if mode.dry_run || !change.changes {
        return Ok(change);
    }
    check_node_quota(st, who, change.nodes_added).await?;
    match job {
        Some(op) => {
            // The new lease is written by the job's own commit (guarded by the row's revision).
            let mut leased = c.clone();
            if let Some(t) = target.expire_time {
                leased.row.expire_time = t;
            }
            let removed = solved.layout.removed;
            let s = start_job(st, &leased, op, &c.nodes, after, body, removed, mode).await?;
            change.job = Some(s.plan.id.clone());
        }
        None => record_quietly(st, c, body, target.expire_time).await?,
    }
    Ok(change)
}

/// The parts of the answer that need no solver: versions, diffs, services, lease.
fn outline(c: &Loaded, target: &Target) -> ClusterChange {
    let as_json = |t: &ClusterTemplate| serde_json::to_value(t).unwrap_or(Value::Null);
    let have: BTreeSet<&String> = c.body.services.iter().collect();
    let want: BTreeSet<&String> = target.services.iter().collect();
    let lease = target
        .expire_time
        .filter(|t| *t != c.row.expire_time)
        .map(|t| [c.row.expire_time, t]);
    ClusterChange {
        cluster_id: cluster_id_text(c.row.id),
        name: c.row.name.clone(),
        template: target.template.name.clone(),
        from_version: c.body.template.version,
        to_version: target.template.version,
        template_diff: diff(&as_json(&c.body.template), &as_json(&target.template)),
        services_added: want.difference(&have).map(|s| s.to_string()).collect(),
        services_removed: have.difference(&want).map(|s| s.to_string()).collect(),
        config_diff: diff(
            &Value::Object(c.body.config.clone()),
            &Value::Object(target.config.clone()),
        ),
        config_kept: target.config_kept.clone(),
        lease,
        ..Default::default()
    }
}

/// Why the cluster cannot be what `target` says, before any solving: a size outside the
/// template's range, nodes or services the template no longer allows.
fn blocked_by(c: &Loaded, target: &Target, max_size: u64) -> Option<String> {
    let t = &target.template;
    if target.size > max_size {
        return Some(format!(
            "size {} is above the server's limit of {max_size} (max_cluster_size)",
            target.size
        ));
    }
    let size = &t.constraints.size;
    if target.size < size.min || target.size > size.max {
        return Some(format!(
            "size {} is outside the template's range {}..{}",
            target.size, size.min, size.max
        ));
    }
    if let Err(why) = runs_within(t, c) {
        return Some(why);
    }
    let allowed = &t.compatibility.services;
    target
        .services
        .iter()
        .find(|s| !allowed.is_empty() && !allowed.contains(s))
        .map(|s| format!("the template does not allow service {s}"))
}

fn unsatisfied(c: &Loaded, target: &Target, why: String) -> EngineError {
    EngineError::TemplateUnsatisfied {
        cluster: cluster_id_text(c.row.id),
        template: format!(
            "{} (version {})",
            target.template.name, target.template.version
        ),
        why,
    }
}

/// Solves the target layout in steps over the tenant's catalog: each removed service, then the
/// template with the added services, then the size. `Err` says why no layout exists.
async fn solve_target(st: &Engine, c: &Loaded, target: &Target) -> Result<Solved, String> {
    let tenant = &c.row.tenant_id;
    let lists = async {
        let hardware: Vec<MachineType> = typed_list(st, tenant, EntityKind::HardwareType).await?;
        let images: Vec<MachineType> = typed_list(st, tenant, EntityKind::ImageType).await?;
        let services = with_own_services(typed_list(st, tenant, EntityKind::Service).await?, c);
        EngineResult::Ok((hardware, images, services))
    };
    let (hardware, images, services) = lists.await.map_err(|e| e.to_string())?;
    let hw = TypeOffer::hardware_for(&hardware, &c.body.provider.name);
    let img = TypeOffer::images_for(&images, &c.body.provider.name);
    let catalog = Catalog {
        template: &target.template,
        hardware: &hw,
        images: &img,
        services: Some(&services),
    };
    let layout = solve_steps(&catalog, c, target).map_err(|e| e.to_string())?;
    Ok(Solved {
        layout,
        services,
        hardware,
        images,
    })
}

/// The solver's steps towards `target`, from the cluster's nodes.
fn solve_steps(
    catalog: &Catalog<'_>,
    c: &Loaded,
    target: &Target,
) -> Result<Layout, weft_solver::SolveError> {
    let mut existing = existing_nodes(c);
    let have: BTreeSet<&String> = c.body.services.iter().collect();
    let want: BTreeSet<&String> = target.services.iter().collect();
    let steps: Vec<Change> = have
        .difference(&want)
        .map(|s| Change::RemoveService(s.to_string()))
        .collect();
    let added: Vec<String> = want.difference(&have).map(|s| s.to_string()).collect();
    for step in steps {
        existing = as_existing(&weft_solver::change(catalog, &existing, &step)?.nodes);
    }
    let n = existing.len() as u64;
    let steps = match target.size.cmp(&n) {
        Ordering::Greater if !added.is_empty() => {
            let grown = add_with_nodes(catalog, &existing, &added, target.size - n)?;
            return Ok(final_layout(c, as_existing(&grown.nodes)));
        }
        Ordering::Greater => vec![Change::Retemplate(added), Change::Expand(target.size - n)],
        Ordering::Less => vec![Change::Retemplate(added), Change::Shrink(n - target.size)],
        Ordering::Equal if target.may_grow && !added.is_empty() => {
            let grown = grow_for(catalog, &existing, &added)?;
            return Ok(final_layout(c, as_existing(&grown.nodes)));
        }
        Ordering::Equal => vec![Change::Retemplate(added)],
    };
    for step in steps {
        existing = as_existing(&weft_solver::change(catalog, &existing, &step)?.nodes);
    }
    Ok(final_layout(c, existing))
}

/// Services and `k` nodes added together: the services on the existing nodes and then the nodes,
/// else one search that may give a new service a new node ([`Change::Reshape`]); the first
/// attempt's reason when neither works.
fn add_with_nodes(
    catalog: &Catalog<'_>,
    existing: &[ExistingNode],
    added: &[String],
    k: u64,
) -> Result<Layout, weft_solver::SolveError> {
    let stepwise = weft_solver::change(catalog, existing, &Change::Retemplate(added.to_vec()))
        .and_then(|l| weft_solver::change(catalog, &as_existing(&l.nodes), &Change::Expand(k)));
    stepwise.or_else(|first| {
        let step = Change::Reshape {
            add: added.to_vec(),
            nodes: k,
        };
        weft_solver::change(catalog, existing, &step).map_err(|_| first)
    })
}

/// The added services on the existing nodes, else with the fewest new nodes that hold them
/// (within the template's size range); the first failure's reason when none do.
fn grow_for(
    catalog: &Catalog<'_>,
    existing: &[ExistingNode],
    added: &[String],
) -> Result<Layout, weft_solver::SolveError> {
    let first = match weft_solver::change(catalog, existing, &Change::Retemplate(added.to_vec())) {
        Ok(layout) => return Ok(layout),
        Err(e) => e,
    };
    let n = existing.len() as u64;
    let room = catalog
        .template
        .constraints
        .size
        .max
        .saturating_sub(n)
        .min(8);
    (1..=room)
        .find_map(|k| {
            let step = Change::Reshape {
                add: added.to_vec(),
                nodes: k,
            };
            weft_solver::change(catalog, existing, &step).ok()
        })
        .ok_or(first)
}

/// Marks the ids the solver steps gave new nodes, so that later steps can name them.
const NEW: &str = "+new-";

fn as_existing(nodes: &[LayoutNode]) -> Vec<ExistingNode> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ExistingNode {
            id: n.id.clone().unwrap_or_else(|| format!("{NEW}{i}")),
            hardwaretype: n.hardwaretype.clone(),
            imagetype: n.imagetype.clone(),
            services: n.services.iter().cloned().collect(),
        })
        .collect()
}

/// The steps' end as one layout: new nodes without ids, and the cluster's nodes it lacks.
fn final_layout(c: &Loaded, nodes: Vec<ExistingNode>) -> Layout {
    let kept: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    let removed = c
        .nodes
        .iter()
        .filter(|n| !kept.contains(n.id.as_str()))
        .map(|n| n.id.clone())
        .collect();
    let nodes = nodes
        .into_iter()
        .map(|n| LayoutNode {
            id: (!n.id.starts_with(NEW)).then_some(n.id),
            hardwaretype: n.hardwaretype,
            imagetype: n.imagetype,
            services: n.services.into_iter().collect(),
        })
        .collect();
    Layout { nodes, removed }
}

/// Fills the layout lines and node counts of the answer.
fn describe_layout(c: &Loaded, after: &[Node], layout: &Layout, change: &mut ClusterChange) {
    let before: BTreeMap<&str, &Node> = c.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let shape = |n: &Node| {
        let p = &n.properties;
        let host = p.hostname.as_deref().unwrap_or(&n.id);
        format!("{host} ({}, {})", p.hardwaretype, p.imagetype)
    };
    for n in after {
        let Some(old) = before.get(n.id.as_str()) else {
            change.nodes_added += 1;
            let services = n.properties.services.join(", ");
            change
                .layout
                .push(format!("+ node {}: {services}", shape(n)));
            continue;
        };
        let (was, now): (BTreeSet<&String>, BTreeSet<&String>) = (
            old.properties.services.iter().collect(),
            n.properties.services.iter().collect(),
        );
        let moves: Vec<String> = (now.difference(&was).map(|s| format!("+ {s}")))
            .chain(was.difference(&now).map(|s| format!("- {s}")))
            .collect();
        if !moves.is_empty() {
            change
                .layout
                .push(format!("~ node {}: {}", shape(n), moves.join(", ")));
        }
    }
    for id in &layout.removed {
        if let Some(n) = before.get(id.as_str()) {
            change.layout.push(format!("- node {}", shape(n)));
        }
    }
    change.nodes_removed = layout.removed.clone();
}

/// The job that makes the change: CHANGE_TEMPLATE when the layout changes, a reconfigure with
/// restart (rolling by the template's policy) when only the config does, else none.
fn job_of(c: &Loaded, target: &Target, change: &ClusterChange) -> EngineResult<Option<JobOp>> {
    if !change.layout.is_empty() {
        let restart = !change.config_diff.is_empty();
        return Ok(Some(Operation::ChangeTemplate { restart }.into()));
    }
    if change.config_diff.is_empty() {
        return Ok(None);
    }
    let mut job = rolling(
        Operation::Reconfigure { restart: true },
        rollout_policy(&target.template, None)?,
    );
    if job.policy.is_some() {
        job.config_before = Some(c.body.config.clone());
    }
    Ok(Some(job))
}

fn body_after(c: &Loaded, target: &Target) -> crate::body::ClusterBody {
    let mut body = c.body.clone();
    body.template = target.template.clone();
    body.services = target.services.clone();
    body.config = target.config.clone();
    body
}

/// The plan in short: `INSTALL kafka on 3 node(s)`, in the order actions first appear.
fn summary(plan: &PlanView) -> Vec<String> {
    let mut counts: Vec<((String, String), BTreeSet<String>)> = Vec::new();
    for t in plan.stages.iter().flatten() {
        let key = (t.task_name.clone(), t.service.clone());
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, nodes)) => {
                nodes.insert(t.node_id.clone());
            }
            None => counts.push((key, BTreeSet::from([t.node_id.clone()]))),
        }
    }
    counts
        .into_iter()
        .map(|((action, service), nodes)| {
            let what = if service.is_empty() {
                action
            } else {
                format!("{action} {service}")
            };
            format!("{what} on {} node(s)", nodes.len())
        })
        .collect()
}

/// `<state>-<change>`: 16 hex digits of a SHA-256 of the cluster as stored, then of the change.
fn fingerprint(c: &Loaded, change: &ClusterChange) -> String {
    let state = serde_json::json!({
        "status": c.row.status.as_str(),
        "expire": c.row.expire_time,
        "job": c.row.latest_job,
        "body": c.row.body,
        "nodes": c.node_rows.iter().map(|n| &n.body).collect::<Vec<_>>(),
    });
    let mut what = change.clone();
    what.plan = None;
    what.job = None;
    what.fingerprint = String::new();
    let what = serde_json::to_value(&what).unwrap_or(Value::Null);
    format!("{}-{}", short_hash(&state), short_hash(&what))
}

fn short_hash(v: &Value) -> String {
    let digest = Sha256::digest(v.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses a reviewed plan made from another state of the cluster, or one the change no longer
/// matches (the catalog changed).
fn check_fingerprint(c: &Loaded, want: &str, have: &str) -> EngineResult<()> {
    if want == have {
        return Ok(());
    }
    let id = cluster_id_text(c.row.id);
    let state = |f: &str| f.split('-').next().unwrap_or_default().to_string();
    Err(EngineError::PlanOutdated(if state(want) != state(have) {
        format!("cluster {id} changed since the plan was made; make a new plan")
    } else {
        format!("the change to cluster {id} differs from the plan now (the catalog changed); make a new plan")
    }))
}

/// Records a new template copy (and lease) without a job: nothing runs on the nodes.
async fn record_quietly(
    st: &Engine,
    c: &Loaded,
    body: crate::body::ClusterBody,
    expire_time: Option<i64>,
) -> EngineResult<()> {
    let mut new = c.row.clone();
    new.body = to_body(&body)?;
    if let Some(t) = expire_time {
        new.expire_time = t;
    }
    let cs = ChangeSet {
        expect: vec![Expect::cluster(&c.row)],
        writes: vec![Write::Cluster(new)],
    };
    st.store.commit(&cs).await.map_err(store_err)
}

/// The config a cluster gets when its template moves from `old` defaults to `new` ones: where the
/// cluster still has the old default, the new one; where it has its own value, its own (listed
/// as kept when the template changed that path).
pub fn follow_config(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    current: &Map<String, Value>,
) -> (Map<String, Value>, Vec<String>) {
    let mut kept = Vec::new();
    let merged = merge3("", old, new, current, &mut kept);
    (merged, kept)
}

fn merge3(
    path: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    current: &Map<String, Value>,
    kept: &mut Vec<String>,
) -> Map<String, Value> {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).chain(current.keys()).collect();
    let mut out = Map::new();
    for k in keys {
        let p = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let (o, n, c) = (old.get(k), new.get(k), current.get(k));
        let pick = match (o, n, c) {
            (o, n, c) if c == o => n.cloned(),
            (o, n, c) if o == n => c.cloned(),
            (Some(Value::Object(o)), Some(Value::Object(n)), Some(Value::Object(c))) => {
                Some(Value::Object(merge3(&p, o, n, c, kept)))
            }
            (_, _, c) => {
                kept.push(p);
                c.cloned()
            }
        };
        if let Some(v) = pick {
            out.insert(k.clone(), v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_cluster_on_the_old_defaults_takes_the_new_ones_and_keeps_its_own_values() {
        let old = map(json!({"port": 1, "log": {"level": "info", "dir": "/a"}, "gone": 1}));
        let new = map(json!({"port": 2, "log": {"level": "debug", "dir": "/b"}, "added": true}));
        let current =
            map(json!({"port": 1, "log": {"level": "warn", "dir": "/a"}, "gone": 1, "mine": 5}));
        let (merged, kept) = follow_config(&old, &new, &current);
        assert_eq!(
            Value::Object(merged),
            json!({"port": 2, "log": {"level": "warn", "dir": "/b"}, "added": true, "mine": 5})
        );
        assert_eq!(kept, vec!["log.level".to_string()]);
    }

    #[test]
    fn a_cluster_that_changed_a_default_the_template_did_not_keeps_it_unreported() {
        let old = map(json!({"a": 1}));
        let (merged, kept) = follow_config(&old, &old, &map(json!({"a": 7})));
        assert_eq!(Value::Object(merged), json!({"a": 7}));
        assert!(kept.is_empty());
    }
}
