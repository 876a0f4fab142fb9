//! The engine's rows: clusters, nodes, jobs and tasks as stored, and the change sets that write them.
//!
//! The engine keeps its logic outside the store: it reads rows, decides their new states, and hands
//! every change of one step to [`Store::commit`](crate::Store::commit) as one [`ChangeSet`], which
//! is applied in one transaction, and only if each of its [`Expect`]ations about row revisions
//! still holds. Every row carries a revision (`rev`) that the store bumps on each write, so
//! compare-and-swap on `rev` is how two engines (or an engine and the janitor) avoid overwriting
//! each other.
//!
//! The few columns the store queries on (status, owner, times, task state, lease) are fields of the
//! rows; everything else the engine keeps lives in each row's JSON `body`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_model::{ClusterStatus, JobStatus};

use crate::StoreError;

/// A cluster as stored. `id` comes from the global `clusters` counter ([`Store::next_id`]).
///
/// [`Store::next_id`]: crate::Store::next_id
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterRow {
    /// The tenant the cluster belongs to (its id).
    pub tenant_id: String,
    /// The cluster's id, unique across tenants.
    pub id: u64,
    /// The user who created the cluster; a plain user sees only the clusters they own.
    pub owner: String,
    /// The name the user gave the cluster (not unique).
    pub name: String,
    /// Stored as Coopr's lowercase status name (`pending`, `active`, `incomplete`,
    /// `inconsistent`, `terminated`); an unknown name reads as [`StoreError::Corrupt`]. The
    /// store reads it in [`expired_clusters`] and [`count_clusters`].
    ///
    /// [`expired_clusters`]: crate::Store::expired_clusters
    /// [`count_clusters`]: crate::Store::count_clusters
    pub status: ClusterStatus,
    /// Milliseconds since the epoch.
    pub create_time: i64,
    /// Milliseconds since the epoch; 0 means never.
    pub expire_time: i64,
    /// The id of the cluster's most recent job; `None` until its first job is stored.
    pub latest_job: Option<String>,
    /// The revision: 1 after the first write, +1 on each write. Ignored when writing.
    pub rev: i64,
    /// How many nodes the cluster has, kept by the store in the commit that adds or removes
    /// one. Ignored when writing.
    #[serde(default)]
    pub node_count: u64,
    /// Everything else the engine keeps of the cluster, as JSON (Coopr's cluster document).
    pub body: Value,
}

/// A node of a cluster as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    /// The tenant the node belongs to (its id).
    pub tenant_id: String,
    /// The id of the cluster the node is part of.
    pub cluster_id: u64,
    /// The node's id, unique in the tenant.
    pub id: String,
    /// The node's number within its cluster (`nodenum` in Coopr's node JSON).
    pub nodenum: u64,
    /// Ignored when writing.
    pub rev: i64,
    /// Everything else the engine keeps of the node, as JSON (Coopr's node document).
    pub body: Value,
}

/// A job (one operation on a cluster) as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    /// The tenant the job belongs to (its id).
    pub tenant_id: String,
    /// The id of the cluster the job operates on.
    pub cluster_id: u64,
    /// The job's id, `<clusterId>-<NNN>` from the global `jobs` counter.
    pub id: String,
    /// The cluster action the job performs, in Coopr's upper-case names (`CLUSTER_CREATE`,
    /// `CLUSTER_DELETE`, `SOLVE_LAYOUT`, ...).
    pub action: String,
    /// The job's status, stored as its lowercase name (`not_submitted`, `running`, `complete`,
    /// `failed`, `paused`); an unknown name reads as [`StoreError::Corrupt`].
    pub status: JobStatus,
    /// When the job was created, in ms since the epoch.
    pub create_time: i64,
    /// Ignored when writing.
    pub rev: i64,
    /// How many of the job's tasks other than gates are complete, kept by the store in the
    /// commit that changes a task's state. Ignored when writing.
    #[serde(default)]
    pub steps_done: u64,
    /// How many tasks other than gates the job has (its body's `total`), in a column of its own
    /// so that progress is read without the body ([`Store::get_job_head`]).
    ///
    /// [`Store::get_job_head`]: crate::Store::get_job_head
    #[serde(default)]
    pub steps_total: u64,
    /// Everything else the engine keeps of the job, as JSON (its plan, counts and messages).
    pub body: Value,
}

/// Where a task is in its life. Stored as lowercase text (`in_progress` for
/// [`TaskState::InProgress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting on predecessors (`deps_remaining > 0`), or planned for a later stage.
    Pending,
    /// In its tenant's queue: [`Store::take_task`](crate::Store::take_task) hands it out.
    Queued,
    /// Taken by a worker that holds its lease until `lease_deadline`.
    InProgress,
    /// Done successfully; its successors were released.
    Complete,
    /// Failed for good: no attempt was left, or the failure was fatal.
    Failed,
    /// Its job had failed when a worker took it; never run.
    Dropped,
}

impl TaskState {
    /// Every state, in the order of a task's life.
    pub const ALL: [TaskState; 6] = [
        TaskState::Pending,
        TaskState::Queued,
        TaskState::InProgress,
        TaskState::Complete,
        TaskState::Failed,
        TaskState::Dropped,
    ];

    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Queued => "queued",
            TaskState::InProgress => "in_progress",
            TaskState::Complete => "complete",
            TaskState::Failed => "failed",
            TaskState::Dropped => "dropped",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, StoreError> {
        TaskState::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown task state {s:?}")))
    }
}

/// A cluster status as stored (its exact lowercase name); anything else is
/// [`StoreError::Corrupt`].
pub fn cluster_status(text: &str) -> Result<ClusterStatus, StoreError> {
    ClusterStatus::parse(text)
        .filter(|s| s.as_str() == text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown cluster status {text:?}")))
}

/// A job status as stored (its exact lowercase name); anything else is [`StoreError::Corrupt`].
pub fn job_status(text: &str) -> Result<JobStatus, StoreError> {
    JobStatus::parse(text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown job status {text:?}")))
}

/// A task as a job's plan shows it: its row without body, successors and lease (what a stage
/// view of 240,000 tasks reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskHead {
    /// The task's id (`<jobId>-<NNN>`, or `<jobId>-g<N>` for a gate).
    pub id: String,
    /// The node the task acts on.
    pub node_id: String,
    /// The action, in Coopr's upper-case names (`CREATE`, `INSTALL`, `START`, ...), or [`GATE`].
    pub action: String,
    /// The service the action is for; empty for node-level actions.
    pub service: String,
    /// Where the task is in its life.
    pub state: TaskState,
    /// Executions started so far.
    pub attempts: u32,
}

/// A task (one action on one node) as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    /// The tenant the task belongs to (its id).
    pub tenant_id: String,
    /// The id of the cluster of the task's job.
    pub cluster_id: u64,
    /// The id of the job the task is part of.
    pub job_id: String,
    /// The task's id: `<jobId>-<NNN>`, or `<jobId>-g<N>` for a gate.
    pub id: String,
    /// The node the task acts on.
    pub node_id: String,
    /// The action, in Coopr's upper-case names (`CREATE`, `INSTALL`, `START`, ...), or [`GATE`].
    pub action: String,
    /// The service the action is for; empty for node-level actions (create, confirm, delete...).
    pub service: String,
    /// Where the task is in its life; the queue is the tasks in [`TaskState::Queued`].
    pub state: TaskState,
    /// Executions started so far; [`Store::take_task`](crate::Store::take_task) adds one.
    pub attempts: u32,
    /// Predecessors not complete yet.
    pub deps_remaining: u32,
    /// Ids of the tasks that wait on this one.
    pub successors: Vec<String>,
    /// Who holds the lease while in progress (`<provisionerId>.<workerId>`).
    pub lease_owner: Option<String>,
    /// Milliseconds since the epoch; meaningful while in progress.
    pub lease_deadline: i64,
    /// When it was (last) queued, milliseconds since the epoch: the queue's FIFO order.
    pub queued_at: i64,
    /// When it was last taken (milliseconds since the epoch); 0 if never.
    /// [`Store::take_task`](crate::Store::take_task) sets it.
    pub started_at: i64,
    /// Ignored when writing.
    pub rev: i64,
    /// Everything else the engine keeps of the task, as JSON (the payload a worker gets, results).
    pub body: Value,
}

/// One row written by a [`ChangeSet`]: an upsert that sets `rev` to the stored rev + 1 (1 for a
/// new row), ignoring the row's own `rev`; or a delete.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Inserts or replaces a cluster row.
    Cluster(ClusterRow),
    /// Inserts or replaces a node row (and bumps its cluster's nodes revision).
    Node(NodeRow),
    /// Deletes a node; nothing happens if it does not exist.
    DeleteNode {
        /// The tenant the node belongs to (its id).
        tenant_id: String,
        /// The node's id.
        id: String,
    },
    /// Inserts or replaces a job row.
    Job(JobRow),
    /// Inserts or replaces a task row.
    Task(TaskRow),
    /// Counts one finished predecessor for each task in `ids`, atomically (no expectation needed,
    /// so many finishes release one join point without conflicting). A task whose count reaches 0
    /// while [`TaskState::Pending`] is queued at `now`, unless `queue` is false (a paused job: it
    /// stays pending with no predecessors left); a [`GATE`] task completes instead and releases
    /// its own successors in turn. [`Store::commit_released`](crate::Store::commit_released)
    /// answers
    /// the gates without successors (a job's end) that this completed.
    Release {
        /// The tenant the tasks belong to (its id).
        tenant_id: String,
        /// The tasks that wait on the finished one (its successors).
        ids: Vec<String>,
        /// Whether a task left with no predecessors is queued (`false`: it stays pending).
        queue: bool,
        /// The queueing time (`queued_at`), in ms since the epoch.
        now: i64,
    },
    /// The audit record of the request whose change this is (see [`crate::audit::Pending`]);
    /// added by the store itself, never by the engine.
    AuditPending(crate::audit::PendingRow),
}

/// A task just taken, with what the engine checks next, read in the same statement: its job's
/// status and revision, and its cluster's [`ClusterStamp`] (`None` for a missing row).
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// The task, as taken: in progress, its lease and attempts set.
    pub task: TaskRow,
    /// Its job's status and revision; `None` if the job row is gone.
    pub job: Option<(JobStatus, i64)>,
    /// Its cluster's stamp; `None` if the cluster row is gone.
    pub cluster: Option<ClusterStamp>,
}

/// The action of gate tasks: join points of a job's DAG that have no work and complete the moment
/// their predecessors do.
pub const GATE: &str = "GATE";

/// What changes a cluster's nodes only: the cluster row's revision and its nodes' revision, which
/// every write or delete of one of its nodes bumps. A reader that derives data from the nodes can
/// cache it under `nodes_rev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterStamp {
    /// The cluster row's revision.
    pub rev: i64,
    /// The revision of the cluster's nodes: bumped by every write or delete of one of them.
    pub nodes_rev: i64,
}

/// A condition a [`ChangeSet`] is applied under: the row's stored revision is `rev`, where
/// `rev == 0` means the row must not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// A cluster row is at revision `rev` (0: it does not exist).
    ClusterRev {
        /// The tenant the cluster belongs to (its id).
        tenant_id: String,
        /// The cluster's id.
        id: u64,
        /// The revision it was read at, or 0 for none.
        rev: i64,
    },
    /// A node row is at revision `rev` (0: it does not exist).
    NodeRev {
        /// The tenant the node belongs to (its id).
        tenant_id: String,
        /// The node's id.
        id: String,
        /// The revision it was read at, or 0 for none.
        rev: i64,
    },
    /// A job row is at revision `rev` (0: it does not exist).
    JobRev {
        /// The tenant the job belongs to (its id).
        tenant_id: String,
        /// The job's id.
        id: String,
        /// The revision it was read at, or 0 for none.
        rev: i64,
    },
    /// A task row is at revision `rev` (0: it does not exist).
    TaskRev {
        /// The tenant the task belongs to (its id).
        tenant_id: String,
        /// The task's id.
        id: String,
        /// The revision it was read at, or 0 for none.
        rev: i64,
    },
    /// The tenant stays within its quotas once the change set is written: its clusters that are
    /// not `terminated`, plus `add_clusters`, at most `max_clusters`; their nodes, plus
    /// `add_nodes`, at most `max_nodes`. Counted inside the commit's own transaction, which on
    /// PostgreSQL first takes a per-tenant lock, so concurrent creates (from several servers too)
    /// cannot pass it together. A failure is [`StoreError::QuotaExceeded`](crate::StoreError).
    Quota(Quota),
}

/// The limits an [`Expect::Quota`] checks and what the change set adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The tenant whose quotas are checked (its id).
    pub tenant_id: String,
    /// The tenant's `maxClusters` as the caller read it (used when the tenant has no row).
    pub max_clusters: u64,
    /// The tenant's `maxNodes` as the caller read it (used when the tenant has no row).
    pub max_nodes: u64,
    /// Clusters the change set adds.
    pub add_clusters: u64,
    /// Nodes the change set adds.
    pub add_nodes: u64,
    /// The tenant's `maxCostPerHour` in micro-units as the caller read it (used when the tenant
    /// has no row); `None`: no budget.
    pub max_cost_micros: Option<u64>,
    /// What the change set adds to the cost per hour of the tenant's live clusters, in
    /// micro-units (summed from their bodies' `costMicrosPerHour` inside the transaction).
    pub add_cost_micros: u64,
}

impl Quota {
    /// Checks the counts read in the transaction against the tenant's limits as the transaction
    /// reads them (`limits`: maxClusters, maxNodes; this quota's own when the tenant has no
    /// row); the error names the quota, its limit and what the tenant has.
    pub fn check(
        &self,
        clusters: u64,
        nodes: u64,
        limits: Option<(u64, u64)>,
    ) -> Result<(), crate::StoreError> {
        let (max_clusters, max_nodes) = limits.unwrap_or((self.max_clusters, self.max_nodes));
        if clusters + self.add_clusters > max_clusters {
            return Err(crate::StoreError::QuotaExceeded(format!(
                "maxClusters ({max_clusters}): it has {clusters} clusters"
            )));
        }
        if nodes + self.add_nodes > max_nodes {
            return Err(crate::StoreError::QuotaExceeded(format!(
                "maxNodes ({max_nodes}): it has {nodes} nodes and asks for {} more",
                self.add_nodes
            )));
        }
        Ok(())
    }
}

impl Quota {
    /// Checks the budget: `cost` (the live clusters' cost per hour, read in the transaction)
    /// plus what the change set adds, against the tenant's `maxCostPerHour` as the transaction
    /// reads it (`limit`, decimal text; this quota's own when the tenant has no row or no text).
    pub fn check_cost(&self, cost: u64, limit: Option<&str>) -> Result<(), crate::StoreError> {
        let limit = match limit {
            Some(text) => Some(
                weft_model::cost::parse_micros("maxCostPerHour", text)
                    .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?,
            ),
            None => self.max_cost_micros,
        };
        let Some(max) = limit else { return Ok(()) };
        if cost.saturating_add(self.add_cost_micros) > max {
            use weft_model::cost::format_micros;
            return Err(crate::StoreError::QuotaExceeded(format!(
                "maxCostPerHour ({}): its live clusters cost {} per hour and this asks for {} more",
                format_micros(max),
                format_micros(cost),
                format_micros(self.add_cost_micros)
            )));
        }
        Ok(())
    }
}

impl Expect {
    /// The expectation that `row` is still at the revision it was read at.
    pub fn cluster(row: &ClusterRow) -> Expect {
        Expect::ClusterRev {
            tenant_id: row.tenant_id.clone(),
            id: row.id,
            rev: row.rev,
        }
    }

    /// The expectation that `row` is still at the revision it was read at.
    pub fn node(row: &NodeRow) -> Expect {
        Expect::NodeRev {
            tenant_id: row.tenant_id.clone(),
            id: row.id.clone(),
            rev: row.rev,
        }
    }

    /// The expectation that `row` is still at the revision it was read at.
    pub fn job(row: &JobRow) -> Expect {
        Expect::JobRev {
            tenant_id: row.tenant_id.clone(),
            id: row.id.clone(),
            rev: row.rev,
        }
    }

    /// The expectation that `row` is still at the revision it was read at.
    pub fn task(row: &TaskRow) -> Expect {
        Expect::TaskRev {
            tenant_id: row.tenant_id.clone(),
            id: row.id.clone(),
            rev: row.rev,
        }
    }
}

/// Every change of one engine step: applied in one transaction, all or nothing, and only if every
/// expectation holds. Expectations are checked before any write; writes apply in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeSet {
    /// Conditions checked, all before any write; one failing makes the commit [`StoreError::Stale`]
    /// (or `QuotaExceeded`).
    pub expect: Vec<Expect>,
    /// Rows written, in order.
    pub writes: Vec<Write>,
}

impl ChangeSet {
    /// An empty change set.
    pub fn new() -> ChangeSet {
        ChangeSet::default()
    }

    /// Adds an expectation.
    pub fn expect(&mut self, e: Expect) -> &mut ChangeSet {
        self.expect.push(e);
        self
    }

    /// Adds a write.
    pub fn write(&mut self, w: Write) -> &mut ChangeSet {
        self.writes.push(w);
        self
    }

    /// Whether the change set neither expects nor writes anything.
    pub fn is_empty(&self) -> bool {
        self.expect.is_empty() && self.writes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_states_round_trip_through_their_text() {
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse::<TaskState>().unwrap(), s);
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                Value::from(s.as_str()),
                "serde agrees with the stored text"
            );
        }
        assert_eq!(TaskState::InProgress.to_string(), "in_progress");
        assert!(matches!(
            "IN_PROGRESS".parse::<TaskState>(),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn expectations_name_the_rows_revision() {
        let task = TaskRow {
            tenant_id: "t".into(),
            cluster_id: 1,
            job_id: "j".into(),
            id: "x".into(),
            node_id: "n".into(),
            action: "create".into(),
            service: String::new(),
            state: TaskState::Queued,
            attempts: 0,
            deps_remaining: 0,
            successors: vec![],
            lease_owner: None,
            lease_deadline: 0,
            queued_at: 0,
            started_at: 0,
            rev: 7,
            body: Value::Null,
        };
        assert_eq!(
            Expect::task(&task),
            Expect::TaskRev {
                tenant_id: "t".into(),
                id: "x".into(),
                rev: 7
            }
        );
    }
}
