//! Plugin types and plugin resources (§4.5), including the unreachable-GET quirk (§7.9).

use axum::http::Method;
use serde_json::json;

use crate::common::{admin, user, Harness, SA};

#[tokio::test]
async fn plugin_types_register_internally_and_read_globally() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.plugin_types().await;
    let pt = json!({"name": "fake", "parameters": {}});
    // Externally the path exists only for GET and DELETE.
    h.put(SA, "/v2/plugins/providertypes/fake", pt.to_string())
        .await
        .expect(405);
    for who in [SA, admin("acme"), user("bob", "acme")] {
        let list = h
            .get(who, "/v2/plugins/providertypes")
            .await
            .expect(200)
            .json();
        assert_eq!(list.as_array().unwrap().len(), 1);
        assert_eq!(list[0]["name"], "fake");
        let one = h
            .get(who, "/v2/plugins/providertypes/fake")
            .await
            .expect(200)
            .json();
        assert_eq!(one["version"], 1);
        assert_eq!(
            one["resourceTypes"]["keys"],
            json!({"format": "file", "permissions": "0400"})
        );
        assert_eq!(
            one["parameters"]["admin"]["fields"]["secret"]["sensitive"],
            true
        );
        assert_eq!(one["parameters"]["admin"]["required"], json!([["region"]]));
        let list = h
            .get(who, "/v2/plugins/automatortypes")
            .await
            .expect(200)
            .json();
        assert_eq!(list[0]["name"], "shell");
    }
    h.get(SA, "/v2/plugins/providertypes/nope")
        .await
        .expect(404);
    h.get(SA, "/v2/plugins/widgets").await.expect(404);
    // A second registration writes version 2.
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/fake",
        pt.to_string(),
    )
    .await
    .expect(200);
    assert_eq!(
        h.get(SA, "/v2/plugins/providertypes/fake")
            .await
            .expect(200)
            .json()["version"],
        2
    );
    // Registration checks.
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/other",
        pt.to_string(),
    )
    .await
    .expect(400);
    h.internal(Method::PUT, "/v2/plugins/widgets/fake", pt.to_string())
        .await
        .expect(404);
    let bad = json!({"name": "x", "parameters": {"admin": {"fields": {"a": {"label": "A", "type": "text"}}, "required": [["b"]]}}});
    h.internal(Method::PUT, "/v2/plugins/providertypes/x", bad.to_string())
        .await
        .expect(400);
    let bad =
        json!({"name": "x", "resourceTypes": {"k": {"format": "archive", "permissions": "0400"}}});
    h.internal(Method::PUT, "/v2/plugins/providertypes/x", bad.to_string())
        .await
        .expect(400);
    let bad = json!({"name": "x", "resourceTypes": {"k": {"format": "FILE"}}});
    h.internal(Method::PUT, "/v2/plugins/providertypes/x", bad.to_string())
        .await
        .expect(400);
    h.internal(Method::PUT, "/v2/plugins/providertypes/x", "[]")
        .await
        .expect(400);
}

#[tokio::test]
async fn only_the_superadmin_deletes_plugin_types() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.plugin_types().await;
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/fake",
        json!({"name": "fake"}).to_string(),
    )
    .await
    .expect(200);
    for who in [
        admin("acme"),
        user("bob", "acme"),
        user("bob", "superadmin"),
    ] {
        for path in [
            "/v2/plugins/providertypes/fake",
            "/v2/plugins/providertypes/fake/1",
        ] {
            let r = h.delete(who, path).await.expect(403);
            assert!(r.body.is_empty(), "{}", r.text());
        }
    }
    h.delete(SA, "/v2/plugins/providertypes/fake/2")
        .await
        .expect_text(200, "");
    assert_eq!(
        h.get(SA, "/v2/plugins/providertypes/fake")
            .await
            .expect(200)
            .json()["version"],
        1
    );
    h.delete(SA, "/v2/plugins/providertypes/fake/x")
        .await
        .expect_text(400, "Version must be a number");
    h.delete(SA, "/v2/plugins/providertypes/fake")
        .await
        .expect(200);
    h.get(SA, "/v2/plugins/providertypes/fake")
        .await
        .expect(404);
    h.delete(SA, "/v2/plugins/automatortypes/never")
        .await
        .expect(200);
}

#[tokio::test]
async fn get_of_a_plugin_type_version_reaches_resource_listing() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.plugin_types().await;
    h.get(admin("acme"), "/v2/plugins/providertypes/fake/1")
        .await
        .expect_text(404, "1 for provider plugin fake not found.");
    h.get(user("bob", "acme"), "/v2/plugins/providertypes/fake/1")
        .await
        .expect(403);
}

#[tokio::test]
async fn resource_lifecycle() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.plugin_types().await;
    let a = admin("acme");
    let base = "/v2/plugins/automatortypes/shell/scripts";
    let r = h
        .post(a, &format!("{base}/setup"), vec![0u8, 159, 146, 150, 1])
        .await
        .expect(200);
    assert_eq!(
        r.json(),
        json!({"name": "setup", "version": 1, "status": "inactive"})
    );
    let r = h
        .post(a, &format!("{base}/setup"), "second")
        .await
        .expect(200);
    assert_eq!(
        r.json(),
        json!({"name": "setup", "version": 2, "status": "inactive"})
    );
    h.post(a, &format!("{base}/other"), "x").await.expect(200);

    let all = h.get(a, base).await.expect(200).json();
    assert_eq!(
        all,
        json!({
            "other": [{"name": "other", "version": 1, "status": "inactive"}],
            "setup": [{"name": "setup", "version": 1, "status": "inactive"}, {"name": "setup", "version": 2, "status": "inactive"}],
        })
    );

    // stage: inactive -> staged; sync: staged -> active.
    h.post(a, &format!("{base}/setup/versions/1/stage"), "")
        .await
        .expect_text(200, "");
    let staged = h
        .get(a, &format!("{base}/setup?status=STAGED"))
        .await
        .expect(200)
        .json();
    assert_eq!(
        staged,
        json!([{"name": "setup", "version": 1, "status": "staged"}])
    );
    h.get(a, &format!("{base}?status=bogus"))
        .await
        .expect_text(400, "invalid status filter.");
    h.get(a, &format!("{base}/setup?status=bogus"))
        .await
        .expect_text(400, "invalid status filter.");
    // A staged version is not deletable, nor is the name as a whole.
    h.delete(a, &format!("{base}/setup/versions/1"))
        .await
        .expect_text(409, "Resource not in a deletable state.");
    h.delete(a, &format!("{base}/setup"))
        .await
        .expect_text(409, "Resource not in a deletable state.");
    h.post(a, "/v2/plugins/sync", "").await.expect_text(200, "");
    let active = h
        .get(a, &format!("{base}?status=active"))
        .await
        .expect(200)
        .json();
    assert_eq!(
        active,
        json!({"setup": [{"name": "setup", "version": 1, "status": "active"}]})
    );
    // recall: active -> recalled; stage again: recalled -> active.
    h.post(a, &format!("{base}/setup/versions/1/recall"), "")
        .await
        .expect(200);
    let v = h
        .get(a, &format!("{base}/setup?status=recalled"))
        .await
        .expect(200)
        .json();
    assert_eq!(
        v,
        json!([{"name": "setup", "version": 1, "status": "recalled"}])
    );
    h.post(a, &format!("{base}/setup/versions/1/stage"), "")
        .await
        .expect(200);
    let v = h
        .get(a, &format!("{base}/setup?status=active"))
        .await
        .expect(200)
        .json();
    assert_eq!(
        v,
        json!([{"name": "setup", "version": 1, "status": "active"}])
    );
    // recall then sync: recalled -> inactive, now deletable.
    h.post(a, &format!("{base}/setup/versions/1/recall"), "")
        .await
        .expect(200);
    h.post(a, "/v2/plugins/sync", "").await.expect(200);
    let v = h
        .get(a, &format!("{base}/setup?status=inactive"))
        .await
        .expect(200)
        .json();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    // staged -> inactive on recall.
    h.post(a, &format!("{base}/setup/versions/2/stage"), "")
        .await
        .expect(200);
    h.post(a, &format!("{base}/setup/versions/2/recall"), "")
        .await
        .expect(200);
    let v = h
        .get(a, &format!("{base}/setup?status=inactive"))
        .await
        .expect(200)
        .json();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");

    // Missing versions and bad versions.
    h.post(a, &format!("{base}/setup/versions/9/stage"), "")
        .await
        .expect(404);
    h.post(a, &format!("{base}/setup/versions/9/recall"), "")
        .await
        .expect(404);
    h.post(a, &format!("{base}/setup/versions/x/stage"), "")
        .await
        .expect_text(400, "Version must be a number");
    h.post(a, &format!("{base}/setup/versions/0/recall"), "")
        .await
        .expect(400);
    h.delete(a, &format!("{base}/setup/versions/x"))
        .await
        .expect(400);

    // Download on the internal port returns the bytes.
    let id = h.tenant_id("acme").await;
    let dl = |v: &str| format!("/v2/tenants/{id}/automatortypes/shell/scripts/setup/versions/{v}");
    let r = h.internal(Method::GET, &dl("1"), "").await.expect(200);
    assert_eq!(r.body, vec![0u8, 159, 146, 150, 1]);
    assert_eq!(
        h.internal(Method::GET, &dl("2"), "").await.expect(200).body,
        b"second"
    );
    h.internal(Method::GET, &dl("3"), "")
        .await
        .expect_text(404, "Resource not found.");
    h.internal(Method::GET, &dl("abc"), "").await.expect(400);
    let other = "/v2/tenants/nosuch/automatortypes/shell/scripts/setup/versions/1";
    h.internal(Method::GET, other, "")
        .await
        .expect_text(404, "Resource not found.");
    // Not on the external port.
    h.get(a, &dl("1")).await.expect(404);

    // Delete one inactive version, then the rest.
    h.delete(a, &format!("{base}/setup/versions/2"))
        .await
        .expect_text(200, "");
    h.internal(Method::GET, &dl("2"), "").await.expect(404);
    h.delete(a, &format!("{base}/setup")).await.expect(200);
    h.internal(Method::GET, &dl("1"), "").await.expect(404);
    assert_eq!(
        h.get(a, &format!("{base}/setup")).await.expect(200).json(),
        json!([])
    );
    // A later upload starts over at 1.
    let r = h
        .post(a, &format!("{base}/setup"), "again")
        .await
        .expect(200)
        .json();
    assert_eq!(r["version"], 1);
}

#[tokio::test]
async fn resource_routes_are_admin_only_and_check_types() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.plugin_types().await;
    let (a, u) = (admin("acme"), user("bob", "acme"));
    h.post(a, "/v2/plugins/providertypes/fake/keys/k1", "x")
        .await
        .expect(200);
    let base = "/v2/plugins/providertypes/fake/keys";
    let forbidden = [
        (Method::GET, base.to_string()),
        (Method::GET, format!("{base}/k1")),
        (Method::POST, format!("{base}/k1")),
        (Method::POST, format!("{base}/k1/versions/1/stage")),
        (Method::POST, format!("{base}/k1/versions/1/recall")),
        (Method::DELETE, format!("{base}/k1")),
        (Method::DELETE, format!("{base}/k1/versions/1")),
        (Method::POST, "/v2/plugins/sync".to_string()),
        // The admin check runs before existence checks.
        (
            Method::GET,
            "/v2/plugins/providertypes/nope/keys".to_string(),
        ),
        (
            Method::POST,
            "/v2/plugins/providertypes/fake/nope/k1".to_string(),
        ),
    ];
    for (m, p) in forbidden {
        let r = h.call(Some(u), m.clone(), &p, "y").await;
        assert_eq!(r.status.as_u16(), 403, "{m} {p}: {}", r.text());
    }
    assert_eq!(
        h.get(a, &format!("{base}/k1"))
            .await
            .expect(200)
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Unknown resource type or plugin: 404 with Coopr's messages.
    h.post(a, "/v2/plugins/providertypes/fake/nope/k1", "x")
        .await
        .expect_text(404, "nope for provider plugin fake not found.");
    h.get(a, "/v2/plugins/automatortypes/nonexistent/scripts")
        .await
        .expect_text(404, "automator plugin nonexistent not found.");
    h.get(a, "/v2/plugins/automatortypes/shell/keys")
        .await
        .expect_text(404, "keys for automator plugin shell not found.");
    h.post(a, "/v2/plugins/widgets/fake/keys/k1", "x")
        .await
        .expect(404);
    // Bad resource names are refused.
    let r = h
        .post(a, "/v2/plugins/providertypes/fake/keys/bad%20name", "x")
        .await
        .expect(400);
    assert!(r.text().contains("resource name"), "{}", r.text());
    let long = "r".repeat(256);
    h.post(
        a,
        &format!("/v2/plugins/providertypes/fake/keys/{long}"),
        "x",
    )
    .await
    .expect(400);
    h.post(a, "/v2/plugins/providertypes/fake/keys/..", "x")
        .await
        .expect(400);
}
