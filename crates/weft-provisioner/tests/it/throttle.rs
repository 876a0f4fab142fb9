//! Tests of the request budget (`throttle`) through its public functions.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use weft_provisioner::throttle::*;

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
