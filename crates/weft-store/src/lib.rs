//! weft-store: everything weft keeps, behind one [`Store`] trait.
//!
//! Two real backends share one SQL implementation through sqlx: SQLite (the embedded default, in WAL
//! mode) and PostgreSQL (for several servers sharing the load). Only this crate speaks SQL. Every key
//! that reaches the store carries a tenant id, except the global records (tenants, provisioners, API
//! keys). Migrations run at open and the schema version is recorded in `weft_schema`.
//!
//! Entities (providers, hardware and image types, services, templates, plugin types) are stored as
//! JSON documents, one row per (tenant, kind, name, version); each write makes version max+1.
//!
//! The engine's rows (clusters, nodes, jobs, tasks; see [`engine`]) carry a revision each and are
//! written only through [`Store::commit`]: one [`ChangeSet`] per engine step, in one transaction,
//! guarded by compare-and-swap [`Expect`]ations. Tasks in state `queued` form each tenant's queue,
//! handed out by [`Store::take_task`].
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use weft_model::{EntityKind, JobStatus, ResourceMeta, TenantSpecification};

pub mod audit;
pub mod engine;
pub mod events;
pub mod hostpool; // host pools (issue 7): see hostpool.rs
mod leader;
mod migrate;
mod sql;
pub mod webhooks;

pub use audit::{AuditAnchor, AuditEntry, AuditQuery, AuditRecord, ChainReport, StoredAudit};
pub use engine::{
    ChangeSet, ClusterRow, ClusterStamp, Expect, JobRow, NodeRow, Quota, Taken, TaskHead, TaskRow,
    TaskState, Write, GATE,
};
pub use events::{Event, EventBounds, EventKind, EventQuery};
pub use hostpool::{
    HostDelete, HostLease, HostPoolStore, HostRequest, PoolHostRow, Reservation, ShortGroup,
    Shortfall,
};
pub use leader::{Leadership, Lease};
pub use migrate::{Migration, MIGRATIONS, SCHEMA_VERSION};
pub use sql::{PgStore, Postgres, SqlStore, Sqlite, SqliteStore};
pub use webhooks::{DeliveryRow, DeliveryStatus, WebhookRow};

/// The one error type of this crate.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique name or id is taken (POST of an existing entity, tenant or key).
    #[error("{0} already exists")]
    Conflict(String),
    /// The database could not be reached or a statement failed.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// The database's disk is full (SQLite's `SQLITE_FULL`, PostgreSQL's `disk_full`, or no space
    /// left on the device): nothing of the operation was written. The same write succeeds once
    /// space has been freed; the store needs no restart.
    #[error("the store is out of space: {0}")]
    Full(String),
    /// A statement on the SQLite writer thread failed.
    #[error("database error: {0}")]
    Sqlite(String),
    /// PostgreSQL's writer task could not run a batch (connection lost, `COMMIT` failed) or has
    /// stopped: nothing of the operation was committed.
    #[error("database error: {0}")]
    Writer(String),
    /// The schema could not be brought to the current version.
    #[error("migration failed: {0}")]
    Migration(String),
    /// A stored document could not be read back.
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    /// A change set's expectation failed (the row names it and both revisions): another writer
    /// got there first. Nothing of the change set was written; read again and redo the step.
    #[error("stale write: {0}")]
    Stale(String),
    /// A change set would take its tenant over a quota ([`Expect::Quota`]); the text names the
    /// quota, its limit and what the tenant has. Nothing of the change set was written.
    #[error("tenant would exceed its quota {0}")]
    QuotaExceeded(String),
    /// A checked tenant write ([`Store::save_tenant`]) was refused; nothing was written.
    #[error("{0:?}")]
    TenantRefused(TenantRefusal),
    /// The URL names no supported backend, or an in-memory SQLite database (which would forget
    /// every cluster, and so leave its machines behind, when weft stops).
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://...")]
    BadUrl(String),
}

/// What every fallible call of this crate returns.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Why [`Store::save_tenant`] refused a tenant's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantRefusal {
    /// More workers than the provisioners have free (`free`, counting every other tenant's).
    Capacity {
        /// Workers free on the registered provisioners, other tenants' assignments deducted.
        free: u64,
    },
    /// Limits below what the tenant has: its clusters that are not terminated, and their nodes.
    BelowUsage {
        /// The tenant's clusters that are not terminated.
        clusters: u64,
        /// The nodes of those clusters.
        nodes: u64,
    },
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full(e.to_string()),
            _ => StoreError::Sqlite(e.to_string()),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        if out_of_space(&e) {
            StoreError::Full(e.to_string())
        } else {
            StoreError::Database(e)
        }
    }
}

/// SQLite's result code for a full disk (it has no extended codes).
const SQLITE_FULL: &str = "13";
/// PostgreSQL's SQLSTATE `disk_full`.
const PG_DISK_FULL: &str = "53100";
/// `ENOSPC` on Linux.
const ENOSPC: i32 = 28;

/// Whether `e` says the database's disk is full.
fn out_of_space(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some(SQLITE_FULL | PG_DISK_FULL))
        }
        sqlx::Error::Io(io) => io.raw_os_error() == Some(ENOSPC),
        _ => false,
    }
}

/// Which database is underneath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite (`sqlite://PATH`), the embedded default.
    Sqlite,
    /// PostgreSQL (`postgres://...`), for several servers sharing one database.
    Postgres,
}

/// The id of the built-in superadmin tenant (its name and id are both `superadmin`).
pub const SUPERADMIN: &str = "superadmin";

/// A tenant as stored: the internal id (a UUID, or `superadmin`) and the public specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// The internal id: a UUID, or `superadmin` for the built-in tenant. Store keys use it, never
    /// the name.
    pub id: String,
    /// The public specification: name (unique), workers, quotas and limits.
    pub spec: TenantSpecification,
    /// When the tenant was created, in ms since the epoch.
    pub create_time: i64,
}

/// Names one plugin resource: `{ptype}/{plugin}/{rtype}/{name}` in a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceKey {
    /// The tenant the resource belongs to.
    pub tenant_id: String,
    /// `providertypes` or `automatortypes`.
    pub ptype: String,
    /// The plugin type's name (a provider or automator type).
    pub plugin: String,
    /// The resource type, one of the plugin type's `resourceTypes`.
    pub rtype: String,
    /// The resource's name, unique per (tenant, plugin, resource type).
    pub name: String,
}

/// One version of a plugin resource with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRow {
    /// Which resource this is.
    pub key: ResourceKey,
    /// The version and its status (staged, active, recalled or inactive).
    pub meta: ResourceMeta,
}

/// What a resource delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceDelete {
    /// Removed (also when nothing matched: deletes are idempotent).
    Deleted,
    /// At least one matching version is not inactive; nothing was removed.
    NotDeletable,
}

/// A provisioner as stored. Tenant keys in `assignments` and `usage` are tenant ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionerRecord {
    /// The id the provisioner registered with.
    pub id: String,
    /// The host name or address the server calls it at.
    pub host: String,
    /// The port of its API.
    pub port: u16,
    /// How many workers it can run, for all tenants together.
    pub capacity_total: u32,
    /// Workers the server assigned here, per tenant id.
    pub assignments: BTreeMap<String, u32>,
    /// Live workers the provisioner reported, per tenant id.
    pub usage: BTreeMap<String, u32>,
    /// The last heartbeat (or registration), in ms since the epoch; the janitor drops provisioners
    /// silent for longer than `provisioner_timeout`.
    pub last_heartbeat_ms: i64,
    /// Whether the provisioner serves its API over TLS (the server calls it at `https://`).
    pub tls: bool,
}

/// An API key as stored: only the SHA-256 of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The key's id (a UUID): what lists show and deletes name; not the secret.
    pub id: String,
    /// The SHA-256 of the secret, in lower-case hex; what a presented key is looked up by.
    pub hash: String,
    /// The tenant the key acts in.
    pub tenant_id: String,
    /// The user the key acts as.
    pub user: String,
    /// Whether the key makes its holder the tenant admin (the superadmin, in the `superadmin`
    /// tenant).
    pub admin: bool,
    /// When the key was made, in ms since the epoch.
    pub create_time: i64,
}

/// A data key of the sealed secrets, as stored: wrapped (encrypted) by the master key `master_id`,
/// which the store never holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretKeyRow {
    /// The data key's id (hex), named in every value sealed with it.
    pub id: String,
    /// The id of the master key that wraps it: the first 16 hex digits of the master key's SHA-256.
    pub master_id: String,
    /// The data key sealed under the master key (`sealed:v1:<master id>:<base64url>`).
    pub wrapped: String,
    /// The order of creation: the last is the one new values are sealed with.
    pub seq: i64,
}

/// Everything weft keeps. Implemented by [`SqliteStore`] and [`PgStore`]; every
/// implementation passes the contract suite in `tests/it/contract.rs`. The host pools' methods
/// are in the supertrait [`HostPoolStore`] (hostpool.rs).
#[async_trait]
pub trait Store: HostPoolStore + Send + Sync + 'static {
    /// Which database is underneath.
    fn backend(&self) -> Backend;

    /// The schema version recorded by the last migration.
    async fn schema_version(&self) -> Result<i64>;

    /// The versions and times (ms since the epoch) of every applied migration, in order.
    async fn applied_migrations(&self) -> Result<Vec<(i64, i64)>>;

    /// Closes the store's connections, waiting for those in use to come back.
    async fn close(&self);

    // ---- tenants -------------------------------------------------------------------------------

    /// Inserts a tenant; `Conflict` if the name or id is taken.
    async fn insert_tenant(&self, tenant: &Tenant) -> Result<()>;
    /// Replaces the specification of the tenant with `tenant.id` (its name may not change).
    async fn update_tenant(&self, tenant: &Tenant) -> Result<()>;
    /// Inserts `tenant` (`insert`) or replaces its specification, if in the same transaction its
    /// workers fit the registered provisioners' free capacity and (update) its limits are not
    /// below what it has; else [`StoreError::TenantRefused`]. Checked writes and cluster creates
    /// of one tenant wait for each other, so no check is made on counts another one changes.
    async fn save_tenant(&self, tenant: &Tenant, insert: bool) -> Result<()>;
    /// The tenant with this (unique) name, if any.
    async fn tenant_by_name(&self, name: &str) -> Result<Option<Tenant>>;
    /// The tenant with this id, if any.
    async fn tenant_by_id(&self, id: &str) -> Result<Option<Tenant>>;
    /// Every tenant, by name.
    async fn list_tenants(&self) -> Result<Vec<Tenant>>;
    /// Deletes a tenant and everything it owns (entities, resources, profiles, keys). Idempotent.
    async fn delete_tenant(&self, id: &str) -> Result<()>;

    // ---- versioned entities --------------------------------------------------------------------

    /// Writes version 1 of a new name (deleted versions leave no trace: versions are max+1 over the
    /// stored rows); `Conflict` if any version of `name` exists. The stored body gets `"version"`
    /// set. Returns the version.
    async fn create_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        body: &Value,
    ) -> Result<u64>;
    /// Writes version max+1 (1 for a new name). Any `version` in `body` is replaced. Returns it.
    async fn put_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        body: &Value,
    ) -> Result<u64>;
    /// The given version, or the latest when `version` is `None`.
    async fn get_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        version: Option<u64>,
    ) -> Result<Option<Value>>;
    /// Every stored version of one entity, oldest first (empty when there is none).
    async fn entity_versions(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
    ) -> Result<Vec<Value>>;
    /// The latest version of every entity of `kind` in the tenant, ordered by name.
    async fn list_entities(&self, tenant_id: &str, kind: EntityKind) -> Result<Vec<Value>>;
    /// Deletes one version, or all versions when `version` is `None`. Idempotent.
    async fn delete_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        version: Option<u64>,
    ) -> Result<()>;
    /// In one transaction: deletes every entity of the six admin kinds in the tenant, then writes
    /// each given `(kind, name, body)` as a new version. Plugin types are not touched.
    async fn replace_entities(
        &self,
        tenant_id: &str,
        entities: &[(EntityKind, String, Value)],
    ) -> Result<()>;

    // ---- plugin resources ----------------------------------------------------------------------

    /// Records a new version (max+1, from 1) with status inactive and returns its number.
    async fn create_resource_version(&self, key: &ResourceKey) -> Result<u64>;
    /// Versions of resources under `{ptype}/{plugin}/{rtype}` (all names, or only `name`), ordered
    /// by
    /// name then version.
    async fn list_resources(
        &self,
        tenant_id: &str,
        ptype: &str,
        plugin: &str,
        rtype: &str,
        name: Option<&str>,
    ) -> Result<Vec<ResourceRow>>;
    /// Stages a version: it becomes slated and every other version of the name is un-slated
    /// (inactive -> staged, recalled -> active; an active sibling becomes recalled). `false` if the
    /// version does not exist.
    async fn stage_resource(&self, key: &ResourceKey, version: u64) -> Result<bool>;
    /// Recalls a version: un-slates it (active -> recalled, staged -> inactive). `false` if absent.
    async fn recall_resource(&self, key: &ResourceKey, version: u64) -> Result<bool>;
    /// Deletes one version or all versions of a name, only if every one of them is inactive.
    async fn delete_resource(
        &self,
        key: &ResourceKey,
        version: Option<u64>,
    ) -> Result<ResourceDelete>;
    /// Makes the slated versions live and the un-slated ones not live (staged -> active,
    /// recalled -> inactive) for the whole tenant, and returns the live (active) rows.
    async fn sync_resources(&self, tenant_id: &str) -> Result<Vec<ResourceRow>>;
    /// The active rows of a tenant.
    async fn live_resources(&self, tenant_id: &str) -> Result<Vec<ResourceRow>>;

    // ---- user profiles -------------------------------------------------------------------------

    /// The user's profile (a free JSON object), if one was saved.
    async fn get_profile(&self, tenant_id: &str, user: &str) -> Result<Option<Value>>;
    /// Saves the user's profile, replacing any earlier one.
    async fn put_profile(&self, tenant_id: &str, user: &str, profile: &Value) -> Result<()>;
    /// Removes the user's profile; removing none is not an error.
    async fn delete_profile(&self, tenant_id: &str, user: &str) -> Result<()>;

    // ---- provisioners --------------------------------------------------------------------------

    /// Inserts or replaces a provisioner record.
    async fn upsert_provisioner(&self, p: &ProvisionerRecord) -> Result<()>;
    /// The provisioner with this id, if registered.
    async fn get_provisioner(&self, id: &str) -> Result<Option<ProvisionerRecord>>;
    /// Every provisioner, by id.
    async fn list_provisioners(&self) -> Result<Vec<ProvisionerRecord>>;
    /// `true` if it existed.
    async fn delete_provisioner(&self, id: &str) -> Result<bool>;
    /// Records usage and the heartbeat time; `false` if the provisioner is unknown.
    async fn heartbeat_provisioner(
        &self,
        id: &str,
        usage: &BTreeMap<String, u32>,
        now_ms: i64,
    ) -> Result<bool>;

    // ---- API keys ------------------------------------------------------------------------------

    /// `Conflict` if the id or hash is taken.
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<()>;
    /// The key whose secret hashes to `hash` ([`ApiKeyRecord::hash`]), if any.
    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>>;
    /// Every key, by creation time.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>>;
    /// `true` if it existed.
    async fn delete_api_key(&self, id: &str) -> Result<bool>;

    // ---- the audit trail (see [`audit`]) -------------------------------------------------------

    /// Appends `entry` to its tenant's chain and returns it as stored.
    async fn append_audit(&self, entry: &AuditEntry) -> Result<AuditRecord>;
    /// The records `q` asks for, newest first.
    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>>;
    /// Every tenant's chain anchor and head.
    async fn audit_anchors(&self) -> Result<Vec<AuditAnchor>>;
    /// Up to `limit` records of a tenant from number `from_seq` on, in order, as stored.
    async fn audit_chain(
        &self,
        tenant_id: &str,
        from_seq: u64,
        limit: u64,
    ) -> Result<Vec<StoredAudit>>;
    /// Retention: removes the records older than `before` (ms) and moves the anchors past them.
    async fn purge_audit(&self, before: i64) -> Result<u64>;
    /// Chains the records of requests whose change committed but whose answer was never recorded
    /// (their server stopped), written before `before` (ms), with status 0. Returns how many.
    async fn settle_audit(&self, before: i64) -> Result<u64>;

    // ---- the event backlog (see [`events`]) ----------------------------------------------------

    /// The events `q` asks for, oldest first.
    async fn read_events(&self, q: &EventQuery) -> Result<Vec<Event>>;
    /// The oldest and newest event numbers a tenant's backlog holds.
    async fn event_bounds(&self, tenant_id: &str) -> Result<EventBounds>;
    /// Numbers the events committed since the last pass (PostgreSQL; SQLite numbers them as
    /// they are written) and returns a mark that changes whenever any tenant has new events.
    async fn sequence_events(&self) -> Result<u64>;
    /// Retention: removes events older than `before` (ms), each tenant's newest kept.
    async fn purge_events(&self, before: i64) -> Result<u64>;

    // ---- webhooks (see [`webhooks`]) -----------------------------------------------------------

    /// Writes a webhook: a new one with its cursor, or new settings of an existing one (its
    /// cursor kept).
    async fn put_webhook(&self, w: &WebhookRow) -> Result<()>;
    /// One tenant's webhooks, or every tenant's.
    async fn list_webhooks(&self, tenant_id: Option<&str>) -> Result<Vec<WebhookRow>>;
    /// The webhook with this id in the tenant, if any.
    async fn get_webhook(&self, tenant_id: &str, id: &str) -> Result<Option<WebhookRow>>;
    /// Removes a webhook and its delivery log; `true` if it existed.
    async fn delete_webhook(&self, tenant_id: &str, id: &str) -> Result<bool>;
    /// Takes or keeps a webhook's lease for `owner` until `until`; `false` if another holds it.
    async fn lease_webhook(
        &self,
        tenant_id: &str,
        id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<bool>;
    /// Moves a webhook's cursor from `from` to `to` and writes `pending` deliveries, in one
    /// commit; `false` (nothing written) if the cursor is no longer `from`.
    async fn advance_webhook(
        &self,
        tenant_id: &str,
        id: &str,
        from: u64,
        to: u64,
        pending: &[DeliveryRow],
    ) -> Result<bool>;
    /// Rewrites a delivery after an attempt or a redeliver.
    async fn put_delivery(&self, d: &DeliveryRow) -> Result<()>;
    /// A webhook's oldest pending delivery, due or not.
    async fn next_delivery(&self, tenant_id: &str, webhook_id: &str)
        -> Result<Option<DeliveryRow>>;
    /// A webhook's deliveries, newest event first, before an event id if given.
    async fn list_deliveries(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<Vec<DeliveryRow>>;
    /// The delivery of one event to one webhook, if the log still has it.
    async fn get_delivery(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        event_id: u64,
    ) -> Result<Option<DeliveryRow>>;
    /// Retention of the delivery log: removes delivered and failed rows last touched before
    /// `before` (ms).
    async fn purge_deliveries(&self, before: i64) -> Result<u64>;

    // ---- sealed secrets' data keys ----
    /// Every data key, oldest first.
    async fn list_secret_keys(&self) -> Result<Vec<SecretKeyRow>>;
    /// Writes these data keys in one transaction: a new id is added, an existing id is replaced
    /// (a rotation re-wraps them all at once) unless `only_new`, which keeps an existing row.
    async fn put_secret_keys(&self, rows: &[SecretKeyRow], only_new: bool) -> Result<()>;

    // ---- engine rows: clusters, nodes, jobs, tasks ---------------------------------------------

    /// Applies a change set in one transaction: first every expectation is checked (a row's
    /// stored `rev` equals the expected one; expected `rev` 0 means the row must not exist), then
    /// the writes apply in order. Each row write is an upsert that sets `rev` to the stored
    /// rev + 1, or 1 for a new row (the row's own `rev` is ignored); writing one row twice in a
    /// change set bumps it twice. If any expectation fails, nothing is written and the error is
    /// [`StoreError::Stale`] naming the row. (On PostgreSQL an expected row that the change set
    /// does not write is locked for share, so change sets that only read one row, e.g. a job's
    /// status, do not wait for each other.) Atomic under concurrent committers, in this process
    /// and across processes: of several change sets expecting the same revision of a row, exactly
    /// one commits (if it writes that row) and the others are stale.
    async fn commit(&self, cs: &ChangeSet) -> Result<()> {
        self.commit_released(cs).await.map(|_| ())
    }
    /// [`commit`](Store::commit) of a change set the caller gives up: a large one (a create's
    /// tens of thousands of task rows) is written from the rows themselves, without the copy of
    /// every statement's parameters that a borrowed one needs on SQLite's writer thread.
    async fn commit_owned(&self, cs: ChangeSet) -> Result<()> {
        self.commit(&cs).await
    }
    /// [`commit`](Store::commit), answering the ids of the successor-less gates (job ends) that
    /// the change set's [`Write::Release`]s completed.
    async fn commit_released(&self, cs: &ChangeSet) -> Result<Vec<String>>;
    /// The next value of a global counter (`clusters`, `jobs`, `tasks`, ...): 1 the first time,
    /// then +1 per call. Atomic: concurrent callers, also in other processes, never get the same
    /// value, and a value is never handed out twice (committed before it is returned).
    async fn next_id(&self, counter: &str) -> Result<u64>;
    /// A global counter's value without moving it: 0 if it was never counted.
    async fn counter(&self, counter: &str) -> Result<u64>;
    /// The cluster with this id in the tenant, if any.
    async fn get_cluster(&self, tenant_id: &str, id: u64) -> Result<Option<ClusterRow>>;
    /// The tenant's clusters (all, or only `owner`'s), newest (highest id) first.
    async fn list_clusters(&self, tenant_id: &str, owner: Option<&str>) -> Result<Vec<ClusterRow>>;
    /// A cluster's nodes, by `nodenum` (then id).
    async fn list_nodes(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<NodeRow>>;
    /// The node with this id in the tenant, if any.
    async fn get_node(&self, tenant_id: &str, node_id: &str) -> Result<Option<NodeRow>>;
    /// Every node of the tenant, by cluster id then `nodenum`.
    async fn list_tenant_nodes(&self, tenant_id: &str) -> Result<Vec<NodeRow>>;
    /// A job without its body (`Value::Null`): its status and counts, for progress. Never
    /// write such a row back.
    async fn get_job_head(&self, tenant_id: &str, job_id: &str) -> Result<Option<JobRow>>;
    /// The job with this id in the tenant, body included, if any.
    async fn get_job(&self, tenant_id: &str, job_id: &str) -> Result<Option<JobRow>>;
    /// A cluster's jobs, newest first: by `create_time` descending, ties by id descending (ids
    /// compared by length first, so `c-1000` is newer than `c-999`).
    async fn list_jobs(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<JobRow>>;
    /// The task with this id in the tenant, if any.
    async fn get_task(&self, tenant_id: &str, task_id: &str) -> Result<Option<TaskRow>>;
    /// A job's tasks, by id (compared by length first, so the zero-padded counter of Coopr's task
    /// ids sorts numerically past its padding).
    async fn list_tasks(&self, tenant_id: &str, job_id: &str) -> Result<Vec<TaskRow>>;
    /// [`list_tasks`](Store::list_tasks) without what a plan view does not show.
    async fn list_task_heads(&self, tenant_id: &str, job_id: &str) -> Result<Vec<TaskHead>>;
    /// A cluster's revision and its nodes' revision; `None` if the cluster does not exist.
    async fn cluster_stamp(&self, tenant_id: &str, id: u64) -> Result<Option<ClusterStamp>>;
    /// `(id, rev)` of each of a cluster's nodes, by id: what a cache of the nodes compares.
    async fn node_revs(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<(String, i64)>>;
    /// `(id, rev, body as JSON text)` of each of a cluster's nodes, by id: what a cache parses
    /// into its own types without a [`serde_json::Value`] of every body on the way (a node's
    /// body holds its services' definitions, some 4 KB of JSON and ten times that as a `Value`).
    async fn node_texts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<(String, i64, String)>>;
    /// The last `limit` tasks taken on a node (`started_at > 0`), gates not counted, oldest first:
    /// the node's action history.
    async fn node_tasks(&self, tenant_id: &str, node_id: &str, limit: u32) -> Result<Vec<TaskRow>>;

    // ---- the task queue and the janitor --------------------------------------------------------

    /// Hands out the tenant's next task: atomically picks the [`TaskState::Queued`] task with the
    /// smallest `(queued_at, id)` among those with `queued_at <= now` (a task queued in the
    /// future, e.g. a retry after a back-off, waits until then), sets it in progress with
    /// `lease_owner = owner` and `lease_deadline = deadline`, adds one to `attempts` and to
    /// `rev`, and returns the row as written. `None` when nothing is due. Only the tenant's own
    /// tasks are considered. Under concurrent takers (tasks or processes) each task is handed out
    /// exactly once.
    async fn take_task(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<TaskRow>> {
        Ok(self
            .take_next(tenant_id, owner, now, deadline)
            .await?
            .map(|t| t.task))
    }
    /// [`take_task`](Store::take_task), answering with the task its job's status and its
    /// cluster's stamp, read by the same statement.
    async fn take_next(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>>;
    /// A task and its job's status and revision, read by one statement.
    async fn task_with_job(
        &self,
        tenant_id: &str,
        task_id: &str,
    ) -> Result<Option<(TaskRow, Option<(JobStatus, i64)>)>>;
    /// In-progress tasks of every tenant whose lease has run out (`lease_deadline < now`), by
    /// deadline. The janitor fails or retries them through [`commit`](Store::commit).
    async fn expired_tasks(&self, now: i64) -> Result<Vec<TaskRow>>;
    /// In-progress tasks of every tenant leased by a worker of `provisioner_id` (lease owner
    /// `<provisioner_id>.<worker>`), oldest lease first. When a provisioner registers again (a new
    /// incarnation) or is dropped, the janitor and the registration fail these over at once.
    async fn tasks_leased_by(&self, provisioner_id: &str) -> Result<Vec<TaskRow>>;
    /// The tenant's in-progress tasks leased to the worker `owner` (`<provisioner_id>.<worker>`),
    /// oldest lease first. A worker runs one task at a time, so when it asks for work again the
    /// answers of these leases were lost.
    async fn leases_of(&self, tenant_id: &str, owner: &str) -> Result<Vec<TaskRow>>;
    /// Clusters of every tenant whose lease has run out: status `active` or `incomplete` and
    /// `0 < expire_time < now`, by expiry time.
    async fn expired_clusters(&self, now: i64) -> Result<Vec<ClusterRow>>;
    /// Jobs of every tenant that are `running` or `paused` although their end gate
    /// (`<jobId>-end`) is complete: a server stopped between completing the gate and the job. The
    /// janitor completes them.
    async fn ended_jobs(&self) -> Result<Vec<JobRow>>;
    /// Per tenant id: (queued tasks, in-progress tasks). Tenants with neither are absent.
    async fn queue_counts(&self) -> Result<BTreeMap<String, (u64, u64)>>;
    /// For quota checks: (the tenant's clusters that are not `terminated`, the nodes of those
    /// clusters), read from one snapshot.
    async fn count_clusters(&self, tenant_id: &str) -> Result<(u64, u64)>;
    // ---- leadership (leader.rs) -----------------------------------------------------------------

    /// Takes the lease on `role` for `holder` until `now + lease_ms` if it is free (no row, or its
    /// deadline is before `now`), or renews it if `holder` has it. Returns the term `holder` leads
    /// in, `None` if another holder's lease has not passed. A takeover, or a renewal after the
    /// deadline, starts a new term. One statement, so concurrent callers cannot both lead.
    async fn lead(&self, role: &str, holder: &str, now: i64, lease_ms: i64) -> Result<Option<i64>>;
    /// Ends `holder`'s lease on `role` at once (its term stays, so the next holder's is higher).
    /// Nothing happens if another holder has the role.
    async fn resign(&self, role: &str, holder: &str) -> Result<()>;
    /// The row of `role`, whether or not its lease has passed.
    async fn leader(&self, role: &str) -> Result<Option<Leadership>>;
}

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`), runs the migrations, and
/// makes sure the superadmin tenant exists.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    sql::open(url).await
}
