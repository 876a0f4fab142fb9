//! [`SqlStore`]: the [`Store`] over SQLite ([`SqliteStore`]) or PostgreSQL ([`PgStore`]): the SQL
//! both share, through sqlx's `Any` driver, and per backend its own path for the engine's hot
//! operations ([`Hot`]: `sqlite.rs`, `postgres.rs`), which is that backend's only way to commit a
//! change set.
//!
//! Queries are checked at run time (no compile-time macros, no `DATABASE_URL` at build) and use
//! `$1`-style placeholders, which both sqlx drivers accept. Every method is one transaction (or one
//! statement, which is its own transaction), so a crash leaves either all or none of a write.
//!
//! # Concurrency
//!
//! * **SQLite** runs in WAL mode with `busy_timeout` 5 s and `foreign_keys` on, set on every
//!   connection. Writes go through a pool of exactly **one** connection and start with
//!   `BEGIN IMMEDIATE`, so writers in this process queue in the pool instead of failing with
//!   `SQLITE_BUSY`, and a writer in another process waits on the busy timeout instead of deadlocking
//!   on a read-to-write lock upgrade. Reads use a separate pool of several connections: WAL lets
//!   them run beside the writer. The engine's hot operations skip sqlx: they run on a writer
//!   thread and a reader thread of their own (`writer.rs`), and the writer thread's
//!   transactions serialize with sqlx's through SQLite's write lock and the busy timeout.
//! * **PostgreSQL** uses one pool for both. Writes that compute `max(version) + 1` can race under
//!   READ COMMITTED; the loser hits the primary key and the whole transaction is retried, so
//!   concurrent writers neither fail nor lose a write. The engine's change sets and takes skip the
//!   pool: writer tasks with connections of their own batch them, one transaction per batch
//!   (`pg_writer.rs`).

// `SqlStore<B>`'s backend is sealed: its trait, `Hot`, is crate-private on purpose.
#![allow(private_bounds)]

use std::collections::BTreeMap;
use std::future::Future;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Connection, Executor, Row, Transaction};
use weft_model::{
    EntityKind, JobStatus, ResourceMeta, ResourceStatus, TenantSpecification, UNBOUNDED,
};

use crate::audit::Pending;
use crate::engine::{
    ChangeSet, ClusterRow, ClusterStamp, JobRow, NodeRow, Taken, TaskHead, TaskRow, Write,
};
use crate::events::{Event, EventBounds, EventQuery};
use crate::migrate;
use crate::webhooks::{DeliveryRow, WebhookRow};
use crate::{
    ApiKeyRecord, AuditAnchor, AuditEntry, AuditQuery, AuditRecord, Backend, Leadership,
    ProvisionerRecord, ResourceDelete, ResourceKey, ResourceRow, Result, SecretKeyRow, Store,
    StoreError, StoredAudit, Tenant, TenantRefusal, SUPERADMIN,
};

mod audit;
mod engine;
mod events;
mod hostpool; // HostPoolStore for SqlStore (host pools)
mod pg_reader;
use pg_reader::ReadOn;
mod pg_writer;
mod postgres;
mod sqlite;
mod webhooks;
mod writer;

pub use postgres::Postgres;
pub use sqlite::Sqlite;

use engine::{AnyQuery, Param, RowMap};

/// How many times a write that lost a version race is retried before giving up.
const MAX_VERSION_RETRIES: usize = 64;

/// The store over SQL: the statements both backends share, on the pools of sqlx's `Any` driver,
/// and `B`, the backend's own path for the engine's hot operations (`Hot`): [`SqliteStore`] or
/// [`PgStore`]. Cheap to clone (the pools and the backend's workers are shared).
#[derive(Debug, Clone)]
pub struct SqlStore<B> {
    /// Every write transaction but the hot path's. On SQLite: exactly one connection.
    writer: AnyPool,
    /// Read-only statements. On PostgreSQL the same pool as `writer`.
    reader: AnyPool,
    /// The backend's hot path.
    hot: B,
}

/// The store on a SQLite file: change sets, takes and the leader lease on a writer thread of its
/// own (`writer.rs`), the frequent reads on a reader thread.
pub type SqliteStore = SqlStore<Sqlite>;

/// The store on PostgreSQL: change sets and takes batched by writer tasks through a PL/pgSQL
/// function (`pg_writer.rs`), the frequent reads on connections without sqlx's pings.
pub type PgStore = SqlStore<Postgres>;

/// What a backend does its own way: the engine's hot operations. Each backend commits a change set
/// one way only (`SqliteWriter` or `PgWriter`); everything else is the SQL both share.
#[async_trait]
pub(crate) trait Hot: std::fmt::Debug + Clone + Send + Sync + 'static {
    /// Which backend this is.
    const BACKEND: Backend;

    /// Commits a change set in one transaction; the job-end gates its releases completed.
    async fn commit(&self, cs: &ChangeSet) -> Result<Vec<String>>;

    /// [`Hot::commit`] of a change set given up by its caller.
    async fn commit_owned(&self, cs: ChangeSet) -> Result<()>;

    /// Leases the next queued task of a tenant (see [`Store::take_next`]).
    async fn take(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>>;

    /// A task with its job's status and revision, as the latest commit left them.
    async fn task_with_job(&self, tenant_id: &str, task_id: &str) -> Result<TaskWithJob>;

    /// Runs a write that answers at most one integer, in turn with the hot writes.
    async fn scalar(
        &self,
        pool: &AnyPool,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Option<i64>>;

    /// One of the engine's frequent reads: `sql` with `params`, each row mapped by `M`.
    async fn read<M: RowMap>(
        &self,
        pool: &AnyPool,
        sql: String,
        params: Vec<Param>,
    ) -> Result<Vec<M::Out>>;

    /// Any other read's rows, on `pool` or the backend's own read connections.
    async fn fetch_all(&self, pool: &AnyPool, q: AnyQuery<'_>) -> Result<Vec<AnyRow>>;

    /// Any other read's one row at most, on `pool` or the backend's own read connections.
    async fn fetch_optional(&self, pool: &AnyPool, q: AnyQuery<'_>) -> Result<Option<AnyRow>>;
}

/// A task with its job's status and revision (`None` when the job is gone).
pub(crate) type TaskWithJob = Option<(TaskRow, Option<(JobStatus, i64)>)>;

impl<B: Hot> SqlStore<B> {
    pub(crate) fn backend_kind(&self) -> Backend {
        B::BACKEND
    }

    /// Starts a write transaction ([`begin`]). Within a request's handling, the transaction
    /// carries the request's audit record ([`Pending`]).
    pub(crate) async fn write_tx(&self) -> Result<Transaction<'static, Any>> {
        let mut tx = begin(&self.writer, B::BACKEND).await?;
        if let Some(row) = Pending::current().and_then(|p| p.row()) {
            let (sql, params) = engine::audit_pending_statement(&row);
            let mut q = sqlx::query(sql);
            for p in params {
                q = engine::bind_param(q, p);
            }
            q.execute(&mut *tx).await?;
        }
        Ok(tx)
    }

    /// Runs `attempt` in a fresh write transaction, again when it lost a race on a unique key.
    async fn retry_on_unique<T, F, Fut>(&self, mut attempt: F) -> Result<T>
    where
        F: FnMut(Transaction<'static, Any>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = 0;
        loop {
            let tx = self.write_tx().await?;
            match attempt(tx).await {
                Err(StoreError::Database(e))
                    if is_unique_violation(&e) && tries < MAX_VERSION_RETRIES =>
                {
                    tries += 1;
                    tracing::debug!(tries, "version race lost, retrying");
                }
                other => return other,
            }
        }
    }
}

/// Starts a write transaction on `pool`: `BEGIN IMMEDIATE` on SQLite (the write lock at once,
/// so writers queue instead of deadlocking on a lock upgrade), a plain `BEGIN` on PostgreSQL.
pub(crate) async fn begin(pool: &AnyPool, backend: Backend) -> Result<Transaction<'static, Any>> {
    Ok(match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await?,
        Backend::Postgres => pool.begin().await?,
    })
}

/// Readies a database: the missing migrations, then the superadmin tenant.
async fn prepare(pool: &AnyPool, backend: Backend) -> Result<()> {
    migrate::run(pool, backend, now_ms()).await?;
    let mut tx = begin(pool, backend).await?;
    sqlx::query(
        "INSERT INTO tenants (id, name, description, workers, max_clusters, max_nodes, create_time) \
         VALUES ($1, $2, $3, 0, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(SUPERADMIN)
    .bind(SUPERADMIN)
    .bind("super admin tenant")
    .bind(UNBOUNDED as i64)
    .bind(UNBOUNDED as i64)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn insert_tenant_row(tx: &mut Transaction<'static, Any>, tenant: &Tenant) -> Result<()> {
    let res = sqlx::query(
        "INSERT INTO tenants \
         (id, name, description, workers, max_clusters, max_nodes, check_interval, create_time, \
          max_cost_per_hour) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(tenant.id.as_str())
    .bind(tenant.spec.name.as_str())
    .bind(tenant.spec.description.as_deref())
    .bind(i64::from(tenant.spec.workers))
    .bind(to_i64(tenant.spec.max_clusters))
    .bind(to_i64(tenant.spec.max_nodes))
    .bind(to_i64(tenant.spec.check_interval))
    .bind(tenant.create_time)
    .bind(tenant.spec.max_cost_per_hour.as_deref())
    .execute(&mut **tx)
    .await;
    match res {
        Err(e) if is_unique_violation(&e) => {
            Err(StoreError::Conflict(format!("tenant {}", tenant.spec.name)))
        }
        Err(e) => Err(e.into()),
        Ok(_) => Ok(()),
    }
}

async fn update_tenant_row(tx: &mut Transaction<'static, Any>, tenant: &Tenant) -> Result<()> {
    sqlx::query(
        "UPDATE tenants SET description = $2, workers = $3, max_clusters = $4, max_nodes = $5, \
         check_interval = $6, max_cost_per_hour = $7 WHERE id = $1",
    )
    .bind(tenant.id.as_str())
    .bind(tenant.spec.description.as_deref())
    .bind(i64::from(tenant.spec.workers))
    .bind(to_i64(tenant.spec.max_clusters))
    .bind(to_i64(tenant.spec.max_nodes))
    .bind(to_i64(tenant.spec.check_interval))
    .bind(tenant.spec.max_cost_per_hour.as_deref())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// [`Store::save_tenant`]'s checks, on what `tx` reads.
async fn check_tenant(
    tx: &mut Transaction<'static, Any>,
    tenant: &Tenant,
    insert: bool,
) -> Result<()> {
    if tenant.spec.workers > 0 {
        let row = sqlx::query(
            "SELECT CAST((SELECT COALESCE(SUM(capacity_total), 0) FROM provisioners) AS BIGINT) \
             AS total, CAST((SELECT COALESCE(SUM(workers), 0) FROM tenants WHERE id <> $1) \
             AS BIGINT) AS used",
        )
        .bind(tenant.id.as_str())
        .fetch_one(&mut **tx)
        .await?;
        let total = to_u64(row.try_get("total")?, "worker capacity")?;
        let free = total.saturating_sub(to_u64(row.try_get("used")?, "workers")?);
        if u64::from(tenant.spec.workers) > free {
            return Err(StoreError::TenantRefused(TenantRefusal::Capacity { free }));
        }
    }
    if !insert {
        let row = sqlx::query(engine::QUOTA_COUNTS)
            .bind(tenant.id.as_str())
            .fetch_one(&mut **tx)
            .await?;
        let clusters = to_u64(row.try_get("c")?, "cluster count")?;
        let nodes = to_u64(row.try_get("n")?, "node count")?;
        if tenant.spec.max_clusters < clusters || tenant.spec.max_nodes < nodes {
            return Err(StoreError::TenantRefused(TenantRefusal::BelowUsage {
                clusters,
                nodes,
            }));
        }
    }
    Ok(())
}

/// The audit record of the request being handled, as one more write of its change sets; `None`
/// outside a request (see [`Pending`]).
fn pending_audit_write() -> Option<Write> {
    Pending::current()?.row().map(Write::AuditPending)
}

/// Opens the store a URL names (see [`crate::open`]).
pub(crate) async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    Ok(match backend_of(url)? {
        Backend::Sqlite => std::sync::Arc::new(SqliteStore::open(url).await?),
        Backend::Postgres => std::sync::Arc::new(PgStore::open(url).await?),
    })
}

/// Which backend a URL names.
fn backend_of(url: &str) -> Result<Backend> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        Err(StoreError::BadUrl(url.to_string()))
    }
}

/// Adds `mode=rwc` (create if missing) unless the URL chooses a mode.
fn sqlite_url(url: &str) -> String {
    if url.contains("mode=") || url.contains(":memory:") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

/// The file of a `sqlite:` URL.
fn sqlite_path(url: &str) -> &str {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    path.split('?').next().unwrap_or(path)
}

/// Whether a connection coming back to its pool may be handed out again. Not while it is inside
/// a transaction: a `COMMIT` or `ROLLBACK` that failed (on a full disk SQLite may already have
/// rolled the transaction back itself, and the `ROLLBACK` of a dropped transaction then fails
/// too) leaves sqlx counting an open transaction, and every later `begin` on that connection
/// would fail ("begin_with at non-zero transaction depth") until a restart. Such a connection
/// is closed instead, and the pool opens a fresh one when it needs it.
fn reusable(
    conn: &mut sqlx::AnyConnection,
) -> std::pin::Pin<Box<dyn Future<Output = sqlx::Result<bool>> + Send + '_>> {
    Box::pin(async move {
        if !conn.is_in_transaction() {
            return Ok(true);
        }
        // The rollback of a dropped transaction is queued on the connection: let it run first.
        conn.ping().await?;
        let clean = !conn.is_in_transaction();
        if !clean {
            tracing::warn!("a store connection still inside a transaction is closed, not reused");
        }
        Ok(clean)
    })
}

/// The pool options both backends share: connections left inside a transaction are dropped
/// ([`reusable`]) when they come back and before they are handed out.
fn pool_options(max: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        .after_release(|conn, _meta| reusable(conn))
        .before_acquire(|conn, _meta| reusable(conn))
}

fn sqlite_pool(max: u32) -> AnyPoolOptions {
    pool_options(max)
        // A connection to a local file does not go stale: no ping before every statement.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute("PRAGMA journal_mode = WAL").await?;
                conn.execute("PRAGMA busy_timeout = 5000").await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                conn.execute("PRAGMA synchronous = NORMAL").await?;
                Ok(())
            })
        })
}

/// Whether `e` says the database connection is gone (the server restarted, failed over or shut
/// down, or the network broke), rather than that a statement failed.
fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // PostgreSQL's classes 08 (connection exception) and 57P (operator intervention: a
        // shutdown, a crash of another backend, a server that cannot connect now).
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative {what}: {v}")))
}

fn to_u32(v: i64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} out of range: {v}")))
}

fn parse_json(text: &str, what: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// The body with `"version"` set (non-objects are stored as they are).
fn with_version(mut body: Value, version: u64) -> Value {
    if let Value::Object(map) = &mut body {
        map.insert("version".to_string(), Value::from(version));
    }
    body
}

fn entity_from_row(row: &AnyRow) -> Result<Value> {
    let body: String = row.try_get("body")?;
    let version: i64 = row.try_get("version")?;
    Ok(with_version(
        parse_json(&body, "entity body")?,
        to_u64(version, "entity version")?,
    ))
}

fn tenant_from_row(row: &AnyRow) -> Result<Tenant> {
    Ok(Tenant {
        id: row.try_get("id")?,
        spec: TenantSpecification {
            name: row.try_get("name")?,
            description: row.try_get("description")?,
            workers: to_u32(row.try_get("workers")?, "tenant workers")?,
            max_clusters: to_u64(row.try_get("max_clusters")?, "tenant maxClusters")?,
            max_nodes: to_u64(row.try_get("max_nodes")?, "tenant maxNodes")?,
            check_interval: to_u64(row.try_get("check_interval")?, "tenant checkInterval")?,
            max_cost_per_hour: row.try_get("max_cost_per_hour")?,
        },
        create_time: row.try_get("create_time")?,
    })
}

fn resource_from_row(row: &AnyRow) -> Result<ResourceRow> {
    let name: String = row.try_get("name")?;
    let live: i64 = row.try_get("live")?;
    let slated: i64 = row.try_get("slated")?;
    Ok(ResourceRow {
        key: ResourceKey {
            tenant_id: row.try_get("tenant_id")?,
            ptype: row.try_get("ptype")?,
            plugin: row.try_get("plugin")?,
            rtype: row.try_get("rtype")?,
            name: name.clone(),
        },
        meta: ResourceMeta {
            name,
            version: to_u64(row.try_get("version")?, "resource version")?,
            status: ResourceStatus::from_flags(live != 0, slated != 0),
        },
    })
}

fn counts_from_json(text: &str, what: &str) -> Result<BTreeMap<String, u32>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("provisioner {what}: {e}")))
}

fn counts_to_json(m: &BTreeMap<String, u32>) -> String {
    serde_json::to_string(m).expect("a map of strings to integers always serializes")
}

fn provisioner_from_row(row: &AnyRow) -> Result<ProvisionerRecord> {
    let port: i64 = row.try_get("port")?;
    Ok(ProvisionerRecord {
        id: row.try_get("id")?,
        host: row.try_get("host")?,
        port: u16::try_from(port)
            .map_err(|_| StoreError::Corrupt(format!("provisioner port {port}")))?,
        capacity_total: to_u32(row.try_get("capacity_total")?, "provisioner capacity")?,
        assignments: counts_from_json(&row.try_get::<String, _>("assignments")?, "assignments")?,
        usage: counts_from_json(&row.try_get::<String, _>("usage")?, "usage")?,
        last_heartbeat_ms: row.try_get("last_heartbeat")?,
        tls: row.try_get::<i64, _>("tls")? != 0,
    })
}

fn api_key_from_row(row: &AnyRow) -> Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        hash: row.try_get("hash")?,
        tenant_id: row.try_get("tenant_id")?,
        user: row.try_get("user_id")?,
        admin: row.try_get::<i64, _>("admin")? != 0,
        create_time: row.try_get("create_time")?,
    })
}

const TENANT_COLUMNS: &str =
    "id, name, description, workers, max_clusters, max_nodes, check_interval, create_time, \
     max_cost_per_hour";
const RESOURCE_COLUMNS: &str = "tenant_id, ptype, plugin, rtype, name, version, live, slated";
const PROVISIONER_COLUMNS: &str =
    "id, host, port, capacity_total, assignments, usage, last_heartbeat, tls";
const API_KEY_COLUMNS: &str = "id, hash, tenant_id, user_id, admin, create_time";

/// The highest stored version of an entity name, 0 if none.
async fn max_entity_version(
    tx: &mut Transaction<'static, Any>,
    tenant_id: &str,
    kind: EntityKind,
    name: &str,
) -> Result<i64> {
    let max: Option<i64> = sqlx::query_scalar(
        "SELECT MAX(version) FROM entities WHERE tenant_id = $1 AND kind = $2 AND name = $3",
    )
    .bind(tenant_id)
    .bind(kind.as_str())
    .bind(name)
    .fetch_one(&mut **tx)
    .await?;
    Ok(max.unwrap_or(0))
}

/// Inserts version `version` of an entity with `"version"` set in its body.
async fn insert_entity(
    tx: &mut Transaction<'static, Any>,
    tenant_id: &str,
    kind: EntityKind,
    name: &str,
    version: i64,
    body: &Value,
) -> Result<()> {
    let body = with_version(body.clone(), to_u64(version, "entity version")?);
    sqlx::query(
        "INSERT INTO entities (tenant_id, kind, name, version, body) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(tenant_id)
    .bind(kind.as_str())
    .bind(name)
    .bind(version)
    .bind(body.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Writes max+1 of an entity; with `exclusive`, `Conflict` when any version exists.
async fn write_entity(
    mut tx: Transaction<'static, Any>,
    tenant_id: &str,
    kind: EntityKind,
    name: &str,
    body: &Value,
    exclusive: bool,
) -> Result<u64> {
    let max = max_entity_version(&mut tx, tenant_id, kind, name).await?;
    if exclusive && max > 0 {
        return Err(StoreError::Conflict(format!("{} {name}", kind.label())));
    }
    let version = max + 1;
    insert_entity(&mut tx, tenant_id, kind, name, version, body).await?;
    tx.commit().await?;
    to_u64(version, "entity version")
}

/// The `WHERE` clause naming one resource in a tenant, placeholders `$1`..`$5`.
const RESOURCE_KEY_WHERE: &str =
    "tenant_id = $1 AND ptype = $2 AND plugin = $3 AND rtype = $4 AND name = $5";

fn bind_key<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    key: &'q ResourceKey,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    q.bind(key.tenant_id.as_str())
        .bind(key.ptype.as_str())
        .bind(key.plugin.as_str())
        .bind(key.rtype.as_str())
        .bind(key.name.as_str())
}

#[async_trait]
impl<B: Hot> Store for SqlStore<B> {
    fn backend(&self) -> Backend {
        B::BACKEND
    }

    async fn applied_migrations(&self) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query("SELECT version, applied_at FROM weft_schema ORDER BY version")
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)))
            .collect()
    }

    async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    async fn schema_version(&self) -> Result<i64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM weft_schema")
            .fetch_one(&self.reader)
            .await?;
        Ok(v.unwrap_or(0))
    }

    // ---- tenants -------------------------------------------------------------------------------

    async fn insert_tenant(&self, tenant: &Tenant) -> Result<()> {
        let mut tx = self.write_tx().await?;
        insert_tenant_row(&mut tx, tenant).await?;
        Ok(tx.commit().await?)
    }

    async fn update_tenant(&self, tenant: &Tenant) -> Result<()> {
        let mut tx = self.write_tx().await?;
        update_tenant_row(&mut tx, tenant).await?;
        Ok(tx.commit().await?)
    }

    async fn save_tenant(&self, tenant: &Tenant, insert: bool) -> Result<()> {
        let mut tx = self.write_tx().await?;
        if B::BACKEND == Backend::Postgres {
            engine::lock_tenant(&mut tx, &tenant.id).await?;
        }
        check_tenant(&mut tx, tenant, insert).await?;
        if insert {
            insert_tenant_row(&mut tx, tenant).await?;
        } else {
            update_tenant_row(&mut tx, tenant).await?;
        }
        Ok(tx.commit().await?)
    }

    async fn tenant_by_name(&self, name: &str) -> Result<Option<Tenant>> {
        let sql = format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE name = $1");
        let row = sqlx::query(&sql)
            .bind(name)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(tenant_from_row).transpose()
    }

    async fn tenant_by_id(&self, id: &str) -> Result<Option<Tenant>> {
        let sql = format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(tenant_from_row).transpose()
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let sql = format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY name");
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(tenant_from_row).collect()
    }

    async fn delete_tenant(&self, id: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        for table in [
            "entities",
            "plugin_resources",
            "profiles",
            "api_keys",
            "tasks",
            "job_steps",
            "jobs",
            "nodes",
            "clusters",
            "pool_hosts", // host pools
            "webhook_deliveries",
            "webhooks",
            // Last: deleting the rows above wrote events.
            "events",
            "event_heads",
        ] {
            sqlx::query(&format!("DELETE FROM {table} WHERE tenant_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM tenants WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    // ---- versioned entities --------------------------------------------------------------------

    async fn create_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        body: &Value,
    ) -> Result<u64> {
        self.retry_on_unique(|tx| write_entity(tx, tenant_id, kind, name, body, true))
            .await
    }

    async fn put_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        body: &Value,
    ) -> Result<u64> {
        self.retry_on_unique(|tx| write_entity(tx, tenant_id, kind, name, body, false))
            .await
    }

    async fn get_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        version: Option<u64>,
    ) -> Result<Option<Value>> {
        let row = match version {
            Some(v) => {
                sqlx::query(
                    "SELECT body, version FROM entities \
                     WHERE tenant_id = $1 AND kind = $2 AND name = $3 AND version = $4",
                )
                .bind(tenant_id)
                .bind(kind.as_str())
                .bind(name)
                .bind(to_i64(v))
                .fetch_optional(&self.reader)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT body, version FROM entities \
                     WHERE tenant_id = $1 AND kind = $2 AND name = $3 ORDER BY version DESC LIMIT 1",
                )
                .bind(tenant_id)
                .bind(kind.as_str())
                .bind(name)
                .fetch_optional(&self.reader)
                .await?
            }
        };
        row.as_ref().map(entity_from_row).transpose()
    }

    async fn entity_versions(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
    ) -> Result<Vec<Value>> {
        let rows = sqlx::query(
            "SELECT body, version FROM entities \
             WHERE tenant_id = $1 AND kind = $2 AND name = $3 ORDER BY version",
        )
        .bind(tenant_id)
        .bind(kind.as_str())
        .bind(name)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(entity_from_row).collect()
    }

    async fn list_entities(&self, tenant_id: &str, kind: EntityKind) -> Result<Vec<Value>> {
        let rows = sqlx::query(
            "SELECT e.body, e.version FROM entities e \
             WHERE e.tenant_id = $1 AND e.kind = $2 AND e.version = ( \
                 SELECT MAX(m.version) FROM entities m \
                 WHERE m.tenant_id = e.tenant_id AND m.kind = e.kind AND m.name = e.name) \
             ORDER BY e.name",
        )
        .bind(tenant_id)
        .bind(kind.as_str())
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(entity_from_row).collect()
    }

    async fn delete_entity(
        &self,
        tenant_id: &str,
        kind: EntityKind,
        name: &str,
        version: Option<u64>,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let q = match version {
            Some(v) => sqlx::query(
                "DELETE FROM entities WHERE tenant_id = $1 AND kind = $2 AND name = $3 AND version = $4",
            )
            .bind(tenant_id)
            .bind(kind.as_str())
            .bind(name)
            .bind(to_i64(v)),
            None => sqlx::query("DELETE FROM entities WHERE tenant_id = $1 AND kind = $2 AND name = $3")
                .bind(tenant_id)
                .bind(kind.as_str())
                .bind(name),
        };
        q.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn replace_entities(
        &self,
        tenant_id: &str,
        entities: &[(EntityKind, String, Value)],
    ) -> Result<()> {
        self.retry_on_unique(|mut tx| async move {
            for kind in EntityKind::ADMIN {
                sqlx::query("DELETE FROM entities WHERE tenant_id = $1 AND kind = $2")
                    .bind(tenant_id)
                    .bind(kind.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            for (kind, name, body) in entities {
                let version = max_entity_version(&mut tx, tenant_id, *kind, name).await? + 1;
                insert_entity(&mut tx, tenant_id, *kind, name, version, body).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    // ---- plugin resources ----------------------------------------------------------------------

    async fn create_resource_version(&self, key: &ResourceKey) -> Result<u64> {
        self.retry_on_unique(|mut tx| async move {
            let sql =
                format!("SELECT MAX(version) FROM plugin_resources WHERE {RESOURCE_KEY_WHERE}");
            let max: Option<i64> = sqlx::query_scalar(&sql)
                .bind(key.tenant_id.as_str())
                .bind(key.ptype.as_str())
                .bind(key.plugin.as_str())
                .bind(key.rtype.as_str())
                .bind(key.name.as_str())
                .fetch_one(&mut *tx)
                .await?;
            let version = max.unwrap_or(0) + 1;
            bind_key(
                sqlx::query(
                    "INSERT INTO plugin_resources \
                     (tenant_id, ptype, plugin, rtype, name, version, live, slated, create_time) \
                     VALUES ($1, $2, $3, $4, $5, $6, 0, 0, $7)",
                ),
                key,
            )
            .bind(version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            to_u64(version, "resource version")
        })
        .await
    }

    async fn list_resources(
        &self,
        tenant_id: &str,
        ptype: &str,
        plugin: &str,
        rtype: &str,
        name: Option<&str>,
    ) -> Result<Vec<ResourceRow>> {
        let sql = format!(
            "SELECT {RESOURCE_COLUMNS} FROM plugin_resources \
             WHERE tenant_id = $1 AND ptype = $2 AND plugin = $3 AND rtype = $4 \
             AND ($5 IS NULL OR name = $5) ORDER BY name, version"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(ptype)
            .bind(plugin)
            .bind(rtype)
            .bind(name)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(resource_from_row).collect()
    }

    async fn stage_resource(&self, key: &ResourceKey, version: u64) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "UPDATE plugin_resources SET slated = CASE WHEN version = $6 THEN 1 ELSE 0 END \
             WHERE {RESOURCE_KEY_WHERE} AND EXISTS ( \
                 SELECT 1 FROM plugin_resources p WHERE p.tenant_id = $1 AND p.ptype = $2 \
                 AND p.plugin = $3 AND p.rtype = $4 AND p.name = $5 AND p.version = $6)"
        );
        let done = bind_key(sqlx::query(&sql), key)
            .bind(to_i64(version))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(done > 0)
    }

    async fn recall_resource(&self, key: &ResourceKey, version: u64) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "UPDATE plugin_resources SET slated = 0 WHERE {RESOURCE_KEY_WHERE} AND version = $6"
        );
        let done = bind_key(sqlx::query(&sql), key)
            .bind(to_i64(version))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(done > 0)
    }

    async fn delete_resource(
        &self,
        key: &ResourceKey,
        version: Option<u64>,
    ) -> Result<ResourceDelete> {
        let mut tx = self.write_tx().await?;
        // `$6` is the version, or NULL for every version.
        let version = version.map(to_i64);
        let busy_sql = format!(
            "SELECT COUNT(*) FROM plugin_resources WHERE {RESOURCE_KEY_WHERE} \
             AND ($6 IS NULL OR version = $6) AND (live <> 0 OR slated <> 0)"
        );
        let busy: i64 = sqlx::query_scalar(&busy_sql)
            .bind(key.tenant_id.as_str())
            .bind(key.ptype.as_str())
            .bind(key.plugin.as_str())
            .bind(key.rtype.as_str())
            .bind(key.name.as_str())
            .bind(version)
            .fetch_one(&mut *tx)
            .await?;
        if busy > 0 {
            return Ok(ResourceDelete::NotDeletable);
        }
        let sql = format!("DELETE FROM plugin_resources WHERE {RESOURCE_KEY_WHERE} AND ($6 IS NULL OR version = $6)");
        bind_key(sqlx::query(&sql), key)
            .bind(version)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ResourceDelete::Deleted)
    }

    async fn sync_resources(&self, tenant_id: &str) -> Result<Vec<ResourceRow>> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "UPDATE plugin_resources SET live = slated WHERE tenant_id = $1 AND live <> slated",
        )
        .bind(tenant_id)
        .execute(&mut *tx)
        .await?;
        let sql = format!(
            "SELECT {RESOURCE_COLUMNS} FROM plugin_resources WHERE tenant_id = $1 AND live <> 0 AND slated <> 0 \
             ORDER BY ptype, plugin, rtype, name, version"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(resource_from_row).collect()
    }

    async fn live_resources(&self, tenant_id: &str) -> Result<Vec<ResourceRow>> {
        let sql = format!(
            "SELECT {RESOURCE_COLUMNS} FROM plugin_resources WHERE tenant_id = $1 AND live <> 0 AND slated <> 0 \
             ORDER BY ptype, plugin, rtype, name, version"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(resource_from_row).collect()
    }

    // ---- user profiles -------------------------------------------------------------------------

    async fn get_profile(&self, tenant_id: &str, user: &str) -> Result<Option<Value>> {
        let body: Option<String> =
            sqlx::query_scalar("SELECT body FROM profiles WHERE tenant_id = $1 AND user_id = $2")
                .bind(tenant_id)
                .bind(user)
                .fetch_optional(&self.reader)
                .await?;
        body.map(|b| parse_json(&b, "profile")).transpose()
    }

    async fn put_profile(&self, tenant_id: &str, user: &str, profile: &Value) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO profiles (tenant_id, user_id, body) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant_id, user_id) DO UPDATE SET body = excluded.body",
        )
        .bind(tenant_id)
        .bind(user)
        .bind(profile.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_profile(&self, tenant_id: &str, user: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM profiles WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant_id)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    // ---- provisioners --------------------------------------------------------------------------

    async fn upsert_provisioner(&self, p: &ProvisionerRecord) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO provisioners (id, host, port, capacity_total, assignments, usage, last_heartbeat, tls) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO UPDATE SET host = excluded.host, \
             port = excluded.port, capacity_total = excluded.capacity_total, \
             assignments = excluded.assignments, usage = excluded.usage, \
             last_heartbeat = excluded.last_heartbeat, tls = excluded.tls",
        )
        .bind(p.id.as_str())
        .bind(p.host.as_str())
        .bind(i64::from(p.port))
        .bind(i64::from(p.capacity_total))
        .bind(counts_to_json(&p.assignments))
        .bind(counts_to_json(&p.usage))
        .bind(p.last_heartbeat_ms)
        .bind(i64::from(p.tls))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_provisioner(&self, id: &str) -> Result<Option<ProvisionerRecord>> {
        let sql = format!("SELECT {PROVISIONER_COLUMNS} FROM provisioners WHERE id = $1");
        let row = sqlx::query(&sql).bind(id).fetch_optional_on(self).await?;
        row.as_ref().map(provisioner_from_row).transpose()
    }

    async fn list_provisioners(&self) -> Result<Vec<ProvisionerRecord>> {
        let sql = format!("SELECT {PROVISIONER_COLUMNS} FROM provisioners ORDER BY id");
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(provisioner_from_row).collect()
    }

    async fn delete_provisioner(&self, id: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("DELETE FROM provisioners WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn heartbeat_provisioner(
        &self,
        id: &str,
        usage: &BTreeMap<String, u32>,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n =
            sqlx::query("UPDATE provisioners SET usage = $2, last_heartbeat = $3 WHERE id = $1")
                .bind(id)
                .bind(counts_to_json(usage))
                .bind(now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    // ---- the audit trail ---------------------------------------------------------------------

    async fn append_audit(&self, entry: &AuditEntry) -> Result<AuditRecord> {
        self.append_audit_impl(entry).await
    }

    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.list_audit_impl(q).await
    }

    async fn audit_anchors(&self) -> Result<Vec<AuditAnchor>> {
        self.audit_anchors_impl().await
    }

    async fn audit_chain(
        &self,
        tenant_id: &str,
        from_seq: u64,
        limit: u64,
    ) -> Result<Vec<StoredAudit>> {
        self.audit_chain_impl(tenant_id, from_seq, limit).await
    }

    async fn purge_audit(&self, before: i64) -> Result<u64> {
        self.purge_audit_impl(before).await
    }

    async fn settle_audit(&self, before: i64) -> Result<u64> {
        self.settle_audit_impl(before).await
    }

    // ---- the event backlog -------------------------------------------------------------------

    async fn read_events(&self, q: &EventQuery) -> Result<Vec<Event>> {
        self.read_events_impl(q).await
    }

    async fn event_bounds(&self, tenant_id: &str) -> Result<EventBounds> {
        self.event_bounds_impl(tenant_id).await
    }

    async fn sequence_events(&self) -> Result<u64> {
        self.sequence_events_impl().await
    }

    async fn purge_events(&self, before: i64) -> Result<u64> {
        self.purge_events_impl(before).await
    }

    // ---- webhooks ----------------------------------------------------------------------------

    async fn put_webhook(&self, w: &WebhookRow) -> Result<()> {
        self.put_webhook_impl(w).await
    }

    async fn list_webhooks(&self, tenant_id: Option<&str>) -> Result<Vec<WebhookRow>> {
        self.list_webhooks_impl(tenant_id).await
    }

    async fn get_webhook(&self, tenant_id: &str, id: &str) -> Result<Option<WebhookRow>> {
        self.get_webhook_impl(tenant_id, id).await
    }

    async fn delete_webhook(&self, tenant_id: &str, id: &str) -> Result<bool> {
        self.delete_webhook_impl(tenant_id, id).await
    }

    async fn lease_webhook(
        &self,
        tenant_id: &str,
        id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        self.lease_webhook_impl(tenant_id, id, owner, now, until)
            .await
    }

    async fn advance_webhook(
        &self,
        tenant_id: &str,
        id: &str,
        from: u64,
        to: u64,
        pending: &[DeliveryRow],
    ) -> Result<bool> {
        self.advance_webhook_impl(tenant_id, id, from, to, pending)
            .await
    }

    async fn put_delivery(&self, d: &DeliveryRow) -> Result<()> {
        self.put_delivery_impl(d).await
    }

    async fn next_delivery(
        &self,
        tenant_id: &str,
        webhook_id: &str,
    ) -> Result<Option<DeliveryRow>> {
        self.next_delivery_impl(tenant_id, webhook_id).await
    }

    async fn list_deliveries(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<Vec<DeliveryRow>> {
        self.list_deliveries_impl(tenant_id, webhook_id, before, limit)
            .await
    }

    async fn get_delivery(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        event_id: u64,
    ) -> Result<Option<DeliveryRow>> {
        self.get_delivery_impl(tenant_id, webhook_id, event_id)
            .await
    }

    async fn purge_deliveries(&self, before: i64) -> Result<u64> {
        self.purge_deliveries_impl(before).await
    }

    // ---- API keys ------------------------------------------------------------------------------

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let res = sqlx::query(
            "INSERT INTO api_keys (id, hash, tenant_id, user_id, admin, create_time) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.id.as_str())
        .bind(key.hash.as_str())
        .bind(key.tenant_id.as_str())
        .bind(key.user.as_str())
        .bind(i64::from(key.admin))
        .bind(key.create_time)
        .execute(&mut *tx)
        .await;
        match res {
            Err(e) if is_unique_violation(&e) => {
                Err(StoreError::Conflict(format!("api key {}", key.id)))
            }
            Err(e) => Err(e.into()),
            Ok(_) => Ok(tx.commit().await?),
        }
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE hash = $1");
        let row = sqlx::query(&sql)
            .bind(hash)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(api_key_from_row).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let sql = format!("SELECT {API_KEY_COLUMNS} FROM api_keys ORDER BY create_time, id");
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(api_key_from_row).collect()
    }

    async fn list_secret_keys(&self) -> Result<Vec<SecretKeyRow>> {
        let rows =
            sqlx::query("SELECT id, master_id, wrapped, seq FROM secret_keys ORDER BY seq, id")
                .fetch_all(&self.reader)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(SecretKeyRow {
                    id: r.try_get("id")?,
                    master_id: r.try_get("master_id")?,
                    wrapped: r.try_get("wrapped")?,
                    seq: r.try_get("seq")?,
                })
            })
            .collect()
    }

    async fn put_secret_keys(&self, rows: &[SecretKeyRow], only_new: bool) -> Result<()> {
        let sql = if only_new {
            "INSERT INTO secret_keys (id, master_id, wrapped, seq) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO NOTHING"
        } else {
            "INSERT INTO secret_keys (id, master_id, wrapped, seq) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET master_id = excluded.master_id, wrapped = excluded.wrapped"
        };
        let mut tx = self.write_tx().await?;
        for row in rows {
            sqlx::query(sql)
                .bind(row.id.as_str())
                .bind(row.master_id.as_str())
                .bind(row.wrapped.as_str())
                .bind(row.seq)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn delete_api_key(&self, id: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query("DELETE FROM api_keys WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    // ---- engine rows -------------------------------------------------------------------------

    async fn commit_released(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        match pending_audit_write() {
            Some(w) => {
                let mut cs = cs.clone();
                cs.write(w);
                self.commit_changes(&cs).await
            }
            None => self.commit_changes(cs).await,
        }
    }

    async fn commit_owned(&self, mut cs: ChangeSet) -> Result<()> {
        if let Some(w) = pending_audit_write() {
            cs.write(w);
        }
        self.hot.commit_owned(cs).await
    }

    async fn next_id(&self, counter: &str) -> Result<u64> {
        self.next_id_impl(counter).await
    }

    async fn counter(&self, counter: &str) -> Result<u64> {
        self.counter_impl(counter).await
    }

    async fn get_cluster(&self, tenant_id: &str, id: u64) -> Result<Option<ClusterRow>> {
        self.get_cluster_impl(tenant_id, id).await
    }

    async fn list_clusters(&self, tenant_id: &str, owner: Option<&str>) -> Result<Vec<ClusterRow>> {
        self.list_clusters_impl(tenant_id, owner).await
    }

    async fn list_nodes(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<NodeRow>> {
        self.list_nodes_impl(tenant_id, cluster_id).await
    }

    async fn get_node(&self, tenant_id: &str, node_id: &str) -> Result<Option<NodeRow>> {
        self.get_node_impl(tenant_id, node_id).await
    }

    async fn list_tenant_nodes(&self, tenant_id: &str) -> Result<Vec<NodeRow>> {
        self.list_tenant_nodes_impl(tenant_id).await
    }

    async fn get_job_head(&self, tenant_id: &str, job_id: &str) -> Result<Option<JobRow>> {
        self.get_job_head_impl(tenant_id, job_id).await
    }

    async fn get_job(&self, tenant_id: &str, job_id: &str) -> Result<Option<JobRow>> {
        self.get_job_impl(tenant_id, job_id).await
    }

    async fn list_jobs(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<JobRow>> {
        self.list_jobs_impl(tenant_id, cluster_id).await
    }

    async fn get_task(&self, tenant_id: &str, task_id: &str) -> Result<Option<TaskRow>> {
        self.get_task_impl(tenant_id, task_id).await
    }

    async fn list_tasks(&self, tenant_id: &str, job_id: &str) -> Result<Vec<TaskRow>> {
        self.list_tasks_impl(tenant_id, job_id).await
    }

    async fn list_task_heads(&self, tenant_id: &str, job_id: &str) -> Result<Vec<TaskHead>> {
        self.list_task_heads_impl(tenant_id, job_id).await
    }

    async fn cluster_stamp(&self, tenant_id: &str, id: u64) -> Result<Option<ClusterStamp>> {
        self.cluster_stamp_impl(tenant_id, id).await
    }

    async fn node_revs(&self, tenant_id: &str, cluster_id: u64) -> Result<Vec<(String, i64)>> {
        self.node_revs_impl(tenant_id, cluster_id).await
    }

    async fn node_texts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<(String, i64, String)>> {
        self.node_texts_impl(tenant_id, cluster_id).await
    }

    async fn node_tasks(&self, tenant_id: &str, node_id: &str, limit: u32) -> Result<Vec<TaskRow>> {
        self.node_tasks_impl(tenant_id, node_id, limit).await
    }

    // ---- the task queue and the janitor ------------------------------------------------------

    async fn take_next(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        self.take_task_impl(tenant_id, owner, now, deadline).await
    }

    async fn task_with_job(&self, tenant_id: &str, task_id: &str) -> Result<TaskWithJob> {
        self.task_with_job_impl(tenant_id, task_id).await
    }

    async fn expired_tasks(&self, now: i64) -> Result<Vec<TaskRow>> {
        self.expired_tasks_impl(now).await
    }

    async fn tasks_leased_by(&self, provisioner_id: &str) -> Result<Vec<TaskRow>> {
        self.tasks_leased_by_impl(provisioner_id).await
    }

    async fn leases_of(&self, tenant_id: &str, owner: &str) -> Result<Vec<TaskRow>> {
        self.leases_of_impl(tenant_id, owner).await
    }

    async fn expired_clusters(&self, now: i64) -> Result<Vec<ClusterRow>> {
        self.expired_clusters_impl(now).await
    }

    async fn ended_jobs(&self) -> Result<Vec<JobRow>> {
        self.ended_jobs_impl().await
    }

    async fn queue_counts(&self) -> Result<BTreeMap<String, (u64, u64)>> {
        self.queue_counts_impl().await
    }

    async fn count_clusters(&self, tenant_id: &str) -> Result<(u64, u64)> {
        self.count_clusters_impl(tenant_id).await
    }

    async fn lead(&self, role: &str, holder: &str, now: i64, lease_ms: i64) -> Result<Option<i64>> {
        self.lead_impl(role, holder, now, lease_ms).await
    }

    async fn resign(&self, role: &str, holder: &str) -> Result<()> {
        self.resign_impl(role, holder).await
    }

    async fn leader(&self, role: &str) -> Result<Option<Leadership>> {
        self.leader_impl(role).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(backend_of("sqlite:///tmp/x.db").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("postgres://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(
            backend_of("postgresql://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert!(matches!(
            backend_of("mysql://u@h/db"),
            Err(StoreError::BadUrl(_))
        ));
        assert!(matches!(
            backend_of("/tmp/x.db"),
            Err(StoreError::BadUrl(_))
        ));
    }

    #[test]
    fn sqlite_urls_create_missing_files_unless_told_otherwise() {
        assert_eq!(
            sqlite_url("sqlite:///tmp/x.db"),
            "sqlite:///tmp/x.db?mode=rwc"
        );
        assert_eq!(
            sqlite_url("sqlite:///tmp/x.db?cache=shared"),
            "sqlite:///tmp/x.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            sqlite_url("sqlite:///tmp/x.db?mode=ro"),
            "sqlite:///tmp/x.db?mode=ro"
        );
    }

    #[test]
    fn version_is_set_in_object_bodies() {
        let v = with_version(serde_json::json!({"name": "a", "version": 9}), 3);
        assert_eq!(v, serde_json::json!({"name": "a", "version": 3}));
    }
}
