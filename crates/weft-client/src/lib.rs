//! weft-client: a typed HTTP client of weft's provisioner API (the server's internal port,
//! contract §4.11-§4.12): register, heartbeat and unregister a provisioner, register plugin types,
//! take and finish tasks, and download plugin resources. Requests and answers are the weft-model
//! wire types, so the server, this client and the provisioner agree on one shape.
//!
//! [`api::ApiClient`] is the client of the external REST API (the port users and the `weft` CLI talk to).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

pub mod api;
pub mod tokens;

/// What can go wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached or the connection broke.
    #[error("request to {url} failed: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with a status the call does not expect.
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    /// The answer was not the JSON the call expects.
    #[error("{url} answered something the client cannot read: {message}")]
    Decode { url: String, message: String },
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
}

pub type ClientResult<T> = Result<T, ClientError>;

/// A provisioner's registration (`PUT /v2/provisioners/{id}`).
#[derive(Debug, Clone, Serialize)]
pub struct Registration {
    pub id: String,
    pub host: String,
    pub port: u16,
    #[serde(rename = "capacityTotal")]
    pub capacity_total: u32,
}

/// The body of `POST /v2/tasks/finish` as a provisioner sends it (the server reads it as
/// [`weft_model::FinishTaskRequest`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Finish {
    #[serde(rename = "workerId")]
    pub worker_id: String,
    #[serde(rename = "provisionerId")]
    pub provisioner_id: String,
    #[serde(rename = "tenantId")]
    pub tenant_id: String,
    #[serde(rename = "taskId")]
    pub task_id: String,
    pub status: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipaddresses: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Map<String, Value>>,
}

/// `providertypes` or `automatortypes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    Provider,
    Automator,
}

impl PluginKind {
    pub fn path(self) -> &'static str {
        match self {
            PluginKind::Provider => "providertypes",
            PluginKind::Automator => "automatortypes",
        }
    }
}

/// A client of one server's internal port.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    tokens: Option<std::sync::Arc<tokens::Tokens>>,
}

impl Client {
    /// `base` is the internal port's URL, e.g. `http://127.0.0.1:55055`.
    pub fn new(base: &str) -> ClientResult<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.to_string(),
                source,
            })?;
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            http,
            tokens: None,
        })
    }

    /// Presents the first token of `tokens` on every call (a server with `auth = apikey`
    /// requires one).
    pub fn with_tokens(mut self, tokens: std::sync::Arc<tokens::Tokens>) -> Client {
        self.tokens = Some(tokens);
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> ClientResult<reqwest::Response> {
        let req = match self.tokens.as_ref().and_then(|t| t.header_value()) {
            Some(v) => req.header(tokens::HEADER, v),
            None => req,
        };
        req.send().await.map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })
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
        let url = self.url(path);
        let resp = self.send(self.http.put(&url).json(body), &url).await?;
        Self::expect_ok(resp, &url).await.map(drop)
    }

    /// `PUT /v2/provisioners/{id}`.
    pub async fn register(&self, reg: &Registration) -> ClientResult<()> {
        self.put_json(&format!("/v2/provisioners/{}", reg.id), reg)
            .await
    }

    /// `POST /v2/provisioners/{id}/heartbeat` with live workers per tenant id. `Ok(false)` means the
    /// server does not know this provisioner (404): register again.
    pub async fn heartbeat(&self, id: &str, usage: &BTreeMap<String, u32>) -> ClientResult<bool> {
        let url = self.url(&format!("/v2/provisioners/{id}/heartbeat"));
        let body = serde_json::json!({ "usage": usage });
        let resp = self.send(self.http.post(&url).json(&body), &url).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(false);
        }
        Self::expect_ok(resp, &url).await.map(|_| true)
    }

    /// `DELETE /v2/provisioners/{id}`.
    pub async fn unregister(&self, id: &str) -> ClientResult<()> {
        let url = self.url(&format!("/v2/provisioners/{id}"));
        let resp = self.send(self.http.delete(&url), &url).await?;
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
    pub async fn take(
        &self,
        provisioner_id: &str,
        worker_id: &str,
        tenant_id: &str,
    ) -> ClientResult<Option<Value>> {
        let url = self.url("/v2/tasks/take");
        let body = serde_json::json!({
            "provisionerId": provisioner_id, "workerId": worker_id, "tenantId": tenant_id,
        });
        let resp = self.send(self.http.post(&url).json(&body), &url).await?;
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
        Ok(Some(task))
    }

    /// `POST /v2/tasks/finish`.
    pub async fn finish(&self, finish: &Finish) -> ClientResult<()> {
        let url = self.url("/v2/tasks/finish");
        let resp = self.send(self.http.post(&url).json(finish), &url).await?;
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
        let url = self.url(&format!(
            "/v2/tenants/{tenant_id}/{}/{plugin}/{resource_type}/{name}/versions/{version}",
            kind.path()
        ));
        let req = self
            .http
            .get(&url)
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", tenant_id);
        let resp = Self::expect_ok(self.send(req, &url).await?, &url).await?;
        resp.bytes()
            .await
            .map_err(|source| ClientError::Transport { url, source })
    }
}
