//! `GET /status`, the identity headers (401/404 messages) and the router's own 404/405 answers.

use axum::body::Body;
use axum::http::{Method, Request};

use crate::common::{Harness, Port, Who, SA};

#[tokio::test]
async fn status_answers_ok_and_closes_on_both_ports() {
    let h = Harness::new().await;
    for port in [Port::External, Port::Internal] {
        let r = h
            .send(port, Request::get("/status").body(Body::empty()).unwrap())
            .await;
        let r = r.expect_text(200, "OK\n");
        assert_eq!(r.headers.get("connection").unwrap(), "close");
        assert!(r.content_type().starts_with("text/plain"));
    }
}

#[tokio::test]
async fn missing_identity_headers_are_401_with_coopr_messages() {
    let h = Harness::new().await;
    let r = h
        .call(None, Method::GET, "/v2/providers", Body::empty())
        .await;
    r.expect_text(401, "Coopr-UserID not found in request headers.");
    let req = Request::get("/v2/providers")
        .header("Coopr-UserID", "admin")
        .body(Body::empty())
        .unwrap();
    h.send(Port::External, req)
        .await
        .expect_text(401, "Coopr-TenantID not found in request headers.");
    let req = Request::get("/v2/providers")
        .header("Coopr-TenantID", "superadmin")
        .body(Body::empty())
        .unwrap();
    h.send(Port::External, req)
        .await
        .expect_text(401, "Coopr-UserID not found in request headers.");
    // An empty header counts as missing.
    let req = Request::get("/v2/providers")
        .header("Coopr-UserID", "")
        .header("Coopr-TenantID", "superadmin")
        .body(Body::empty())
        .unwrap();
    h.send(Port::External, req).await.expect(401);
}

#[tokio::test]
async fn unknown_tenant_is_404_and_header_names_are_case_insensitive() {
    let h = Harness::new().await;
    let nobody = Who {
        user: "admin",
        tenant: "nosuch",
    };
    let r = h.get(nobody, "/v2/providers").await;
    r.expect_text(404, "Tenant does not exist.");
    let req = Request::get("/v2/providers")
        .header("COOPR-USERID", "admin")
        .header("coopr-tenantid", "superadmin")
        .body(Body::empty())
        .unwrap();
    let r = h.send(Port::External, req).await.expect(200);
    assert_eq!(r.json(), serde_json::json!([]));
    assert!(r.content_type().starts_with("application/json"));
}

#[tokio::test]
async fn api_key_header_is_ignored_without_auth() {
    let h = Harness::new().await;
    let req = Request::get("/v2/providers")
        .header("Coopr-UserID", "admin")
        .header("Coopr-TenantID", "superadmin")
        .header("Coopr-ApiKey", "anything")
        .body(Body::empty())
        .unwrap();
    h.send(Port::External, req).await.expect(200);
}

#[tokio::test]
async fn unknown_path_and_wrong_method_answer_like_netty_http() {
    let h = Harness::new().await;
    h.get(SA, "/v2/nothing-here").await.expect_text(
        404,
        "Problem accessing: /v2/nothing-here. Reason: Not Found",
    );
    h.call(Some(SA), Method::PATCH, "/v2/providers", Body::empty())
        .await
        .expect_text(
            405,
            "Problem accessing: /v2/providers. Reason: Method Not Allowed",
        );
    // The internal port serves no external routes.
    h.internal(Method::GET, "/v2/providers", Body::empty())
        .await
        .expect(404);
}
