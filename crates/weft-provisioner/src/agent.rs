//! The agent: registers with the server (and its plugin types), heartbeats, serves its own API,
//! and runs a pool of workers per tenant. A worker takes a task, runs it with its plugin, and
//! reports the result; it never dies of a bad task (a panicking plugin is a failed task). On
//! shutdown workers stop taking, finish what they hold, and the agent unregisters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weft_client::{Client, ClientError, Finish, PluginKind, Registration};

use crate::plugin::Plugins;
use crate::task::{PluginError, PluginResult, Task};
use crate::transport::tail_text;

/// What the agent needs to know.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The server's internal (provisioner) API, e.g. `http://127.0.0.1:55055`; or several
    /// servers' separated by commas, used in turn when one fails (see [`weft_client::Client::new`]).
    pub server: String,
    /// The provisioner's id, unique among the server's provisioners; [`default_id`] by default.
    pub id: String,
    /// Workers over all tenants.
    pub capacity: u32,
    /// Where the agent keeps its state: plugin resources, local nodes, keys (made absolute).
    pub data_dir: PathBuf,
    /// Where the agent's own API listens (port 0 picks one).
    pub bind: SocketAddr,
    /// The host the server should call back; the bind address when not set.
    pub advertise_host: Option<String>,
    /// Time between heartbeats to the server.
    pub heartbeat_interval: Duration,
    /// Wait after an empty queue (204).
    pub poll_interval: Duration,
    /// Wait after an error talking to the server.
    pub error_interval: Duration,
    /// How long a task may run.
    pub task_timeout: Duration,
    /// Characters of stdout and stderr sent with a result (the end is kept).
    pub max_output: usize,
    /// The provisioner token file ([`weft_client::tokens`]): its first token is presented to the
    /// server, and the server's calls to this agent must present one of its tokens. Required
    /// by a server with `auth = apikey`; unset, nothing is presented or checked.
    pub token_file: Option<PathBuf>,
    /// Whom to trust over TLS (the server's CA) and the client certificate to present.
    pub tls: weft_client::TlsTrust,
}

impl AgentConfig {
    /// The defaults for `server` and `data_dir`: 10 workers, the API on a free port of
    /// 127.0.0.1, a heartbeat every 5 s, tasks of at most 30 minutes, the last 8,192 characters
    /// of each output.
    pub fn new(server: &str, data_dir: PathBuf) -> AgentConfig {
        // Scripts run with a node's directory as their working directory: paths must be absolute.
        let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
        AgentConfig {
            server: server.to_string(),
            id: default_id(),
            capacity: 10,
            data_dir,
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise_host: None,
            heartbeat_interval: Duration::from_secs(5),
            poll_interval: Duration::from_millis(500),
            error_interval: Duration::from_secs(5),
            task_timeout: Duration::from_secs(1800),
            max_output: 8 * 1024,
            token_file: None,
            tls: Default::default(),
        }
    }
}

/// Whether the agent's API is served over TLS: it is when the agent has a certificate of its own.
fn api_serves_tls(tls: &weft_client::TlsTrust) -> bool {
    tls.client_cert.is_some() && tls.client_key.is_some()
}

/// The certificate the agent's API serves, reloaded when its files change: the one the agent
/// presents to the server (it must name the host the server calls and allow server use as well
/// as client use). The server verifies it against its client CA.
fn api_certificates(
    tls: &weft_client::TlsTrust,
) -> Result<Option<Arc<weft_client::tls::Certificates>>, AgentError> {
    let (Some(cert), Some(key)) = (&tls.client_cert, &tls.client_key) else {
        return Ok(None);
    };
    let files = weft_client::tls::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: None,
    };
    weft_client::tls::Certificates::load(files)
        .map(Some)
        .map_err(AgentError::ApiCertificate)
}

/// `provisioner-<host>-<pid>`.
pub fn default_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("provisioner-{host}-{}", std::process::id())
}

/// Why the agent could not start, or refused a change of its workers.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent's own API could not listen.
    #[error("binding the provisioner API on {addr}: {source}")]
    Bind {
        /// The address of [`AgentConfig::bind`].
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The certificate or key the agent's API serves could not be loaded.
    #[error("the provisioner API's TLS certificate: {0}")]
    ApiCertificate(std::io::Error),
    /// The server refused the registration (a 4xx), or another call to it failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// TLS refused the connection to the server: a configuration error, not retried.
    #[error("{0}")]
    TlsRefused(String),
    /// The workers asked for a tenant do not fit the agent's capacity, or the agent is shutting
    /// down; the message says which.
    #[error("{0}")]
    Capacity(String),
}

struct WorkerSlot {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

/// The worker pools, per tenant id.
#[derive(Default)]
struct Pools {
    tenants: BTreeMap<String, Vec<WorkerSlot>>,
    /// Workers asked to stop, still finishing a task.
    retiring: Vec<JoinHandle<()>>,
    /// The last resources the server sent per tenant.
    resources: BTreeMap<String, Value>,
}

pub(crate) struct Inner {
    pub(crate) cfg: AgentConfig,
    client: Client,
    pub(crate) plugins: Arc<Plugins>,
    pools: Mutex<Pools>,
    next_worker: AtomicU64,
    stopping: watch::Sender<bool>,
    syncing: tokio::sync::Mutex<()>,
    pub(crate) tokens: Option<Arc<weft_client::tokens::Tokens>>,
}

/// The agent as its API sees it.
struct ApiHandle(Arc<Inner>);

impl crate::api::Handler for ApiHandle {
    fn id(&self) -> &str {
        &self.0.cfg.id
    }
    fn capacity(&self) -> u32 {
        self.0.cfg.capacity
    }
    fn usage(&self) -> BTreeMap<String, u32> {
        self.0.usage()
    }
    fn set_resources(&self, tenant_id: &str, resources: Value) {
        self.0.set_resources(tenant_id, resources);
    }
    fn set_workers(&self, tenant_id: &str, workers: u32) -> Result<(), String> {
        self.0
            .set_workers(tenant_id, workers)
            .map_err(|e| e.to_string())
    }
    fn tokens(&self) -> Option<&weft_client::tokens::Tokens> {
        self.0.tokens.as_deref()
    }
    fn provider_plugin(&self, providertype: &str) -> Option<Arc<dyn crate::plugin::Provider>> {
        self.0.plugins.provider_plugin(providertype)
    }
}

/// A running agent.
pub struct Agent {
    inner: Arc<Inner>,
    addr: SocketAddr,
    heartbeat: JoinHandle<()>,
    api: JoinHandle<()>,
}

impl Agent {
    /// Binds the agent's API, registers the provisioner and its plugin types, and starts the
    /// heartbeat. No worker runs until the server (or [`Agent::set_workers`]) assigns some.
    pub async fn start(cfg: AgentConfig, plugins: Plugins) -> Result<Agent, AgentError> {
        let tokens = cfg
            .token_file
            .as_ref()
            .map(|p| Arc::new(weft_client::tokens::Tokens::new(p)));
        let mut client = Client::new(&cfg.server)?.with_tls(&cfg.tls)?;
        if let Some(t) = &tokens {
            client = client.with_tokens(t.clone());
        }
        let listener = tokio::net::TcpListener::bind(cfg.bind)
            .await
            .map_err(|source| AgentError::Bind {
                addr: cfg.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| AgentError::Bind {
            addr: cfg.bind,
            source,
        })?;
        let (stopping, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            cfg,
            client,
            plugins: Arc::new(plugins),
            pools: Mutex::new(Pools::default()),
            next_worker: AtomicU64::new(1),
            stopping,
            syncing: tokio::sync::Mutex::new(()),
            tokens,
        });
        let router = crate::api::router(Arc::new(ApiHandle(inner.clone())));
        let (tls, reload) = match api_certificates(&inner.cfg.tls)? {
            Some(certs) => (
                Some(certs.server_config().map_err(AgentError::ApiCertificate)?),
                Some(certs.watch()),
            ),
            None => (None, None),
        };
        let mut stop_rx = inner.stopping.subscribe();
        let api = tokio::spawn(async move {
            let stop = async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            };
            let patience = weft_client::listen::Patience::default();
            if let Err(e) = weft_client::listen::serve(listener, router, patience, tls, stop).await
            {
                tracing::error!(error = %e, "provisioner API stopped");
            }
            if let Some(r) = reload {
                r.abort();
            }
        });
        inner.register_until_done(addr).await?;
        let heartbeat = tokio::spawn(heartbeat_loop(inner.clone(), addr));
        tracing::info!(id = %inner.cfg.id, api = %addr, server = %inner.cfg.server, "provisioner registered");
        Ok(Agent {
            inner,
            addr,
            heartbeat,
            api,
        })
    }

    /// The agent's own API address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The provisioner id the agent registered with.
    pub fn id(&self) -> &str {
        &self.inner.cfg.id
    }

    /// Sets how many workers run for a tenant on this agent's own authority (the server's `PUT
    /// /v2/tenants/{id}` does it through the agent's API). The server hears of them in a
    /// heartbeat first: it gives a provisioner only the tasks of tenants it holds workers of.
    pub async fn set_workers(&self, tenant_id: &str, workers: u32) -> Result<(), AgentError> {
        let mut usage = self.inner.usage();
        usage.insert(tenant_id.to_string(), workers);
        let offered = self.inner.offered_types();
        if let Err(e) = self
            .inner
            .client
            .heartbeat(&self.inner.cfg.id, &usage, &offered)
            .await
        {
            tracing::warn!(error = %e, "could not tell the server of the new workers yet; the next heartbeat will");
        }
        self.inner.set_workers(tenant_id, workers)
    }

    /// Live workers per tenant id.
    pub fn usage(&self) -> BTreeMap<String, u32> {
        self.inner.usage()
    }

    /// Stops taking tasks, waits for the workers to finish what they hold, unregisters.
    pub async fn shutdown(self) {
        let _ = self.inner.stopping.send(true);
        let handles = {
            let mut pools = self.inner.pools.lock().expect("pools lock");
            let mut hs: Vec<JoinHandle<()>> = std::mem::take(&mut pools.retiring);
            for (_, slots) in std::mem::take(&mut pools.tenants) {
                for s in slots {
                    let _ = s.stop.send(true);
                    hs.push(s.handle);
                }
            }
            hs
        };
        for h in handles {
            let _ = h.await;
        }
        self.heartbeat.abort();
        if let Err(e) = self.inner.client.unregister(&self.inner.cfg.id).await {
            tracing::warn!(error = %e, "could not unregister");
        }
        let _ = self.api.await;
        tracing::info!(id = %self.inner.cfg.id, "provisioner stopped");
    }
}

impl Inner {
    async fn register(&self, addr: SocketAddr) -> Result<(), AgentError> {
        let host = self
            .cfg
            .advertise_host
            .clone()
            .unwrap_or_else(|| match addr.ip() {
                ip if ip.is_unspecified() => "127.0.0.1".to_string(),
                ip => ip.to_string(),
            });
        self.client
            .register(&Registration {
                id: self.cfg.id.clone(),
                host,
                port: addr.port(),
                capacity_total: self.cfg.capacity,
                scheme: if api_serves_tls(&self.cfg.tls) {
                    "https"
                } else {
                    "http"
                },
            })
            .await?;
        for t in self.plugins.provider_types() {
            self.client
                .register_plugin_type(PluginKind::Provider, &t)
                .await?;
        }
        for t in self.plugins.automator_types() {
            self.client
                .register_plugin_type(PluginKind::Automator, &t)
                .await?;
        }
        Ok(())
    }

    /// Registers, trying again with back-off (and saying so) while the server cannot be reached
    /// or answers 5xx: it may be starting beside this provisioner. A refusal (401, 403, another
    /// 4xx) is final. Gives up only when the agent is told to stop.
    async fn register_until_done(&self, addr: SocketAddr) -> Result<(), AgentError> {
        let mut wait = Duration::from_millis(100);
        let mut stop = self.stopping.subscribe();
        loop {
            match self.register(addr).await {
                Ok(()) => return Ok(()),
                Err(AgentError::Client(e)) if e.tls_refusal().is_some() => {
                    return Err(AgentError::TlsRefused(e.tls_refusal().unwrap_or_default()));
                }
                Err(AgentError::Client(e)) if transient(&e) => {
                    tracing::warn!(server = %self.cfg.server, error = %e, retry_in_ms = wait.as_millis() as u64,
                        "cannot register with the server yet; trying again");
                    if pause(wait, &mut stop).await {
                        return Err(AgentError::Client(e));
                    }
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The names of the plugin types this provisioner offers, by kind, as a heartbeat lists them.
    fn offered_types(&self) -> BTreeMap<String, Vec<String>> {
        let names = |v: Vec<weft_model::PluginType>| v.into_iter().map(|t| t.name).collect();
        BTreeMap::from([
            (
                PluginKind::Provider.path().to_string(),
                names(self.plugins.provider_types()),
            ),
            (
                PluginKind::Automator.path().to_string(),
                names(self.plugins.automator_types()),
            ),
        ])
    }

    /// Registers again the plugin types the server said it lacks.
    async fn register_missing(&self, missing: &BTreeMap<String, Vec<String>>) {
        let kinds = [
            (PluginKind::Provider, self.plugins.provider_types()),
            (PluginKind::Automator, self.plugins.automator_types()),
        ];
        for (kind, types) in kinds {
            let Some(names) = missing.get(kind.path()) else {
                continue;
            };
            for t in types.iter().filter(|t| names.contains(&t.name)) {
                tracing::warn!(name = %t.name, kind = kind.path(), "the server lacks a plugin type of this provisioner: registering it again");
                if let Err(e) = self.client.register_plugin_type(kind, t).await {
                    tracing::warn!(error = %e, "registering the plugin type again failed");
                }
            }
        }
    }

    pub(crate) fn usage(&self) -> BTreeMap<String, u32> {
        let pools = self.pools.lock().expect("pools lock");
        pools
            .tenants
            .iter()
            .map(|(t, slots)| {
                let live = slots.iter().filter(|s| !s.handle.is_finished()).count();
                (t.clone(), u32::try_from(live).unwrap_or(u32::MAX))
            })
            .collect()
    }

    /// Records a tenant's live resources and syncs them in the background (one sync at a time).
    pub(crate) fn set_resources(self: &Arc<Self>, tenant_id: &str, resources: Value) {
        {
            let mut pools = self.pools.lock().expect("pools lock");
            pools
                .resources
                .insert(tenant_id.to_string(), resources.clone());
        }
        let inner = self.clone();
        let tenant = tenant_id.to_string();
        tokio::spawn(async move {
            let _one = inner.syncing.lock().await;
            let root = inner.cfg.data_dir.join("resources");
            match crate::resources::sync(&inner.client, &root, &tenant, &resources).await {
                Ok(n) => tracing::info!(tenant_id = %tenant, live = n, "resources synced"),
                Err(e) => tracing::warn!(tenant_id = %tenant, error = %e, "resource sync failed"),
            }
        });
    }

    pub(crate) fn set_workers(
        self: &Arc<Self>,
        tenant_id: &str,
        workers: u32,
    ) -> Result<(), AgentError> {
        if *self.stopping.borrow() {
            return Err(AgentError::Capacity(
                "the provisioner is shutting down".into(),
            ));
        }
        let mut pools = self.pools.lock().expect("pools lock");
        let others: u32 = pools
            .tenants
            .iter()
            .filter(|(t, _)| t.as_str() != tenant_id)
            .map(|(_, s)| u32::try_from(s.len()).unwrap_or(u32::MAX))
            .sum();
        if others.saturating_add(workers) > self.cfg.capacity {
            return Err(AgentError::Capacity(format!(
                "{workers} workers for tenant {tenant_id} exceed the capacity of {} ({others} in use)",
                self.cfg.capacity
            )));
        }
        pools.retiring.retain(|h| !h.is_finished());
        let slots = pools.tenants.entry(tenant_id.to_string()).or_default();
        slots.retain(|s| !s.handle.is_finished());
        let mut retired = Vec::new();
        while slots.len() > workers as usize {
            let s = slots.pop().expect("non-empty");
            let _ = s.stop.send(true);
            retired.push(s.handle);
        }
        while slots.len() < workers as usize {
            let n = self.next_worker.fetch_add(1, Ordering::Relaxed);
            let worker_id = format!("worker-{n}");
            let (stop, rx) = watch::channel(false);
            let handle = tokio::spawn(worker_loop(
                self.clone(),
                tenant_id.to_string(),
                worker_id,
                rx,
            ));
            slots.push(WorkerSlot { stop, handle });
        }
        if workers == 0 {
            pools.tenants.remove(tenant_id);
        }
        pools.retiring.extend(retired);
        tracing::info!(tenant_id, workers, "tenant workers set");
        Ok(())
    }
}

async fn heartbeat_loop(inner: Arc<Inner>, addr: SocketAddr) {
    let mut tick = tokio::time::interval(inner.cfg.heartbeat_interval);
    tick.tick().await;
    loop {
        tick.tick().await;
        let offered = inner.offered_types();
        match inner
            .client
            .heartbeat(&inner.cfg.id, &inner.usage(), &offered)
            .await
        {
            Ok(Some(answer)) => inner.register_missing(&answer.missing_plugin_types).await,
            Ok(None) => {
                tracing::warn!("the server does not know this provisioner: registering again");
                if let Err(e) = inner.register(addr).await {
                    tracing::warn!(error = %e, "registering again failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Whether a failed call may pass later: the server unreachable, busy or starting.
fn transient(e: &ClientError) -> bool {
    match e {
        ClientError::Transport { .. } => e.tls_refusal().is_none(),
        ClientError::Status { status, .. } => *status >= 500 || *status == 429,
        ClientError::Decode { .. } => false,
    }
}

/// Waits `d`, or less if the worker is told to stop. Returns true when it should stop.
async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

async fn worker_loop(
    inner: Arc<Inner>,
    tenant_id: String,
    worker_id: String,
    mut stop: watch::Receiver<bool>,
) {
    let global = inner.stopping.subscribe();
    tracing::debug!(%tenant_id, %worker_id, "worker started");
    // The task the last finish took (`next`), if it took one.
    let mut next = None;
    loop {
        let stopping = || *stop.borrow() || *global.borrow();
        if next.is_none() && stopping() {
            break;
        }
        // A take in flight is never cancelled: the server may already have leased a task to this
        // worker, and a dropped answer would strand it until its lease expires.
        let taken = match next.take() {
            Some(task) => Ok(Some(task)),
            None => {
                inner
                    .client
                    .take(&inner.cfg.id, &worker_id, &tenant_id)
                    .await
            }
        };
        match taken {
            Ok(Some(task)) => {
                // A worker that is not stopping takes its next task with the finish.
                let take_next = !stopping();
                next = run_and_finish(&inner, &tenant_id, &worker_id, task, take_next).await;
            }
            Ok(None) => {
                if pause(inner.cfg.poll_interval, &mut stop).await || *global.borrow() {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(%tenant_id, %worker_id, error = %e, "take failed");
                if pause(inner.cfg.error_interval, &mut stop).await || *global.borrow() {
                    break;
                }
            }
        }
    }
    tracing::debug!(%tenant_id, %worker_id, "worker stopped");
}

/// Runs one task and reports it; with `take_next` the report takes the worker's next task too,
/// which it returns. Never panics: a plugin that panics fails its task.
async fn run_and_finish(
    inner: &Arc<Inner>,
    tenant_id: &str,
    worker_id: &str,
    raw: Value,
    take_next: bool,
) -> Option<Value> {
    let task_id = raw
        .get("taskId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let outcome = run_task(inner, tenant_id, raw).await;
    let mut finish = Finish {
        worker_id: worker_id.to_string(),
        provisioner_id: inner.cfg.id.clone(),
        tenant_id: tenant_id.to_string(),
        task_id: task_id.clone(),
        ..Default::default()
    };
    report_outcome(&mut finish, outcome, inner.cfg.max_output);
    if task_id.is_empty() {
        return None;
    }
    send_finish(inner, &finish, take_next).await
}

/// Runs the task with the plugins, within its time-out.
async fn run_task(inner: &Arc<Inner>, tenant_id: &str, raw: Value) -> PluginResult {
    let timeout = inner.cfg.task_timeout;
    let mut task = Task::from_json(raw, timeout)?;
    task.tenant_id = tenant_id.to_string();
    tracing::info!(task_id = %task.id, job_id = %task.job_id, cluster_id = %task.cluster_id,
        action = task.action.lower(), "running task");
    let plugins = inner.plugins.clone();
    // Plugins kill what they start at the time-out; this is the backstop for one that hangs
    // anyway (with a margin so the plugin's own report wins).
    let run = tokio::spawn(async move { plugins.run(&task).await });
    let abort = run.abort_handle();
    match tokio::time::timeout(timeout + Duration::from_secs(5), run).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(PluginError::fatal(format!("the plugin crashed: {e}"))
            .because(weft_model::FailureReason::Crash)),
        Err(_) => {
            abort.abort();
            Err(PluginError::timeout(format!(
                "the task did not end within {}s",
                timeout.as_secs()
            )))
        }
    }
}

/// Writes the task's outcome into its finish: status, output (the last `max` bytes of each
/// stream), and what the plugin answered or why it failed.
fn report_outcome(finish: &mut Finish, outcome: PluginResult, max: usize) {
    match outcome {
        Ok(out) => {
            finish.status = 0;
            finish.stdout = Some(tail_text(&out.stdout, max));
            finish.stderr = Some(tail_text(&out.stderr, max));
            finish.hostname = out.hostname;
            finish.ipaddresses = out.ipaddresses;
            finish.result = Some(out.result);
        }
        Err(e) => {
            let task_id = &finish.task_id;
            tracing::warn!(%task_id, retryable = e.retryable, reason = %e.reason, error = %e, "task failed");
            finish.status = 1;
            finish.stdout = Some(tail_text(&e.stdout, max));
            let stderr = if e.stderr.is_empty() {
                e.message.clone()
            } else {
                format!("{}\n{}", e.stderr, e.message)
            };
            finish.stderr = Some(tail_text(&stderr, max));
            finish.failure = Some(e.failure());
        }
    }
}

/// Sends the finish (with `take_next`, taking the next task, which it returns). The result
/// matters: try a few times before giving the task up to the server's time-out. A finish is
/// applied once however often it arrives, so one whose answer was lost is sent again.
async fn send_finish(inner: &Arc<Inner>, finish: &Finish, take_next: bool) -> Option<Value> {
    let task_id = &finish.task_id;
    for attempt in 0..5u32 {
        let sent = if take_next {
            inner.client.finish_and_take(finish).await
        } else {
            inner.client.finish(finish).await.map(|()| None)
        };
        match sent {
            Ok(next) => return next,
            Err(e) if e.status().is_some_and(|s| (400..500).contains(&s)) => {
                tracing::warn!(%task_id, error = %e, "finish refused");
                return None;
            }
            Err(e) => {
                tracing::warn!(%task_id, attempt, error = %e, "finish failed");
                tokio::time::sleep(
                    inner.cfg.error_interval.min(Duration::from_secs(2)) * (attempt + 1),
                )
                .await;
            }
        }
    }
    None
}
