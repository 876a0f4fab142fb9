//! `/v2/export`, `/v2/import` and `/v2/resolve` (§4.4).

use serde_json::json;

use crate::common::{admin, entity_body, user, Harness, KINDS, SA};

#[tokio::test]
async fn export_has_six_keys_with_latest_versions() {
    let h = Harness::new().await;
    let empty = h.get(SA, "/v2/export").await.expect(200).json();
    let keys: Vec<&str> = empty
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "providers",
            "hardwaretypes",
            "imagetypes",
            "services",
            "clustertemplates",
            "partialtemplates"
        ]
    );
    for (kind, _) in KINDS {
        h.post(
            SA,
            &format!("/v2/{kind}"),
            entity_body(kind, "e").to_string(),
        )
        .await
        .expect(200);
        h.put(
            SA,
            &format!("/v2/{kind}/e"),
            entity_body(kind, "e").to_string(),
        )
        .await
        .expect(200);
    }
    let ex = h
        .get(user("bob", "superadmin"), "/v2/export")
        .await
        .expect(200)
        .json();
    for (kind, _) in KINDS {
        let items = ex[kind].as_array().unwrap();
        assert_eq!(items.len(), 1, "{kind}");
        assert_eq!(items[0]["version"], 2, "{kind}");
    }
}

#[tokio::test]
async fn import_replaces_everything_and_missing_kinds_end_up_empty() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let a = admin("acme");
    for (kind, _) in KINDS {
        h.post(
            a,
            &format!("/v2/{kind}"),
            entity_body(kind, "old").to_string(),
        )
        .await
        .expect(200);
    }
    let body = json!({
        "providers": [entity_body("providers", "p1")],
        "services": [entity_body("services", "s1"), entity_body("services", "s2")],
    });
    // The answer names what the imported entries lack, each prefixed with its entry.
    let w = h
        .post(a, "/v2/import", body.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(
        w["warnings"][0]["field"], "providers/p1.providertype",
        "{w}"
    );
    let ex = h.get(a, "/v2/export").await.expect(200).json();
    let names = |k: &str| -> Vec<String> {
        ex[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("providers"), ["p1"]);
    assert_eq!(names("services"), ["s1", "s2"]);
    for k in [
        "hardwaretypes",
        "imagetypes",
        "clustertemplates",
        "partialtemplates",
    ] {
        assert!(
            names(k).is_empty(),
            "{k} should be empty after import: {ex}"
        );
    }
    // An export imports back unchanged.
    h.post(a, "/v2/import", ex.to_string()).await.expect(200);
    let again = h.get(a, "/v2/export").await.expect(200).json();
    assert_eq!(
        names("providers"),
        again["providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    );
    // Plugin types are untouched by import.
    h.plugin_types().await;
    h.post(SA, "/v2/import", "{}").await.expect(200);
    assert_eq!(
        h.get(a, "/v2/plugins/providertypes")
            .await
            .expect(200)
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn import_is_admin_only_and_checks_its_body() {
    let h = Harness::new().await;
    h.post(
        SA,
        "/v2/providers",
        entity_body("providers", "keep").to_string(),
    )
    .await
    .expect(200);
    h.post(user("bob", "superadmin"), "/v2/import", "{}")
        .await
        .expect(403);
    let r = h.post(SA, "/v2/import", "{nope").await.expect(400);
    assert!(r.text().starts_with("Json syntax error"), "{}", r.text());
    h.post(SA, "/v2/import", "[1,2]").await.expect(400);
    let r = h
        .post(SA, "/v2/import", json!({"providers": {"a": 1}}).to_string())
        .await
        .expect(400);
    assert!(r.text().contains("providers"), "{}", r.text());
    let r = h
        .post(
            SA,
            "/v2/import",
            json!({"services": [{"name": "bad name"}]}).to_string(),
        )
        .await
        .expect(400);
    assert!(r.text().contains("services[0]"), "{}", r.text());
    // A failed import changes nothing.
    h.get(SA, "/v2/providers/keep").await.expect(200);
}

#[tokio::test]
async fn resolve_merges_extends_and_includes() {
    let h = Harness::new().await;
    let base = json!({"name": "base", "defaults": {"services": ["base-svc"], "provider": "p1",
                      "config": {"a": 1}}, "compatibility": {"services": ["base-svc"]}});
    h.post(SA, "/v2/clustertemplates", base.to_string())
        .await
        .expect(200);
    let sensu = json!({"name": "sensu", "immutable": true, "defaults": {"services": ["sensu"], "config": {"sensu": {"on": true}}},
                       "compatibility": {"services": ["sensu"]}});
    h.post(SA, "/v2/partialtemplates", sensu.to_string())
        .await
        .expect(200);
    let own = json!({"name": "child", "extends": {"name": "base"}, "includes": [{"name": "sensu"}],
                     "defaults": {"services": ["app"], "config": {"b": 2}}});
    let r = h
        .post(user("bob", "superadmin"), "/v2/resolve", own.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(r["name"], "child");
    assert_eq!(r["defaults"]["provider"], "p1");
    let services: Vec<&str> = r["defaults"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for s in ["base-svc", "sensu", "app"] {
        assert!(services.contains(&s), "{s} missing from {services:?}");
    }
    assert_eq!(r["defaults"]["config"]["a"], 1);
    assert_eq!(r["defaults"]["config"]["b"], 2);
    assert_eq!(r["defaults"]["config"]["sensu"], json!({"on": true}));
    // As Coopr answers: the merged template keeps what it extends and includes.
    assert_eq!(r["extends"], json!({"name": "base"}));
    assert_eq!(r["includes"], json!([{"name": "sensu"}]));
    // Nothing was written.
    h.get(SA, "/v2/clustertemplates/child").await.expect(404);

    // An immutable partial's keys cannot be overridden: the stored partial refuses it (409).
    let over = json!({"name": "c2", "extends": {"name": "base"}, "includes": [{"name": "sensu"}],
                      "defaults": {"config": {"sensu": {"on": false}}}});
    h.post(SA, "/v2/resolve", over.to_string())
        .await
        .expect_text(409, "sensu can't be overridden due immutability.");
    // Missing parent or partial: 404.
    let orphan = json!({"name": "c3", "extends": {"name": "nope"}, "defaults": {"services": ["x"], "provider": "p"}});
    h.post(SA, "/v2/resolve", orphan.to_string())
        .await
        .expect(404);
    let orphan = json!({"name": "c3", "includes": [{"name": "nope"}], "defaults": {"services": ["x"], "provider": "p"}});
    h.post(SA, "/v2/resolve", orphan.to_string())
        .await
        .expect(404);
    // No default provider (or services) after the merge: 400.
    let bare = json!({"name": "c4", "defaults": {"services": ["x"]}});
    h.post(SA, "/v2/resolve", bare.to_string())
        .await
        .expect_text(400, "default provider must be specified");
    let bare = json!({"name": "c4", "defaults": {"provider": "p"}});
    h.post(SA, "/v2/resolve", bare.to_string())
        .await
        .expect(400);
    h.post(SA, "/v2/resolve", "").await.expect(400);
    h.post(SA, "/v2/resolve", "{'name':").await.expect(400);
}

#[tokio::test]
async fn resolve_refuses_circular_inheritance() {
    let h = Harness::new().await;
    let a = json!({"name": "a", "extends": {"name": "b"}});
    let b = json!({"name": "b", "extends": {"name": "a"}});
    h.post(SA, "/v2/clustertemplates", a.to_string())
        .await
        .expect(200);
    h.post(SA, "/v2/clustertemplates", b.to_string())
        .await
        .expect(200);
    let own = json!({"name": "c", "extends": {"name": "a"}, "defaults": {"services": ["x"], "provider": "p"}});
    // The stored templates make the cycle: the request is fine, the catalog cannot serve it.
    let r = h.post(SA, "/v2/resolve", own.to_string()).await;
    assert_eq!(r.status.as_u16(), 409, "{}", r.text());
    assert!(r.text().contains("circular"), "{}", r.text());
}

/// Coopr's router ignores one trailing `/`, and Coopr's own Java client sends one
/// (`.../scripts/?status=INACTIVE`): every kind of route answers the same with it.
#[tokio::test]
async fn one_trailing_slash_is_ignored_on_every_kind_of_route() {
    use axum::http::Method;
    let h = Harness::new().await;
    h.tenant("acme").await;
    let a = admin("acme");
    let hw = json!({"name": "small", "providermap": {"p": {"flavor": "s"}}});
    h.post(a, "/v2/hardwaretypes/", hw.to_string())
        .await
        .expect(200);
    h.get(a, "/v2/hardwaretypes/").await.expect(200);
    h.get(a, "/v2/hardwaretypes/small/").await.expect(200);
    h.get(a, "/v2/hardwaretypes/small/1/").await.expect(200);
    h.put(a, "/v2/hardwaretypes/small/", hw.to_string())
        .await
        .expect(200);
    h.get(a, "/v2/clusters/?status=active").await.expect(200);
    h.get(SA, "/v2/tenants/").await.expect(200);
    h.get(SA, "/v2/plugins/automatortypes/?status=INACTIVE")
        .await
        .expect(200);
    h.get(a, "/v2/export/").await.expect(200);
    h.get(a, "/status/").await.expect(200);
    let r = h
        .internal(
            Method::PUT,
            "/v2/provisioners/p1/",
            json!({"id": "p1", "host": "127.0.0.1", "port": 1, "capacityTotal": 1}).to_string(),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    h.delete(a, "/v2/hardwaretypes/small/").await.expect(200);
    h.get(a, "/v2/hardwaretypes/small").await.expect(404);
    // Only one: two slashes name nothing.
    h.get(a, "/v2/hardwaretypes//").await.expect(404);
}
