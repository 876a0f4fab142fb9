//! Service dependency resolution (coopr-internals §3.3): which (action, service) groups a service's
//! task waits for.
//!
//! - Install edges come from `install.requires ∪ install.uses`, runtime edges from
//!   `runtime.requires ∪ runtime.uses`.
//! - A dependency on a name that cluster services `provide` stands for all of those services.
//! - Pass-through: when a dependency has no task of the wanted action in the plan, its own
//!   dependencies are searched instead (also through catalog services that are not on the cluster).
//! - Minimisation: a target reachable from another target is dropped (it is waited for anyway).
//! - Cycles are rejected with the cycle spelled out.

use std::collections::{BTreeMap, BTreeSet};

use weft_model::{ProvisionerAction, Service};

use crate::error::PlanError;

/// Install-time or runtime dependencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Install,
    Runtime,
}

impl Class {
    fn idx(self) -> usize {
        match self {
            Class::Install => 0,
            Class::Runtime => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Class::Install => "install",
            Class::Runtime => "runtime",
        }
    }
}

/// Which way a rule points: `Forward` means the task waits for its dependencies' tasks;
/// `Reverse` means it waits for its dependents' tasks (STOP, REMOVE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Forward,
    Reverse,
}

/// The rule for a service action: (class, direction, action waited for), or None.
///
/// - INSTALL(S) waits for INSTALL(D); REMOVE(D) waits for REMOVE(S) (weft; Coopr scheduled no REMOVE).
/// - INITIALIZE(S) and START(S) wait for START(D); STOP(D) waits for STOP(S).
pub(crate) fn rule(action: ProvisionerAction) -> Option<(Class, Direction, ProvisionerAction)> {
    use ProvisionerAction as A;
    match action {
        A::Install => Some((Class::Install, Direction::Forward, A::Install)),
        A::Remove => Some((Class::Install, Direction::Reverse, A::Remove)),
        A::Initialize => Some((Class::Runtime, Direction::Forward, A::Start)),
        A::Start => Some((Class::Runtime, Direction::Forward, A::Start)),
        A::Stop => Some((Class::Runtime, Direction::Reverse, A::Stop)),
        _ => None,
    }
}

/// Dependency graphs over service names, per class, in both directions, with reachability.
#[derive(Debug)]
pub(crate) struct DepGraph {
    /// [class][direction] service -> neighbours.
    adj: [[BTreeMap<String, BTreeSet<String>>; 2]; 2],
    /// [class][direction] service -> everything reachable.
    reach: [[BTreeMap<String, BTreeSet<String>>; 2]; 2],
}

impl DepGraph {
    /// Build the graphs for the services on the cluster (`cluster`), following dependencies into
    /// catalog services that are not on the cluster. Fails on a cycle.
    pub(crate) fn new(
        catalog: &BTreeMap<String, Service>,
        cluster: &BTreeSet<String>,
    ) -> Result<DepGraph, PlanError> {
        let mut providers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for s in cluster {
            if let Some(svc) = catalog.get(s) {
                for p in &svc.dependencies.provides {
                    providers.entry(p.as_str()).or_default().insert(s.as_str());
                }
            }
        }
        let mut adj: [[BTreeMap<String, BTreeSet<String>>; 2]; 2] = Default::default();
        for class in [Class::Install, Class::Runtime] {
            let fwd = &mut adj[class.idx()][0];
            let mut todo: Vec<String> = cluster.iter().cloned().collect();
            while let Some(s) = todo.pop() {
                if fwd.contains_key(&s) {
                    continue;
                }
                let mut out = BTreeSet::new();
                if let Some(svc) = catalog.get(&s) {
                    let dc = match class {
                        Class::Install => &svc.dependencies.install,
                        Class::Runtime => &svc.dependencies.runtime,
                    };
                    for name in dc.requires.iter().chain(&dc.uses) {
                        if catalog.contains_key(name) && *name != s {
                            out.insert(name.clone());
                        }
                        for p in providers.get(name.as_str()).into_iter().flatten() {
                            if *p != s {
                                out.insert((*p).to_string());
                            }
                        }
                    }
                }
                todo.extend(out.iter().cloned());
                fwd.insert(s, out);
            }
            check_acyclic(class, fwd)?;
            let mut rev: BTreeMap<String, BTreeSet<String>> =
                fwd.keys().map(|k| (k.clone(), BTreeSet::new())).collect();
            for (s, ds) in fwd.iter() {
                for d in ds {
                    rev.entry(d.clone()).or_default().insert(s.clone());
                }
            }
            adj[class.idx()][1] = rev;
        }
        let mut reach: [[BTreeMap<String, BTreeSet<String>>; 2]; 2] = Default::default();
        for c in 0..2 {
            for d in 0..2 {
                reach[c][d] = closure(&adj[c][d]);
            }
        }
        Ok(DepGraph { adj, reach })
    }

    /// Every service reachable from `s` (dependencies for Forward, dependents for Reverse).
    pub(crate) fn reachable(
        &self,
        class: Class,
        dir: Direction,
        s: &str,
    ) -> Option<&BTreeSet<String>> {
        self.reach[class.idx()][dir_idx(dir)].get(s)
    }

    /// The services whose `has_task` tasks the task of `s` must wait for, after pass-through and
    /// minimisation. `has_task(d)` says whether the plan holds the wanted action for service d.
    pub(crate) fn targets(
        &self,
        class: Class,
        dir: Direction,
        s: &str,
        has_task: impl Fn(&str) -> bool,
    ) -> BTreeSet<String> {
        let adj = &self.adj[class.idx()][dir_idx(dir)];
        let mut found = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = adj
            .get(s)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        while let Some(d) = todo.pop() {
            if !seen.insert(d) {
                continue;
            }
            if has_task(d) {
                found.insert(d.to_string());
            } else {
                todo.extend(adj.get(d).into_iter().flatten().map(String::as_str));
            }
        }
        let reach = &self.reach[class.idx()][dir_idx(dir)];
        found
            .iter()
            .filter(|t| {
                !found
                    .iter()
                    .any(|o| o != *t && reach.get(o).is_some_and(|r| r.contains(*t)))
            })
            .cloned()
            .collect()
    }
}

fn dir_idx(d: Direction) -> usize {
    match d {
        Direction::Forward => 0,
        Direction::Reverse => 1,
    }
}

fn closure(adj: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for s in adj.keys() {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = adj[s].iter().collect();
        while let Some(d) = todo.pop() {
            if seen.insert(d.clone()) {
                todo.extend(adj.get(d).into_iter().flatten());
            }
        }
        out.insert(s.clone(), seen);
    }
    out
}

/// Depth-first search with an explicit stack; a back edge yields the cycle in dependency order.
fn check_acyclic(class: Class, adj: &BTreeMap<String, BTreeSet<String>>) -> Result<(), PlanError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut mark: BTreeMap<&str, Mark> = BTreeMap::new();
    for root in adj.keys() {
        if mark.contains_key(root.as_str()) {
            continue;
        }
        // Stack of (service, its neighbours still to visit).
        let mut path: Vec<(&str, Vec<&str>)> = Vec::new();
        let next = |s: &str| -> Vec<&str> {
            adj.get(s)
                .into_iter()
                .flatten()
                .rev()
                .map(String::as_str)
                .collect()
        };
        mark.insert(root, Mark::Open);
        path.push((root, next(root)));
        while let Some((s, rest)) = path.last_mut() {
            let s = *s;
            match rest.pop() {
                Some(d) => match mark.get(d) {
                    Some(Mark::Done) => {}
                    Some(Mark::Open) => {
                        let start = path.iter().position(|(p, _)| *p == d).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            path[start..].iter().map(|(p, _)| p.to_string()).collect();
                        cycle.push(d.to_string());
                        return Err(PlanError::DependencyCycle {
                            class: class.name(),
                            cycle,
                        });
                    }
                    None => {
                        mark.insert(d, Mark::Open);
                        path.push((d, next(d)));
                    }
                },
                None => {
                    mark.insert(s, Mark::Done);
                    path.pop();
                }
            }
        }
    }
    Ok(())
}
