//! Server -> provisioner calls (contract §4.13) against a real HTTP listener standing in for the
//! provisioner agent: tenant worker counts and resources arrive as `PUT /v2/tenants/<id>`, a count
//! of 0 as `DELETE`, and a provisioner that keeps failing is dropped and its workers placed
//! elsewhere.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use weft_engine::workers::Moved;
use weft_server::outbound::{push_assignments, push_resources, resource_collection, Sent};

use crate::common::{admin, Harness, SA};

/// A request the fake provisioner got.
#[derive(Debug)]
pub(crate) struct Got {
    pub method: Method,
    pub path: String,
    pub body: Value,
}

#[derive(Clone)]
struct Fake {
    tx: mpsc::UnboundedSender<Got>,
    status: StatusCode,
}

async fn record(State(f): State<Fake>, method: Method, uri: Uri, body: Bytes) -> StatusCode {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = f.tx.send(Got {
        method,
        path: uri.path().to_string(),
        body,
    });
    f.status
}

/// Starts a fake provisioner on 127.0.0.1 answering every request with `status`; returns its port
/// and the requests it gets.
pub(crate) async fn fake_provisioner(status: StatusCode) -> (u16, mpsc::UnboundedReceiver<Got>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .fallback(record)
        .with_state(Fake { tx, status });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, rx)
}

/// The next request, waiting at most 10 s (a bound, not a pause: it returns as soon as one arrives).
async fn next(rx: &mut mpsc::UnboundedReceiver<Got>) -> Got {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the provisioner got no request")
        .expect("listener alive")
}

async fn register(h: &Harness, id: &str, port: u16, capacity: u32) {
    let body = json!({"id": id, "host": "127.0.0.1", "port": port, "capacityTotal": capacity});
    h.internal(
        Method::PUT,
        &format!("/v2/provisioners/{id}"),
        body.to_string(),
    )
    .await
    .expect(200);
}

fn empty_resources() -> Value {
    json!({"automatortypes": {}, "providertypes": {}})
}

#[tokio::test]
async fn worker_counts_reach_the_provisioner_as_put_and_delete() {
    let h = Harness::new().await;
    h.app.state.outbound.set_enabled(true);
    let (port, mut rx) = fake_provisioner(StatusCode::OK).await;
    register(&h, "p1", port, 5).await;
    let body = json!({"tenant": {"name": "acme", "workers": 3}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id("acme").await;
    let got = next(&mut rx).await;
    assert_eq!(got.method, Method::PUT);
    assert_eq!(got.path, format!("/v2/tenants/{tid}"));
    assert_eq!(
        got.body,
        json!({"workers": 3, "resources": empty_resources()})
    );

    let body = json!({"tenant": {"name": "acme", "workers": 1}});
    h.put(SA, "/v2/tenants/acme", body.to_string())
        .await
        .expect(200);
    let got = next(&mut rx).await;
    assert_eq!(
        (got.method, got.body["workers"].clone()),
        (Method::PUT, json!(1))
    );

    let body = json!({"tenant": {"name": "acme", "workers": 0}});
    h.put(SA, "/v2/tenants/acme", body.to_string())
        .await
        .expect(200);
    let got = next(&mut rx).await;
    assert_eq!(got.method, Method::DELETE);
    assert_eq!(got.path, format!("/v2/tenants/{tid}"));
    // A write that changes no count calls nobody: the next call is the one for the next change.
    h.put(SA, "/v2/tenants/acme", body.to_string())
        .await
        .expect(200);
    let body = json!({"tenant": {"name": "acme", "workers": 2}});
    h.put(SA, "/v2/tenants/acme", body.to_string())
        .await
        .expect(200);
    let got = next(&mut rx).await;
    assert_eq!(
        (got.method, got.body["workers"].clone()),
        (Method::PUT, json!(2))
    );
}

#[tokio::test]
async fn sync_pushes_the_live_resources_to_the_provisioners_serving_the_tenant() {
    let h = Harness::new().await;
    h.plugin_types().await;
    let (port, mut rx) = fake_provisioner(StatusCode::OK).await;
    register(&h, "p1", port, 5).await;
    let body = json!({"tenant": {"name": "acme", "workers": 2}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id("acme").await;
    let a = admin("acme");
    for (base, name) in [
        ("/v2/plugins/automatortypes/shell/scripts", "setup"),
        ("/v2/plugins/providertypes/fake/keys", "dev"),
        ("/v2/plugins/providertypes/fake/cookbooks", "hadoop"),
    ] {
        h.post(a, &format!("{base}/{name}"), "bytes")
            .await
            .expect(200);
        h.post(a, &format!("{base}/{name}/versions/1/stage"), "")
            .await
            .expect(200);
    }
    // A second version of the script, staged: the live one is version 2.
    h.post(a, "/v2/plugins/automatortypes/shell/scripts/setup", "v2")
        .await
        .expect(200);
    h.post(
        a,
        "/v2/plugins/automatortypes/shell/scripts/setup/versions/2/stage",
        "",
    )
    .await
    .expect(200);

    h.app.state.outbound.set_enabled(true);
    h.post(a, "/v2/plugins/sync", "").await.expect(200);
    let want = json!({
        "automatortypes": {"shell": {"scripts": {"format": "file", "active": [{"name": "setup", "version": 2}]}}},
        "providertypes": {"fake": {
            "cookbooks": {"format": "archive", "active": [{"name": "hadoop", "version": 1}]},
            "keys": {"format": "file", "permissions": "0400", "active": [{"name": "dev", "version": 1}]}
        }}
    });
    let got = next(&mut rx).await;
    assert_eq!(got.method, Method::PUT);
    assert_eq!(got.path, format!("/v2/tenants/{tid}"));
    assert_eq!(got.body, json!({"workers": 2, "resources": want}));
    assert_eq!(
        resource_collection(h.app.state.store.as_ref(), &tid)
            .await
            .unwrap(),
        want
    );

    // A tenant no provisioner serves gets no calls.
    h.tenant("idle").await;
    let idle = h.tenant_id("idle").await;
    let r = push_resources(&h.app.state.courier, &idle).await.unwrap();
    assert!(r.sent.is_empty());
}

#[tokio::test]
async fn a_provisioner_that_keeps_failing_is_dropped_and_its_workers_move() {
    let h = Harness::new().await;
    let (bad_port, mut bad) = fake_provisioner(StatusCode::INTERNAL_SERVER_ERROR).await;
    let (good_port, mut good) = fake_provisioner(StatusCode::OK).await;
    register(&h, "p1", bad_port, 1).await;
    register(&h, "p2", good_port, 1).await;
    let body = json!({"tenant": {"name": "acme", "workers": 1}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id("acme").await;
    let store = Arc::clone(&h.app.state.store);
    let p1 = store.get_provisioner("p1").await.unwrap().unwrap();
    assert_eq!(p1.assignments.get(&tid), Some(&1), "placed on p1 first");

    h.app.state.outbound.set_enabled(true);
    let moved = vec![Moved {
        provisioner_id: "p1".into(),
        tenant_id: tid.clone(),
    }];
    let report = push_assignments(&h.app.state.courier, moved).await.unwrap();
    assert_eq!(report.dropped, vec!["p1".to_string()]);
    let sent = |p: &str, ok: bool| Sent {
        provisioner_id: p.into(),
        tenant_id: tid.clone(),
        method: "PUT",
        ok,
    };
    assert_eq!(report.sent, vec![sent("p1", false), sent("p2", true)]);
    // Two tries at p1, then the worker went to p2 and p2 was told.
    for _ in 0..2 {
        assert_eq!(next(&mut bad).await.method, Method::PUT);
    }
    assert!(bad.try_recv().is_err(), "exactly two tries");
    let got = next(&mut good).await;
    assert_eq!(got.body["workers"], 1);
    assert!(store.get_provisioner("p1").await.unwrap().is_none());
    let p2 = store.get_provisioner("p2").await.unwrap().unwrap();
    assert_eq!(p2.assignments.get(&tid), Some(&1));
}

#[tokio::test]
async fn calls_are_off_when_disabled() {
    let h = Harness::new().await;
    let (port, mut rx) = fake_provisioner(StatusCode::OK).await;
    register(&h, "p1", port, 2).await;
    let body = json!({"tenant": {"name": "acme", "workers": 2}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id("acme").await;
    let moved = vec![Moved {
        provisioner_id: "p1".into(),
        tenant_id: tid,
    }];
    let r = push_assignments(&h.app.state.courier, moved).await.unwrap();
    assert!(r.sent.is_empty());
    assert!(rx.try_recv().is_err());
}
