//! The engine's counters, kept in this process: how long finished tasks took (from take to finish,
//! per action) and how many jobs ended (per action and result). Recorded where the engine commits a
//! task's finish or a job's end; weft-server's `GET /metrics` reads them with [`snapshot`].

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};

use weft_store::TaskRow;

/// Upper bounds of the task duration buckets, in seconds.
pub const BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Task durations of one action.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Count per bucket (not cumulative); the last slot is `+Inf`.
    pub counts: [u64; BUCKETS.len() + 1],
    /// Seconds, added up.
    pub sum: f64,
}

/// Everything counted so far.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Finished tasks' durations, by action.
    pub durations: BTreeMap<String, Histogram>,
    /// Ended jobs, by (action, `success` or `failure`).
    pub jobs: BTreeMap<(String, &'static str), u64>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding the lock cannot leave the counters inconsistent: keep using them.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a finished task (call after its finish committed): `now` is the finish time, and
/// `task` the row as it was read, in progress, with the deadline `take` gave it.
pub fn task_finished(task: &TaskRow, task_timeout_ms: i64, now: i64) {
    let taken = task.lease_deadline - task_timeout_ms;
    let secs = (now - taken).max(0) as f64 / 1000.0;
    let mut r = registry();
    let h = r.durations.entry(task.action.clone()).or_default();
    let slot = BUCKETS
        .iter()
        .position(|b| secs <= *b)
        .unwrap_or(BUCKETS.len());
    h.counts[slot] += 1;
    h.sum += secs;
}

/// Records a job that ended (call after its end committed).
pub fn job_ended(action: &str, success: bool) {
    let result = if success { "success" } else { "failure" };
    *registry()
        .jobs
        .entry((action.to_string(), result))
        .or_default() += 1;
}

/// A copy of the counters as they are now.
pub fn snapshot() -> Registry {
    registry().clone()
}
