//! The engine's tables in [`SqlStore`]: change sets, reads, the task queue, the janitor's queries,
//! id counters and leader election.
//!
//! # Atomicity of [`commit`](SqlStore::commit_changes)
//!
//! A change set is one write transaction (or, on the writer thread or task of `writer.rs` and
//! `pg_writer.rs`, one savepoint-like part of a batch's transaction): expectations are checked
//! first, then the writes apply in order, and a failed expectation rolls everything back.
//!
//! * **SQLite**: `BEGIN IMMEDIATE` on the one writer connection serializes every writer, so a plain
//!   read of `rev` is already exclusive.
//! * **PostgreSQL**: each expected row is read `FOR UPDATE`, which locks it until commit and, when
//!   a concurrent transaction changed it first, re-reads the committed revision; an expectation
//!   that a row does not exist (`rev` 0) first takes a transaction-scoped advisory lock on the
//!   row's key, so two creators of one row serialize and the second sees the first's row.
//!   Expected rows are locked in one canonical order; a deadlock with another server's writer
//!   that still happens (through the rows both write) is retried by `pg_writer.rs`, after which
//!   the loser finds its expectation stale.
//!
//! # The queue
//!
//! [`take_task`](SqlStore::take_task_impl) is one `UPDATE ... WHERE id = (SELECT ... LIMIT 1)
//! RETURNING` on SQLite. On PostgreSQL the batch function (`pg_batch.sql`) leases a tenant's
//! oldest queued tasks for a batch's takes in one statement, `FOR UPDATE SKIP LOCKED`, so
//! concurrent takers (another server's) each lock different tasks instead of waiting for the
//! first.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Row};

use super::pg_reader::ReadOn;
use super::{parse_json, to_i64, to_u32, to_u64, Hot, SqlStore};
use crate::audit::PendingRow;
use crate::engine::{
    cluster_status, job_status, ChangeSet, ClusterRow, ClusterStamp, Expect, JobRow, NodeRow,
    Quota, Taken, TaskHead, TaskRow, TaskState, Write, GATE,
};
use crate::leader::fnv1a64;
use crate::{Backend, Leadership, Result, StoreError};
use weft_model::JobStatus;

/// The class of the advisory locks that guard the creation of rows ("weft" in ASCII).
const ROW_LOCK_CLASS: i32 = 0x7765_6674;

const CLUSTER_COLUMNS: &str = "tenant_id, id, owner, name, status, create_time, expire_time, \
     latest_job, rev, node_count, body";
const NODE_COLUMNS: &str = "tenant_id, cluster_id, id, nodenum, rev, body";
/// A job's columns, read from `jobs` (not aliased), its completed steps from `job_steps`.
const JOB_COLUMNS: &str = "tenant_id, cluster_id, id, action, status, create_time, rev, \
     COALESCE((SELECT s.steps_done FROM job_steps s WHERE s.tenant_id = jobs.tenant_id \
     AND s.job_id = jobs.id), 0) AS steps_done, steps_total, body";
/// A job's columns without its body (which lists every task id of its plan).
const JOB_HEAD_COLUMNS: &str = "tenant_id, cluster_id, id, action, status, create_time, rev, \
     COALESCE((SELECT s.steps_done FROM job_steps s WHERE s.tenant_id = jobs.tenant_id \
     AND s.job_id = jobs.id), 0) AS steps_done, steps_total, 'null' AS body";
const TASK_COLUMNS: &str = "tenant_id, cluster_id, job_id, id, node_id, action, service, state, \
     attempts, deps_remaining, successors, lease_owner, lease_deadline, queued_at, started_at, rev, body";

/// The status and revision of a task row's job, as columns `job_status` and `job_rev`.
const JOB_OF_TASK: &str = "(SELECT status FROM jobs j WHERE j.tenant_id = tasks.tenant_id \
     AND j.id = tasks.job_id) AS job_status, (SELECT rev FROM jobs j WHERE \
     j.tenant_id = tasks.tenant_id AND j.id = tasks.job_id) AS job_rev";

pub(super) fn job_of_task(row: &impl Cols) -> Result<Option<(JobStatus, i64)>> {
    Ok(
        match (
            row.get::<Option<String>>("job_status")?,
            row.get::<Option<i64>>("job_rev")?,
        ) {
            (Some(s), Some(r)) => Some((job_status(&s)?, r)),
            _ => None,
        },
    )
}

/// The cluster stamp of a take's row (columns `cluster_rev` and `nodes_rev`).
fn stamp_of_task(row: &impl Cols) -> Result<Option<ClusterStamp>> {
    Ok(
        match (
            row.get::<Option<i64>>("cluster_rev")?,
            row.get::<Option<i64>>("nodes_rev")?,
        ) {
            (Some(rev), Some(nodes_rev)) => Some(ClusterStamp { rev, nodes_rev }),
            _ => None,
        },
    )
}

/// Reading a column by name, from a sqlx row or a rusqlite row (the SQLite writer thread), so one
/// mapping serves both.
pub(crate) trait Cols {
    fn get<T: ColType>(&self, name: &str) -> Result<T>;
}

/// The column types the rows are made of.
pub(crate) trait ColType:
    for<'r> sqlx::Decode<'r, Any> + sqlx::Type<Any> + rusqlite::types::FromSql
{
    /// The value of a row given as a JSON object (PostgreSQL's batch function, `pg_batch.sql`);
    /// `None` when it has another type.
    fn from_json(v: &serde_json::Value) -> Option<Self>;
}
impl ColType for i64 {
    fn from_json(v: &serde_json::Value) -> Option<Self> {
        v.as_i64()
    }
}
impl ColType for String {
    fn from_json(v: &serde_json::Value) -> Option<Self> {
        v.as_str().map(str::to_string)
    }
}
impl ColType for Option<i64> {
    fn from_json(v: &serde_json::Value) -> Option<Self> {
        if v.is_null() {
            Some(None)
        } else {
            v.as_i64().map(Some)
        }
    }
}
impl ColType for Option<String> {
    fn from_json(v: &serde_json::Value) -> Option<Self> {
        if v.is_null() {
            Some(None)
        } else {
            v.as_str().map(|s| Some(s.to_string()))
        }
    }
}

impl Cols for serde_json::Map<String, serde_json::Value> {
    fn get<T: ColType>(&self, name: &str) -> Result<T> {
        let v = self.get(name).unwrap_or(&serde_json::Value::Null);
        T::from_json(v).ok_or_else(|| StoreError::Corrupt(format!("column {name}: {v}")))
    }
}

impl Cols for AnyRow {
    fn get<T: ColType>(&self, name: &str) -> Result<T> {
        Ok(self.try_get(name)?)
    }
}

impl Cols for rusqlite::Row<'_> {
    fn get<T: ColType>(&self, name: &str) -> Result<T> {
        Ok(rusqlite::Row::get(self, name)?)
    }
}

/// How one of the engine's frequent reads ([`Hot::read`]) maps a row, from a sqlx row or a
/// rusqlite row.
pub(crate) trait RowMap: Send + 'static {
    type Out: Send + 'static;
    fn map(row: &impl Cols) -> Result<Self::Out>;
}

/// Declares a [`RowMap`] by the function that maps one row.
macro_rules! row_map {
    ($name:ident => $out:ty, $f:expr) => {
        pub(crate) struct $name;
        impl RowMap for $name {
            type Out = $out;
            fn map(row: &impl Cols) -> Result<$out> {
                $f(row)
            }
        }
    };
}

row_map!(Clusters => ClusterRow, cluster_from_row);
row_map!(Nodes => NodeRow, node_from_row);
row_map!(Tasks => TaskRow, task_from_row);
row_map!(Stamps => ClusterStamp, |row: &_| Ok(ClusterStamp {
    rev: Cols::get(row, "rev")?,
    nodes_rev: Cols::get(row, "nodes_rev")?,
}));
row_map!(NodeTexts => (String, i64, String), |row: &_| Ok((
    Cols::get(row, "id")?,
    Cols::get(row, "rev")?,
    Cols::get(row, "body")?,
)));

/// Orders ids made of a common prefix and a zero-padded counter numerically, also once the counter
/// outgrows its padding (`...-999` before `...-1000`).
const BY_ID: &str = "LENGTH(id), id";

fn cluster_from_row(row: &impl Cols) -> Result<ClusterRow> {
    Ok(ClusterRow {
        tenant_id: row.get("tenant_id")?,
        id: to_u64(row.get("id")?, "cluster id")?,
        owner: row.get("owner")?,
        name: row.get("name")?,
        status: cluster_status(&row.get::<String>("status")?)?,
        create_time: row.get("create_time")?,
        expire_time: row.get("expire_time")?,
        latest_job: row.get("latest_job")?,
        rev: row.get("rev")?,
        node_count: to_u64(row.get("node_count")?, "cluster node count")?,
        body: parse_json(&row.get::<String>("body")?, "cluster body")?,
    })
}

fn node_from_row(row: &impl Cols) -> Result<NodeRow> {
    Ok(NodeRow {
        tenant_id: row.get("tenant_id")?,
        cluster_id: to_u64(row.get("cluster_id")?, "node cluster id")?,
        id: row.get("id")?,
        nodenum: to_u64(row.get("nodenum")?, "nodenum")?,
        rev: row.get("rev")?,
        body: parse_json(&row.get::<String>("body")?, "node body")?,
    })
}

fn job_from_row(row: &impl Cols) -> Result<JobRow> {
    Ok(JobRow {
        tenant_id: row.get("tenant_id")?,
        cluster_id: to_u64(row.get("cluster_id")?, "job cluster id")?,
        id: row.get("id")?,
        action: row.get("action")?,
        status: job_status(&row.get::<String>("status")?)?,
        create_time: row.get("create_time")?,
        rev: row.get("rev")?,
        steps_done: to_u64(row.get("steps_done")?, "job steps done")?,
        steps_total: to_u64(row.get("steps_total")?, "job steps total")?,
        body: parse_json(&row.get::<String>("body")?, "job body")?,
    })
}

pub(super) fn task_from_row(row: &impl Cols) -> Result<TaskRow> {
    let successors: String = row.get("successors")?;
    Ok(TaskRow {
        tenant_id: row.get("tenant_id")?,
        cluster_id: to_u64(row.get("cluster_id")?, "task cluster id")?,
        job_id: row.get("job_id")?,
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        action: row.get("action")?,
        service: row.get("service")?,
        state: row.get::<String>("state")?.parse()?,
        attempts: to_u32(row.get("attempts")?, "task attempts")?,
        deps_remaining: to_u32(row.get("deps_remaining")?, "task deps_remaining")?,
        successors: serde_json::from_str(&successors)
            .map_err(|e| StoreError::Corrupt(format!("task successors: {e}")))?,
        lease_owner: row.get("lease_owner")?,
        lease_deadline: row.get("lease_deadline")?,
        queued_at: row.get("queued_at")?,
        started_at: row.get("started_at")?,
        rev: row.get("rev")?,
        body: parse_json(&row.get::<String>("body")?, "task body")?,
    })
}

fn task_head_from_row(row: &impl Cols) -> Result<TaskHead> {
    Ok(TaskHead {
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        action: row.get("action")?,
        service: row.get("service")?,
        state: row.get::<String>("state")?.parse()?,
        attempts: to_u32(row.get("attempts")?, "task attempts")?,
    })
}

/// The table, tenant, printable id and expected revision of an expectation.
pub(super) struct Target<'a> {
    pub(super) table: &'static str,
    pub(super) what: &'static str,
    pub(super) tenant_id: &'a str,
    pub(super) id: Id<'a>,
    pub(super) rev: i64,
    /// The change set writes this row (PostgreSQL locks it for update, else for share).
    pub(super) written: bool,
}

/// Whether `w` writes the row `t` names.
fn writes_row(w: &Write, t: &Target<'_>) -> bool {
    let (table, tenant, id) = match w {
        Write::Cluster(c) => ("clusters", c.tenant_id.as_str(), Id::Num(c.id)),
        Write::Node(n) => ("nodes", n.tenant_id.as_str(), Id::Text(&n.id)),
        Write::DeleteNode { tenant_id, id } => ("nodes", tenant_id.as_str(), Id::Text(id)),
        Write::Job(j) => ("jobs", j.tenant_id.as_str(), Id::Text(&j.id)),
        Write::Task(k) => ("tasks", k.tenant_id.as_str(), Id::Text(&k.id)),
        Write::Release { tenant_id, ids, .. } => {
            return t.table == "tasks"
                && t.tenant_id == tenant_id
                && ids.iter().any(|i| t.id == Id::Text(i));
        }
        Write::AuditPending(_) => return false,
    };
    table == t.table && tenant == t.tenant_id && id == t.id
}

/// A row id: clusters have numbers, everything else text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Id<'a> {
    Num(u64),
    Text(&'a str),
}

impl std::fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Text(s) => f.write_str(s),
        }
    }
}

fn target(e: &Expect) -> Option<Target<'_>> {
    Some(match e {
        Expect::ClusterRev { tenant_id, id, rev } => Target {
            table: "clusters",
            what: "cluster",
            tenant_id,
            id: Id::Num(*id),
            rev: *rev,
            written: true,
        },
        Expect::NodeRev { tenant_id, id, rev } => Target {
            table: "nodes",
            what: "node",
            tenant_id,
            id: Id::Text(id),
            rev: *rev,
            written: true,
        },
        Expect::JobRev { tenant_id, id, rev } => Target {
            table: "jobs",
            what: "job",
            tenant_id,
            id: Id::Text(id),
            rev: *rev,
            written: true,
        },
        Expect::TaskRev { tenant_id, id, rev } => Target {
            table: "tasks",
            what: "task",
            tenant_id,
            id: Id::Text(id),
            rev: *rev,
            written: true,
        },
        Expect::Quota(_) => return None,
    })
}

/// A change set's quota expectations.
pub(super) fn quotas(cs: &ChangeSet) -> impl Iterator<Item = &Quota> {
    cs.expect.iter().filter_map(|e| match e {
        Expect::Quota(q) => Some(q),
        _ => None,
    })
}

/// The lock class of the per-tenant quota locks (PostgreSQL advisory locks, two-key form).
const QUOTA_LOCK_CLASS: i32 = 0x7175_6f74;

/// Counts a tenant's clusters that are not `terminated` and their nodes (`$1` tenant), and reads
/// its limits (`maxClusters`, `maxNodes`; null without a tenant row), in one statement so that
/// all come from one snapshot.
pub(super) const QUOTA_COUNTS: &str = "SELECT \
     (SELECT COUNT(*) FROM clusters WHERE tenant_id = $1 AND status <> 'terminated') AS c, \
     (SELECT COUNT(*) FROM nodes n JOIN clusters k \
      ON k.tenant_id = n.tenant_id AND k.id = n.cluster_id \
      WHERE n.tenant_id = $1 AND k.status <> 'terminated') AS n, \
     (SELECT max_clusters FROM tenants WHERE id = $1) AS mc, \
     (SELECT max_nodes FROM tenants WHERE id = $1) AS mn";

/// The cost per hour of a tenant's clusters that are not `terminated` (`$1` tenant; from each
/// body's `costMicrosPerHour`) and its `maxCostPerHour` text (null without one), on SQLite.
pub(super) const COST_SQLITE: &str = "SELECT \
     (SELECT COALESCE(SUM(CAST(json_extract(body, '$.costMicrosPerHour') AS INTEGER)), 0) \
      FROM clusters WHERE tenant_id = $1 AND status <> 'terminated') AS cost, \
     (SELECT max_cost_per_hour FROM tenants WHERE id = $1) AS mcost";

/// [`COST_SQLITE`] on PostgreSQL.
const COST_POSTGRES: &str = "SELECT \
     (SELECT COALESCE(SUM((body::json ->> 'costMicrosPerHour')::bigint), 0)::bigint \
      FROM clusters WHERE tenant_id = $1 AND status <> 'terminated') AS cost, \
     (SELECT max_cost_per_hour FROM tenants WHERE id = $1) AS mcost";

/// Checks a quota on `conn`, inside its transaction; on PostgreSQL it first waits for the tenant's quota lock, held
/// until the transaction ends, so the next check counts what this one commits.
async fn check_quota(conn: &mut AnyConnection, backend: Backend, q: &Quota) -> Result<()> {
    if backend == Backend::Postgres {
        let objid = fnv1a64(q.tenant_id.as_bytes()) as u32 as i32;
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, $2)) AS l")
            .bind(QUOTA_LOCK_CLASS)
            .bind(objid)
            .execute(&mut *conn)
            .await?;
    }
    let row = sqlx::query(QUOTA_COUNTS)
        .bind(&q.tenant_id)
        .fetch_one(&mut *conn)
        .await?;
    let limits = match (row.try_get("mc")?, row.try_get("mn")?) {
        (Some(c), Some(n)) => Some((to_u64(c, "maxClusters")?, to_u64(n, "maxNodes")?)),
        _ => None,
    };
    q.check(
        to_u64(row.try_get("c")?, "cluster count")?,
        to_u64(row.try_get("n")?, "node count")?,
        limits,
    )?;
    if q.add_cost_micros == 0 {
        return Ok(());
    }
    let sql = match backend {
        Backend::Postgres => COST_POSTGRES,
        Backend::Sqlite => COST_SQLITE,
    };
    let row = sqlx::query(sql)
        .bind(&q.tenant_id)
        .fetch_one(&mut *conn)
        .await?;
    let limit: Option<String> = row.try_get("mcost")?;
    q.check_cost(
        to_u64(row.try_get("cost")?, "cluster cost")?,
        limit.as_deref(),
    )
}

/// The lock class of the tenants' worker capacity (PostgreSQL advisory lock, two-key form,
/// second key 0): every checked tenant write takes it, so their capacity checks see each other.
const CAPACITY_LOCK_CLASS: i32 = 0x6361_7061;

/// Takes the locks a checked tenant write holds until its commit (PostgreSQL; SQLite's
/// `BEGIN IMMEDIATE` already serializes writers): the worker capacity lock, and the tenant's
/// quota lock, which every quota check of a cluster create takes too.
pub(super) async fn lock_tenant(conn: &mut AnyConnection, tenant_id: &str) -> Result<()> {
    let objid = fnv1a64(tenant_id.as_bytes()) as u32 as i32;
    sqlx::query(
        "SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, 0), pg_advisory_xact_lock($2, $3)) AS l",
    )
    .bind(CAPACITY_LOCK_CLASS)
    .bind(QUOTA_LOCK_CLASS)
    .bind(objid)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A change set's expectations in one canonical locking order: by table, tenant, id.
pub(super) fn targets(cs: &ChangeSet) -> Vec<Target<'_>> {
    let mut targets: Vec<Target<'_>> = cs.expect.iter().filter_map(target).collect();
    for t in &mut targets {
        t.written = cs.writes.iter().any(|w| writes_row(w, t));
    }
    targets.sort_by(|a, b| (a.table, a.tenant_id, a.id).cmp(&(b.table, b.tenant_id, b.id)));
    targets
}

pub(super) fn is_deadlock(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(d))
        if matches!(d.code().as_deref(), Some("40P01" | "40001")))
}

/// Checks one expectation on `conn`, inside its transaction, locking the row on PostgreSQL.
async fn check(conn: &mut AnyConnection, backend: Backend, t: &Target<'_>) -> Result<()> {
    let pg = backend == Backend::Postgres;
    if pg && t.rev == 0 {
        let key = format!("{}/{}/{}", t.table, t.tenant_id, t.id);
        // Only the low 32 bits: the two-key form keeps these apart from the one-key locks.
        let objid = fnv1a64(key.as_bytes()) as u32 as i32;
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, $2)) AS l")
            .bind(ROW_LOCK_CLASS)
            .bind(objid)
            .execute(&mut *conn)
            .await?;
    }
    let sql = check_sql(t, backend);
    let q = sqlx::query_scalar::<_, i64>(&sql).bind(t.tenant_id);
    let q = match t.id {
        Id::Num(n) => q.bind(to_i64(n)),
        Id::Text(s) => q.bind(s),
    };
    check_found(t, q.fetch_optional(&mut *conn).await?)
}

/// The statement that reads an expected row's revision (`$1` tenant, `$2` id).
pub(super) fn check_sql(t: &Target<'_>, backend: Backend) -> String {
    format!(
        "SELECT rev FROM {} WHERE tenant_id = $1 AND id = $2{}",
        t.table,
        match (backend == Backend::Postgres, t.written) {
            (false, _) => "",
            (true, true) => " FOR UPDATE",
            (true, false) => " FOR SHARE",
        }
    )
}

/// Whether the revision `found` (`None`: no row) meets the expectation.
pub(super) fn check_found(t: &Target<'_>, found: Option<i64>) -> Result<()> {
    let ok = match found {
        None => t.rev == 0,
        Some(rev) => rev == t.rev && t.rev != 0,
    };
    if ok {
        return Ok(());
    }
    let expected = if t.rev == 0 {
        "no row".to_string()
    } else {
        format!("rev {}", t.rev)
    };
    let found = found.map_or("none".to_string(), |r| format!("rev {r}"));
    Err(StoreError::Stale(format!(
        "{} {} of tenant {}: expected {expected}, found {found}",
        t.what, t.id, t.tenant_id
    )))
}

/// A statement parameter, bound alike by sqlx and by the SQLite writer thread.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Int(i64),
    Text(String),
    Null,
}

impl From<&str> for Param {
    fn from(s: &str) -> Param {
        Param::Text(s.to_string())
    }
}

impl From<i64> for Param {
    fn from(i: i64) -> Param {
        Param::Int(i)
    }
}

impl From<Option<&str>> for Param {
    fn from(s: Option<&str>) -> Param {
        s.map_or(Param::Null, Param::from)
    }
}

/// The statements of one write other than [`Write::Release`], with their parameters (`$n` is the
/// n-th).
pub(super) fn statements(w: &Write) -> Vec<(&'static str, Vec<Param>)> {
    match w {
        Write::Cluster(c) => cluster_statements(c),
        Write::Node(n) => node_statements(n),
        Write::DeleteNode { tenant_id, id } => delete_node_statements(tenant_id, id),
        Write::Job(j) => job_statements(j),
        Write::Task(t) => task_statements(t),
        Write::Release { .. } => Vec::new(),
        Write::AuditPending(p) => vec![audit_pending_statement(p)],
    }
}

/// [`Write::AuditPending`]: the request's record, once whatever its transactions wrote.
pub(super) fn audit_pending_statement(p: &PendingRow) -> (&'static str, Vec<Param>) {
    (
        "INSERT INTO audit_pending (request_id, tenant_id, time, body) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (request_id) DO NOTHING",
        vec![
            p.request_id.as_str().into(),
            p.tenant_id.as_str().into(),
            p.time.into(),
            p.body.as_str().into(),
        ],
    )
}

/// [`Write::Cluster`]: an upsert of the cluster row.
fn cluster_statements(c: &ClusterRow) -> Vec<(&'static str, Vec<Param>)> {
    vec![(
        "INSERT INTO clusters (tenant_id, id, owner, name, status, create_time, expire_time, \
         latest_job, rev, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9) \
         ON CONFLICT (tenant_id, id) DO UPDATE SET owner = excluded.owner, \
         name = excluded.name, status = excluded.status, create_time = excluded.create_time, \
         expire_time = excluded.expire_time, latest_job = excluded.latest_job, \
         rev = clusters.rev + 1, body = excluded.body",
        vec![
            c.tenant_id.as_str().into(),
            to_i64(c.id).into(),
            c.owner.as_str().into(),
            c.name.as_str().into(),
            c.status.as_str().into(),
            c.create_time.into(),
            c.expire_time.into(),
            c.latest_job.as_deref().into(),
            Param::Text(c.body.to_string()),
        ],
    )]
}

/// [`Write::Node`]: an upsert of the node row, and a new revision of its cluster's nodes.
fn node_statements(n: &NodeRow) -> Vec<(&'static str, Vec<Param>)> {
    vec![
        (
            "INSERT INTO nodes (tenant_id, id, cluster_id, nodenum, rev, body) \
             VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (tenant_id, id) DO UPDATE SET \
             cluster_id = excluded.cluster_id, nodenum = excluded.nodenum, \
             rev = nodes.rev + 1, body = excluded.body",
            vec![
                n.tenant_id.as_str().into(),
                n.id.as_str().into(),
                to_i64(n.cluster_id).into(),
                to_i64(n.nodenum).into(),
                Param::Text(n.body.to_string()),
            ],
        ),
        (
            "UPDATE clusters SET nodes_rev = nodes_rev + 1 WHERE tenant_id = $1 AND id = $2",
            vec![n.tenant_id.as_str().into(), to_i64(n.cluster_id).into()],
        ),
    ]
}

/// [`Write::DeleteNode`]: a new revision of the node's cluster's nodes, and the row's delete.
fn delete_node_statements(tenant_id: &str, id: &str) -> Vec<(&'static str, Vec<Param>)> {
    vec![
        (
            "UPDATE clusters SET nodes_rev = nodes_rev + 1 WHERE tenant_id = $1 AND id = \
             (SELECT cluster_id FROM nodes WHERE tenant_id = $1 AND id = $2)",
            vec![tenant_id.into(), id.into()],
        ),
        (
            "DELETE FROM nodes WHERE tenant_id = $1 AND id = $2",
            vec![tenant_id.into(), id.into()],
        ),
    ]
}

/// [`Write::Job`]: an upsert of the job row.
fn job_statements(j: &JobRow) -> Vec<(&'static str, Vec<Param>)> {
    vec![(
        "INSERT INTO jobs (tenant_id, id, cluster_id, action, status, create_time, rev, \
         steps_total, body) VALUES ($1, $2, $3, $4, $5, $6, 1, $8, $7) \
         ON CONFLICT (tenant_id, id) DO UPDATE SET \
         cluster_id = excluded.cluster_id, action = excluded.action, \
         status = excluded.status, create_time = excluded.create_time, \
         rev = jobs.rev + 1, steps_total = excluded.steps_total, body = excluded.body",
        vec![
            j.tenant_id.as_str().into(),
            j.id.as_str().into(),
            to_i64(j.cluster_id).into(),
            j.action.as_str().into(),
            j.status.as_str().into(),
            j.create_time.into(),
            Param::Text(j.body.to_string()),
            to_i64(j.steps_total).into(),
        ],
    )]
}

/// [`Write::Task`]: an upsert of the task row.
fn task_statements(t: &TaskRow) -> Vec<(&'static str, Vec<Param>)> {
    vec![(
        "INSERT INTO tasks (tenant_id, id, cluster_id, job_id, node_id, action, service, \
         state, attempts, deps_remaining, successors, lease_owner, lease_deadline, \
         queued_at, started_at, rev, body) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 1, $16) \
         ON CONFLICT (tenant_id, id) DO UPDATE SET cluster_id = excluded.cluster_id, \
         job_id = excluded.job_id, node_id = excluded.node_id, action = excluded.action, \
         service = excluded.service, state = excluded.state, \
         attempts = excluded.attempts, deps_remaining = excluded.deps_remaining, \
         successors = excluded.successors, lease_owner = excluded.lease_owner, \
         lease_deadline = excluded.lease_deadline, queued_at = excluded.queued_at, \
         started_at = excluded.started_at, rev = tasks.rev + 1, body = excluded.body",
        vec![
            t.tenant_id.as_str().into(),
            t.id.as_str().into(),
            to_i64(t.cluster_id).into(),
            t.job_id.as_str().into(),
            t.node_id.as_str().into(),
            t.action.as_str().into(),
            t.service.as_str().into(),
            t.state.as_str().into(),
            i64::from(t.attempts).into(),
            i64::from(t.deps_remaining).into(),
            Param::Text(
                serde_json::to_string(&t.successors).expect("a list of strings always serializes"),
            ),
            t.lease_owner.as_deref().into(),
            t.lease_deadline.into(),
            t.queued_at.into(),
            t.started_at.into(),
            Param::Text(t.body.to_string()),
        ],
    )]
}

/// Applies one write on `conn`, inside its transaction; a [`Write::Release`] adds the job-end gates it completed to
/// `ended`.
pub(super) async fn apply(
    conn: &mut AnyConnection,
    w: &Write,
    ended: &mut Vec<String>,
) -> Result<()> {
    if let Write::Release {
        tenant_id,
        ids,
        queue,
        now,
    } = w
    {
        return release(conn, tenant_id, ids.clone(), *queue, *now, ended).await;
    }
    for (sql, params) in statements(w) {
        let mut q = sqlx::query(sql);
        for p in params {
            q = bind_param(q, p);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// `q` with `p` bound to its next placeholder.
pub(crate) fn bind_param(q: AnyQuery<'_>, p: Param) -> AnyQuery<'_> {
    match p {
        Param::Int(i) => q.bind(i),
        Param::Text(s) => q.bind(s),
        Param::Null => q.bind(None::<String>),
    }
}

pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

/// [`Write::Release`]: one atomic decrement per successor, cascading through gates. Each statement
/// reads the row's old values on the right-hand side, so "this decrement reached zero on a
/// pending task" is `deps_remaining = 1 AND state = 'pending'` there.
async fn release(
    conn: &mut AnyConnection,
    tenant_id: &str,
    mut todo: Vec<String>,
    queue: bool,
    now: i64,
    ended: &mut Vec<String>,
) -> Result<()> {
    while let Some(id) = todo.pop() {
        let row = sqlx::query(&RELEASE_SQL)
            .bind(tenant_id)
            .bind(id.as_str())
            .bind(i64::from(queue))
            .bind(now)
            .fetch_optional(&mut *conn)
            .await?;
        // Absent, or already released by as many predecessors as it has: nothing to count.
        if let Some(row) = row {
            released(id, &row, &mut todo, ended)?;
        }
    }
    Ok(())
}

/// One successor's decrement: reads the row's old values on the right-hand side, so "this
/// decrement reached zero on a pending task" is `deps_remaining = 1 AND state = 'pending'` there.
/// `successors` is returned only for a gate that completes (the only reader): a gate that joins
/// every node of a 10,000-node cluster holds some 250 KB of them, which every one of its 10,000
/// decrements would otherwise read back.
pub(super) static RELEASE_SQL: LazyLock<String> = LazyLock::new(|| {
    const READY: &str = "deps_remaining = 1 AND state = 'pending'";
    format!(
        "UPDATE tasks SET deps_remaining = deps_remaining - 1, \
         state = CASE WHEN {READY} AND action = '{GATE}' THEN 'complete' \
                      WHEN {READY} AND $3 = 1 THEN 'queued' ELSE state END, \
         queued_at = CASE WHEN {READY} AND action <> '{GATE}' AND $3 = 1 THEN $4 \
                          ELSE queued_at END, \
         rev = rev + 1 \
         WHERE tenant_id = $1 AND id = $2 AND deps_remaining > 0 \
         RETURNING deps_remaining, state, action, \
         CASE WHEN deps_remaining = 0 AND action = '{GATE}' THEN successors ELSE '[]' END \
             AS successors"
    )
});

/// After [`RELEASE_SQL`] decremented task `id` (`row` is what it returned): a gate that completed
/// releases its successors in turn (added to `todo`), or, having none, is a job's end (`ended`).
pub(super) fn released(
    id: String,
    row: &impl Cols,
    todo: &mut Vec<String>,
    ended: &mut Vec<String>,
) -> Result<()> {
    let deps: i64 = row.get("deps_remaining")?;
    let state: String = row.get("state")?;
    let action: String = row.get("action")?;
    if deps == 0 && action == GATE && state == TaskState::Complete.as_str() {
        let successors: String = row.get("successors")?;
        let successors: Vec<String> = serde_json::from_str(&successors)
            .map_err(|e| StoreError::Corrupt(format!("task successors: {e}")))?;
        if successors.is_empty() {
            ended.push(id);
        }
        todo.extend(successors);
    }
    Ok(())
}

/// Leases the tenant's next queued task (`$1` tenant, `$2` owner, `$3` deadline, `$4` now) and
/// returns it with its job's status and its cluster's stamp. SQLite's: PostgreSQL's takes run in
/// the batch function (`pg_batch.sql`).
pub(super) fn take_sql() -> String {
    format!(
        "UPDATE tasks SET state = 'in_progress', lease_owner = $2, lease_deadline = $3, \
         attempts = attempts + 1, started_at = $4, rev = rev + 1 \
         WHERE tenant_id = $1 AND state = 'queued' AND id = ( \
             SELECT id FROM tasks WHERE tenant_id = $1 AND state = 'queued' AND queued_at <= $4 \
             ORDER BY queued_at, id LIMIT 1) \
         RETURNING {TASK_COLUMNS}, {JOB_OF_TASK}, \
         (SELECT rev FROM clusters c WHERE c.tenant_id = tasks.tenant_id \
          AND c.id = tasks.cluster_id) AS cluster_rev, \
         (SELECT nodes_rev FROM clusters c WHERE c.tenant_id = tasks.tenant_id \
          AND c.id = tasks.cluster_id) AS nodes_rev"
    )
}

pub(super) fn taken_from_row(row: &impl Cols) -> Result<Taken> {
    Ok(Taken {
        task: task_from_row(row)?,
        job: job_of_task(row)?,
        cluster: stamp_of_task(row)?,
    })
}

/// A task with its job's status and revision (`$1` tenant, `$2` task id).
pub(super) static TASK_WITH_JOB_SQL: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {TASK_COLUMNS}, {JOB_OF_TASK} FROM tasks WHERE tenant_id = $1 AND id = $2")
});

/// A change set's quotas and expectations on `conn`, inside its transaction.
pub(super) async fn check_all(
    conn: &mut AnyConnection,
    backend: Backend,
    quotas: &[&Quota],
    targets: &[Target<'_>],
) -> Result<()> {
    // Quota locks first, row locks after, in every transaction: no lock-order deadlock.
    for q in quotas {
        check_quota(conn, backend, q).await?;
    }
    for t in targets {
        check(conn, backend, t).await?;
    }
    Ok(())
}

impl<B: Hot> SqlStore<B> {
    pub(crate) async fn commit_changes(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        self.hot.commit(cs).await
    }

    pub(crate) async fn next_id_impl(&self, counter: &str) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let v: i64 = sqlx::query_scalar(
            "INSERT INTO counters (name, value) VALUES ($1, 1) \
             ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value",
        )
        .bind(counter)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        to_u64(v, "counter value")
    }

    pub(crate) async fn counter_impl(&self, counter: &str) -> Result<u64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT value FROM counters WHERE name = $1")
            .bind(counter)
            .fetch_optional(&self.reader)
            .await?;
        to_u64(v.unwrap_or(0), "counter value")
    }

    pub(crate) async fn get_cluster_impl(
        &self,
        tenant_id: &str,
        id: u64,
    ) -> Result<Option<ClusterRow>> {
        let sql =
            format!("SELECT {CLUSTER_COLUMNS} FROM clusters WHERE tenant_id = $1 AND id = $2");
        let params = vec![tenant_id.into(), to_i64(id).into()];
        let mut rows = self.hot.read::<Clusters>(&self.reader, sql, params).await?;
        Ok(rows.pop())
    }

    pub(crate) async fn list_clusters_impl(
        &self,
        tenant_id: &str,
        owner: Option<&str>,
    ) -> Result<Vec<ClusterRow>> {
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE tenant_id = $1 \
             AND ($2 IS NULL OR owner = $2) ORDER BY id DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(owner)
            .fetch_all_on(self)
            .await?;
        rows.iter().map(cluster_from_row).collect()
    }

    pub(crate) async fn list_nodes_impl(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<NodeRow>> {
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes WHERE tenant_id = $1 AND cluster_id = $2 \
             ORDER BY nodenum, id"
        );
        let params = vec![tenant_id.into(), to_i64(cluster_id).into()];
        self.hot.read::<Nodes>(&self.reader, sql, params).await
    }

    pub(crate) async fn get_node_impl(
        &self,
        tenant_id: &str,
        node_id: &str,
    ) -> Result<Option<NodeRow>> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE tenant_id = $1 AND id = $2");
        let params = vec![tenant_id.into(), node_id.into()];
        Ok(self
            .hot
            .read::<Nodes>(&self.reader, sql, params)
            .await?
            .pop())
    }

    pub(crate) async fn list_tenant_nodes_impl(&self, tenant_id: &str) -> Result<Vec<NodeRow>> {
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes WHERE tenant_id = $1 ORDER BY cluster_id, nodenum, id"
        );
        let rows = sqlx::query(&sql).bind(tenant_id).fetch_all_on(self).await?;
        rows.iter().map(node_from_row).collect()
    }

    pub(crate) async fn get_job_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<JobRow>> {
        self.job_by_id(JOB_COLUMNS, tenant_id, job_id).await
    }

    pub(crate) async fn get_job_head_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<JobRow>> {
        self.job_by_id(JOB_HEAD_COLUMNS, tenant_id, job_id).await
    }

    /// A job's `columns` (all of them, or all but the body).
    async fn job_by_id(
        &self,
        columns: &str,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<JobRow>> {
        let sql = format!("SELECT {columns} FROM jobs WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(job_id)
            .fetch_optional_on(self)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    pub(crate) async fn list_jobs_impl(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE tenant_id = $1 AND cluster_id = $2 \
             ORDER BY create_time DESC, LENGTH(id) DESC, id DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .fetch_all_on(self)
            .await?;
        rows.iter().map(job_from_row).collect()
    }

    pub(crate) async fn get_task_impl(
        &self,
        tenant_id: &str,
        task_id: &str,
    ) -> Result<Option<TaskRow>> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(task_id)
            .fetch_optional_on(self)
            .await?;
        row.as_ref().map(task_from_row).transpose()
    }

    pub(crate) async fn list_tasks_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Vec<TaskRow>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE tenant_id = $1 AND job_id = $2 ORDER BY {BY_ID}"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(job_id)
            .fetch_all_on(self)
            .await?;
        rows.iter().map(task_from_row).collect()
    }

    pub(crate) async fn list_task_heads_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Vec<TaskHead>> {
        let sql = format!(
            "SELECT id, node_id, action, service, state, attempts FROM tasks \
             WHERE tenant_id = $1 AND job_id = $2 ORDER BY {BY_ID}"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(job_id)
            .fetch_all_on(self)
            .await?;
        rows.iter().map(task_head_from_row).collect()
    }

    pub(crate) async fn take_task_impl(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        self.hot.take(tenant_id, owner, now, deadline).await
    }

    pub(crate) async fn task_with_job_impl(
        &self,
        tenant_id: &str,
        task_id: &str,
    ) -> Result<super::TaskWithJob> {
        self.hot.task_with_job(tenant_id, task_id).await
    }

    pub(crate) async fn cluster_stamp_impl(
        &self,
        tenant_id: &str,
        id: u64,
    ) -> Result<Option<ClusterStamp>> {
        const SQL: &str = "SELECT rev, nodes_rev FROM clusters WHERE tenant_id = $1 AND id = $2";
        let params = vec![tenant_id.into(), to_i64(id).into()];
        let mut rows = self
            .hot
            .read::<Stamps>(&self.reader, SQL.into(), params)
            .await?;
        Ok(rows.pop())
    }

    pub(crate) async fn node_revs_impl(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<(String, i64)>> {
        let rows = self.cluster_nodes(tenant_id, cluster_id, false).await?;
        Ok(rows.into_iter().map(|(id, rev, _)| (id, rev)).collect())
    }

    pub(crate) async fn node_texts_impl(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<(String, i64, String)>> {
        self.cluster_nodes(tenant_id, cluster_id, true).await
    }

    /// `(id, rev, body)` of a cluster's nodes by id; the body empty unless `with_body`.
    async fn cluster_nodes(
        &self,
        tenant_id: &str,
        cluster_id: u64,
        with_body: bool,
    ) -> Result<Vec<(String, i64, String)>> {
        let body = if with_body { "body" } else { "'' AS body" };
        let sql = format!(
            "SELECT id, rev, {body} FROM nodes WHERE tenant_id = $1 AND cluster_id = $2 \
             ORDER BY id"
        );
        let params = vec![tenant_id.into(), to_i64(cluster_id).into()];
        self.hot.read::<NodeTexts>(&self.reader, sql, params).await
    }

    pub(crate) async fn node_tasks_impl(
        &self,
        tenant_id: &str,
        node_id: &str,
        limit: u32,
    ) -> Result<Vec<TaskRow>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE tenant_id = $1 AND node_id = $2 \
             AND started_at > 0 AND action <> '{GATE}' ORDER BY started_at DESC, id DESC LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(node_id)
            .bind(i64::from(limit))
            .fetch_all_on(self)
            .await?;
        let mut tasks = rows.iter().map(task_from_row).collect::<Result<Vec<_>>>()?;
        tasks.reverse();
        Ok(tasks)
    }

    pub(crate) async fn ended_jobs_impl(&self) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE jobs.status IN ('running', 'paused') AND EXISTS \
             (SELECT 1 FROM tasks t WHERE t.tenant_id = jobs.tenant_id \
              AND t.id = jobs.id || '-end' AND t.state = 'complete') \
             ORDER BY jobs.tenant_id, jobs.id"
        );
        let rows = sqlx::query(&sql).fetch_all_on(self).await?;
        rows.iter().map(job_from_row).collect()
    }

    pub(crate) async fn expired_tasks_impl(&self, now: i64) -> Result<Vec<TaskRow>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'in_progress' AND lease_deadline < $1 \
             ORDER BY lease_deadline, tenant_id, id"
        );
        let rows = sqlx::query(&sql).bind(now).fetch_all_on(self).await?;
        rows.iter().map(task_from_row).collect()
    }

    pub(crate) async fn tasks_leased_by_impl(&self, provisioner_id: &str) -> Result<Vec<TaskRow>> {
        // A prefix compare, not LIKE: a provisioner id may hold `%` or `_`.
        let prefix = format!("{provisioner_id}.");
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'in_progress' \
             AND substr(lease_owner, 1, CAST($1 AS INTEGER)) = $2 ORDER BY lease_deadline, tenant_id, id"
        );
        let rows = sqlx::query(&sql)
            .bind(i32::try_from(prefix.chars().count()).unwrap_or(i32::MAX))
            .bind(&prefix)
            .fetch_all_on(self)
            .await?;
        rows.iter().map(task_from_row).collect()
    }

    pub(crate) async fn leases_of_impl(
        &self,
        tenant_id: &str,
        owner: &str,
    ) -> Result<Vec<TaskRow>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE tenant_id = $1 AND state = 'in_progress' \
             AND lease_owner = $2 ORDER BY lease_deadline, id"
        );
        // Every take asks: the hot path's reader (on SQLite, no thread hops through sqlx).
        let params = vec![tenant_id.into(), owner.into()];
        self.hot.read::<Tasks>(&self.reader, sql, params).await
    }

    pub(crate) async fn expired_clusters_impl(&self, now: i64) -> Result<Vec<ClusterRow>> {
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE status IN ('active', 'incomplete') \
             AND expire_time > 0 AND expire_time < $1 ORDER BY expire_time, tenant_id, id"
        );
        let rows = sqlx::query(&sql).bind(now).fetch_all_on(self).await?;
        rows.iter().map(cluster_from_row).collect()
    }

    pub(crate) async fn queue_counts_impl(&self) -> Result<BTreeMap<String, (u64, u64)>> {
        let rows = sqlx::query(
            // One branch per state, so that each counts from its partial index.
            "SELECT tenant_id, state, COUNT(*) AS n FROM tasks WHERE state = 'queued' \
             GROUP BY tenant_id, state UNION ALL \
             SELECT tenant_id, state, COUNT(*) AS n FROM tasks WHERE state = 'in_progress' \
             GROUP BY tenant_id, state",
        )
        .fetch_all_on(self)
        .await?;
        let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for row in &rows {
            let tenant: String = row.try_get("tenant_id")?;
            let state: TaskState = row.try_get::<String, _>("state")?.parse()?;
            let n = to_u64(row.try_get("n")?, "task count")?;
            let entry = counts.entry(tenant).or_default();
            match state {
                TaskState::Queued => entry.0 = n,
                _ => entry.1 = n,
            }
        }
        Ok(counts)
    }

    pub(crate) async fn count_clusters_impl(&self, tenant_id: &str) -> Result<(u64, u64)> {
        // One statement, so both counts come from one snapshot.
        let row = sqlx::query(QUOTA_COUNTS)
            .bind(tenant_id)
            .fetch_one(&self.reader)
            .await?;
        Ok((
            to_u64(row.try_get("c")?, "cluster count")?,
            to_u64(row.try_get("n")?, "node count")?,
        ))
    }

    /// See [`Store::lead`](crate::Store::lead): one upsert that inserts the row, renews it for
    /// its holder, or takes it over once its deadline has passed; `RETURNING` yields the term only
    /// when it did one of these.
    pub(crate) async fn lead_impl(
        &self,
        role: &str,
        holder: &str,
        now: i64,
        lease_ms: i64,
    ) -> Result<Option<i64>> {
        const LEAD: &str = "INSERT INTO leaders (role, holder, term, deadline) VALUES ($1, $2, 1, $4) \
             ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, deadline = excluded.deadline, \
             term = CASE WHEN leaders.holder = excluded.holder AND leaders.deadline >= $3 \
             THEN leaders.term ELSE leaders.term + 1 END \
             WHERE leaders.holder = excluded.holder OR leaders.deadline < $3 \
             RETURNING term";
        let params = vec![
            role.into(),
            holder.into(),
            now.into(),
            (now + lease_ms).into(),
        ];
        self.hot.scalar(&self.writer, LEAD, params).await
    }

    pub(crate) async fn resign_impl(&self, role: &str, holder: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE leaders SET deadline = 0 WHERE role = $1 AND holder = $2")
            .bind(role)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn leader_impl(&self, role: &str) -> Result<Option<Leadership>> {
        let row = sqlx::query("SELECT role, holder, term, deadline FROM leaders WHERE role = $1")
            .bind(role)
            .fetch_optional_on(self)
            .await?;
        row.map(|r| {
            Ok(Leadership {
                role: r.try_get("role")?,
                holder: r.try_get("holder")?,
                term: r.try_get("term")?,
                deadline: r.try_get("deadline")?,
            })
        })
        .transpose()
    }
}
