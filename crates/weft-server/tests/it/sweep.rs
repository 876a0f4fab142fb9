//! `POST /v2/providers/{name}/sweep` against fake provisioners served by the test on 127.0.0.1:
//! the request carries the provider's secrets, the tenant id and the delete flag; a provisioner
//! without the provider type (404) is passed over; machines of another tenant are dropped even when
//! a provisioner answers them; only the tenant admin may sweep; no provisioner with the type is a
//! 409.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use weft_model::SweepReport;

use crate::common::{admin, user, Harness};

const T: &str = "acme";

/// A fake provisioner: `POST /v2/sweep` answers `answer` with `status`; the bodies it got.
async fn provisioner(status: StatusCode, answer: Value) -> (u16, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let state = (got.clone(), status, answer);
    type St = (Arc<Mutex<Vec<Value>>>, StatusCode, Value);
    async fn sweep(
        State((got, status, answer)): State<St>,
        body: Bytes,
    ) -> axum::response::Response {
        got.lock()
            .unwrap()
            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        (status, answer.to_string()).into_response()
    }
    let app = axum::Router::new()
        .route("/v2/sweep", axum::routing::post(sweep))
        .fallback(|| async { StatusCode::OK })
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, got)
}

async fn register(h: &Harness, id: &str, port: u16) {
    let body = json!({"id": id, "host": "127.0.0.1", "port": port, "capacityTotal": 1});
    h.internal(
        Method::PUT,
        &format!("/v2/provisioners/{id}"),
        body.to_string(),
    )
    .await
    .expect(200);
}

fn machine(id: &str, tenant: &str) -> Value {
    json!({"providertype": "fake", "providerid": id, "node": format!("node-{id}"),
        "cluster": "1", "tenant": tenant, "state": "running"})
}

#[tokio::test]
async fn a_sweep_asks_a_provisioner_with_the_type_and_answers_only_the_tenant_s_machines() {
    let h = Harness::new().await;
    h.tenant(T).await;
    h.plugin_types().await;
    let tid = h.tenant_id(T).await;
    let body = json!({"name": "cloud", "providertype": "fake",
        "provisioner": {"region": "r1", "secret": "s3cret"}});
    h.post(admin(T), "/v2/providers", body.to_string())
        .await
        .expect(200);

    // Nobody to ask yet.
    let r = h.post(admin(T), "/v2/providers/cloud/sweep", "").await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("provider type fake"), "{}", r.text());

    let (lacking, asked_lacking) = provisioner(StatusCode::NOT_FOUND, json!("no plugin")).await;
    register(&h, "lacking", lacking).await;
    let answer = json!({"machines": [machine("m1", &tid), machine("m2", "another-tenant")],
        "deleted": ["m1"], "errors": []});
    let (having, asked) = provisioner(StatusCode::OK, answer).await;
    register(&h, "having", having).await;

    let r = h
        .post(admin(T), "/v2/providers/cloud/sweep?delete=true", "")
        .await
        .expect(200);
    let report: SweepReport = serde_json::from_value(r.json()).unwrap();
    let ids: Vec<&str> = report
        .machines
        .iter()
        .map(|m| m.providerid.as_str())
        .collect();
    assert_eq!(
        ids,
        vec!["m1"],
        "another tenant's machine is never answered"
    );
    assert_eq!(report.deleted, vec!["m1".to_string()]);
    assert!(!r.text().contains("s3cret"), "no secret in the answer");

    let sent = asked.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let sent = &sent[0];
    assert_eq!(sent["providertype"], "fake");
    assert_eq!(sent["tenant"], tid.as_str());
    assert_eq!(sent["delete"], true);
    assert_eq!(sent["live"], json!([]));
    assert_eq!(
        sent["fields"],
        json!({"region": "r1", "secret": "s3cret"}),
        "the provisioner gets the provider's secrets"
    );
    assert!(asked_lacking.lock().unwrap().len() <= 1);

    let r = h.post(admin(T), "/v2/providers/cloud/sweep", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(asked.lock().unwrap()[1]["delete"], false);

    h.post(user("bob", T), "/v2/providers/cloud/sweep", "")
        .await
        .expect(403);
    h.post(admin(T), "/v2/providers/nope/sweep", "")
        .await
        .expect(404);
}
