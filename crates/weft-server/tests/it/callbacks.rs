//! Job callbacks: a URL gets start and success of a job run through take and finish; a URL that
//! never answers does not hold the job up; a command gets the JSON on stdin and the event in its
//! environment.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::mpsc;
use weft_engine::callbacks;
use weft_server::config::RawConfig;

use crate::common::{admin, Harness};
use crate::janitor::{create, drain, setup, T};

async fn record(State(tx): State<mpsc::UnboundedSender<Value>>, body: Bytes) -> StatusCode {
    let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
    StatusCode::OK
}

/// An HTTP listener that records every POSTed JSON body.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(record))
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("nothing arrived")
        .expect("sender alive")
}

#[tokio::test]
async fn a_callback_url_gets_start_and_success() {
    let (url, mut rx) = receiver().await;
    let h = Harness::with(|c: &mut RawConfig| c.callback_url = Some(url)).await;
    let tid = setup(&h).await;
    let _subscriber = callbacks::spawn(h.app.state.engine.clone());
    let id = create(&h).await;
    drain(&h, &tid).await;
    let mut got = vec![next(&mut rx).await, next(&mut rx).await];
    // Each notice is delivered in a task of its own: they may arrive in either order.
    got.sort_by_key(|v| v["event"] != "start");
    let (start, success) = (&got[0], &got[1]);
    assert_eq!(start["event"], "start", "{start}");
    assert_eq!(success["event"], "success", "{success}");
    for v in &got {
        assert_eq!(v["cluster"]["id"], id.as_str());
        assert_eq!(v["job"]["action"], "CLUSTER_CREATE");
        assert_eq!(v["job"]["id"], success["job"]["id"]);
    }
    assert_eq!(success["job"]["status"], "complete");
    assert_eq!(success["cluster"]["status"], "active");
    assert_eq!(success["cluster"]["nodes"].as_array().unwrap().len(), 1);
    // The cluster as the API shows it.
    let api = h
        .get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    assert_eq!(success["cluster"]["name"], api["name"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_that_never_answers_does_not_hold_up_the_job() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, mut accepted) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
            let _ = tx.send(());
        }
    });
    let h = Harness::with(|c: &mut RawConfig| {
        c.callback_url = Some(url);
        c.callback_timeout = Some(3600);
    })
    .await;
    let tid = setup(&h).await;
    let _subscriber = callbacks::spawn(h.app.state.engine.clone());
    let id = tokio::time::timeout(Duration::from_secs(60), async {
        let id = create(&h).await;
        drain(&h, &tid).await;
        id
    })
    .await
    .expect("the job ran although the callback hangs");
    let c = h
        .get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    assert_eq!(c["status"], "active");
    // The callback was tried (and is still hanging).
    next(&mut accepted).await;
}

#[tokio::test]
async fn a_callback_command_gets_the_json_and_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!(
        "cat > '{}'/\"$WEFT_EVENT-$WEFT_CLUSTER_ID-$WEFT_JOB_ID.json\"",
        dir.path().display()
    );
    let h = Harness::with(|c: &mut RawConfig| c.callback_command = Some(cmd)).await;
    let tid = setup(&h).await;
    let mut events = h.app.state.engine.events.subscribe();
    let id = create(&h).await;
    drain(&h, &tid).await;
    // The subscriber's step, awaited: deliver each notice.
    let mut seen = Vec::new();
    while let Ok(ev) = events.try_recv() {
        callbacks::deliver(&h.app.state.engine, &ev).await;
        seen.push(ev);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    let job = &seen[0].job_id;
    for event in ["start", "success"] {
        let path = dir.path().join(format!("{event}-{id}-{job}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} not written: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["event"], event);
        assert_eq!(v["cluster"]["id"], id.as_str());
        assert_eq!(v["job"]["id"], job.as_str());
    }
}

#[tokio::test]
async fn a_slow_callback_command_is_abandoned_after_the_timeout() {
    let h = Harness::with(|c: &mut RawConfig| {
        c.callback_command = Some("exec sleep 600".into());
        c.callback_timeout = Some(1);
    })
    .await;
    let tid = setup(&h).await;
    let mut events = h.app.state.engine.events.subscribe();
    let id = create(&h).await;
    drain(&h, &tid).await;
    let ev = events.try_recv().expect("a notice");
    tokio::time::timeout(
        Duration::from_secs(30),
        callbacks::deliver(&h.app.state.engine, &ev),
    )
    .await
    .expect("the callback is abandoned after callback_timeout (1 s)");
    let c = h
        .get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    assert_eq!(c["status"], "active");
}
