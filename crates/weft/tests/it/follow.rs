//! A client of `GET /v2/events` that follows a tenant's stream through servers that are killed
//! and restarted: it reconnects (to the next server it knows) with `Last-Event-ID` after the last
//! event it saw, as `weft events --follow` does, and keeps every event id it was given.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use weft_client::api::{ApiClient, Identity};

use crate::support::http;

/// A follower running on a thread of its own.
pub(crate) struct Follower {
    ids: Arc<Mutex<Vec<u64>>>,
    reconnects: Arc<Mutex<u32>>,
}

impl Follower {
    /// Follows `tenant`'s events as its `user` from the first, through `bases` in turn.
    pub(crate) fn start(bases: Vec<String>, tenant: &str, user: &str) -> Follower {
        let ids = Arc::new(Mutex::new(Vec::new()));
        let reconnects = Arc::new(Mutex::new(0));
        let (seen, again) = (ids.clone(), reconnects.clone());
        let who = Identity {
            tenant: tenant.into(),
            user: user.into(),
            api_key: None,
        };
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(follow(bases, who, seen, again));
        });
        Follower { ids, reconnects }
    }

    /// The ids seen so far, in the order they came.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.ids.lock().unwrap().clone()
    }

    pub(crate) fn reconnects(&self) -> u32 {
        *self.reconnects.lock().unwrap()
    }

    /// Waits until the follower has seen event `id` (at most `within`).
    pub(crate) fn wait_for(&self, id: u64, within: Duration) {
        let t0 = Instant::now();
        while self.ids().last().copied().unwrap_or(0) < id {
            assert!(
                t0.elapsed() < within,
                "the follower stopped at {:?} of {id}",
                self.ids().last()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn follow(
    bases: Vec<String>,
    who: Identity,
    seen: Arc<Mutex<Vec<u64>>>,
    again: Arc<Mutex<u32>>,
) {
    let mut last = Some(0);
    for base in bases.iter().cycle() {
        let client = ApiClient::new(base, who.clone()).expect("client");
        let _ = client
            .events(&[], last, |v: Value| {
                if let Some(id) = v["id"].as_u64() {
                    seen.lock().unwrap().push(id);
                    last = Some(id);
                }
                true
            })
            .await;
        *again.lock().unwrap() += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every event id the tenant's backlog holds, read through `base` (the stream's answer that ends).
pub(crate) fn backlog_ids(base: &str, tenant: &str, user: &str) -> Vec<u64> {
    let who = [("Coopr-TenantID", tenant), ("Coopr-UserID", user)];
    let url = format!("{base}/v2/events?format=ndjson&follow=false&since=0");
    let (status, body) = http("GET", &url, &who, "");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("a JSON line")["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// The follower saw every event of the backlog exactly once, in order, and the backlog is
/// numbered without gaps.
pub(crate) fn assert_saw_every_event_once(f: &Follower, base: &str, tenant: &str, user: &str) {
    assert!(
        f.reconnects() >= 1,
        "the follower's connection broke at least once (a server was killed)"
    );
    let backlog = backlog_ids(base, tenant, user);
    let n = backlog.len() as u64;
    assert_eq!(
        backlog,
        (1..=n).collect::<Vec<_>>(),
        "the backlog is numbered 1..{n}"
    );
    f.wait_for(n, Duration::from_secs(30));
    let ids = f.ids();
    assert_eq!(
        &ids[..backlog.len()],
        &backlog[..],
        "the follower saw each event once, in order ({} reconnects)",
        f.reconnects()
    );
}
