//! The planner's view of a cluster layout: the nodes with their properties and services.
//!
//! Every place that needs an order over nodes uses ascending `nodenum`, then `id`, so the same input
//! always gives the same plan and the same macro values.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::PlanError;

/// IP type used when a macro names none (`%ip.service.X%`).
pub const DEFAULT_IP_TYPE: &str = "bind_v4";

/// One node of a layout, as the planner and the macro expander need it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlanNode {
    /// The node id (a UUID in a running cluster).
    pub id: String,
    /// Position in the cluster; Coopr starts at 1000.
    pub nodenum: u64,
    /// The node's hostname; empty until known (`%host...%` macros about the node then fail).
    #[serde(default)]
    pub hostname: String,
    /// IP type (`access_v4`, `bind_v4`, ...) to address; empty until CONFIRM reports them.
    #[serde(default)]
    pub ipaddresses: BTreeMap<String, String>,
    /// The node's hardware type name, as the layout placed it.
    #[serde(default)]
    pub hardwaretype: String,
    /// The node's image type name, as the layout placed it.
    #[serde(default)]
    pub imagetype: String,
    /// Names of the services placed on this node.
    #[serde(default)]
    pub services: BTreeSet<String>,
}

/// Nodes sorted by (nodenum, id); rejects duplicate ids.
pub(crate) fn sorted<'a>(
    nodes: &'a [PlanNode],
    which: &'static str,
) -> Result<Vec<&'a PlanNode>, PlanError> {
    let mut out: Vec<&PlanNode> = nodes.iter().collect();
    out.sort_by(|a, b| (a.nodenum, &a.id).cmp(&(b.nodenum, &b.id)));
    let mut seen = BTreeSet::new();
    for n in &out {
        if !seen.insert(n.id.as_str()) {
            return Err(PlanError::DuplicateNode {
                node: n.id.clone(),
                which,
            });
        }
    }
    Ok(out)
}
