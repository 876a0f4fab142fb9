//! API keys (`auth = "apikey"`): who gets in, what roles keys give, `/v2/apikeys` for the superadmin,
//! and keys stored only as hashes.

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::json;
use weft_engine::apikeys::hash_key;
use weft_engine::apikeys::make_key;
use weft_model::ApiKeyRequest;

use crate::common::{entity_body, Harness, Port};

async fn apikey_harness() -> (Harness, String) {
    let h = Harness::with(|c| c.auth = Some("apikey".into())).await;
    let req = ApiKeyRequest {
        tenant: "superadmin".into(),
        user: "admin".into(),
        admin: true,
    };
    let sa = make_key(
        h.app.state.store.as_ref(),
        &req,
        h.app.state.engine.now_ms(),
    )
    .await
    .expect("superadmin key");
    (h, sa.key)
}

async fn with_key(
    h: &Harness,
    key: Option<&str>,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: &str,
) -> crate::common::Resp {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        b = b.header("Coopr-ApiKey", k);
    }
    if let Some(t) = tenant {
        b = b.header("Coopr-TenantID", t);
    }
    h.send(
        Port::External,
        b.body(Body::from(body.to_string())).unwrap(),
    )
    .await
}

/// Makes a key through the API with the superadmin's key.
async fn new_key(h: &Harness, sa: &str, tenant: &str, user: &str, admin: bool) -> String {
    let body = json!({"tenant": tenant, "user": user, "admin": admin}).to_string();
    let r = with_key(h, Some(sa), None, Method::POST, "/v2/apikeys", &body)
        .await
        .expect(200)
        .json();
    assert_eq!(r["tenant"], tenant);
    assert_eq!(r["user"], user);
    assert_eq!(r["admin"], admin);
    r["key"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn keys_decide_who_gets_in() {
    let (h, sa) = apikey_harness().await;
    with_key(
        &h,
        Some(&sa),
        None,
        Method::POST,
        "/v2/tenants",
        &json!({"tenant": {"name": "acme"}}).to_string(),
    )
    .await
    .expect(200);
    with_key(
        &h,
        Some(&sa),
        None,
        Method::POST,
        "/v2/tenants",
        &json!({"tenant": {"name": "beta"}}).to_string(),
    )
    .await
    .expect(200);
    let acme_admin = new_key(&h, &sa, "acme", "admin", true).await;
    let acme_user = new_key(&h, &sa, "acme", "bob", false).await;
    let beta_admin = new_key(&h, &sa, "beta", "admin", true).await;

    // Missing or wrong keys.
    let r = with_key(&h, None, Some("acme"), Method::GET, "/v2/providers", "")
        .await
        .expect(401);
    assert!(r.text().contains("Coopr-ApiKey"), "{}", r.text());
    // The identity headers alone are no longer enough.
    let req = Request::get("/v2/providers")
        .header("Coopr-UserID", "admin")
        .header("Coopr-TenantID", "superadmin");
    h.send(Port::External, req.body(Body::empty()).unwrap())
        .await
        .expect(401);
    with_key(
        &h,
        Some("weft_wrong"),
        None,
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(401);
    with_key(&h, Some(""), None, Method::GET, "/v2/providers", "")
        .await
        .expect(401);
    // A key used with another tenant's header.
    with_key(
        &h,
        Some(&beta_admin),
        Some("acme"),
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(401);
    with_key(
        &h,
        Some(&acme_admin),
        Some("beta"),
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(401);
    // A key with another user's header.
    let req = Request::get("/v2/providers")
        .header("Coopr-ApiKey", &acme_user)
        .header("Coopr-UserID", "admin");
    h.send(Port::External, req.body(Body::empty()).unwrap())
        .await
        .expect(401);

    // A valid admin key writes in its own tenant, with or without the matching tenant header.
    let p = entity_body("providers", "p1").to_string();
    with_key(
        &h,
        Some(&acme_admin),
        Some("acme"),
        Method::POST,
        "/v2/providers",
        &p,
    )
    .await
    .expect(200);
    let list = with_key(&h, Some(&acme_user), None, Method::GET, "/v2/providers", "")
        .await
        .expect(200)
        .json();
    assert_eq!(list[0]["name"], "p1");
    let beta = with_key(
        &h,
        Some(&beta_admin),
        None,
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(200)
    .json();
    assert_eq!(beta, json!([]));
    // A non-admin key reads but cannot write.
    let p2 = entity_body("providers", "p2").to_string();
    with_key(
        &h,
        Some(&acme_user),
        None,
        Method::POST,
        "/v2/providers",
        &p2,
    )
    .await
    .expect(403);
    with_key(
        &h,
        Some(&acme_user),
        None,
        Method::DELETE,
        "/v2/providers/p1",
        "",
    )
    .await
    .expect(403);
    // A tenant admin key is not the superadmin.
    let r = with_key(&h, Some(&acme_admin), None, Method::GET, "/v2/tenants", "")
        .await
        .expect(403);
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn apikeys_routes_are_superadmin_only_and_store_hashes() {
    let (h, sa) = apikey_harness().await;
    with_key(
        &h,
        Some(&sa),
        None,
        Method::POST,
        "/v2/tenants",
        &json!({"tenant": {"name": "acme"}}).to_string(),
    )
    .await
    .expect(200);
    let acme_admin = new_key(&h, &sa, "acme", "admin", true).await;
    let sa_user = new_key(&h, &sa, "superadmin", "bob", false).await;
    for k in [&acme_admin, &sa_user] {
        let body = json!({"tenant": "acme", "user": "x", "admin": true}).to_string();
        assert!(
            with_key(&h, Some(k), None, Method::POST, "/v2/apikeys", &body)
                .await
                .expect(403)
                .body
                .is_empty()
        );
        assert!(with_key(&h, Some(k), None, Method::GET, "/v2/apikeys", "")
            .await
            .expect(403)
            .body
            .is_empty());
        assert!(
            with_key(&h, Some(k), None, Method::DELETE, "/v2/apikeys/x", "")
                .await
                .expect(403)
                .body
                .is_empty()
        );
    }

    // The store holds only hashes.
    let records = h.app.state.store.list_api_keys().await.unwrap();
    assert_eq!(records.len(), 3);
    for secret in [&sa, &acme_admin, &sa_user] {
        assert!(records.iter().any(|r| r.hash == hash_key(secret)));
        assert!(records
            .iter()
            .all(|r| !r.hash.contains(secret.as_str()) && r.id != *secret));
    }
    // The listing names tenants and never shows a secret.
    let list = with_key(&h, Some(&sa), None, Method::GET, "/v2/apikeys", "")
        .await
        .expect(200);
    for secret in [&sa, &acme_admin, &sa_user] {
        assert!(!list.text().contains(secret.as_str()));
    }
    let list = list.json();
    let acme = list
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["tenant"] == "acme")
        .expect("acme key listed");
    assert_eq!(acme["user"], "admin");
    assert!(
        acme.get("key").is_none() && acme.get("hash").is_none(),
        "{acme}"
    );

    // Bad requests.
    for body in [
        json!({"tenant": "nosuch", "user": "u"}),
        json!({"tenant": "acme", "user": ""}),
        json!({"tenant": "bad name", "user": "u"}),
    ] {
        let r = with_key(
            &h,
            Some(&sa),
            None,
            Method::POST,
            "/v2/apikeys",
            &body.to_string(),
        )
        .await;
        assert!(
            r.status.is_client_error(),
            "{body}: {} {}",
            r.status,
            r.text()
        );
    }
    with_key(&h, Some(&sa), None, Method::POST, "/v2/apikeys", "{oops")
        .await
        .expect(400);

    // Revoking a key shuts it out.
    let id = acme["id"].as_str().unwrap();
    with_key(
        &h,
        Some(&acme_admin),
        None,
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(200);
    with_key(
        &h,
        Some(&sa),
        None,
        Method::DELETE,
        &format!("/v2/apikeys/{id}"),
        "",
    )
    .await
    .expect(200);
    with_key(
        &h,
        Some(&acme_admin),
        None,
        Method::GET,
        "/v2/providers",
        "",
    )
    .await
    .expect(401);
    with_key(
        &h,
        Some(&sa),
        None,
        Method::DELETE,
        &format!("/v2/apikeys/{id}"),
        "",
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn internal_port_needs_a_provisioner_token_not_a_key() {
    let (h, _) = apikey_harness().await;
    let body = json!({"host": "h", "port": 1, "capacityTotal": 1}).to_string();
    h.internal(Method::PUT, "/v2/provisioners/p1", body.clone())
        .await
        .expect(200);
    // Without the token, or with a wrong one, nothing on the internal port answers but /status.
    for auth in [None, Some("Bearer nope"), Some("weftp_no_bearer")] {
        h.internal_as(auth, Method::PUT, "/v2/provisioners/p2", body.clone())
            .await
            .expect_text(401, "provisioner token missing or not accepted");
        h.internal_as(auth, Method::GET, "/metrics", Body::empty())
            .await
            .expect(401);
        h.internal_as(auth, Method::GET, "/status", Body::empty())
            .await
            .expect(200);
    }
    // Rotation without a restart: a second token is accepted once it is in the file, the old
    // one no longer once it is removed.
    let file = h.app.state.settings.provisioner_token_file.clone().unwrap();
    let old = std::fs::read_to_string(&file).unwrap().trim().to_string();
    std::fs::write(
        &file,
        format!("{old}\nweftp_rotated_token_of_another_length\n"),
    )
    .unwrap();
    let new = Some("Bearer weftp_rotated_token_of_another_length");
    h.internal_as(new, Method::PUT, "/v2/provisioners/p3", body.clone())
        .await
        .expect(200);
    std::fs::write(&file, "weftp_rotated_token_of_another_length\n").unwrap();
    h.internal_as(
        Some(&format!("Bearer {old}")),
        Method::GET,
        "/metrics",
        Body::empty(),
    )
    .await
    .expect(401);
    h.internal_as(new, Method::GET, "/metrics", Body::empty())
        .await
        .expect(200);
    h.send(
        Port::External,
        Request::get("/status").body(Body::empty()).unwrap(),
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn external_metrics_are_for_the_superadmin_when_keys_are_on() {
    let (h, sa) = apikey_harness().await;
    with_key(&h, None, None, Method::GET, "/metrics", "")
        .await
        .expect(401);
    let admin = new_key(&h, &sa, "superadmin", "someone", false).await;
    with_key(&h, Some(&admin), None, Method::GET, "/metrics", "")
        .await
        .expect(403);
    let r = with_key(&h, Some(&sa), None, Method::GET, "/metrics", "")
        .await
        .expect(200);
    assert!(r.text().contains("weft_"), "{}", r.text());
}
