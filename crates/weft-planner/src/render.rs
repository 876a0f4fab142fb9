//! Renderings of a plan: a readable text form (for `weft plan --format text` and snapshot tests) and
//! a JSON form (tasks, edges and Coopr's stage view).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::dag::{EdgeKind, Plan, Vertex};

fn label(v: Vertex) -> String {
    match v {
        Vertex::Task(i) => format!("t{i}"),
        Vertex::Gate(g) => format!("g{g}"),
    }
}

impl Plan {
    /// A readable rendering: one line per task, grouped by stage, with its direct predecessors
    /// (`~` marks a node-order edge), then the gates.
    pub fn render_text(&self) -> String {
        let n = self.tasks.len();
        let mut preds: Vec<Vec<(Vertex, EdgeKind)>> = vec![Vec::new(); n + self.gates];
        for e in &self.edges {
            let to = match e.to {
                Vertex::Task(i) if i < n => i,
                Vertex::Gate(g) if g < self.gates => n + g,
                _ => continue,
            };
            preds[to].push((e.from, e.kind));
        }
        let list = |ps: &[(Vertex, EdgeKind)]| -> String {
            ps.iter()
                .map(|(v, k)| match k {
                    EdgeKind::Dependency => label(*v),
                    EdgeKind::NodeOrder => format!("~{}", label(*v)),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let stages = self.stages();
        let width = self
            .tasks
            .iter()
            .map(|t| t.node_id.len())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} tasks, {} stages (Coopr stage by stage: {}), {} gates, {} edges",
            self.action,
            n,
            stages.len(),
            self.coopr_stages().len(),
            self.gates,
            self.edges.len()
        );
        for (k, stage) in stages.iter().enumerate() {
            let _ = writeln!(out, "stage {}:", k + 1);
            for &i in stage {
                let t = &self.tasks[i];
                let mut what = t.service.clone().unwrap_or_default();
                if !t.automators.is_empty() {
                    what = format!("[{}]", t.automators.join(","));
                }
                let mut line = format!(
                    "  {:<5}{:<11}{:<width$}",
                    label(Vertex::Task(i)),
                    // A space after the name, so that HEALTHCHECK (11 letters) stays apart too.
                    format!("{} ", t.action.upper()),
                    t.node_id
                );
                if !what.is_empty() {
                    let _ = write!(line, "  {what}");
                }
                if !preds[i].is_empty() {
                    let _ = write!(line, "  <- {}", list(&preds[i]));
                }
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
        for g in 0..self.gates {
            let _ = writeln!(out, "gate g{g} <- {}", list(&preds[n + g]));
        }
        out
    }

    /// The JSON form: `{"action", "tasks":[{"index","nodeId","taskName","service"[,"automators"]}],
    /// "gates", "edges":[{"from","to","kind"}], "stages"}` with `stages` in Coopr's plan format.
    /// `task_id` names task i in the stage view.
    pub fn to_json(&self, task_id: impl Fn(usize) -> String) -> Value {
        let tasks: Vec<Value> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut v = json!({
                    "index": i,
                    "nodeId": t.node_id,
                    "taskName": t.action.upper(),
                    "service": t.service.clone().unwrap_or_default(),
                });
                if !t.automators.is_empty() {
                    v["automators"] = json!(t.automators);
                }
                v
            })
            .collect();
        let edges: Vec<Value> = self
            .edges
            .iter()
            .map(|e| {
                json!({
                    "from": label(e.from),
                    "to": label(e.to),
                    "kind": match e.kind { EdgeKind::Dependency => "dependency", EdgeKind::NodeOrder => "node_order" },
                })
            })
            .collect();
        json!({
            "action": self.action,
            "tasks": tasks,
            "gates": self.gates,
            "edges": edges,
            "stages": self.stage_view(task_id),
        })
    }
}
