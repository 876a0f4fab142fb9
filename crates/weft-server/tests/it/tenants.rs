//! `/v2/tenants` (§4.2): superadmin only, capacity checks, PUT-creates, delete rules and bootstrap.

use axum::http::Method;
use serde_json::json;

use crate::common::{admin, entity_body, user, Harness, SA};

#[tokio::test]
async fn only_the_superadmin_manages_tenants_and_others_get_an_empty_403() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let body = json!({"tenant": {"name": "other"}}).to_string();
    for who in [
        admin("acme"),
        user("bob", "acme"),
        user("bob", "superadmin"),
    ] {
        for r in [
            h.get(who, "/v2/tenants").await,
            h.get(who, "/v2/tenants/acme").await,
            h.post(who, "/v2/tenants", body.clone()).await,
            h.put(who, "/v2/tenants/other", body.clone()).await,
            h.delete(who, "/v2/tenants/acme").await,
        ] {
            let r = r.expect(403);
            assert!(r.body.is_empty(), "403 body should be empty: {}", r.text());
        }
    }
    assert!(h
        .app
        .state
        .store
        .tenant_by_name("other")
        .await
        .unwrap()
        .is_none());
    assert!(h
        .app
        .state
        .store
        .tenant_by_name("acme")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn list_and_get_show_specifications_without_ids() {
    let h = Harness::new().await;
    let body = json!({"tenant": {"name": "acme", "description": "Acme", "workers": 0, "maxClusters": 5, "maxNodes": 50}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect_text(200, "");
    let list = h.get(SA, "/v2/tenants").await.expect(200).json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"superadmin") && names.contains(&"acme"),
        "{list}"
    );
    let sa = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "superadmin")
        .unwrap();
    assert_eq!(sa["maxClusters"], 2147483647);
    assert_eq!(sa["maxNodes"], 2147483647);
    assert_eq!(sa["workers"], 0);
    let t = h.get(SA, "/v2/tenants/acme").await.expect(200).json();
    assert_eq!(
        t,
        json!({"name": "acme", "description": "Acme", "workers": 0, "maxClusters": 5, "maxNodes": 50})
    );
    h.get(SA, "/v2/tenants/nosuch")
        .await
        .expect_text(404, "tenant nosuch not found");
    // Defaults for the quotas.
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "plain"}}).to_string(),
    )
    .await
    .expect(200);
    let t = h.get(SA, "/v2/tenants/plain").await.expect(200).json();
    assert_eq!(
        t,
        json!({"name": "plain", "workers": 0, "maxClusters": 2147483647, "maxNodes": 2147483647})
    );
}

#[tokio::test]
async fn post_conflicts_and_capacity() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let again = json!({"tenant": {"name": "acme"}}).to_string();
    h.post(SA, "/v2/tenants", again).await.expect(409);
    // No provisioners: any workers is a shortfall, zero is fine.
    let r = h
        .post(
            SA,
            "/v2/tenants",
            json!({"tenant": {"name": "busy", "workers": 1}}).to_string(),
        )
        .await;
    r.expect(409);
    assert!(h
        .app
        .state
        .store
        .tenant_by_name("busy")
        .await
        .unwrap()
        .is_none());
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "idle", "workers": 0}}).to_string(),
    )
    .await
    .expect(200);
    // With capacity 3, 2 fit and then 2 more do not.
    h.provisioner("p1", 3).await;
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "busy", "workers": 2}}).to_string(),
    )
    .await
    .expect(200);
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "more", "workers": 2}}).to_string(),
    )
    .await
    .expect(409);
    // Raising a tenant's own workers counts its current workers as free.
    h.put(
        SA,
        "/v2/tenants/busy",
        json!({"tenant": {"name": "busy", "workers": 3}}).to_string(),
    )
    .await
    .expect(200);
    h.put(
        SA,
        "/v2/tenants/busy",
        json!({"tenant": {"name": "busy", "workers": 4}}).to_string(),
    )
    .await
    .expect(409);
    // A missing tenant object is a 400.
    h.post(SA, "/v2/tenants", json!({"bootstrap": false}).to_string())
        .await
        .expect(400);
    h.post(SA, "/v2/tenants", "").await.expect(400);
}

#[tokio::test]
async fn put_creates_unknown_and_rejects_name_mismatch() {
    let h = Harness::new().await;
    let body = json!({"tenant": {"name": "fresh", "maxClusters": 3}}).to_string();
    h.put(SA, "/v2/tenants/fresh", body)
        .await
        .expect_text(200, "");
    assert_eq!(
        h.get(SA, "/v2/tenants/fresh").await.expect(200).json()["maxClusters"],
        3
    );
    let body = json!({"tenant": {"name": "fresh", "maxClusters": 7}}).to_string();
    h.put(SA, "/v2/tenants/fresh", body).await.expect(200);
    assert_eq!(
        h.get(SA, "/v2/tenants/fresh").await.expect(200).json()["maxClusters"],
        7
    );
    let id_before = h.tenant_id("fresh").await;
    let r = h
        .put(
            SA,
            "/v2/tenants/fresh",
            json!({"tenant": {"name": "other"}}).to_string(),
        )
        .await
        .expect(400);
    assert!(
        r.text().contains("other") && r.text().contains("fresh"),
        "{}",
        r.text()
    );
    assert_eq!(
        h.tenant_id("fresh").await,
        id_before,
        "an update keeps the internal id"
    );
}

#[tokio::test]
async fn delete_rules() {
    let h = Harness::new().await;
    h.delete(SA, "/v2/tenants/superadmin")
        .await
        .expect_text(403, "Superadmin cannot be deleted.");
    h.delete(SA, "/v2/tenants/never-was")
        .await
        .expect_text(200, "");
    h.provisioner("p1", 5).await;
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "busy", "workers": 2}}).to_string(),
    )
    .await
    .expect(200);
    h.delete(SA, "/v2/tenants/busy").await.expect(409);
    assert!(h
        .app
        .state
        .store
        .tenant_by_name("busy")
        .await
        .unwrap()
        .is_some());
    h.put(
        SA,
        "/v2/tenants/busy",
        json!({"tenant": {"name": "busy", "workers": 0}}).to_string(),
    )
    .await
    .expect(200);
    h.delete(SA, "/v2/tenants/busy").await.expect(200);
    h.get(SA, "/v2/tenants/busy").await.expect(404);
    // The tenant's callers are gone with it.
    h.get(admin("busy"), "/v2/providers")
        .await
        .expect_text(404, "Tenant does not exist.");
}

#[tokio::test]
async fn bootstrap_copies_the_superadmin_catalog_and_resources() {
    let h = Harness::new().await;
    h.plugin_types().await;
    for (kind, _) in crate::common::KINDS {
        h.post(
            SA,
            &format!("/v2/{kind}"),
            entity_body(kind, "base").to_string(),
        )
        .await
        .expect(200);
    }
    let up = h
        .post(SA, "/v2/plugins/providertypes/fake/keys/dev", "KEYBYTES")
        .await
        .expect(200)
        .json();
    assert_eq!(up["version"], 1);
    h.post(
        SA,
        "/v2/plugins/providertypes/fake/keys/dev/versions/1/stage",
        "",
    )
    .await
    .expect(200);
    h.post(SA, "/v2/plugins/sync", "").await.expect(200);

    let body = json!({"tenant": {"name": "boot", "workers": "0"}, "bootstrap": "true"}).to_string();
    h.post(SA, "/v2/tenants", body).await.expect(200);
    h.tenant("bare").await;
    let sa_export = h.get(SA, "/v2/export").await.expect(200).json();
    let boot_export = h.get(admin("boot"), "/v2/export").await.expect(200).json();
    assert_eq!(sa_export, boot_export);
    let bare = h.get(admin("bare"), "/v2/export").await.expect(200).json();
    for (kind, _) in crate::common::KINDS {
        assert_eq!(
            bare[kind],
            json!([]),
            "{kind} of a tenant made without bootstrap"
        );
    }
    let res = h
        .get(admin("boot"), "/v2/plugins/providertypes/fake/keys")
        .await
        .expect(200)
        .json();
    assert_eq!(
        res,
        json!({"dev": [{"name": "dev", "version": 1, "status": "active"}]})
    );
    // The bytes came along, under the new tenant's id.
    let id = h.tenant_id("boot").await;
    let r = h
        .internal(
            Method::GET,
            &format!("/v2/tenants/{id}/providertypes/fake/keys/dev/versions/1"),
            "",
        )
        .await;
    assert_eq!(r.expect(200).body, b"KEYBYTES");
}
