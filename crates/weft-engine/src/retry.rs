//! Re-running a step that lost a race with another one.

use std::future::Future;

use weft_store::StoreError;

use crate::error::{EngineError, EngineResult};

/// Runs a read-decide-commit step again while it loses races (`StoreError::Stale`), a bounded number
/// of times.
pub async fn retry_stale<T, F, Fut>(mut step: F) -> EngineResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = EngineResult<T>>,
{
    let mut last = None;
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for attempt in 0u32.. {
        match step().await {
            Err(EngineError::Stale(what)) => {
                last = Some(what);
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
