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

    #[test]
    fn the_bucket_holds_back_a_tenth_of_a_second_of_tokens_and_at_least_one() {
        let cap = |rate, burst| Bucket::new(rate, burst).cap;
        assert_eq!(cap(10.0, 20.0), 19.0);
        assert_eq!(cap(20.0, 40.0), 38.0);
        assert_eq!(cap(100.0, 100.0), 90.0);
        assert_eq!(cap(5.0, 5.0), 4.0, "one at least");
        assert_eq!(cap(5.0, 1.0), 1.0, "but never below one");
    }
}
