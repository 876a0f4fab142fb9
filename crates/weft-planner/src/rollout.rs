//! Rolling changes: an upgrade, a restart or a reconfigure done batch by batch, with a health gate
//! after each batch.
//!
//! The first batch holds the canaries, alone; the rest hold at most `max_in_flight` nodes each, in
//! nodenum order. A batch starts when the previous batch and its gate are done. A gate is a set of
//! HEALTHCHECK tasks: the checks of the services the batch changed, on the batch's nodes, and the
//! checks of every service that depends on those (at runtime), on every node that has one. The
//! engine treats an unhealthy gate task as a failed gate. Dependency rules between service tasks
//! hold within a batch only: services on nodes of other batches keep running meanwhile.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use weft_model::MaxInFlight;

/// A rolling change as the planner takes it (`PlanInput::rollout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    /// Nodes in the first batch, alone (0: none).
    pub canaries: usize,
    /// Nodes per batch after the canaries.
    pub max_in_flight: MaxInFlight,
    /// Health gates after each batch (a revert runs without).
    #[serde(default = "yes")]
    pub gates: bool,
    /// Only these nodes take part (a revert of what a failed rollout changed); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<BTreeSet<String>>,
}

fn yes() -> bool {
    true
}

impl RolloutPlan {
    /// `items` (in order) cut into batches: the canaries, then `max_in_flight` at a time.
    pub fn batches<T: Clone>(&self, items: &[T]) -> Vec<Vec<T>> {
        let canaries = self.canaries.min(items.len());
        let (first, rest) = items.split_at(canaries);
        let size = self.max_in_flight.of(items.len());
        let mut out: Vec<Vec<T>> = Vec::new();
        if !first.is_empty() {
            out.push(first.to_vec());
        }
        out.extend(rest.chunks(size).map(<[T]>::to_vec));
        out
    }
}

/// The HEALTHCHECK tasks of one gate, per node index: `changed` maps each node of the batch to the
/// services the batch changed there; `dependents(s)` lists the services that depend on s at
/// runtime; `nodes` gives every node's services; `checked(s)` says whether s has a check.
pub(crate) fn gate_checks(
    changed: &BTreeMap<usize, Vec<String>>,
    nodes: &[(usize, &BTreeSet<String>)],
    dependents: impl Fn(&str) -> Vec<String>,
    checked: impl Fn(&str) -> bool,
) -> BTreeMap<usize, BTreeSet<String>> {
    let mut out: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut downstream: BTreeSet<String> = BTreeSet::new();
    for (&node, services) in changed {
        for s in services {
            if checked(s) {
                out.entry(node).or_default().insert(s.clone());
            }
            downstream.extend(dependents(s));
        }
    }
    for &(node, services) in nodes {
        for s in services.intersection(&downstream) {
            if checked(s) {
                out.entry(node).or_default().insert(s.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(canaries: usize, m: MaxInFlight) -> RolloutPlan {
        RolloutPlan {
            canaries,
            max_in_flight: m,
            gates: true,
            nodes: None,
        }
    }

    #[test]
    fn canaries_come_alone_then_batches_of_max_in_flight() {
        let items: Vec<u32> = (1..=7).collect();
        let b = plan(1, MaxInFlight::Count(2)).batches(&items);
        assert_eq!(b, vec![vec![1], vec![2, 3], vec![4, 5], vec![6, 7]]);
        let b = plan(0, MaxInFlight::Percent(50)).batches(&items);
        assert_eq!(b, vec![vec![1, 2, 3, 4], vec![5, 6, 7]]);
        let b = plan(9, MaxInFlight::Count(1)).batches(&items);
        assert_eq!(b, vec![items.clone()]);
        assert!(plan(1, MaxInFlight::Count(1))
            .batches::<u32>(&[])
            .is_empty());
    }
}
