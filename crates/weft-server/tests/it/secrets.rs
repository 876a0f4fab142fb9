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

/// Provider `p`'s field `secret` as stored (sealed), opened.
async fn stored_secret(h: &Harness, tenant: &str) -> Value {
    let doc = stored(h, tenant, None).await;
    let sealed = doc["provisioner"]["secret"]
        .as_str()
        .expect("a sealed string");
    assert!(sealed.starts_with(weft_engine::seal::PREFIX), "{doc}");
    let id = h.tenant_id(tenant).await;
    let sealer = &h.app.state.engine.sealer;
    sealer.open(&id, sealed).await.unwrap().expect("opens")
}

#[tokio::test]
async fn secrets_are_masked_everywhere_and_kept_on_write_back() {
    let h = Harness::new().await;
    h.plugin_types().await;
    h.tenant("acme").await;
    let a = admin("acme");
    let p = json!({"name": "p", "providertype": "fake", "provisioner": {"region": "r1", "secret": SECRET}});
    h.post(a, "/v2/providers", p.to_string()).await.expect(200);
    assert_eq!(stored_secret(&h, "acme").await, SECRET);

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
    assert_eq!(s["provisioner"]["region"], "r2");
    assert_eq!(stored_secret(&h, "acme").await, SECRET);
    // A new value replaces it.
    let mut new = back.clone();
    new["provisioner"]["secret"] = json!("other-secret");
    h.put(a, "/v2/providers/p", new.to_string())
        .await
        .expect(200);
    assert_eq!(stored_secret(&h, "acme").await, "other-secret");
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
    assert_eq!(stored_secret(&h, "acme").await, "other-secret");

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
    assert_eq!(stored_secret(&h, "boot").await, SECRET);
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

/// Provider type `local` with a sensitive admin field `key` and a sensitive user field `token`.
async fn sensitive_local_type(h: &Harness) {
    let local = json!({"name": "local", "parameters": {
        "admin": {"fields": {"key": {"label": "key", "type": "password", "sensitive": true}}},
        "user": {"fields": {"token": {"label": "token", "type": "password", "sensitive": true}}}}});
    let path = "/v2/plugins/providertypes/local";
    h.internal(axum::http::Method::PUT, path, local.to_string())
        .await
        .expect(200);
}

/// Credentials are read when used: a task gets the provider's fields as the catalog has them now,
/// so an admin who fixes or rotates a key reaches every existing cluster's next task; the user's
/// own fields stay the cluster's; the admin's secret is never kept in the cluster.
#[tokio::test]
async fn a_rotated_credential_reaches_existing_clusters() {
    let h = Harness::new().await;
    let tid = crate::clusters::setup(&h).await;
    let a = admin(crate::clusters::T);
    sensitive_local_type(&h).await;
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

/// Secrets at rest (issue 36): an admin's provider secret, a user's secret given at create and a
/// node's SSH key from its provider's result are in no byte of the store (SQLite's files and WAL,
/// or PostgreSQL's `pg_dump`) and in no answer, while the provisioner's tasks get them opened.
async fn no_secret_at_rest(h: &Harness, dump: impl Fn() -> Vec<u8>) {
    use axum::http::Method;
    const ADMIN_SECRET: &str = "admin-secret-5c1d9e";
    const NODE_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- node-key-77a1";
    let tid = crate::clusters::setup(h).await;
    let a = admin(crate::clusters::T);
    sensitive_local_type(h).await;
    let provider =
        json!({"name": "local", "providertype": "local", "provisioner": {"key": ADMIN_SECRET}});
    h.put(a, "/v2/providers/local", provider.to_string())
        .await
        .expect(200);
    let id = crate::clusters::create(h, a, 1).await;
    let user_secret = "s3cret"; // crate::clusters::create's providerFields
                                // The provisioner gets every secret opened.
    let create = crate::clusters::take(h, &tid, "w1").await.expect("a task");
    assert_eq!(create["taskName"], "CREATE");
    let fields = &create["config"]["provider"]["provisioner"];
    assert_eq!(fields["key"], ADMIN_SECRET, "{create}");
    assert_eq!(fields["token"], user_secret, "{create}");
    let body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid,
        "taskId": create["taskId"], "status": "0", "stdout": "made", "stderr": "",
        "result": {"ssh-auth": {"user": "root", "key": NODE_KEY}}});
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
    let confirm = crate::clusters::take(h, &tid, "w1").await.expect("a task");
    assert_eq!(confirm["config"]["ssh-auth"]["key"], NODE_KEY, "{confirm}");

    let secrets = [ADMIN_SECRET, user_secret, NODE_KEY, "node-key-77a1"];
    let stored = dump();
    assert!(stored.len() > 10_000, "the store's bytes were read");
    for s in secrets {
        let hits = stored
            .windows(s.len())
            .filter(|w| *w == s.as_bytes())
            .count();
        assert_eq!(hits, 0, "{s} is in the store in clear");
    }
    let paths = [
        "/v2/providers".to_string(),
        "/v2/providers/local".to_string(),
        "/v2/providers/local/1".to_string(),
        "/v2/export".to_string(),
        "/v2/clusters".to_string(),
        format!("/v2/clusters/{id}"),
        format!("/v2/clusters/{id}/nodes"),
        format!("/v2/clusters/{id}/plans"),
        format!("/v2/clusters/{id}/config"),
    ];
    for path in &paths {
        let text = h.get(a, path).await.text();
        for s in secrets {
            assert!(!text.contains(s), "{path} shows {s}: {text}");
        }
    }
}

#[tokio::test]
async fn no_secret_in_sqlite_files_or_answers() {
    let h = Harness::new().await;
    let dir = h.data_dir().to_path_buf();
    no_secret_at_rest(&h, || {
        let mut bytes = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.to_string_lossy().contains("weft.db") {
                bytes.extend(std::fs::read(&path).unwrap());
            }
        }
        bytes
    })
    .await;
}

#[tokio::test]
async fn no_secret_in_a_postgres_dump_or_answers() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.unwrap();
    let h = Harness::over(&pg.url()).await;
    let url = pg.url();
    no_secret_at_rest(&h, || {
        let out = std::process::Command::new(pg_dump())
            .arg(&url)
            .output()
            .expect("pg_dump runs");
        assert!(out.status.success(), "pg_dump: {out:?}");
        out.stdout
    })
    .await;
}

/// PostgreSQL's `pg_dump`, where Debian puts it.
fn pg_dump() -> std::path::PathBuf {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/pg_dump"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| "pg_dump".into())
}

/// `POST /v2/export` with a passphrase exports the secrets sealed under it, and an import with the
/// passphrase (only with it) opens them into another tenant's store, sealed there again.
#[tokio::test]
async fn an_export_with_secrets_seals_them_under_a_passphrase() {
    const PASS: &str = "a long export passphrase";
    let h = Harness::new().await;
    h.plugin_types().await;
    h.tenant("acme").await;
    h.tenant("beta").await;
    let a = admin("acme");
    let p = json!({"name": "p", "providertype": "fake", "provisioner": {"region": "r1", "secret": SECRET}});
    h.post(a, "/v2/providers", p.to_string()).await.expect(200);
    let ask = |pass: &str| json!({"passphrase": pass}).to_string();
    h.post(a, "/v2/export", ask("short"))
        .await
        .expect(400)
        .text()
        .contains("passphrase")
        .then_some(())
        .expect("the 400 names it");
    h.post(user("bob", "acme"), "/v2/export", ask(PASS))
        .await
        .expect(403);
    let export = h.post(a, "/v2/export", ask(PASS)).await.expect(200);
    assert!(!export.text().contains(SECRET), "{}", export.text());
    let mut doc = export.json();
    let sealed = doc["providers"][0]["provisioner"]["secret"].clone();
    assert!(
        sealed.as_str().unwrap().starts_with("passphrase:v1:"),
        "{doc}"
    );
    assert_eq!(doc["providers"][0]["provisioner"]["region"], "r1");

    let b = admin("beta");
    h.post(b, "/v2/import", doc.to_string())
        .await
        .expect(400)
        .text()
        .contains("providers[p].provisioner.secret")
        .then_some(())
        .expect("the 400 names it");
    doc["passphrase"] = json!("not the passphrase");
    h.post(b, "/v2/import", doc.to_string())
        .await
        .expect(400)
        .text()
        .contains("passphrase: does not open")
        .then_some(())
        .expect("the 400 names it");
    doc["passphrase"] = json!(PASS);
    h.post(b, "/v2/import", doc.to_string()).await.expect(200);
    assert_eq!(stored_secret(&h, "beta").await, SECRET);
    let shown = h.get(b, "/v2/providers/p").await.expect(200).json();
    assert_eq!(shown["provisioner"]["secret"], MASK);
}

/// A store an older weft wrote, its secrets in clear: sealed by the pass a start runs, the
/// provider's versions that held them in clear gone; a second pass finds nothing left. A store
/// once passed through is not read through again at the next start.
#[tokio::test]
async fn secrets_an_older_store_kept_in_clear_are_sealed_at_start() {
    let h = Harness::new().await;
    h.plugin_types().await;
    h.tenant("acme").await;
    let id = h.tenant_id("acme").await;
    let doc = json!({"name": "p", "providertype": "fake", "provisioner": {"region": "r1", "secret": SECRET}});
    let store = &h.app.state.store;
    for _ in 0..2 {
        store
            .put_entity(&id, EntityKind::Provider, "p", &doc)
            .await
            .unwrap();
    }
    let engine = &h.app.state.engine;
    let sealed = weft_engine::reseal::seal_what_is_clear(engine)
        .await
        .unwrap();
    assert_eq!(sealed, 1);
    assert_eq!(stored_secret(&h, "acme").await, SECRET);
    assert_eq!(stored(&h, "acme", None).await["version"], 3);
    for v in [1, 2] {
        let old = store.get_entity(&id, EntityKind::Provider, "p", Some(v));
        assert!(
            old.await.unwrap().is_none(),
            "version {v} kept its secret in clear"
        );
    }
    assert_eq!(
        weft_engine::reseal::seal_every_row(engine).await.unwrap(),
        0
    );
    // The next start does not read the store through again (nothing since was written in clear
    // but by hand, as here).
    store
        .put_entity(&id, EntityKind::Provider, "p", &doc)
        .await
        .unwrap();
    assert_eq!(
        weft_engine::reseal::seal_what_is_clear(engine)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        weft_engine::reseal::seal_every_row(engine).await.unwrap(),
        1
    );
}
