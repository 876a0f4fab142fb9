//! A client that goes away mid-request cancels nothing on the server: its store transaction still
//! completes, and later requests are served normally.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use serde_json::json;
use tower::ServiceExt;

use crate::common::{admin, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_requests_leave_the_store_usable() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    for i in 0..60 {
        let req = Request::builder()
            .method("PUT")
            .uri(format!("/v2/services/s{}", i % 3))
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", "acme")
            .body(Body::from(
                json!({"name": format!("s{}", i % 3)}).to_string(),
            ))
            .unwrap();
        let call = h.app.external.clone().oneshot(req);
        // Give up on the answer almost at once, as a client that times out would.
        let _ = tokio::time::timeout(Duration::from_micros((i % 7) * 50), call).await;
    }
    for i in 0..20 {
        let body = json!({"name": format!("after{i}")}).to_string();
        h.post(admin("acme"), "/v2/services", body)
            .await
            .expect(200);
    }
    let list = h
        .get(admin("acme"), "/v2/services")
        .await
        .expect(200)
        .json();
    assert!(list.as_array().unwrap().len() >= 20);
}
