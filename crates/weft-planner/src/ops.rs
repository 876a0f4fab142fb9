//! Cluster operations and how each becomes node programs, dependency edges and barriers.
//!
//! Layout-changing operations (create, add services, remove a service, expand, shrink, move to a new
//! template version) are planned from the difference between the old and the new layout:
//! - a new node runs CREATE, CONFIRM, BOOTSTRAP, then INSTALL, CONFIGURE, INITIALIZE, START of its
//!   services;
//! - a node that goes away runs STOP of its services, then DELETE;
//! - a kept node that loses services runs STOP, REMOVE of them first; one that gains services runs
//!   BOOTSTRAP, then INSTALL, CONFIGURE, INITIALIZE, START of them;
//! - expand, shrink and template moves also re-run CONFIGURE of the services that stay, so that
//!   configuration naming the cluster's nodes is refreshed; every STOP of what leaves comes before
//!   those CONFIGUREs (the server expands their macros against the nodes that remain).
//!
//! Every service task of the "then" part waits for every CONFIRM of the plan, because addresses
//! are known only after CONFIRM and an automator may read any node's from the `nodes` map (Coopr
//! got this for free from its stage barrier). A service marked `ownAddressOnly` is exempt, unless
//! the cluster config or a service action field names other nodes' hosts or IPs
//! (`%host.service.X%`, `%ip.service.X%`, ...).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_model::{ProvisionerAction as A, Service};

use crate::dag::{Builder, NodeProgram, Plan};
use crate::deps::{rule, Class, DepGraph, Direction};
use crate::error::PlanError;
use crate::layout::{sorted, PlanNode};
use crate::macros;
use crate::repair;
use crate::rollout::{gate_checks, RolloutPlan};

/// A cluster operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "kebab-case")]
pub enum Operation {
    /// Build every node of `after` (`before` must be empty).
    Create,
    /// DELETE every node of `before` (`after` must be empty). Like Coopr, services are not stopped.
    Delete,
    /// Services added to existing nodes (`after` = `before` plus services; no node added or removed).
    AddServices,
    /// Remove one service from every node that has it (`after` = `before` without it).
    RemoveService { service: String },
    /// Add nodes (`after` = `before` plus new nodes).
    Expand,
    /// Remove nodes (`after` = `before` minus some nodes).
    Shrink,
    /// Re-run BOOTSTRAP and CONFIGURE on every node; with `restart`, STOP before and START after.
    Reconfigure { restart: bool },
    /// START one service and everything it needs at runtime, or every service.
    Start { service: Option<String> },
    /// STOP one service and everything that needs it at runtime, or every service.
    Stop { service: Option<String> },
    /// STOP then START one service and its runtime dependents, or every service.
    Restart { service: Option<String> },
    /// Upgrade a service (the catalog holds its new version): on each node that has it, STOP,
    /// INSTALL, CONFIGURE, START, in batches of `batch_size` nodes ordered by nodenum.
    Upgrade { service: String, batch_size: usize },
    /// The inverse of an upgrade (the catalog holds the old version): the same steps on the
    /// upgraded nodes (`nodes`, or all that have the service), batches in reverse order.
    RollbackUpgrade {
        service: String,
        batch_size: usize,
        nodes: Option<BTreeSet<String>>,
    },
    /// Move to a new template version: any difference between `before` and `after`.
    ChangeTemplate,
    /// weft extension: run the HEALTHCHECK of every service that declares one, on every node
    /// (or only on `nodes`), and nothing else. The layout does not change. Health runs and
    /// future health gates (a rolling change checking a batch) plan through this one operation.
    Healthcheck { nodes: Option<BTreeSet<String>> },
    /// weft extension: a drift check: STATUS of every node's machine (or only of `nodes`), then
    /// the HEALTHCHECK of its services that declare one. The layout does not change (see `repair`).
    Check { nodes: Option<BTreeSet<String>> },
    /// weft extension: replace one node's machine with a new one of the same id, hardware, image
    /// and services, and refresh the configuration of the others (see `repair`).
    ReplaceNode { node: String },
}

impl Operation {
    /// The operation's short name, used in messages and by `weft plan --operation`.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::AddServices => "add-services",
            Operation::RemoveService { .. } => "remove-service",
            Operation::Expand => "expand",
            Operation::Shrink => "shrink",
            Operation::Reconfigure { .. } => "reconfigure",
            Operation::Start { .. } => "start",
            Operation::Stop { .. } => "stop",
            Operation::Restart { .. } => "restart",
            Operation::Upgrade { .. } => "upgrade",
            Operation::RollbackUpgrade { .. } => "rollback-upgrade",
            Operation::ChangeTemplate => "change-template",
            Operation::Healthcheck { .. } => "healthcheck",
            Operation::Check { .. } => "check",
            Operation::ReplaceNode { .. } => "replace-node",
        }
    }

    /// Coopr's ClusterAction name, upper-case as in plans (new names for operations Coopr lacked).
    pub fn cluster_action(&self) -> &'static str {
        match self {
            Operation::Create => "CLUSTER_CREATE",
            Operation::Delete => "CLUSTER_DELETE",
            Operation::AddServices => "ADD_SERVICES",
            Operation::RemoveService { .. } => "REMOVE_SERVICES",
            Operation::Expand => "CLUSTER_EXPAND",
            Operation::Shrink => "CLUSTER_SHRINK",
            Operation::Reconfigure { restart: false } => "CLUSTER_CONFIGURE",
            Operation::Reconfigure { restart: true } => "CLUSTER_CONFIGURE_WITH_RESTART",
            Operation::Start { .. } => "START_SERVICES",
            Operation::Stop { .. } => "STOP_SERVICES",
            Operation::Restart { .. } => "RESTART_SERVICES",
            Operation::Upgrade { .. } => "UPGRADE_SERVICE",
            Operation::RollbackUpgrade { .. } => "ROLLBACK_UPGRADE",
            Operation::ChangeTemplate => "CHANGE_TEMPLATE",
            Operation::Healthcheck { .. } => "CLUSTER_HEALTHCHECK",
            Operation::Check { .. } => "CLUSTER_CHECK",
            Operation::ReplaceNode { .. } => "REPLACE_NODE",
        }
    }
}

/// Everything a plan depends on. The planner reads nothing else.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PlanInput {
    /// The layout before the operation (empty for create).
    #[serde(default)]
    pub before: Vec<PlanNode>,
    /// The layout after the operation (empty for delete). Operations that keep the layout
    /// (reconfigure, start, stop, restart, upgrade) read this one; `before` is then empty or equal.
    #[serde(default)]
    pub after: Vec<PlanNode>,
    /// Service definitions: every service on either layout, plus any they depend on.
    #[serde(default)]
    pub services: Vec<Service>,
    /// The cluster config (macro-expanded per task later; here only scanned for node references).
    #[serde(default)]
    pub config: Value,
    /// weft extension: do an upgrade, a restart or a reconfigure as a rolling change (batches,
    /// health gates; see `rollout`). `None` keeps the operation's own shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPlan>,
}

const INSTALL_CHAIN: [A; 4] = [A::Install, A::Configure, A::Initialize, A::Start];
const HARDWARE_UP: [A; 3] = [A::Create, A::Confirm, A::Bootstrap];

/// Plan an operation. Pure and deterministic.
pub fn plan(op: &Operation, input: &PlanInput) -> Result<Plan, PlanError> {
    let name = op.name();
    let mut catalog: BTreeMap<String, Service> = BTreeMap::new();
    for s in &input.services {
        if catalog.insert(s.name.clone(), s.clone()).is_some() {
            return Err(PlanError::BadService {
                operation: name,
                service: s.name.clone(),
                problem: "is defined more than once".into(),
            });
        }
    }
    let before = sorted(&input.before, "old")?;
    let after = sorted(&input.after, "new")?;
    let mut cluster: BTreeSet<String> = BTreeSet::new();
    for n in before.iter().chain(&after) {
        for s in &n.services {
            if !catalog.contains_key(s) {
                return Err(PlanError::UnknownService {
                    node: n.id.clone(),
                    service: s.clone(),
                });
            }
            cluster.insert(s.clone());
        }
    }
    let graph = DepGraph::new(&catalog, &cluster)?;

    // The node universe: after's nodes, plus nodes only in before; sorted by nodenum.
    let mut by_id: BTreeMap<&str, &PlanNode> = BTreeMap::new();
    for n in before.iter().chain(&after) {
        by_id.insert(n.id.as_str(), n);
    }
    let mut nodes: Vec<&PlanNode> = by_id.into_values().collect();
    nodes.sort_by(|a, b| (a.nodenum, &a.id).cmp(&(b.nodenum, &b.id)));
    let pos: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let before_map: BTreeMap<&str, &PlanNode> =
        before.iter().map(|n| (n.id.as_str(), *n)).collect();
    let after_map: BTreeMap<&str, &PlanNode> = after.iter().map(|n| (n.id.as_str(), *n)).collect();

    let automators = |n: &PlanNode| -> Vec<String> {
        let set: BTreeSet<&str> = n
            .services
            .iter()
            .filter_map(|s| catalog.get(s))
            .flat_map(|s| s.provisioner.actions.values().map(|a| a.automator.as_str()))
            .filter(|a| !a.is_empty())
            .collect();
        set.into_iter().map(String::from).collect()
    };
    let chains =
        |services: &mut dyn Iterator<Item = &String>, actions: &[A]| -> Vec<(String, Vec<A>)> {
            services.map(|s| (s.clone(), actions.to_vec())).collect()
        };
    let mismatch = |problem: String| PlanError::LayoutMismatch {
        operation: name,
        problem,
    };
    let same_layout = || -> Result<(), PlanError> {
        if before.is_empty() {
            return Ok(());
        }
        for n in &before {
            match after_map.get(n.id.as_str()) {
                Some(a) if a.services == n.services => {}
                Some(_) => {
                    return Err(mismatch(format!(
                        "node {} changes services; use another operation",
                        n.id
                    )))
                }
                None => {
                    return Err(mismatch(format!(
                        "node {} is missing from the new layout",
                        n.id
                    )))
                }
            }
        }
        if let Some(n) = after
            .iter()
            .find(|n| !before_map.contains_key(n.id.as_str()))
        {
            return Err(mismatch(format!("node {} is not in the old layout", n.id)));
        }
        Ok(())
    };
    let on_cluster = |s: &str| -> Result<(), PlanError> {
        if after.iter().any(|n| n.services.contains(s)) {
            Ok(())
        } else {
            Err(PlanError::BadService {
                operation: name,
                service: s.to_string(),
                problem: "is not on the cluster".into(),
            })
        }
    };

    let rollout = input.rollout.as_ref();
    if rollout.is_some()
        && !matches!(
            op,
            Operation::Upgrade { .. } | Operation::Restart { .. } | Operation::Reconfigure { .. }
        )
    {
        return Err(PlanError::BadParameter {
            operation: name,
            problem: "a rollout applies only to upgrade, restart and reconfigure".into(),
        });
    }
    // A rollout's own node list must name nodes of the cluster.
    if let Some(bad) = rollout
        .and_then(|r| r.nodes.as_ref())
        .into_iter()
        .flatten()
        .find(|id| !after_map.contains_key(id.as_str()))
    {
        return Err(PlanError::BadParameter {
            operation: name,
            problem: format!("node {bad} is not in the cluster"),
        });
    }
    let takes_part = |n: &PlanNode| {
        rollout
            .and_then(|r| r.nodes.as_ref())
            .is_none_or(|o| o.contains(&n.id))
    };

    let after_sorted: Vec<&PlanNode> = nodes
        .iter()
        .copied()
        .filter(|n| after_map.contains_key(n.id.as_str()))
        .collect();
    let repair_input = || repair::Input {
        operation: name,
        nodes: &after_sorted,
        pos: &pos,
        catalog: &catalog,
        graph: &graph,
    };
    let mut programs: Vec<NodeProgram> = Vec::new();
    // Program indices per batch (upgrades and rollouts): a batch starts when the previous one is
    // done (and, in a rollout, its health gate).
    let mut batches: Vec<Vec<usize>> = Vec::new();
    // Rollouts: per batch, the services each of its nodes changes (what its health gate checks).
    let mut changed: Vec<BTreeMap<usize, Vec<String>>> = Vec::new();
    match op {
        Operation::Create => {
            if !before.is_empty() {
                return Err(mismatch(format!(
                    "the old layout must be empty, it has {} nodes",
                    before.len()
                )));
            }
            for n in &after {
                programs.push(NodeProgram {
                    node: pos[n.id.as_str()],
                    pre: HARDWARE_UP.to_vec(),
                    then: chains(&mut n.services.iter(), &INSTALL_CHAIN),
                    automators: automators(n),
                    ..Default::default()
                });
            }
        }
        Operation::Delete => {
            if !after.is_empty() {
                return Err(mismatch(format!(
                    "the new layout must be empty, it has {} nodes",
                    after.len()
                )));
            }
            for n in &before {
                programs.push(NodeProgram {
                    node: pos[n.id.as_str()],
                    post: vec![A::Delete],
                    ..Default::default()
                });
            }
        }
        Operation::AddServices
        | Operation::RemoveService { .. }
        | Operation::Expand
        | Operation::Shrink
        | Operation::ChangeTemplate => {
            let refresh = matches!(
                op,
                Operation::Expand | Operation::Shrink | Operation::ChangeTemplate
            );
            check_change(op, &before_map, &after_map, &catalog)?;
            for n in &nodes {
                let id = n.id.as_str();
                let node = pos[id];
                match (before_map.get(id), after_map.get(id)) {
                    (None, Some(a)) => programs.push(NodeProgram {
                        node,
                        pre: HARDWARE_UP.to_vec(),
                        then: chains(&mut a.services.iter(), &INSTALL_CHAIN),
                        automators: automators(a),
                        ..Default::default()
                    }),
                    (Some(b), None) => programs.push(NodeProgram {
                        node,
                        first: chains(&mut b.services.iter(), &[A::Stop]),
                        post: vec![A::Delete],
                        ..Default::default()
                    }),
                    (Some(b), Some(a)) => {
                        let added: Vec<&String> = a.services.difference(&b.services).collect();
                        let removed: Vec<&String> = b.services.difference(&a.services).collect();
                        let mut then = chains(&mut added.iter().copied(), &INSTALL_CHAIN);
                        if refresh {
                            then.extend(chains(
                                &mut a.services.intersection(&b.services),
                                &[A::Configure],
                            ));
                            then.sort();
                        }
                        let p = NodeProgram {
                            node,
                            pre: if added.is_empty() {
                                vec![]
                            } else {
                                vec![A::Bootstrap]
                            },
                            first: chains(&mut removed.into_iter(), &[A::Stop, A::Remove]),
                            then,
                            automators: automators(a),
                            ..Default::default()
                        };
                        if !p.first.is_empty() || !p.then.is_empty() {
                            programs.push(p);
                        }
                    }
                    (None, None) => {}
                }
            }
        }
        Operation::Reconfigure { restart } => {
            same_layout()?;
            let actions: &[A] = if *restart {
                &[A::Stop, A::Configure, A::Start]
            } else {
                &[A::Configure]
            };
            let mut add = |n: &PlanNode| {
                programs.push(NodeProgram {
                    node: pos[n.id.as_str()],
                    pre: vec![A::Bootstrap],
                    then: chains(&mut n.services.iter(), actions),
                    automators: automators(n),
                    ..Default::default()
                });
                programs.len() - 1
            };
            match rollout {
                None => after.iter().for_each(|n| {
                    add(n);
                }),
                Some(r) => {
                    let hosts: Vec<&PlanNode> =
                        after.iter().copied().filter(|n| takes_part(n)).collect();
                    for group in r.batches(&hosts) {
                        batches.push(group.iter().map(|n| add(n)).collect());
                        changed.push(
                            group
                                .iter()
                                .map(|n| (pos[n.id.as_str()], n.services.iter().cloned().collect()))
                                .collect(),
                        );
                    }
                }
            }
        }
        Operation::Start { service }
        | Operation::Stop { service }
        | Operation::Restart { service } => {
            same_layout()?;
            let (dir, actions): (Direction, &[A]) = match op {
                Operation::Start { .. } => (Direction::Forward, &[A::Start]),
                Operation::Stop { .. } => (Direction::Reverse, &[A::Stop]),
                _ => (Direction::Reverse, &[A::Stop, A::Start]),
            };
            let selected: BTreeSet<String> = match service {
                None => cluster.clone(),
                // A rolling restart restarts the service alone: what depends on it keeps running,
                // and its health is checked by the gates.
                Some(s) if rollout.is_some() => {
                    on_cluster(s)?;
                    BTreeSet::from([s.clone()])
                }
                Some(s) => {
                    on_cluster(s)?;
                    let mut set: BTreeSet<String> = graph
                        .reachable(Class::Runtime, dir, s)
                        .into_iter()
                        .flatten()
                        .filter(|d| cluster.contains(*d))
                        .cloned()
                        .collect();
                    set.insert(s.clone());
                    set
                }
            };
            let hosts: Vec<&PlanNode> = after
                .iter()
                .copied()
                .filter(|n| takes_part(n) && !n.services.is_disjoint(&selected))
                .collect();
            let groups = match rollout {
                Some(r) => r.batches(&hosts),
                None => vec![hosts],
            };
            for group in groups {
                let mut batch = Vec::new();
                let mut touched = BTreeMap::new();
                for n in group {
                    let svcs: Vec<String> = n.services.intersection(&selected).cloned().collect();
                    batch.push(programs.len());
                    programs.push(NodeProgram {
                        node: pos[n.id.as_str()],
                        then: chains(&mut svcs.iter(), actions),
                        ..Default::default()
                    });
                    touched.insert(pos[n.id.as_str()], svcs);
                }
                if rollout.is_some() {
                    batches.push(batch);
                    changed.push(touched);
                }
            }
        }
        Operation::Upgrade {
            service,
            batch_size,
        }
        | Operation::RollbackUpgrade {
            service,
            batch_size,
            ..
        } => {
            same_layout()?;
            if *batch_size == 0 {
                return Err(PlanError::BadParameter {
                    operation: name,
                    problem: "batch size must be at least 1".into(),
                });
            }
            on_cluster(service)?;
            let mut hosts: Vec<&PlanNode> = after
                .iter()
                .copied()
                .filter(|n| n.services.contains(service))
                .collect();
            if let Operation::RollbackUpgrade {
                nodes: Some(only), ..
            } = op
            {
                if let Some(bad) = only.iter().find(|id| !hosts.iter().any(|n| &n.id == *id)) {
                    return Err(PlanError::BadParameter {
                        operation: name,
                        problem: format!("node {bad} does not have service {service}"),
                    });
                }
                hosts.retain(|n| only.contains(&n.id));
            }
            hosts.retain(|n| takes_part(n));
            let mut groups: Vec<Vec<&PlanNode>> = match rollout {
                Some(r) => r.batches(&hosts),
                None => hosts.chunks(*batch_size).map(<[_]>::to_vec).collect(),
            };
            if matches!(op, Operation::RollbackUpgrade { .. }) {
                groups.reverse();
            }
            for group in groups {
                let mut batch = Vec::new();
                changed.push(
                    group
                        .iter()
                        .map(|n| (pos[n.id.as_str()], vec![service.clone()]))
                        .collect(),
                );
                for n in group {
                    batch.push(programs.len());
                    programs.push(NodeProgram {
                        node: pos[n.id.as_str()],
                        pre: vec![A::Bootstrap],
                        then: vec![(
                            service.clone(),
                            vec![A::Stop, A::Install, A::Configure, A::Start],
                        )],
                        automators: automators(n),
                        ..Default::default()
                    });
                }
                batches.push(batch);
            }
        }
        Operation::Healthcheck { nodes: only } => {
            same_layout()?;
            if let Some(bad) = only
                .iter()
                .flatten()
                .find(|id| !after_map.contains_key(id.as_str()))
            {
                return Err(PlanError::BadParameter {
                    operation: name,
                    problem: format!("node {bad} is not in the cluster"),
                });
            }
            let checked = |s: &&String| {
                catalog
                    .get(*s)
                    .is_some_and(|svc| svc.provisioner.actions.contains_key(&A::Healthcheck))
            };
            for n in after
                .iter()
                .filter(|n| only.as_ref().is_none_or(|o| o.contains(&n.id)))
            {
                let then = chains(&mut n.services.iter().filter(checked), &[A::Healthcheck]);
                if !then.is_empty() {
                    programs.push(NodeProgram {
                        node: pos[n.id.as_str()],
                        then,
                        ..Default::default()
                    });
                }
            }
        }
        Operation::Check { nodes: only } => {
            same_layout()?;
            programs = repair::check(&repair_input(), only.as_ref())?;
        }
        Operation::ReplaceNode { node } => {
            same_layout()?;
            programs = repair::replace(&repair_input(), node)?;
        }
    }

    // Build tasks and lifecycle chains.
    let expected: usize = programs
        .iter()
        .map(|p| {
            p.pre.len()
                + p.post.len()
                + p.first
                    .iter()
                    .chain(&p.then)
                    .map(|(_, a)| a.len())
                    .sum::<usize>()
        })
        .sum();
    let mut b = Builder::new(nodes.clone(), expected);
    let defined = |s: &str, a: A| {
        catalog
            .get(s)
            .is_some_and(|svc| svc.provisioner.actions.contains_key(&a))
    };
    // In a rollout, which batch each task belongs to (dependency rules hold within a batch).
    let mut program_batch: Vec<Option<usize>> = vec![None; programs.len()];
    if rollout.is_some() {
        for (k, batch) in batches.iter().enumerate() {
            for &p in batch {
                program_batch[p] = Some(k);
            }
        }
    }
    let mut task_batch: Vec<Option<usize>> = Vec::with_capacity(expected);
    let made: Vec<_> = programs
        .iter()
        .zip(&program_batch)
        .map(|(p, &k)| {
            let m = b.add_program(p, defined);
            task_batch.resize(b.task_count(), k);
            m
        })
        .collect();

    // Dependency rules between service tasks, across nodes. Keys are sorted before gates are made
    // so that gate numbers are deterministic.
    let groups = b.service_groups();
    let mut resolved: HashMap<(u32, A), Vec<u32>> = HashMap::new();
    let mut needs: HashMap<(A, u32, Option<usize>), Vec<usize>> = HashMap::new();
    let service_tasks: Vec<(usize, A, u32)> = b.service_tasks().collect();
    for (task, action, service) in service_tasks {
        let Some((class, dir, wanted)) = rule(action) else {
            continue;
        };
        let targets = resolved.entry((service, action)).or_insert_with(|| {
            graph
                .targets(class, dir, b.service_name(service), |d| {
                    b.find_service(d)
                        .is_some_and(|id| groups.contains_key(&(wanted, id)))
                })
                .iter()
                .filter_map(|d| b.find_service(d))
                .collect()
        });
        for &d in targets.iter() {
            needs
                .entry((wanted, d, task_batch[task]))
                .or_default()
                .push(task);
        }
    }
    let mut keys: Vec<(A, u32, Option<usize>)> = needs.keys().copied().collect();
    keys.sort_by(|x, y| (x.0, b.service_name(x.1), x.2).cmp(&(y.0, b.service_name(y.1), y.2)));
    for key in keys {
        if let Some(from) = groups.get(&(key.0, key.1)) {
            let from: Vec<usize> = from
                .iter()
                .copied()
                .filter(|&t| task_batch[t] == key.2)
                .collect();
            b.barrier(&from, &needs[&key]);
        }
    }

    // A layout change re-configures the services that stay against the layout it makes: what
    // leaves is stopped first, so that nothing is configured to use a service that is going away.
    if matches!(
        op,
        Operation::Expand | Operation::Shrink | Operation::ChangeTemplate
    ) {
        let stopped: Vec<usize> = made
            .iter()
            .flat_map(|m| m.first_tails.iter().copied())
            .collect();
        let heads: Vec<usize> = made
            .iter()
            .flat_map(|m| m.then_heads.iter().copied())
            .collect();
        if !stopped.is_empty() && !heads.is_empty() {
            b.barrier(&stopped, &heads);
        }
    }

    // Addresses first: a service task sees every node of the plan with its addresses, unless its
    // service uses only its own node's (and no configuration names other nodes).
    let names_others = refers_to_other_nodes(input, &catalog, &cluster);
    let confirms = b.tasks_of(A::Confirm);
    let heads: Vec<usize> = made
        .iter()
        .flat_map(|m| m.then_heads.iter().copied())
        .filter(|&t| {
            names_others
                || b.task_service(t)
                    .and_then(|s| catalog.get(s))
                    .is_none_or(|svc| !svc.own_address_only)
        })
        .collect();
    if !confirms.is_empty() && !heads.is_empty() {
        b.barrier(&confirms, &heads);
    }

    // Batches: a batch starts when the previous one is done, and in a rollout its health gate:
    // the checks of what the batch changed and of what depends on it.
    let gates = rollout.is_some_and(|r| r.gates);
    let everyone: Vec<(usize, &BTreeSet<String>)> = after
        .iter()
        .map(|n| (pos[n.id.as_str()], &n.services))
        .collect();
    let dependents = |s: &str| -> Vec<String> {
        graph
            .reachable(Class::Runtime, Direction::Reverse, s)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    };
    let has_check = |s: &str| defined(s, A::Healthcheck);
    for (k, batch) in batches.iter().enumerate() {
        let mut done: Vec<usize> = batch
            .iter()
            .flat_map(|&p| made[p].sinks.iter().copied())
            .collect();
        if gates {
            let checks = gate_checks(&changed[k], &everyone, dependents, has_check);
            let mut gate: Vec<usize> = Vec::new();
            for (node, services) in checks {
                let p = NodeProgram {
                    node,
                    then: chains(&mut services.iter(), &[A::Healthcheck]),
                    ..Default::default()
                };
                gate.extend(b.add_program(&p, defined).sinks);
            }
            if !gate.is_empty() {
                b.barrier(&done, &gate);
                done = gate;
            }
        }
        if let Some(next) = batches.get(k + 1) {
            let sources: Vec<usize> = next
                .iter()
                .flat_map(|&p| made[p].sources.iter().copied())
                .collect();
            b.barrier(&done, &sources);
        }
    }

    b.finish(op.cluster_action())
}

/// Whether the cluster config or an action field of a cluster service names other nodes' hosts or
/// addresses.
fn refers_to_other_nodes(
    input: &PlanInput,
    catalog: &BTreeMap<String, Service>,
    cluster: &BTreeSet<String>,
) -> bool {
    fn walk(v: &Value) -> bool {
        match v {
            Value::String(s) => macros::refers_to_other_nodes(s),
            Value::Array(a) => a.iter().any(walk),
            Value::Object(o) => o.values().any(walk),
            _ => false,
        }
    }
    walk(&input.config)
        || cluster.iter().filter_map(|s| catalog.get(s)).any(|s| {
            s.provisioner
                .actions
                .values()
                .any(|a| a.fields.values().any(|f| macros::refers_to_other_nodes(f)))
        })
}

/// Check that the layout difference is what the operation allows.
fn check_change(
    op: &Operation,
    before: &BTreeMap<&str, &PlanNode>,
    after: &BTreeMap<&str, &PlanNode>,
    catalog: &BTreeMap<String, Service>,
) -> Result<(), PlanError> {
    let name = op.name();
    let mismatch = |problem: String| {
        Err(PlanError::LayoutMismatch {
            operation: name,
            problem,
        })
    };
    let may_add_nodes = matches!(op, Operation::Expand | Operation::ChangeTemplate);
    let may_remove_nodes = matches!(op, Operation::Shrink | Operation::ChangeTemplate);
    for id in after.keys() {
        if !before.contains_key(id) && !may_add_nodes {
            return mismatch(format!("node {id} is new, but {name} adds no nodes"));
        }
    }
    for (id, b) in before {
        // Removing a service may also remove the nodes that held nothing else.
        let emptied = matches!(op, Operation::RemoveService { service } if b.services.iter().all(|s| s == service));
        if !after.contains_key(id) && !may_remove_nodes && !emptied {
            return mismatch(format!(
                "node {id} is missing from the new layout, but {name} removes no nodes"
            ));
        }
    }
    for (id, b) in before {
        let Some(a) = after.get(id) else { continue };
        if let Some(s) = a.services.difference(&b.services).next() {
            if !matches!(op, Operation::AddServices | Operation::ChangeTemplate) {
                return mismatch(format!(
                    "node {id} gains service {s}, but {name} adds no services"
                ));
            }
        }
        if let Some(s) = b.services.difference(&a.services).next() {
            let allowed = match op {
                Operation::RemoveService { service } => s == service,
                Operation::ChangeTemplate => true,
                _ => false,
            };
            if !allowed {
                return mismatch(format!(
                    "node {id} loses service {s}, which {name} does not remove"
                ));
            }
        }
    }
    if let Operation::RemoveService { service } = op {
        if !before.values().any(|n| n.services.contains(service)) {
            return Err(PlanError::BadService {
                operation: name,
                service: service.clone(),
                problem: "is not on the cluster".into(),
            });
        }
        if let Some(n) = after.values().find(|n| n.services.contains(service)) {
            return mismatch(format!("node {} still has service {service}", n.id));
        }
        // Nothing that stays may require the removed service (unless another service provides it).
        let remaining: BTreeSet<&String> = after.values().flat_map(|n| n.services.iter()).collect();
        for s in &remaining {
            let Some(svc) = catalog.get(*s) else { continue };
            let deps = &svc.dependencies;
            for need in deps.install.requires.iter().chain(&deps.runtime.requires) {
                let satisfied = remaining.iter().any(|r| {
                    *r == need
                        || catalog
                            .get(*r)
                            .is_some_and(|c| c.dependencies.provides.contains(need))
                });
                let hits_removed = need == service
                    || catalog
                        .get(service)
                        .is_some_and(|c| c.dependencies.provides.contains(need));
                if hits_removed && !satisfied {
                    return Err(PlanError::BadService {
                        operation: name,
                        service: service.clone(),
                        problem: format!("is required by service {s}, which stays on the cluster"),
                    });
                }
            }
        }
    }
    Ok(())
}
