//! A rate-limiting proxy on the loopback, for `weft bench throttle`: it forwards each request to
//! an upstream (moto) while its own token bucket (`rate` calls a second, `burst` at once) has a
//! token for it, and answers the others as EC2 answers a throttled account (HTTP 503 with the
//! error code `RequestLimitExceeded`) without forwarding them. It counts every call, the calls it
//! refused, and the most calls that arrived within any one second.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// EC2's answer to a call over the account's request budget.
const THROTTLED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
    <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors>\
    <RequestID>weft-bench-limiter</RequestID></Response>";

/// What the proxy has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Every call that arrived.
    pub(super) calls: u64,
    /// Calls beyond the budget, answered `RequestLimitExceeded`.
    pub(super) refused: u64,
    /// The most calls that arrived within one second.
    pub(super) peak_per_second: u64,
    /// How early the earliest refused call came, in microseconds: how long before a token would
    /// have been there for it.
    pub(super) refused_early_us: u64,
}

/// The proxy's token bucket and counters.
#[derive(Debug)]
struct Budget {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
    /// Arrivals of the last second, oldest first.
    recent: VecDeque<Instant>,
    counts: Counts,
}

impl Budget {
    /// A full bucket at `now`.
    fn new(rate: f64, burst: f64, now: Instant) -> Budget {
        Budget {
            rate,
            burst,
            tokens: burst,
            at: now,
            recent: VecDeque::new(),
            counts: Counts::default(),
        }
    }

    /// Counts a call that arrived at `now` and answers whether it is within the budget (it then
    /// takes a token; a refused call takes none).
    fn admit(&mut self, now: Instant) -> bool {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + gained).min(self.burst);
        self.at = self.at.max(now);
        let second = Duration::from_secs(1);
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= second)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        self.counts.calls += 1;
        self.counts.peak_per_second = self.counts.peak_per_second.max(self.recent.len() as u64);
        // A hair under one token still counts as one: the client's bucket and this one add up
        // the same refill in floating point, in a different order.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens -= 1.0;
            true
        } else {
            self.counts.refused += 1;
            let early = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            let early = u64::try_from(early.as_micros()).unwrap_or(u64::MAX);
            self.counts.refused_early_us = self.counts.refused_early_us.max(early);
            false
        }
    }
}

/// The proxy's state, shared by its connections.
struct Limiter {
    upstream: String,
    http: reqwest::Client,
    budget: Mutex<Budget>,
}

/// A running proxy; it stops when dropped.
pub(super) struct Proxy {
    /// Where clients send their calls (`http://127.0.0.1:PORT/`).
    pub(super) endpoint: String,
    limiter: Arc<Limiter>,
    server: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Serves a proxy to `upstream` on a free loopback port with a full bucket of `burst` tokens
    /// refilled at `rate` a second.
    pub(super) async fn start(upstream: &str, rate: f64, burst: f64) -> anyhow::Result<Proxy> {
        let limiter = Arc::new(Limiter {
            upstream: upstream.to_string(),
            http: reqwest::Client::new(),
            budget: Mutex::new(Budget::new(rate, burst, Instant::now())),
        });
        let shared = Arc::clone(&limiter);
        let app =
            axum::Router::new().fallback(move |method: Method, headers: HeaderMap, body: Bytes| {
                forward(Arc::clone(&shared), method, headers, body)
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}/", listener.local_addr()?);
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the limiting proxy stopped");
            }
        });
        Ok(Proxy {
            endpoint,
            limiter,
            server,
        })
    }

    /// The counts so far.
    pub(super) fn counts(&self) -> Counts {
        self.limiter.budget.lock().expect("budget lock").counts
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One call: refused over the budget, else sent on to the upstream and its answer passed back.
async fn forward(l: Arc<Limiter>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    let admitted = l.budget.lock().expect("budget lock").admit(Instant::now());
    if !admitted {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/xml;charset=UTF-8")],
            THROTTLED,
        )
            .into_response();
    }
    let mut req = l.http.request(method, &l.upstream);
    for (k, v) in &headers {
        if *k != header::CONTENT_LENGTH && *k != header::HOST {
            req = req.header(k, v);
        }
    }
    let answer = match req.body(body).send().await {
        Ok(a) => a,
        Err(e) => {
            return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response();
        }
    };
    let status = answer.status();
    match answer.bytes().await {
        Ok(b) => (status, b).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_passes_then_the_rate_and_every_refusal_is_counted() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Budget::new(5.0, 3.0, t0);
        assert!((0..3).all(|_| b.admit(at(0))), "the burst at once");
        assert!(!b.admit(at(0)), "then nothing");
        assert!(!b.admit(at(100)), "a token takes 200 ms");
        assert!(b.admit(at(200)));
        assert!(!b.admit(at(300)));
        assert!(b.admit(at(400)));
        assert_eq!(
            b.counts,
            Counts {
                calls: 8,
                refused: 3,
                peak_per_second: 8,
                refused_early_us: 200_000,
            }
        );
        // A quiet spell refills up to the burst, no more; the window forgets old calls.
        assert!((0..3).all(|_| b.admit(at(10_000))));
        assert!(!b.admit(at(10_000)));
        assert_eq!(b.counts.peak_per_second, 8);
        assert_eq!(b.recent.len(), 4);
    }
}
