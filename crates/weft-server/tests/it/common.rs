//! The test harness: a temporary store, both routers, and small helpers to send requests as a given
//! caller and read the answers.

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt;
use weft_server::config::RawConfig;
use weft_server::App;

/// The superadmin: user `admin` of tenant `superadmin`.
pub(crate) const SA: Who = Who {
    user: "admin",
    tenant: "superadmin",
};

/// A caller identified by the Coopr headers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Who {
    pub user: &'static str,
    pub tenant: &'static str,
}

/// The admin of `tenant`.
pub(crate) const fn admin(tenant: &'static str) -> Who {
    Who {
        user: "admin",
        tenant,
    }
}

/// A plain user of `tenant`.
pub(crate) const fn user(name: &'static str, tenant: &'static str) -> Who {
    Who { user: name, tenant }
}

/// Which listener a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Port {
    External,
    Internal,
}

/// An answer, fully read.
#[derive(Debug)]
pub(crate) struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {} {}", self.status, self.text()))
    }

    /// Asserts the status, showing the body on failure, and returns self.
    #[track_caller]
    pub(crate) fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self
    }

    /// Asserts status and exact text body.
    #[track_caller]
    pub(crate) fn expect_text(self, status: u16, text: &str) -> Self {
        let r = self.expect(status);
        assert_eq!(r.text(), text);
        r
    }

    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// The secrets key file every server over the database `url` shares (servers of one database need
/// the same key), in the system's temp dir.
pub(crate) fn shared_key_file(url: &str) -> std::path::PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    url.hash(&mut h);
    std::env::temp_dir().join(format!("weft-test-{:016x}.key", h.finish()))
}

/// One server over one temporary store.
pub(crate) struct Harness {
    pub app: App,
    _dir: TempDir,
}

impl Harness {
    /// The server's data dir (its SQLite files, unless it runs `over` another database).
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }
}

impl Harness {
    /// A server with default settings.
    pub(crate) async fn new() -> Harness {
        Harness::with(|_| {}).await
    }

    /// A server whose settings `f` may change.
    pub(crate) async fn with(f: impl FnOnce(&mut RawConfig)) -> Harness {
        Harness::in_dir(tempfile::tempdir().expect("temp dir"), f).await
    }

    /// A server whose data dir (and SQLite store) is `dir`, with settings `f` may change.
    pub(crate) async fn in_dir(dir: TempDir, f: impl FnOnce(&mut RawConfig)) -> Harness {
        let mut raw = RawConfig {
            data_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        f(&mut raw);
        let settings = raw.resolve().expect("settings");
        if let Some(p) = &settings.provisioner_token_file {
            weft_client::tokens::create_if_missing(p, [42; 32]).expect("token file");
        }
        let url = format!("sqlite://{}", dir.path().join("weft.db").display());
        let store = weft_store::open(&url).await.expect("store");
        let app = weft_server::app(store, settings);
        // The provisioners tests register do not listen: no calls out, unless a test (outbound.rs)
        // turns them on against a listener of its own.
        app.state.outbound.set_enabled(false);
        Harness { app, _dir: dir }
    }

    /// A server over the store at `url` (several harnesses over one URL are several servers on
    /// one database), with a data dir of its own.
    pub(crate) async fn over(url: &str) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let settings = RawConfig {
            data_dir: Some(dir.path().to_path_buf()),
            secrets_key_file: Some(shared_key_file(url)),
            ..Default::default()
        }
        .resolve()
        .expect("settings");
        let store = weft_store::open(url).await.expect("store");
        let app = weft_server::app(store, settings);
        app.state.outbound.set_enabled(false);
        Harness { app, _dir: dir }
    }

    /// Sends a prepared request.
    pub(crate) async fn send(&self, port: Port, req: Request<Body>) -> Resp {
        let router = match port {
            Port::External => self.app.external.clone(),
            Port::Internal => self.app.internal.clone(),
        };
        let resp = router.oneshot(req).await.expect("router is infallible");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        Resp {
            status,
            headers,
            body,
        }
    }

    /// Sends `method path` with `body` to the external port as `who` (no headers if `None`).
    pub(crate) async fn call(
        &self,
        who: Option<Who>,
        method: Method,
        path: &str,
        body: impl Into<Body>,
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(w) = who {
            b = b
                .header("Coopr-UserID", w.user)
                .header("Coopr-TenantID", w.tenant);
        }
        self.send(Port::External, b.body(body.into()).unwrap())
            .await
    }

    pub(crate) async fn get(&self, who: Who, path: &str) -> Resp {
        self.call(Some(who), Method::GET, path, Body::empty()).await
    }

    pub(crate) async fn post(&self, who: Who, path: &str, body: impl Into<Body>) -> Resp {
        self.call(Some(who), Method::POST, path, body).await
    }

    pub(crate) async fn put(&self, who: Who, path: &str, body: impl Into<Body>) -> Resp {
        self.call(Some(who), Method::PUT, path, body).await
    }

    pub(crate) async fn delete(&self, who: Who, path: &str) -> Resp {
        self.call(Some(who), Method::DELETE, path, Body::empty())
            .await
    }

    /// Sends to the internal port (no identity headers), presenting the provisioner token when
    /// the server requires one.
    pub(crate) async fn internal(&self, method: Method, path: &str, body: impl Into<Body>) -> Resp {
        let token = self
            .app
            .state
            .tokens
            .as_ref()
            .and_then(|t| t.header_value());
        self.internal_as(token.as_deref(), method, path, body).await
    }

    /// Sends to the internal port with `authorization` as the `Authorization` header, if any.
    pub(crate) async fn internal_as(
        &self,
        authorization: Option<&str>,
        method: Method,
        path: &str,
        body: impl Into<Body>,
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(a) = authorization {
            b = b.header("authorization", a);
        }
        self.send(Port::Internal, b.body(body.into()).unwrap())
            .await
    }

    /// Creates a tenant with no workers, as the superadmin.
    pub(crate) async fn tenant(&self, name: &str) {
        let body = serde_json::json!({ "tenant": { "name": name, "workers": 0 } });
        self.post(SA, "/v2/tenants", body.to_string())
            .await
            .expect(200);
    }

    /// Sets the tenant's workers (the server places them on registered provisioners; a
    /// provisioner takes only tasks of tenants it holds workers of).
    pub(crate) async fn workers(&self, tenant: &str, n: u32) {
        let body = serde_json::json!({ "tenant": { "name": tenant, "workers": n } });
        self.put(SA, &format!("/v2/tenants/{tenant}"), body.to_string())
            .await
            .expect(200);
    }

    /// The internal id of a tenant.
    pub(crate) async fn tenant_id(&self, name: &str) -> String {
        self.app
            .state
            .store
            .tenant_by_name(name)
            .await
            .unwrap()
            .expect("tenant exists")
            .id
    }

    /// Registers a provisioner on the internal port.
    pub(crate) async fn provisioner(&self, id: &str, capacity: u32) {
        let body = serde_json::json!({ "id": id, "host": "127.0.0.1", "port": 58025, "capacityTotal": capacity });
        self.internal(
            Method::PUT,
            &format!("/v2/provisioners/{id}"),
            body.to_string(),
        )
        .await
        .expect(200);
    }

    /// Registers provider type `fake` (admin field `region`, sensitive admin field `secret`, resource
    /// types `keys` (file) and `cookbooks` (archive)) and automator type `shell`.
    pub(crate) async fn plugin_types(&self) {
        let pt = serde_json::json!({
            "name": "fake",
            "description": "a fake provider",
            "parameters": {
                "admin": {
                    "fields": {
                        "region": {"label": "Region", "type": "text"},
                        "secret": {"label": "Secret", "type": "password", "sensitive": true}
                    },
                    "required": [["region"]]
                },
                "user": {"fields": {"token": {"label": "Token", "type": "password", "sensitive": true}}}
            },
            "resourceTypes": {"keys": {"format": "file", "permissions": "0400"}, "cookbooks": {"format": "archive"}}
        });
        self.internal(
            Method::PUT,
            "/v2/plugins/providertypes/fake",
            pt.to_string(),
        )
        .await
        .expect(200);
        let at = serde_json::json!({
            "name": "shell",
            "parameters": {"admin": {"fields": {"script": {"label": "Script", "type": "text"}}}},
            "resourceTypes": {"scripts": {"format": "file"}}
        });
        self.internal(
            Method::PUT,
            "/v2/plugins/automatortypes/shell",
            at.to_string(),
        )
        .await
        .expect(200);
    }
}

/// A minimal valid body of each of the six admin kinds, named `name`.
pub(crate) fn entity_body(kind: &str, name: &str) -> Value {
    use serde_json::json;
    match kind {
        "providers" => {
            json!({"name": name, "providertype": "fake", "provisioner": {"region": "r1"}})
        }
        "hardwaretypes" => json!({"name": name, "providermap": {"fake": {"flavor": "small"}}}),
        "imagetypes" => {
            json!({"name": name, "providermap": {"fake": {"image": "centos", "sshuser": "root"}}})
        }
        "services" => {
            json!({"name": name, "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": "x.sh"}}}}})
        }
        "clustertemplates" => {
            json!({"name": name, "defaults": {"services": ["svc"], "provider": "p1"}})
        }
        "partialtemplates" => {
            json!({"name": name, "immutable": false, "defaults": {"config": {"k": "v"}}})
        }
        other => panic!("unknown kind {other}"),
    }
}

/// The six admin kinds and their message labels.
pub(crate) const KINDS: [(&str, &str); 6] = [
    ("providers", "provider"),
    ("hardwaretypes", "hardware type"),
    ("imagetypes", "image type"),
    ("services", "service"),
    ("clustertemplates", "cluster template"),
    ("partialtemplates", "partial template"),
];
