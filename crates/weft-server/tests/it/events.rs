//! The public event stream through the API (`GET /v2/events`): a cluster's life as events in
//! commit order, numbered per tenant; resumed after `Last-Event-ID`; each tenant and each plain
//! user sees only its own; a live follower is woken by new commits; bad input is refused by name.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::clusters::{create, drain, setup, T};
use crate::common::{admin, user, Harness};

/// Asserts a refusal whose message names `word`.
#[track_caller]
fn refused(r: crate::common::Resp, status: u16, word: &str) {
    let text = r.expect(status).text();
    assert!(text.contains(word), "the message names {word}: {text}");
}

/// The NDJSON backlog `who` reads with `query` (which ends: `follow=false`).
async fn backlog(h: &Harness, who: crate::common::Who, query: &str) -> Vec<Value> {
    let path = format!("/v2/events?format=ndjson&follow=false&{query}");
    let r = h.get(who, &path).await.expect(200);
    assert_eq!(r.content_type(), "application/x-ndjson");
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn ids(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["id"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn a_clusters_life_is_a_run_of_events_in_commit_order_that_resumes_after_any_id() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 2).await;
    drain(&h, &tid, |_| false).await;

    let all = backlog(&h, admin(T), "since=0").await;
    let n = all.len() as u64;
    assert_eq!(
        ids(&all),
        (1..=n).collect::<Vec<_>>(),
        "numbered 1, 2, 3, ..."
    );
    let kinds = |k: &str| all.iter().filter(|e| e["kind"] == k).count();
    assert!(
        kinds("audit") >= 6,
        "the catalog writes and the create were audited"
    );
    assert_eq!(kinds("node"), 2, "two nodes added");
    assert!(kinds("task") > 10, "every task's start and end");
    let mine: Vec<&Value> = all
        .iter()
        .filter(|e| e["clusterId"] == id.as_str())
        .collect();
    let first = mine.first().unwrap();
    assert_eq!(
        (&first["kind"], &first["status"]),
        (&"cluster".into(), &"pending".into())
    );
    let last_cluster = mine.iter().rev().find(|e| e["kind"] == "cluster").unwrap();
    assert_eq!(last_cluster["previous"], "pending");
    assert_eq!(last_cluster["status"], "active");
    let job_end = mine
        .iter()
        .rev()
        .find(|e| e["kind"] == "job" && e["status"] == "complete")
        .expect("the create job's end");
    // Every task ended before the job did, and no task is reported after it.
    let task_ids: Vec<u64> = mine
        .iter()
        .filter(|e| e["kind"] == "task")
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert!(task_ids
        .iter()
        .all(|t| *t < job_end["id"].as_u64().unwrap()));
    let a_task = mine.iter().find(|e| e["kind"] == "task").unwrap();
    for field in ["jobId", "taskId", "nodeId", "action", "status", "previous"] {
        assert!(
            a_task[field].is_string(),
            "a task event has {field}: {a_task}"
        );
    }

    // Resuming after id k gives exactly what follows k; `Last-Event-ID` wins over `since`.
    let k = n / 2;
    let rest = backlog(&h, admin(T), &format!("since={k}")).await;
    assert_eq!(ids(&rest), (k + 1..=n).collect::<Vec<_>>());
    let req = Request::builder()
        .uri("/v2/events?format=ndjson&follow=false&since=1")
        .header("Coopr-TenantID", T)
        .header("Coopr-UserID", "admin")
        .header("Last-Event-ID", (n - 1).to_string())
        .body(Body::empty())
        .unwrap();
    let r = h.send(crate::common::Port::External, req).await.expect(200);
    assert_eq!(
        r.text().lines().count(),
        1,
        "only the last event: {}",
        r.text()
    );

    // Filters: one cluster, some kinds; the SSE form carries the ids.
    let jobs = backlog(&h, admin(T), &format!("since=0&cluster={id}&kind=job")).await;
    assert!(jobs.len() >= 2 && jobs.iter().all(|e| e["kind"] == "job"));
    let sse = h
        .get(admin(T), "/v2/events?since=0&follow=false&kind=cluster")
        .await
        .expect(200);
    assert!(sse.content_type().starts_with("text/event-stream"));
    let text = sse.text();
    assert!(
        text.contains("event: cluster\n")
            && text.contains(&format!("id: {}\n", last_cluster["id"])),
        "{text}"
    );
}

#[tokio::test]
async fn tenants_and_plain_users_see_only_their_own_events() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 1).await;
    drain(&h, &tid, |_| false).await;
    h.tenant("other").await;
    h.post(
        admin("other"),
        "/v2/providers",
        r#"{"name": "p", "providertype": "local"}"#,
    )
    .await;
    let other = backlog(&h, admin("other"), "since=0").await;
    assert!(!other.is_empty(), "the other tenant's own audit record");
    assert!(
        other
            .iter()
            .all(|e| e["clusterId"].is_null() && e["audit"]["tenantId"] != tid.as_str()),
        "nothing of {T}: {other:?}"
    );
    assert_eq!(ids(&other)[0], 1, "each tenant counts from 1");

    // A plain user of the tenant sees the clusters they own, no one else's, and no audit.
    let bob = user("bob", T);
    assert!(backlog(&h, bob, "since=0").await.is_empty());
    let bobs = create(&h, bob, 1).await;
    let seen = backlog(&h, bob, "since=0").await;
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|e| e["clusterId"] == bobs.as_str()),
        "{seen:?}"
    );
    refused(
        h.get(bob, "/v2/events?follow=false&kind=audit").await,
        403,
        "audit",
    );
    h.get(bob, &format!("/v2/events?follow=false&cluster={id}"))
        .await
        .expect(404);
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    let h = Harness::new().await;
    h.tenant(T).await;
    let a = admin(T);
    refused(h.get(a, "/v2/events?kind=cluster,bogus").await, 400, "kind");
    h.get(a, "/v2/events?since=-1").await.expect(400);
    refused(h.get(a, "/v2/events?format=xml").await, 400, "format");
    refused(h.get(a, "/v2/events?follow=maybe").await, 400, "follow");
    h.get(a, "/v2/events?cluster=00000042").await.expect(404);
    let req = Request::builder()
        .uri("/v2/events")
        .header("Coopr-TenantID", T)
        .header("Coopr-UserID", "admin")
        .header("Last-Event-ID", "yesterday")
        .body(Body::empty())
        .unwrap();
    refused(
        h.send(crate::common::Port::External, req).await,
        400,
        "Last-Event-ID",
    );
}

/// The next NDJSON line of a streamed answer (at most `within`).
async fn next_line(body: &mut Body, pending: &mut Vec<u8>, within: Duration) -> Value {
    loop {
        if let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return serde_json::from_slice(&line).expect("a JSON line");
        }
        let frame = tokio::time::timeout(within, body.frame())
            .await
            .expect("an event within the time")
            .expect("the stream goes on")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            pending.extend_from_slice(&data);
        }
    }
}

#[tokio::test]
async fn a_follower_from_now_is_woken_by_each_new_commit() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let pump = weft_engine::feed::spawn(h.app.state.engine.clone());
    let before = backlog(&h, admin(T), "since=0").await.len() as u64;
    let req = Request::builder()
        .method(Method::GET)
        .uri("/v2/events?format=ndjson")
        .header("Coopr-TenantID", T)
        .header("Coopr-UserID", "admin")
        .body(Body::empty())
        .unwrap();
    let resp = h.app.external.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut pending = Vec::new();
    let id = create(&h, admin(T), 1).await;
    // The create's audit record and the cluster's first events arrive, numbered after the
    // backlog the follower did not ask for.
    let first = next_line(&mut body, &mut pending, Duration::from_secs(30)).await;
    assert_eq!(first["id"].as_u64(), Some(before + 1), "{first}");
    drain(&h, &tid, |_| false).await;
    let mut last = first;
    while !(last["kind"] == "cluster" && last["status"] == "active") {
        let e = next_line(&mut body, &mut pending, Duration::from_secs(30)).await;
        assert_eq!(
            e["id"].as_u64(),
            Some(last["id"].as_u64().unwrap() + 1),
            "in order, none missed"
        );
        last = e;
    }
    assert_eq!(last["clusterId"], id.as_str());
    pump.abort();
}
