//! Bounded waiting: retries with back-off (full jitter) that honour `Retry-After`, and polling
//! a machine until it reaches a state.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::CloudError;
use crate::task::PluginError;

/// Reads a `Retry-After` header given in seconds (the HTTP-date form is taken as one second).
pub fn retry_after(value: Option<&str>) -> Option<Duration> {
    let v = value?.trim();
    Some(Duration::from_secs(v.parse::<u64>().unwrap_or(1).min(300)))
}

/// A bounded exponential back-off with full jitter: the `n`th wait is uniformly random in
/// `[0, min(max, first * 2^n)]` (AWS Architecture Blog, "Exponential Backoff And Jitter"), so
/// that many workers throttled at the same moment do not all come back at the same moment; it
/// gives up at `deadline`.
#[derive(Debug, Clone)]
pub struct Backoff {
    ceiling: Duration,
    max: Duration,
    deadline: Instant,
}

impl Backoff {
    /// Waits up to `first`, then up to twice as long each time up to `max`, for `budget` from
    /// now.
    pub fn new(first: Duration, max: Duration, budget: Duration) -> Backoff {
        Backoff {
            ceiling: first.min(max),
            max,
            deadline: Instant::now() + budget,
        }
    }

    /// The next pause: full jitter under the current ceiling, which then doubles up to `max`.
    fn next_pause(&mut self) -> Duration {
        let pause = full_jitter(self.ceiling);
        self.ceiling = (self.ceiling * 2).min(self.max);
        pause
    }

    /// Waits before the next try (at least `at_least`, as a `Retry-After` asks) and answers
    /// true, or answers false at once when the wait would pass the deadline.
    pub async fn wait(&mut self, at_least: Option<Duration>) -> bool {
        let pause = self.next_pause().max(at_least.unwrap_or_default());
        if Instant::now() + pause > self.deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        true
    }
}

/// A duration uniformly random in `[0, ceiling]`, to the millisecond.
fn full_jitter(ceiling: Duration) -> Duration {
    use rand::Rng;
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::thread_rng().gen_range(0..=ms))
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
            return Err(PluginError::timeout(format!(
                "{what}: gave up waiting (last seen: {last})"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let start = Instant::now();
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
        assert!(
            calls >= 4,
            "waits of at most 1, 2 and 4 s all fit in 10 s: {calls} calls"
        );
        assert!(
            start.elapsed() <= Duration::from_secs(10),
            "deadline passed"
        );
    }

    #[test]
    fn every_pause_is_full_jitter_under_a_doubling_capped_ceiling() {
        let mut b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(1000),
            Duration::from_secs(3600),
        );
        let ceilings = [100, 200, 400, 800, 1000, 1000, 1000];
        for &c in &ceilings {
            let p = b.next_pause();
            assert!(p <= Duration::from_millis(c), "{p:?} over {c} ms");
        }
        let capped: Vec<Duration> = (0..200).map(|_| b.next_pause()).collect();
        assert!(
            capped.iter().all(|p| *p <= Duration::from_millis(1000)),
            "the cap holds"
        );
        assert!(
            capped.iter().any(|p| *p != capped[0]),
            "pauses vary: {capped:?}"
        );
        let mean = capped.iter().sum::<Duration>() / 200;
        assert!(
            mean > Duration::from_millis(300) && mean < Duration::from_millis(700),
            "uniform on [0, 1 s]: mean {mean:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_a_floor_under_the_jitter() {
        let mut b = Backoff::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
            Duration::from_secs(60),
        );
        let start = Instant::now();
        assert!(b.wait(Some(Duration::from_secs(5))).await);
        assert!(start.elapsed() >= Duration::from_secs(5));
        assert!(
            !b.wait(Some(Duration::from_secs(120))).await,
            "past the deadline"
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
