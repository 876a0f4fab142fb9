//! SQLite: the engine's hot operations on a connection thread of their own, with group commit.
//!
//! SQLite runs one writer at a time anyway. sqlx runs each connection on a worker thread of its
//! own and hands every statement to it and back, so a task's take and finish (about eight
//! statements) cost sixteen thread switches, which was most of the server's time under load. Here
//! the engine's hot operations (committing a change set, leasing the next task, reading a task
//! with its job) are each **one message** to a dedicated thread that owns a rusqlite connection to
//! the same database file.
//!
//! The thread runs every message waiting in its queue in **one transaction** (`BEGIN IMMEDIATE`
//! ... `COMMIT`, one WAL commit for the lot), each change set inside a savepoint so that a stale
//! or failing one rolls back alone, and answers nobody before the `COMMIT` has succeeded: a caller
//! that got `Ok` has its write committed, and a failed `COMMIT` fails the whole batch. Operations
//! run in the order they arrived, so each sees the writes of those before it, exactly as if they
//! had committed one by one.
//!
//! Every other write (catalog, tenants, host pools, ...) stays on sqlx's writer connection. The two
//! connections serialize through SQLite's write lock; whichever waits does so on the busy timeout.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{CachedStatement, Connection, OpenFlags};
use tokio::sync::oneshot;

use super::engine::{
    check_found, check_sql, job_of_task, quotas, released, statements, take_sql, taken_from_row,
    targets, task_from_row, Id, Param, Target, COST_SQLITE, QUOTA_COUNTS, RELEASE_SQL,
    TASK_WITH_JOB_SQL,
};
use crate::engine::{ChangeSet, Quota, Taken, Write};
use crate::{Backend, Result, StoreError};

/// At most this many operations share one transaction.
const MAX_BATCH: usize = 256;

/// The `$n` placeholder names, so that binding allocates nothing.
const PLACEHOLDERS: [&str; 16] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12", "$13", "$14", "$15",
    "$16",
];

/// The handle to the writer thread. Cheap to clone; the thread ends (closing its connection) when
/// the last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct SqliteWriter {
    ops: mpsc::Sender<Op>,
}

use super::TaskWithJob;

/// One operation: run on the connection inside the batch's transaction (`Err` when `BEGIN`
/// failed or the transaction was lost: then it answers that error), it returns how to answer
/// once the batch has committed (`Some(error)` when it did not), and whether it failed for a
/// full disk.
type Op = Box<dyn FnOnce(std::result::Result<&Connection, &StoreError>) -> (Answer, bool) + Send>;
type Answer = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// A change set turned into what the thread runs, in order: its expectations, then its writes'
/// statements. Everything is serialized by the caller, off the writer thread.
enum Step {
    Quota(Quota),
    Check {
        table: &'static str,
        what: &'static str,
        tenant_id: String,
        id: OwnedId,
        rev: i64,
    },
    Exec {
        sql: &'static str,
        params: Vec<Param>,
    },
    Release {
        tenant_id: String,
        ids: Vec<String>,
        queue: bool,
        now: i64,
    },
}

enum OwnedId {
    Num(u64),
    Text(String),
}

fn steps(cs: &ChangeSet) -> impl Iterator<Item = Step> + '_ {
    let quotas = quotas(cs).cloned().map(Step::Quota);
    let checks = targets(cs).into_iter().map(|t| Step::Check {
        table: t.table,
        what: t.what,
        tenant_id: t.tenant_id.to_string(),
        id: match t.id {
            Id::Num(n) => OwnedId::Num(n),
            Id::Text(s) => OwnedId::Text(s.to_string()),
        },
        rev: t.rev,
    });
    let writes = cs.writes.iter().flat_map(|w| match w {
        Write::Release {
            tenant_id,
            ids,
            queue,
            now,
        } => vec![Step::Release {
            tenant_id: tenant_id.clone(),
            ids: ids.clone(),
            queue: *queue,
            now: *now,
        }],
        other => statements(other)
            .into_iter()
            .map(|(sql, params)| Step::Exec { sql, params })
            .collect(),
    });
    quotas.chain(checks).chain(writes)
}

impl SqliteWriter {
    /// Opens `path` (already created and migrated) and starts the thread.
    pub(crate) fn start(path: &Path) -> Result<SqliteWriter> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; \
             PRAGMA wal_autocheckpoint = 0;",
        )?;
        conn.set_prepared_statement_cache_capacity(64);
        // Checkpoints run on a thread of their own, so that the writer thread, which every
        // engine write waits for, never copies the WAL back into the database itself.
        let checkpointer = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        checkpointer.busy_timeout(Duration::from_secs(5))?;
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("weft-sqlite-checkpoint".into())
            .spawn(move || checkpoints(checkpointer, stopped))
            .map_err(|e| StoreError::Sqlite(format!("starting the checkpoint thread: {e}")))?;
        let (ops, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("weft-sqlite-writer".into())
            .spawn(move || run(conn, rx, stop))
            .map_err(|e| StoreError::Sqlite(format!("starting the writer thread: {e}")))?;
        Ok(SqliteWriter { ops })
    }

    /// Runs `f` on the writer thread and answers its result once its batch has committed.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let stopped = || StoreError::Sqlite("the SQLite writer thread has stopped".into());
        let (reply, answer) = oneshot::channel();
        let op: Op = Box::new(move |conn| {
            let r = conn.map_err(again).and_then(f);
            let full = matches!(r, Err(StoreError::Full(_)));
            let answer: Answer = Box::new(move |failed: Option<&StoreError>| {
                let r = match failed {
                    Some(e) => Err(again(e)),
                    None => r,
                };
                // A caller that has gone away (its request was cancelled) is not an error.
                let _ = reply.send(r);
            });
            (answer, full)
        });
        self.ops.send(op).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    pub(crate) async fn commit(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        let steps: Vec<Step> = steps(cs).collect();
        self.call(move |conn| in_savepoint(conn, steps)).await
    }

    /// [`SqliteWriter::commit`] of a change set given up: its steps are made on the thread, one
    /// write at a time, instead of all at once beforehand.
    pub(crate) async fn commit_owned(&self, cs: ChangeSet) -> Result<Vec<String>> {
        self.call(move |conn| in_savepoint(conn, steps(&cs))).await
    }

    pub(crate) async fn take(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        let (tenant_id, owner) = (tenant_id.to_string(), owner.to_string());
        self.call(move |conn| take(conn, &tenant_id, &owner, now, deadline))
            .await
    }

    /// Runs `sql` (a write that returns at most one integer) on the writer thread, in its turn.
    pub(crate) async fn scalar(
        &self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Option<i64>> {
        self.call(move |conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            bind(&mut stmt, &params)?;
            let mut rows = stmt.raw_query();
            Ok(match rows.next()? {
                Some(row) => Some(row.get::<_, i64>(0)?),
                None => None,
            })
        })
        .await
    }

    pub(crate) async fn task_with_job(&self, tenant_id: &str, id: &str) -> Result<TaskWithJob> {
        let (tenant_id, id) = (tenant_id.to_string(), id.to_string());
        self.call(move |conn| task_with_job(conn, &tenant_id, &id))
            .await
    }
}

/// How often the checkpoint thread copies the WAL into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// WAL frames (pages of 4 KiB) after which the checkpoint thread makes the next write start the
/// WAL over (about 32 MiB).
const RESTART_AT_FRAMES: i64 = 8192;

/// The checkpoint thread: a passive checkpoint (it waits for no reader or writer) every
/// [`CHECKPOINT_EVERY`], until the writer thread ends. A passive checkpoint never lets the WAL
/// start over while the writer thread writes without pause (new frames arrive while it copies,
/// and readers hold snapshots), so under load the WAL grew without bound (3.3 GB in a
/// 10,000-node create), and every page lookup and append paid for it. Once it holds
/// [`RESTART_AT_FRAMES`], a `RESTART` checkpoint takes the write lock between two batches,
/// copies the few frames the passive ones left, and waits for readers, so that the next write
/// reuses the WAL from its start. sqlx's connections keep SQLite's automatic checkpoint as a
/// backstop.
fn checkpoints(conn: Connection, stop: mpsc::Receiver<()>) {
    let frames = |mode: &str| {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            r.get::<_, i64>(1)
        })
    };
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        let done = frames("PASSIVE").and_then(|log| {
            if log >= RESTART_AT_FRAMES {
                frames("RESTART")?;
            }
            Ok(())
        });
        if let Err(e) = done {
            tracing::warn!(error = %e, "SQLite checkpoint failed");
        }
    }
}

/// The writer thread: runs batches until every handle is gone, then stops the checkpoint thread
/// (`_stop` is dropped with it).
fn run(conn: Connection, ops: mpsc::Receiver<Op>, _stop: mpsc::Sender<()>) {
    while let Ok(first) = ops.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        run_batch(&conn, batch);
    }
}

/// Runs a batch in one transaction and answers its operations. Whatever fails (a full disk, an
/// I/O error, at `BEGIN`, in an operation or at `COMMIT`), the connection leaves it outside any
/// transaction, so the next batch starts clean: the thread never needs a restart.
fn run_batch(conn: &Connection, batch: Vec<Op>) {
    if !conn.is_autocommit() {
        // Only a `ROLLBACK` that failed could have left one open: end it first.
        let _ = exec(conn, "ROLLBACK");
    }
    let begun = exec(conn, "BEGIN IMMEDIATE");
    let mut lost: Option<StoreError> = None;
    let mut answers = Vec::with_capacity(batch.len());
    for op in batch {
        let on = match (&begun, &lost) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(conn),
        };
        let (answer, full) = op(on);
        answers.push(answer);
        if begun.is_ok() && lost.is_none() && conn.is_autocommit() {
            lost = Some(lost_batch(full));
        }
    }
    let failed = match (begun, lost) {
        (Err(_), _) => None, // every answer already carries the error
        (Ok(()), Some(e)) => {
            tracing::error!(error = %e, "SQLite writer: the batch's transaction was rolled back");
            Some(e)
        }
        (Ok(()), None) => exec(conn, "COMMIT").err().map(|e| {
            tracing::error!(error = %e, "SQLite writer: COMMIT failed; the batch is rolled back");
            if !conn.is_autocommit() {
                let _ = exec(conn, "ROLLBACK");
            }
            e
        }),
    };
    for a in answers {
        a(failed.as_ref());
    }
}

/// What the operations of a batch hear when SQLite rolled its transaction back by itself (as it
/// may on a full disk or an I/O error): those before ran in it and are gone, those after did not
/// run. `full` when the operation that met it failed for a full disk.
fn lost_batch(full: bool) -> StoreError {
    let m = "SQLite rolled the transaction back after an error; nothing of it was written".into();
    if full {
        StoreError::Full(m)
    } else {
        StoreError::Sqlite(m)
    }
}

/// A batch's failure, once for each of its operations.
fn again(e: &StoreError) -> StoreError {
    match e {
        StoreError::Full(m) => StoreError::Full(m.clone()),
        StoreError::Sqlite(m) => StoreError::Sqlite(m.clone()),
        other => StoreError::Sqlite(other.to_string()),
    }
}

fn exec(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.raw_execute())
        .map(drop)
        .map_err(StoreError::from)
}

/// Runs a change set's steps inside a savepoint: all of them, or none when one fails.
fn in_savepoint(conn: &Connection, steps: impl IntoIterator<Item = Step>) -> Result<Vec<String>> {
    exec(conn, "SAVEPOINT change_set")?;
    let r = run_steps(conn, steps);
    if r.is_err() {
        if conn.is_autocommit() {
            // SQLite ended the whole transaction: no savepoint is left to roll back to.
            return r;
        }
        exec(conn, "ROLLBACK TO change_set")?;
    }
    exec(conn, "RELEASE change_set")?;
    r
}

/// A quota step: the tenant's counts (and, when the change set adds cost, its clusters' cost and
/// budget) read inside the transaction, against the quota.
fn check_quota(conn: &Connection, q: &Quota) -> Result<()> {
    let mut stmt = conn.prepare_cached(QUOTA_COUNTS)?;
    let (c, n, mc, mn) = stmt.query_row([&q.tenant_id], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, Option<i64>>(3)?,
        ))
    })?;
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let limits = mc.zip(mn).map(|(mc, mn)| (count(mc), count(mn)));
    q.check(count(c), count(n), limits)?;
    if q.add_cost_micros > 0 {
        let mut stmt = conn.prepare_cached(COST_SQLITE)?;
        let (cost, mcost) = stmt.query_row([&q.tenant_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        q.check_cost(count(cost), mcost.as_deref())?;
    }
    Ok(())
}

fn run_steps(conn: &Connection, steps: impl IntoIterator<Item = Step>) -> Result<Vec<String>> {
    let mut ended = Vec::new();
    for step in steps {
        match &step {
            Step::Quota(q) => check_quota(conn, q)?,
            Step::Check {
                table,
                what,
                tenant_id,
                id,
                rev,
            } => {
                let t = Target {
                    table,
                    what,
                    tenant_id,
                    id: match id {
                        OwnedId::Num(n) => Id::Num(*n),
                        OwnedId::Text(s) => Id::Text(s),
                    },
                    rev: *rev,
                    written: true,
                };
                let id = match id {
                    OwnedId::Num(n) => Param::Int(i64::try_from(*n).unwrap_or(i64::MAX)),
                    OwnedId::Text(s) => Param::Text(s.clone()),
                };
                let mut stmt = conn.prepare_cached(&check_sql(&t, Backend::Sqlite))?;
                bind(&mut stmt, &[Param::Text(tenant_id.clone()), id])?;
                let mut rows = stmt.raw_query();
                let found = match rows.next()? {
                    Some(row) => Some(row.get::<_, i64>(0)?),
                    None => None,
                };
                check_found(&t, found)?;
            }
            Step::Exec { sql, params } => {
                let mut stmt = conn.prepare_cached(sql)?;
                bind(&mut stmt, params)?;
                stmt.raw_execute()?;
            }
            Step::Release {
                tenant_id,
                ids,
                queue,
                now,
            } => {
                let mut todo = ids.clone();
                let mut stmt = conn.prepare_cached(&RELEASE_SQL)?;
                while let Some(id) = todo.pop() {
                    bind(
                        &mut stmt,
                        &[
                            Param::Text(tenant_id.clone()),
                            Param::Text(id.clone()),
                            Param::Int(i64::from(*queue)),
                            Param::Int(*now),
                        ],
                    )?;
                    let mut rows = stmt.raw_query();
                    if let Some(row) = rows.next()? {
                        released(id, row, &mut todo, &mut ended)?;
                    }
                }
            }
        }
    }
    Ok(ended)
}

fn take(
    conn: &Connection,
    tenant_id: &str,
    owner: &str,
    now: i64,
    deadline: i64,
) -> Result<Option<Taken>> {
    let mut stmt = conn.prepare_cached(&take_sql())?;
    bind(
        &mut stmt,
        &[
            tenant_id.into(),
            owner.into(),
            Param::Int(deadline),
            Param::Int(now),
        ],
    )?;
    let mut rows = stmt.raw_query();
    let taken = match rows.next()? {
        Some(row) => Some(taken_from_row(row)?),
        None => None,
    };
    Ok(taken)
}

fn task_with_job(conn: &Connection, tenant_id: &str, id: &str) -> Result<TaskWithJob> {
    let mut stmt = conn.prepare_cached(&TASK_WITH_JOB_SQL)?;
    bind(&mut stmt, &[tenant_id.into(), id.into()])?;
    let mut rows = stmt.raw_query();
    let found = match rows.next()? {
        Some(row) => Some((task_from_row(row)?, job_of_task(row)?)),
        None => None,
    };
    Ok(found)
}

/// Binds `params` to `$1`, `$2`, ... (a statement may use a name twice, or out of order).
fn bind(stmt: &mut CachedStatement<'_>, params: &[Param]) -> Result<()> {
    for (name, p) in PLACEHOLDERS.iter().zip(params) {
        let Some(i) = stmt.parameter_index(name)? else {
            continue;
        };
        match p {
            Param::Int(v) => stmt.raw_bind_parameter(i, v)?,
            Param::Text(s) => stmt.raw_bind_parameter(i, s)?,
            Param::Null => stmt.raw_bind_parameter(i, rusqlite::types::Null)?,
        }
    }
    Ok(())
}

/// A read on the reader thread.
type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// SQLite (a file): a connection on a thread of its own for the engine's frequent reads (the
/// payload cache's refresh, a finishing task's node), one message per read. It runs no
/// transaction, so each read sees what has been committed, and nothing else.
#[derive(Debug, Clone)]
pub(crate) struct SqliteReader {
    jobs: mpsc::Sender<ReadJob>,
}

impl SqliteReader {
    pub(crate) fn start(path: &Path) -> Result<SqliteReader> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(64);
        let (jobs, rx) = mpsc::channel::<ReadJob>();
        std::thread::Builder::new()
            .name("weft-sqlite-reader".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&conn);
                }
            })
            .map_err(|e| StoreError::Sqlite(format!("starting the reader thread: {e}")))?;
        Ok(SqliteReader { jobs })
    }

    /// Runs `sql` with `params` and maps every row with `f`.
    pub(crate) async fn query<T: Send + 'static>(
        &self,
        sql: String,
        params: Vec<Param>,
        f: impl Fn(&rusqlite::Row<'_>) -> Result<T> + Send + 'static,
    ) -> Result<Vec<T>> {
        let (reply, answer) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            // A reader that went away meanwhile (its client gone) is not read for.
            if !reply.is_closed() {
                let _ = reply.send(query(conn, &sql, &params, f));
            }
        });
        let stopped = || StoreError::Sqlite("the SQLite reader thread has stopped".into());
        self.jobs.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn query<T>(
    conn: &Connection,
    sql: &str,
    params: &[Param],
    f: impl Fn(&rusqlite::Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    bind(&mut stmt, params)?;
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(f(row)?);
    }
    Ok(out)
}
