//! The engine's tables in [`SqlStore`]: change sets, reads, the task queue, the janitor's queries,
//! id counters and leader election.
//!
//! # Atomicity of [`commit`](SqlStore::commit_changes)
//!
//! A change set is one write transaction: expectations are checked first, then the writes apply in
//! order, and a failed expectation rolls everything back.
//!
//! * **SQLite**: `BEGIN IMMEDIATE` on the one writer connection serializes every writer, so a plain
//!   read of `rev` is already exclusive.
//! * **PostgreSQL**: each expected row is read `FOR UPDATE`, which locks it until commit and, when
//!   a concurrent transaction changed it first, re-reads the committed revision; an expectation
//!   that a row does not exist (`rev` 0) first takes a transaction-scoped advisory lock on the
//!   row's key, so two creators of one row serialize and the second sees the first's row.
//!   Expected rows are locked in one canonical order; a deadlock with another writer that still
//!   happens (through the rows both write) is retried, after which the loser finds its
//!   expectation stale.
//!
//! # The queue
//!
//! [`take_task`](SqlStore::take_task_impl) is one `UPDATE ... WHERE id = (SELECT ... LIMIT 1)
//! RETURNING`; on PostgreSQL the inner select is `FOR UPDATE SKIP LOCKED`, so concurrent takers
//! each lock a different queued task instead of waiting for (or sharing) the first.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{parse_json, to_i64, to_u32, to_u64, SqlStore};
use crate::engine::{
    ChangeSet, ClusterRow, ClusterStamp, Expect, JobRow, NodeRow, Taken, TaskRow, TaskState, Write,
    GATE,
};
use crate::leader::{fnv1a64, Held};
use crate::{Backend, LeaderGuard, Result, StoreError};

/// How often a change set that lost a deadlock is retried.
const MAX_DEADLOCK_RETRIES: usize = 16;

/// The class of the advisory locks that guard the creation of rows ("weft" in ASCII).
const ROW_LOCK_CLASS: i32 = 0x7765_6674;

const CLUSTER_COLUMNS: &str =
    "tenant_id, id, owner, name, status, create_time, expire_time, latest_job, rev, body";
const NODE_COLUMNS: &str = "tenant_id, cluster_id, id, nodenum, rev, body";
const JOB_COLUMNS: &str = "tenant_id, cluster_id, id, action, status, create_time, rev, body";
const TASK_COLUMNS: &str = "tenant_id, cluster_id, job_id, id, node_id, action, service, state, \
     attempts, deps_remaining, successors, lease_owner, lease_deadline, queued_at, started_at, rev, body";

/// The status and revision of a task row's job, as columns `job_status` and `job_rev`.
const JOB_OF_TASK: &str = "(SELECT status FROM jobs j WHERE j.tenant_id = tasks.tenant_id \
     AND j.id = tasks.job_id) AS job_status, (SELECT rev FROM jobs j WHERE \
     j.tenant_id = tasks.tenant_id AND j.id = tasks.job_id) AS job_rev";

fn job_of_task(row: &AnyRow) -> Result<Option<(String, i64)>> {
    Ok(
        match (
            row.try_get::<Option<String>, _>("job_status")?,
            row.try_get::<Option<i64>, _>("job_rev")?,
        ) {
            (Some(s), Some(r)) => Some((s, r)),
            _ => None,
        },
    )
}

/// Orders ids made of a common prefix and a zero-padded counter numerically, also once the counter
/// outgrows its padding (`...-999` before `...-1000`).
const BY_ID: &str = "LENGTH(id), id";

fn cluster_from_row(row: &AnyRow) -> Result<ClusterRow> {
    Ok(ClusterRow {
        tenant_id: row.try_get("tenant_id")?,
        id: to_u64(row.try_get("id")?, "cluster id")?,
        owner: row.try_get("owner")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        create_time: row.try_get("create_time")?,
        expire_time: row.try_get("expire_time")?,
        latest_job: row.try_get("latest_job")?,
        rev: row.try_get("rev")?,
        body: parse_json(&row.try_get::<String, _>("body")?, "cluster body")?,
    })
}

fn node_from_row(row: &AnyRow) -> Result<NodeRow> {
    Ok(NodeRow {
        tenant_id: row.try_get("tenant_id")?,
        cluster_id: to_u64(row.try_get("cluster_id")?, "node cluster id")?,
        id: row.try_get("id")?,
        nodenum: to_u64(row.try_get("nodenum")?, "nodenum")?,
        rev: row.try_get("rev")?,
        body: parse_json(&row.try_get::<String, _>("body")?, "node body")?,
    })
}

fn job_from_row(row: &AnyRow) -> Result<JobRow> {
    Ok(JobRow {
        tenant_id: row.try_get("tenant_id")?,
        cluster_id: to_u64(row.try_get("cluster_id")?, "job cluster id")?,
        id: row.try_get("id")?,
        action: row.try_get("action")?,
        status: row.try_get("status")?,
        create_time: row.try_get("create_time")?,
        rev: row.try_get("rev")?,
        body: parse_json(&row.try_get::<String, _>("body")?, "job body")?,
    })
}

fn task_from_row(row: &AnyRow) -> Result<TaskRow> {
    let successors: String = row.try_get("successors")?;
    Ok(TaskRow {
        tenant_id: row.try_get("tenant_id")?,
        cluster_id: to_u64(row.try_get("cluster_id")?, "task cluster id")?,
        job_id: row.try_get("job_id")?,
        id: row.try_get("id")?,
        node_id: row.try_get("node_id")?,
        action: row.try_get("action")?,
        service: row.try_get("service")?,
        state: row.try_get::<String, _>("state")?.parse()?,
        attempts: to_u32(row.try_get("attempts")?, "task attempts")?,
        deps_remaining: to_u32(row.try_get("deps_remaining")?, "task deps_remaining")?,
        successors: serde_json::from_str(&successors)
            .map_err(|e| StoreError::Corrupt(format!("task successors: {e}")))?,
        lease_owner: row.try_get("lease_owner")?,
        lease_deadline: row.try_get("lease_deadline")?,
        queued_at: row.try_get("queued_at")?,
        started_at: row.try_get("started_at")?,
        rev: row.try_get("rev")?,
        body: parse_json(&row.try_get::<String, _>("body")?, "task body")?,
    })
}

/// The table, tenant, printable id and expected revision of an expectation.
struct Target<'a> {
    table: &'static str,
    what: &'static str,
    tenant_id: &'a str,
    id: Id<'a>,
    rev: i64,
    /// The change set writes this row (PostgreSQL locks it for update, else for share).
    written: bool,
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
    };
    table == t.table && tenant == t.tenant_id && id == t.id
}

/// A row id: clusters have numbers, everything else text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Id<'a> {
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

fn target(e: &Expect) -> Target<'_> {
    match e {
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
    }
}

fn is_deadlock(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(d))
        if matches!(d.code().as_deref(), Some("40P01" | "40001")))
}

/// Checks one expectation inside `tx`, locking the row on PostgreSQL.
async fn check(tx: &mut Transaction<'static, Any>, backend: Backend, t: &Target<'_>) -> Result<()> {
    let pg = backend == Backend::Postgres;
    if pg && t.rev == 0 {
        let key = format!("{}/{}/{}", t.table, t.tenant_id, t.id);
        // Only the low 32 bits: the two-key form keeps these apart from the one-key locks.
        let objid = fnv1a64(key.as_bytes()) as u32 as i32;
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, $2)) AS l")
            .bind(ROW_LOCK_CLASS)
            .bind(objid)
            .execute(&mut **tx)
            .await?;
    }
    let sql = format!(
        "SELECT rev FROM {} WHERE tenant_id = $1 AND id = $2{}",
        t.table,
        match (pg, t.written) {
            (false, _) => "",
            (true, true) => " FOR UPDATE",
            (true, false) => " FOR SHARE",
        }
    );
    let q = sqlx::query_scalar::<_, i64>(&sql).bind(t.tenant_id);
    let q = match t.id {
        Id::Num(n) => q.bind(to_i64(n)),
        Id::Text(s) => q.bind(s),
    };
    let found = q.fetch_optional(&mut **tx).await?;
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

/// Applies one write inside `tx`; a [`Write::Release`] adds the job-end gates it completed to
/// `ended`.
async fn apply(
    tx: &mut Transaction<'static, Any>,
    w: &Write,
    ended: &mut Vec<String>,
) -> Result<()> {
    match w {
        Write::Cluster(c) => {
            sqlx::query(
                "INSERT INTO clusters (tenant_id, id, owner, name, status, create_time, expire_time, \
                 latest_job, rev, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9) \
                 ON CONFLICT (tenant_id, id) DO UPDATE SET owner = excluded.owner, \
                 name = excluded.name, status = excluded.status, create_time = excluded.create_time, \
                 expire_time = excluded.expire_time, latest_job = excluded.latest_job, \
                 rev = clusters.rev + 1, body = excluded.body",
            )
            .bind(c.tenant_id.as_str())
            .bind(to_i64(c.id))
            .bind(c.owner.as_str())
            .bind(c.name.as_str())
            .bind(c.status.as_str())
            .bind(c.create_time)
            .bind(c.expire_time)
            .bind(c.latest_job.as_deref())
            .bind(c.body.to_string())
            .execute(&mut **tx)
            .await?;
        }
        Write::Node(n) => {
            sqlx::query(
                "INSERT INTO nodes (tenant_id, id, cluster_id, nodenum, rev, body) \
                 VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (tenant_id, id) DO UPDATE SET \
                 cluster_id = excluded.cluster_id, nodenum = excluded.nodenum, \
                 rev = nodes.rev + 1, body = excluded.body",
            )
            .bind(n.tenant_id.as_str())
            .bind(n.id.as_str())
            .bind(to_i64(n.cluster_id))
            .bind(to_i64(n.nodenum))
            .bind(n.body.to_string())
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "UPDATE clusters SET nodes_rev = nodes_rev + 1 WHERE tenant_id = $1 AND id = $2",
            )
            .bind(n.tenant_id.as_str())
            .bind(to_i64(n.cluster_id))
            .execute(&mut **tx)
            .await?;
        }
        Write::DeleteNode { tenant_id, id } => {
            sqlx::query(
                "UPDATE clusters SET nodes_rev = nodes_rev + 1 WHERE tenant_id = $1 AND id = \
                 (SELECT cluster_id FROM nodes WHERE tenant_id = $1 AND id = $2)",
            )
            .bind(tenant_id.as_str())
            .bind(id.as_str())
            .execute(&mut **tx)
            .await?;
            sqlx::query("DELETE FROM nodes WHERE tenant_id = $1 AND id = $2")
                .bind(tenant_id.as_str())
                .bind(id.as_str())
                .execute(&mut **tx)
                .await?;
        }
        Write::Job(j) => {
            sqlx::query(
                "INSERT INTO jobs (tenant_id, id, cluster_id, action, status, create_time, rev, body) \
                 VALUES ($1, $2, $3, $4, $5, $6, 1, $7) ON CONFLICT (tenant_id, id) DO UPDATE SET \
                 cluster_id = excluded.cluster_id, action = excluded.action, \
                 status = excluded.status, create_time = excluded.create_time, \
                 rev = jobs.rev + 1, body = excluded.body",
            )
            .bind(j.tenant_id.as_str())
            .bind(j.id.as_str())
            .bind(to_i64(j.cluster_id))
            .bind(j.action.as_str())
            .bind(j.status.as_str())
            .bind(j.create_time)
            .bind(j.body.to_string())
            .execute(&mut **tx)
            .await?;
        }
        Write::Task(t) => {
            let successors =
                serde_json::to_string(&t.successors).expect("a list of strings always serializes");
            sqlx::query(
                "INSERT INTO tasks (tenant_id, id, cluster_id, job_id, node_id, action, service, \
                 state, attempts, deps_remaining, successors, lease_owner, lease_deadline, \
                 queued_at, started_at, rev, body) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $16, 1, $15) \
                 ON CONFLICT (tenant_id, id) DO UPDATE SET cluster_id = excluded.cluster_id, \
                 job_id = excluded.job_id, node_id = excluded.node_id, action = excluded.action, \
                 service = excluded.service, state = excluded.state, \
                 attempts = excluded.attempts, deps_remaining = excluded.deps_remaining, \
                 successors = excluded.successors, lease_owner = excluded.lease_owner, \
                 lease_deadline = excluded.lease_deadline, queued_at = excluded.queued_at, \
                 started_at = excluded.started_at, rev = tasks.rev + 1, body = excluded.body",
            )
            .bind(t.tenant_id.as_str())
            .bind(t.id.as_str())
            .bind(to_i64(t.cluster_id))
            .bind(t.job_id.as_str())
            .bind(t.node_id.as_str())
            .bind(t.action.as_str())
            .bind(t.service.as_str())
            .bind(t.state.as_str())
            .bind(i64::from(t.attempts))
            .bind(i64::from(t.deps_remaining))
            .bind(successors)
            .bind(t.lease_owner.as_deref())
            .bind(t.lease_deadline)
            .bind(t.queued_at)
            .bind(t.body.to_string())
            .bind(t.started_at)
            .execute(&mut **tx)
            .await?;
        }
        Write::Release {
            tenant_id,
            ids,
            queue,
            now,
        } => release(tx, tenant_id, ids.clone(), *queue, *now, ended).await?,
    }
    Ok(())
}

/// [`Write::Release`]: one atomic decrement per successor, cascading through gates. Each statement
/// reads the row's old values on the right-hand side, so "this decrement reached zero on a
/// pending task" is `deps_remaining = 1 AND state = 'pending'` there.
async fn release(
    tx: &mut Transaction<'static, Any>,
    tenant_id: &str,
    mut todo: Vec<String>,
    queue: bool,
    now: i64,
    ended: &mut Vec<String>,
) -> Result<()> {
    const READY: &str = "deps_remaining = 1 AND state = 'pending'";
    let sql = format!(
        "UPDATE tasks SET deps_remaining = deps_remaining - 1, \
         state = CASE WHEN {READY} AND action = '{GATE}' THEN 'complete' \
                      WHEN {READY} AND $3 = 1 THEN 'queued' ELSE state END, \
         queued_at = CASE WHEN {READY} AND action <> '{GATE}' AND $3 = 1 THEN $4 \
                          ELSE queued_at END, \
         rev = rev + 1 \
         WHERE tenant_id = $1 AND id = $2 AND deps_remaining > 0 \
         RETURNING deps_remaining, state, action, successors"
    );
    while let Some(id) = todo.pop() {
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(id.as_str())
            .bind(i64::from(queue))
            .bind(now)
            .fetch_optional(&mut **tx)
            .await?;
        // Absent, or already released by as many predecessors as it has: nothing to count.
        let Some(row) = row else { continue };
        let deps: i64 = row.try_get("deps_remaining")?;
        let state: String = row.try_get("state")?;
        let action: String = row.try_get("action")?;
        if deps == 0 && action == GATE && state == TaskState::Complete.as_str() {
            let successors: String = row.try_get("successors")?;
            let successors: Vec<String> = serde_json::from_str(&successors)
                .map_err(|e| StoreError::Corrupt(format!("task successors: {e}")))?;
            if successors.is_empty() {
                ended.push(id);
            }
            todo.extend(successors);
        }
    }
    Ok(())
}

impl SqlStore {
    pub(crate) async fn commit_changes(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        // One canonical locking order: by table, tenant, id.
        let mut targets: Vec<Target<'_>> = cs.expect.iter().map(target).collect();
        for t in &mut targets {
            t.written = cs.writes.iter().any(|w| writes_row(w, t));
        }
        targets.sort_by(|a, b| (a.table, a.tenant_id, a.id).cmp(&(b.table, b.tenant_id, b.id)));
        let mut tries = 0;
        loop {
            match self.try_commit(&targets, &cs.writes).await {
                Err(e) if is_deadlock(&e) && tries < MAX_DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "change set lost a deadlock, retrying");
                }
                other => return other,
            }
        }
    }

    async fn try_commit(&self, targets: &[Target<'_>], writes: &[Write]) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        for t in targets {
            check(&mut tx, self.backend, t).await?;
        }
        let mut ended = Vec::new();
        for w in writes {
            apply(&mut tx, w, &mut ended).await?;
        }
        tx.commit().await?;
        Ok(ended)
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

    pub(crate) async fn get_cluster_impl(
        &self,
        tenant_id: &str,
        id: u64,
    ) -> Result<Option<ClusterRow>> {
        let sql =
            format!("SELECT {CLUSTER_COLUMNS} FROM clusters WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(id))
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(cluster_from_row).transpose()
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
            .fetch_all(&self.reader)
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
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(node_from_row).collect()
    }

    pub(crate) async fn get_node_impl(
        &self,
        tenant_id: &str,
        node_id: &str,
    ) -> Result<Option<NodeRow>> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(node_id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(node_from_row).transpose()
    }

    pub(crate) async fn list_tenant_nodes_impl(&self, tenant_id: &str) -> Result<Vec<NodeRow>> {
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes WHERE tenant_id = $1 ORDER BY cluster_id, nodenum, id"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(node_from_row).collect()
    }

    pub(crate) async fn get_job_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<JobRow>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(job_id)
            .fetch_optional(&self.reader)
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
            .fetch_all(&self.reader)
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
            .fetch_optional(&self.reader)
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
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(task_from_row).collect()
    }

    pub(crate) async fn take_task_impl(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        let lock = match self.backend {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let sql = format!(
            "UPDATE tasks SET state = 'in_progress', lease_owner = $2, lease_deadline = $3, \
             attempts = attempts + 1, started_at = $4, rev = rev + 1 \
             WHERE tenant_id = $1 AND state = 'queued' AND id = ( \
                 SELECT id FROM tasks WHERE tenant_id = $1 AND state = 'queued' AND queued_at <= $4 \
                 ORDER BY queued_at, id LIMIT 1{lock}) \
             RETURNING {TASK_COLUMNS}, {JOB_OF_TASK}, \
             (SELECT rev FROM clusters c WHERE c.tenant_id = tasks.tenant_id \
              AND c.id = tasks.cluster_id) AS cluster_rev, \
             (SELECT nodes_rev FROM clusters c WHERE c.tenant_id = tasks.tenant_id \
              AND c.id = tasks.cluster_id) AS nodes_rev"
        );
        // One statement is its own transaction: no BEGIN and COMMIT round trips. On SQLite it runs
        // on the writer connection, which serializes it with every other write.
        let q = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(owner)
            .bind(deadline)
            .bind(now);
        let Some(row) = q.fetch_optional(&self.writer).await? else {
            return Ok(None);
        };
        let cluster = match (
            row.try_get::<Option<i64>, _>("cluster_rev")?,
            row.try_get::<Option<i64>, _>("nodes_rev")?,
        ) {
            (Some(rev), Some(nodes_rev)) => Some(ClusterStamp { rev, nodes_rev }),
            _ => None,
        };
        Ok(Some(Taken {
            task: task_from_row(&row)?,
            job: job_of_task(&row)?,
            cluster,
        }))
    }

    pub(crate) async fn task_with_job_impl(
        &self,
        tenant_id: &str,
        task_id: &str,
    ) -> Result<Option<(TaskRow, Option<(String, i64)>)>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS}, {JOB_OF_TASK} FROM tasks WHERE tenant_id = $1 AND id = $2"
        );
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(task_id)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| Ok((task_from_row(&r)?, job_of_task(&r)?)))
            .transpose()
    }

    pub(crate) async fn cluster_stamp_impl(
        &self,
        tenant_id: &str,
        id: u64,
    ) -> Result<Option<ClusterStamp>> {
        let row =
            sqlx::query("SELECT rev, nodes_rev FROM clusters WHERE tenant_id = $1 AND id = $2")
                .bind(tenant_id)
                .bind(to_i64(id))
                .fetch_optional(&self.reader)
                .await?;
        row.map(|r| {
            Ok(ClusterStamp {
                rev: r.try_get("rev")?,
                nodes_rev: r.try_get("nodes_rev")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn node_revs_impl(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT id, rev FROM nodes WHERE tenant_id = $1 AND cluster_id = $2 ORDER BY id",
        )
        .bind(tenant_id)
        .bind(to_i64(cluster_id))
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("rev")?)))
            .collect()
    }

    pub(crate) async fn task_counts_impl(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<BTreeMap<TaskState, u64>> {
        let rows = sqlx::query(&format!(
            "SELECT state, COUNT(*) AS n FROM tasks WHERE tenant_id = $1 AND job_id = $2 \
             AND action <> '{GATE}' GROUP BY state"
        ))
        .bind(tenant_id)
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?;
        let mut counts = BTreeMap::new();
        for row in &rows {
            let state: TaskState = row.try_get::<String, _>("state")?.parse()?;
            counts.insert(state, to_u64(row.try_get("n")?, "task count")?);
        }
        Ok(counts)
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
            .fetch_all(&self.reader)
            .await?;
        let mut tasks = rows.iter().map(task_from_row).collect::<Result<Vec<_>>>()?;
        tasks.reverse();
        Ok(tasks)
    }

    pub(crate) async fn ended_jobs_impl(&self) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j WHERE j.status IN ('running', 'paused') AND EXISTS \
             (SELECT 1 FROM tasks t WHERE t.tenant_id = j.tenant_id AND t.id = j.id || '-end' \
              AND t.state = 'complete') ORDER BY j.tenant_id, j.id"
        );
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(job_from_row).collect()
    }

    pub(crate) async fn expired_tasks_impl(&self, now: i64) -> Result<Vec<TaskRow>> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'in_progress' AND lease_deadline < $1 \
             ORDER BY lease_deadline, tenant_id, id"
        );
        let rows = sqlx::query(&sql).bind(now).fetch_all(&self.reader).await?;
        rows.iter().map(task_from_row).collect()
    }

    pub(crate) async fn expired_clusters_impl(&self, now: i64) -> Result<Vec<ClusterRow>> {
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE status IN ('active', 'incomplete') \
             AND expire_time > 0 AND expire_time < $1 ORDER BY expire_time, tenant_id, id"
        );
        let rows = sqlx::query(&sql).bind(now).fetch_all(&self.reader).await?;
        rows.iter().map(cluster_from_row).collect()
    }

    pub(crate) async fn queue_counts_impl(&self) -> Result<BTreeMap<String, (u64, u64)>> {
        let rows = sqlx::query(
            "SELECT tenant_id, state, COUNT(*) AS n FROM tasks \
             WHERE state IN ('queued', 'in_progress') GROUP BY tenant_id, state",
        )
        .fetch_all(&self.reader)
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
        let row = sqlx::query(
            "SELECT \
             (SELECT COUNT(*) FROM clusters WHERE tenant_id = $1 AND status <> 'terminated') AS c, \
             (SELECT COUNT(*) FROM nodes n JOIN clusters k \
              ON k.tenant_id = n.tenant_id AND k.id = n.cluster_id \
              WHERE n.tenant_id = $1 AND k.status <> 'terminated') AS n",
        )
        .bind(tenant_id)
        .fetch_one(&self.reader)
        .await?;
        Ok((
            to_u64(row.try_get("c")?, "cluster count")?,
            to_u64(row.try_get("n")?, "node count")?,
        ))
    }

    pub(crate) async fn try_lead_impl(&self, name: &str) -> Result<Option<LeaderGuard>> {
        let held = match self.backend {
            Backend::Sqlite => Held::try_local(&self.scope, name),
            Backend::Postgres => {
                let conn = self.writer.acquire().await?.detach();
                Held::try_postgres(conn, name).await?
            }
        };
        Ok(held.map(|inner| LeaderGuard {
            name: name.to_string(),
            inner,
        }))
    }
}
