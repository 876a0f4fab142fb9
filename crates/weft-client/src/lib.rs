//! weft-client: a typed HTTP client of weft's provisioner API (the server's internal port,
//! contract §4.11-§4.12): register, heartbeat and unregister a provisioner, register plugin types,
//! take and finish tasks, and download plugin resources. Requests and answers are the weft-model
//! wire types, so the server, this client and the provisioner agree on one shape.
//!
//! [`api::ApiClient`] is the client of the external REST API (the port users and the `weft` CLI talk to).
//!
//! Both sides of the wire live here: [`listen`] serves a router with time-outs for slow clients,
//! over TLS with the certificates [`tls`] reloads when their files change. The server's two ports
//! and the provisioner's own API are served by it.
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

pub mod api;
pub mod listen;
pub mod nodes;
pub mod tls;
pub mod tokens;

/// What can go wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached or the connection broke.
    #[error("request to {url} failed: {source}")]
    Transport {
        /// The URL the request went to.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with a status the call does not expect.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The URL the request went to.
        url: String,
        /// The HTTP status code of the answer.
        status: u16,
        /// The answer's body, read as text (lossily); the server's own message for a refusal.
        body: String,
    },
    /// The answer was not the JSON the call expects.
    #[error("{url} answered something the client cannot read: {message}")]
    Decode {
        /// The URL of the answer (or the path of a TLS file that could not be read).
        url: String,
        /// What could not be read, and why.
        message: String,
    },
}

impl ClientError {
    /// The server's own message for a refused call (its plain-text body), else the error's text.
    pub fn server_message(&self) -> String {
        match self {
            ClientError::Status { body, .. } if !body.trim().is_empty() => {
                body.trim_end().to_string()
            }
            ClientError::Status { status, url, .. } => format!("{url} answered {status}"),
            other => other.to_string(),
        }
    }

    /// The HTTP status, when the server answered at all.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The server that could not be reached at all (no connection, or no answer in time), and
    /// why, in the words of the error's deepest cause: `("http://127.0.0.1:55054", "Connection
    /// refused (os error 111)")`. `None` for answers and for TLS refusals.
    pub fn unreachable(&self) -> Option<(String, String)> {
        let ClientError::Transport { url, source } = self else {
            return None;
        };
        if !(source.is_connect() || source.is_timeout()) || self.tls_refusal().is_some() {
            return None;
        }
        let mut cause = source.to_string();
        let mut e: Option<&dyn std::error::Error> = std::error::Error::source(source);
        while let Some(err) = e {
            cause = err.to_string();
            e = err.source();
        }
        if source.is_timeout() && !source.is_connect() {
            cause = "no answer in time".into();
        }
        let origin = reqwest::Url::parse(url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|_| url.clone());
        Some((origin, cause))
    }

    /// Why TLS refused the connection, when it did: the server's certificate does not verify
    /// against the trusted CA (or names another host), or the server refused this client's
    /// certificate (or its absence). Trying again cannot help; the configuration must change.
    pub fn tls_refusal(&self) -> Option<String> {
        let ClientError::Transport { source, .. } = self else {
            return None;
        };
        let mut chain = Vec::new();
        let mut e: Option<&dyn std::error::Error> = Some(source);
        while let Some(err) = e {
            chain.push(err.to_string());
            e = err.source();
        }
        let text = chain.join(": ");
        let refused = [
            "invalid peer certificate",
            "received fatal alert",
            "InvalidCertificate",
        ];
        refused.iter().any(|m| text.contains(m)).then(|| {
            format!(
                "TLS refused the connection ({}): check the CA the server's certificate must \
                     chain to (--ca-cert) and the client certificate (--tls-cert, --tls-key)",
                chain.last().map(String::as_str).unwrap_or("unknown")
            )
        })
    }
}

/// The result of a client call.
pub type ClientResult<T> = Result<T, ClientError>;

/// A provisioner's registration (`PUT /v2/provisioners/{id}`).
#[derive(Debug, Clone, Serialize)]
pub struct Registration {
    /// The provisioner's id, unique among the server's provisioners.
    pub id: String,
    /// The host (name or address) at which the server reaches the provisioner's own API.
    pub host: String,
    /// The port of the provisioner's own API.
    pub port: u16,
    /// How many workers the provisioner runs at most, over all tenants (`capacityTotal`).
    #[serde(rename = "capacityTotal")]
    pub capacity_total: u32,
    /// weft extension: how the server calls the provisioner's own API, `http` or `https`.
    pub scheme: &'static str,
}

/// The body of `POST /v2/tasks/finish` as a provisioner sends it (the server reads it as
/// [`weft_model::FinishTaskRequest`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Finish {
    /// The id of the worker that took the task (`workerId`).
    #[serde(rename = "workerId")]
    pub worker_id: String,
    /// The id of the worker's provisioner (`provisionerId`).
    #[serde(rename = "provisionerId")]
    pub provisioner_id: String,
    /// The id of the tenant the worker serves (`tenantId`).
    #[serde(rename = "tenantId")]
    pub tenant_id: String,
    /// The task's id, as the take gave it (`taskId`).
    #[serde(rename = "taskId")]
    pub task_id: String,
    /// 0 when the task succeeded, anything else when it failed.
    pub status: i64,
    /// The task's standard output (its tail, when long); absent, none is reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The task's standard error (its tail, when long), with a failure's message; absent, none
    /// is reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// The node's hostname, when the task learnt it (a provider's CREATE or CONFIRM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The node's addresses by IP type (`access_v4`, `bind_v4`, ...), when the task learnt them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipaddresses: Option<BTreeMap<String, String>>,
    /// The plugin's results, which the server merges into the node's provisioner results and
    /// hands to every later task of the node; absent when the task failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Map<String, Value>>,
    /// How a failed task failed (weft extension): absent, the server retries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<weft_model::TaskFailure>,
    /// Set by [`Client::finish_and_take`]: the server takes the worker's next task in the same
    /// request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<TakeNext>,
}

/// The take a finish asks for (`next`): with the capabilities a take announces.
#[derive(Debug, Clone, Serialize)]
pub struct TakeNext {
    /// What the worker can do beyond the contract, as a take's `capabilities` (e.g.
    /// [`weft_model::NODES_BY_REVISION`]).
    pub capabilities: Vec<&'static str>,
}

/// `providertypes` or `automatortypes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// A provider: makes and removes machines.
    Provider,
    /// An automator: installs and runs services on a machine.
    Automator,
}

impl PluginKind {
    /// The kind's URL segment under `/v2/plugins/`: `providertypes` or `automatortypes`.
    pub fn path(self) -> &'static str {
        match self {
            PluginKind::Provider => "providertypes",
            PluginKind::Automator => "automatortypes",
        }
    }
}

/// A client of a server's internal port (or of several servers', in turn).
#[derive(Debug, Clone)]
pub struct Client {
    /// The servers' internal URLs, used in turn: a call goes to `bases[current]` and, when that
    /// server cannot be reached, to the next one, which becomes current.
    bases: Vec<String>,
    current: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    http: reqwest::Client,
    tokens: Option<std::sync::Arc<tokens::Tokens>>,
    /// The clusters' `nodes` maps, shared by every clone (every worker) of this client.
    nodes: std::sync::Arc<nodes::NodesCache>,
}

/// Whom a client trusts over TLS and what it presents: a CA file (then only that CA's
/// certificates are trusted, not the system's roots), and a client certificate and key (PEM).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsTrust {
    /// A PEM file of the CA certificates to trust instead of the system's roots; `None` trusts
    /// the system's roots.
    pub ca_cert: Option<std::path::PathBuf>,
    /// A PEM file of the certificate chain this client presents; `None` presents none. Given
    /// with `client_key` or not at all.
    pub client_cert: Option<std::path::PathBuf>,
    /// A PEM file of the private key of `client_cert`.
    pub client_key: Option<std::path::PathBuf>,
}

impl TlsTrust {
    /// Applies the trust to a reqwest builder (an unreadable file is an error naming it).
    pub fn apply(&self, mut b: reqwest::ClientBuilder) -> ClientResult<reqwest::ClientBuilder> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| ClientError::Decode {
                url: p.display().to_string(),
                message: format!("cannot read {}: {e}", p.display()),
            })
        };
        let bad = |p: &std::path::Path, e: reqwest::Error| ClientError::Decode {
            url: p.display().to_string(),
            message: format!("{} is not usable PEM: {e}", p.display()),
        };
        if let Some(ca) = &self.ca_cert {
            b = b.tls_built_in_root_certs(false);
            for cert in reqwest::Certificate::from_pem_bundle(&read(ca)?).map_err(|e| bad(ca, e))? {
                b = b.add_root_certificate(cert);
            }
        }
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let mut pem = read(key)?;
                pem.push(b'\n');
                pem.extend(read(cert)?);
                b = b.identity(reqwest::Identity::from_pem(&pem).map_err(|e| bad(cert, e))?);
            }
            (None, None) => {}
            (Some(p), None) | (None, Some(p)) => {
                return Err(ClientError::Decode {
                    url: p.display().to_string(),
                    message: "a client certificate needs both its certificate and its key".into(),
                })
            }
        }
        Ok(b)
    }
}

impl Client {
    /// `base` is the internal port's URL, e.g. `http://127.0.0.1:55055`, or several servers'
    /// (on one database) separated by commas: a call that cannot reach one server (connection
    /// refused, broken or timed out) is sent to the next, which is then used until it fails.
    pub fn new(base: &str) -> ClientResult<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.to_string(),
                source,
            })?;
        let bases: Vec<String> = base
            .split(',')
            .map(|b| b.trim().trim_end_matches('/').to_string())
            .filter(|b| !b.is_empty())
            .collect();
        if bases.is_empty() {
            return Err(ClientError::Decode {
                url: base.to_string(),
                message: "no server URL".into(),
            });
        }
        Ok(Client {
            bases,
            current: Default::default(),
            http,
            tokens: None,
            nodes: Default::default(),
        })
    }

    /// Trusts the server's certificate only as `tls` says, and presents its client certificate
    /// (mutual TLS) if it names one.
    pub fn with_tls(mut self, tls: &TlsTrust) -> ClientResult<Client> {
        let base = self.bases.join(",");
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60));
        self.http = tls
            .apply(builder)?
            .build()
            .map_err(|source| ClientError::Transport { url: base, source })?;
        Ok(self)
    }

    /// Presents the first token of `tokens` on every call (a server with `auth = apikey`
    /// requires one).
    pub fn with_tokens(mut self, tokens: std::sync::Arc<tokens::Tokens>) -> Client {
        self.tokens = Some(tokens);
        self
    }

    /// The server calls go to now.
    pub fn base(&self) -> &str {
        &self.bases[self.current.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()]
    }

    /// Sends the request `build` makes for `path` on the current server, then on each next one
    /// while the server cannot be reached; the first that answers (with any status) becomes
    /// current. Returns the answer and its URL.
    async fn send(
        &self,
        path: &str,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> ClientResult<(reqwest::Response, String)> {
        use std::sync::atomic::Ordering;
        let first = self.current.load(Ordering::Relaxed);
        let mut failure = None;
        for i in 0..self.bases.len() {
            let k = (first + i) % self.bases.len();
            let url = format!("{}{path}", self.bases[k]);
            let req = build(&self.http, &url);
            let req = match self.tokens.as_ref().and_then(|t| t.header_value()) {
                Some(v) => req.header(tokens::HEADER, v),
                None => req,
            };
            match req.send().await {
                Ok(resp) => {
                    if i > 0 {
                        self.current.store(k, Ordering::Relaxed);
                    }
                    return Ok((resp, url));
                }
                Err(source) => {
                    if self.bases.len() > 1 {
                        tracing::warn!(url = %url, error = %source, "server unreachable; trying the next");
                    }
                    failure = Some(ClientError::Transport { url, source });
                }
            }
        }
        Err(failure.expect("at least one server"))
    }

    async fn expect_ok(resp: reqwest::Response, url: &str) -> ClientResult<reqwest::Response> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.text().await.unwrap_or_default();
        Err(ClientError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body,
        })
    }

    async fn put_json<T: Serialize + ?Sized>(&self, path: &str, body: &T) -> ClientResult<()> {
        let (resp, url) = self.send(path, |h, url| h.put(url).json(body)).await?;
        Self::expect_ok(resp, &url).await.map(drop)
    }

    /// `PUT /v2/provisioners/{id}`.
    pub async fn register(&self, reg: &Registration) -> ClientResult<()> {
        self.put_json(&format!("/v2/provisioners/{}", reg.id), reg)
            .await
    }

    /// `POST /v2/provisioners/{id}/heartbeat` with live workers per tenant id and the plugin types
    /// this provisioner offers. `Ok(None)` means the server does not know this provisioner (404):
    /// register again; otherwise the plugin types the server lacks (register those again).
    pub async fn heartbeat(
        &self,
        id: &str,
        usage: &BTreeMap<String, u32>,
        plugin_types: &BTreeMap<String, Vec<String>>,
    ) -> ClientResult<Option<weft_model::HeartbeatAnswer>> {
        let body = weft_model::Heartbeat {
            usage: usage.clone(),
            plugin_types: plugin_types.clone(),
        };
        let path = format!("/v2/provisioners/{id}/heartbeat");
        let (resp, url) = self.send(&path, |h, url| h.post(url).json(&body)).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let resp = Self::expect_ok(resp, &url).await?;
        // A server that predates the field answers an empty body: nothing is missing.
        let text = resp.text().await.unwrap_or_default();
        Ok(Some(serde_json::from_str(&text).unwrap_or_default()))
    }

    /// `DELETE /v2/provisioners/{id}`.
    pub async fn unregister(&self, id: &str) -> ClientResult<()> {
        let path = format!("/v2/provisioners/{id}");
        let (resp, url) = self.send(&path, |h, url| h.delete(url)).await?;
        Self::expect_ok(resp, &url).await.map(drop)
    }

    /// `PUT /v2/plugins/{providertypes|automatortypes}/{name}`.
    pub async fn register_plugin_type(
        &self,
        kind: PluginKind,
        plugin: &weft_model::PluginType,
    ) -> ClientResult<()> {
        self.put_json(
            &format!("/v2/plugins/{}/{}", kind.path(), plugin.name),
            plugin,
        )
        .await
    }

    /// `POST /v2/tasks/take`: the task JSON, or `None` when the tenant's queue is empty (204).
    /// The worker announces [`weft_model::NODES_BY_REVISION`]: a task that names a revision of
    /// its cluster's `nodes` map gets the map from this client's cache (fetched or brought up to
    /// date first), so the task is the one the contract describes.
    pub async fn take(
        &self,
        provisioner_id: &str,
        worker_id: &str,
        tenant_id: &str,
    ) -> ClientResult<Option<Value>> {
        let body = serde_json::json!({
            "provisionerId": provisioner_id, "workerId": worker_id, "tenantId": tenant_id,
            "capabilities": [weft_model::NODES_BY_REVISION],
        });
        let (resp, url) = self
            .send("/v2/tasks/take", |h, url| h.post(url).json(&body))
            .await?;
        self.taken(resp, url, provisioner_id, tenant_id).await
    }

    /// `POST /v2/tasks/finish` with `next`: records the finish and takes the worker's next task
    /// in one request, answered as [`Client::take`] answers.
    pub async fn finish_and_take(&self, finish: &Finish) -> ClientResult<Option<Value>> {
        let mut finish = finish.clone();
        finish.next = Some(TakeNext {
            capabilities: vec![weft_model::NODES_BY_REVISION],
        });
        let (resp, url) = self
            .send("/v2/tasks/finish", |h, url| h.post(url).json(&finish))
            .await?;
        self.taken(resp, url, &finish.provisioner_id, &finish.tenant_id)
            .await
    }

    /// A take's answer: the task (its `nodes` map spliced in from the cache), or `None` for 204.
    async fn taken(
        &self,
        resp: reqwest::Response,
        url: String,
        provisioner_id: &str,
        tenant_id: &str,
    ) -> ClientResult<Option<Value>> {
        if resp.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let resp = Self::expect_ok(resp, &url).await?;
        // Sent as text/plain, as Coopr did: parse the body ourselves.
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.clone(),
                source,
            })?;
        let task: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            url: url.clone(),
            message: e.to_string(),
        })?;
        if !task.is_object() {
            return Err(ClientError::Decode {
                url,
                message: "not a JSON object".into(),
            });
        }
        let mut task = task;
        if let Some(wanted) = task.get("nodesRevision").and_then(Value::as_str) {
            let cluster = match &task["clusterId"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let map = self
                .nodes_map(provisioner_id, tenant_id, &cluster, wanted)
                .await?;
            nodes::splice(&mut task, &map);
        }
        Ok(Some(task))
    }

    /// The cluster's `nodes` map at `wanted` or newer: the one held, else fetched (the changes
    /// since the one held). A task is leased by then: a failed fetch is tried again a few times.
    async fn nodes_map(
        &self,
        provisioner_id: &str,
        tenant_id: &str,
        cluster: &str,
        wanted: &str,
    ) -> ClientResult<std::sync::Arc<nodes::HeldMap>> {
        if let Some(m) = self.nodes.covering(tenant_id, cluster, wanted) {
            return Ok(m);
        }
        let gate = self.nodes.gate(tenant_id, cluster);
        let _fetching = gate.lock().await;
        if let Some(m) = self.nodes.covering(tenant_id, cluster, wanted) {
            return Ok(m);
        }
        let held = self.nodes.held(tenant_id, cluster);
        let since = held.as_ref().map(|m| m.revision.clone());
        let mut attempt = 0;
        let answer = loop {
            match self
                .fetch_nodes(provisioner_id, tenant_id, cluster, since.as_deref())
                .await
            {
                Ok(a) => break a,
                Err(e) if attempt < 4 && e.status().is_none_or(|s| s >= 500) => {
                    tracing::warn!(cluster, attempt, error = %e, "fetching the nodes map failed");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let mut map = held.as_deref().cloned().unwrap_or_default();
        map.apply(answer);
        Ok(self.nodes.keep(tenant_id, cluster, map))
    }

    /// `POST /v2/tasks/nodes`.
    pub async fn fetch_nodes(
        &self,
        provisioner_id: &str,
        tenant_id: &str,
        cluster: &str,
        since: Option<&str>,
    ) -> ClientResult<weft_model::TaskNodes> {
        let body = serde_json::json!({
            "provisionerId": provisioner_id, "tenantId": tenant_id, "clusterId": cluster,
            "since": since,
        });
        let (resp, url) = self
            .send("/v2/tasks/nodes", |h, url| h.post(url).json(&body))
            .await?;
        let resp = Self::expect_ok(resp, &url).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.clone(),
                source,
            })?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            url,
            message: e.to_string(),
        })
    }

    /// `POST /v2/tasks/finish`.
    pub async fn finish(&self, finish: &Finish) -> ClientResult<()> {
        let (resp, url) = self
            .send("/v2/tasks/finish", |h, url| h.post(url).json(finish))
            .await?;
        Self::expect_ok(resp, &url).await.map(drop)
    }

    /// `GET /v2/tenants/{t}/{ptype}/{plugin}/{rtype}/{name}/versions/{v}`: a plugin resource's bytes.
    pub async fn download_resource(
        &self,
        tenant_id: &str,
        kind: PluginKind,
        plugin: &str,
        resource_type: &str,
        name: &str,
        version: u64,
    ) -> ClientResult<bytes::Bytes> {
        let path = format!(
            "/v2/tenants/{tenant_id}/{}/{plugin}/{resource_type}/{name}/versions/{version}",
            kind.path()
        );
        let (resp, url) = self
            .send(&path, |h, url| {
                h.get(url)
                    .header("Coopr-UserID", "admin")
                    .header("Coopr-TenantID", tenant_id)
            })
            .await?;
        let resp = Self::expect_ok(resp, &url).await?;
        resp.bytes()
            .await
            .map_err(|source| ClientError::Transport { url, source })
    }
}
