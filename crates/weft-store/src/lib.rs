//! weft-store: everything weft keeps, behind one [`Store`] trait.
//!
//! Two real backends share one SQL implementation through sqlx: SQLite (the embedded default, in WAL
//! mode) and PostgreSQL (for several servers sharing the load). Only this crate speaks SQL. Every key
//! that reaches the store carries a tenant id, except the global records (tenants, provisioners, API
//! keys). Migrations run at open and the schema version is recorded in `weft_schema`.
//!
//! Entities (providers, hardware and image types, services, templates, plugin types) are stored as
//! JSON documents, one row per (tenant, kind, name, version); each write makes version max+1.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use weft_model::{EntityKind, ResourceMeta, TenantSpecification};

mod migrate;
mod sql;

pub use migrate::{Migration, MIGRATIONS, SCHEMA_VERSION};
pub use sql::SqlStore;

/// The one error type of this crate.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique name or id is taken (POST of an existing entity, tenant or key).
    #[error("{0} already exists")]
    Conflict(String),
    /// The database could not be reached or a statement failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be brought to the current version.
    #[error("migration failed: {0}")]
    Migration(String),
    /// A stored document could not be read back.
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    /// The URL names no supported backend.
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://...")]
    BadUrl(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Which database is underneath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The id of the built-in superadmin tenant (its name and id are both `superadmin`).
pub const SUPERADMIN: &str = "superadmin";

/// A tenant as stored: the internal id (a UUID, or `superadmin`) and the public specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: String,
    pub spec: TenantSpecification,
    pub create_time: i64,
}

/// Names one plugin resource: `{ptype}/{plugin}/{rtype}/{name}` in a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceKey {
    pub tenant_id: String,
    /// `providertypes` or `automatortypes`.
    pub ptype: String,
    pub plugin: String,
    pub rtype: String,
    pub name: String,
}

/// One version of a plugin resource with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRow {
    pub key: ResourceKey,
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
    pub id: String,
    pub host: String,
    pub port: u16,
    pub capacity_total: u32,
    /// Workers the server assigned here, per tenant id.
    pub assignments: BTreeMap<String, u32>,
    /// Live workers the provisioner reported, per tenant id.
    pub usage: BTreeMap<String, u32>,
    pub last_heartbeat_ms: i64,
}

/// An API key as stored: only the SHA-256 of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub hash: String,
    pub tenant_id: String,
    pub user: String,
    pub admin: bool,
    pub create_time: i64,
}

/// Everything weft keeps. Implemented by [`SqlStore`] for SQLite and PostgreSQL; every
/// implementation passes the contract suite in `tests/it/contract.rs`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// The schema version recorded by the last migration.
    async fn schema_version(&self) -> Result<i64>;

    // ---- tenants -------------------------------------------------------------------------------

    /// Inserts a tenant; `Conflict` if the name or id is taken.
    async fn insert_tenant(&self, tenant: &Tenant) -> Result<()>;
    /// Replaces the specification of the tenant with `tenant.id` (its name may not change).
    async fn update_tenant(&self, tenant: &Tenant) -> Result<()>;
    async fn tenant_by_name(&self, name: &str) -> Result<Option<Tenant>>;
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
    /// Versions of resources under `{ptype}/{plugin}/{rtype}` (all names, or only `name`), ordered by
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

    async fn get_profile(&self, tenant_id: &str, user: &str) -> Result<Option<Value>>;
    async fn put_profile(&self, tenant_id: &str, user: &str, profile: &Value) -> Result<()>;
    async fn delete_profile(&self, tenant_id: &str, user: &str) -> Result<()>;

    // ---- provisioners --------------------------------------------------------------------------

    /// Inserts or replaces a provisioner record.
    async fn upsert_provisioner(&self, p: &ProvisionerRecord) -> Result<()>;
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
    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>>;
    /// Every key, by creation time.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>>;
    /// `true` if it existed.
    async fn delete_api_key(&self, id: &str) -> Result<bool>;
}

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`), runs the migrations, and
/// makes sure the superadmin tenant exists.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(SqlStore::connect(url).await?))
}
