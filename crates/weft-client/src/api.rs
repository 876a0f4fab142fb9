//! A typed client of the external REST API v2 (the port users, scripts and the `weft` CLI talk to).
//!
//! Answers are the weft-model wire types the server's handlers return. The few request bodies that
//! weft-model only reads (`ClusterCreateRequest`, `TenantWriteRequest`, `ApiKeyRequest`) have a
//! serializable twin here whose JSON the server reads back as that model type (tested below).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_model::audit::{AuditRecord, ChainReport};
use weft_model::{
    ApiKeyCreated, ApiKeyInfo, CatalogExport, CatalogWriteAnswer, ClusterDetails,
    ClusterStatusView, ClusterSummary, PlanView, PluginType, Provisioner, ResourceMeta,
    TenantSpecification,
};

use crate::{ClientError, ClientResult, PluginKind};

mod hostpool; // the host-pool calls (api/hostpool.rs)

/// Who calls: the `Coopr-TenantID`, `Coopr-UserID` and (with `auth = "apikey"`) `Coopr-ApiKey` headers.
/// An empty tenant or user is not sent (with an API key, the key says who calls).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The tenant's name (`Coopr-TenantID`); empty, not sent.
    pub tenant: String,
    /// The user's id (`Coopr-UserID`); empty, not sent.
    pub user: String,
    /// The API key (`Coopr-ApiKey`), sent when present; the key says the tenant and user.
    pub api_key: Option<String>,
}

/// The body of `POST /v2/clusters` (read by the server as [`weft_model::ClusterCreateRequest`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CreateCluster {
    /// The cluster's name.
    pub name: String,
    /// A free-text description; absent, none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The name of the cluster template to build from (`clusterTemplate`).
    #[serde(rename = "clusterTemplate")]
    pub cluster_template: String,
    /// How many nodes the cluster has (`numMachines`).
    #[serde(rename = "numMachines")]
    pub num_machines: i64,
    /// The provider to make the machines with; absent, the template's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The hardware type for every node; absent, the template's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardwaretype: Option<String>,
    /// The image type for every node; absent, the template's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imagetype: Option<String>,
    /// The services to place; absent, the template's default services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<String>>,
    /// The lease in ms (`initialLeaseDuration`): -1 or absent, the template's initial lease; 0,
    /// no end (only if the template allows it).
    #[serde(
        rename = "initialLeaseDuration",
        skip_serializing_if = "Option::is_none"
    )]
    pub initial_lease_duration: Option<i64>,
    /// The cluster config, replacing the template's default config; absent, the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
    /// Delete the cluster automatically if its create fails (`rollbackOnFailure`); false (not
    /// sent) keeps it, incomplete, with the failing task's output.
    #[serde(
        rename = "rollbackOnFailure",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub rollback_on_failure: bool,
}

/// The body of `POST /v2/tenants` and `PUT /v2/tenants/{name}` (read as
/// [`weft_model::TenantWriteRequest`]).
#[derive(Debug, Clone, Serialize)]
pub struct TenantWrite<'a> {
    /// The tenant as it should be.
    pub tenant: &'a TenantSpecification,
    /// Copy the superadmin's catalog and plugin resources into the tenant.
    pub bootstrap: bool,
}

/// The body of `POST /v2/apikeys` (read as [`weft_model::ApiKeyRequest`]).
#[derive(Debug, Clone, Serialize)]
pub struct NewApiKey {
    /// The name of the tenant the key acts in.
    pub tenant: String,
    /// The user the key acts as.
    pub user: String,
    /// The key acts as the tenant's admin (the superadmin, in the superadmin tenant); false, as
    /// a plain user.
    pub admin: bool,
}

/// What a call that may start a job answers: nothing (started), or with `dryrun` the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The server accepted the call and started its job.
    Started,
    /// A dry run: the plan the job would run; nothing was started.
    Plan(Box<PlanView>),
}

#[derive(Deserialize)]
struct CreatedId {
    id: String,
}

/// The catalog's entity kinds, by their URL segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Providers (`providers`).
    Provider,
    /// Hardware types (`hardwaretypes`).
    HardwareType,
    /// Image types (`imagetypes`).
    ImageType,
    /// Services (`services`).
    Service,
    /// Cluster templates (`clustertemplates`).
    ClusterTemplate,
    /// Partial templates, which cluster templates include (`partialtemplates`).
    PartialTemplate,
}

impl Kind {
    /// The kind's URL segment under `/v2/`, e.g. `hardwaretypes`.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Provider => "providers",
            Kind::HardwareType => "hardwaretypes",
            Kind::ImageType => "imagetypes",
            Kind::Service => "services",
            Kind::ClusterTemplate => "clustertemplates",
            Kind::PartialTemplate => "partialtemplates",
        }
    }
}

/// A plugin resource's address: `{ptype}/{plugin}/{rtype}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// Whether the plugin is a provider or an automator (`ptype`).
    pub kind: PluginKind,
    /// The plugin type's name, e.g. `chef-solo`.
    pub plugin: String,
    /// The resource type, e.g. `cookbooks`.
    pub rtype: String,
}

impl ResourceType {
    fn path(&self) -> String {
        format!(
            "/v2/plugins/{}/{}/{}",
            self.kind.path(),
            seg(&self.plugin),
            seg(&self.rtype)
        )
    }
}

/// Percent-encodes one path segment.
fn costs_path(params: &[(&str, String)], csv: bool) -> String {
    let mut q: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", seg(v)))
        .collect();
    if csv {
        q.push("format=csv".into());
    }
    format!("/v2/costs?{}", q.join("&"))
}

fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Which of a cluster's nodes an answer of [`ApiClient::cluster_page`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodesPage {
    /// How many nodes the cluster has (`Weft-Nodes-Total`).
    pub total: usize,
    /// The index of the page's first node among them (`Weft-Nodes-Offset`).
    pub offset: usize,
    /// How many nodes the page holds (`Weft-Nodes-Count`).
    pub count: usize,
}

/// A client of one server's external API, as one identity.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    who: Identity,
    http: reqwest::Client,
    /// Calls that start jobs ask for `?force=true` (past the services' availability rules).
    force: bool,
}

impl ApiClient {
    /// `base` is the external API's URL, e.g. `http://127.0.0.1:55054` (a trailing `/v2` is fine).
    pub fn new(base: &str, who: Identity) -> ClientResult<ApiClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.to_string(),
                source,
            })?;
        let base = base.trim_end_matches('/');
        let base = base.strip_suffix("/v2").unwrap_or(base);
        Ok(ApiClient {
            base: base.to_string(),
            who,
            http,
            force: false,
        })
    }

    /// Trusts the server's certificate only as `tls` says (a CA file: only that CA), presenting a
    /// client certificate if it names one.
    pub fn with_tls(mut self, tls: &crate::TlsTrust) -> ClientResult<ApiClient> {
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120));
        self.http = tls
            .apply(builder)?
            .build()
            .map_err(|source| ClientError::Transport {
                url: self.base.clone(),
                source,
            })?;
        Ok(self)
    }

    /// This client, its calls that start jobs forced past the services' availability rules
    /// (`?force=true`: an operator who knows better; the server records it on the job).
    pub fn forcing(&self, force: bool) -> ApiClient {
        ApiClient {
            force,
            ..self.clone()
        }
    }

    /// The external API's URL, without a trailing `/` or `/v2`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Who this client calls as.
    pub fn identity(&self) -> &Identity {
        &self.who
    }

    /// Sends one call; `Ok(bytes)` of a 2xx answer, else [`ClientError::Status`] with the server's
    /// message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> ClientResult<bytes::Bytes> {
        Ok(self
            .call_with_headers(method, path, body, content_type)
            .await?
            .0)
    }

    /// [`ApiClient::call`], with the answer's headers.
    pub async fn call_with_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> ClientResult<(bytes::Bytes, reqwest::header::HeaderMap)> {
        let url = format!("{}{path}", self.base);
        let mut req = self.request(method, &url);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(b);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: url.clone(),
            source,
        })?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.clone(),
                source,
            })?;
        if !status.is_success() {
            return Err(ClientError::Status {
                url,
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        Ok((bytes, headers))
    }

    /// A request to `url` with the caller's identity headers.
    fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, url);
        // An empty tenant or user is left out: with an API key, the key says who calls.
        if !self.who.tenant.is_empty() {
            req = req.header("Coopr-TenantID", &self.who.tenant);
        }
        if !self.who.user.is_empty() {
            req = req.header("Coopr-UserID", &self.who.user);
        }
        if let Some(k) = &self.who.api_key {
            req = req.header("Coopr-ApiKey", k);
        }
        req
    }

    fn decode<T: DeserializeOwned>(&self, path: &str, bytes: &[u8]) -> ClientResult<T> {
        serde_json::from_slice(bytes).map_err(|e| ClientError::Decode {
            url: format!("{}{path}", self.base),
            message: e.to_string(),
        })
    }

    /// `GET path` as JSON of type `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> ClientResult<T> {
        let bytes = self.call(Method::GET, path, None, "").await?;
        self.decode(path, &bytes)
    }

    /// A call with a JSON body (or none); the raw answer.
    pub async fn send_json<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> ClientResult<bytes::Bytes> {
        let body = match body {
            Some(b) => Some(serde_json::to_vec(b).map_err(|e| ClientError::Decode {
                url: format!("{}{path}", self.base),
                message: format!("encoding the request: {e}"),
            })?),
            None => None,
        };
        self.call(method, path, body, "application/json").await
    }

    async fn started<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        dry_run: bool,
    ) -> ClientResult<Started> {
        let full = self.with_flags(path, dry_run);
        let bytes = self.send_json(method, &full, body).await?;
        if dry_run {
            Ok(Started::Plan(Box::new(self.decode(&full, &bytes)?)))
        } else {
            Ok(Started::Started)
        }
    }

    // ---- costs ----

    /// `GET /v2/costs` with `params` (`from`, `to`, `groupBy`): the report.
    pub async fn costs(
        &self,
        params: &[(&str, String)],
    ) -> ClientResult<weft_model::cost::CostReport> {
        self.get(&costs_path(params, false)).await
    }

    /// `GET /v2/costs?format=csv` with `params`: the report as CSV text.
    pub async fn costs_csv(&self, params: &[(&str, String)]) -> ClientResult<String> {
        let bytes = self
            .call(Method::GET, &costs_path(params, true), None, "")
            .await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    // ---- clusters ----

    /// `GET /v2/clusters` (`status`: a comma-separated filter, or `None` for every live cluster).
    pub async fn clusters(&self, status: Option<&str>) -> ClientResult<Vec<ClusterSummary>> {
        match status {
            Some(s) => self.get(&format!("/v2/clusters?status={}", seg(s))).await,
            None => self.get("/v2/clusters").await,
        }
    }

    /// `GET /v2/clusters/{id}`: the cluster with its nodes (the first 1,000 of a larger one; see
    /// [`ApiClient::cluster_page`]).
    pub async fn cluster(&self, id: &str) -> ClientResult<ClusterDetails> {
        self.get(&format!("/v2/clusters/{}", seg(id))).await
    }

    /// `GET /v2/clusters/{id}?offset=&limit=`: the cluster with one page of its nodes, and where
    /// the page is (the `Weft-Nodes-*` headers).
    pub async fn cluster_page(
        &self,
        id: &str,
        offset: usize,
        limit: usize,
    ) -> ClientResult<(ClusterDetails, NodesPage)> {
        let path = format!("/v2/clusters/{}?offset={offset}&limit={limit}", seg(id));
        let (bytes, headers) = self.call_with_headers(Method::GET, &path, None, "").await?;
        let details: ClusterDetails = self.decode(&path, &bytes)?;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok())
        };
        let count = details.nodes.len();
        let page = NodesPage {
            total: header("weft-nodes-total").unwrap_or(offset + count),
            offset: header("weft-nodes-offset").unwrap_or(offset),
            count: header("weft-nodes-count").unwrap_or(count),
        };
        Ok((details, page))
    }

    /// `GET /v2/clusters/{id}/status`: the cluster's status and its latest job's progress.
    pub async fn cluster_status(&self, id: &str) -> ClientResult<ClusterStatusView> {
        self.get(&format!("/v2/clusters/{}/status", seg(id))).await
    }

    /// `POST /v2/clusters`: the new cluster's id.
    pub async fn create_cluster(&self, req: &CreateCluster) -> ClientResult<String> {
        let bytes = self
            .send_json(Method::POST, "/v2/clusters", Some(req))
            .await?;
        Ok(self.decode::<CreatedId>("/v2/clusters", &bytes)?.id)
    }

    /// `POST /v2/clusters?dryrun=true`: the plan the create would run.
    pub async fn plan_cluster(&self, req: &CreateCluster) -> ClientResult<PlanView> {
        let path = "/v2/clusters?dryrun=true";
        let bytes = self.send_json(Method::POST, path, Some(req)).await?;
        self.decode(path, &bytes)
    }

    /// `DELETE /v2/clusters/{id}`: starts the CLUSTER_DELETE job (aborting a job underway first).
    pub async fn delete_cluster(&self, id: &str) -> ClientResult<()> {
        let path = format!("/v2/clusters/{}", seg(id));
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }

    /// `DELETE /v2/clusters/{id}?force=true`: terminated without deleting its machines (admins).
    pub async fn force_delete_cluster(&self, id: &str) -> ClientResult<()> {
        let path = format!("/v2/clusters/{}?force=true", seg(id));
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }

    /// `POST /v2/clusters/{id}/nodes` `{"count": k}`.
    pub async fn expand(&self, id: &str, count: u64, dry_run: bool) -> ClientResult<Started> {
        let body = serde_json::json!({ "count": count });
        let path = format!("/v2/clusters/{}/nodes", seg(id));
        self.started(Method::POST, &path, Some(&body), dry_run)
            .await
    }

    /// A path with `dryrun=true` and `force=true` added as asked.
    fn with_flags(&self, path: &str, dry_run: bool) -> String {
        let mut full = path.to_string();
        for (on, flag) in [(dry_run, "dryrun=true"), (self.force, "force=true")] {
            if on {
                let sep = if full.contains('?') { '&' } else { '?' };
                full = format!("{full}{sep}{flag}");
            }
        }
        full
    }

    /// `POST /v2/clusters/{id}/clustertemplate/sync[?version=V]`: move to a template version.
    pub async fn sync_template(
        &self,
        id: &str,
        version: Option<u64>,
        dry_run: bool,
    ) -> ClientResult<weft_model::ClusterChange> {
        let mut path = format!("/v2/clusters/{}/clustertemplate/sync", seg(id));
        if let Some(v) = version {
            path = format!("{path}?version={v}");
        }
        let full = self.with_flags(&path, dry_run);
        let bytes = self.send_json::<()>(Method::POST, &full, None).await?;
        self.decode(&full, &bytes)
    }

    /// `POST /v2/clusters/{id}/apply`: move the cluster to a declared state.
    pub async fn apply(
        &self,
        id: &str,
        req: &weft_model::ApplyRequest,
        dry_run: bool,
    ) -> ClientResult<weft_model::ClusterChange> {
        let full = self.with_flags(&format!("/v2/clusters/{}/apply", seg(id)), dry_run);
        let bytes = self.send_json(Method::POST, &full, Some(req)).await?;
        self.decode(&full, &bytes)
    }

    /// `GET /v2/clusters/{id}/export`: the cluster as a declaration.
    pub async fn export_cluster(&self, id: &str) -> ClientResult<weft_model::ClusterSpec> {
        self.get(&format!("/v2/clusters/{}/export", seg(id))).await
    }

    /// `GET /v2/clustertemplates/{name}/impact[?version=V]`.
    pub async fn template_impact(
        &self,
        name: &str,
        version: Option<u64>,
    ) -> ClientResult<Vec<weft_model::ClusterChange>> {
        let mut path = format!("/v2/clustertemplates/{}/impact", seg(name));
        if let Some(v) = version {
            path = format!("{path}?version={v}");
        }
        self.get(&path).await
    }

    /// `DELETE /v2/clusters/{id}/nodes` `{"count": k}`.
    pub async fn shrink(&self, id: &str, count: u64, dry_run: bool) -> ClientResult<Started> {
        let body = serde_json::json!({ "count": count });
        let path = format!("/v2/clusters/{}/nodes", seg(id));
        self.started(Method::DELETE, &path, Some(&body), dry_run)
            .await
    }

    /// `POST /v2/clusters/{id}/services` `{"services": [...]}`.
    pub async fn add_services(
        &self,
        id: &str,
        services: &[String],
        dry_run: bool,
    ) -> ClientResult<Started> {
        let body = serde_json::json!({ "services": services });
        let path = format!("/v2/clusters/{}/services", seg(id));
        self.started(Method::POST, &path, Some(&body), dry_run)
            .await
    }

    /// `DELETE /v2/clusters/{id}/services/{svc}`.
    pub async fn remove_service(
        &self,
        id: &str,
        service: &str,
        dry_run: bool,
    ) -> ClientResult<Started> {
        let path = format!("/v2/clusters/{}/services/{}", seg(id), seg(service));
        self.started::<Value>(Method::DELETE, &path, None, dry_run)
            .await
    }

    /// `PUT /v2/clusters/{id}/config` `{"config": {...}, "restart": bool}`.
    pub async fn reconfigure(
        &self,
        id: &str,
        config: &Map<String, Value>,
        restart: bool,
        rollout: Option<&weft_model::RolloutSpec>,
        dry_run: bool,
    ) -> ClientResult<Started> {
        let mut body = serde_json::json!({ "config": config, "restart": restart });
        if let Some(r) = rollout {
            body["rollout"] = serde_json::json!(r);
        }
        let path = format!("/v2/clusters/{}/config", seg(id));
        self.started(Method::PUT, &path, Some(&body), dry_run).await
    }

    /// `GET /v2/clusters/{id}/config`.
    pub async fn cluster_config(&self, id: &str) -> ClientResult<Map<String, Value>> {
        self.get(&format!("/v2/clusters/{}/config", seg(id))).await
    }

    /// `start`, `stop` or `restart` every service (`service: None`) or one.
    pub async fn service_action(
        &self,
        id: &str,
        service: Option<&str>,
        action: &str,
        rollout: Option<&weft_model::RolloutSpec>,
        dry_run: bool,
    ) -> ClientResult<Started> {
        let path = match service {
            Some(s) => format!(
                "/v2/clusters/{}/services/{}/{}",
                seg(id),
                seg(s),
                seg(action)
            ),
            None => format!("/v2/clusters/{}/services/{}", seg(id), seg(action)),
        };
        match rollout {
            Some(r) => {
                let body = serde_json::json!({ "rollout": r });
                self.started(Method::POST, &path, Some(&body), dry_run)
                    .await
            }
            None => {
                self.started::<Value>(Method::POST, &path, None, dry_run)
                    .await
            }
        }
    }

    /// `POST /v2/clusters/{id}/services/{svc}/upgrade` `{"batchSize": n}`.
    pub async fn upgrade(
        &self,
        id: &str,
        service: &str,
        batch_size: Option<u64>,
        rollout: Option<&weft_model::RolloutSpec>,
        dry_run: bool,
    ) -> ClientResult<Started> {
        let mut body = match batch_size {
            Some(n) => serde_json::json!({ "batchSize": n }),
            None => serde_json::json!({}),
        };
        if let Some(r) = rollout {
            body["rollout"] = serde_json::json!(r);
        }
        let path = format!("/v2/clusters/{}/services/{}/upgrade", seg(id), seg(service));
        self.started(Method::POST, &path, Some(&body), dry_run)
            .await
    }

    /// `POST /v2/clusters/{id}` `{"expireTime": ms}`.
    pub async fn set_expire_time(&self, id: &str, expire_time: i64) -> ClientResult<()> {
        let body = serde_json::json!({ "expireTime": expire_time });
        let path = format!("/v2/clusters/{}", seg(id));
        self.send_json(Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }

    /// `POST /v2/clusters/{id}/{pause|resume|abort}`.
    pub async fn job_control(&self, id: &str, what: &str) -> ClientResult<()> {
        let path = format!("/v2/clusters/{}/{}", seg(id), seg(what));
        self.call(Method::POST, &path, None, "").await.map(drop)
    }

    /// `POST /v2/clusters/{id}/health`: starts a health run (weft's extension).
    pub async fn health_run(&self, id: &str) -> ClientResult<weft_model::HealthRun> {
        let path = format!("/v2/clusters/{}/health", seg(id));
        let bytes = self.call(Method::POST, &path, None, "").await?;
        self.decode(&path, &bytes)
    }

    /// `GET /v2/clusters/{id}/health`: the latest health run's node x service grid.
    pub async fn health(&self, id: &str) -> ClientResult<weft_model::ClusterHealth> {
        self.get(&format!("/v2/clusters/{}/health", seg(id))).await
    }

    /// `POST /v2/clusters/{id}/check`: starts a drift check (weft's extension).
    pub async fn check_run(&self, id: &str) -> ClientResult<weft_model::DriftRun> {
        let path = format!("/v2/clusters/{}/check", seg(id));
        let bytes = self.call(Method::POST, &path, None, "").await?;
        self.decode(&path, &bytes)
    }

    /// `GET /v2/clusters/{id}/check`: the latest drift check.
    pub async fn check(&self, id: &str) -> ClientResult<weft_model::DriftReport> {
        self.get(&format!("/v2/clusters/{}/check", seg(id))).await
    }

    /// `POST /v2/clusters/{id}/nodes/{node}/replace` (weft's extension): replaces a node's
    /// machine (or, `dry_run`, answers the plan).
    pub async fn replace_node(&self, id: &str, node: &str, dry_run: bool) -> ClientResult<Started> {
        let path = format!("/v2/clusters/{}/nodes/{}/replace", seg(id), seg(node));
        self.started(Method::POST, &path, None::<&Value>, dry_run)
            .await
    }

    /// `GET /v2/clusters/{id}/plans`: every job's plan, newest first.
    pub async fn plans(&self, id: &str) -> ClientResult<Vec<PlanView>> {
        self.get(&format!("/v2/clusters/{}/plans", seg(id))).await
    }

    /// `GET /v2/clusters/{id}/plans/{job}`: the plan of one job of the cluster.
    pub async fn plan(&self, id: &str, job: &str) -> ClientResult<PlanView> {
        self.get(&format!("/v2/clusters/{}/plans/{}", seg(id), seg(job)))
            .await
    }

    // ---- catalog ----

    /// `GET /v2/{kind}` as JSON values (the CLI shows and edits them as they are).
    pub async fn entities<T: DeserializeOwned>(&self, kind: Kind) -> ClientResult<Vec<T>> {
        self.get(&format!("/v2/{}", kind.path())).await
    }

    /// `GET /v2/{kind}/{name}`: the latest version of one entity.
    pub async fn entity<T: DeserializeOwned>(&self, kind: Kind, name: &str) -> ClientResult<T> {
        self.get(&format!("/v2/{}/{}", kind.path(), seg(name)))
            .await
    }

    /// `GET /v2/{kind}/{name}/{version}`: one version.
    pub async fn entity_version<T: DeserializeOwned>(
        &self,
        kind: Kind,
        name: &str,
        version: u64,
    ) -> ClientResult<T> {
        self.get(&format!("/v2/{}/{}/{version}", kind.path(), seg(name)))
            .await
    }

    /// `GET /v2/{kind}/{name}/versions` (weft extension): every version, oldest first.
    pub async fn entity_versions<T: DeserializeOwned>(
        &self,
        kind: Kind,
        name: &str,
    ) -> ClientResult<Vec<T>> {
        self.get(&format!("/v2/{}/{}/versions", kind.path(), seg(name)))
            .await
    }

    /// `POST /v2/{kind}`: create (409 if it exists).
    pub async fn create_entity<B: Serialize + ?Sized>(
        &self,
        kind: Kind,
        body: &B,
    ) -> ClientResult<CatalogWriteAnswer> {
        let path = format!("/v2/{}", kind.path());
        let answer = self.send_json(Method::POST, &path, Some(body)).await?;
        Ok(write_answer(&answer))
    }

    /// `PUT /v2/{kind}/{name}`: write a new version.
    pub async fn put_entity<B: Serialize + ?Sized>(
        &self,
        kind: Kind,
        name: &str,
        body: &B,
    ) -> ClientResult<CatalogWriteAnswer> {
        let path = format!("/v2/{}/{}", kind.path(), seg(name));
        let answer = self.send_json(Method::PUT, &path, Some(body)).await?;
        Ok(write_answer(&answer))
    }

    /// `DELETE /v2/{kind}/{name}`.
    pub async fn delete_entity(&self, kind: Kind, name: &str) -> ClientResult<()> {
        let path = format!("/v2/{}/{}", kind.path(), seg(name));
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }

    /// `GET /v2/export`: the latest version of every catalog entity of the tenant.
    pub async fn export(&self) -> ClientResult<CatalogExport> {
        self.get("/v2/export").await
    }

    /// The catalog with its secrets sealed under `passphrase`.
    pub async fn export_sealed(&self, passphrase: &str) -> ClientResult<CatalogExport> {
        let body = weft_model::SealedExportRequest {
            passphrase: passphrase.to_string(),
        };
        let answer = self
            .send_json(Method::POST, "/v2/export", Some(&body))
            .await?;
        self.decode("/v2/export", &answer)
    }

    /// `POST /v2/import`: replaces the tenant's whole catalog (kinds left out end up empty).
    pub async fn import(&self, catalog: &CatalogExport) -> ClientResult<CatalogWriteAnswer> {
        let answer = self
            .send_json(Method::POST, "/v2/import", Some(catalog))
            .await?;
        Ok(write_answer(&answer))
    }

    // ---- administration ----

    /// `GET /v2/tenants`: every tenant (superadmin).
    pub async fn tenants(&self) -> ClientResult<Vec<TenantSpecification>> {
        self.get("/v2/tenants").await
    }

    /// `GET /v2/tenants/{name}`.
    pub async fn tenant(&self, name: &str) -> ClientResult<TenantSpecification> {
        self.get(&format!("/v2/tenants/{}", seg(name))).await
    }

    /// `POST /v2/tenants` (superadmin); with `bootstrap`, the tenant gets a copy of the superadmin's catalog
    /// and plugin resources.
    pub async fn create_tenant(
        &self,
        spec: &TenantSpecification,
        bootstrap: bool,
    ) -> ClientResult<()> {
        let body = TenantWrite {
            tenant: spec,
            bootstrap,
        };
        self.send_json(Method::POST, "/v2/tenants", Some(&body))
            .await
            .map(drop)
    }

    /// `PUT /v2/tenants/{name}`, the name being `spec.name`.
    pub async fn update_tenant(&self, spec: &TenantSpecification) -> ClientResult<()> {
        let body = TenantWrite {
            tenant: spec,
            bootstrap: false,
        };
        let path = format!("/v2/tenants/{}", seg(&spec.name));
        self.send_json(Method::PUT, &path, Some(&body))
            .await
            .map(drop)
    }

    /// `DELETE /v2/tenants/{name}`.
    pub async fn delete_tenant(&self, name: &str) -> ClientResult<()> {
        let path = format!("/v2/tenants/{}", seg(name));
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }

    /// `GET /v2/provisioners`: every registered provisioner (superadmin).
    pub async fn provisioners(&self) -> ClientResult<Vec<Provisioner>> {
        self.get("/v2/provisioners").await
    }

    /// `GET /v2/provisioners/{id}`.
    pub async fn provisioner(&self, id: &str) -> ClientResult<Provisioner> {
        self.get(&format!("/v2/provisioners/{}", seg(id))).await
    }

    /// `GET /v2/plugins/providertypes` or `.../automatortypes`: the registered plugin types.
    pub async fn plugin_types(&self, kind: PluginKind) -> ClientResult<Vec<PluginType>> {
        self.get(&format!("/v2/plugins/{}", kind.path())).await
    }

    /// `GET /v2/plugins/{ptype}/{plugin}/{rtype}`: every version of every resource, by name.
    pub async fn resources(
        &self,
        at: &ResourceType,
    ) -> ClientResult<BTreeMap<String, Vec<ResourceMeta>>> {
        self.get(&at.path()).await
    }

    /// `POST /v2/plugins/{ptype}/{plugin}/{rtype}/{name}`: a new (inactive) version.
    pub async fn upload_resource(
        &self,
        at: &ResourceType,
        name: &str,
        bytes: Vec<u8>,
    ) -> ClientResult<ResourceMeta> {
        let path = format!("{}/{}", at.path(), seg(name));
        let answer = self
            .call(Method::POST, &path, Some(bytes), "application/octet-stream")
            .await?;
        self.decode(&path, &answer)
    }

    /// `stage` or `recall` one version.
    pub async fn resource_transition(
        &self,
        at: &ResourceType,
        name: &str,
        version: u64,
        what: &str,
    ) -> ClientResult<()> {
        let path = format!(
            "{}/{}/versions/{version}/{}",
            at.path(),
            seg(name),
            seg(what)
        );
        self.call(Method::POST, &path, None, "").await.map(drop)
    }

    /// Delete one version, or (`None`) every version of a resource.
    pub async fn delete_resource(
        &self,
        at: &ResourceType,
        name: &str,
        version: Option<u64>,
    ) -> ClientResult<()> {
        let path = match version {
            Some(v) => format!("{}/{}/versions/{v}", at.path(), seg(name)),
            None => format!("{}/{}", at.path(), seg(name)),
        };
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }

    /// `POST /v2/plugins/sync`: push staged resources live, recalled ones off.
    pub async fn sync_resources(&self) -> ClientResult<()> {
        self.call(Method::POST, "/v2/plugins/sync", None, "")
            .await
            .map(drop)
    }

    /// `POST /v2/providers/{name}/sweep` (`?delete=true` with `delete`): the machines with weft's
    /// marks for this tenant that belong to no live node, and what was deleted.
    pub async fn sweep_provider(
        &self,
        name: &str,
        delete: bool,
    ) -> ClientResult<weft_model::SweepReport> {
        let mut path = format!("/v2/providers/{}/sweep", seg(name));
        if delete {
            path.push_str("?delete=true");
        }
        let bytes = self.call(Method::POST, &path, None, "").await?;
        self.decode(&path, &bytes)
    }

    /// `GET /v2/audit` with these query parameters (name, value), newest first.
    pub async fn audit(&self, params: &[(&str, String)]) -> ClientResult<Vec<AuditRecord>> {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", seg(v)))
            .collect();
        let path = if query.is_empty() {
            "/v2/audit".to_string()
        } else {
            format!("/v2/audit?{}", query.join("&"))
        };
        self.get(&path).await
    }

    /// `GET /v2/events` as NDJSON with these query parameters, resumed after `last_id` (sent as
    /// `Last-Event-ID`): `each` gets every line (an event, or a `lost` notice) as it arrives,
    /// until the server ends the stream or `each` answers `false`. No time limit: a follow may
    /// wait for events as long as it likes.
    pub async fn events(
        &self,
        params: &[(&str, String)],
        last_id: Option<u64>,
        mut each: impl FnMut(Value) -> bool,
    ) -> ClientResult<()> {
        let mut query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", seg(v)))
            .collect();
        query.push("format=ndjson".into());
        let url = format!("{}/v2/events?{}", self.base, query.join("&"));
        let mut req = self
            .request(Method::GET, &url)
            .timeout(Duration::from_secs(365 * 24 * 3600));
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let transport = |source| ClientError::Transport {
            url: url.clone(),
            source,
        };
        let mut resp = req.send().await.map_err(transport)?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            let url = url.clone();
            return Err(ClientError::Status { url, status, body });
        }
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                if !each(v) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// `GET /v2/audit/verify`: one report per tenant the caller may read.
    pub async fn audit_verify(&self) -> ClientResult<Vec<ChainReport>> {
        self.get("/v2/audit/verify").await
    }

    /// `GET /v2/apikeys`: every API key, without its secret (superadmin).
    pub async fn api_keys(&self) -> ClientResult<Vec<ApiKeyInfo>> {
        self.get("/v2/apikeys").await
    }

    /// `POST /v2/apikeys` (superadmin): the new key, with its secret (shown this once only).
    pub async fn create_api_key(&self, req: &NewApiKey) -> ClientResult<ApiKeyCreated> {
        let bytes = self
            .send_json(Method::POST, "/v2/apikeys", Some(req))
            .await?;
        self.decode("/v2/apikeys", &bytes)
    }

    /// `DELETE /v2/apikeys/{id}`: revokes the key.
    pub async fn delete_api_key(&self, id: &str) -> ClientResult<()> {
        let path = format!("/v2/apikeys/{}", seg(id));
        self.call(Method::DELETE, &path, None, "").await.map(drop)
    }
}

/// A catalog write's warnings; a server that answers no body (Coopr) has none to give.
fn write_answer(body: &[u8]) -> CatalogWriteAnswer {
    serde_json::from_slice(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_twins_read_back_as_the_model_types() {
        let req = CreateCluster {
            name: "c".into(),
            cluster_template: "t".into(),
            num_machines: 3,
            services: Some(vec!["a".into()]),
            config: Some(serde_json::from_str(r#"{"k":"v"}"#).unwrap()),
            rollback_on_failure: true,
            ..Default::default()
        };
        let m: weft_model::ClusterCreateRequest =
            serde_json::from_value(serde_json::to_value(&req).unwrap()).unwrap();
        assert_eq!((m.name.as_str(), m.cluster_template.as_str()), ("c", "t"));
        assert_eq!(m.num_machines, Some(3));
        assert_eq!(m.services, Some(vec!["a".to_string()]));
        assert_eq!(m.config.unwrap()["k"], "v");
        assert!(m.rollback_on_failure);

        let spec = TenantSpecification {
            name: "t1".into(),
            description: None,
            workers: 4,
            max_clusters: 2,
            max_nodes: 9,
            check_interval: 0,
            max_cost_per_hour: None,
        };
        let w = TenantWrite {
            tenant: &spec,
            bootstrap: true,
        };
        let m: weft_model::TenantWriteRequest =
            serde_json::from_value(serde_json::to_value(&w).unwrap()).unwrap();
        assert_eq!(m.tenant.as_ref(), Some(&spec));
        assert!(m.bootstrap);

        let k = NewApiKey {
            tenant: "t1".into(),
            user: "u".into(),
            admin: true,
        };
        let m: weft_model::ApiKeyRequest =
            serde_json::from_value(serde_json::to_value(&k).unwrap()).unwrap();
        assert_eq!(
            (m.tenant.as_str(), m.user.as_str(), m.admin),
            ("t1", "u", true)
        );
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert_eq!(seg("kv-web_1.0"), "kv-web_1.0");
    }

    #[test]
    fn base_drops_a_trailing_v2() {
        let c = ApiClient::new("http://h:1/v2/", Identity::default()).unwrap();
        assert_eq!(c.base(), "http://h:1");
    }
}
