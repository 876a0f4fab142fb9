//! PostgreSQL: the engine's hot operations through connections of their own, with group commit.
//!
//! The same design as SQLite's writer thread (`writer.rs`): committing a change set and leasing
//! the next task are each **one message** to a writer task that owns dedicated connections (there
//! are [`WRITERS`] of them; a change set goes to its cluster's). A writer runs every message
//! waiting in its queue in **one transaction**, so that a stale change set (or one that fails
//! otherwise) fails alone while the others commit (see [`run_batch`]: savepoints only once a
//! statement failed, since each costs a round trip); it answers nobody before `COMMIT` has
//! succeeded, so a caller that got `Ok` has its write committed, and a failed `COMMIT` fails the
//! whole batch. Operations run in the order they arrived, each seeing the writes of those before
//! it in its batch (but for takes, below). One durable commit (one WAL flush) then serves a whole
//! batch instead of one per operation, and it overlaps the next batch (see [`run`]), which meets
//! the committing one's writes as any concurrent transaction does: a row lock or advisory lock
//! waits for the `COMMIT`, then reads what it committed.
//!
//! # The batch function
//!
//! Takes and the change sets of finishes (row checks of tasks, jobs and nodes, writes of tasks
//! and nodes, releases; see [`is_hot`]) run in **one statement per batch**: a PL/pgSQL function
//! (`pg_batch.sql`) that each writer connection creates as a temporary function, so every server
//! runs its own version. It takes the batch as JSON and answers each operation; its checks, locks
//! and writes are those of the statement path below, so the compare-and-swap semantics are the
//! same. Statement by statement a finish and a take were six round trips; the batch is one.
//! Within it, change sets run first and then the takes, a tenant's in one scan of the queue's
//! index: nobody has been answered, so the batch's operations are concurrent and this is an
//! order they could have arrived in. Its change sets go sorted by cluster, so that two servers'
//! batches lock two clusters' join gates in the same order (see [`run_hot`]). Their checks run one
//! change set after the other, but their task writes and releases are deferred and run together,
//! a statement for the rows and one per round of releases, wherever no later change set of the
//! batch could tell (see [`batch_ops`]).
//!
//! # The statement path
//!
//! Other change sets (creates with their quotas, cluster and job writes, deletes) run statement by
//! statement (`engine.rs`'s checks and writes: `FOR UPDATE` row locks, advisory locks for rows
//! expected not to exist, the quota lock), prepared once on this
//! connection and cached, so the compare-and-swap semantics across servers are unchanged: another
//! server's writer waits on the row locks a batch holds until it commits, then re-reads the
//! committed revision. A deadlock with another server's batch rolls back the one operation's
//! savepoint (which releases the locks it took) and runs it again; the operations before it keep
//! theirs.
//!
//! A batch holds its locks until its `COMMIT`, and a stopped server (SIGSTOP) would hold them
//! forever: the connection sets `idle_in_transaction_session_timeout`, so PostgreSQL ends such a
//! session (rolling its batch back, which nobody was answered for), and `lock_timeout`, so an
//! operation that waits too long on another session's lock fails alone instead of stalling the
//! batch. At most [`MAX_BATCH`] operations share a transaction: each writing savepoint takes a
//! subtransaction id, and PostgreSQL tracks only 64 of them per session cheaply.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::{mpsc, oneshot};

use serde::Serialize;
use serde_json::Value;

use super::engine::{apply, check_all, check_found, is_deadlock, quotas, taken_from_row, targets};
use super::to_i64;
use crate::engine::{ChangeSet, Expect, NodeRow, Quota, Taken, TaskRow, Write};
use crate::leader::fnv1a64;
use crate::{Backend, Result, StoreError};

/// At most this many operations share one transaction (see the module's text).
const MAX_BATCH: usize = 60;

/// How often an operation that lost a deadlock is run again inside its batch.
const MAX_DEADLOCK_RETRIES: usize = 16;

/// Set on the writer's connection (see the module's text).
const SESSION_SETTINGS: &str = "SET idle_in_transaction_session_timeout = '10s'; \
     SET lock_timeout = '10s'";

/// How many writer tasks a store runs. A change set goes to the writer of its cluster (see
/// [`lane`]), so the row locks of one cluster's job (its gates, its job row) are taken within one
/// writer, in order; a deadlock between writers is rolled back and run again. Since a batch is one
/// round trip (the batch function), one writer per server keeps PostgreSQL busy: on the 2-core
/// machine of BENCHMARKS.md, two writers per server were no faster with one server and 15% slower
/// with two (smaller batches, more statements per task).
const WRITERS: usize = 1;

/// The handle to the writer tasks. Cheap to clone; the tasks end (closing their connections)
/// when the last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct PgWriter {
    lanes: Vec<mpsc::UnboundedSender<Op>>,
    /// Takes go to the writers in turn.
    next: Arc<AtomicUsize>,
}

/// The writer a change set goes to: by the tenant and cluster of its first write that names one.
fn lane(cs: &ChangeSet) -> usize {
    cluster_of(cs).map_or(0, |(tenant, cluster)| {
        let h = fnv1a64(format!("{tenant}/{cluster}").as_bytes());
        (h % WRITERS as u64) as usize
    })
}

/// The tenant and cluster of a change set's first write that names one.
fn cluster_of(cs: &ChangeSet) -> Option<(&str, u64)> {
    cs.writes.iter().find_map(|w| match w {
        Write::Cluster(c) => Some((c.tenant_id.as_str(), c.id)),
        Write::Node(n) => Some((n.tenant_id.as_str(), n.cluster_id)),
        Write::Job(j) => Some((j.tenant_id.as_str(), j.cluster_id)),
        Write::Task(t) => Some((t.tenant_id.as_str(), t.cluster_id)),
        Write::DeleteNode { .. } | Write::Release { .. } | Write::AuditPending(_) => None,
    })
}

enum Job {
    Commit(ChangeSet),
    Take {
        tenant_id: String,
        owner: String,
        now: i64,
        deadline: i64,
    },
}

enum Done {
    Committed(Vec<String>),
    Taken(Option<Box<Taken>>),
}

struct Op {
    job: Job,
    reply: oneshot::Sender<Result<Done>>,
}

impl PgWriter {
    /// Starts the writer task; it connects with `opts` on its first batch (and again after a
    /// batch lost its connection).
    pub(crate) fn start(opts: AnyConnectOptions) -> PgWriter {
        let lanes = (0..WRITERS)
            .map(|_| {
                let (ops, rx) = mpsc::unbounded_channel();
                tokio::spawn(run(opts.clone(), rx));
                ops
            })
            .collect();
        PgWriter {
            lanes,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }

    async fn call(&self, lane: usize, job: Job) -> Result<Done> {
        let stopped = || StoreError::Writer("the PostgreSQL writer task has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.lanes[lane % self.lanes.len()]
            .send(Op { job, reply })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    pub(crate) async fn commit(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        match self.call(lane(cs), Job::Commit(cs.clone())).await? {
            Done::Committed(ended) => Ok(ended),
            Done::Taken(_) => unreachable!("a commit is answered with what it ended"),
        }
    }

    pub(crate) async fn take(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        let job = Job::Take {
            tenant_id: tenant_id.to_string(),
            owner: owner.to_string(),
            now,
            deadline,
        };
        let lane = self.next.fetch_add(1, Ordering::Relaxed);
        match self.call(lane, job).await? {
            Done::Taken(taken) => Ok(taken.map(|t| *t)),
            Done::Committed(_) => unreachable!("a take is answered with its task"),
        }
    }
}

/// The writer task: runs batches until every handle is gone.
///
/// A batch's `COMMIT` (a WAL flush: hundreds of microseconds on a disk) runs while the next
/// batch's statements run on a second connection, so the flush does not stall the queue. At most
/// one batch is committing at a time, and it runs no statement any more, so the running batch may
/// wait on its locks but never the other way round: the two cannot deadlock.
async fn run(opts: AnyConnectOptions, mut ops: mpsc::UnboundedReceiver<Op>) {
    let mut idle: Option<AnyConnection> = None;
    let mut committing: Option<Committing> = None;
    while let Some(first) = ops.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let reused = idle.is_some();
        let conn = match idle.take() {
            Some(c) => Ok(c),
            None => connect(&opts).await,
        };
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "PostgreSQL writer: cannot connect");
                fail_all(batch, &e);
                continue;
            }
        };
        let mut results = Vec::with_capacity(batch.len());
        let mut ran = run_batch(&mut conn, &batch, &mut results).await;
        if reused && ran.as_ref().is_err_and(lost_connection) {
            // The connection died while idle (the database restarted or failed over). Nothing
            // of the batch ran and nobody was answered: run it once more on a fresh one.
            tracing::warn!("PostgreSQL writer: the connection was lost; connecting again");
            results.clear();
            ran = match connect(&opts).await {
                Ok(c) => {
                    conn = c;
                    run_batch(&mut conn, &batch, &mut results).await
                }
                Err(e) => Err(e),
            };
        }
        // The batch before this one has committed (or failed) before this one commits.
        if let Some(previous) = committing.take() {
            idle = previous.await.ok().flatten();
        }
        match ran {
            Ok(()) => committing = Some(tokio::spawn(commit(conn, batch, results))),
            Err(e) => {
                // The session's state is unknown: dropping the connection ends its transaction.
                fail_batch(batch, &e);
            }
        }
    }
    if let Some(last) = committing {
        let _ = last.await;
    }
}

/// Whether a batch failed because its connection was gone.
fn lost_connection(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(e) if super::connection_lost(e))
}

/// A batch's `COMMIT` in flight; it hands its connection back when that can be used again.
type Committing = tokio::task::JoinHandle<Option<AnyConnection>>;

/// Commits a batch whose statements have run, then answers its operations.
async fn commit(
    mut conn: AnyConnection,
    batch: Vec<Op>,
    results: Vec<Result<Done>>,
) -> Option<AnyConnection> {
    if let Err(e) = conn.execute(sqlx::raw_sql("COMMIT")).await {
        fail_batch(batch, &e.into());
        return None;
    }
    for (op, r) in batch.into_iter().zip(results) {
        // A caller that has gone away (its request was cancelled) is not an error.
        let _ = op.reply.send(r);
    }
    Some(conn)
}

fn fail_batch(batch: Vec<Op>, e: &StoreError) {
    tracing::error!(error = %e, "PostgreSQL writer: the batch is rolled back");
    fail_all(batch, e);
}

async fn connect(opts: &AnyConnectOptions) -> Result<AnyConnection> {
    let mut c = AnyConnection::connect_with(opts).await?;
    c.execute(sqlx::raw_sql(SESSION_SETTINGS)).await?;
    c.execute(sqlx::raw_sql(BATCH_FUNCTION)).await?;
    Ok(c)
}

/// Answers every operation of a batch with its failure (a full disk stays one).
fn fail_all(batch: Vec<Op>, e: &StoreError) {
    for op in batch {
        let e = match e {
            StoreError::Full(m) => StoreError::Full(m.clone()),
            e => StoreError::Writer(format!("PostgreSQL writer batch failed: {e}")),
        };
        let _ = op.reply.send(Err(e));
    }
}

/// Runs `batch`'s statements in one transaction, left open for [`commit`], pushing each
/// operation's result to `results`. `Err` when the transaction itself failed (then nothing of it
/// will be committed).
///
/// First without savepoints (a round trip less per operation): an operation that fails only by
/// a stale expectation or a quota has written nothing (its checks run before its writes) and
/// leaves the transaction usable. Any other failure (a statement error, which aborts a
/// PostgreSQL transaction, or a deadlock) rolls the whole batch back, and it runs again with a
/// savepoint per operation. Nobody has been answered yet, so running it again is invisible.
async fn run_batch(
    conn: &mut AnyConnection,
    batch: &[Op],
    results: &mut Vec<Result<Done>>,
) -> Result<()> {
    conn.execute(sqlx::raw_sql("BEGIN")).await?;
    let mut at = 0;
    while at < batch.len() {
        // The batch function runs the operations it can in one round trip; the others run
        // statement by statement.
        let hot = batch[at..].iter().take_while(|op| is_hot(&op.job)).count();
        let ran = if hot > 0 {
            run_hot(
                conn,
                &batch[at..at + hot]
                    .iter()
                    .map(|op| &op.job)
                    .collect::<Vec<_>>(),
                Defer::Writes,
            )
            .await
        } else {
            run_op(conn, &batch[at].job).await.map(|r| vec![Ok(r)])
        };
        let ran = ran.or_else(|e| match e {
            StoreError::Stale(_) | StoreError::QuotaExceeded(_) => Ok(vec![Err(e)]),
            e => Err(e),
        });
        match ran {
            Ok(answers) => results.extend(answers),
            Err(e) => {
                tracing::debug!(error = %e, "PostgreSQL writer: running the batch again with savepoints");
                conn.execute(sqlx::raw_sql("ROLLBACK")).await?;
                results.clear();
                return run_batch_carefully(conn, batch, results).await;
            }
        }
        at += hot.max(1);
    }
    Ok(())
}

/// [`run_batch`] with each operation inside a savepoint, so that a failing one rolls back alone.
async fn run_batch_carefully(
    conn: &mut AnyConnection,
    batch: &[Op],
    results: &mut Vec<Result<Done>>,
) -> Result<()> {
    // One round trip opens the transaction and the first savepoint; the next ones each release
    // the savepoint before and open their own.
    let mut open = "BEGIN; SAVEPOINT op";
    for op in batch {
        let mut tries = 0;
        let r = loop {
            conn.execute(sqlx::raw_sql(open)).await?;
            open = "RELEASE SAVEPOINT op; SAVEPOINT op";
            let r = run_op(conn, &op.job).await;
            if r.is_err() {
                // Undoes the operation's writes and releases the locks it took.
                conn.execute(sqlx::raw_sql("ROLLBACK TO SAVEPOINT op"))
                    .await?;
            }
            match r {
                Err(e) if is_deadlock(&e) && tries < MAX_DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "operation lost a deadlock, running it again");
                }
                other => break other,
            }
        };
        results.push(r);
    }
    Ok(())
}

async fn run_op(conn: &mut AnyConnection, job: &Job) -> Result<Done> {
    match job {
        Job::Commit(cs) if !is_hot(job) => {
            let quotas: Vec<&Quota> = quotas(cs).collect();
            check_all(conn, Backend::Postgres, &quotas, &targets(cs)).await?;
            Ok(Done::Committed(write_all(conn, &cs.writes).await?))
        }
        _ => {
            // One by one, each write in its turn: exactly the statement path's semantics.
            let mut answers = run_hot(conn, &[job], Defer::Nothing).await?;
            answers.pop().unwrap_or_else(|| Err(no_answer()))
        }
    }
}

// The batch function (`pg_batch.sql`): a batch's takes and the change sets of finishes in one
// round trip, instead of one per check, write and release.

/// Creates `pg_temp.weft_batch` and its helper `pg_temp.weft_write_tasks` on a writer's
/// connection.
const BATCH_FUNCTION: &str = include_str!("pg_batch.sql");

/// Whether the batch function can run `job`: a take, or a change set that only checks rows of
/// tasks, jobs and nodes that exist and writes tasks, nodes and releases. Quotas, clusters and
/// rows expected not to exist (their advisory locks) run statement by statement.
fn is_hot(job: &Job) -> bool {
    let Job::Commit(cs) = job else {
        return true;
    };
    cs.expect.iter().all(|e| {
        matches!(e, Expect::TaskRev { rev, .. } | Expect::JobRev { rev, .. }
            | Expect::NodeRev { rev, .. } if *rev > 0)
    }) && cs.writes.iter().all(is_hot_write)
}

/// Runs `jobs` (each [`is_hot`]) through the batch function in the open transaction. `Err` when
/// the statement failed (the transaction is then aborted); else one answer per job, `Stale` for a
/// change set whose expectation failed (it wrote nothing).
///
/// The change sets go to the function sorted by tenant and cluster: the rows several of them lock
/// (a join gate that counts the nodes of a cluster down) are then locked in the same order by every
/// batch, also by another server's, so two batches do not deadlock on two clusters' gates (which
/// PostgreSQL resolves only after its `deadlock_timeout`, a second by default). Nobody has been
/// answered, so the operations of a batch are concurrent and this is an order they could have
/// arrived in.
async fn run_hot(
    conn: &mut AnyConnection,
    jobs: &[&Job],
    defer: Defer,
) -> Result<Vec<Result<Done>>> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| match jobs[i] {
        Job::Commit(cs) => cluster_of(cs),
        Job::Take { .. } => None,
    });
    let ordered: Vec<&Job> = order.iter().map(|&i| jobs[i]).collect();
    let (ops, at) = batch_ops(&ordered, defer);
    let mut answers = call_batch(conn, &ops).await?;
    let mut answered: Vec<Option<Value>> = vec![None; jobs.len()];
    for (i, op) in order.into_iter().zip(at) {
        answered[i] = Some(std::mem::take(&mut answers[op]));
    }
    Ok(jobs
        .iter()
        .zip(answered)
        .map(|(j, a)| hot_answer(j, a.ok_or_else(no_answer)?))
        .collect())
}

/// Calls the batch function with `ops`; its answers, one per operation.
async fn call_batch(conn: &mut AnyConnection, ops: &[OpJson<'_>]) -> Result<Vec<Value>> {
    let n = ops.len();
    let ops = serde_json::to_string(ops)
        .map_err(|e| StoreError::Corrupt(format!("batch function operations: {e}")))?;
    let answers: String = sqlx::query_scalar("SELECT pg_temp.weft_batch($1::jsonb)::text")
        .bind(ops)
        .fetch_one(&mut *conn)
        .await?;
    let answers: Vec<Value> = serde_json::from_str(&answers)
        .map_err(|e| StoreError::Corrupt(format!("batch function answer: {e}")))?;
    if answers.len() != n {
        return Err(no_answer());
    }
    Ok(answers)
}

fn no_answer() -> StoreError {
    StoreError::Corrupt("the batch function did not answer every operation".into())
}

/// `jobs` as the batch function's operations, and the index of each job's operation.
///
/// The task writes and releases of change sets are deferred to a `flush` operation, which writes
/// a window of change sets' rows in one statement and counts their releases down in one statement
/// per round, instead of a statement per row and release. The function still checks each change
/// set in its turn, so a window ends (is flushed) before a change set that would see what the
/// window writes: one that checks or writes a task row the window writes or releases, or releases
/// one it writes. Releases of the same row by several change sets add up. A change set that
/// writes a task twice, or writes and releases one, writes in its own order, at once (a window
/// ends before it). What a cascade through a completed gate reaches is known only when it runs:
/// the flush's `guard` lists the tasks that each change set of the window checked, wrote or
/// released, and a cascade that reaches one touched after the releasing change set raises (the caller then runs
/// the batch one operation at a time, with [`Defer::Nothing`]: each write in its turn). So does a
/// row released more often than it waits, where one by one the extra releases count nothing.
///
/// Node writes are not deferred: they run in their change set's turn, so a later change set's
/// check of a node row sees them as it would one by one.
fn batch_ops<'a>(jobs: &[&'a Job], defer: Defer) -> (Vec<OpJson<'a>>, Vec<usize>) {
    let mut ops = Vec::with_capacity(jobs.len() + 1);
    let mut at = Vec::with_capacity(jobs.len());
    let mut window = Window::default();
    for job in jobs {
        let Job::Commit(cs) = job else {
            at.push(ops.len());
            ops.push(hot_op(job));
            continue;
        };
        let tasks = rows_of(cs);
        let in_place = defer == Defer::Nothing || tasks.in_place();
        if in_place || window.meets(&tasks) {
            ops.extend(window.flush());
        }
        let k = ops.len();
        at.push(k);
        if in_place {
            ops.push(hot_op(job));
            continue;
        }
        let immediate = cs.writes.iter().filter(|w| matches!(w, Write::Node(_)));
        ops.push(OpJson::Change {
            expect: expect_json(cs),
            writes: hot_writes(immediate),
        });
        window.defer(k, cs, &tasks);
    }
    ops.extend(window.flush());
    (ops, at)
}

/// Whether [`batch_ops`] defers the task writes and releases of change sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defer {
    Writes,
    Nothing,
}

/// The task rows a change set checks, writes and releases, each as (tenant, id).
struct TaskRows<'a> {
    checked: Vec<(&'a str, &'a str)>,
    written: Vec<(&'a str, &'a str)>,
    released: Vec<(&'a str, &'a str)>,
}

fn rows_of(cs: &ChangeSet) -> TaskRows<'_> {
    let checked = cs
        .expect
        .iter()
        .filter_map(|e| match e {
            Expect::TaskRev { tenant_id, id, .. } => Some((tenant_id.as_str(), id.as_str())),
            _ => None,
        })
        .collect();
    let mut written = Vec::new();
    let mut released = Vec::new();
    for w in &cs.writes {
        match w {
            Write::Task(t) => written.push((t.tenant_id.as_str(), t.id.as_str())),
            Write::Release { tenant_id, ids, .. } => {
                released.extend(ids.iter().map(|id| (tenant_id.as_str(), id.as_str())))
            }
            _ => {}
        }
    }
    TaskRows {
        checked,
        written,
        released,
    }
}

impl TaskRows<'_> {
    /// Whether the change set's writes must run in their own order: it writes a task twice, or
    /// writes and releases one.
    fn in_place(&self) -> bool {
        let mut seen = HashSet::new();
        self.written.iter().any(|r| !seen.insert(*r))
            || self.released.iter().any(|r| seen.contains(r))
    }
}

/// The deferred writes of a window of change sets (see [`batch_ops`]).
#[derive(Default)]
struct Window<'a> {
    tasks: Vec<TaskJson<'a>>,
    releases: Vec<DeferredRelease<'a>>,
    guard: Vec<(usize, String)>,
    /// Task rows the window writes or releases.
    pending: HashSet<(&'a str, &'a str)>,
    /// Task rows the window writes.
    written: HashSet<(&'a str, &'a str)>,
}

impl<'a> Window<'a> {
    /// Whether a change set with these rows would see the window's writes.
    fn meets(&self, rows: &TaskRows<'_>) -> bool {
        rows.checked
            .iter()
            .chain(&rows.written)
            .any(|r| self.pending.contains(r))
            || rows.released.iter().any(|r| self.written.contains(r))
    }

    /// Defers the task writes and releases of change set `cs`, the batch's operation `k`.
    fn defer(&mut self, k: usize, cs: &'a ChangeSet, rows: &TaskRows<'a>) {
        for w in &cs.writes {
            match w {
                Write::Task(t) => self.tasks.push(TaskJson::of(t, Some(k))),
                Write::Release {
                    tenant_id,
                    ids,
                    queue,
                    now,
                } => self.releases.extend(ids.iter().map(|id| DeferredRelease {
                    k,
                    tenant_id,
                    id,
                    queue: *queue,
                    now: *now,
                })),
                _ => {}
            }
        }
        for (tenant, id) in rows
            .checked
            .iter()
            .chain(&rows.written)
            .chain(&rows.released)
        {
            self.guard.push((k, format!("{tenant}/{id}")));
        }
        self.pending
            .extend(rows.written.iter().chain(&rows.released));
        self.written.extend(&rows.written);
    }

    /// The flush operation of the window's writes, if any, and a new window.
    fn flush(&mut self) -> Option<OpJson<'a>> {
        if self.tasks.is_empty() && self.releases.is_empty() {
            return None;
        }
        let w = std::mem::take(self);
        Some(OpJson::Flush {
            flush: FlushJson {
                tasks: w.tasks,
                releases: w.releases,
                guard: w.guard,
            },
        })
    }
}

/// A change set's expectations as the batch function's JSON.
fn expect_json(cs: &ChangeSet) -> Vec<ExpectJson<'_>> {
    targets(cs)
        .into_iter()
        .map(|t| ExpectJson {
            t: t.table,
            tenant_id: t.tenant_id,
            id: t.id.to_string(),
            rev: t.rev,
            w: t.written,
        })
        .collect()
}

/// `job` as the batch function's JSON (see `pg_batch.sql`), its writes run at once.
fn hot_op(job: &Job) -> OpJson<'_> {
    match job {
        Job::Take {
            tenant_id,
            owner,
            now,
            deadline,
        } => OpJson::Take {
            take: TakeJson {
                tenant_id,
                owner,
                now: *now,
                deadline: *deadline,
            },
        },
        Job::Commit(cs) => OpJson::Change {
            expect: expect_json(cs),
            writes: hot_writes(&cs.writes),
        },
    }
}

/// `writes` (tasks, nodes and releases) as the batch function's writes: consecutive task writes
/// become one `tasks` write (one statement) of at most [`TASKS_PER_WRITE`] rows with distinct ids.
fn hot_writes<'a>(writes: impl IntoIterator<Item = &'a Write>) -> Vec<WriteJson<'a>> {
    let mut out = Vec::new();
    let mut tasks = Vec::new();
    let mut ids: HashSet<&str> = HashSet::new();
    let flush =
        |out: &mut Vec<WriteJson<'a>>, tasks: &mut Vec<TaskJson<'a>>, ids: &mut HashSet<&str>| {
            if !tasks.is_empty() {
                out.push(WriteJson::Tasks {
                    tasks: std::mem::take(tasks),
                });
                ids.clear();
            }
        };
    for w in writes {
        if let Write::Task(t) = w {
            if tasks.len() == TASKS_PER_WRITE || ids.contains(t.id.as_str()) {
                flush(&mut out, &mut tasks, &mut ids);
            }
            ids.insert(&t.id);
            tasks.push(TaskJson::of(t, None));
            continue;
        }
        flush(&mut out, &mut tasks, &mut ids);
        match w {
            Write::Node(n) => out.push(WriteJson::Node {
                node: NodeJson::of(n),
            }),
            Write::Release {
                tenant_id,
                ids,
                queue,
                now,
            } => out.push(WriteJson::Release {
                release: ReleaseJson {
                    tenant_id,
                    ids,
                    queue: *queue,
                    now: *now,
                },
            }),
            _ => {}
        }
    }
    flush(&mut out, &mut tasks, &mut ids);
    out
}

/// At most this many task rows go in one statement of the batch function.
const TASKS_PER_WRITE: usize = 2_000;

/// Whether the batch function can run `w` (see [`hot_writes`]).
fn is_hot_write(w: &Write) -> bool {
    matches!(w, Write::Task(_) | Write::Node(_) | Write::Release { .. })
}

/// The writes of a change set checked by the statement path: its tasks, nodes and releases through
/// the batch function (a create's thousands of tasks in a few statements), [`TASKS_PER_WRITE`]
/// task rows per call, the others statement by statement. Returns the job-end gates released.
async fn write_all(conn: &mut AnyConnection, writes: &[Write]) -> Result<Vec<String>> {
    let mut ended = Vec::new();
    let mut at = 0;
    while at < writes.len() {
        let run = writes[at..].iter().take_while(|w| is_hot_write(w)).count();
        if run == 0 {
            apply(conn, &writes[at], &mut ended).await?;
            at += 1;
            continue;
        }
        for w in hot_writes(&writes[at..at + run]) {
            let op = OpJson::Change {
                expect: Vec::new(),
                writes: vec![w],
            };
            let answer = call_batch(conn, &[op]).await?.pop();
            let gates = answer
                .as_ref()
                .and_then(|a| a.get("ended"))
                .and_then(Value::as_array)
                .ok_or_else(no_answer)?;
            ended.extend(gates.iter().filter_map(|g| g.as_str().map(str::to_string)));
        }
        at += run;
    }
    Ok(ended)
}

/// One operation of the batch function, as its JSON (see `pg_batch.sql`).
#[derive(Serialize)]
#[serde(untagged)]
enum OpJson<'a> {
    Take {
        take: TakeJson<'a>,
    },
    Change {
        expect: Vec<ExpectJson<'a>>,
        writes: Vec<WriteJson<'a>>,
    },
    Flush {
        flush: FlushJson<'a>,
    },
}

#[derive(Serialize)]
struct TakeJson<'a> {
    tenant_id: &'a str,
    owner: &'a str,
    now: i64,
    deadline: i64,
}

#[derive(Serialize)]
struct ExpectJson<'a> {
    t: &'static str,
    tenant_id: &'a str,
    id: String,
    rev: i64,
    w: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WriteJson<'a> {
    Tasks { tasks: Vec<TaskJson<'a>> },
    Node { node: NodeJson<'a> },
    Release { release: ReleaseJson<'a> },
}

#[derive(Serialize)]
struct ReleaseJson<'a> {
    tenant_id: &'a str,
    ids: &'a [String],
    queue: bool,
    now: i64,
}

#[derive(Serialize)]
struct FlushJson<'a> {
    tasks: Vec<TaskJson<'a>>,
    releases: Vec<DeferredRelease<'a>>,
    /// (k, "tenant/id") of the tasks each change set of the window checked, wrote or released.
    guard: Vec<(usize, String)>,
}

/// A release deferred to a flush, by the batch's operation `k`.
#[derive(Serialize)]
struct DeferredRelease<'a> {
    k: usize,
    tenant_id: &'a str,
    id: &'a str,
    queue: bool,
    now: i64,
}

/// A task row as `jsonb_populate_record` reads it (the columns `statements` writes), and when
/// deferred to a flush, the batch's operation `k` that wrote it (a key the function ignores there).
#[derive(Serialize)]
struct TaskJson<'a> {
    tenant_id: &'a str,
    id: &'a str,
    cluster_id: i64,
    job_id: &'a str,
    node_id: &'a str,
    action: &'a str,
    service: &'a str,
    state: &'static str,
    attempts: u32,
    deps_remaining: u32,
    successors: String,
    lease_owner: Option<&'a str>,
    lease_deadline: i64,
    queued_at: i64,
    started_at: i64,
    rev: i64,
    body: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    k: Option<usize>,
}

impl<'a> TaskJson<'a> {
    fn of(t: &'a TaskRow, k: Option<usize>) -> Self {
        TaskJson {
            tenant_id: &t.tenant_id,
            id: &t.id,
            cluster_id: to_i64(t.cluster_id),
            job_id: &t.job_id,
            node_id: &t.node_id,
            action: &t.action,
            service: &t.service,
            state: t.state.as_str(),
            attempts: t.attempts,
            deps_remaining: t.deps_remaining,
            successors: serde_json::to_string(&t.successors)
                .expect("a list of strings always serializes"),
            lease_owner: t.lease_owner.as_deref(),
            lease_deadline: t.lease_deadline,
            queued_at: t.queued_at,
            started_at: t.started_at,
            rev: 1,
            body: t.body.to_string(),
            k,
        }
    }
}

/// A node row as `jsonb_populate_record` reads it.
#[derive(Serialize)]
struct NodeJson<'a> {
    tenant_id: &'a str,
    id: &'a str,
    cluster_id: i64,
    nodenum: i64,
    rev: i64,
    body: String,
}

impl<'a> NodeJson<'a> {
    fn of(n: &'a NodeRow) -> Self {
        NodeJson {
            tenant_id: &n.tenant_id,
            id: &n.id,
            cluster_id: to_i64(n.cluster_id),
            nodenum: to_i64(n.nodenum),
            rev: 1,
            body: n.body.to_string(),
        }
    }
}

/// The batch function's answer `a` to `job`.
fn hot_answer(job: &Job, a: Value) -> Result<Done> {
    let bad = || StoreError::Corrupt(format!("batch function answer: {a}"));
    match job {
        Job::Take { .. } => match a.get("taken") {
            Some(Value::Null) => Ok(Done::Taken(None)),
            Some(Value::Object(row)) => Ok(Done::Taken(Some(Box::new(taken_from_row(row)?)))),
            _ => Err(bad()),
        },
        Job::Commit(cs) => {
            if let Some(i) = a.get("stale").and_then(Value::as_u64) {
                let targets = targets(cs);
                let t = targets.get(i as usize).ok_or_else(bad)?;
                check_found(t, a.get("found").and_then(Value::as_i64))?;
                return Err(bad());
            }
            let ended = a.get("ended").and_then(Value::as_array).ok_or_else(bad)?;
            let ended = ended
                .iter()
                .map(|g| g.as_str().map(str::to_string).ok_or_else(bad))
                .collect::<Result<_>>()?;
            Ok(Done::Committed(ended))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::TaskState;
    use serde_json::json;

    fn task(id: &str) -> TaskRow {
        TaskRow {
            tenant_id: "t".into(),
            cluster_id: 1,
            job_id: "j".into(),
            id: id.into(),
            node_id: "n".into(),
            action: "INSTALL".into(),
            service: "s".into(),
            state: TaskState::Complete,
            attempts: 1,
            deps_remaining: 0,
            successors: Vec::new(),
            lease_owner: None,
            lease_deadline: 0,
            queued_at: 0,
            started_at: 0,
            rev: 3,
            body: json!({}),
        }
    }

    /// A finish: checks and writes `id`, releases `next`.
    fn finish(id: &str, next: &[&str]) -> Job {
        let mut cs = ChangeSet::new();
        cs.expect(Expect::TaskRev {
            tenant_id: "t".into(),
            id: id.into(),
            rev: 3,
        });
        cs.write(Write::Task(task(id)));
        cs.write(Write::Release {
            tenant_id: "t".into(),
            ids: next.iter().map(|s| s.to_string()).collect(),
            queue: true,
            now: 7,
        });
        Job::Commit(cs)
    }

    fn ops(jobs: &[Job], defer: Defer) -> (Vec<Value>, Vec<usize>) {
        let jobs: Vec<&Job> = jobs.iter().collect();
        let (ops, at) = batch_ops(&jobs, defer);
        let ops = ops
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect();
        (ops, at)
    }

    #[test]
    fn finishes_that_touch_different_tasks_share_one_flush() {
        let (ops, at) = ops(&[finish("a", &["g"]), finish("b", &["g"])], Defer::Writes);
        assert_eq!(at, [0, 1]);
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0]["writes"], json!([]), "deferred, not run in place");
        let flush = &ops[2]["flush"];
        let ks: Vec<_> = flush["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["k"].clone())
            .collect();
        assert_eq!(ks, [json!(0), json!(1)]);
        assert_eq!(
            flush["releases"],
            json!([{"k": 0, "tenant_id": "t", "id": "g", "queue": true, "now": 7},
                   {"k": 1, "tenant_id": "t", "id": "g", "queue": true, "now": 7}])
        );
        assert_eq!(
            flush["guard"],
            json!([
                [0, "t/a"],
                [0, "t/a"],
                [0, "t/g"],
                [1, "t/b"],
                [1, "t/b"],
                [1, "t/g"]
            ])
        );
    }

    #[test]
    fn a_window_is_flushed_before_a_change_set_that_would_see_its_writes() {
        // b is released by the first finish and then checked by the second.
        let (ops, at) = ops(&[finish("a", &["b"]), finish("b", &[])], Defer::Writes);
        assert_eq!(at, [0, 2]);
        assert!(ops[1].get("flush").is_some());
        assert!(ops[3].get("flush").is_some());
        assert_eq!(ops.len(), 4);
    }

    #[test]
    fn a_change_set_that_writes_and_releases_one_task_writes_in_place() {
        let (ops, at) = ops(&[finish("a", &["c"]), finish("b", &["b"])], Defer::Writes);
        assert_eq!(at, [0, 2]);
        assert!(ops[1].get("flush").is_some(), "the window ends before it");
        assert_eq!(
            ops[2]["writes"].as_array().unwrap().len(),
            2,
            "its own writes, in order"
        );
        assert_eq!(ops.len(), 3);
    }

    #[test]
    fn one_by_one_nothing_is_deferred() {
        let (ops, at) = ops(&[finish("a", &["g"]), finish("b", &["g"])], Defer::Nothing);
        assert_eq!(at, [0, 1]);
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[1]["writes"].as_array().unwrap().len(), 2);
    }
}
