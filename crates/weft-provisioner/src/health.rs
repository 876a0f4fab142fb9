//! Health checks: a HEALTHCHECK task runs its automator's check up to `tries` times, each try
//! bounded by `timeout`, `interval` apart (`config.service.action`; weft's defaults when the
//! server sent none), all within the task's own time-out. The first try that succeeds makes the
//! service healthy; when none does, it is unhealthy. Either way the task succeeds, with
//! `result.health` ([`weft_model::HealthReport`]) and the last try's output: an unhealthy
//! service is a finding, not a failed task. A fatal error (no script, an unknown automator
//! setting) ends the tries at once.
//!
//! This module knows nothing of automators: it is handed the one try to run.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use weft_model::{HealthReport, HealthcheckSpec, HEALTH_RESULT_KEY};

use crate::task::{PluginError, PluginResult, Task, TaskOutput};

/// How a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long one try may take (`timeout`, in seconds in the task; at least 1 s).
    pub timeout: Duration,
    /// How many tries at most before the service is reported unhealthy (at least 1).
    pub tries: u64,
    /// The wait between two tries (`interval`, in seconds in the task).
    pub interval: Duration,
}

impl Settings {
    /// `config.service.action.{timeout,tries,interval}`, with weft's defaults for what is missing
    /// and at least one try.
    pub fn of(task: &Task) -> Settings {
        let action = task
            .config
            .get("service")
            .and_then(|s| s.get("action"))
            .cloned()
            .unwrap_or(Value::Null);
        let num = |k: &str, default: u64| {
            match action.get(k) {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.trim().parse().ok(),
                _ => None,
            }
            .unwrap_or(default)
        };
        Settings {
            timeout: Duration::from_secs(num("timeout", HealthcheckSpec::DEFAULT_TIMEOUT).max(1)),
            tries: num("tries", HealthcheckSpec::DEFAULT_TRIES).max(1),
            interval: Duration::from_secs(num("interval", HealthcheckSpec::DEFAULT_INTERVAL)),
        }
    }
}

/// Runs the check `try_once` as [`Settings::of`] the task says, and reports what it found.
pub async fn check<F, Fut>(task: &Task, mut try_once: F) -> PluginResult
where
    F: FnMut(Task) -> Fut,
    Fut: Future<Output = PluginResult>,
{
    let s = Settings::of(task);
    let deadline = Instant::now() + task.timeout;
    let mut last: Option<PluginError> = None;
    let mut tries = 0;
    while tries < s.tries {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut one = task.clone();
        one.timeout = s.timeout.min(left);
        tries += 1;
        match try_once(one).await {
            Ok(out) => return Ok(report(true, tries, None, out.stdout, out.stderr)),
            Err(e) => {
                tracing::info!(task_id = %task.id, cluster_id = %task.cluster_id, try_ = tries,
                    error = %e.message, "health check failed");
                let fatal = !e.retryable;
                last = Some(e);
                if fatal {
                    break;
                }
            }
        }
        if tries < s.tries {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(s.interval.min(left)).await;
        }
    }
    let e = last.unwrap_or_else(|| PluginError::fatal("the task's time-out left no time to try"));
    Ok(report(false, tries, Some(e.message), e.stdout, e.stderr))
}

fn report(
    healthy: bool,
    tries: u64,
    message: Option<String>,
    stdout: String,
    stderr: String,
) -> TaskOutput {
    let r = HealthReport {
        healthy,
        tries,
        message,
    };
    let mut result = Map::new();
    result.insert(
        HEALTH_RESULT_KEY.to_string(),
        serde_json::to_value(r).unwrap_or(Value::Null),
    );
    TaskOutput {
        result,
        stdout,
        stderr,
        ..Default::default()
    }
}
