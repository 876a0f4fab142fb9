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

use crate::dag::{Builder, NodeProgram, Plan, ProgramTasks};
use crate::deps::{rule, Class, DepGraph, Direction};
use crate::error::PlanError;
use crate::layout::{sorted, PlanNode};
use crate::macros;
use crate::membership;
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
    RemoveService {
        /// The service to remove; it must be on the cluster.
        service: String,
    },
    /// Add nodes (`after` = `before` plus new nodes).
    Expand,
    /// Remove nodes (`after` = `before` minus some nodes).
    Shrink,
    /// Re-run BOOTSTRAP and CONFIGURE on every node; with `restart`, STOP before and START after.
    Reconfigure {
        /// STOP every service before and START it after (`CLUSTER_CONFIGURE_WITH_RESTART`).
        restart: bool,
    },
    /// START one service and everything it needs at runtime, or every service.
    Start {
        /// The service to start; `None` starts every service.
        service: Option<String>,
    },
    /// STOP one service and everything that needs it at runtime, or every service.
    Stop {
        /// The service to stop; `None` stops every service.
        service: Option<String>,
    },
    /// STOP then START one service and its runtime dependents, or every service.
    Restart {
        /// The service to restart; `None` restarts every service.
        service: Option<String>,
    },
    /// Upgrade a service (the catalog holds its new version): on each node that has it, STOP,
    /// INSTALL, CONFIGURE, START, in batches of `batch_size` nodes ordered by nodenum.
    Upgrade {
        /// The service to upgrade; it must be on the cluster.
        service: String,
        /// Nodes per batch, at least 1; ignored when `PlanInput::rollout` sets the batches.
        batch_size: usize,
    },
    /// The inverse of an upgrade (the catalog holds the old version): the same steps on the
    /// upgraded nodes (`nodes`, or all that have the service), batches in reverse order.
    RollbackUpgrade {
        /// The service whose upgrade is undone.
        service: String,
        /// Nodes per batch, at least 1; ignored when `PlanInput::rollout` sets the batches.
        batch_size: usize,
        /// Ids of the nodes the upgrade reached; `None` means every node with the service.
        nodes: Option<BTreeSet<String>>,
    },
    /// Move to a new template version: any difference between `before` and `after`. The
    /// services that stay on a node are configured again; with `restart`, stopped before and
    /// started after (a config change that a running service would not read).
    ChangeTemplate {
        /// STOP before and START after the CONFIGURE of the services that stay.
        #[serde(default)]
        restart: bool,
    },
    /// weft extension: run the HEALTHCHECK of every service that declares one, on every node
    /// (or only on `nodes`), and nothing else. The layout does not change. Health runs and
    /// future health gates (a rolling change checking a batch) plan through this one operation.
    Healthcheck {
        /// Ids of the nodes to check; `None` means every node.
        nodes: Option<BTreeSet<String>>,
    },
    /// weft extension: a drift check: STATUS of every node's machine (or only of `nodes`), then
    /// the HEALTHCHECK of its services that declare one. The layout does not change (see `repair`).
    Check {
        /// Ids of the nodes to check; `None` means every node.
        nodes: Option<BTreeSet<String>>,
    },
    /// weft extension: replace one node's machine with a new one of the same id, hardware, image
    /// and services, and refresh the configuration of the others (see `repair`).
    ReplaceNode {
        /// The id of the node whose machine is replaced; it must be in the cluster.
        node: String,
        /// The old machine still runs: its services with members elsewhere LEAVE before it is
        /// deleted. A lost machine (false) cannot: the rest must keep the availability rule
        /// without it.
        #[serde(default)]
        alive: bool,
    },
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
            Operation::ChangeTemplate { .. } => "change-template",
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
            Operation::ChangeTemplate { .. } => "CHANGE_TEMPLATE",
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
    /// weft extension: plan even where a service's availability rule would not hold (an
    /// operator who knows better; the engine records it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

const INSTALL_CHAIN: [A; 4] = [A::Install, A::Configure, A::Initialize, A::Start];
/// A new member of a service that has members: JOIN before START, and its health checked before
/// the service's next membership change.
pub(crate) const JOIN_CHAIN: [A; 6] = [
    A::Install,
    A::Configure,
    A::Initialize,
    A::Join,
    A::Start,
    A::Healthcheck,
];
const HARDWARE_UP: [A; 3] = [A::Create, A::Confirm, A::Bootstrap];

/// Plan an operation. Pure and deterministic.
///
/// A pipeline: index the services, check and index the layouts, make each node's program for the
/// operation, add their tasks, then the barriers between them (dependency rules, stops before
/// re-configures, confirms before service tasks, batches and their health gates).
pub fn plan(op: &Operation, input: &PlanInput) -> Result<Plan, PlanError> {
    let catalog = index_services(op.name(), &input.services)?;
    let cx = Context::new(op, input, &catalog)?;
    cx.check_rollout()?;
    let programs = programs(&cx)?;
    check_availability(&cx, &programs)?;
    let mut tasks = add_programs(&cx, &programs);
    membership::one_change_at_a_time(cx.catalog, &mut tasks.b, &tasks.made);
    dependency_barriers(&cx, &mut tasks);
    stops_before_configures(&cx, &mut tasks);
    confirms_before_services(&cx, &mut tasks);
    batch_barriers(&cx, &programs, &mut tasks);
    tasks.b.finish(op.cluster_action())
}

impl Operation {
    /// Whether the operation re-runs CONFIGURE of the services that stay (it changes which nodes
    /// the cluster has).
    fn refreshes_configuration(&self) -> bool {
        matches!(
            self,
            Operation::Expand | Operation::Shrink | Operation::ChangeTemplate { .. }
        )
    }
}

/// Service definitions by name; rejects a name defined twice.
fn index_services(
    operation: &'static str,
    services: &[Service],
) -> Result<BTreeMap<String, Service>, PlanError> {
    let mut catalog: BTreeMap<String, Service> = BTreeMap::new();
    for s in services {
        if catalog.insert(s.name.clone(), s.clone()).is_some() {
            return Err(PlanError::BadService {
                operation,
                service: s.name.clone(),
                problem: "is defined more than once".into(),
            });
        }
    }
    Ok(catalog)
}

/// The services on either layout; fails on one the catalog lacks.
fn services_in_use(
    catalog: &BTreeMap<String, Service>,
    before: &[&PlanNode],
    after: &[&PlanNode],
) -> Result<BTreeSet<String>, PlanError> {
    let mut cluster: BTreeSet<String> = BTreeSet::new();
    for n in before.iter().chain(after) {
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
    Ok(cluster)
}

/// The node universe: after's nodes, plus nodes only in before; sorted by nodenum.
fn node_universe<'a>(before: &[&'a PlanNode], after: &[&'a PlanNode]) -> Vec<&'a PlanNode> {
    let mut by_id: BTreeMap<&str, &PlanNode> = BTreeMap::new();
    for n in before.iter().chain(after) {
        by_id.insert(n.id.as_str(), n);
    }
    let mut nodes: Vec<&PlanNode> = by_id.into_values().collect();
    nodes.sort_by(|a, b| (a.nodenum, &a.id).cmp(&(b.nodenum, &b.id)));
    nodes
}

fn by_id<'a>(nodes: &[&'a PlanNode]) -> BTreeMap<&'a str, &'a PlanNode> {
    nodes.iter().map(|n| (n.id.as_str(), *n)).collect()
}

/// Service chains: each service with the same actions.
fn chains<'s>(
    services: impl IntoIterator<Item = &'s String>,
    actions: &[A],
) -> Vec<(String, Vec<A>)> {
    services
        .into_iter()
        .map(|s| (s.clone(), actions.to_vec()))
        .collect()
}

/// The input checked and indexed: what every operation's programs and the barrier passes read.
struct Context<'a> {
    op: &'a Operation,
    name: &'static str,
    input: &'a PlanInput,
    catalog: &'a BTreeMap<String, Service>,
    /// Every service on either layout.
    cluster: BTreeSet<String>,
    graph: DepGraph,
    /// The layouts, each sorted by nodenum.
    before: Vec<&'a PlanNode>,
    after: Vec<&'a PlanNode>,
    /// The node universe (see `node_universe`).
    nodes: Vec<&'a PlanNode>,
    /// Node id -> index in `nodes`.
    pos: BTreeMap<&'a str, usize>,
    before_map: BTreeMap<&'a str, &'a PlanNode>,
    after_map: BTreeMap<&'a str, &'a PlanNode>,
    rollout: Option<&'a RolloutPlan>,
}

impl<'a> Context<'a> {
    fn new(
        op: &'a Operation,
        input: &'a PlanInput,
        catalog: &'a BTreeMap<String, Service>,
    ) -> Result<Context<'a>, PlanError> {
        let before = sorted(&input.before, "old")?;
        let after = sorted(&input.after, "new")?;
        let cluster = services_in_use(catalog, &before, &after)?;
        let graph = DepGraph::new(catalog, &cluster)?;
        let nodes = node_universe(&before, &after);
        let pos = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        Ok(Context {
            op,
            name: op.name(),
            input,
            catalog,
            cluster,
            graph,
            before_map: by_id(&before),
            after_map: by_id(&after),
            before,
            after,
            nodes,
            pos,
            rollout: input.rollout.as_ref(),
        })
    }

    /// The node's index in the node universe.
    fn at(&self, n: &PlanNode) -> usize {
        self.pos[n.id.as_str()]
    }

    /// The automators the node's services use.
    fn automators(&self, n: &PlanNode) -> Vec<String> {
        let set: BTreeSet<&str> = n
            .services
            .iter()
            .filter_map(|s| self.catalog.get(s))
            .flat_map(|s| s.provisioner.actions.values().map(|a| a.automator.as_str()))
            .filter(|a| !a.is_empty())
            .collect();
        set.into_iter().map(String::from).collect()
    }

    /// Whether service `s` defines action `a`.
    fn defined(&self, s: &str, a: A) -> bool {
        self.catalog
            .get(s)
            .is_some_and(|svc| svc.provisioner.actions.contains_key(&a))
    }

    fn mismatch(&self, problem: String) -> PlanError {
        PlanError::LayoutMismatch {
            operation: self.name,
            problem,
        }
    }

    fn bad_parameter(&self, problem: String) -> PlanError {
        PlanError::BadParameter {
            operation: self.name,
            problem,
        }
    }

    /// The new layout is the old one (or the old one is not given).
    fn same_layout(&self) -> Result<(), PlanError> {
        if self.before.is_empty() {
            return Ok(());
        }
        for n in &self.before {
            match self.after_map.get(n.id.as_str()) {
                Some(a) if a.services == n.services => {}
                Some(_) => {
                    return Err(self.mismatch(format!(
                        "node {} changes services; use another operation",
                        n.id
                    )))
                }
                None => {
                    return Err(
                        self.mismatch(format!("node {} is missing from the new layout", n.id))
                    )
                }
            }
        }
        if let Some(n) = self
            .after
            .iter()
            .find(|n| !self.before_map.contains_key(n.id.as_str()))
        {
            return Err(self.mismatch(format!("node {} is not in the old layout", n.id)));
        }
        Ok(())
    }

    /// Service `s` is on a node of the new layout.
    fn on_cluster(&self, s: &str) -> Result<(), PlanError> {
        if self.after.iter().any(|n| n.services.contains(s)) {
            Ok(())
        } else {
            Err(PlanError::BadService {
                operation: self.name,
                service: s.to_string(),
                problem: "is not on the cluster".into(),
            })
        }
    }

    /// Every id of `only` names a node of the new layout.
    fn in_cluster(&self, only: Option<&BTreeSet<String>>) -> Result<(), PlanError> {
        match only
            .into_iter()
            .flatten()
            .find(|id| !self.after_map.contains_key(id.as_str()))
        {
            Some(bad) => Err(self.bad_parameter(format!("node {bad} is not in the cluster"))),
            None => Ok(()),
        }
    }

    /// A rollout applies only to upgrade, restart and reconfigure, and its own node list must
    /// name nodes of the cluster.
    fn check_rollout(&self) -> Result<(), PlanError> {
        if self.rollout.is_some()
            && !matches!(
                self.op,
                Operation::Upgrade { .. }
                    | Operation::Restart { .. }
                    | Operation::Reconfigure { .. }
            )
        {
            return Err(self.bad_parameter(
                "a rollout applies only to upgrade, restart and reconfigure".into(),
            ));
        }
        self.in_cluster(self.rollout.and_then(|r| r.nodes.as_ref()))
    }

    /// Whether the node takes part in the rollout (every node does without a rollout's list).
    fn takes_part(&self, n: &PlanNode) -> bool {
        self.rollout
            .and_then(|r| r.nodes.as_ref())
            .is_none_or(|o| o.contains(&n.id))
    }

    fn repair_input(&self) -> repair::Input<'_> {
        repair::Input {
            operation: self.name,
            nodes: &self.after,
            pos: &self.pos,
            catalog: self.catalog,
            graph: &self.graph,
        }
    }

    /// A new node: the machine comes up, then its services are installed and started (joining
    /// those that have members).
    fn new_node(&self, n: &PlanNode) -> NodeProgram {
        NodeProgram {
            node: self.at(n),
            pre: HARDWARE_UP.to_vec(),
            then: self.install_chains(n, &n.services),
            automators: self.automators(n),
            ..Default::default()
        }
    }

    /// Whether service `s` has a member other than node `id` that keeps it through the operation.
    fn has_staying_members(&self, s: &str, id: &str) -> bool {
        self.before.iter().any(|b| {
            b.id != id
                && b.services.contains(s)
                && self
                    .after_map
                    .get(b.id.as_str())
                    .is_some_and(|a| a.services.contains(s))
        })
    }

    /// The install chains of services node `n` gains: a service that declares JOIN and has
    /// staying members is joined (and its health checked before its next membership change).
    fn install_chains<'s>(
        &self,
        n: &PlanNode,
        services: impl IntoIterator<Item = &'s String>,
    ) -> Vec<(String, Vec<A>)> {
        services
            .into_iter()
            .map(|s| {
                let joins = self.defined(s, A::Join) && self.has_staying_members(s, &n.id);
                let chain: &[A] = if joins { &JOIN_CHAIN } else { &INSTALL_CHAIN };
                (s.clone(), chain.to_vec())
            })
            .collect()
    }

    /// The chains of services node `n` loses: `actions` (STOP...), after a LEAVE where the
    /// service has staying members.
    fn leave_chains<'s>(
        &self,
        n: &PlanNode,
        services: impl IntoIterator<Item = &'s String>,
        actions: &[A],
    ) -> Vec<(String, Vec<A>)> {
        services
            .into_iter()
            .map(|s| {
                let mut chain = Vec::with_capacity(actions.len() + 1);
                if self.has_staying_members(s, &n.id) {
                    chain.push(A::Leave);
                }
                chain.extend_from_slice(actions);
                (s.clone(), chain)
            })
            .collect()
    }
}

/// What an operation does on each node, before any barrier.
#[derive(Default)]
struct Programs {
    list: Vec<NodeProgram>,
    /// Program indices per batch (upgrades and rollouts): a batch starts when the previous one is
    /// done (and, in a rollout, its health gate).
    batches: Vec<Vec<usize>>,
    /// Rollouts: per batch, the services each of its nodes changes (what its health gate checks).
    changed: Vec<BTreeMap<usize, Vec<String>>>,
}

impl Programs {
    fn unbatched(list: Vec<NodeProgram>) -> Programs {
        Programs {
            list,
            ..Default::default()
        }
    }

    /// Adds a batch: its programs and, per node index, the services it changes there.
    fn push_batch(&mut self, programs: Vec<NodeProgram>, changed: BTreeMap<usize, Vec<String>>) {
        let start = self.list.len();
        self.list.extend(programs);
        self.batches.push((start..self.list.len()).collect());
        self.changed.push(changed);
    }
}

/// The programs of the operation, one function per kind of operation.
fn programs(cx: &Context<'_>) -> Result<Programs, PlanError> {
    match cx.op {
        Operation::Create => create(cx),
        Operation::Delete => delete(cx),
        Operation::AddServices
        | Operation::RemoveService { .. }
        | Operation::Expand
        | Operation::Shrink
        | Operation::ChangeTemplate { .. } => change_layout(cx),
        Operation::Reconfigure { restart } => reconfigure(cx, *restart),
        Operation::Start { service }
        | Operation::Stop { service }
        | Operation::Restart { service } => start_stop_restart(cx, service.as_ref()),
        Operation::Upgrade {
            service,
            batch_size,
        }
        | Operation::RollbackUpgrade {
            service,
            batch_size,
            ..
        } => upgrade(cx, service, *batch_size),
        Operation::Healthcheck { nodes } => healthcheck(cx, nodes.as_ref()),
        Operation::Check { nodes } => drift_check(cx, nodes.as_ref()),
        Operation::ReplaceNode { node, alive } => replace_node(cx, node, *alive),
    }
}

/// Create: every node of the new layout comes up and installs its services.
fn create(cx: &Context<'_>) -> Result<Programs, PlanError> {
    if !cx.before.is_empty() {
        return Err(cx.mismatch(format!(
            "the old layout must be empty, it has {} nodes",
            cx.before.len()
        )));
    }
    Ok(Programs::unbatched(
        cx.after.iter().map(|n| cx.new_node(n)).collect(),
    ))
}

/// Delete: DELETE every node of the old layout.
fn delete(cx: &Context<'_>) -> Result<Programs, PlanError> {
    if !cx.after.is_empty() {
        return Err(cx.mismatch(format!(
            "the new layout must be empty, it has {} nodes",
            cx.after.len()
        )));
    }
    Ok(Programs::unbatched(
        cx.before
            .iter()
            .map(|n| NodeProgram {
                node: cx.at(n),
                post: vec![A::Delete],
                ..Default::default()
            })
            .collect(),
    ))
}

/// Add services, remove a service, expand, shrink, move to a new template: programs from the
/// difference between the layouts (see the module doc).
fn change_layout(cx: &Context<'_>) -> Result<Programs, PlanError> {
    check_change(cx.op, &cx.before_map, &cx.after_map, cx.catalog)?;
    let mut list = Vec::new();
    for n in &cx.nodes {
        let id = n.id.as_str();
        match (cx.before_map.get(id), cx.after_map.get(id)) {
            (None, Some(a)) => list.push(cx.new_node(a)),
            (Some(b), None) => list.push(NodeProgram {
                node: cx.at(n),
                first: cx.leave_chains(b, &b.services, &[A::Stop]),
                post: vec![A::Delete],
                ..Default::default()
            }),
            (Some(b), Some(a)) => list.extend(kept_node(cx, b, a)),
            (None, None) => {}
        }
    }
    Ok(Programs::unbatched(list))
}

/// A node that stays through a layout change: STOP, REMOVE of the services it loses; BOOTSTRAP,
/// then the install chain of those it gains; CONFIGURE of those it keeps when the operation
/// refreshes configuration. `None` when it does nothing.
fn kept_node(cx: &Context<'_>, b: &PlanNode, a: &PlanNode) -> Option<NodeProgram> {
    let added: Vec<&String> = a.services.difference(&b.services).collect();
    let removed: Vec<&String> = b.services.difference(&a.services).collect();
    let mut then = cx.install_chains(a, added.iter().copied());
    let mut first = cx.leave_chains(b, removed, &[A::Stop, A::Remove]);
    if cx.op.refreshes_configuration() {
        let kept = a.services.intersection(&b.services);
        // A restart stops the services that stay along with those that leave (one stopping
        // phase, ordered by their dependencies), then configures and starts them.
        let refresh: &[A] = match cx.op {
            Operation::ChangeTemplate { restart: true } => {
                first.extend(chains(kept.clone(), &[A::Stop]));
                first.sort();
                &[A::Configure, A::Start]
            }
            _ => &[A::Configure],
        };
        then.extend(chains(kept, refresh));
        then.sort();
    }
    let p = NodeProgram {
        node: cx.at(a),
        pre: if added.is_empty() {
            vec![]
        } else {
            vec![A::Bootstrap]
        },
        first,
        then,
        automators: cx.automators(a),
        ..Default::default()
    };
    (!p.first.is_empty() || !p.then.is_empty()).then_some(p)
}

/// Reconfigure: BOOTSTRAP and CONFIGURE on every node (STOP before and START after with
/// `restart`); in a rollout, batch by batch over the nodes taking part.
fn reconfigure(cx: &Context<'_>, restart: bool) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    let actions: &[A] = if restart {
        &[A::Stop, A::Configure, A::Start]
    } else {
        &[A::Configure]
    };
    let program = |n: &PlanNode| NodeProgram {
        node: cx.at(n),
        pre: vec![A::Bootstrap],
        then: chains(&n.services, actions),
        automators: cx.automators(n),
        ..Default::default()
    };
    let Some(r) = cx.rollout else {
        return Ok(Programs::unbatched(
            cx.after.iter().map(|n| program(n)).collect(),
        ));
    };
    let hosts: Vec<&PlanNode> = cx
        .after
        .iter()
        .copied()
        .filter(|n| cx.takes_part(n))
        .collect();
    let mut out = Programs::default();
    for group in r.batches(&hosts) {
        let changed = group
            .iter()
            .map(|n| (cx.at(n), n.services.iter().cloned().collect()))
            .collect();
        out.push_batch(group.iter().map(|n| program(n)).collect(), changed);
    }
    Ok(out)
}

/// Start, stop or restart `service` with what it needs (start) or what needs it (stop,
/// restart) at runtime, or every service; in a rollout, batch by batch.
fn start_stop_restart(cx: &Context<'_>, service: Option<&String>) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    let (dir, actions): (Direction, &[A]) = match cx.op {
        Operation::Start { .. } => (Direction::Forward, &[A::Start]),
        Operation::Stop { .. } => (Direction::Reverse, &[A::Stop]),
        _ => (Direction::Reverse, &[A::Stop, A::Start]),
    };
    let selected = runtime_selection(cx, service, dir)?;
    let hosts: Vec<&PlanNode> = cx
        .after
        .iter()
        .copied()
        .filter(|n| cx.takes_part(n) && !n.services.is_disjoint(&selected))
        .collect();
    let groups = match cx.rollout {
        Some(r) => r.batches(&hosts),
        None => vec![hosts],
    };
    let mut out = Programs::default();
    for group in groups {
        let touched: Vec<(usize, Vec<String>)> = group
            .iter()
            .map(|n| {
                (
                    cx.at(n),
                    n.services.intersection(&selected).cloned().collect(),
                )
            })
            .collect();
        let programs = touched
            .iter()
            .map(|(node, svcs)| NodeProgram {
                node: *node,
                then: chains(svcs, actions),
                ..Default::default()
            })
            .collect();
        if cx.rollout.is_some() {
            out.push_batch(programs, touched.into_iter().collect());
        } else {
            out.list.extend(programs);
        }
    }
    Ok(out)
}

/// The services a start, stop or restart acts on: every service, or `service` and what it
/// reaches at runtime in direction `dir` (a rolling restart restarts the service alone: what
/// depends on it keeps running, and its health is checked by the gates).
fn runtime_selection(
    cx: &Context<'_>,
    service: Option<&String>,
    dir: Direction,
) -> Result<BTreeSet<String>, PlanError> {
    let Some(s) = service else {
        return Ok(cx.cluster.clone());
    };
    cx.on_cluster(s)?;
    if cx.rollout.is_some() {
        return Ok(BTreeSet::from([s.clone()]));
    }
    let mut set: BTreeSet<String> = cx
        .graph
        .reachable(Class::Runtime, dir, s)
        .into_iter()
        .flatten()
        .filter(|d| cx.cluster.contains(*d))
        .cloned()
        .collect();
    set.insert(s.clone());
    Ok(set)
}

/// Upgrade (or roll back an upgrade of) a service: STOP, INSTALL, CONFIGURE, START on each node
/// that has it, in batches (of `batch_size`, or the rollout's); a rollback's in reverse order.
fn upgrade(cx: &Context<'_>, service: &str, batch_size: usize) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    if batch_size == 0 {
        return Err(cx.bad_parameter("batch size must be at least 1".into()));
    }
    cx.on_cluster(service)?;
    let hosts = upgrade_hosts(cx, service)?;
    let mut groups: Vec<Vec<&PlanNode>> = match cx.rollout {
        Some(r) => r.batches(&hosts),
        None => hosts.chunks(batch_size).map(<[_]>::to_vec).collect(),
    };
    if matches!(cx.op, Operation::RollbackUpgrade { .. }) {
        groups.reverse();
    }
    let mut out = Programs::default();
    for group in groups {
        let changed = group
            .iter()
            .map(|n| (cx.at(n), vec![service.to_string()]))
            .collect();
        let programs = group
            .iter()
            .map(|n| NodeProgram {
                node: cx.at(n),
                pre: vec![A::Bootstrap],
                then: vec![(
                    service.to_string(),
                    vec![A::Stop, A::Install, A::Configure, A::Start],
                )],
                automators: cx.automators(n),
                ..Default::default()
            })
            .collect();
        out.push_batch(programs, changed);
    }
    Ok(out)
}

/// The nodes an upgrade changes: those with the service (of a rollback, only the nodes it
/// names, which must have it) that take part in the rollout.
fn upgrade_hosts<'a>(cx: &Context<'a>, service: &str) -> Result<Vec<&'a PlanNode>, PlanError> {
    let mut hosts: Vec<&PlanNode> = cx
        .after
        .iter()
        .copied()
        .filter(|n| n.services.contains(service))
        .collect();
    if let Operation::RollbackUpgrade {
        nodes: Some(only), ..
    } = cx.op
    {
        if let Some(bad) = only.iter().find(|id| !hosts.iter().any(|n| &n.id == *id)) {
            return Err(cx.bad_parameter(format!("node {bad} does not have service {service}")));
        }
        hosts.retain(|n| only.contains(&n.id));
    }
    hosts.retain(|n| cx.takes_part(n));
    Ok(hosts)
}

/// Health run: the HEALTHCHECK of every service that declares one, on every node (or `only`).
fn healthcheck(cx: &Context<'_>, only: Option<&BTreeSet<String>>) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    cx.in_cluster(only)?;
    let list = cx
        .after
        .iter()
        .filter(|n| only.is_none_or(|o| o.contains(&n.id)))
        .filter_map(|n| {
            let checked = n.services.iter().filter(|s| cx.defined(s, A::Healthcheck));
            let then = chains(checked, &[A::Healthcheck]);
            (!then.is_empty()).then(|| NodeProgram {
                node: cx.at(n),
                then,
                ..Default::default()
            })
        })
        .collect();
    Ok(Programs::unbatched(list))
}

/// Drift check (see `repair`).
fn drift_check(cx: &Context<'_>, only: Option<&BTreeSet<String>>) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    Ok(Programs::unbatched(repair::check(
        &cx.repair_input(),
        only,
    )?))
}

/// Replace a node (see `repair`).
fn replace_node(cx: &Context<'_>, node: &str, alive: bool) -> Result<Programs, PlanError> {
    cx.same_layout()?;
    Ok(Programs::unbatched(repair::replace(
        &cx.repair_input(),
        node,
        alive,
    )?))
}

/// The availability rule of every service that has one holds at each step of the plan: a batch
/// (or, unbatched, the whole plan) takes down at once the nodes whose program stops the service,
/// leaves it or deletes the machine; LEAVEs go `membership.maxConcurrent` at a time and shrink
/// the membership as they go. `force` skips the check (see `PlanError::Unavailable`).
fn check_availability(cx: &Context<'_>, programs: &Programs) -> Result<(), PlanError> {
    if cx.input.force || matches!(cx.op, Operation::Delete) {
        return Ok(());
    }
    let all: Vec<usize> = (0..programs.list.len()).collect();
    let batches: Vec<&[usize]> = if programs.batches.is_empty() {
        vec![&all]
    } else {
        programs.batches.iter().map(Vec::as_slice).collect()
    };
    let members_of = |s: &str| {
        let layout = if cx.before.is_empty() {
            &cx.after
        } else {
            &cx.before
        };
        layout.iter().filter(|n| n.services.contains(s)).count()
    };
    for s in &cx.cluster {
        let Some(svc) = cx.catalog.get(s).filter(|d| d.availability.is_some()) else {
            continue;
        };
        if !cx.after.iter().any(|n| n.services.contains(s)) {
            continue; // the service leaves the cluster whole
        }
        let mut members = members_of(s);
        for batch in &batches {
            let (down, leaving): (Vec<bool>, Vec<bool>) = batch
                .iter()
                .filter_map(|&p| takes_down(cx, &programs.list[p], s))
                .map(|leaves| (true, leaves))
                .unzip();
            // LEAVEs run a few at a time and the membership shrinks with each; plain stops
            // all count at once against the membership as it is.
            let paced =
                leaving.iter().any(|&l| l) && svc.provisioner.actions.contains_key(&A::Leave);
            let step = if paced {
                svc.max_concurrent_changes()
            } else {
                down.len()
            };
            let mut to_go = down.len();
            while to_go > 0 {
                let d = step.min(to_go);
                let need = svc.must_stay_up(members).unwrap_or(0);
                if members.saturating_sub(d) < need {
                    return Err(unavailable(cx, svc, members, need, d));
                }
                if paced {
                    members -= d;
                }
                to_go -= d;
            }
        }
    }
    Ok(())
}

/// Whether program `p` takes service `s` down on its node: `Some(true)` when the node leaves the
/// service for good (its LEAVE, or the node goes), `Some(false)` for a stop it comes back from.
fn takes_down(cx: &Context<'_>, p: &NodeProgram, s: &str) -> Option<bool> {
    let node = cx.nodes[p.node];
    let had = cx
        .before_map
        .get(node.id.as_str())
        .or(cx.after_map.get(node.id.as_str()))
        .is_some_and(|n| n.services.contains(s));
    if !had {
        return None;
    }
    let chains = p.leave.iter().chain(&p.first).chain(&p.then);
    let stops = chains
        .filter(|(name, _)| name == s)
        .flat_map(|(_, actions)| actions)
        .any(|a| matches!(a, A::Stop | A::Leave));
    let deleted = p.pre.iter().chain(&p.post).any(|a| *a == A::Delete);
    let stays = cx
        .after_map
        .get(node.id.as_str())
        .is_some_and(|n| n.services.contains(s));
    (stops || deleted).then_some(!stays)
}

fn unavailable(
    cx: &Context<'_>,
    svc: &Service,
    members: usize,
    need: usize,
    down: usize,
) -> PlanError {
    let rule = match svc.availability.as_ref() {
        Some(a) if a.quorum => "quorum".to_string(),
        Some(a) => format!("minHealthy {}", a.min_healthy.unwrap_or(0)),
        None => String::new(),
    };
    PlanError::Unavailable {
        operation: cx.name,
        service: svc.name.clone(),
        members,
        need,
        down,
        left: members.saturating_sub(down),
        rule,
    }
}

/// The plan being built: every program's tasks, then the barriers between them.
struct Tasks<'a> {
    b: Builder<'a>,
    /// The tasks of each program, by program index.
    made: Vec<ProgramTasks>,
    /// In a rollout, which batch each task belongs to (dependency rules hold within a batch).
    task_batch: Vec<Option<usize>>,
}

/// Build tasks and lifecycle chains.
fn add_programs<'a>(cx: &Context<'a>, programs: &Programs) -> Tasks<'a> {
    let expected: usize = programs
        .list
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
    let mut b = Builder::new(cx.nodes.clone(), expected);
    let mut program_batch: Vec<Option<usize>> = vec![None; programs.list.len()];
    if cx.rollout.is_some() {
        for (k, batch) in programs.batches.iter().enumerate() {
            for &p in batch {
                program_batch[p] = Some(k);
            }
        }
    }
    let mut task_batch: Vec<Option<usize>> = Vec::with_capacity(expected);
    let made = programs
        .list
        .iter()
        .zip(&program_batch)
        .map(|(p, &k)| {
            let m = b.add_program(p, |s, a| cx.defined(s, a));
            task_batch.resize(b.task_count(), k);
            m
        })
        .collect();
    Tasks {
        b,
        made,
        task_batch,
    }
}

/// Dependency rules between service tasks, across nodes. Keys are sorted before gates are made so
/// that gate numbers are deterministic.
fn dependency_barriers(cx: &Context<'_>, tasks: &mut Tasks<'_>) {
    let b = &mut tasks.b;
    let groups = b.service_groups();
    let mut resolved: HashMap<(u32, A), Vec<u32>> = HashMap::new();
    let mut needs: HashMap<(A, u32, Option<usize>), Vec<usize>> = HashMap::new();
    let service_tasks: Vec<(usize, A, u32)> = b.service_tasks().collect();
    for (task, action, service) in service_tasks {
        let Some((class, dir, wanted)) = rule(action) else {
            continue;
        };
        let targets = resolved.entry((service, action)).or_insert_with(|| {
            cx.graph
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
                .entry((wanted, d, tasks.task_batch[task]))
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
                .filter(|&t| tasks.task_batch[t] == key.2)
                .collect();
            b.barrier(&from, &needs[&key]);
        }
    }
}

/// A layout change re-configures the services that stay against the layout it makes: what leaves
/// is stopped first, so that nothing is configured to use a service that is going away.
fn stops_before_configures(cx: &Context<'_>, tasks: &mut Tasks<'_>) {
    if !cx.op.refreshes_configuration() {
        return;
    }
    let stopped: Vec<usize> = tasks
        .made
        .iter()
        .flat_map(|m| m.first_tails.iter().copied())
        .collect();
    let heads: Vec<usize> = tasks
        .made
        .iter()
        .flat_map(|m| m.then_heads.iter().copied())
        .collect();
    if !stopped.is_empty() && !heads.is_empty() {
        tasks.b.barrier(&stopped, &heads);
    }
}

/// Addresses first: a service task sees every node of the plan with its addresses, unless its
/// service uses only its own node's (and no configuration names other nodes).
fn confirms_before_services(cx: &Context<'_>, tasks: &mut Tasks<'_>) {
    let names_others = refers_to_other_nodes(cx.input, cx.catalog, &cx.cluster);
    let b = &mut tasks.b;
    let confirms = b.tasks_of(A::Confirm);
    let heads: Vec<usize> = tasks
        .made
        .iter()
        .flat_map(|m| m.then_heads.iter().copied())
        .filter(|&t| {
            names_others
                || b.task_service(t)
                    .and_then(|s| cx.catalog.get(s))
                    .is_none_or(|svc| !svc.own_address_only)
        })
        .collect();
    if !confirms.is_empty() && !heads.is_empty() {
        b.barrier(&confirms, &heads);
    }
}

/// Batches: a batch starts when the previous one is done, and in a rollout its health gate: the
/// checks of what the batch changed and of what depends on it; a batch that changes a service
/// with an availability rule also waits for the checks of that service's other nodes.
fn batch_barriers(cx: &Context<'_>, programs: &Programs, tasks: &mut Tasks<'_>) {
    let gates = cx.rollout.is_some_and(|r| r.gates);
    let everyone: Vec<(usize, &BTreeSet<String>)> =
        cx.after.iter().map(|n| (cx.at(n), &n.services)).collect();
    let batches = &programs.batches;
    let mut before_next: Vec<usize> = Vec::new();
    for (k, batch) in batches.iter().enumerate() {
        let sources: Vec<usize> = batch
            .iter()
            .flat_map(|&p| tasks.made[p].sources.iter().copied())
            .collect();
        let mut entry = sources.clone();
        if gates {
            let pre = availability_gate(cx, &programs.changed[k], &mut tasks.b);
            if !pre.is_empty() {
                tasks.b.barrier(&pre, &sources);
                entry = pre;
            }
        }
        if !before_next.is_empty() {
            tasks.b.barrier(&before_next, &entry);
        }
        let mut done: Vec<usize> = batch
            .iter()
            .flat_map(|&p| tasks.made[p].sinks.iter().copied())
            .collect();
        if gates {
            let gate = health_gate(cx, &programs.changed[k], &everyone, &mut tasks.b);
            if !gate.is_empty() {
                tasks.b.barrier(&done, &gate);
                done = gate;
            }
        }
        before_next = done;
    }
}

/// Before a batch of a rollout: the HEALTHCHECK of each service with an availability rule that
/// the batch changes, on every other node of it, so that the batch starts only while the nodes
/// that keep running are healthy.
fn availability_gate(
    cx: &Context<'_>,
    changed: &BTreeMap<usize, Vec<String>>,
    b: &mut Builder<'_>,
) -> Vec<usize> {
    let guarded: BTreeSet<&String> = changed
        .values()
        .flatten()
        .filter(|s| {
            cx.catalog.get(*s).is_some_and(|d| d.availability.is_some())
                && cx.defined(s, A::Healthcheck)
        })
        .collect();
    let mut gate = Vec::new();
    for n in &cx.after {
        let at = cx.at(n);
        if changed.contains_key(&at) {
            continue;
        }
        let then = chains(
            n.services.iter().filter(|s| guarded.contains(s)),
            &[A::Healthcheck],
        );
        if !then.is_empty() {
            let p = NodeProgram {
                node: at,
                then,
                ..Default::default()
            };
            gate.extend(b.add_program(&p, |s, a| cx.defined(s, a)).sinks);
        }
    }
    gate
}

/// The HEALTHCHECK tasks of a batch's health gate (see `gate_checks`; `everyone` gives every
/// node's services), added to the plan.
fn health_gate(
    cx: &Context<'_>,
    changed: &BTreeMap<usize, Vec<String>>,
    everyone: &[(usize, &BTreeSet<String>)],
    b: &mut Builder<'_>,
) -> Vec<usize> {
    let dependents = |s: &str| -> Vec<String> {
        cx.graph
            .reachable(Class::Runtime, Direction::Reverse, s)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    };
    let checks = gate_checks(changed, everyone, dependents, |s| {
        cx.defined(s, A::Healthcheck)
    });
    let mut gate: Vec<usize> = Vec::new();
    for (node, services) in checks {
        let p = NodeProgram {
            node,
            then: chains(&services, &[A::Healthcheck]),
            ..Default::default()
        };
        gate.extend(b.add_program(&p, |s, a| cx.defined(s, a)).sinks);
    }
    gate
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
    let may_add_nodes = matches!(op, Operation::Expand | Operation::ChangeTemplate { .. });
    let may_remove_nodes = matches!(op, Operation::Shrink | Operation::ChangeTemplate { .. });
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
            if !matches!(
                op,
                Operation::AddServices | Operation::ChangeTemplate { .. }
            ) {
                return mismatch(format!(
                    "node {id} gains service {s}, but {name} adds no services"
                ));
            }
        }
        if let Some(s) = b.services.difference(&a.services).next() {
            let allowed = match op {
                Operation::RemoveService { service } => s == service,
                Operation::ChangeTemplate { .. } => true,
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
        check_removal(name, service, before, after, catalog)?;
    }
    Ok(())
}

/// Removing `service`: it was on the cluster, no node keeps it, and nothing that stays requires
/// it.
fn check_removal(
    name: &'static str,
    service: &String,
    before: &BTreeMap<&str, &PlanNode>,
    after: &BTreeMap<&str, &PlanNode>,
    catalog: &BTreeMap<String, Service>,
) -> Result<(), PlanError> {
    if !before.values().any(|n| n.services.contains(service)) {
        return Err(PlanError::BadService {
            operation: name,
            service: service.clone(),
            problem: "is not on the cluster".into(),
        });
    }
    if let Some(n) = after.values().find(|n| n.services.contains(service)) {
        return Err(PlanError::LayoutMismatch {
            operation: name,
            problem: format!("node {} still has service {service}", n.id),
        });
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
    Ok(())
}
