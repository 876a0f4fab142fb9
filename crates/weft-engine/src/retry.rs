//! Re-running a step that lost a race with another one.

use std::future::Future;

use weft_store::StoreError;

use crate::clock::Stopwatch;
use crate::error::{EngineError, EngineResult};

/// How long a step is re-run before it gives up (real time: a paused clock must not make it
/// retry for ever).
const GIVE_UP_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs a read-decide-commit step again while it loses races (`StoreError::Stale`), a bounded number
/// of times.
pub async fn retry_stale<T, F, Fut>(mut step: F) -> EngineResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = EngineResult<T>>,
{
    let mut last = None;
    let since = Stopwatch::start();
    for attempt in 0u32.. {
        match step().await {
            Err(EngineError::Stale(what)) => {
                last = Some(what);
                if since.elapsed() > GIVE_UP_AFTER {
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
    Err(EngineError::Internal(format!(
        "gave up after repeated conflicts: stale: {}",
        last.unwrap_or_default()
    )))
}

/// Maps store errors for engine steps: a stale change set is marked so that [`retry_stale`] re-runs
/// the step.
pub fn store_err(e: StoreError) -> EngineError {
    match e {
        StoreError::Stale(what) => EngineError::Stale(what),
        other => other.into(),
    }
}
