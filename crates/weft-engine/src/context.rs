//! What every engine step works with: the [`Engine`] (store, settings, job notices, caches, the
//! [`Messenger`] to the world outside, the [`Clock`]) and who asks ([`Caller`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weft_store::{Store, Tenant};

use crate::clock::{Clock, SystemClock};
use crate::error::{EngineError, EngineResult};
use crate::events::{JobEvent, JobEventKind, Moved};
use crate::{cache, seal};

/// The settings the engine reads (weft-server's `Settings` hold them among others).
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// How long a worker holds a task before the janitor fails it.
    pub task_timeout_ms: i64,
    /// How many times a task runs before its job fails.
    pub max_action_retries: u32,
    /// How often the janitor runs.
    pub janitor_interval_ms: u64,
    /// How long a provisioner may stay silent before it is dropped.
    pub provisioner_timeout_ms: i64,
    /// Job notices are POSTed here.
    pub callback_url: Option<String>,
    /// Job notices are piped to this shell command.
    pub callback_command: Option<String>,
    /// How long one callback may take.
    pub callback_timeout_ms: u64,
    /// How often the janitor checks each active cluster for drift (`drift`); 0: never.
    pub check_interval_ms: u64,
    /// How many nodes of one cluster the janitor replaces by itself per hour (templates with
    /// `autoReplace`).
    pub auto_replace_per_hour: u32,
    /// The most nodes a cluster may have (creates and expands).
    pub max_cluster_size: u64,
    /// How long the audit trail keeps a record (0: for ever).
    pub audit_retention_ms: i64,
    /// How long the event stream's backlog keeps an event (0: for ever).
    pub event_retention_ms: i64,
    /// Webhooks (see [`crate::webhooks`]).
    pub webhooks: WebhookSettings,
}

/// How webhooks are delivered.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Whether webhook URLs may point at loopback and link-local addresses (tests, a receiver
    /// on the server's own machine); off: such URLs are refused (SSRF).
    pub allow_loopback: bool,
    /// The first retry's back-off ceiling; each retry doubles it, up to `retry_max_ms`, and
    /// waits a random time up to it (full jitter).
    pub retry_base_ms: u64,
    /// The longest back-off between two retries, in milliseconds.
    pub retry_max_ms: u64,
    /// How long a delivery is retried from its first attempt before it is marked failed.
    pub retry_window_ms: i64,
    /// How long one attempt may take.
    pub timeout_ms: u64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            allow_loopback: false,
            retry_base_ms: 1000,
            retry_max_ms: 3_600_000,
            retry_window_ms: 25 * 3_600_000,
            timeout_ms: 10_000,
        }
    }
}

/// What the engine asks of the world outside the store, which weft-server provides over HTTP: the
/// engine decides, the server delivers.
#[async_trait::async_trait]
pub trait Messenger: Send + Sync {
    /// Tenants' worker counts changed on these provisioners: tell them, in the background.
    fn workers_moved(&self, moved: Vec<Moved>);
    /// A sync changed which of `tenant`'s plugin resources are live: tell the provisioners, in
    /// the background.
    fn resources_synced(&self, _tenant: &str) {}
    /// POSTs a job notice to a callback URL within `limit`; an error is a short text for the log
    /// (never the URL, which may carry a token).
    async fn post_json(&self, url: &str, body: &Value, limit: Duration) -> Result<(), String>;
    /// POSTs a webhook delivery (`body` with `headers`) to `url` within `limit`, without
    /// following redirects, to an address [`crate::webhooks::address_allowed`] allows (checked
    /// on every address the host resolves to); answers the HTTP status, or why none came.
    async fn post_webhook(
        &self,
        _url: &str,
        _headers: &[(String, String)],
        _body: Vec<u8>,
        _limit: Duration,
        _allow_loopback: bool,
    ) -> Result<u16, String> {
        Err("no messenger".into())
    }
    /// The machines with weft's marks for `tenant` that a provisioner having `providertype`
    /// lists with the provider's fields `fields` (secrets included), except those of the nodes in
    /// `known` (a drift check's orphans). An error says why they could not be listed.
    async fn machines(
        &self,
        _tenant: &str,
        _providertype: &str,
        _fields: &Value,
        _known: &[String],
    ) -> Result<Vec<weft_model::SweptMachine>, String> {
        Err("no provisioner can be asked".into())
    }
    /// Asks a provisioner having `providertype` to sweep: `body` holds the provider's fields
    /// (secrets included), the tenant, its live node ids and whether to delete.
    async fn sweep(
        &self,
        _tenant: &str,
        providertype: &str,
        _body: &Value,
    ) -> Result<weft_model::SweepReport, SweepError> {
        Err(SweepError::NoProvisioner(format!(
            "no live provisioner has provider type {providertype}"
        )))
    }
}

/// Why a sweep got no report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepError {
    /// The provisioner refused the request (the provider type cannot list its machines, or a
    /// field is wrong): its message.
    Refused(String),
    /// No provisioner that has the provider type answered: which, and why.
    NoProvisioner(String),
    /// A provisioner failed.
    Failed(String),
}

impl std::fmt::Display for SweepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SweepError::Refused(m) | SweepError::NoProvisioner(m) | SweepError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

/// A [`Messenger`] that tells nobody (tests, tools).
pub struct Quiet;

#[async_trait::async_trait]
impl Messenger for Quiet {
    fn workers_moved(&self, _moved: Vec<Moved>) {}
    async fn post_json(&self, _url: &str, _body: &Value, _limit: Duration) -> Result<(), String> {
        Err("no messenger".into())
    }
}

/// What every engine step works with: the store, the settings, the job notices, the per-process
/// caches, the [`Messenger`] and the [`Clock`]. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    /// Everything weft keeps.
    pub store: Arc<dyn Store>,
    /// The server's settings as the engine needs them.
    pub settings: Arc<EngineSettings>,
    /// Job notices (start, success, failure), after they are committed.
    pub events: tokio::sync::broadcast::Sender<JobEvent>,
    /// What task payloads derive from clusters (see [`cache`]).
    pub payloads: Arc<cache::PayloadCache>,
    /// Provisioners recently seen registered (see [`cache`]).
    pub provisioners: Arc<cache::ProvisionerCache>,
    /// Tasks this server leased and that have not finished yet (see [`cache`]).
    pub leases: Arc<cache::LeaseCache>,
    /// Providers as the catalog has them now, for task payloads (see [`cache`]).
    pub providers: Arc<cache::ProviderCache>,
    /// Permits for answers that read a whole cluster ([`HEAVY_READS`] at once), so that many
    /// concurrent reads of a large cluster queue instead of multiplying peak memory.
    pub heavy_reads: Arc<tokio::sync::Semaphore>,
    /// Permits for every other read answer ([`READS`] at once): what many concurrent readers of
    /// lists and status hold in memory and in store connections stays bounded.
    pub reads: Arc<tokio::sync::Semaphore>,
    /// Calls out of the process.
    pub messenger: Arc<dyn Messenger>,
    /// Changes whenever a tenant's event backlog has new events (see [`crate::feed`]).
    pub feed_mark: Arc<tokio::sync::watch::Sender<u64>>,
    /// When the janitor last looked for idle clusters (see `idle`): at most once a minute.
    pub idle_pass_at: Arc<std::sync::atomic::AtomicI64>,
    /// Wakes this server's webhook deliveries (a redelivery asked here).
    pub webhooks_wake: Arc<tokio::sync::Notify>,
    /// Seals secrets before they are stored and opens them for provisioners (see [`seal`]).
    pub sealer: Arc<seal::Sealer>,
    /// Where every step reads the time (see [`crate::clock`]).
    pub clock: Arc<dyn Clock>,
}

/// How many whole-cluster answers are built at once.
pub const HEAVY_READS: usize = 4;

/// How many other read answers (lists, status, one node) are built at once.
pub const READS: usize = 32;

impl Engine {
    /// An engine over `store` with empty caches, on the system's clock (see
    /// [`Engine::with_clock`]), sealing secrets under a key of the process's own (see
    /// [`Engine::with_secrets_key`]).
    pub fn new(
        store: Arc<dyn Store>,
        settings: EngineSettings,
        messenger: Arc<dyn Messenger>,
    ) -> Engine {
        let (events, _) = tokio::sync::broadcast::channel(1024);
        Engine {
            settings: Arc::new(settings),
            events,
            payloads: Arc::default(),
            provisioners: Arc::default(),
            leases: Arc::default(),
            providers: Arc::default(),
            heavy_reads: Arc::new(tokio::sync::Semaphore::new(HEAVY_READS)),
            reads: Arc::new(tokio::sync::Semaphore::new(READS)),
            sealer: Arc::new(seal::Sealer::new(store.clone(), seal::KeySource::Ephemeral)),
            store,
            messenger,
            feed_mark: Arc::new(tokio::sync::watch::channel(0).0),
            idle_pass_at: Arc::default(),
            webhooks_wake: Arc::default(),
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// The same engine reading the time from `clock` (a test's [`crate::clock::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Engine {
        self.clock = clock;
        self
    }

    /// Milliseconds since the Unix epoch, as the engine's clock has it.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A permit to build an answer that reads a whole cluster or job (see [`HEAVY_READS`]).
    pub async fn heavy_read(&self) -> EngineResult<tokio::sync::SemaphorePermit<'_>> {
        self.heavy_reads
            .acquire()
            .await
            .map_err(|e| EngineError::Internal(format!("heavy reads: {e}")))
    }

    /// A permit to build any other read answer (see [`READS`]).
    pub async fn light_read(&self) -> EngineResult<tokio::sync::SemaphorePermit<'_>> {
        self.reads
            .acquire()
            .await
            .map_err(|e| EngineError::Internal(format!("reads: {e}")))
    }

    /// The same engine with its secrets sealed under the master key from `source`.
    pub fn with_secrets_key(mut self, source: seal::KeySource) -> Engine {
        self.sealer = Arc::new(seal::Sealer::new(self.store.clone(), source));
        self
    }
}

impl Engine {
    /// Whether some provisioner has heartbeat within `provisioner_timeout`.
    pub async fn any_provisioner_alive(&self) -> weft_store::Result<bool> {
        let now = self.now_ms();
        Ok(self
            .store
            .list_provisioners()
            .await?
            .iter()
            .any(|p| now - p.last_heartbeat_ms < self.settings.provisioner_timeout_ms))
    }
}

/// A caller's role in its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A plain user: sees and changes only the clusters they own.
    User,
    /// The tenant admin: manages the tenant's catalog and every cluster of the tenant.
    Admin,
    /// The superadmin (the admin of the `superadmin` tenant): manages tenants, plugin types and
    /// provisioners too.
    SuperAdmin,
}

/// Who asks for an operation: the tenant it acts in, the user (a cluster's owner) and the role.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The tenant the caller acts in.
    pub tenant: Tenant,
    /// The caller's user id; the owner of the clusters it creates.
    pub user: String,
    /// What the caller may do.
    pub role: Role,
}

impl Caller {
    /// Whether the caller administers its tenant (the superadmin does too).
    pub fn is_admin(&self) -> bool {
        self.role >= Role::Admin
    }

    /// Refuses a caller who does not administer its tenant.
    pub fn require_admin(&self) -> EngineResult<()> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(EngineError::Forbidden(format!(
                "user {} is not an admin of tenant {}",
                self.user, self.tenant.spec.name
            )))
        }
    }

    /// Refuses (an empty 403, as Coopr answered) a caller who is not the superadmin.
    pub fn require_superadmin(&self) -> EngineResult<()> {
        if self.role == Role::SuperAdmin {
            Ok(())
        } else {
            Err(EngineError::Forbidden(String::new()))
        }
    }
}

/// Sends a notice; nobody listening is fine.
pub fn notify(st: &Engine, kind: JobEventKind, tenant_id: &str, cluster_id: u64, job_id: &str) {
    let _ = st.events.send(JobEvent {
        kind,
        tenant_id: tenant_id.into(),
        cluster_id,
        job_id: job_id.into(),
    });
}
