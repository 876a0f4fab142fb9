//! What every cloud provider shares: how a cloud's answer becomes a retryable or a fatal
//! [`PluginError`], and bounded waiting (retries with back-off that honour `Retry-After`, and
//! polling a machine until it reaches a state).
//!
//! The rule (design.md, "Cloud and configuration plugins"): throttling, over-limit and 5xx are
//! retried with back-off; auth, quota and bad parameters fail at once with the cloud's own code and
//! message. Each cloud's client maps its answers to a [`CloudError`]; this module decides the rest.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::task::PluginError;

/// A failed call to a cloud API, as the cloud said it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cloud}: {code}: {message}")]
pub struct CloudError {
    /// Which API answered (`ec2`, `nova`, `keystone`, `gce`, `triton`).
    pub cloud: &'static str,
    /// The HTTP status, or 0 when no answer came (connection refused, time-out).
    pub status: u16,
    /// The cloud's own error code (`InvalidInstanceID.NotFound`, `itemNotFound`...), or the status.
    pub code: String,
    pub message: String,
    /// How long the cloud asked us to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
    /// True when another try may pass: throttling, over-limit, 5xx, no answer.
    pub retryable: bool,
}

impl CloudError {
    /// An error classified by its HTTP status: 0 (no answer), 408, 413 and 429 with a
    /// `Retry-After`, 429 and 5xx are retryable; every other status is not.
    pub fn from_status(
        cloud: &'static str,
        status: u16,
        code: impl Into<String>,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> CloudError {
        let retryable =
            matches!(status, 0 | 408 | 429 | 500..=599) || (status == 413 && retry_after.is_some());
        CloudError {
            cloud,
            status,
            code: code.into(),
            message: message.into(),
            retry_after,
            retryable,
        }
    }

    /// A transport failure (no answer): always retryable.
    pub fn unreachable(cloud: &'static str, message: impl Into<String>) -> CloudError {
        CloudError::from_status(cloud, 0, "Unreachable", message, None)
    }

    /// Marks an error retryable or not whatever its status (a cloud code that says throttling
    /// under a 400, as EC2's `RequestLimitExceeded` does).
    pub fn retryable(mut self, retryable: bool) -> CloudError {
        self.retryable = retryable;
        self
    }
}

impl From<CloudError> for PluginError {
    fn from(e: CloudError) -> PluginError {
        let message = e.to_string();
        if e.retryable {
            PluginError::retryable(message)
        } else {
            PluginError::fatal(message)
        }
    }
}

/// Reads a `Retry-After` header given in seconds (the HTTP-date form is taken as one second).
pub fn retry_after(value: Option<&str>) -> Option<Duration> {
    let v = value?.trim();
    Some(Duration::from_secs(v.parse::<u64>().unwrap_or(1).min(300)))
}

/// A bounded exponential back-off: `first`, doubling up to `max`, until `deadline`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    deadline: Instant,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration, budget: Duration) -> Backoff {
        Backoff {
            next: first,
            max,
            deadline: Instant::now() + budget,
        }
    }

    /// Waits before the next try (at least `at_least`, as a `Retry-After` asks) and answers
    /// true, or answers false at once when the wait would pass the deadline.
    pub async fn wait(&mut self, at_least: Option<Duration>) -> bool {
        let pause = self.next.max(at_least.unwrap_or_default());
        if Instant::now() + pause > self.deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        self.next = (self.next * 2).min(self.max);
        true
    }
}

/// Runs `call` until it succeeds, fails with an error that is not retryable, or `backoff` runs
/// out (then the last error is returned, still marked retryable so the server may try the task
/// again later).
pub async fn with_retries<T, F, Fut>(mut backoff: Backoff, mut call: F) -> Result<T, CloudError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CloudError>>,
{
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retryable => {
                tracing::debug!(error = %e, "cloud call failed; retrying");
                if !backoff.wait(e.retry_after).await {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// What one poll of a machine found.
#[derive(Debug)]
pub enum Poll<T> {
    /// It is where we wanted it.
    Ready(T),
    /// Not yet; the string says where it is (for the time-out message).
    Pending(String),
}

/// Polls `check` with `backoff` until it answers [`Poll::Ready`]. A retryable error counts as a
/// pending poll; a fatal one ends the wait. When the back-off runs out the error is retryable and
/// names the last state seen.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    mut backoff: Backoff,
    mut check: F,
) -> Result<T, PluginError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Poll<T>, CloudError>>,
{
    loop {
        let (last, after) = match check().await {
            Ok(Poll::Ready(v)) => return Ok(v),
            Ok(Poll::Pending(state)) => (state, None),
            Err(e) if e.retryable => (e.to_string(), e.retry_after),
            Err(e) => return Err(e.into()),
        };
        if !backoff.wait(after).await {
            return Err(PluginError::retryable(format!(
                "{what}: gave up waiting (last seen: {last})"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let c = |s, ra| CloudError::from_status("t", s, "c", "m", ra).retryable;
        assert!(c(0, None) && c(429, None) && c(500, None) && c(503, None));
        assert!(c(413, Some(Duration::from_secs(1))));
        assert!(!c(413, None) && !c(400, None) && !c(401, None) && !c(403, None));
        assert!(!c(404, None) && !c(409, None));
    }

    #[test]
    fn retry_after_reads_seconds_and_caps_them() {
        assert_eq!(retry_after(Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(Some("99999")), Some(Duration::from_secs(300)));
        assert_eq!(retry_after(None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_a_fatal_error_and_at_the_deadline() {
        let mut calls = 0;
        let r: Result<(), _> = with_retries(
            Backoff::new(
                Duration::from_secs(1),
                Duration::from_secs(4),
                Duration::from_secs(60),
            ),
            || {
                calls += 1;
                let n = calls;
                async move {
                    Err(CloudError::from_status(
                        "t",
                        if n < 3 { 503 } else { 400 },
                        "c",
                        "m",
                        None,
                    ))
                }
            },
        )
        .await;
        assert_eq!(r.unwrap_err().status, 400);
        assert_eq!(calls, 3);

        let mut calls = 0;
        let r: Result<(), _> = with_retries(
            Backoff::new(
                Duration::from_secs(1),
                Duration::from_secs(4),
                Duration::from_secs(10),
            ),
            || {
                calls += 1;
                async { Err(CloudError::from_status("t", 503, "c", "m", None)) }
            },
        )
        .await;
        assert!(r.unwrap_err().retryable);
        assert_eq!(
            calls, 4,
            "waits 1, 2, 4 then the next 4 passes the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn polling_names_the_last_state_when_it_gives_up() {
        let e = poll_until::<(), _, _>(
            "instance i-1 running",
            Backoff::new(
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(5),
            ),
            || async { Ok(Poll::Pending("pending".into())) },
        )
        .await
        .unwrap_err();
        assert!(e.retryable);
        assert!(e.message.contains("last seen: pending"), "{e}");
    }
}
