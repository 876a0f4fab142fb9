//! Drift operations: checking what is really there, and replacing a node.
//!
//! - **Check** (`Operation::Check`): on every node (or only on the nodes asked for), STATUS (the
//!   provider says whether the machine still exists), then the HEALTHCHECK of every service that
//!   declares one. The layout does not change.
//! - **Replace a node** (`Operation::ReplaceNode`): the node runs DELETE (of whatever is left of
//!   its machine; a machine already gone is success), CREATE, CONFIRM, BOOTSTRAP, then INSTALL,
//!   CONFIGURE, INITIALIZE, START of its services: a new machine with the same node id, hardware,
//!   image and services. Every other node re-runs CONFIGURE of its services, after the new
//!   machine's CONFIRM (so that configuration naming the node gets its new address); services that
//!   depend at runtime on a service of the replaced node also STOP and START after that CONFIGURE
//!   (a process that read the old address at start would keep using it), their STARTs after the
//!   STARTs they depend on, as in any plan.
//!   A service with members on other nodes is joined again by the new machine (JOIN before its
//!   START, then its HEALTHCHECK), and first left (LEAVE before the DELETE; the machine's end
//!   stops the rest) when the old machine is alive.

use std::collections::{BTreeMap, BTreeSet};

use weft_model::{ProvisionerAction as A, Service};

use crate::dag::NodeProgram;
use crate::deps::{Class, DepGraph, Direction};
use crate::error::PlanError;
use crate::layout::PlanNode;
use crate::ops::JOIN_CHAIN;

const HARDWARE_AGAIN: [A; 4] = [A::Delete, A::Create, A::Confirm, A::Bootstrap];
const INSTALL_CHAIN: [A; 4] = [A::Install, A::Configure, A::Initialize, A::Start];

/// What the drift plans read of the operation's input.
pub(crate) struct Input<'a> {
    pub operation: &'static str,
    /// The cluster's nodes, sorted by nodenum.
    pub nodes: &'a [&'a PlanNode],
    /// Node id -> index in the plan's node universe.
    pub pos: &'a BTreeMap<&'a str, usize>,
    pub catalog: &'a BTreeMap<String, Service>,
    pub graph: &'a DepGraph,
}

impl Input<'_> {
    fn unknown(&self, id: &str) -> PlanError {
        PlanError::BadParameter {
            operation: self.operation,
            problem: format!("node {id} is not in the cluster"),
        }
    }

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
}

/// The programs of a check: STATUS, then the declared health checks, on each node asked for.
pub(crate) fn check(
    input: &Input<'_>,
    only: Option<&BTreeSet<String>>,
) -> Result<Vec<NodeProgram>, PlanError> {
    if let Some(bad) = only
        .into_iter()
        .flatten()
        .find(|id| !input.pos.contains_key(id.as_str()))
    {
        return Err(input.unknown(bad));
    }
    let checked = |s: &String| {
        input
            .catalog
            .get(s)
            .is_some_and(|svc| svc.provisioner.actions.contains_key(&A::Healthcheck))
    };
    Ok(input
        .nodes
        .iter()
        .filter(|n| only.is_none_or(|o| o.contains(&n.id)))
        .map(|n| NodeProgram {
            node: input.pos[n.id.as_str()],
            pre: vec![A::Status],
            then: n
                .services
                .iter()
                .filter(|s| checked(s))
                .map(|s| (s.clone(), vec![A::Healthcheck]))
                .collect(),
            ..Default::default()
        })
        .collect())
}

/// The programs of a node's replacement (see the module doc). A service with members on other
/// nodes is left first when the node is `alive` (LEAVE before the DELETE), and joined again
/// by the new machine (JOIN before its START).
pub(crate) fn replace(
    input: &Input<'_>,
    node: &str,
    alive: bool,
) -> Result<Vec<NodeProgram>, PlanError> {
    let Some(target) = input.nodes.iter().find(|n| n.id == node) else {
        return Err(input.unknown(node));
    };
    // Services elsewhere that need (at runtime, directly or not) a service of the node.
    let dependents: BTreeSet<&String> = target
        .services
        .iter()
        .filter_map(|s| input.graph.reachable(Class::Runtime, Direction::Reverse, s))
        .flatten()
        .collect();
    let mut out = Vec::with_capacity(input.nodes.len());
    for n in input.nodes {
        let at = input.pos[n.id.as_str()];
        if n.id == node {
            let shared = |s: &String| {
                input
                    .nodes
                    .iter()
                    .any(|o| o.id != node && o.services.contains(s))
            };
            let declares = |s: &String, a: A| {
                input
                    .catalog
                    .get(s)
                    .is_some_and(|d| d.provisioner.actions.contains_key(&a))
            };
            out.push(NodeProgram {
                node: at,
                leave: n
                    .services
                    .iter()
                    .filter(|s| alive && shared(s))
                    .map(|s| (s.clone(), vec![A::Leave]))
                    .collect(),
                pre: HARDWARE_AGAIN.to_vec(),
                then: n
                    .services
                    .iter()
                    .map(|s| {
                        let joins = shared(s) && declares(s, A::Join);
                        let chain: &[A] = if joins { &JOIN_CHAIN } else { &INSTALL_CHAIN };
                        (s.clone(), chain.to_vec())
                    })
                    .collect(),
                automators: input.automators(n),
                ..Default::default()
            });
            continue;
        }
        let then: Vec<(String, Vec<A>)> = n
            .services
            .iter()
            .map(|s| {
                let actions = if dependents.contains(s) {
                    vec![A::Configure, A::Stop, A::Start]
                } else {
                    vec![A::Configure]
                };
                (s.clone(), actions)
            })
            .collect();
        if !then.is_empty() {
            out.push(NodeProgram {
                node: at,
                then,
                ..Default::default()
            });
        }
    }
    Ok(out)
}
