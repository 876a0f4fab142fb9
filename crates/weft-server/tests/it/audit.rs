//! The audit trail through the API: every operation of the OpenAPI document that may change state
//! leaves exactly one record, refusals (401, 403) are recorded, and each tenant reads only its own
//! records.

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;
use weft_server::Listener;

use crate::common::{admin, user, Harness, Port, SA};

/// Every record the superadmin can read.
async fn all_records(h: &Harness) -> Vec<Value> {
    let r = h.get(SA, "/v2/audit?limit=1000").await.expect(200).json();
    r.as_array().expect("an array").clone()
}

/// The operations of the external OpenAPI document whose method may change state.
fn changing_operations() -> Vec<(Method, String)> {
    let doc = weft_server::openapi(Listener::External);
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in ["post", "put", "patch", "delete"] {
            if item.get(m).is_some() {
                out.push((m.to_uppercase().parse().unwrap(), path.clone()));
            }
        }
    }
    out
}

/// `route` with each `{param}` replaced by a value.
fn concrete(route: &str) -> String {
    route
        .split('/')
        .map(|s| if s.starts_with('{') { "x1" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_operation_that_may_change_state_leaves_exactly_one_record() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let before: Vec<Value> = all_records(&h).await;
    let ops = changing_operations();
    assert!(ops.len() > 40, "the document lists the API's operations");
    for (method, route) in &ops {
        let req = Request::builder()
            .method(method.clone())
            .uri(concrete(route))
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", "acme")
            .body(Body::from("{}"))
            .unwrap();
        h.send(Port::External, req).await;
    }
    let records: Vec<Value> = all_records(&h)
        .await
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    assert_eq!(records.len(), ops.len(), "one record per request");
    for (method, route) in &ops {
        let n = records
            .iter()
            .filter(|r| r["method"] == method.as_str() && r["route"] == route.as_str())
            .count();
        assert_eq!(n, 1, "{method} {route}: {n} records");
    }
    let one = records
        .iter()
        .find(|r| r["method"] == "DELETE" && r["route"] == "/v2/clusters/{id}")
        .expect("the cluster delete's record");
    assert_eq!(one["user"], "admin");
    assert_eq!(one["role"], "admin");
    assert_eq!(one["entity"], "clusters");
    assert_eq!(one["entityId"], "x1");
    assert_eq!(one["action"], "delete");
    assert_eq!(one["status"], 404);
    assert_eq!(one["source"], "in-process");
    assert_eq!(one["requestId"].as_str().map(str::len), Some(32));
    let verified = h.get(SA, "/v2/audit/verify").await.expect(200).json();
    assert!(
        verified.as_array().unwrap().iter().all(|r| r["ok"] == true),
        "{verified}"
    );
    let store = &h.app.state.engine.store;
    assert_eq!(
        store.settle_audit(i64::MAX).await.unwrap(),
        0,
        "every record written with a change was chained with its answer"
    );
}

#[tokio::test]
async fn refusals_are_recorded_and_each_tenant_reads_only_its_own_records() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.tenant("other").await;
    let provider = r#"{"name": "p", "providertype": "fake"}"#;
    h.put(admin("other"), "/v2/providers/p", provider).await;
    // A user may not make tenants, nor read the audit trail: both refusals are recorded.
    h.post(user("bob", "acme"), "/v2/tenants", "{}")
        .await
        .expect(403);
    h.get(user("bob", "acme"), "/v2/audit").await.expect(403);
    // No identity at all: recorded in the superadmin's chain.
    let bare = Request::builder()
        .method(Method::DELETE)
        .uri("/v2/clusters/00000001")
        .body(Body::empty())
        .unwrap();
    let resp = h.send(Port::External, bare).await;
    assert_eq!(resp.status.as_u16(), 401);

    let acme = h
        .get(admin("acme"), "/v2/audit?tenant=other")
        .await
        .expect(200)
        .json();
    let acme = acme.as_array().unwrap();
    let acme_id = h.tenant_id("acme").await;
    assert!(
        acme.iter().all(|r| r["tenantId"] == acme_id.as_str()),
        "an admin reads only its tenant's records, whatever it asks: {acme:?}"
    );
    let refused: Vec<(&str, &str, u64)> = acme
        .iter()
        .map(|r| {
            (
                r["user"].as_str().unwrap(),
                r["route"].as_str().unwrap(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        refused.contains(&("bob", "/v2/tenants", 403)),
        "{refused:?}"
    );
    assert!(refused.contains(&("bob", "/v2/audit", 403)), "{refused:?}");

    let other = h.get(admin("other"), "/v2/audit").await.expect(200).json();
    let other = other.as_array().unwrap();
    assert_eq!(other.len(), 1, "{other:?}");
    assert_eq!(other[0]["route"], "/v2/providers/{name}");
    assert_eq!(other[0]["entityId"], "p");

    let sa = h
        .get(SA, "/v2/audit?tenant=superadmin&action=delete")
        .await
        .expect(200)
        .json();
    let anonymous = sa.as_array().unwrap();
    assert!(
        anonymous
            .iter()
            .any(|r| r["status"] == 401 && r["role"] == "unknown" && r["user"] == ""),
        "{anonymous:?}"
    );
    let mine = h
        .get(admin("acme"), "/v2/audit/verify")
        .await
        .expect(200)
        .json();
    let mine = mine.as_array().unwrap();
    assert_eq!(mine.len(), 1, "one chain: the tenant's own");
    assert_eq!(mine[0]["tenantId"], acme_id.as_str());
    assert_eq!(mine[0]["ok"], true);
}

/// The Audit page shows the tenant's records with every value escaped: a user id chosen by an
/// attacker is text, never markup.
#[tokio::test]
async fn the_audit_page_shows_records_as_text() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let hostile = "<img src=x onerror=alert(1)>";
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v2/clusters")
        .header("Coopr-UserID", hostile)
        .header("Coopr-TenantID", "acme")
        .body(Body::from("{}"))
        .unwrap();
    h.send(Port::External, req).await;
    let cookie = crate::ui::login(&h, "acme", "admin", "").await;
    let page = crate::ui::page(&h, &cookie, "/ui/audit").await;
    assert_eq!(page.status.as_u16(), 200, "{}", page.text());
    let html = page.text();
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{html}"
    );
    assert!(!html.contains(hostile));
    assert!(html.contains("verifies"), "the chain's state is shown");
    let filtered = crate::ui::page(&h, &cookie, "/ui/audit?action=nothing-like-this").await;
    assert!(filtered.text().contains("No records match."));
    let bob = crate::ui::login(&h, "acme", "bob", "").await;
    let refused = crate::ui::page(&h, &bob, "/ui/audit").await;
    assert_eq!(refused.status.as_u16(), 403);
    // Log-ins through the UI are recorded.
    let logins = h
        .get(admin("acme"), "/v2/audit?action=login")
        .await
        .expect(200)
        .json();
    let who: Vec<(&str, &str, u64)> = logins
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["user"].as_str().unwrap(),
                r["entity"].as_str().unwrap(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(who, [("bob", "sessions", 303), ("admin", "sessions", 303)]);
}
