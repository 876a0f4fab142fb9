//! The public event stream's records (`GET /v2/events`): what changed in a tenant, numbered in
//! the order the store committed it. How they are written and numbered is weft-store's `events`.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::audit::AuditEntry;

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A cluster was created or its status changed.
    Cluster,
    /// A job was created or its status changed.
    Job,
    /// A task started (`in_progress`) or ended (`complete`, `failed`, `dropped`); becoming ready
    /// (`queued`) is no event, and gates (the planner's barriers) are not reported.
    Task,
    /// A node was added to or removed from a cluster.
    Node,
    /// An audit record was written.
    Audit,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 5] = [
        EventKind::Cluster,
        EventKind::Job,
        EventKind::Task,
        EventKind::Node,
        EventKind::Audit,
    ];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Cluster => "cluster",
            EventKind::Job => "job",
            EventKind::Task => "task",
            EventKind::Node => "node",
            EventKind::Audit => "audit",
        }
    }

    /// The kind named `s`, if any.
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One event. Fields that do not apply to its kind are left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The event's number in its tenant: each is greater than the one before, in commit order.
    /// A client resumes after it with `Last-Event-ID` or `?since=`.
    pub id: u64,
    /// Milliseconds since the epoch, when the change was written.
    pub time: i64,
    /// What the event is about; it says which of the fields below are set.
    pub kind: EventKind,
    /// The cluster the change belongs to (every kind but `audit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The cluster's name (`cluster` events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The job (`job` and `task` events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The task (`task` events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The node (`task` and `node` events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The service a task acts on (`task` events; empty for node-wide tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The job's operation (`CLUSTER_CREATE`, ...) or the task's action (`INSTALL`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The status after the change: a cluster's or job's status, a task's state, `added` or
    /// `removed` for a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The status before the change (absent when the thing is new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// The audit record (`audit` events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditEntry>,
}
