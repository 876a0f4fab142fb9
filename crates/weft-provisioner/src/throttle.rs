//! A request budget per cloud account, shared by every worker of a provisioner: a token bucket.
//!
//! Fifty workers creating fifty nodes each poll and call on their own; left alone they can keep an
//! account throttled (every throttled call retried by every worker). Each call to a cloud first
//! takes a token from its account's bucket: `burst` calls may go at once, then `rate` a second.
//! A caller that finds the bucket empty reserves the next token and waits until it is due, so
//! callers are served in the order they came and nobody spins. A throttling answer from the cloud
//! empties the bucket ([`Bucket::throttled`]): every worker of that account waits for the budget
//! to refill, not only the one that was told.
//!
//! A call reaches the cloud a few milliseconds after it took its token, some calls later than
//! others (a new connection, the scheduler), so calls paced exactly at the budget can arrive closer
//! together than the budget allows (`weft bench throttle` saw one call of 2,201 refused, 35 ms
//! early, and one of 331, 2.7 ms early): the bucket holds back the tokens of [`LAG_MARGIN`] (at
//! least one) from the burst, so that calls may arrive that much closer together than their
//! tokens.
//!
//! Time is tokio's, so tests run the bucket on a paused clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The default budget: calls a second per account.
pub const DEFAULT_RATE: f64 = 10.0;
/// The default burst: calls that may go at once after a quiet spell.
pub const DEFAULT_BURST: f64 = 20.0;
/// How much later after its token one call may reach the cloud than another: the bucket holds back
/// this long's tokens (at least one) from the burst, while the burst is above one (see the
/// module's doc).
pub const LAG_MARGIN: Duration = Duration::from_millis(100);

/// One account's bucket.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    /// The most tokens the bucket holds: the burst less [`LAG_MARGIN`]'s tokens, at least 1.
    cap: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Tokens at `at`; below zero when callers have reserved tokens not yet due.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket refilled at `rate` tokens a second (at least 0.01) up to `burst` (at least 1)
    /// less the tokens of [`LAG_MARGIN`] (at least one; the bucket holds at least one token).
    pub fn new(rate: f64, burst: f64) -> Bucket {
        let (rate, burst) = (rate.max(0.01), burst.max(1.0));
        let held = (rate * LAG_MARGIN.as_secs_f64()).max(1.0);
        let cap = (burst - held).max(1.0);
        Bucket {
            rate,
            burst,
            cap,
            state: Mutex::new(State {
                tokens: cap,
                at: Instant::now(),
            }),
        }
    }

    /// Takes a token: at once when one is there, else after waiting for the one reserved.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes the next token now (the count may go below zero) and answers how long until it is due.
    fn reserve(&self) -> Duration {
        let mut s = self.state.lock().expect("bucket lock");
        self.refill(&mut s);
        s.tokens -= 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / self.rate)
        }
    }

    /// The cloud answered that this account is throttled: the tokens left are dropped, so every
    /// caller waits for the budget to refill.
    pub fn throttled(&self) {
        let mut s = self.state.lock().expect("bucket lock");
        self.refill(&mut s);
        s.tokens = s.tokens.min(0.0);
    }

    fn refill(&self, s: &mut State) {
        let now = Instant::now();
        let gained = now.saturating_duration_since(s.at).as_secs_f64() * self.rate;
        s.tokens = (s.tokens + gained).min(self.cap);
        s.at = now;
    }
}

/// The buckets of a provider's accounts, by account key (e.g. the endpoint and login). Clones
/// share the buckets.
#[derive(Debug, Default, Clone)]
pub struct Buckets {
    map: Arc<Mutex<HashMap<String, Arc<Bucket>>>>,
}

impl Buckets {
    /// The bucket of `account`, made with `rate` and `burst` on first use (and again when either
    /// changes: the provider's fields were edited).
    pub fn of(&self, account: &str, rate: f64, burst: f64) -> Arc<Bucket> {
        let mut map = self.map.lock().expect("buckets lock");
        let slot = map
            .entry(account.to_string())
            .or_insert_with(|| Arc::new(Bucket::new(rate, burst)));
        if slot.rate != rate.max(0.01) || slot.burst != burst.max(1.0) {
            *slot = Arc::new(Bucket::new(rate, burst));
        }
        Arc::clone(slot)
    }
}

/// The budget a provider's fields ask for: `requests_per_second` and `request_burst`, each a
/// positive number; the defaults otherwise. A value that is not a positive number is an error
/// naming the field.
pub fn budget(fields: &serde_json::Map<String, serde_json::Value>) -> Result<(f64, f64), String> {
    let read = |name: &str, default: f64| -> Result<f64, String> {
        match crate::task::provider_field(fields, name) {
            None => Ok(default),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n > 0.0)
                .ok_or_else(|| {
                    format!("provider field {name} must be a positive number, not {v:?}")
                }),
        }
    };
    Ok((
        read("requests_per_second", DEFAULT_RATE)?,
        read("request_burst", DEFAULT_BURST)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 60 callers at once on a bucket of 5 a second with a burst of 10: in every window from the
    /// start, at most the burst less the token held back plus the rate times the window got a
    /// token; all got one, in about (60 - 9) / 5 = 10.2 s of (paused) time.
    #[tokio::test(start_paused = true)]
    async fn callers_never_exceed_the_budget_and_all_are_served() {
        let bucket = Arc::new(Bucket::new(5.0, 10.0));
        let start = Instant::now();
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..60 {
            let b = Arc::clone(&bucket);
            callers.spawn(async move {
                b.acquire().await;
                Instant::now().duration_since(start)
            });
        }
        let mut times = Vec::new();
        while let Some(t) = callers.join_next().await {
            times.push(t.unwrap());
        }
        times.sort();
        for (i, t) in times.iter().enumerate() {
            let allowed = 9.0 + 5.0 * t.as_secs_f64() + 1e-6;
            assert!(
                (i + 1) as f64 <= allowed,
                "call {} at {t:?} over budget",
                i + 1
            );
        }
        let last = times.last().unwrap().as_secs_f64();
        assert!((10.1..=10.3).contains(&last), "the last call at {last} s");
        assert_eq!(
            times.iter().filter(|t| t.is_zero()).count(),
            9,
            "the burst less the token held back goes at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttling_answer_makes_everyone_wait_for_the_refill() {
        let bucket = Bucket::new(2.0, 4.0);
        let start = Instant::now();
        bucket.acquire().await;
        bucket.throttled();
        bucket.acquire().await;
        let waited = Instant::now().duration_since(start);
        assert_eq!(
            waited,
            Duration::from_millis(500),
            "one token at 2 a second"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        let before = Instant::now();
        for _ in 0..3 {
            bucket.acquire().await;
        }
        assert_eq!(
            Instant::now(),
            before,
            "refilled to the burst less the token held back, no more"
        );
        bucket.acquire().await;
        assert_eq!(
            Instant::now().duration_since(before),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn the_bucket_holds_back_a_tenth_of_a_second_of_tokens_and_at_least_one() {
        let cap = |rate, burst| Bucket::new(rate, burst).cap;
        assert_eq!(cap(10.0, 20.0), 19.0);
        assert_eq!(cap(20.0, 40.0), 38.0);
        assert_eq!(cap(100.0, 100.0), 90.0);
        assert_eq!(cap(5.0, 5.0), 4.0, "one at least");
        assert_eq!(cap(5.0, 1.0), 1.0, "but never below one");
    }

    #[test]
    fn accounts_have_buckets_of_their_own_and_fields_set_the_budget() {
        let b = Buckets::default();
        let a1 = b.of("a", 1.0, 1.0);
        assert!(Arc::ptr_eq(&a1, &b.of("a", 1.0, 1.0)));
        assert!(!Arc::ptr_eq(&a1, &b.of("b", 1.0, 1.0)));
        assert!(
            !Arc::ptr_eq(&a1, &b.of("a", 2.0, 1.0)),
            "an edited budget takes effect"
        );
        let fields = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert_eq!(
            budget(&fields(serde_json::json!({}))),
            Ok((DEFAULT_RATE, DEFAULT_BURST))
        );
        assert_eq!(
            budget(&fields(
                serde_json::json!({"requests_per_second": "2.5", "request_burst": 5})
            )),
            Ok((2.5, 5.0))
        );
        for bad in ["0", "-1", "fast", "NaN", "inf"] {
            let e = budget(&fields(serde_json::json!({ "requests_per_second": bad }))).unwrap_err();
            assert!(e.contains("requests_per_second"), "{e}");
        }
    }
}
