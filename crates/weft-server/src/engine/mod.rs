//! The engine: turns cluster operations into jobs of node tasks and runs them against provisioners.
//!
//! Every step reads rows from the store, decides the new states in memory, and commits all of its
//! changes in one [`ChangeSet`](weft_store::ChangeSet) guarded by row revisions, so a crash between
//! steps loses nothing and a step that raced another one is simply re-run ([`retry_stale`]).
//!
//! A job's DAG (from the planner) is stored as task rows: each holds the ids of its successors and
//! how many predecessors are not done yet. Gates (the planner's no-work join points) are task rows
//! with action `GATE` that complete the moment their predecessors do; every job ends in one gate,
//! `<jobId>-end`, whose completion completes the job. A task whose predecessors are done goes into
//! its tenant's queue (state `queued`); `take` leases it to a worker; `finish` records the result
//! and releases its successors.
//!
//! Modules: `body` (what the engine keeps in each row's JSON), `cache` (what payloads derive from
//! a cluster, per process), `create` (new clusters and jobs),
//! `work` (take and finish), `view` (rows as the API shows them), `delete` (a cluster's delete job, for
//! the route and the janitor; a running job is aborted first), `control` (pause, resume, abort), `janitor` (expired leases, silent provisioners; one leader per
//! database), `callbacks` (job notices to a URL or a command).

pub mod body;
pub mod cache;
pub mod callbacks;
pub mod control;
pub mod create;
pub mod delete;
pub mod janitor;
pub mod ops;
pub mod view;
pub mod work;

use std::future::Future;

use weft_store::StoreError;

use crate::error::{ApiError, ApiResult};

/// What happened to a job; sent on [`AppState::events`](crate::state::AppState) after the change
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

/// Sends a notice; nobody listening is fine.
pub fn notify(
    st: &crate::state::AppState,
    kind: JobEventKind,
    tenant_id: &str,
    cluster_id: u64,
    job_id: &str,
) {
    let _ = st.events.send(JobEvent {
        kind,
        tenant_id: tenant_id.into(),
        cluster_id,
        job_id: job_id.into(),
    });
}

/// The action of gate rows.
pub use weft_store::GATE;

/// Coopr's cluster id text: 8 digits, zero-padded.
pub fn cluster_id_text(id: u64) -> String {
    format!("{id:08}")
}

/// Parses a cluster id as Coopr did (`"1"` and `"00000001"` are the same cluster).
pub fn parse_cluster_id(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// Runs a read-decide-commit step again while it loses races (`StoreError::Stale`), a bounded number
/// of times.
pub async fn retry_stale<T, F, Fut>(mut step: F) -> ApiResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ApiResult<T>>,
{
    let mut last = None;
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for attempt in 0u32.. {
        match step().await {
            Err(ApiError::Internal(m)) if m.starts_with(STALE_PREFIX) => {
                last = Some(m);
                if std::time::Instant::now() > give_up {
                    break;
                }
                if attempt > 2 {
                    // Back off with jitter so that racing steps stop colliding.
                    use rand::Rng;
                    let cap = 1u64 << attempt.min(6);
                    let ms = rand::thread_rng().gen_range(1..=cap);
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
            }
            other => return other,
        }
    }
    Err(ApiError::Internal(format!(
        "gave up after repeated conflicts: {}",
        last.unwrap_or_default()
    )))
}

const STALE_PREFIX: &str = "stale:";

/// Maps store errors for engine steps: a stale change set is marked so that [`retry_stale`] re-runs
/// the step.
pub fn store_err(e: StoreError) -> ApiError {
    match e {
        StoreError::Stale(what) => ApiError::Internal(format!("{STALE_PREFIX} {what}")),
        other => other.into(),
    }
}
