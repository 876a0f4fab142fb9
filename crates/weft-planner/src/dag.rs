//! The plan as a DAG: tasks, zero-work gates, edges; the stage view; readiness for the engine.
//!
//! **One task per node at a time, by construction.** After the dependency edges are known, the
//! builder orders each node's tasks by (ASAP stage in the dependency DAG, longest remaining path,
//! action, service) and chains them with [`EdgeKind::NodeOrder`] edges. Every node's tasks therefore
//! lie on one path, so no two of them are ever ready together, and the engine needs no per-node lock:
//! a task is ready as soon as all its predecessors are done. Because the chain follows Coopr's
//! stage order on each node, the earliest-start schedule of the chained DAG (unit task times) is never
//! longer than Coopr's stage-by-stage execution of the dependency DAG.
//!
//! **Gates.** "Every START of A waits for every START of B" would need |A|·|B| edges; when both sides
//! have two or more tasks, the builder routes them through a gate: a vertex with no work that is done
//! as soon as all its predecessors are. [`Plan::ready`] and [`Tracker`] resolve gates for the engine.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use weft_model::ProvisionerAction;

use crate::error::PlanError;
use crate::layout::PlanNode;

/// One node task. Its Coopr task id (`<jobId>-<NNN>`) is assigned by the engine; within a plan a
/// task is identified by its index in [`Plan::tasks`]. Indices follow the stage order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedTask {
    /// The id of the node the task runs on (a [`PlanNode`] id of the old or new layout).
    pub node_id: String,
    /// What the provisioner does: CREATE, INSTALL, START, ...
    pub action: ProvisionerAction,
    /// The service, or None for the node-level actions CREATE, CONFIRM, BOOTSTRAP and DELETE.
    pub service: Option<String>,
    /// BOOTSTRAP only: the automator types used on the node, each bootstrapped once by this task
    /// (the engine sends them as `config.automators`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub automators: Vec<String>,
}

/// A vertex of the plan DAG: a task (index into [`Plan::tasks`]) or a gate (0..[`Plan::gates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vertex {
    /// A node task: its index in [`Plan::tasks`]. JSON `{"task": i}`.
    Task(usize),
    /// A gate, which has no work and is done once all its predecessors are: 0..[`Plan::gates`].
    /// JSON `{"gate": g}`.
    Gate(usize),
}

/// Why an edge exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// A lifecycle or dependency rule (or a barrier such as "after every CONFIRM").
    Dependency,
    /// Serialises the tasks of one node (one task per node at a time).
    NodeOrder,
}

/// `to` may start only when `from` is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    /// The vertex that must be done first.
    pub from: Vertex,
    /// The vertex that waits for `from`.
    pub to: Vertex,
    /// Why `to` waits.
    pub kind: EdgeKind,
}

/// A planned operation: node tasks and the order between them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Plan {
    /// Coopr's cluster action name for the plans API (`CLUSTER_CREATE`, ...).
    pub action: String,
    /// The node tasks, in stage order; a task's index here is its id within the plan.
    pub tasks: Vec<PlannedTask>,
    /// Number of gates.
    pub gates: usize,
    /// Sorted, without duplicates.
    pub edges: Vec<Edge>,
}

/// Vertex ids in one space: tasks first, then gates.
struct Graph {
    n_tasks: usize,
    succ_start: Vec<usize>,
    succ: Vec<usize>,
    indeg: Vec<usize>,
}

impl Graph {
    fn new(
        n_tasks: usize,
        n_gates: usize,
        edges: impl Iterator<Item = (usize, usize)> + Clone,
    ) -> Graph {
        let n = n_tasks + n_gates;
        let mut count = vec![0usize; n + 1];
        let mut indeg = vec![0usize; n];
        for (f, t) in edges.clone() {
            count[f + 1] += 1;
            indeg[t] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut succ = vec![0usize; count[n]];
        for (f, t) in edges {
            succ[fill[f]] = t;
            fill[f] += 1;
        }
        Graph {
            n_tasks,
            succ_start: count,
            succ,
            indeg,
        }
    }

    fn n(&self) -> usize {
        self.indeg.len()
    }

    fn succs(&self, v: usize) -> &[usize] {
        &self.succ[self.succ_start[v]..self.succ_start[v + 1]]
    }

    fn weight(&self, v: usize) -> usize {
        usize::from(v < self.n_tasks)
    }

    /// Kahn order; Err(vertex) names a vertex on or behind a cycle.
    fn topo(&self) -> Result<Vec<usize>, usize> {
        let mut indeg = self.indeg.clone();
        let mut order: Vec<usize> = (0..self.n()).filter(|&v| indeg[v] == 0).collect();
        let mut i = 0;
        while i < order.len() {
            let v = order[i];
            i += 1;
            for &s in self.succs(v) {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    order.push(s);
                }
            }
        }
        if order.len() == self.n() {
            Ok(order)
        } else {
            Err((0..self.n()).find(|&v| indeg[v] > 0).unwrap_or(0))
        }
    }

    /// ASAP level: tasks count 1, gates 0. A task's level is its stage number (0-based).
    fn levels(&self, order: &[usize]) -> Vec<usize> {
        let mut level = vec![0usize; self.n()];
        for &v in order {
            let next = level[v] + self.weight(v);
            for &s in self.succs(v) {
                level[s] = level[s].max(next);
            }
        }
        level
    }

    /// Longest path from the vertex to any sink, counting the vertex itself.
    fn tails(&self, order: &[usize]) -> Vec<usize> {
        let mut tail = vec![0usize; self.n()];
        for &v in order.iter().rev() {
            let best = self.succs(v).iter().map(|&s| tail[s]).max().unwrap_or(0);
            tail[v] = best + self.weight(v);
        }
        tail
    }
}

impl Plan {
    fn vid(&self, v: Vertex) -> Option<usize> {
        match v {
            Vertex::Task(i) if i < self.tasks.len() => Some(i),
            Vertex::Gate(g) if g < self.gates => Some(self.tasks.len() + g),
            _ => None,
        }
    }

    fn graph(&self, kinds: &[EdgeKind]) -> Graph {
        let edges: Vec<(usize, usize)> = self
            .edges
            .iter()
            .filter(|e| kinds.contains(&e.kind))
            .filter_map(|e| Some((self.vid(e.from)?, self.vid(e.to)?)))
            .collect();
        Graph::new(self.tasks.len(), self.gates, edges.iter().copied())
    }

    /// Stages: stage k holds the tasks whose longest chain of predecessor tasks has length k (as
    /// soon as possible; gates take no stage). Every stage has at most one task per node. Tasks on a
    /// cycle (only possible in a hand-edited plan) are left out.
    pub fn stages(&self) -> Vec<Vec<usize>> {
        stages_of(&self.graph(&[EdgeKind::Dependency, EdgeKind::NodeOrder]))
    }

    /// Coopr's layering of the dependency edges alone (before the per-node ordering), split so that
    /// a sub-stage holds one task per node: what Coopr would run stage by stage.
    pub fn coopr_stages(&self) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for stage in stages_of(&self.graph(&[EdgeKind::Dependency])) {
            let mut subs: Vec<Vec<usize>> = Vec::new();
            let mut used: HashMap<&str, usize> = HashMap::new();
            for t in stage {
                let k = used.entry(self.tasks[t].node_id.as_str()).or_insert(0);
                if *k == subs.len() {
                    subs.push(Vec::new());
                }
                subs[*k].push(t);
                *k += 1;
            }
            out.extend(subs);
        }
        out
    }

    /// The tasks that may start now: not done, and every predecessor (through gates) done.
    /// `done[i]` says whether task i is complete; a short slice counts the rest as not done. The
    /// engine leaves out tasks it already handed to a worker. Because each node's tasks are chained,
    /// the answer never holds two tasks of one node.
    pub fn ready(&self, done: &[bool]) -> Vec<usize> {
        let mut tracker = Tracker::new(self);
        for (i, &d) in done.iter().enumerate().take(self.tasks.len()) {
            if d {
                tracker.complete(i);
            }
        }
        let is_done = |i: usize| done.get(i).copied().unwrap_or(false);
        (0..self.tasks.len())
            .filter(|&i| !is_done(i) && tracker.waiting[i] == 0)
            .collect()
    }

    /// Coopr's plan JSON `stages` value: `[[{"id","taskName","nodeId","service"}]]`. `task_id`
    /// gives the id of task i (the engine's `<jobId>-<NNN>`).
    pub fn stage_view(&self, task_id: impl Fn(usize) -> String) -> Value {
        Value::Array(
            self.stages()
                .into_iter()
                .map(|stage| {
                    Value::Array(
                        stage
                            .into_iter()
                            .map(|i| {
                                let t = &self.tasks[i];
                                json!({
                                    "id": task_id(i),
                                    "taskName": t.action.upper(),
                                    "nodeId": t.node_id,
                                    "service": t.service.clone().unwrap_or_default(),
                                })
                            })
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    /// Direct predecessors of a vertex (tasks or gates), for renderings and checks.
    pub fn predecessors(&self, v: Vertex) -> Vec<(Vertex, EdgeKind)> {
        self.edges
            .iter()
            .filter(|e| e.to == v)
            .map(|e| (e.from, e.kind))
            .collect()
    }
}

fn stages_of(g: &Graph) -> Vec<Vec<usize>> {
    let order = match g.topo() {
        Ok(o) => o,
        Err(_) => partial_order(g),
    };
    let level = g.levels(&order);
    let mut stages: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &v in &order {
        if v < g.n_tasks {
            stages.entry(level[v]).or_default().push(v);
        }
    }
    stages
        .into_values()
        .map(|mut s| {
            s.sort_unstable();
            s
        })
        .collect()
}

fn partial_order(g: &Graph) -> Vec<usize> {
    let mut indeg = g.indeg.clone();
    let mut order: Vec<usize> = (0..g.n()).filter(|&v| indeg[v] == 0).collect();
    let mut i = 0;
    while i < order.len() {
        let v = order[i];
        i += 1;
        for &s in g.succs(v) {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                order.push(s);
            }
        }
    }
    order
}

/// Incremental readiness for the engine: feed completions, get newly ready tasks.
#[derive(Debug, Clone)]
pub struct Tracker {
    n_tasks: usize,
    succ_start: Vec<usize>,
    succ: Vec<usize>,
    waiting: Vec<usize>,
    done: Vec<bool>,
}

impl Tracker {
    /// A tracker with nothing done. [`Tracker::initially_ready`] lists the tasks to release first.
    pub fn new(plan: &Plan) -> Tracker {
        let g = plan.graph(&[EdgeKind::Dependency, EdgeKind::NodeOrder]);
        let mut t = Tracker {
            n_tasks: g.n_tasks,
            waiting: g.indeg.clone(),
            done: vec![false; g.n()],
            succ_start: g.succ_start,
            succ: g.succ,
        };
        // Gates without predecessors are done at once.
        let free: Vec<usize> = (t.n_tasks..t.waiting.len())
            .filter(|&v| t.waiting[v] == 0)
            .collect();
        let mut out = Vec::new();
        for v in free {
            t.finish(v, &mut out);
        }
        t
    }

    /// Tasks with no unfinished predecessor and not yet completed.
    pub fn initially_ready(&self) -> Vec<usize> {
        (0..self.n_tasks)
            .filter(|&i| self.waiting[i] == 0 && !self.done[i])
            .collect()
    }

    /// Mark task `task` complete; returns the tasks that became ready because of it. Completing a
    /// task twice, or an unknown index, returns nothing.
    pub fn complete(&mut self, task: usize) -> Vec<usize> {
        let mut out = Vec::new();
        if task < self.n_tasks && !self.done[task] {
            self.finish(task, &mut out);
        }
        out
    }

    fn finish(&mut self, v: usize, out: &mut Vec<usize>) {
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            self.done[v] = true;
            for k in self.succ_start[v]..self.succ_start[v + 1] {
                let s = self.succ[k];
                self.waiting[s] = self.waiting[s].saturating_sub(1);
                if self.waiting[s] == 0 {
                    if s < self.n_tasks {
                        out.push(s);
                    } else {
                        stack.push(s);
                    }
                }
            }
        }
        out.sort_unstable();
    }
}

/// What one node does in an operation. Service chains in `first` run before those in `then`.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeProgram {
    pub node: usize,
    /// Service chains before anything else (the LEAVE and STOP of a node being replaced).
    pub leave: Vec<(String, Vec<ProvisionerAction>)>,
    pub pre: Vec<ProvisionerAction>,
    pub first: Vec<(String, Vec<ProvisionerAction>)>,
    pub then: Vec<(String, Vec<ProvisionerAction>)>,
    pub post: Vec<ProvisionerAction>,
    pub automators: Vec<String>,
}

/// The tasks a program made: the heads of its `then` chains, and its first and last tasks.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProgramTasks {
    pub then_heads: Vec<usize>,
    /// The last task of each `first` chain (what a node stops or removes before anything else).
    pub first_tails: Vec<usize>,
    pub sources: Vec<usize>,
    pub sinks: Vec<usize>,
    /// Every service chain's tasks in order, with its service id.
    pub chains: Vec<(u32, Vec<usize>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    node: u32,
    action: ProvisionerAction,
    service: Option<u32>,
}

/// Collects tasks and dependency edges, then orders each node and numbers the tasks.
pub(crate) struct Builder<'a> {
    nodes: Vec<&'a PlanNode>,
    services: Vec<String>,
    service_ids: HashMap<String, u32>,
    tasks: Vec<Key>,
    /// Per service id: bit i set when the service defines `ProvisionerAction::ALL[i]`.
    defined: Vec<u16>,
    automators: HashMap<usize, Vec<String>>,
    /// Edges among tasks, and gate edges encoded with gate ids as `usize::MAX - g`.
    edges: Vec<(usize, usize)>,
    gates: usize,
}

const GATE_BASE: usize = usize::MAX / 2;

fn action_bit(a: ProvisionerAction) -> u16 {
    1 << ProvisionerAction::ALL
        .iter()
        .position(|&x| x == a)
        .unwrap_or(0)
}

impl<'a> Builder<'a> {
    /// A builder; `expected_tasks` only sizes the buffers.
    pub(crate) fn new(nodes: Vec<&'a PlanNode>, expected_tasks: usize) -> Builder<'a> {
        Builder {
            nodes,
            services: Vec::new(),
            service_ids: HashMap::new(),
            tasks: Vec::with_capacity(expected_tasks),
            defined: Vec::new(),
            automators: HashMap::new(),
            edges: Vec::with_capacity(expected_tasks * 2),
            gates: 0,
        }
    }

    fn service_id(&mut self, s: &str, defined: &impl Fn(&str, ProvisionerAction) -> bool) -> u32 {
        if let Some(&id) = self.service_ids.get(s) {
            return id;
        }
        let id = self.services.len() as u32;
        self.services.push(s.to_string());
        self.service_ids.insert(s.to_string(), id);
        let mask = ProvisionerAction::ALL
            .iter()
            .enumerate()
            .filter(|(_, &a)| defined(s, a))
            .fold(0u16, |m, (_, &a)| m | action_bit(a));
        self.defined.push(mask);
        id
    }

    fn task(&mut self, node: usize, action: ProvisionerAction, service: Option<u32>) -> usize {
        self.tasks.push(Key {
            node: node as u32,
            action,
            service,
        });
        self.tasks.len() - 1
    }

    /// Add one node's tasks with their lifecycle chain edges. `defined(service, action)` says
    /// whether the service has that action; undefined actions are skipped and the chain closes
    /// over them. Order: `leave` chains, `pre`, `first` chains, `then` chains, `post`.
    pub(crate) fn add_program(
        &mut self,
        p: &NodeProgram,
        defined: impl Fn(&str, ProvisionerAction) -> bool,
    ) -> ProgramTasks {
        let mut out = ProgramTasks::default();
        let mut ends = self.add_chains(p.node, &p.leave, &[], &defined, &mut out);
        ends = self.add_line(p.node, &p.pre, ends, &p.automators, &mut out);
        let after_first = self.add_chains(p.node, &p.first, &ends, &defined, &mut out);
        out.first_tails = after_first.clone();
        if !after_first.is_empty() {
            ends = after_first;
        }
        let heads_from = out.chains.len();
        let after_then = self.add_chains(p.node, &p.then, &ends, &defined, &mut out);
        out.then_heads = out.chains[heads_from..]
            .iter()
            .filter_map(|(_, c)| c.first().copied())
            .collect();
        if !after_then.is_empty() {
            ends = after_then;
        }
        out.sinks = self.add_line(p.node, &p.post, ends, &p.automators, &mut out);
        out
    }

    /// Node tasks in a line after `ends` (BOOTSTRAP gets the node's automators); the new ends.
    fn add_line(
        &mut self,
        node: usize,
        actions: &[ProvisionerAction],
        ends: Vec<usize>,
        automators: &[String],
        out: &mut ProgramTasks,
    ) -> Vec<usize> {
        let mut prev = ends;
        for &a in actions {
            let t = self.task(node, a, None);
            if a == ProvisionerAction::Bootstrap {
                self.automators.insert(t, automators.to_vec());
            }
            if prev.is_empty() {
                out.sources.push(t);
            }
            for &q in &prev {
                self.edges.push((q, t));
            }
            prev = vec![t];
        }
        prev
    }

    /// Service chains side by side, each after every task of `starts`; the chains' last tasks
    /// (none when no chain made a task). Each chain's tasks go to `out.chains`.
    fn add_chains(
        &mut self,
        node: usize,
        chains: &[(String, Vec<ProvisionerAction>)],
        starts: &[usize],
        defined: &impl Fn(&str, ProvisionerAction) -> bool,
        out: &mut ProgramTasks,
    ) -> Vec<usize> {
        let mut ends = Vec::new();
        for (service, actions) in chains {
            let sid = self.service_id(service, defined);
            let mask = self.defined[sid as usize];
            let mut made: Vec<usize> = Vec::new();
            for &a in actions.iter().filter(|&&a| mask & action_bit(a) != 0) {
                let t = self.task(node, a, Some(sid));
                match made.last() {
                    Some(&q) => self.edges.push((q, t)),
                    None if starts.is_empty() => out.sources.push(t),
                    None => self.edges.extend(starts.iter().map(|&s| (s, t))),
                }
                made.push(t);
            }
            ends.extend(made.last().copied());
            if !made.is_empty() {
                out.chains.push((sid, made));
            }
        }
        ends
    }

    /// How many tasks the builder holds.
    pub(crate) fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Service tasks grouped by (action, service id), task indices in creation order.
    pub(crate) fn service_groups(&self) -> HashMap<(ProvisionerAction, u32), Vec<usize>> {
        let mut out: HashMap<(ProvisionerAction, u32), Vec<usize>> = HashMap::new();
        for (i, k) in self.tasks.iter().enumerate() {
            if let Some(s) = k.service {
                out.entry((k.action, s)).or_default().push(i);
            }
        }
        out
    }

    /// Service tasks: (index, action, service id).
    pub(crate) fn service_tasks(
        &self,
    ) -> impl Iterator<Item = (usize, ProvisionerAction, u32)> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.service.map(|s| (i, k.action, s)))
    }

    /// The action of task `t`.
    pub(crate) fn task_action(&self, t: usize) -> ProvisionerAction {
        self.tasks[t].action
    }

    /// The service of task `t`, if it is a service task.
    pub(crate) fn task_service(&self, t: usize) -> Option<&str> {
        self.tasks[t].service.map(|id| self.service_name(id))
    }

    /// The name of a service id.
    pub(crate) fn service_name(&self, id: u32) -> &str {
        &self.services[id as usize]
    }

    /// The id of a service name, if any task uses it.
    pub(crate) fn find_service(&self, name: &str) -> Option<u32> {
        self.service_ids.get(name).copied()
    }

    /// Tasks of one action, any node.
    pub(crate) fn tasks_of(&self, action: ProvisionerAction) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&i| self.tasks[i].action == action)
            .collect()
    }

    /// Every task in `to` waits for every task in `from`; through a gate when both have two or
    /// more tasks.
    pub(crate) fn barrier(&mut self, from: &[usize], to: &[usize]) {
        if from.len() >= 2 && to.len() >= 2 {
            let g = GATE_BASE + self.gates;
            self.gates += 1;
            self.edges.extend(from.iter().map(|&f| (f, g)));
            self.edges.extend(to.iter().map(|&t| (g, t)));
        } else {
            for &f in from {
                self.edges.extend(to.iter().map(|&t| (f, t)));
            }
        }
    }

    /// Order each node, number tasks by stage, and produce the plan.
    pub(crate) fn finish(mut self, action: &str) -> Result<Plan, PlanError> {
        let n_tasks = self.tasks.len();
        let vid = |v: usize| {
            if v >= GATE_BASE {
                n_tasks + (v - GATE_BASE)
            } else {
                v
            }
        };
        let dep: Vec<(usize, usize)> = self.edges.iter().map(|&(f, t)| (vid(f), vid(t))).collect();
        let g = Graph::new(n_tasks, self.gates, dep.iter().copied());
        let order = self.topo(&g)?;
        let per_node = self.node_order(&g.levels(&order), &g.tails(&order));
        let (chain, chain_next) = node_chains(&g, &per_node, n_tasks);
        let all = Graph::new(n_tasks, self.gates, dep.iter().chain(&chain).copied());
        let perm = self.stage_order(&all, &per_node)?;
        let edges = sorted_edges(&g, &chain_next, &perm, self.gates);
        Ok(Plan {
            action: action.to_string(),
            tasks: self.planned_tasks(&perm),
            gates: self.gates,
            edges,
        })
    }

    /// The graph's topological order, or the plan's cycle named.
    fn topo(&self, g: &Graph) -> Result<Vec<usize>, PlanError> {
        g.topo().map_err(|v| PlanError::CyclicPlan {
            task: self.describe(v),
        })
    }

    /// Per node: its tasks in (level, longest tail first, action, service name) order.
    fn node_order(&self, level: &[usize], tail: &[usize]) -> Vec<Vec<usize>> {
        let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, k) in self.tasks.iter().enumerate() {
            per_node[k.node as usize].push(i);
        }
        let rank = self.service_ranks();
        for list in &mut per_node {
            list.sort_by_key(|&t| {
                let k = &self.tasks[t];
                (
                    level[t],
                    std::cmp::Reverse(tail[t]),
                    k.action,
                    k.service.map(|s| rank[s as usize]),
                    t,
                )
            });
        }
        per_node
    }

    /// Rank of each service name, so that the per-node sort compares integers.
    fn service_ranks(&self) -> Vec<u32> {
        let mut by_name: Vec<u32> = (0..self.services.len() as u32).collect();
        by_name.sort_by(|&a, &b| self.services[a as usize].cmp(&self.services[b as usize]));
        let mut rank = vec![0u32; self.services.len()];
        for (r, &id) in by_name.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        rank
    }

    /// Final numbering: by stage of the chained DAG, then node order (a bucket sort: within a
    /// stage each node has at most one task). Returns the old index of each new one.
    fn stage_order(&self, all: &Graph, per_node: &[Vec<usize>]) -> Result<Vec<usize>, PlanError> {
        let level = all.levels(&self.topo(all)?);
        let n_levels = level
            .iter()
            .take(self.tasks.len())
            .max()
            .map_or(0, |m| m + 1);
        let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); n_levels];
        for list in per_node {
            for &t in list {
                buckets[level[t]].push(t);
            }
        }
        Ok(buckets.into_iter().flatten().collect())
    }

    /// The plan's tasks in their final order (`perm`: the old index of each); takes the
    /// automators.
    fn planned_tasks(&mut self, perm: &[usize]) -> Vec<PlannedTask> {
        perm.iter()
            .map(|&old| {
                let k = &self.tasks[old];
                PlannedTask {
                    node_id: self.nodes[k.node as usize].id.clone(),
                    action: k.action,
                    service: k.service.map(|s| self.services[s as usize].clone()),
                    automators: self.automators.remove(&old).unwrap_or_default(),
                }
            })
            .collect()
    }

    fn describe(&self, v: usize) -> String {
        match self.tasks.get(v) {
            Some(k) => format!(
                "{} {} on node {}",
                k.action.upper(),
                k.service
                    .map(|s| self.services[s as usize].as_str())
                    .unwrap_or("(node)"),
                self.nodes[k.node as usize].id
            ),
            None => format!("gate {}", v - self.tasks.len()),
        }
    }
}

/// The node-order edges chaining each node's tasks (those the dependency graph `g` does not
/// already have), and each task's successor on its node.
fn node_chains(
    g: &Graph,
    per_node: &[Vec<usize>],
    n_tasks: usize,
) -> (Vec<(usize, usize)>, Vec<Option<usize>>) {
    let mut chain: Vec<(usize, usize)> = Vec::new();
    let mut chain_next: Vec<Option<usize>> = vec![None; n_tasks];
    for list in per_node {
        for w in list.windows(2) {
            if !g.succs(w[0]).contains(&w[1]) {
                chain.push((w[0], w[1]));
                chain_next[w[0]] = Some(w[1]);
            }
        }
    }
    (chain, chain_next)
}

/// The plan's edges (dependencies of `g`, node order of `chain_next`) in final numbering
/// (`perm`): sorted by source (tasks in new order, then gates), then target; duplicates dropped.
fn sorted_edges(
    g: &Graph,
    chain_next: &[Option<usize>],
    perm: &[usize],
    gates: usize,
) -> Vec<Edge> {
    let n_tasks = perm.len();
    let mut new_index = vec![0usize; n_tasks];
    for (new, &old) in perm.iter().enumerate() {
        new_index[old] = new;
    }
    let vertex = |v: usize| {
        if v < n_tasks {
            Vertex::Task(new_index[v])
        } else {
            Vertex::Gate(v - n_tasks)
        }
    };
    let mut edges: Vec<Edge> = Vec::with_capacity(g.succ.len() + n_tasks);
    let mut out: Vec<Edge> = Vec::new();
    for from in perm.iter().copied().chain(n_tasks..n_tasks + gates) {
        out.clear();
        let f = vertex(from);
        out.extend(g.succs(from).iter().map(|&t| Edge {
            from: f,
            to: vertex(t),
            kind: EdgeKind::Dependency,
        }));
        if let Some(t) = chain_next.get(from).copied().flatten() {
            out.push(Edge {
                from: f,
                to: vertex(t),
                kind: EdgeKind::NodeOrder,
            });
        }
        out.sort_unstable();
        out.dedup_by_key(|e| e.to);
        edges.extend_from_slice(&out);
    }
    edges
}
