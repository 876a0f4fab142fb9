//! The solver's output: one entry per node (existing nodes keep their ids, new nodes have none),
//! the ids of removed nodes, a grouped view and a readable text rendering.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One node of a solved layout.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LayoutNode {
    /// The existing node's id; `None` for a node to create.
    pub id: Option<String>,
    /// The hardware type name; an existing node keeps its own.
    pub hardwaretype: String,
    /// The image type name; an existing node keeps its own.
    pub imagetype: String,
    /// Sorted, no duplicates.
    pub services: Vec<String>,
}

/// Identical nodes, counted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeGroup {
    /// The hardware type name every node of the group has.
    pub hardwaretype: String,
    /// The image type name every node of the group has.
    pub imagetype: String,
    /// The services every node of the group holds; sorted, no duplicates.
    pub services: Vec<String>,
    /// How many nodes of the layout have exactly this shape (at least 1).
    pub count: u64,
}

/// A solved layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// Existing nodes first (in the order given), then new nodes (sorted by shape).
    pub nodes: Vec<LayoutNode>,
    /// Ids of existing nodes to delete (shrink, or nodes left empty by a service removal).
    pub removed: Vec<String>,
}

impl Layout {
    /// The nodes grouped by (hardware, image, services), sorted.
    pub fn groups(&self) -> Vec<NodeGroup> {
        let mut m: BTreeMap<(&str, &str, &[String]), u64> = BTreeMap::new();
        for n in &self.nodes {
            *m.entry((&n.hardwaretype, &n.imagetype, &n.services))
                .or_default() += 1;
        }
        m.into_iter()
            .map(|((h, i, s), count)| NodeGroup {
                hardwaretype: h.to_string(),
                imagetype: i.to_string(),
                services: s.to_vec(),
                count,
            })
            .collect()
    }

    /// New nodes (no id).
    pub fn new_nodes(&self) -> impl Iterator<Item = &LayoutNode> {
        self.nodes.iter().filter(|n| n.id.is_none())
    }

    /// A readable rendering, one line per node group:
    /// `3 x small/centos: datanode, nodemanager`, then `removed: id, ...` if any.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for g in self.groups() {
            let _ = writeln!(
                out,
                "{} x {}/{}: {}",
                g.count,
                g.hardwaretype,
                g.imagetype,
                g.services.join(", ")
            );
        }
        if !self.removed.is_empty() {
            let _ = writeln!(out, "removed: {}", self.removed.join(", "));
        }
        out
    }
}
