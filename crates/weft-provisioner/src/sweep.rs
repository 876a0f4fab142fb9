//! Machines that carry weft's marks but belong to no live node: what `weft provider sweep` shows
//! (and, with `--delete`, removes).
//!
//! Each provider that can list what it made answers [`Tagged`] machines: every cloud provider
//! through the cloud layer ([`crate::cloud`]: the machines of the account carrying weft's marks),
//! the `docker` provider every container with a `weft.node` label. [`orphans`] keeps those whose
//! node is not among the live nodes the caller knows (the
//! server's nodes of clusters not terminated), and [`delete_task`] makes the DELETE task that
//! removes one through the provider's own DELETE (by its id and by its marks), so a sweep deletes
//! exactly what a DELETE of that node would.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft_model::{SweepError, SweepReport};

use crate::plugin::Provider;
use crate::task::{Action, PluginError, Task};

/// A machine weft marked as a node's (the wire type of the sweep's answer; each provider that
/// can list what it made answers these from `Provider::machines`).
pub type Tagged = weft_model::SweptMachine;

/// The machines of `machines` whose node is not in `live`.
pub fn orphans(machines: Vec<Tagged>, live: &BTreeSet<String>) -> Vec<Tagged> {
    machines
        .into_iter()
        .filter(|m| !live.contains(&m.node))
        .collect()
}

/// The DELETE task that removes an orphan with its provider (`fields` are the provider's).
pub fn delete_task(m: &Tagged, fields: &Map<String, Value>, timeout: Duration) -> Task {
    let raw = json!({"taskId": format!("sweep-{}", m.providerid), "jobId": "sweep",
        "clusterId": m.cluster, "taskName": "DELETE", "nodeId": m.node,
        "config": {"providerid": m.providerid,
            "provider": {"name": "sweep", "providertype": m.providertype, "provisioner": fields}}});
    let mut t = Task::from_json(raw, timeout).expect("a well-formed task");
    t.action = Action::Delete;
    t.tenant_id = if m.tenant == "-" {
        String::new()
    } else {
        m.tenant.clone()
    };
    t
}

/// What the server asks a provisioner to sweep (`POST /v2/sweep` on the provisioner's API).
#[derive(Debug, Clone, Deserialize)]
pub struct SweepRequest {
    /// The provider type whose plugin lists the machines.
    pub providertype: String,
    /// The provider's fields, secrets included.
    #[serde(default)]
    pub fields: Map<String, Value>,
    /// Only machines marked with this tenant id are answered (never another tenant's).
    pub tenant: String,
    /// The tenant's live node ids: their machines are never answered.
    #[serde(default)]
    pub live: BTreeSet<String>,
    /// Also delete the orphans found.
    #[serde(default)]
    pub delete: bool,
}

/// The orphans of `req.tenant` that provider `p` lists, deleted through its DELETE when asked
/// (all at once, so that a sweep of many machines takes about as long as one DELETE).
pub async fn sweep(p: Arc<dyn Provider>, req: &SweepRequest) -> Result<SweepReport, PluginError> {
    let mine: Vec<Tagged> = p
        .machines(&req.fields)
        .await?
        .into_iter()
        .filter(|m| !req.tenant.is_empty() && m.tenant == req.tenant)
        .collect();
    let mut report = SweepReport {
        machines: orphans(mine, &req.live),
        ..Default::default()
    };
    if !req.delete {
        return Ok(report);
    }
    let mut deletes = tokio::task::JoinSet::new();
    for m in &report.machines {
        let (p, id) = (p.clone(), m.providerid.clone());
        let task = delete_task(m, &req.fields, Duration::from_secs(600));
        deletes.spawn(async move { (id, p.delete(&task).await) });
    }
    while let Some(done) = deletes.join_next().await {
        match done {
            Ok((id, Ok(_))) => report.deleted.push(id),
            Ok((id, Err(e))) => report.errors.push(SweepError {
                providerid: id,
                message: e.message,
            }),
            Err(e) => tracing::error!(error = %e, "a sweep delete panicked"),
        }
    }
    report.deleted.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: &str) -> Tagged {
        Tagged {
            providertype: "aws".into(),
            providerid: format!("i-{node}"),
            node: node.into(),
            cluster: "c".into(),
            tenant: "-".into(),
            state: "running".into(),
        }
    }

    #[test]
    fn orphans_are_the_machines_of_no_live_node() {
        let live = BTreeSet::from(["a".to_string()]);
        assert_eq!(orphans(vec![m("a"), m("b")], &live), vec![m("b")]);
        let t = delete_task(&m("b"), &Map::new(), Duration::from_secs(5));
        assert_eq!(t.node_id, "b");
        assert_eq!(t.tenant_id, "");
        assert_eq!(t.config_str("providerid"), Some("i-b"));
        assert_eq!(t.provider_type(), Some("aws"));
    }
}
