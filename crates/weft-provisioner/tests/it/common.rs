//! A real weft server on 127.0.0.1 (random ports, temporary SQLite store) and a provisioner agent
//! with the local provider and the shell automator over the example scripts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use weft_provisioner::local::LocalProvider;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::{Agent, AgentConfig, Plugins};
use weft_server::config::RawConfig;
use weft_store::{Store, Tenant, SUPERADMIN};

pub(crate) const CATALOG: &str = include_str!("../../../../examples/catalog/catalog.json");

pub(crate) fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog/scripts")
}

pub(crate) struct Server {
    pub external: String,
    pub internal: String,
    pub dir: TempDir,
    pub http: reqwest::Client,
}

impl Server {
    /// A server with the example catalog loaded into the superadmin and tenant `tenant`.
    pub(crate) async fn start(tenant: &str) -> (Server, String) {
        Server::start_with(tenant, RawConfig::default()).await
    }

    /// [`Server::start`] with the settings of `extra` (those it sets) over the test's.
    pub(crate) async fn start_with(tenant: &str, extra: RawConfig) -> (Server, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let settings = RawConfig {
            data_dir: Some(dir.path().join("server")),
            port: Some(0),
            internal_port: Some(0),
            bind: Some("127.0.0.1".into()),
            auth: Some("none".into()),
            ..Default::default()
        }
        .overlay(extra)
        .resolve()
        .expect("settings");
        std::fs::create_dir_all(dir.path().join("server")).expect("dir");
        let url = format!("sqlite://{}", dir.path().join("server/weft.db").display());
        let store: Arc<dyn Store> = weft_store::open(&url).await.expect("store");
        weft_server::seed_catalog(store.as_ref(), SUPERADMIN, CATALOG)
            .await
            .expect("catalog");
        let t = Tenant {
            id: uuid::Uuid::new_v4().to_string(),
            spec: weft_model::TenantSpecification {
                name: tenant.into(),
                description: None,
                workers: 4,
                max_clusters: weft_model::UNBOUNDED,
                max_nodes: weft_model::UNBOUNDED,
                check_interval: 0,
                max_cost_per_hour: None,
            },
            create_time: 0,
        };
        store.insert_tenant(&t).await.expect("tenant");
        weft_server::seed_catalog(store.as_ref(), &t.id, CATALOG)
            .await
            .expect("catalog");
        let app = weft_server::app(store.clone(), settings);
        let bound = weft_server::bind(app).await.expect("bind");
        let external = format!("http://{}", bound.external_addr().unwrap());
        let internal = format!("http://{}", bound.internal_addr().unwrap());
        tokio::spawn(bound.run());
        let server = Server {
            external,
            internal,
            dir,
            http: reqwest::Client::new(),
        };
        (server, t.id)
    }

    pub(crate) fn provisioner_data(&self) -> PathBuf {
        self.dir.path().join("provisioner")
    }

    pub(crate) fn config(&self, id: &str) -> AgentConfig {
        let mut cfg = AgentConfig::new(&self.internal, self.provisioner_data());
        cfg.id = id.into();
        cfg.capacity = 8;
        cfg.poll_interval = Duration::from_millis(100);
        cfg.error_interval = Duration::from_millis(500);
        cfg.heartbeat_interval = Duration::from_millis(500);
        cfg.task_timeout = Duration::from_secs(60);
        cfg
    }

    pub(crate) fn plugins(&self) -> Plugins {
        Plugins::new()
            .provider(Arc::new(LocalProvider::new(&self.provisioner_data())))
            .automator(Arc::new(
                ShellAutomator::new(vec![scripts_dir()])
                    .with_resources(self.provisioner_data().join("resources")),
            ))
    }

    pub(crate) async fn agent(&self, id: &str) -> Agent {
        Agent::start(self.config(id), self.plugins())
            .await
            .expect("agent starts")
    }

    /// A request to the external API as the admin of `tenant`.
    pub(crate) async fn ext(
        &self,
        method: reqwest::Method,
        tenant: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.external))
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", tenant);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }
}

/// Polls `f` until it answers `Some`, failing after `limit`.
pub(crate) async fn until<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends 100 requests through a kv-web balancer at `url`; every one must succeed (a 2xx with a
/// web node's JSON). Answers the web nodes that served them.
pub(crate) async fn hundred_requests(
    http: &reqwest::Client,
    url: &str,
) -> std::collections::BTreeSet<String> {
    let mut served = std::collections::BTreeSet::new();
    for i in 0..100 {
        let r = http
            .get(url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} through the balancer failed: {e}"));
        assert!(r.status().is_success(), "request {i}: {}", r.status());
        let v: Value = r.json().await.expect("json from a web node");
        served.insert(v["node"].as_str().unwrap_or_default().to_string());
    }
    served
}
