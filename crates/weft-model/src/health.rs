//! Health checks (weft's extension): what a provisioner reports for one `HEALTHCHECK` task, and
//! what `GET /v2/clusters/{id}/health` answers, a node x service grid from the latest health run.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The key of a `HEALTHCHECK` task's `result` under which a provisioner reports [`HealthReport`].
pub const HEALTH_RESULT_KEY: &str = "health";

/// What a provisioner says about one service on one node, after all its tries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HealthReport {
    /// Whether the service passed its check (the last try decided).
    pub healthy: bool,
    /// How many tries ran (the last one decided).
    #[serde(default)]
    pub tries: u64,
    /// Why the last try failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The state of one service on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// The last check passed.
    Healthy,
    /// The last check failed on every try.
    Unhealthy,
    /// Not checked yet, or the check did not finish (the health run is still going, or ended
    /// before it reached this one).
    Unknown,
    /// The service declares no `healthcheck` action.
    None,
}

impl HealthState {
    /// The wire name (`healthy`, `unhealthy`, `unknown`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Unhealthy => "unhealthy",
            HealthState::Unknown => "unknown",
            HealthState::None => "none",
        }
    }
}

/// One cell of the grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ServiceHealth {
    /// The service's name.
    pub service: String,
    /// The service's state on this node.
    pub state: HealthState,
    /// How many tries ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tries: Option<u64>,
    /// When the check finished (milliseconds since the epoch).
    #[serde(rename = "checkedAt", default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<i64>,
    /// The end of the last try's output (stdout, then stderr), and why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// One row of the grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeHealth {
    /// The node's id.
    pub id: String,
    /// The node's hostname (empty when it has none).
    #[serde(default)]
    pub hostname: String,
    /// The node's number in its cluster (from 1000); rows are in this order.
    pub nodenum: u64,
    /// One cell per service on the node.
    pub services: Vec<ServiceHealth>,
}

/// `GET /v2/clusters/{id}/health`: the latest health run of a cluster as a node x service grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterHealth {
    /// `clusterId`: the cluster's id (8 digits).
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// The health run's job, if the cluster ever had one.
    #[serde(rename = "jobId", default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// That job's status (`running`, `complete`, `failed`...); empty when there was no run.
    #[serde(rename = "jobStatus", default)]
    pub job_status: String,
    /// Every checked service is healthy (false while any is unhealthy or unknown).
    pub healthy: bool,
    /// One row per node, by `nodenum`.
    pub nodes: Vec<NodeHealth>,
}

impl ClusterHealth {
    /// Whether the run has ended (it is neither running nor paused).
    pub fn finished(&self) -> bool {
        !crate::JobStatus::parse(&self.job_status).is_some_and(crate::JobStatus::is_underway)
    }

    /// Every cell whose state is `state`.
    pub fn cells(&self, state: HealthState) -> impl Iterator<Item = (&NodeHealth, &ServiceHealth)> {
        self.nodes.iter().flat_map(move |n| {
            n.services
                .iter()
                .filter(move |s| s.state == state)
                .map(move |s| (n, s))
        })
    }
}

/// `POST /v2/clusters/{id}/health`: the health run that was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HealthRun {
    /// `clusterId`: the cluster's id (8 digits).
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// `jobId`: the health job, whose result `GET /v2/clusters/{id}/health` shows.
    #[serde(rename = "jobId")]
    pub job_id: String,
    /// How many checks (service x node) it runs.
    pub checks: u64,
}
