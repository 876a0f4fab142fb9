//! What the engine keeps in the JSON `body` of cluster, job and task rows. (A node's body is the
//! API's [`weft_model::Node`].)

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_model::{ClusterTemplate, Node, Provider};
use weft_planner::PlanNode;

use crate::error::{EngineError, EngineResult};

/// A cluster's body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterBody {
    /// The description the user gave at create; `None` without one.
    #[serde(default)]
    pub description: Option<String>,
    /// The cluster's copy of its provider, with the user's non-sensitive fields merged in.
    pub provider: Provider,
    /// The resolved template as it was at creation (or at the last template change).
    pub template: ClusterTemplate,
    /// The names of the services the cluster was asked to run (the request's, else the template's
    /// defaults, those the layout placed), as later adds and removes changed them.
    pub services: Vec<String>,
    /// The cluster's config (the template's default config unless the request gave one): JSON
    /// passed to every service's actions.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// The domain suffix of the nodes' host names (from the request, the template's default, else
    /// `local`).
    pub dns_suffix: String,
    /// The latest job's status message (failure output, "Aborted by user.").
    #[serde(default)]
    pub message: Option<String>,
    /// Sensitive provider fields the user gave at create: given to provisioners with each task,
    /// never shown. (Clusters made before credentials were read when used hold the admin's
    /// sensitive fields here too; the catalog's current values override those.)
    #[serde(default)]
    pub secrets: Map<String, Value>,
    /// The provider fields the user gave at create: the cluster's own. Every other field of its
    /// provider is read from the catalog when a task needs it, so a fixed or rotated credential
    /// reaches every existing cluster.
    /// `None` on clusters made before credentials were read when used: their copy holds the
    /// admin's fields too, and the catalog's only override them.
    #[serde(default)]
    pub user_fields: Option<Vec<String>>,
    /// Nodes the running job takes away (shrink): removed when it succeeds.
    #[serde(default)]
    pub retiring: Vec<String>,
    /// Definitions of services the running job takes off nodes, for its STOP and REMOVE tasks.
    #[serde(default)]
    pub leaving: Vec<weft_model::Service>,
    /// The create request asked for the cluster to be deleted if its create fails.
    #[serde(default)]
    pub rollback_on_failure: bool,
    /// While an upgrade runs: the service's definition before it, for the automatic rollback.
    #[serde(default)]
    pub upgrade_from: Option<UpgradeFrom>,
    /// A delete arrived while a job ran: the job was aborted, and whoever settles the cluster
    /// starts its delete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_requested: bool,
    /// weft extension: what the cluster costs per hour as its latest job leaves it, in
    /// micro-units of its provider's currency (`None`: the provider has no currency). The
    /// store sums it over a tenant's live clusters to check a budget.
    #[serde(
        rename = "costMicrosPerHour",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_micros_per_hour: Option<u64>,
    /// weft extension: the currency of `cost_spans` (the provider's when the cluster was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// weft extension: each priced node's life in the cluster, from the job that added it to
    /// the end of the job that removed it, at the price in force when it was added: what the
    /// cost reports (`GET /v2/costs`) add up.
    #[serde(rename = "costSpans", default, skip_serializing_if = "Vec::is_empty")]
    pub cost_spans: Vec<CostSpan>,
    /// weft extension: the latest change (its time) that an idle warning was recorded for.
    #[serde(
        rename = "idleWarned",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_warned: Option<i64>,
    /// Drift checks: the latest check, the orphans it found, what the janitor replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftRecord>,
}

impl ClusterBody {
    /// The provider fields a task (or a drift check's listing) gets: the provider as the catalog
    /// has it now (`current`) with the fields the user gave at create (and their secrets). Without
    /// `current` (the provider is gone), the cluster's copy alone.
    pub fn provider_fields(&self, current: Option<&Provider>) -> Map<String, Value> {
        let mut own = self.provider.provisioner.clone();
        own.extend(self.secrets.clone());
        match (current, &self.user_fields) {
            (None, _) => own,
            // The provider as it is now, a field the admin removed included, and the user's own.
            (Some(now), Some(user)) => {
                let mut fields = now.provisioner.clone();
                for k in user {
                    if let Some(v) = own.get(k) {
                        fields.insert(k.clone(), v.clone());
                    }
                }
                fields
            }
            // An older cluster: its copy, each field the catalog has overriding it.
            (Some(now), None) => {
                own.extend(now.provisioner.clone());
                own
            }
        }
    }
}

/// What a cluster keeps of its drift checks (see `drift`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DriftRecord {
    /// The latest check's job and when it started.
    #[serde(default)]
    pub job_id: Option<String>,
    /// When the latest check started, in ms since the epoch; 0 if none has.
    #[serde(default)]
    pub started: i64,
    /// Machines with the cluster's marks that belong to no node, found when it started.
    #[serde(default)]
    pub orphans: Vec<weft_model::SweptMachine>,
    /// Why orphans could not be looked for.
    #[serde(default)]
    pub orphans_unknown: Option<String>,
    /// The check whose findings were recorded last (by the janitor) and what it found: nodes
    /// whose machine is missing or stopped, and `node/service` pairs found unhealthy.
    #[serde(default)]
    pub recorded_job: Option<String>,
    /// Nodes whose machine the recorded check found missing or stopped.
    #[serde(default)]
    pub missing: Vec<String>,
    /// `node/service` pairs the recorded check found unhealthy.
    #[serde(default)]
    pub unhealthy: Vec<String>,
    /// Nodes the janitor replaced by itself (the last hour's and a few more).
    #[serde(default)]
    pub replacements: Vec<weft_model::AutoReplacement>,
}

/// What an upgrade replaced, so that a failed upgrade can be rolled back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpgradeFrom {
    /// The service's definition before the upgrade.
    pub service: weft_model::Service,
    /// The upgrade's batch size (nodes per batch), reused by its rollback.
    pub batch_size: usize,
}

/// A job's body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobBody {
    /// The stage view (task ids), for the plans API.
    #[serde(default)]
    pub stages: Vec<Vec<String>>,
    /// How many real (non-gate) tasks the job has.
    #[serde(default)]
    pub total: u64,
    /// Why the job failed or was aborted; `None` while nothing went wrong.
    #[serde(default)]
    pub message: Option<String>,
    /// A rolling change: its policy and what became of it (`changed_nodes` is read from the
    /// tasks when shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<weft_model::RolloutReport>,
    /// A rolling reconfigure: the cluster's config before it, what a revert restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_before: Option<Map<String, Value>>,
    /// The job was started past its services' availability rules (`?force=true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
}

/// A task's body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskBody {
    /// For BOOTSTRAP: the automator types to bootstrap on the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub automators: Vec<String>,
    /// The status code the worker reported for the last attempt (0 is success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i64>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the last attempt finished (milliseconds since the epoch); 0 while none has. (Fields
    /// at their defaults are not written: a new task's body is `{}`, which a 10,000-node create
    /// writes 240,000 times.)
    #[serde(default, skip_serializing_if = "is_zero")]
    pub finish_time: i64,
    /// The end of the last attempt's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The end of the last attempt's error output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// HEALTHCHECK tasks: what the check found (kept here, not on the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<weft_model::HealthReport>,
    /// STATUS tasks: what the provider said of the machine (kept here, not on the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<weft_model::MachineReport>,
    /// Earlier attempts that failed and were retried, oldest first (at most [`MAX_RETRIED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<Attempt>,
    /// How the last attempt failed, as its worker classified it (absent: unclassified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<weft_model::TaskFailure>,
    /// A DELETE that removes what a failed CREATE of its node may have made: clean-up, not a
    /// step of the plan. One after a fatal CREATE runs although its job has failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleanup: bool,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// How many failed attempts a task keeps for its node's history.
pub const MAX_RETRIED: usize = 10;

/// One finished attempt of a task.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Attempt {
    /// When the attempt started (was taken), in ms since the epoch.
    pub start_time: i64,
    /// When the attempt finished, in ms since the epoch.
    pub finish_time: i64,
    /// The end of the attempt's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The end of the attempt's error output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// How the attempt failed, as its worker classified it (absent: unclassified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<weft_model::TaskFailure>,
}

/// `t` as a row body; an encoding failure is an [`EngineError::Internal`].
pub fn to_body<T: Serialize>(t: &T) -> EngineResult<Value> {
    serde_json::to_value(t).map_err(|e| EngineError::Internal(format!("encoding a row body: {e}")))
}

/// A row body read as `T`; a body that does not fit is an [`EngineError::Internal`] (a corrupt
/// row).
pub fn from_body<T: serde::de::DeserializeOwned>(v: &Value) -> EngineResult<T> {
    // Deserializing from a reference avoids copying the whole document first.
    T::deserialize(v).map_err(|e| EngineError::Internal(format!("decoding a row body: {e}")))
}

/// The layout as the macro expander and the planner see it.
pub fn plan_nodes(nodes: &[Node]) -> Vec<PlanNode> {
    nodes
        .iter()
        .map(|n| plan_node(&n.id, &n.properties))
        .collect()
}

/// One node as the macro expander and the planner see it.
pub fn plan_node(id: &str, p: &weft_model::NodeProperties) -> PlanNode {
    PlanNode {
        id: id.to_string(),
        nodenum: p.nodenum,
        hostname: p.hostname.clone().unwrap_or_default(),
        ipaddresses: p.ipaddresses.clone(),
        hardwaretype: p.hardwaretype.clone(),
        imagetype: p.imagetype.clone(),
        services: p.services.iter().cloned().collect(),
    }
}

/// The end of a log or an output kept in a task's body: the last `max` bytes of `s` at most,
/// cut at a character boundary.
pub(crate) fn end_of(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(user_fields: Option<Vec<String>>) -> ClusterBody {
        serde_json::from_value(json!({
            "provider": {"name": "p", "providertype": "aws",
                         "provisioner": {"region": "r1", "session_token": "old-sts", "size": "user-pick"}},
            "template": {"name": "t"}, "services": [], "dns_suffix": "local",
            "secrets": {"token": "user-secret"},
            "user_fields": user_fields,
        }))
        .unwrap()
    }

    #[test]
    fn tasks_get_the_provider_as_it_is_now_and_the_users_own_fields() {
        let now: Provider = serde_json::from_value(json!({"name": "p", "providertype": "aws",
            "provisioner": {"region": "r2", "key": "new-key"}}))
        .unwrap();
        let b = body(Some(vec!["size".into(), "token".into()]));
        assert_eq!(
            Value::Object(b.provider_fields(Some(&now))),
            json!({"region": "r2", "key": "new-key", "size": "user-pick", "token": "user-secret"}),
            "a field the admin removed (session_token) is gone"
        );
        // A cluster from before: the catalog overrides its copy, nothing is removed.
        let old = body(None);
        assert_eq!(
            Value::Object(old.provider_fields(Some(&now)))["session_token"],
            "old-sts"
        );
        // The provider deleted from the catalog: the cluster's copy.
        assert_eq!(Value::Object(b.provider_fields(None))["region"], "r1");
    }
}

/// One priced node's time in its cluster (see `ClusterBody::cost_spans`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostSpan {
    /// The node's id.
    pub node: String,
    /// Its price per hour, in micro-units of the cluster's currency.
    #[serde(rename = "microsPerHour")]
    pub micros_per_hour: u64,
    /// When it joined the cluster (ms since the epoch).
    pub start: i64,
    /// When it left; `None` while it is in the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
}

impl ClusterBody {
    /// Ends at `now` the open spans of the nodes `ids` (every node's when `None`).
    pub fn end_spans(&mut self, ids: Option<&[String]>, now: i64) {
        for s in self
            .cost_spans
            .iter_mut()
            .filter(|s| s.end.is_none() && ids.is_none_or(|ids| ids.contains(&s.node)))
        {
            s.end = Some(now.max(s.start));
        }
    }
}
