//! Sensitive provider fields: every answer shows `********`, never the secret; writing the mask back
//! keeps the stored secret.

use serde_json::{json, Value};
use weft_model::EntityKind;

use crate::common::{admin, user, Harness, SA};

const SECRET: &str = "S3CR3T-value";
const MASK: &str = "********";

async fn stored(h: &Harness, tenant: &str, version: Option<u64>) -> Value {
    let id = h.tenant_id(tenant).await;
    h.app
        .state
        .store
        .get_entity(&id, EntityKind::Provider, "p", version)
        .await
        .unwrap()
        .expect("stored provider")
}

#[tokio::test]
async fn secrets_are_masked_everywhere_and_kept_on_write_back() {
    let h = Harness::new().await;
    h.plugin_types().await;
    h.tenant("acme").await;
    let a = admin("acme");
    let p = json!({"name": "p", "providertype": "fake", "provisioner": {"region": "r1", "secret": SECRET}});
    h.post(a, "/v2/providers", p.to_string()).await.expect(200);
    assert_eq!(
        stored(&h, "acme", None).await["provisioner"]["secret"],
        SECRET
    );

    for who in [a, user("bob", "acme")] {
        for path in [
            "/v2/providers/p",
            "/v2/providers/p/1",
            "/v2/providers",
            "/v2/export",
        ] {
            let r = h.get(who, path).await.expect(200);
            assert!(
                !r.text().contains(SECRET),
                "{path} shows the secret: {}",
                r.text()
            );
            assert!(r.text().contains(MASK), "{path}: {}", r.text());
        }
    }
    let got = h.get(a, "/v2/providers/p").await.expect(200).json();
    assert_eq!(got["provisioner"], json!({"region": "r1", "secret": MASK}));

    // Writing the masked answer back keeps the secret and changes the rest.
    let mut back = got.clone();
    back["provisioner"]["region"] = json!("r2");
    h.put(a, "/v2/providers/p", back.to_string())
        .await
        .expect(200);
    let s = stored(&h, "acme", None).await;
    assert_eq!(s["version"], 2);
    assert_eq!(s["provisioner"], json!({"region": "r2", "secret": SECRET}));
    // A new value replaces it.
    let mut new = back.clone();
    new["provisioner"]["secret"] = json!("other-secret");
    h.put(a, "/v2/providers/p", new.to_string())
        .await
        .expect(200);
    assert_eq!(
        stored(&h, "acme", None).await["provisioner"]["secret"],
        "other-secret"
    );
    assert!(!h
        .get(a, "/v2/providers/p/3")
        .await
        .expect(200)
        .text()
        .contains("other-secret"));
    assert!(!h
        .get(a, "/v2/providers/p/1")
        .await
        .expect(200)
        .text()
        .contains(SECRET));

    // An exported catalog imported back keeps the secrets.
    let export = h.get(a, "/v2/export").await.expect(200).json();
    h.post(a, "/v2/import", export.to_string())
        .await
        .expect(200);
    assert_eq!(
        stored(&h, "acme", None).await["provisioner"]["secret"],
        "other-secret"
    );

    // The mask on a provider that has no stored secret does not become the secret.
    let fresh = json!({"name": "q", "providertype": "fake", "provisioner": {"region": "r", "secret": MASK}});
    h.post(a, "/v2/providers", fresh.to_string())
        .await
        .expect(200);
    let id = h.tenant_id("acme").await;
    let q = h
        .app
        .state
        .store
        .get_entity(&id, EntityKind::Provider, "q", None)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(q["provisioner"].get("secret"), Some(&json!(MASK)), "{q}");
}

#[tokio::test]
async fn bootstrapped_secrets_stay_masked() {
    let h = Harness::new().await;
    h.plugin_types().await;
    let p = json!({"name": "p", "providertype": "fake", "provisioner": {"region": "r1", "secret": SECRET}});
    h.post(SA, "/v2/providers", p.to_string()).await.expect(200);
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "boot"}, "bootstrap": true}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(
        stored(&h, "boot", None).await["provisioner"]["secret"],
        SECRET
    );
    for path in ["/v2/providers/p", "/v2/providers", "/v2/export"] {
        assert!(
            !h.get(admin("boot"), path)
                .await
                .expect(200)
                .text()
                .contains(SECRET),
            "{path}"
        );
    }
    // Fields of a provider type that marks nothing sensitive are shown as they are.
    let plain = json!({"name": "plain", "providertype": "unknown-type", "provisioner": {"secret": "visible"}});
    h.post(SA, "/v2/providers", plain.to_string())
        .await
        .expect(200);
    assert_eq!(
        h.get(SA, "/v2/providers/plain").await.expect(200).json()["provisioner"]["secret"],
        "visible"
    );
}

/// Credentials are read when used: a task gets the provider's fields as the catalog has them now,
/// so an admin who fixes or rotates a key reaches every existing cluster's next task; the user's
/// own fields stay the cluster's; the admin's secret is never kept in the cluster.
#[tokio::test]
async fn a_rotated_credential_reaches_existing_clusters() {
    use axum::http::Method;
    let h = Harness::new().await;
    let tid = crate::clusters::setup(&h).await;
    let a = admin(crate::clusters::T);
    let local = json!({"name": "local", "parameters": {
        "admin": {"fields": {"key": {"label": "key", "type": "password", "sensitive": true}}},
        "user": {"fields": {"token": {"label": "token", "type": "password", "sensitive": true}}}}});
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/local",
        local.to_string(),
    )
    .await
    .expect(200);
    let provider = |key: &str| {
        json!({"name": "local", "providertype": "local", "provisioner": {"key": key}}).to_string()
    };
    h.put(a, "/v2/providers/local", provider("old-key"))
        .await
        .expect(200);
    let id = crate::clusters::create(&h, a, 1).await;
    let first = crate::clusters::take(&h, &tid, "w1").await.expect("a task");
    let fields = &first["config"]["provider"]["provisioner"];
    assert_eq!(fields["key"], "old-key", "{first}");
    assert_eq!(fields["token"], "s3cret", "the user's own field");
    // The cluster keeps the user's fields, never the admin's secret.
    let n: u64 = id.parse().unwrap();
    let row = h
        .app
        .state
        .store
        .get_cluster(&tid, n)
        .await
        .unwrap()
        .unwrap();
    assert!(!row.body.to_string().contains("old-key"), "{}", row.body);
    // The admin rotates the key: the cluster's next task has the new one.
    h.put(a, "/v2/providers/local", provider("new-key"))
        .await
        .expect(200);
    assert_eq!(
        crate::clusters::finish(&h, &tid, "w1", &first, 0, "").await,
        200
    );
    let next = crate::clusters::take(&h, &tid, "w1").await.expect("a task");
    let fields = &next["config"]["provider"]["provisioner"];
    assert_eq!(fields["key"], "new-key", "{next}");
    assert_eq!(fields["token"], "s3cret");
}
