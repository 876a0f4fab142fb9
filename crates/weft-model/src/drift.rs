//! Drift (weft's extension): what is really there. What a provisioner reports for one `STATUS`
//! task, and what `GET /v2/clusters/{id}/check` answers: each node's machine as its provider sees
//! it, each service's health, and machines that carry the cluster's marks but belong to no node.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::{ServiceHealth, SweptMachine};

/// The key of a `STATUS` task's `result` under which a provisioner reports [`MachineReport`].
pub const STATUS_RESULT_KEY: &str = "machine";

/// A node's machine as its provider sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MachineState {
    /// The machine exists and runs.
    Running,
    /// The machine exists but does not run (a stopped container or instance; a local node none of
    /// whose processes is alive).
    Stopped,
    /// The provider has no such machine.
    Missing,
    /// Not checked yet, or the provider could not say.
    Unknown,
}

impl MachineState {
    /// The wire name (`running`, `stopped`, `missing`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            MachineState::Running => "running",
            MachineState::Stopped => "stopped",
            MachineState::Missing => "missing",
            MachineState::Unknown => "unknown",
        }
    }

    /// Whether the machine is gone or not running (what a check reports as drift).
    pub fn is_drift(self) -> bool {
        matches!(self, MachineState::Stopped | MachineState::Missing)
    }
}

/// What a provisioner says about one node's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MachineReport {
    /// The machine's state.
    pub state: MachineState,
    /// The provider's own words (its state name, or why it could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One node of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeDrift {
    /// The node's id.
    pub id: String,
    /// The node's hostname (empty when it has none).
    #[serde(default)]
    pub hostname: String,
    /// The node's number in its cluster (from 1000).
    pub nodenum: u64,
    /// Its machine's state, as its provider reported it (`unknown` until then).
    pub machine: MachineState,
    /// The provider's own words about the machine, if it gave any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Each service's health, as in `GET /v2/clusters/{id}/health`.
    pub services: Vec<ServiceHealth>,
}

/// A node the janitor replaced by itself (a template with `autoReplace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct AutoReplacement {
    /// The id of the node replaced.
    pub node: String,
    /// `jobId`: the replace job; empty until it is named, or if it could not be started.
    #[serde(rename = "jobId")]
    pub job_id: String,
    /// When it started (milliseconds since the epoch).
    pub at: i64,
}

/// `GET /v2/clusters/{id}/check`: the cluster's latest check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DriftReport {
    /// `clusterId`: the cluster's id (8 digits).
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// The check's job, if the cluster ever had one.
    #[serde(rename = "jobId", default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// That job's status (`running`, `complete`, `failed`...); empty when there was no check.
    #[serde(rename = "jobStatus", default)]
    pub job_status: String,
    /// Something is not as weft left it: a machine missing or stopped, a service unhealthy, or
    /// an orphan machine.
    pub drift: bool,
    /// One entry per node of the cluster.
    pub nodes: Vec<NodeDrift>,
    /// Machines with the cluster's marks that belong to no node of it (found when the check
    /// started; only providers that can list their machines: aws, docker, google, joyent,
    /// openstack, rackspace).
    #[serde(default)]
    pub orphans: Vec<SweptMachine>,
    /// Why orphans could not be looked for, when they could not.
    #[serde(
        rename = "orphansUnknown",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub orphans_unknown: Option<String>,
    /// Nodes the janitor replaced by itself, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<AutoReplacement>,
}

impl DriftReport {
    /// Whether the check has ended (it is neither running nor paused).
    pub fn finished(&self) -> bool {
        !crate::JobStatus::parse(&self.job_status).is_some_and(crate::JobStatus::is_underway)
    }
}

/// `POST /v2/clusters/{id}/check`: the check that was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DriftRun {
    /// `clusterId`: the cluster's id (8 digits).
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// `jobId`: the check's job, whose result `GET /v2/clusters/{id}/check` shows.
    #[serde(rename = "jobId")]
    pub job_id: String,
    /// How many tasks it runs (a STATUS per node, and the health checks).
    pub tasks: u64,
}

/// `POST /v2/clusters/{id}/nodes/{node}/replace`: the replace job that was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplaceRun {
    /// `clusterId`: the cluster's id (8 digits).
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// `jobId`: the replace job.
    #[serde(rename = "jobId")]
    pub job_id: String,
    /// The id of the node being replaced.
    pub node: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ClusterTemplate;

    #[test]
    fn auto_replace_is_read_leniently_inherited_and_left_out_when_false() {
        let t: ClusterTemplate =
            serde_json::from_value(json!({"name": "t", "autoReplace": "true"})).unwrap();
        assert!(t.auto_replace);
        assert_eq!(serde_json::to_value(&t).unwrap()["autoReplace"], true);
        let plain: ClusterTemplate = serde_json::from_value(json!({"name": "p"})).unwrap();
        assert!(!plain.auto_replace);
        let out = serde_json::to_value(&plain).unwrap();
        assert!(out.get("autoReplace").is_none(), "Coopr's format: {out}");
        let child: ClusterTemplate =
            serde_json::from_value(json!({"name": "c", "extends": {"name": "t"}})).unwrap();
        let merged = crate::resolve::merge_template(&child, Some(&t), &[]).unwrap();
        assert!(merged.auto_replace, "a child inherits autoReplace");
    }

    #[test]
    fn a_machine_report_on_the_wire() {
        let r: MachineReport = serde_json::from_value(json!({"state": "missing"})).unwrap();
        assert_eq!(r.state, MachineState::Missing);
        assert!(r.state.is_drift() && MachineState::Stopped.is_drift());
        assert!(!MachineState::Running.is_drift() && !MachineState::Unknown.is_drift());
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"state": "missing"})
        );
        assert!(serde_json::from_value::<MachineReport>(json!({"state": "gone"})).is_err());
    }
}
