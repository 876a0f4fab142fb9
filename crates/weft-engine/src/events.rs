//! What the engine tells about: jobs that started or ended (sent after their commit) and
//! tenants' worker counts that moved between provisioners.

/// What happened to a job; sent on [`Engine::events`](crate::Engine::events) after the change
/// is committed. Subscribers (callbacks, live views) must not block: a lagging subscriber loses
/// notices, never the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEventKind {
    Start,
    Success,
    Failure,
}

/// A job notice: which job of which cluster, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub kind: JobEventKind,
    pub tenant_id: String,
    pub cluster_id: u64,
    pub job_id: String,
}

/// A tenant's worker count on a provisioner changed (possibly to 0).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moved {
    pub provisioner_id: String,
    pub tenant_id: String,
}
