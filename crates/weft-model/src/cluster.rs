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
    /// A job is running on the cluster: every operation sets this while it runs.
    Pending,
    /// The latest job, other than a delete, succeeded: the cluster is ready for use.
    Active,
    /// A create or a delete failed (or a create was aborted): the cluster may be partly built or
    /// partly deleted.
    Incomplete,
    /// An operation other than create and delete failed: the nodes may not all be as the cluster
    /// says.
    Inconsistent,
    /// Deleted, or never built because no layout could be found; a terminated cluster counts
    /// against no quota.
    Terminated,
}

impl ClusterStatus {
    /// The wire and stored name, lower case (`pending`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterStatus::Pending => "pending",
            ClusterStatus::Active => "active",
            ClusterStatus::Incomplete => "incomplete",
            ClusterStatus::Inconsistent => "inconsistent",
            ClusterStatus::Terminated => "terminated",
        }
    }

    /// The status named `s`, in any case (as `?status=` filters are matched); `None` for an
    /// unknown name.
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
    /// The job exists but its tasks are not queued yet.
    NotSubmitted,
    /// Its tasks are queued or running.
    Running,
    /// Every task completed.
    Complete,
    /// A task failed for good, or the job was aborted; the job's message says which.
    Failed,
    /// Paused by a user, or before a rollout's next batch after a failed health gate: no new task
    /// is handed out until the job is resumed.
    Paused,
}

impl JobStatus {
    /// The wire and stored name, snake case (`not_submitted`).
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

    /// The status whose [`JobStatus::as_str`] is exactly `s`; `None` otherwise.
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
    /// The cluster's name (required): 1 to 255 of `[A-Za-z0-9_.-]`. It also starts the nodes'
    /// hostnames.
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
    /// Free text shown with the cluster.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub description: Option<String>,
    /// `clusterTemplate`: the name of the template to build from (required; 404 when the tenant
    /// has no such template).
    #[serde(
        rename = "clusterTemplate",
        default,
        deserialize_with = "lenient::string"
    )]
    #[cfg_attr(feature = "openapi", schema(required = true, min_length = 1))]
    pub cluster_template: String,
    /// `numMachines`: how many nodes; required, above 0, and within both the template's
    /// `constraints.size` and the server's `max_cluster_size`. Read as given, so that a missing or
    /// negative count can be refused with its own message.
    #[serde(rename = "numMachines", default, deserialize_with = "lenient::opt_i64")]
    #[cfg_attr(feature = "openapi", schema(required = true, minimum = 1, maximum = 10000, value_type = i64))]
    pub num_machines: Option<i64>,
    /// The provider to take machines from (its name); absent: the template's default provider.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub provider: Option<String>,
    /// One hardware type for every node; absent: the template's default, else the solver picks
    /// one per node among those the template allows.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub hardwaretype: Option<String>,
    /// One image type for every node; absent: the template's default, else the solver picks one
    /// per node among those the template allows.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub imagetype: Option<String>,
    /// The names of the services to place; absent: the template's default services.
    #[serde(default)]
    pub services: Option<Vec<String>>,
    /// -1 (or absent): the template's initial lease; 0: forever (only if the template allows).
    #[serde(
        rename = "initialLeaseDuration",
        default,
        deserialize_with = "lenient::opt_i64"
    )]
    pub initial_lease_duration: Option<i64>,
    /// `dnsSuffix`: the domain the nodes' hostnames end in; absent: the template's, else `local`.
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
    /// `providerFields`: the provider type's user fields for this cluster (credentials and the
    /// like), and admin fields the type lets users override. Sensitive ones go to the credential
    /// store and are never shown; the others join the cluster's copy of the provider.
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
    /// The job's action, lower case (`cluster_create`, `solve_layout`, ...).
    pub action: String,
    /// The job's status.
    pub actionstatus: JobStatus,
    /// How many tasks the job has (the planner's gates not counted).
    pub stepstotal: u64,
    /// How many of them have completed; never more than `stepstotal`.
    pub stepscompleted: u64,
}

/// `{"name":..,"version":..}` (and `description` for providers) in cluster summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EntityRef {
    /// The provider's or template's name.
    pub name: String,
    /// The provider's description; left out for templates and when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The version of the provider or template the cluster was made with.
    pub version: u64,
}

/// An element of `GET /v2/clusters`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterSummary {
    /// The cluster's id: 8 digits, zero-padded (`00000079`).
    pub id: String,
    /// The cluster's name, as its create request gave it.
    pub name: String,
    /// The cluster's description, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `ownerId`: the user who created the cluster; only it and the tenant's admins see it.
    #[serde(rename = "ownerId")]
    pub owner_id: String,
    /// `createTime`: when the cluster was created, in milliseconds since the epoch.
    #[serde(rename = "createTime")]
    pub create_time: i64,
    /// `expireTime`: when the cluster's lease ends, in milliseconds since the epoch; 0 when it
    /// never does.
    #[serde(rename = "expireTime")]
    pub expire_time: i64,
    /// `numNodes`: how many nodes the cluster has.
    #[serde(rename = "numNodes")]
    pub num_nodes: u64,
    /// The cluster's status.
    pub status: ClusterStatus,
    /// The provider the cluster's machines come from: name, description and version.
    pub provider: EntityRef,
    /// `clusterTemplate`: the template the cluster was made from: name and version.
    #[serde(rename = "clusterTemplate")]
    pub cluster_template: EntityRef,
    /// The names of the services on the cluster.
    pub services: Vec<String>,
    /// The latest job's progress; absent when the cluster has no job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// weft extension: since when the cluster is idle by its template's `idle` policy (the time
    /// of its latest change), when it is.
    #[serde(rename = "idleSince", default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<i64>,
}

/// `{"userId":..,"tenantId":<internal tenant id>}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Account {
    /// `userId`: the user who owns the cluster (who created it).
    #[serde(rename = "userId")]
    pub user_id: String,
    /// `tenantId`: the internal id of the cluster's tenant, not its name.
    #[serde(rename = "tenantId")]
    pub tenant_id: String,
}

/// A node's properties (`properties` in a node, and the values of `nodes` in a task).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeProperties {
    /// The node's addresses by type (`access_v4`: where it is reached; `bind_v4`: what its
    /// services bind to), as its provider reported them; empty until then.
    #[serde(default)]
    pub ipaddresses: BTreeMap<String, String>,
    /// The node's hostname: `<cluster name>-<cluster id>-<nodenum>.<dns suffix>` as weft
    /// suggests it, or the one its provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The node's number in its cluster: 1000 for the first, and new nodes numbered after the
    /// highest.
    #[serde(deserialize_with = "lenient::json_u64")]
    pub nodenum: u64,
    /// The node's hardware type (its name).
    pub hardwaretype: String,
    /// The node's image type (its name).
    pub imagetype: String,
    /// The provider's flavor for the node's hardware type (its `providermap` entry); absent when
    /// there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// The provider's image for the node's image type (its `providermap` entry); absent when there
    /// is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The user automators log in as: the image type's `sshuser`, else `root`.
    pub sshuser: String,
    /// The names of the services on the node.
    #[serde(default)]
    pub services: Vec<String>,
    /// The automator types the node's services use (their actions' `type`s): what BOOTSTRAP
    /// prepares the machine for.
    #[serde(default)]
    pub automators: Vec<String>,
}

/// `in_progress`, `complete`, `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeActionStatus {
    /// A worker has taken the attempt and not finished it yet.
    InProgress,
    /// The attempt succeeded.
    Complete,
    /// The attempt failed; a retry is an entry of its own.
    Failed,
}

/// One entry of a node's action history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeAction {
    /// `taskId`: the task this entry is an attempt of (`<jobId>-<NNN>`).
    #[serde(rename = "taskId")]
    pub task_id: String,
    /// The service the task acts on; empty for node-level tasks (CREATE, CONFIRM, BOOTSTRAP,
    /// DELETE, STATUS).
    pub service: String,
    /// Upper-case action name (`CREATE`).
    pub action: String,
    /// `submitTime`: when a worker took the attempt, in milliseconds since the epoch.
    #[serde(rename = "submitTime", deserialize_with = "lenient::json_i64")]
    pub submit_time: i64,
    /// `statusTime`: when the attempt's status last changed (its end, once it has ended), in
    /// milliseconds since the epoch.
    #[serde(rename = "statusTime", deserialize_with = "lenient::json_i64")]
    pub status_time: i64,
    /// How the attempt stands.
    pub status: NodeActionStatus,
    /// The attempt's standard output as its worker sent it: the last 2048 characters, after
    /// `[snipped]`, when it was longer. Absent when none was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The attempt's standard error, kept as `stdout` is.
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
    /// The node's id, a random UUID.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub id: String,
    /// `clusterId`: the id of the node's cluster (8 digits).
    #[serde(rename = "clusterId")]
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9]{1,19}$"))]
    pub cluster_id: String,
    /// The full definitions of the services on the node, as the catalog held them.
    pub services: Vec<Service>,
    /// The node's properties; tasks see them in `config.nodes`.
    pub properties: NodeProperties,
    /// The node's action history, oldest first: one entry per attempt of each of its tasks, the
    /// newest 200 kept.
    #[serde(default)]
    pub actions: Vec<NodeAction>,
    /// `provisionerResults`: what the node's finished tasks returned in `result`, merged by
    /// top-level key and passed on to later tasks. Secrets in it (`ssh-auth`'s `key` and
    /// `password`) are masked.
    #[serde(rename = "provisionerResults", default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provisioner_results: Map<String, Value>,
    /// The node's own links (`{label, url}`), as stored; nodes weft makes have none (a cluster's
    /// `links` carry its template's).
    #[serde(default)]
    pub links: Vec<Link>,
}

/// A template link as a cluster shows it: `url` expanded as Coopr expands it (a macro over a
/// service on several nodes joins their values with commas, which is no URL), and weft's `urls`:
/// one URL per node of that service, in node order (absent when the link names no such service).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterLink {
    /// The link's label, as the template gives it.
    #[serde(default)]
    pub label: String,
    /// The URL with its macros expanded as Coopr expanded them (the values of several nodes joined
    /// with commas).
    #[serde(default)]
    pub url: String,
    /// One expanded URL per node of the service the link's macro names, in node order; left out
    /// when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

/// `GET /v2/clusters/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterDetails {
    /// The cluster's id: 8 digits, zero-padded (`00000079`).
    pub id: String,
    /// The cluster's name, as its create request gave it.
    pub name: String,
    /// The cluster's description, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Who owns the cluster, and in which tenant.
    pub account: Account,
    /// `createTime`: when the cluster was created, in milliseconds since the epoch.
    #[serde(rename = "createTime")]
    pub create_time: i64,
    /// `expireTime`: when the cluster's lease ends, in milliseconds since the epoch; 0 when it
    /// never does.
    #[serde(rename = "expireTime")]
    pub expire_time: i64,
    /// The cluster's copy of its provider, with the request's non-sensitive provider fields merged
    /// into `provisioner`; sensitive fields are never in it.
    pub provider: Provider,
    /// `clusterTemplate`: a full copy of the template as it was when the cluster was created or
    /// last synced to it.
    #[serde(rename = "clusterTemplate")]
    pub cluster_template: ClusterTemplate,
    /// The cluster's nodes, each with its action history: all of them, or the page asked for with
    /// `?offset=&limit=`.
    pub nodes: Vec<Node>,
    /// The names of the services on the cluster.
    pub services: Vec<String>,
    /// `latestJobId`: the id of the cluster's latest job (`00000079-002`).
    #[serde(
        rename = "latestJobId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub latest_job_id: Option<String>,
    /// The cluster's status.
    pub status: ClusterStatus,
    /// The cluster's config, passed to provisioners unchanged: the create request's `config` (else
    /// the template's default), as the latest reconfigure left it.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: Map<String, Value>,
    /// The template's links, their macros expanded against the cluster's nodes.
    #[serde(default)]
    pub links: Vec<ClusterLink>,
    /// The latest job's progress; absent when the cluster has no job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The cluster's status message, such as `Aborted by user.` or why a rollout stopped; absent
    /// when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// weft extension: why a running job's tasks cannot be taken now (as on the status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// weft extension: since when the cluster is idle by its template's `idle` policy, when it
    /// is.
    #[serde(rename = "idleSince", default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<i64>,
}

/// `GET /v2/clusters/{id}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterStatusView {
    /// The cluster's id (8 digits).
    pub clusterid: String,
    /// The cluster's status.
    pub status: ClusterStatus,
    /// The latest job's action, lower case (`cluster_create`).
    pub action: String,
    /// The latest job's status.
    pub actionstatus: JobStatus,
    /// How many tasks the latest job has.
    pub stepstotal: u64,
    /// How many of them have completed.
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
    /// The task's id (`<jobId>-<NNN>`).
    pub id: String,
    /// `taskName`: the task's action, upper case (`CREATE`, `INSTALL`).
    #[serde(rename = "taskName")]
    pub task_name: String,
    /// `nodeId`: the node the task runs on.
    #[serde(rename = "nodeId")]
    pub node_id: String,
    /// The service the task acts on; `""` for node-level tasks.
    pub service: String,
}

/// `GET /v2/clusters/{id}/plans/{jobId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PlanView {
    /// The job's id (`<clusterId>-<NNN>`).
    pub id: String,
    /// `clusterId`: the id of the job's cluster.
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// Upper-case cluster action (`CLUSTER_CREATE`).
    pub action: String,
    /// `currentStage`: the index of the first stage with a task not yet complete (the number of
    /// stages once every task is).
    #[serde(rename = "currentStage")]
    pub current_stage: u64,
    /// The job's tasks in stages, in order; empty for SOLVE_LAYOUT. weft runs each task once its
    /// dependencies are done, so a task may start before the stages ahead of it end.
    pub stages: Vec<Vec<PlanTask>>,
    /// weft extension: a rolling change's policy and what became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<crate::RolloutReport>>,
    /// weft extension, in dry runs: the cluster's cost per hour and per day before and after the
    /// operation (and over its lease), when its provider has prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::CostEstimate>,
}

/// `POST /v2/tasks/take`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TakeTaskRequest {
    /// `workerId`: the worker asking for a task (required).
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    /// `provisionerId`: the worker's provisioner (required); a 403 when it is not registered.
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    /// `tenantId`: the internal id of the tenant the worker serves (required).
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
    /// `workerId`: the worker asking (required).
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    /// `provisionerId`: the worker's provisioner (required); a 403 when it is not registered.
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    /// `tenantId`: the internal id of the cluster's tenant (required).
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
    /// The ids of the nodes that left the cluster since `since`; empty when `full`.
    #[serde(default)]
    pub removed: Vec<String>,
}

/// `POST /v2/tasks/finish`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FinishTaskRequest {
    /// `workerId`: the worker that took the task (required); a 417 when it does not hold the task.
    #[serde(rename = "workerId", default, deserialize_with = "lenient::opt_string")]
    pub worker_id: Option<String>,
    /// `provisionerId`: the worker's provisioner (required); a 403 when it is not registered.
    #[serde(
        rename = "provisionerId",
        default,
        deserialize_with = "lenient::opt_string"
    )]
    pub provisioner_id: Option<String>,
    /// `tenantId`: the internal id of the task's tenant (required).
    #[serde(rename = "tenantId", default, deserialize_with = "lenient::opt_string")]
    pub tenant_id: Option<String>,
    /// `taskId`: the task that ended, as its take answered it.
    #[serde(rename = "taskId", default, deserialize_with = "lenient::opt_string")]
    pub task_id: Option<String>,
    /// 0 is success; the Ruby provisioner sends it as a string.
    #[serde(default, deserialize_with = "lenient::opt_i64")]
    pub status: Option<i64>,
    /// The task's standard output; its last 2048 characters are kept.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub stdout: Option<String>,
    /// The task's standard error; its last 2048 characters are kept.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub stderr: Option<String>,
    /// The node's hostname as the provider set it; on success it replaces the node's.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub hostname: Option<String>,
    /// The node's addresses by type (`access_v4`, `bind_v4`); on success they replace the node's
    /// addresses of those types.
    #[serde(default)]
    pub ipaddresses: Option<BTreeMap<String, String>>,
    /// What the task found out, merged by top-level key into the node's `provisionerResults`
    /// (`ssh-auth`, the provider's id of the machine, ...); later tasks receive it in `config`.
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
