//! Calls from the server to provisioners (contract §4.13): `PUT http(s)://<host>:<port>/v2/tenants/<id>`
//! with `{"workers": n, "resources": ResourceCollection}` when a tenant's worker count on a
//! provisioner changes or its resources are synced, and `DELETE .../v2/tenants/<id>` when the count
//! drops to 0.
//!
//! Each call is tried [`Policy::tries`] times, [`Policy::pause`] apart, with connect and socket
//! timeouts; any 2xx is success. A provisioner that keeps failing is deleted and the workers are
//! placed again (and those changes pushed in turn). Request handlers start pushes with the `spawn_*`
//! functions so that a slow provisioner never holds up the API; the `push_*` functions are the same
//! work, awaitable (tests, the janitor).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{json, Map, Value};
use weft_model::{EntityKind, PluginType, SweepReport};
use weft_store::{ProvisionerRecord, Store, SUPERADMIN};

use weft_engine::cache::ProvisionerCache;
use weft_engine::workers::{self, Moved};
use weft_engine::SweepError;

use crate::error::{ApiError, ApiResult};

/// What calls to provisioners need: the HTTP client, the store and the engine's cache of
/// registered provisioners. It is also the engine's [`Messenger`](weft_engine::Messenger).
#[derive(Clone)]
pub struct Courier {
    /// The HTTP client and its retry policy.
    pub outbound: std::sync::Arc<Outbound>,
    /// The store, for the tenants' workers and resources to send and the provisioners to drop.
    pub store: std::sync::Arc<dyn Store>,
    /// The engine's cache of registered provisioners: whom to call.
    pub provisioners: std::sync::Arc<ProvisionerCache>,
}

#[async_trait::async_trait]
impl weft_engine::Messenger for Courier {
    fn workers_moved(&self, moved: Vec<Moved>) {
        spawn_assignments(self, moved);
    }

    fn resources_synced(&self, tenant: &str) {
        spawn_resources(self, tenant);
    }

    async fn post_json(&self, url: &str, body: &Value, limit: Duration) -> Result<(), String> {
        post_json(url, body, limit).await
    }

    async fn post_webhook(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
        limit: Duration,
        allow_loopback: bool,
    ) -> Result<u16, String> {
        post_webhook(url, headers, body, limit, allow_loopback).await
    }

    async fn machines(
        &self,
        tenant: &str,
        providertype: &str,
        fields: &Value,
        known: &[String],
    ) -> Result<Vec<weft_model::SweptMachine>, String> {
        let body = serde_json::json!({
            "providertype": providertype,
            "fields": fields,
            "tenant": tenant,
            "live": known,
            "delete": false,
        });
        // A check waits for this before it starts: a provisioner gets a minute to list.
        let asked = ask_sweep(&self.outbound, &*self.store, tenant, providertype, &body);
        let report = tokio::time::timeout(MACHINES_TIMEOUT, asked)
            .await
            .map_err(|_| {
                format!(
                    "no provisioner listed the machines within {} s",
                    MACHINES_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| e.to_string())?;
        Ok(report.machines)
    }

    async fn sweep(
        &self,
        tenant: &str,
        providertype: &str,
        body: &Value,
    ) -> Result<SweepReport, SweepError> {
        ask_sweep(&self.outbound, &*self.store, tenant, providertype, body).await
    }
}

/// POSTs a job notice to a callback URL.
/// A webhook delivery: the host is resolved here and every address it has must be allowed
/// (`weft_engine::webhooks::address_allowed`); the connection goes to those addresses only (no
/// second look-up that could answer otherwise) and redirects are not followed. Errors never
/// carry the URL, which may hold a token.
async fn post_webhook(
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    limit: Duration,
    allow_loopback: bool,
) -> Result<u16, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("the URL does not parse: {e}"))?;
    let port = u.port_or_known_default().ok_or("the URL has no port")?;
    let (name, lookup) = match u.host() {
        Some(url::Host::Domain(d)) => (Some(d.to_string()), d.to_string()),
        Some(url::Host::Ipv4(ip)) => (None, ip.to_string()),
        Some(url::Host::Ipv6(ip)) => (None, ip.to_string()),
        None => return Err("the URL has no host".into()),
    };
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((lookup.as_str(), port))
        .await
        .map_err(|e| format!("the host does not resolve: {e}"))?
        .collect();
    let refused = addrs
        .iter()
        .any(|a| !weft_engine::webhooks::address_allowed(a.ip(), allow_loopback));
    if addrs.is_empty() || refused {
        return Err(
            "the host resolves to an address webhooks may not reach (loopback, link-local)".into(),
        );
    }
    let mut client = reqwest::Client::builder()
        .timeout(limit)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(name) = &name {
        client = client.resolve_to_addrs(name, &addrs);
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let mut req = client.post(u).body(body);
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let r = req.send().await.map_err(|e| e.without_url().to_string())?;
    Ok(r.status().as_u16())
}

async fn post_json(url: &str, body: &Value, limit: Duration) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(limit)
        .build()
        .map_err(|e| e.to_string())?;
    // The URL is not logged: it may carry a token.
    let r = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", r.status()))
    }
}

/// How calls to provisioners are made. The default is Coopr's: 2 tries, 500 ms apart, 10 s connect
/// and socket timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Attempts per call, the first included (0 counts as 1).
    pub tries: u32,
    /// The wait between two attempts.
    pub pause: Duration,
    /// How long a connection may take to open.
    pub connect_timeout: Duration,
    /// How long a whole attempt may take.
    pub timeout: Duration,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            tries: 2,
            pause: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The HTTP client for provisioner calls, and whether calls are made at all (on by default; an
/// in-process test whose provisioners do not listen turns them off).
#[derive(Debug)]
pub struct Outbound {
    client: reqwest::Client,
    policy: Policy,
    enabled: AtomicBool,
    /// Provisioner tokens: the first is presented on every call.
    tokens: Option<std::sync::Arc<weft_client::tokens::Tokens>>,
}

impl Default for Outbound {
    fn default() -> Outbound {
        Outbound::new(Policy::default())
    }
}

impl Outbound {
    /// A client with this policy, calls enabled, presenting no provisioner token.
    pub fn new(policy: Policy) -> Outbound {
        let client = client_builder(&policy).build().unwrap_or_default();
        Outbound {
            client,
            policy,
            enabled: AtomicBool::new(true),
            tokens: None,
        }
    }

    /// Presents the first token of `tokens` on every call.
    pub fn with_tokens(
        mut self,
        tokens: Option<std::sync::Arc<weft_client::tokens::Tokens>>,
    ) -> Outbound {
        self.tokens = tokens;
        self
    }

    /// Trusts the certificates of provisioners that serve their API over TLS only when `ca` (the
    /// server's client CA, which signs the provisioners' certificates) signed them. A file that
    /// cannot be read keeps the system's roots: the listeners load the same file and refuse to
    /// start, naming it.
    pub fn with_provisioner_ca(mut self, ca: Option<&std::path::Path>) -> Outbound {
        let trust = weft_client::TlsTrust {
            ca_cert: ca.map(Into::into),
            ..Default::default()
        };
        match trust.apply(client_builder(&self.policy)).map(|b| b.build()) {
            Ok(Ok(client)) => self.client = client,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot trust the client CA for calls to provisioners")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot trust the client CA for calls to provisioners")
            }
        }
        self
    }

    /// Turns calls to provisioners on or off (off: nothing is sent; tests whose provisioners do not
    /// listen).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Whether calls to provisioners are made.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// One call with the retry policy. `Err` holds the last failure.
    async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<(), String> {
        let mut last = String::new();
        for attempt in 0..self.policy.tries.max(1) {
            if attempt > 0 {
                tokio::time::sleep(self.policy.pause).await;
            }
            let mut req = self.client.request(method.clone(), url);
            if let Some(v) = self.tokens.as_ref().and_then(|t| t.header_value()) {
                req = req.header(weft_client::tokens::HEADER, v);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            match req.send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("answered {}", r.status()),
                Err(e) => last = e.to_string(),
            }
            tracing::debug!(%method, url, attempt, error = %last, "provisioner call failed");
        }
        Err(last)
    }
}

impl Outbound {
    /// One POST of `body` to a provisioner (no retries), presenting the provisioner token, with its
    /// own `timeout`: the status and the body, or why no answer came.
    pub async fn post_json(
        &self,
        url: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        let mut req = self.client.post(url).timeout(timeout).json(body);
        if let Some(v) = self.tokens.as_ref().and_then(|t| t.header_value()) {
            req = req.header(weft_client::tokens::HEADER, v);
        }
        let r = req.send().await.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        Ok((status, r.text().await.map_err(|e| e.to_string())?))
    }
}

/// One call made to a provisioner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The provisioner called.
    pub provisioner_id: String,
    /// The tenant whose workers or resources were sent.
    pub tenant_id: String,
    /// `PUT` or `DELETE`.
    pub method: &'static str,
    /// Whether the provisioner answered with a 2xx, within the retries.
    pub ok: bool,
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Every call made, in order.
    pub sent: Vec<Sent>,
    /// Provisioners deleted because they kept failing.
    pub dropped: Vec<String>,
}

/// The tenant's live resources as provisioners get them (§5.13):
/// `{"automatortypes":{plugin:{resType:{"format", "permissions"?, "active":[{name, version}]}}},
/// "providertypes":{..}}`. Format and permissions come from the plugin type's `resourceTypes`.
pub async fn resource_collection(store: &dyn Store, tenant_id: &str) -> ApiResult<Value> {
    let mut out: BTreeMap<&'static str, Map<String, Value>> = BTreeMap::new();
    let mut types: BTreeMap<(String, String), Option<PluginType>> = BTreeMap::new();
    let rows = store.live_resources(tenant_id).await?;
    for (ptype, kind) in [
        ("automatortypes", EntityKind::AutomatorType),
        ("providertypes", EntityKind::ProviderType),
    ] {
        out.insert(ptype, Map::new());
        for row in &rows {
            if row.key.ptype != ptype {
                continue;
            }
            let pkey = (ptype.to_string(), row.key.plugin.clone());
            if !types.contains_key(&pkey) {
                let pt = store
                    .get_entity(SUPERADMIN, kind, &row.key.plugin, None)
                    .await?
                    .map(serde_json::from_value::<PluginType>)
                    .transpose()
                    .map_err(|e| {
                        ApiError::Internal(format!("plugin type {}: {e}", row.key.plugin))
                    })?;
                types.insert(pkey.clone(), pt);
            }
            let spec = types[&pkey]
                .as_ref()
                .and_then(|pt| pt.resource_types.get(&row.key.rtype));
            let plugin = out
                .get_mut(ptype)
                .expect("inserted above")
                .entry(row.key.plugin.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            let entry = plugin
                .as_object_mut()
                .expect("an object")
                .entry(row.key.rtype.clone())
                .or_insert_with(|| {
                    let mut m = Map::new();
                    m.insert(
                        "format".into(),
                        spec.map(|s| json!(s.format)).unwrap_or(json!("file")),
                    );
                    if let Some(p) = spec.and_then(|s| s.permissions.clone()) {
                        m.insert("permissions".into(), json!(p));
                    }
                    m.insert("active".into(), json!([]));
                    Value::Object(m)
                });
            if let Some(Value::Array(a)) = entry.get_mut("active") {
                a.push(json!({"name": row.key.name, "version": row.meta.version}));
            }
        }
    }
    Ok(json!(out))
}

fn tenant_url(p: &ProvisionerRecord, tenant_id: &str) -> String {
    provisioner_url(p, &format!("/v2/tenants/{tenant_id}"))
}

/// Tells one provisioner a tenant's worker count there (PUT with the resources, or DELETE at 0).
async fn tell(st: &Courier, p: &ProvisionerRecord, tenant_id: &str) -> ApiResult<Sent> {
    let n = p.assignments.get(tenant_id).copied().unwrap_or(0);
    let url = tenant_url(p, tenant_id);
    let (method, result) = if n == 0 {
        (
            "DELETE",
            st.outbound.call(reqwest::Method::DELETE, &url, None).await,
        )
    } else {
        let body = json!({
            "workers": n,
            "resources": resource_collection(st.store.as_ref(), tenant_id).await?,
        });
        (
            "PUT",
            st.outbound
                .call(reqwest::Method::PUT, &url, Some(&body))
                .await,
        )
    };
    match &result {
        Ok(()) => {
            tracing::info!(provisioner = %p.id, tenant_id, workers = n, method, "provisioner told")
        }
        Err(e) => tracing::warn!(provisioner = %p.id, tenant_id, workers = n, method, error = %e,
            "provisioner call failed"),
    }
    Ok(Sent {
        provisioner_id: p.id.clone(),
        tenant_id: tenant_id.to_string(),
        method,
        ok: result.is_ok(),
    })
}

/// Deletes provisioners that kept failing, places the workers again, and pushes those changes too.
async fn drop_failed(st: &Courier, failed: Vec<String>, report: &mut PushReport) -> ApiResult<()> {
    let mut failed = failed;
    while !failed.is_empty() {
        for id in &failed {
            let deleted = st.store.delete_provisioner(id).await?;
            st.provisioners.forget(id);
            if deleted {
                tracing::warn!(provisioner = %id, "provisioner keeps failing; dropped");
                report.dropped.push(id.clone());
            }
        }
        let moved = workers::reassign(st.store.as_ref()).await?;
        failed = tell_moved(st, &moved, report).await?;
    }
    Ok(())
}

/// Tells each provisioner in `moved` its current counts; returns the provisioners that failed.
async fn tell_moved(
    st: &Courier,
    moved: &[Moved],
    report: &mut PushReport,
) -> ApiResult<Vec<String>> {
    let mut by_provisioner: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in moved {
        by_provisioner
            .entry(m.provisioner_id.as_str())
            .or_default()
            .push(m.tenant_id.as_str());
    }
    let mut failed = Vec::new();
    for (pid, tenants) in by_provisioner {
        // The record as it is now: a later rebalance may have changed the counts again.
        let Some(p) = st.store.get_provisioner(pid).await? else {
            continue;
        };
        for t in tenants {
            let sent = tell(st, &p, t).await?;
            let ok = sent.ok;
            report.sent.push(sent);
            if !ok {
                failed.push(pid.to_string());
                break;
            }
        }
    }
    Ok(failed)
}

/// Pushes assignment changes (from [`workers::reassign`]) to the provisioners concerned.
pub async fn push_assignments(st: &Courier, moved: Vec<Moved>) -> ApiResult<PushReport> {
    let mut report = PushReport::default();
    if !st.outbound.enabled() || moved.is_empty() {
        return Ok(report);
    }
    let failed = tell_moved(st, &moved, &mut report).await?;
    drop_failed(st, failed, &mut report).await?;
    Ok(report)
}

/// Pushes the tenant's live resources (with its worker count) to every provisioner serving it.
pub async fn push_resources(st: &Courier, tenant_id: &str) -> ApiResult<PushReport> {
    let mut report = PushReport::default();
    if !st.outbound.enabled() {
        return Ok(report);
    }
    let serving: Vec<Moved> = st
        .store
        .list_provisioners()
        .await?
        .into_iter()
        .filter(|p| p.assignments.get(tenant_id).is_some_and(|n| *n > 0))
        .map(|p| Moved {
            provisioner_id: p.id,
            tenant_id: tenant_id.to_string(),
        })
        .collect();
    let failed = tell_moved(st, &serving, &mut report).await?;
    drop_failed(st, failed, &mut report).await?;
    Ok(report)
}

fn log_outcome(what: &'static str, r: ApiResult<PushReport>) -> PushReport {
    match r {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(what, error = %e, "provisioner push failed");
            PushReport::default()
        }
    }
}

/// [`push_assignments`] in a task of its own.
pub fn spawn_assignments(st: &Courier, moved: Vec<Moved>) -> tokio::task::JoinHandle<PushReport> {
    let st = st.clone();
    tokio::spawn(async move { log_outcome("assignments", push_assignments(&st, moved).await) })
}

/// [`push_resources`] in a task of its own.
pub fn spawn_resources(st: &Courier, tenant_id: &str) -> tokio::task::JoinHandle<PushReport> {
    let st = st.clone();
    let tenant_id = tenant_id.to_string();
    tokio::spawn(async move { log_outcome("resources", push_resources(&st, &tenant_id).await) })
}

/// How long the provisioners may take to list the machines of a drift check.
const MACHINES_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a provisioner may take to list (and delete) the machines of a sweep.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(900);

/// Where a provisioner lists the machines with weft's marks (a provider sweep, a drift check).
fn sweep_url(p: &ProvisionerRecord) -> String {
    provisioner_url(p, "/v2/sweep")
}

/// The HTTP client of calls to provisioners, with the policy's time-outs.
fn client_builder(policy: &Policy) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(policy.connect_timeout)
        .timeout(policy.timeout)
}

/// `path` on a provisioner's own API, at `https://` when it serves TLS.
fn provisioner_url(p: &ProvisionerRecord, path: &str) -> String {
    let host = if p.host.contains(':') && !p.host.starts_with('[') {
        format!("[{}]", p.host)
    } else {
        p.host.clone()
    };
    let scheme = if p.tls { "https" } else { "http" };
    format!("{scheme}://{host}:{}{path}", p.port)
}

/// Asks the provisioners (those serving the tenant first, then the freshest) until one that has
/// the provider type answers.
pub async fn ask_sweep(
    outbound: &Outbound,
    store: &dyn Store,
    tenant: &str,
    providertype: &str,
    body: &Value,
) -> Result<SweepReport, SweepError> {
    let mut all = store
        .list_provisioners()
        .await
        .map_err(|e| SweepError::Failed(e.to_string()))?;
    all.sort_by_key(|p| {
        let serving = p.assignments.get(tenant).is_some_and(|n| *n > 0);
        (!serving, -p.last_heartbeat_ms)
    });
    let mut unreachable = Vec::new();
    for p in &all {
        match outbound.post_json(&sweep_url(p), body, SWEEP_TIMEOUT).await {
            Ok((200, text)) => {
                return serde_json::from_str(&text).map_err(|e| {
                    SweepError::Failed(format!("provisioner {} sweep answer: {e}", p.id))
                })
            }
            Ok((404, _)) => continue,
            Ok((400, text)) => return Err(SweepError::Refused(text)),
            Ok((status, text)) => {
                return Err(SweepError::Failed(format!(
                    "provisioner {} answered {status}: {}",
                    p.id,
                    text.trim()
                )))
            }
            Err(e) => {
                tracing::warn!(provisioner = %p.id, error = %e, "sweep call failed");
                unreachable.push(p.id.clone());
            }
        }
    }
    Err(SweepError::NoProvisioner(format!(
        "no live provisioner has provider type {providertype}{}",
        if unreachable.is_empty() {
            String::new()
        } else {
            format!(" (unreachable: {})", unreachable.join(", "))
        }
    )))
}
