//! A plan as people read it: the nodes it touches grouped by hardware type, image type and
//! services (`3 nodes  small/host  web`), and a one-line summary (`36 tasks on 4 nodes, longest
//! chain 9`). The task table is for `--verbose`.
//!
//! A dry run's plan names nodes and services, not hardware: nodes that exist take theirs from the
//! cluster; new nodes take the request's, else a service's only allowed type in the template's
//! constraints, else the template's default.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use weft_model::{ClusterTemplate, Node, PlanView};

/// Where each node's hardware type, image type and services come from.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeKinds {
    known: HashMap<String, (String, String, BTreeSet<String>)>,
    hardwaretype: Option<String>,
    imagetype: Option<String>,
    service_hw: BTreeMap<String, String>,
    service_img: BTreeMap<String, String>,
}

/// Nodes alike: how many, their hardware and image types, their services.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Group {
    pub hardwaretype: String,
    pub imagetype: String,
    pub services: Vec<String>,
    pub count: usize,
}

impl NodeKinds {
    /// New nodes: `hardwaretype`/`imagetype` (the request's) over the template's.
    pub(super) fn from_template(
        t: &ClusterTemplate,
        hardwaretype: Option<&str>,
        imagetype: Option<&str>,
    ) -> NodeKinds {
        let only = |v: &Vec<String>| (v.len() == 1).then(|| v[0].clone());
        let cons = &t.constraints.services;
        NodeKinds {
            known: HashMap::new(),
            hardwaretype: hardwaretype
                .map(str::to_string)
                .or(t.defaults.hardwaretype.clone()),
            imagetype: imagetype
                .map(str::to_string)
                .or(t.defaults.imagetype.clone()),
            service_hw: cons
                .iter()
                .filter_map(|(s, c)| only(&c.hardwaretypes).map(|h| (s.clone(), h)))
                .collect(),
            service_img: cons
                .iter()
                .filter_map(|(s, c)| only(&c.imagetypes).map(|i| (s.clone(), i)))
                .collect(),
        }
    }

    /// Nodes that exist keep their hardware, image and services.
    pub(super) fn with_nodes(mut self, nodes: &[Node]) -> NodeKinds {
        for n in nodes {
            let p = &n.properties;
            let services = p.services.iter().cloned().collect();
            self.known.insert(
                n.id.clone(),
                (p.hardwaretype.clone(), p.imagetype.clone(), services),
            );
        }
        self
    }

    fn kind(&self, node: &str, planned: &BTreeSet<String>) -> (String, String, BTreeSet<String>) {
        if let Some((hw, img, had)) = self.known.get(node) {
            return (
                hw.clone(),
                img.clone(),
                had.union(planned).cloned().collect(),
            );
        }
        let pick = |by: &BTreeMap<String, String>, default: &Option<String>| {
            planned
                .iter()
                .find_map(|s| by.get(s).cloned())
                .or_else(|| default.clone())
                .unwrap_or_else(|| "?".into())
        };
        (
            pick(&self.service_hw, &self.hardwaretype),
            pick(&self.service_img, &self.imagetype),
            planned.clone(),
        )
    }
}

/// The plan's nodes (in order of first appearance) with the services their tasks name.
fn plan_nodes(plan: &PlanView) -> Vec<(String, BTreeSet<String>)> {
    let mut order: Vec<(String, BTreeSet<String>)> = Vec::new();
    for task in plan.stages.iter().flatten() {
        if task.node_id.is_empty() {
            continue;
        }
        let i = match order.iter().position(|(n, _)| *n == task.node_id) {
            Some(i) => i,
            None => {
                order.push((task.node_id.clone(), BTreeSet::new()));
                order.len() - 1
            }
        };
        if !task.service.is_empty() {
            order[i].1.insert(task.service.clone());
        }
    }
    order
}

/// The plan's nodes grouped: most nodes first, then by hardware, image and services.
pub(super) fn groups(plan: &PlanView, kinds: &NodeKinds) -> Vec<Group> {
    let mut counts: BTreeMap<(String, String, Vec<String>), usize> = BTreeMap::new();
    for (node, planned) in plan_nodes(plan) {
        let (hw, img, services) = kinds.kind(&node, &planned);
        *counts
            .entry((hw, img, services.into_iter().collect()))
            .or_insert(0) += 1;
    }
    let mut out: Vec<Group> = counts
        .into_iter()
        .map(|((hardwaretype, imagetype, services), count)| Group {
            hardwaretype,
            imagetype,
            services,
            count,
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.cmp(b)));
    out
}

/// One line per group, columns aligned: `3 nodes  small/host  web`.
pub(super) fn render_groups(groups: &[Group]) -> String {
    let counts: Vec<String> = groups
        .iter()
        .map(|g| format!("{} node{}", g.count, if g.count == 1 { "" } else { "s" }))
        .collect();
    let kinds: Vec<String> = groups
        .iter()
        .map(|g| format!("{}/{}", g.hardwaretype, g.imagetype))
        .collect();
    let w1 = counts.iter().map(String::len).max().unwrap_or(0);
    let w2 = kinds.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for ((c, k), g) in counts.iter().zip(&kinds).zip(groups) {
        let services = if g.services.is_empty() {
            "(no services)".to_string()
        } else {
            g.services.join(", ")
        };
        out.push_str(&format!("  {c:<w1$}  {k:<w2$}  {services}\n"));
    }
    out
}

/// `36 tasks on 4 nodes, longest chain 9`: a chain is the stages, each waiting for the last.
pub(super) fn summary(plan: &PlanView) -> String {
    let tasks: usize = plan.stages.iter().map(Vec::len).sum();
    let nodes = plan_nodes(plan).len();
    format!(
        "{tasks} task{} on {nodes} node{}, longest chain {}",
        if tasks == 1 { "" } else { "s" },
        if nodes == 1 { "" } else { "s" },
        plan.stages.len()
    )
}

/// `cost: 0.00 -> 0.0416 USD per hour (0.9984 per day; 1.4976 over the lease)`, and the node
/// kinds without a price when there are some.
pub(super) fn cost_line(c: &weft_model::CostEstimate) -> String {
    let mut out = format!(
        "cost: {} -> {} {} per hour ({} per day",
        c.per_hour_before, c.per_hour_after, c.currency, c.per_day_after
    );
    if let Some(l) = &c.over_lease {
        out.push_str(&format!("; {l} over the lease"));
    }
    out.push(')');
    if !c.unpriced.is_empty() {
        out.push_str(&format!(
            "; no price for {} (left out)",
            c.unpriced.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::PlanTask;

    #[test]
    fn the_cost_line_names_before_after_and_what_has_no_price() {
        let c = weft_model::CostEstimate::new("USD", 0, 41_600, Some(36 * 3_600_000), vec![]);
        assert_eq!(
            cost_line(&c),
            "cost: 0.00 -> 0.0416 USD per hour (0.9984 per day; 1.4976 over the lease)"
        );
        let c = weft_model::CostEstimate::new("EUR", 10_000, 20_000, None, vec!["big/host".into()]);
        assert_eq!(
            cost_line(&c),
            "cost: 0.01 -> 0.02 EUR per hour (0.48 per day); no price for big/host (left out)"
        );
    }

    fn plan(tasks: &[(usize, &str, &str, &str)]) -> PlanView {
        let depth = tasks.iter().map(|t| t.0).max().unwrap_or(0);
        let mut stages = vec![Vec::new(); depth];
        for (i, (stage, name, service, node)) in tasks.iter().enumerate() {
            stages[stage - 1].push(PlanTask {
                id: i.to_string(),
                task_name: name.to_string(),
                node_id: node.to_string(),
                service: service.to_string(),
            });
        }
        PlanView {
            id: String::new(),
            cluster_id: String::new(),
            action: "CLUSTER_CREATE".into(),
            current_stage: 0,
            stages,
            rollout: None,
            cost: None,
        }
    }

    fn template() -> ClusterTemplate {
        serde_json::from_value(serde_json::json!({
            "name": "t",
            "defaults": {"services": ["web", "lb", "kv-primary"], "hardwaretype": "small", "imagetype": "host"},
            "constraints": {"services": {"kv-primary": {"hardwaretypes": ["medium"]}}}
        }))
        .unwrap()
    }

    #[test]
    fn groups_new_nodes_by_kind_and_services() {
        let mut tasks = Vec::new();
        for n in ["a", "b", "c"] {
            tasks.push((1, "CREATE", "", n));
            tasks.push((2, "INSTALL", "web", n));
        }
        tasks.push((1, "CREATE", "", "d"));
        tasks.push((2, "INSTALL", "kv-primary", "d"));
        tasks.push((3, "INSTALL", "lb", "d"));
        let p = plan(&tasks);
        let kinds = NodeKinds::from_template(&template(), None, None);
        assert_eq!(
            render_groups(&groups(&p, &kinds)),
            "  3 nodes  small/host   web\n  1 node   medium/host  kv-primary, lb\n"
        );
        assert_eq!(summary(&p), "9 tasks on 4 nodes, longest chain 3");
    }

    #[test]
    fn existing_nodes_keep_their_kind_and_services() {
        let p = plan(&[(1, "CONFIGURE", "web", "a"), (2, "START", "web", "a")]);
        let node: Node = serde_json::from_value(serde_json::json!({
            "id": "a", "clusterId": "1", "services": [],
            "properties": {"nodenum": 1000, "hardwaretype": "large", "imagetype": "ubuntu",
                           "sshuser": "root", "services": ["lb", "web"]}
        }))
        .unwrap();
        let kinds = NodeKinds::from_template(&template(), Some("tiny"), None).with_nodes(&[node]);
        assert_eq!(
            render_groups(&groups(&p, &kinds)),
            "  1 node  large/ubuntu  lb, web\n"
        );
        assert_eq!(summary(&p), "2 tasks on 1 node, longest chain 2");
    }

    #[test]
    fn the_request_overrides_the_template_default() {
        let p = plan(&[(1, "CREATE", "", "x")]);
        let kinds = NodeKinds::from_template(&template(), Some("large"), Some("bookworm"));
        assert_eq!(
            render_groups(&groups(&p, &kinds)),
            "  1 node  large/bookworm  (no services)\n"
        );
    }
}
