//! The public event stream's backlog: what changed in each tenant, numbered in commit order.
//!
//! Events are written by database triggers (migration 13) in the very commit that changes a
//! cluster's or job's status, a task's state, a cluster's nodes or the audit trail, so no commit
//! path can forget one and none is written for a change that rolled back. Each tenant's events
//! are numbered 1, 2, 3, ... in the order their commits became visible: SQLite numbers them as
//! they are written (one writer at a time); on PostgreSQL, where commits of several servers
//! interleave, [`Store::sequence_events`](crate::Store::sequence_events) numbers what has
//! committed since its last pass, so a reader that has seen event n never finds a smaller number
//! appear later. Events leave by retention only, which always keeps each tenant's newest.

pub use weft_model::event::{Event, EventKind};

/// Which events a read wants: those of `tenant_id` numbered after `after`, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// The tenant whose events are read (its id).
    pub tenant_id: String,
    /// Only events numbered above this (0: from the oldest kept).
    pub after: u64,
    /// Only this cluster's events.
    pub cluster_id: Option<u64>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<EventKind>,
    /// Only events of clusters this user owns, and no audit records (a tenant's plain users).
    pub owner: Option<String>,
    /// The most events to return.
    pub limit: u64,
}

/// The numbers a tenant's backlog holds: the oldest kept and the newest (0 and 0 if none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventBounds {
    /// The number of the oldest event kept.
    pub oldest: u64,
    /// The number of the newest event.
    pub newest: u64,
}
