//! What the engine tells about: jobs that started or ended (sent after their commit) and
//! tenants' worker counts that moved between provisioners.

/// What happened to a job; sent on [`Engine::events`](crate::Engine::events) after the change
/// is committed. Subscribers (callbacks, live views) must not block: a lagging subscriber loses
/// notices, never the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEventKind {
    /// The job was committed and has begun.
    Start,
    /// The job completed: every task succeeded.
    Success,
    /// The job failed: a task failed for good, the job was aborted, or the cluster could not be
    /// laid out.
    Failure,
}

/// A job notice: which job of which cluster, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    /// What happened.
    pub kind: JobEventKind,
    /// The tenant of the job (its id).
    pub tenant_id: String,
    /// The cluster the job operates on.
    pub cluster_id: u64,
    /// The job's id.
    pub job_id: String,
}

/// A tenant's worker count on a provisioner changed (possibly to 0).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moved {
    /// The provisioner whose workers of the tenant changed.
    pub provisioner_id: String,
    /// The tenant whose worker count there changed (its id).
    pub tenant_id: String,
}
