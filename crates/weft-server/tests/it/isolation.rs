//! Tenant isolation and roles, table-driven: a caller from tenant B runs every route against the
//! names of tenant A's things and must neither see nor change any of them; users cannot write admin
//! entities; only the superadmin manages tenants, plugin types, provisioners and API keys.

use axum::http::Method;
use serde_json::{json, Value};

use crate::common::{admin, entity_body, user, Harness, Who, KINDS, SA};

const MARK: &str = "ACME-MARKER";
const BYTES: &str = "ACME-BYTES";

/// Tenant `acme` with one of everything, each carrying [`MARK`].
async fn acme(h: &Harness) {
    h.tenant("acme").await;
    h.tenant("beta").await;
    h.plugin_types().await;
    let a = admin("acme");
    for (kind, _) in KINDS {
        let mut body = entity_body(kind, "e1");
        body["description"] = json!(MARK);
        h.post(a, &format!("/v2/{kind}"), body.to_string())
            .await
            .expect(200);
        h.put(a, &format!("/v2/{kind}/e1"), body.to_string())
            .await
            .expect(200);
    }
    let res = "/v2/plugins/providertypes/fake/keys/r1";
    h.post(a, res, BYTES).await.expect(200);
    h.post(a, res, BYTES).await.expect(200);
    h.post(a, &format!("{res}/versions/1/stage"), "")
        .await
        .expect(200);
    h.post(a, "/v2/plugins/sync", "").await.expect(200);
    h.post(a, &format!("{res}/versions/2/stage"), "")
        .await
        .expect(200);
    h.put(
        user("bob", "acme"),
        "/v2/profile",
        json!({"m": MARK}).to_string(),
    )
    .await
    .expect(200);
}

/// Everything tenant `acme` can see of itself.
async fn view(h: &Harness) -> Value {
    let a = admin("acme");
    let mut versions = Vec::new();
    for (kind, _) in KINDS {
        versions.push(
            h.get(a, &format!("/v2/{kind}/e1/1"))
                .await
                .expect(200)
                .json(),
        );
    }
    json!({
        "export": h.get(a, "/v2/export").await.expect(200).json(),
        "versions": versions,
        "resources": h.get(a, "/v2/plugins/providertypes/fake/keys").await.expect(200).json(),
        "profile": h.get(user("bob", "acme"), "/v2/profile").await.expect(200).json(),
        "tenant": h.get(SA, "/v2/tenants/acme").await.expect(200).json(),
    })
}

/// Every route with tenant A's names, as (method, path, body).
fn requests(acme_id: &str) -> Vec<(Method, String, String)> {
    let mut r: Vec<(Method, String, String)> = Vec::new();
    for (kind, _) in KINDS {
        let body = entity_body(kind, "e1").to_string();
        r.push((Method::GET, format!("/v2/{kind}"), String::new()));
        r.push((Method::GET, format!("/v2/{kind}/e1"), String::new()));
        r.push((Method::GET, format!("/v2/{kind}/e1/1"), String::new()));
        r.push((Method::GET, format!("/v2/{kind}/e1/2"), String::new()));
        r.push((Method::DELETE, format!("/v2/{kind}/e1/2"), String::new()));
        r.push((Method::DELETE, format!("/v2/{kind}/e1"), String::new()));
        r.push((Method::POST, format!("/v2/{kind}"), body.clone()));
        r.push((Method::PUT, format!("/v2/{kind}/e1"), body));
    }
    let res = "/v2/plugins/providertypes/fake/keys";
    let resolve =
        json!({"name": "c", "extends": {"name": "e1"}, "includes": [{"name": "e1"}]}).to_string();
    r.extend([
        (Method::GET, "/v2/export".into(), String::new()),
        (Method::POST, "/v2/resolve".into(), resolve),
        (Method::GET, res.into(), String::new()),
        (Method::GET, format!("{res}/r1"), String::new()),
        (
            Method::GET,
            format!("{res}/r1?status=active"),
            String::new(),
        ),
        (
            Method::POST,
            format!("{res}/r1/versions/1/recall"),
            String::new(),
        ),
        (
            Method::POST,
            format!("{res}/r1/versions/2/recall"),
            String::new(),
        ),
        (
            Method::POST,
            format!("{res}/r1/versions/1/stage"),
            String::new(),
        ),
        (
            Method::DELETE,
            format!("{res}/r1/versions/2"),
            String::new(),
        ),
        (
            Method::DELETE,
            format!("{res}/r1/versions/1"),
            String::new(),
        ),
        (Method::DELETE, format!("{res}/r1"), String::new()),
        (Method::POST, format!("{res}/r1"), "beta bytes".into()),
        (Method::POST, "/v2/plugins/sync".into(), String::new()),
        (Method::GET, "/v2/profile".into(), String::new()),
        (
            Method::PUT,
            "/v2/profile".into(),
            json!({"m": "beta"}).to_string(),
        ),
        (Method::DELETE, "/v2/profile".into(), String::new()),
        (Method::GET, "/v2/metrics/queues".into(), String::new()),
        (
            Method::GET,
            format!("/v2/metrics/nodes/usage?tenant={acme_id}"),
            String::new(),
        ),
        (Method::GET, "/v2/tenants".into(), String::new()),
        (Method::GET, "/v2/tenants/acme".into(), String::new()),
        (
            Method::PUT,
            "/v2/tenants/acme".into(),
            json!({"tenant": {"name": "acme", "maxClusters": 1}}).to_string(),
        ),
        (Method::DELETE, "/v2/tenants/acme".into(), String::new()),
        (Method::GET, "/v2/provisioners".into(), String::new()),
        (Method::GET, "/v2/apikeys".into(), String::new()),
        (
            Method::POST,
            "/v2/apikeys".into(),
            json!({"tenant": "acme", "user": "admin", "admin": true}).to_string(),
        ),
        // Import last: it wipes the caller's own catalog, and only that.
        (Method::POST, "/v2/import".into(), "{}".into()),
    ]);
    r
}

#[tokio::test]
async fn another_tenant_can_neither_read_nor_change_anything() {
    let h = Harness::new().await;
    acme(&h).await;
    let acme_id = h.tenant_id("acme").await;
    let before = view(&h).await;
    assert!(before.to_string().contains(MARK));
    for who in [admin("beta"), user("bob", "beta")] {
        for (m, path, body) in requests(&acme_id) {
            let r = h.call(Some(who), m.clone(), &path, body).await;
            let text = r.text();
            assert!(
                r.status.as_u16() < 500,
                "{who:?} {m} {path}: {} {text}",
                r.status
            );
            for secret in [MARK, BYTES, "acme", acme_id.as_str()] {
                // A message may echo what the caller sent.
                if path.contains(secret) {
                    continue;
                }
                assert!(
                    !text.contains(secret),
                    "{who:?} {m} {path} leaked {secret}: {text}"
                );
            }
        }
        assert_eq!(view(&h).await, before, "{who:?} changed tenant acme");
    }
    // Beta's own writes landed in beta only.
    let beta = h.get(admin("beta"), "/v2/profile").await;
    assert!(!beta.text().contains(MARK));
    // A resource download names the tenant by id: beta's id does not reach acme's bytes.
    let beta_id = h.tenant_id("beta").await;
    let path = format!("/v2/tenants/{beta_id}/providertypes/fake/keys/r1/versions/2");
    assert!(!h
        .internal(Method::GET, &path, "")
        .await
        .text()
        .contains(BYTES));
    let path = format!("/v2/tenants/{acme_id}/providertypes/fake/keys/r1/versions/2");
    assert_eq!(
        h.internal(Method::GET, &path, "").await.expect(200).text(),
        BYTES
    );
}

#[tokio::test]
async fn the_superadmin_tenant_is_isolated_too() {
    let h = Harness::new().await;
    h.tenant("beta").await;
    h.post(
        SA,
        "/v2/providers",
        entity_body("providers", "sa-only").to_string(),
    )
    .await
    .expect(200);
    assert_eq!(
        h.get(admin("beta"), "/v2/providers")
            .await
            .expect(200)
            .json(),
        json!([])
    );
    h.get(admin("beta"), "/v2/providers/sa-only")
        .await
        .expect(404);
    h.delete(admin("beta"), "/v2/providers/sa-only")
        .await
        .expect(200);
    h.get(SA, "/v2/providers/sa-only").await.expect(200);
}

/// Routes that only a tenant admin may use, with bodies that would succeed for one.
fn admin_writes() -> Vec<(Method, String, String)> {
    let mut r = Vec::new();
    for (kind, _) in KINDS {
        r.push((
            Method::POST,
            format!("/v2/{kind}"),
            entity_body(kind, "new").to_string(),
        ));
        r.push((
            Method::PUT,
            format!("/v2/{kind}/e1"),
            entity_body(kind, "e1").to_string(),
        ));
        r.push((Method::DELETE, format!("/v2/{kind}/e1"), String::new()));
        r.push((Method::DELETE, format!("/v2/{kind}/e1/1"), String::new()));
    }
    r.push((Method::POST, "/v2/import".into(), "{}".into()));
    r.push((
        Method::POST,
        "/v2/plugins/providertypes/fake/keys/r9".into(),
        "x".into(),
    ));
    r.push((Method::POST, "/v2/plugins/sync".into(), String::new()));
    r.push((Method::GET, "/v2/metrics/queues".into(), String::new()));
    r
}

/// Routes only the superadmin may use; others get an empty 403.
fn superadmin_routes() -> Vec<(Method, String, String)> {
    vec![
        (Method::GET, "/v2/tenants".into(), String::new()),
        (Method::GET, "/v2/tenants/acme".into(), String::new()),
        (
            Method::POST,
            "/v2/tenants".into(),
            json!({"tenant": {"name": "zzz"}}).to_string(),
        ),
        (
            Method::PUT,
            "/v2/tenants/zzz".into(),
            json!({"tenant": {"name": "zzz"}}).to_string(),
        ),
        (Method::DELETE, "/v2/tenants/beta".into(), String::new()),
        (
            Method::DELETE,
            "/v2/plugins/providertypes/fake".into(),
            String::new(),
        ),
        (
            Method::DELETE,
            "/v2/plugins/automatortypes/shell/1".into(),
            String::new(),
        ),
        (Method::GET, "/v2/provisioners".into(), String::new()),
        (Method::GET, "/v2/provisioners/p1".into(), String::new()),
        (Method::GET, "/v2/apikeys".into(), String::new()),
        (
            Method::POST,
            "/v2/apikeys".into(),
            json!({"tenant": "acme", "user": "u"}).to_string(),
        ),
        (Method::DELETE, "/v2/apikeys/any".into(), String::new()),
    ]
}

#[tokio::test]
async fn roles_gate_writes() {
    let h = Harness::new().await;
    acme(&h).await;
    h.provisioner("p1", 1).await;
    let before = view(&h).await;
    let users: [Who; 2] = [user("bob", "acme"), user("admin2", "acme")];
    for who in users {
        for (m, path, body) in admin_writes() {
            let r = h.call(Some(who), m.clone(), &path, body).await;
            assert_eq!(r.status.as_u16(), 403, "{who:?} {m} {path}: {}", r.text());
        }
    }
    assert_eq!(view(&h).await, before);
    for who in [
        admin("acme"),
        user("bob", "acme"),
        user("bob", "superadmin"),
    ] {
        for (m, path, body) in superadmin_routes() {
            let r = h.call(Some(who), m.clone(), &path, body).await;
            assert_eq!(r.status.as_u16(), 403, "{who:?} {m} {path}: {}", r.text());
            assert!(
                r.body.is_empty(),
                "{who:?} {m} {path}: 403 body should be empty: {}",
                r.text()
            );
        }
    }
    assert_eq!(view(&h).await, before);
    h.get(SA, "/v2/tenants/beta").await.expect(200);
    h.get(SA, "/v2/tenants/zzz").await.expect(404);
    h.get(SA, "/v2/plugins/providertypes/fake")
        .await
        .expect(200);
    assert_eq!(
        h.get(SA, "/v2/plugins/automatortypes/shell")
            .await
            .expect(200)
            .json()["version"],
        1
    );
    assert!(h.app.state.store.list_api_keys().await.unwrap().is_empty());
}
