//! Clusters, nodes, jobs and tasks as the API shows them (contract §5.7 to §5.12), and the
//! requests that create and change clusters or that provisioner workers send.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::{lenient, ClusterTemplate, Link, Provider, Service};

/// `pending`, `active`, `incomplete`, `inconsistent`, `terminated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ClusterStatus {
    Pending,
    Active,
    Incomplete,
    Inconsistent,
    Terminated,
}

impl ClusterStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterStatus::Pending => "pending",
            ClusterStatus::Active => "active",
            ClusterStatus::Incomplete => "incomplete",
            ClusterStatus::Inconsistent => "inconsistent",
            ClusterStatus::Terminated => "terminated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "pending" => Some(ClusterStatus::Pending),
            "active" => Some(ClusterStatus::Active),
            "incomplete" => Some(ClusterStatus::Incomplete),
            "inconsistent" => Some(ClusterStatus::Inconsistent),
            "terminated" => Some(ClusterStatus::Terminated),
            _ => None,
        }
    }
}

/// A job's status (`actionstatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    NotSubmitted,
    Running,
    Complete,
    Failed,
    Paused,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::NotSubmitted => "not_submitted",
            JobStatus::Running => "running",
            JobStatus::Complete => "complete",
            JobStatus::Failed => "failed",
            JobStatus::Paused => "paused",
        }
    }

    /// Whether a job in this status still runs or may resume: running or paused.
    pub fn is_underway(self) -> bool {
        match self {
            JobStatus::Running | JobStatus::Paused => true,
            JobStatus::NotSubmitted | JobStatus::Complete | JobStatus::Failed => false,
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            JobStatus::NotSubmitted,
            JobStatus::Running,
            JobStatus::Complete,
            JobStatus::Failed,
            JobStatus::Paused,
        ]
        .into_iter()
        .find(|j| j.as_str() == s)
    }
}

/// `POST /v2/clusters`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterCreateRequest {
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub description: Option<String>,
    #[serde(
        rename = "clusterTemplate",
        default,
        deserialize_with = "lenient::string"
    )]
    #[cfg_attr(feature = "openapi", schema(required = true, min_length = 1))]
    pub cluster_template: String,
    #[serde(rename = "numMachines", default, deserialize_with = "lenient::opt_i64")]
    #[cfg_attr(feature = "openapi", schema(required = true, minimum = 1, maximum = 10000, value_type = i64))]
    pub num_machines: Option<i64>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub provider: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub hardwaretype: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub imagetype: Option<String>,
    #[serde(default)]
    pub services: Option<Vec<String>>,
    /// -1 (or absent): the template's initial lease; 0: forever (only if the template allows).
    #[serde(
        rename = "initialLeaseDuration",
        default,
        deserialize_with = "lenient::opt_i64"
    )]
    pub initial_lease_duration: Option<i64>,
    #[serde(rename = "dnsSuffix", default, deserialize_with = "lenient::opt_text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            max_length = 192,
            pattern = r"^\.?(?=.{1,191}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
        )
    )]
    pub dns_suffix: Option<String>,
    /// Replaces the template's default config when given.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub config: Option<Map<String, Value>>,
    #[serde(
        rename = "providerFields",
        default,
        deserialize_with = "lenient::object"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provider_fields: Map<String, Value>,
    /// weft: delete the cluster automatically if its create fails (default: keep it, incomplete,
    /// with the failing task's output, as Coopr did).
    #[serde(
        rename = "rollbackOnFailure",
        default,
        deserialize_with = "lenient::bool"
    )]
    pub rollback_on_failure: bool,
}

impl ClusterCreateRequest {
    /// Every field a create request may carry (an unknown one is refused, naming the nearest).
    pub const FIELDS: [&'static str; 13] = [
        "name",
        "description",
        "clusterTemplate",
        "numMachines",
        "provider",
        "hardwaretype",
        "imagetype",
        "services",
        "initialLeaseDuration",
        "dnsSuffix",
        "config",
        "providerFields",
        "rollbackOnFailure",
    ];
}

/// `{"action":"cluster_create","actionstatus":"running","stepstotal":81,"stepscompleted":49}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Progress {
    pub action: String,
    pub actionstatus: JobStatus,
    pub stepstotal: u64,
    pub stepscompleted: u64,
}

/// `{"name":..,"version":..}` (and `description` for providers) in cluster summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EntityRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub version: u64,
}

/// An element of `GET /v2/clusters`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterSummary {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "ownerId")]
    pub owner_id: String,
    #[serde(rename = "createTime")]
    pub create_time: i64,
    #[serde(rename = "expireTime")]
    pub expire_time: i64,
    #[serde(rename = "numNodes")]
    pub num_nodes: u64,
    pub status: ClusterStatus,
    pub provider: EntityRef,
    #[serde(rename = "clusterTemplate")]
    pub cluster_template: EntityRef,
    pub services: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// `{"userId":..,"tenantId":<internal tenant id>}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Account {
    #[serde(rename = "userId")]
    pub user_id: String,
    #[serde(rename = "tenantId")]
    pub tenant_id: String,
}

/// A node's properties (`properties` in a node, and the values of `nodes` in a task).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeProperties {
    #[serde(default)]
    pub ipaddresses: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(deserialize_with = "lenient::json_u64")]
    pub nodenum: u64,
    pub hardwaretype: String,
    pub imagetype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub sshuser: String,
    #[serde(default)]
    pub services: Vec<String>,
    #[serde(default)]
    pub automators: Vec<String>,
}

/// `in_progress`, `complete`, `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeActionStatus {
    InProgress,
    Complete,
    Failed,
}

/// One entry of a node's action history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeAction {
    #[serde(rename = "taskId")]
    pub task_id: String,
    pub service: String,
    /// Upper-case action name (`CREATE`).
    pub action: String,
    #[serde(rename = "submitTime", deserialize_with = "lenient::json_i64")]
    pub submit_time: i64,
    #[serde(rename = "statusTime", deserialize_with = "lenient::json_i64")]
    pub status_time: i64,
    pub status: NodeActionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Which execution of its task this entry is, from 1 (weft extension; 0 when unknown).
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "lenient::json_u32"
    )]
    pub attempt: u32,
    /// How many executions the task may have before its job fails (weft extension; 0 when unknown).
    #[serde(
        rename = "maxAttempts",
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "lenient::json_u32"
    )]
    pub max_attempts: u32,
    /// How this attempt failed, when its worker classified the failure (weft extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::TaskFailure>,
    /// A DELETE that removes what a failed CREATE of the node may have made: clean-up, not a
    /// step of the plan (weft extension).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleanup: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A node as cluster details show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Node {
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub id: String,
    #[serde(rename = "clusterId")]
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9]{1,19}$"))]
    pub cluster_id: String,
    pub services: Vec<Service>,
    pub properties: NodeProperties,
    #[serde(default)]
    pub actions: Vec<NodeAction>,
    #[serde(rename = "provisionerResults", default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provisioner_results: Map<String, Value>,
    #[serde(default)]
    pub links: Vec<Link>,
}

/// A template link as a cluster shows it: `url` expanded as Coopr expands it (a macro over a
/// service on several nodes joins their values with commas, which is no URL), and weft's `urls`:
/// one URL per node of that service, in node order (absent when the link names no such service).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterLink {
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

/// `GET /v2/clusters/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterDetails {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub account: Account,
    #[serde(rename = "createTime")]
    pub create_time: i64,
    #[serde(rename = "expireTime")]
    pub expire_time: i64,
    pub provider: Provider,
    #[serde(rename = "clusterTemplate")]
    pub cluster_template: ClusterTemplate,
    pub nodes: Vec<Node>,
    pub services: Vec<String>,
    #[serde(
        rename = "latestJobId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub latest_job_id: Option<String>,
    pub status: ClusterStatus,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: Map<String, Value>,
    #[serde(default)]
    pub links: Vec<ClusterLink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// weft extension: why a running job's tasks cannot be taken now (as on the status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// `GET /v2/clusters/{id}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterStatusView {
    pub clusterid: String,
    pub status: ClusterStatus,
    pub action: String,
    pub actionstatus: JobStatus,
    pub stepstotal: u64,
    pub stepscompleted: u64,
    /// weft extension: why a running job's tasks cannot be taken now (`waiting: no provisioner
    /// offers provider type aws`); absent when nothing keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// One task in a plan's stage view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PlanTask {
    pub id: String,
    #[serde(rename = "taskName")]
    pub task_name: String,
    #[serde(rename = "nodeId")]
    pub node_id: String,
    pub service: String,
}

/// `GET /v2/clusters/{id}/plans/{jobId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PlanView {
    pub id: String,
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// Upper-case cluster action (`CLUSTER_CREATE`).
    pub action: String,
    #[serde(rename = "currentStage")]
    pub current_stage: u64,
    pub stages: Vec<Vec<PlanTask>>,
    /// weft extension: a rolling change's policy and what became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<crate::RolloutReport>>,
}

/// `POST /v2/tasks/take`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TakeTaskRequest {
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    #[serde(rename = "tenantId", default, deserialize_with = "lenient::opt_string")]
    pub tenant_id: Option<String>,
    /// What the worker can do beyond the contract; unknown names are ignored. With
    /// [`NODES_BY_REVISION`] the payload carries `nodesRevision` instead of `config.nodes`, and
    /// the worker reads the map through `POST /v2/tasks/nodes`.
    #[serde(default, deserialize_with = "capabilities")]
    pub capabilities: Vec<String>,
}

/// A list of capability names, or one name alone.
fn capabilities<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(#[serde(deserialize_with = "lenient::strings")] Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    })
}

/// The capability of a worker that caches a cluster's `nodes` map (weft's own provisioner): its
/// payloads name a revision of the map instead of carrying it.
pub const NODES_BY_REVISION: &str = "nodesByRevision";

/// Whether a worker holding the map at revision `held` may use it for a task at revision `wanted`:
/// revisions are `instance.lineage.seq`, and one of the same server instance and lineage with a
/// sequence number at least as high is at least as new.
pub fn nodes_revision_covers(held: &str, wanted: &str) -> bool {
    let split = |r: &str| {
        let (head, seq) = r.rsplit_once('.')?;
        Some((head.to_string(), seq.parse::<u64>().ok()?))
    };
    match (split(held), split(wanted)) {
        (Some((h, hs)), Some((w, ws))) => h == w && hs >= ws,
        _ => held == wanted,
    }
}

impl TakeTaskRequest {
    /// Whether the worker said it can do `capability`.
    pub fn can(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// `POST /v2/tasks/nodes`: a cluster's `nodes` map (contract §5.11's `config.nodes`) as of now,
/// whole or as the changes since a revision the worker holds.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TaskNodesRequest {
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    #[serde(rename = "tenantId", default, deserialize_with = "lenient::opt_string")]
    pub tenant_id: Option<String>,
    /// The cluster, as a task's `clusterId` names it.
    #[serde(
        rename = "clusterId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub cluster_id: Option<String>,
    /// The revision of the map the worker holds (a `revision` this route answered): the answer
    /// is then the changes since. Absent, unknown or too old: the whole map.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub since: Option<String>,
}

/// The answer of `POST /v2/tasks/nodes`, `revision` first (a worker may read it from the head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TaskNodes {
    /// The revision this answer brings the worker's map to.
    pub revision: String,
    /// True: `nodes` is the whole map (drop what was held). False: `nodes` holds the nodes added
    /// or changed since `since`, and `removed` the ids that left.
    pub full: bool,
    /// `{nodeId: properties}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub nodes: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub removed: Vec<String>,
}

/// `POST /v2/tasks/finish`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FinishTaskRequest {
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    #[serde(rename = "tenantId", default, deserialize_with = "lenient::opt_string")]
    pub tenant_id: Option<String>,
    #[serde(rename = "taskId", default, deserialize_with = "lenient::opt_string")]
    pub task_id: Option<String>,
    /// 0 is success; the Ruby provisioner sends it as a string.
    #[serde(default, deserialize_with = "lenient::opt_i64")]
    pub status: Option<i64>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub stdout: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub stderr: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub hostname: Option<String>,
    #[serde(default)]
    pub ipaddresses: Option<BTreeMap<String, String>>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<Map<String, Value>>,
    /// weft extension: how the task failed, as the worker's plugin classified it. Absent (Coopr's
    /// provisioners): retryable. Not retryable: the job fails at once, without another attempt.
    #[serde(default)]
    pub failure: Option<crate::TaskFailure>,
    /// weft extension: the worker's next task in the same request. Present, the server takes it
    /// once this finish is recorded and answers as `POST /v2/tasks/take` does (200 with the task,
    /// 204 when there is none), so that a worker makes one request per task instead of two.
    #[serde(default)]
    pub next: Option<TakeNext>,
}

/// What a finish that takes the worker's next task asks of that take.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TakeNext {
    /// As a take's `capabilities`.
    #[serde(default, deserialize_with = "capabilities")]
    pub capabilities: Vec<String>,
}
