//! The engine part of the store contract (clusters, nodes, jobs, tasks, the queue, the janitor's
//! queries, id counters, leader election), run against every backend like `contract`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use serde_json::json;
use weft_model::{ClusterStatus, JobStatus};
use weft_store::{
    ChangeSet, ClusterRow, ClusterStamp, Expect, JobRow, Lease, NodeRow, Store, StoreError,
    TaskRow, TaskState, Write, GATE,
};

use crate::harness::{contract_tests, Ctx};

pub(crate) const A: &str = "tenant-a";
pub(crate) const B: &str = "tenant-b";

pub(crate) fn cluster(
    tenant: &str,
    id: u64,
    owner: &str,
    status: &str,
    expire_time: i64,
) -> ClusterRow {
    ClusterRow {
        tenant_id: tenant.into(),
        id,
        owner: owner.into(),
        name: format!("cluster-{id}"),
        status: weft_store::engine::cluster_status(status).expect("a cluster status"),
        create_time: 1_000 + id as i64,
        expire_time,
        latest_job: None,
        rev: 0,
        node_count: 0,
        body: json!({"clusterTemplate": {"name": "hadoop"}, "id": id}),
    }
}

pub(crate) fn node(tenant: &str, cluster_id: u64, id: &str, nodenum: u64) -> NodeRow {
    NodeRow {
        tenant_id: tenant.into(),
        cluster_id,
        id: id.into(),
        nodenum,
        rev: 0,
        body: json!({"id": id, "properties": {"hostname": format!("{id}.local")}}),
    }
}

pub(crate) fn job(tenant: &str, cluster_id: u64, id: &str, create_time: i64) -> JobRow {
    JobRow {
        tenant_id: tenant.into(),
        cluster_id,
        id: id.into(),
        action: "cluster_create".into(),
        status: JobStatus::Running,
        create_time,
        rev: 0,
        steps_done: 0,
        steps_total: 0,
        body: json!({"stages": []}),
    }
}

pub(crate) fn task(
    tenant: &str,
    job_id: &str,
    id: &str,
    state: TaskState,
    queued_at: i64,
) -> TaskRow {
    TaskRow {
        tenant_id: tenant.into(),
        cluster_id: 1,
        job_id: job_id.into(),
        id: id.into(),
        node_id: "n1".into(),
        action: "install".into(),
        service: "hdfs".into(),
        state,
        attempts: 0,
        deps_remaining: 0,
        successors: vec![format!("{id}-next")],
        lease_owner: None,
        lease_deadline: 0,
        queued_at,
        started_at: 0,
        rev: 0,
        body: json!({"taskName": "install"}),
    }
}

pub(crate) fn writes(ws: impl IntoIterator<Item = Write>) -> ChangeSet {
    ChangeSet {
        expect: vec![],
        writes: ws.into_iter().collect(),
    }
}

/// `row` with the revision the store gives it.
fn at<T: Clone>(row: &T, set: impl Fn(&mut T)) -> T {
    let mut r = row.clone();
    set(&mut r);
    r
}

// ---- rows, commit, reads -----------------------------------------------------------------------

async fn commit_writes_rows_and_bumps_revisions(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let c = cluster(A, 7, "alice", "pending", 0);
    let n = node(A, 7, "n-1", 1);
    let j = job(A, 7, "00000007-001", 50);
    let t = task(A, "00000007-001", "00000007-001-001", TaskState::Pending, 0);
    s.commit(&writes([
        Write::Cluster(c.clone()),
        Write::Node(n.clone()),
        Write::Job(j.clone()),
        Write::Task(t.clone()),
    ]))
    .await?;
    let one_node = |r: &mut ClusterRow| r.node_count = 1;
    assert_eq!(
        s.get_cluster(A, 7).await?,
        Some(at(&c, |r| {
            r.rev = 1;
            one_node(r)
        }))
    );
    assert_eq!(s.get_node(A, "n-1").await?, Some(at(&n, |r| r.rev = 1)));
    assert_eq!(
        s.get_job(A, "00000007-001").await?,
        Some(at(&j, |r| r.rev = 1))
    );
    assert_eq!(
        s.get_task(A, "00000007-001-001").await?,
        Some(at(&t, |r| r.rev = 1))
    );

    // A write ignores the row's own rev and bumps the stored one; every field is replaced.
    let c2 = at(&c, |r| {
        r.status = ClusterStatus::Active;
        r.expire_time = 99;
        r.latest_job = Some("00000007-001".into());
        r.body = json!({"changed": true});
        r.rev = 42;
        r.node_count = 42;
    });
    let t2 = at(&t, |r| {
        r.state = TaskState::Failed;
        r.attempts = 2;
        r.deps_remaining = 3;
        r.successors = vec![];
        r.lease_owner = Some("p1.w2".into());
        r.lease_deadline = 123;
        r.queued_at = 45;
        r.rev = -5;
    });
    s.commit(&writes([
        Write::Cluster(c2.clone()),
        Write::Task(t2.clone()),
        Write::Task(t2.clone()),
    ]))
    .await?;
    assert_eq!(
        s.get_cluster(A, 7).await?,
        Some(at(&c2, |r| {
            r.rev = 2;
            one_node(r)
        }))
    );
    assert_eq!(
        s.get_task(A, "00000007-001-001").await?,
        Some(at(&t2, |r| r.rev = 3)),
        "written twice in one change set: bumped twice"
    );

    // Deleting a node (twice: deletes are idempotent).
    s.commit(&writes([Write::DeleteNode {
        tenant_id: A.into(),
        id: "n-1".into(),
    }]))
    .await?;
    s.commit(&writes([Write::DeleteNode {
        tenant_id: A.into(),
        id: "n-1".into(),
    }]))
    .await?;
    assert_eq!(s.get_node(A, "n-1").await?, None);
    // An empty change set is fine.
    s.commit(&ChangeSet::new()).await?;
    Ok(())
}

async fn reads_are_ordered_and_filtered(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let mut cs = ChangeSet::new();
    for (id, owner) in [(3, "alice"), (12, "bob"), (5, "alice")] {
        cs.write(Write::Cluster(cluster(A, id, owner, "active", 0)));
    }
    cs.write(Write::Cluster(cluster(B, 4, "alice", "active", 0)));
    for (id, num) in [("n-c", 3), ("n-a", 1), ("n-b", 2)] {
        cs.write(Write::Node(node(A, 3, id, num)));
    }
    cs.write(Write::Node(node(A, 5, "n-other", 1)));
    cs.write(Write::Node(node(B, 4, "n-b-tenant", 1)));
    cs.write(Write::Job(job(A, 3, "00000003-999", 10)));
    cs.write(Write::Job(job(A, 3, "00000003-1000", 10)));
    cs.write(Write::Job(job(A, 3, "00000003-001", 5)));
    cs.write(Write::Job(job(A, 5, "00000005-001", 20)));
    for id in ["j-1000", "j-002", "j-999", "j-001"] {
        cs.write(Write::Task(task(A, "j", id, TaskState::Pending, 0)));
    }
    cs.write(Write::Task(task(
        A,
        "other",
        "other-001",
        TaskState::Pending,
        0,
    )));
    s.commit(&cs).await?;

    let ids = |v: Vec<ClusterRow>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(s.list_clusters(A, None).await?), [12, 5, 3]);
    assert_eq!(ids(s.list_clusters(A, Some("alice")).await?), [5, 3]);
    assert_eq!(
        ids(s.list_clusters(A, Some("carol")).await?),
        [] as [u64; 0]
    );
    assert_eq!(ids(s.list_clusters(B, None).await?), [4]);

    let node_ids = |v: Vec<NodeRow>| v.into_iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(node_ids(s.list_nodes(A, 3).await?), ["n-a", "n-b", "n-c"]);
    assert_eq!(
        node_ids(s.list_tenant_nodes(A).await?),
        ["n-a", "n-b", "n-c", "n-other"]
    );
    assert_eq!(node_ids(s.list_nodes(B, 3).await?), [] as [&str; 0]);
    let count = |tenant: &'static str, id: u64| async move {
        s.get_cluster(tenant, id)
            .await
            .map(|c| c.map(|c| c.node_count))
    };
    assert_eq!(count(A, 3).await?, Some(3), "kept with the cluster row");
    assert_eq!(count(A, 12).await?, Some(0));
    assert_eq!(count(B, 4).await?, Some(1), "each tenant's own");

    let job_ids = |v: Vec<JobRow>| v.into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(
        job_ids(s.list_jobs(A, 3).await?),
        ["00000003-1000", "00000003-999", "00000003-001"]
    );
    assert_eq!(job_ids(s.list_jobs(B, 3).await?), [] as [&str; 0]);

    let task_ids = |v: Vec<TaskRow>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        task_ids(s.list_tasks(A, "j").await?),
        ["j-001", "j-002", "j-999", "j-1000"]
    );

    // Other tenants see nothing by id either.
    assert_eq!(s.get_cluster(B, 3).await?, None);
    assert_eq!(s.get_node(B, "n-a").await?, None);
    assert_eq!(s.get_job(B, "00000003-001").await?, None);
    assert_eq!(s.get_task(B, "j-001").await?, None);
    Ok(())
}

async fn a_stale_expectation_writes_nothing(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let c = cluster(A, 1, "alice", "pending", 0);
    let j = job(A, 1, "00000001-001", 1);
    let t = task(A, "00000001-001", "00000001-001-001", TaskState::Pending, 0);
    s.commit(&writes([
        Write::Cluster(c.clone()),
        Write::Job(j.clone()),
        Write::Task(t.clone()),
    ]))
    .await?;
    let before = (
        s.get_cluster(A, 1).await?,
        s.get_job(A, "00000001-001").await?,
        s.get_task(A, "00000001-001-001").await?,
    );

    // Three writes, two good expectations and one stale one.
    let cs = ChangeSet {
        expect: vec![
            Expect::ClusterRev {
                tenant_id: A.into(),
                id: 1,
                rev: 1,
            },
            Expect::JobRev {
                tenant_id: A.into(),
                id: "00000001-001".into(),
                rev: 1,
            },
            Expect::TaskRev {
                tenant_id: A.into(),
                id: "00000001-001-001".into(),
                rev: 2,
            },
        ],
        writes: vec![
            Write::Cluster(at(&c, |r| r.status = ClusterStatus::Active)),
            Write::Job(at(&j, |r| r.status = JobStatus::Complete)),
            Write::Task(at(&t, |r| r.state = TaskState::Complete)),
        ],
    };
    match s.commit(&cs).await {
        Err(StoreError::Stale(msg)) => {
            ensure!(msg.contains("task 00000001-001-001"), "{msg}");
            ensure!(msg.contains("expected rev 2, found rev 1"), "{msg}");
        }
        other => anyhow::bail!("expected Stale, got {other:?}"),
    }
    let after = (
        s.get_cluster(A, 1).await?,
        s.get_job(A, "00000001-001").await?,
        s.get_task(A, "00000001-001-001").await?,
    );
    assert_eq!(after, before, "nothing of the change set was written");

    // rev 0: must not exist. The same ids in another tenant do not exist.
    let exists = ChangeSet {
        expect: vec![Expect::ClusterRev {
            tenant_id: A.into(),
            id: 1,
            rev: 0,
        }],
        writes: vec![Write::Cluster(cluster(A, 2, "alice", "pending", 0))],
    };
    assert!(
        matches!(s.commit(&exists).await, Err(StoreError::Stale(m)) if m.contains("cluster 1"))
    );
    assert_eq!(s.get_cluster(A, 2).await?, None);
    // A missing row expected at a revision is stale too.
    let missing = ChangeSet {
        expect: vec![Expect::NodeRev {
            tenant_id: A.into(),
            id: "nope".into(),
            rev: 1,
        }],
        writes: vec![],
    };
    assert!(
        matches!(s.commit(&missing).await, Err(StoreError::Stale(m)) if m.contains("node nope"))
    );
    let fresh = ChangeSet {
        expect: vec![
            Expect::ClusterRev {
                tenant_id: B.into(),
                id: 1,
                rev: 0,
            },
            Expect::NodeRev {
                tenant_id: B.into(),
                id: "n".into(),
                rev: 0,
            },
        ],
        writes: vec![
            Write::Cluster(cluster(B, 1, "bob", "pending", 0)),
            Write::Node(node(B, 1, "n", 1)),
        ],
    };
    s.commit(&fresh).await?;
    assert_eq!(s.get_cluster(B, 1).await?.map(|c| c.rev), Some(1));
    // And the expectations built from rows read back.
    let read = s.get_cluster(B, 1).await?.context("cluster")?;
    let mut cs = ChangeSet::new();
    cs.expect(Expect::cluster(&read))
        .write(Write::Cluster(at(&read, |r| {
            r.status = ClusterStatus::Active
        })));
    s.commit(&cs).await?;
    assert!(matches!(s.commit(&cs).await, Err(StoreError::Stale(_))));
    Ok(())
}

async fn concurrent_commits_with_one_expectation_let_exactly_one_win(ctx: &Ctx) -> Result<()> {
    let c = cluster(A, 1, "alice", "pending", 0);
    ctx.store
        .commit(&writes([Write::Cluster(c.clone())]))
        .await?;
    const RACERS: usize = 8;
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut handles = Vec::new();
    for i in 0..RACERS {
        let s: Arc<dyn Store> = ctx.store.clone();
        let c = c.clone();
        let start = start.clone();
        handles.push(tokio::spawn(async move {
            // Each racer also creates rows of its own, guarded by one shared "must not exist".
            let update = ChangeSet {
                expect: vec![Expect::ClusterRev {
                    tenant_id: A.into(),
                    id: 1,
                    rev: 1,
                }],
                writes: vec![
                    Write::Job(job(A, 1, &format!("job-{i}"), 1)),
                    Write::Cluster(at(&c, |r| r.latest_job = Some(format!("job-{i}")))),
                ],
            };
            let create = ChangeSet {
                expect: vec![Expect::ClusterRev {
                    tenant_id: A.into(),
                    id: 2,
                    rev: 0,
                }],
                writes: vec![
                    Write::Node(node(A, 2, &format!("node-{i}"), 1)),
                    Write::Cluster(cluster(A, 2, &format!("owner-{i}"), "pending", 0)),
                ],
            };
            start.wait().await;
            let (u, c) = tokio::join!(s.commit(&update), s.commit(&create));
            (i, u, c)
        }));
    }
    let (mut update_won, mut create_won) = (Vec::new(), Vec::new());
    for h in handles {
        let (i, u, c) = h.await?;
        match u {
            Ok(()) => update_won.push(i),
            Err(StoreError::Stale(_)) => {}
            Err(e) => return Err(e.into()),
        }
        match c {
            Ok(()) => create_won.push(i),
            Err(StoreError::Stale(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    ensure!(update_won.len() == 1, "update winners: {update_won:?}");
    ensure!(create_won.len() == 1, "create winners: {create_won:?}");
    let s = &*ctx.store;
    let w = update_won[0];
    let c1 = s.get_cluster(A, 1).await?.context("cluster 1")?;
    assert_eq!((c1.rev, c1.latest_job), (2, Some(format!("job-{w}"))));
    let jobs: Vec<String> = s.list_jobs(A, 1).await?.into_iter().map(|j| j.id).collect();
    assert_eq!(jobs, [format!("job-{w}")], "only the winner's job exists");
    let w = create_won[0];
    let c2 = s.get_cluster(A, 2).await?.context("cluster 2")?;
    assert_eq!((c2.rev, c2.owner), (1, format!("owner-{w}")));
    let nodes: Vec<String> = s
        .list_nodes(A, 2)
        .await?
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(nodes, [format!("node-{w}")]);
    Ok(())
}

async fn next_id_is_monotonic_and_unique_under_concurrency(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert_eq!(s.next_id("clusters").await?, 1);
    assert_eq!(s.next_id("clusters").await?, 2);
    assert_eq!(s.next_id("jobs").await?, 1, "counters are independent");
    const TASKS: u64 = 8;
    const EACH: u64 = 25;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let s: Arc<dyn Store> = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..EACH {
                got.push(s.next_id("tasks").await?);
            }
            Ok::<_, StoreError>(got)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        let got = h.await??;
        ensure!(
            got.windows(2).all(|w| w[0] < w[1]),
            "increasing per caller: {got:?}"
        );
        all.extend(got);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=TASKS * EACH).collect::<Vec<_>>());
    assert_eq!(s.next_id("tasks").await?, TASKS * EACH + 1);
    Ok(())
}

// ---- releasing successors ----------------------------------------------------------------------

/// A task with `deps` predecessors left and the given successors.
fn waiting(id: &str, action: &str, deps: u32, successors: &[&str]) -> TaskRow {
    TaskRow {
        action: action.into(),
        deps_remaining: deps,
        successors: successors.iter().map(|s| s.to_string()).collect(),
        ..task(A, "j", id, TaskState::Pending, 0)
    }
}

fn release(ids: &[&str], queue: bool, now: i64) -> Write {
    Write::Release {
        tenant_id: A.into(),
        ids: ids.iter().map(|s| s.to_string()).collect(),
        queue,
        now,
    }
}

async fn release_counts_down_queues_and_cascades_through_gates(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    // a and b feed gate g; g feeds c and the end gate; c feeds the end gate too.
    s.commit(&writes([
        Write::Task(waiting("g", GATE, 2, &["c", "j-end"])),
        Write::Task(waiting("c", "install", 1, &["j-end"])),
        Write::Task(waiting("j-end", GATE, 2, &[])),
    ]))
    .await?;
    let ended = s
        .commit_released(&writes([release(&["g"], true, 50)]))
        .await?;
    assert!(ended.is_empty());
    let g = s.get_task(A, "g").await?.context("g")?;
    assert_eq!((g.deps_remaining, g.state), (1, TaskState::Pending));
    assert_eq!(g.rev, 2, "a release is a write");

    let ended = s
        .commit_released(&writes([release(&["g"], true, 60)]))
        .await?;
    assert!(ended.is_empty(), "the end gate still waits on c");
    assert_eq!(
        s.get_task(A, "g").await?.map(|t| t.state),
        Some(TaskState::Complete)
    );
    let c = s.get_task(A, "c").await?.context("c")?;
    assert_eq!(
        (c.deps_remaining, c.state, c.queued_at),
        (0, TaskState::Queued, 60)
    );
    let end = s.get_task(A, "j-end").await?.context("end")?;
    assert_eq!((end.deps_remaining, end.state), (1, TaskState::Pending));

    let ended = s
        .commit_released(&writes([release(&["j-end"], true, 70)]))
        .await?;
    assert_eq!(ended, ["j-end"]);
    // Releasing past zero counts nothing and completes nothing twice.
    let ended = s
        .commit_released(&writes([release(&["j-end", "missing"], true, 80)]))
        .await?;
    assert!(ended.is_empty());
    let end = s.get_task(A, "j-end").await?.context("end")?;
    assert_eq!((end.deps_remaining, end.state), (0, TaskState::Complete));
    Ok(())
}

async fn release_without_queueing_leaves_ready_tasks_pending(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.commit(&writes([
        Write::Task(waiting("g", GATE, 1, &["t"])),
        Write::Task(waiting("t", "start", 1, &[])),
    ]))
    .await?;
    s.commit(&writes([release(&["g"], false, 5)])).await?;
    let t = s.get_task(A, "t").await?.context("t")?;
    assert_eq!(
        (t.deps_remaining, t.state, t.queued_at),
        (0, TaskState::Pending, 0),
        "a paused job's ready task waits; gates still complete"
    );
    // A stale expectation in the same change set undoes the release too.
    let mut cs = writes([release(&["t"], true, 9)]);
    cs.expect(Expect::TaskRev {
        tenant_id: A.into(),
        id: "g".into(),
        rev: 1,
    });
    assert!(matches!(s.commit(&cs).await, Err(StoreError::Stale(_))));
    assert_eq!(s.get_task(A, "g").await?.map(|t| t.rev), Some(2));
    Ok(())
}

async fn concurrent_releases_of_one_join_count_every_predecessor(ctx: &Ctx) -> Result<()> {
    const PREDECESSORS: u32 = 64;
    ctx.store
        .commit(&writes([Write::Task(waiting(
            "j-end",
            GATE,
            PREDECESSORS,
            &[],
        ))]))
        .await?;
    let mut handles = Vec::new();
    for _ in 0..PREDECESSORS {
        let s: Arc<dyn Store> = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            s.commit_released(&writes([release(&["j-end"], true, 1)]))
                .await
        }));
    }
    let mut ended = Vec::new();
    for h in handles {
        ended.extend(h.await??);
    }
    assert_eq!(
        ended,
        ["j-end"],
        "exactly one release completes the end gate"
    );
    let end = ctx.store.get_task(A, "j-end").await?.context("end")?;
    assert_eq!((end.deps_remaining, end.state), (0, TaskState::Complete));
    Ok(())
}

async fn node_writes_bump_the_cluster_nodes_revision(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert_eq!(s.cluster_stamp(A, 3).await?, None);
    s.commit(&writes([Write::Cluster(cluster(
        A, 3, "alice", "pending", 0,
    ))]))
    .await?;
    assert_eq!(
        s.cluster_stamp(A, 3).await?,
        Some(ClusterStamp {
            rev: 1,
            nodes_rev: 0
        })
    );
    s.commit(&writes([
        Write::Node(node(A, 3, "n-2", 2)),
        Write::Node(node(A, 3, "n-1", 1)),
        Write::Node(node(B, 3, "n-1", 1)),
    ]))
    .await?;
    assert_eq!(
        s.cluster_stamp(A, 3).await?,
        Some(ClusterStamp {
            rev: 1,
            nodes_rev: 2
        }),
        "the cluster row's own revision does not move"
    );
    assert_eq!(
        s.node_revs(A, 3).await?,
        [("n-1".to_string(), 1), ("n-2".to_string(), 1)]
    );
    s.commit(&writes([Write::DeleteNode {
        tenant_id: A.into(),
        id: "n-2".into(),
    }]))
    .await?;
    assert_eq!(s.cluster_stamp(A, 3).await?.map(|c| c.nodes_rev), Some(3));
    assert_eq!(s.node_revs(A, 3).await?, [("n-1".to_string(), 1)]);
    Ok(())
}

/// The node count of a cluster and the completed steps of a job are kept in their rows in the
/// commit that changes them, whatever order a change set writes rows in, and are never written
/// by a row's own write.
async fn counts_are_kept_with_their_rows(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let nodes =
        |id: u64| async move { s.get_cluster(A, id).await.map(|c| c.map(|c| c.node_count)) };
    let steps =
        |id: &'static str| async move { s.get_job(A, id).await.map(|j| j.map(|j| j.steps_done)) };
    // Nodes and tasks written before their cluster and job rows, in one commit.
    s.commit(&writes([
        Write::Node(node(A, 7, "n-1", 1)),
        Write::Node(node(A, 7, "n-2", 2)),
        Write::Task(task(A, "j7", "j7-001", TaskState::Complete, 0)),
        Write::Task(task(A, "j7", "j7-002", TaskState::Queued, 0)),
        Write::Cluster(cluster(A, 7, "alice", "pending", 0)),
        Write::Job(job(A, 7, "j7", 1)),
    ]))
    .await?;
    assert_eq!(nodes(7).await?, Some(2));
    assert_eq!(steps("j7").await?, Some(1));
    // Rewriting the rows themselves (their count fields are ignored) keeps the counts.
    let mut row = cluster(A, 7, "alice", "active", 0);
    row.node_count = 99;
    let mut j = job(A, 7, "j7", 1);
    j.steps_done = 99;
    s.commit(&writes([Write::Cluster(row), Write::Job(j)]))
        .await?;
    assert_eq!(nodes(7).await?, Some(2));
    assert_eq!(steps("j7").await?, Some(1));
    // A task completes, another is retried (back to queued), a node is rewritten and one leaves.
    s.commit(&writes([
        Write::Task(task(A, "j7", "j7-002", TaskState::Complete, 0)),
        Write::Task(task(A, "j7", "j7-001", TaskState::Queued, 0)),
        Write::Task(task(A, "j7", "j7-003", TaskState::Complete, 0)),
        Write::Node(node(A, 7, "n-1", 1)),
        Write::DeleteNode {
            tenant_id: A.into(),
            id: "n-2".into(),
        },
    ]))
    .await?;
    assert_eq!(nodes(7).await?, Some(1));
    assert_eq!(steps("j7").await?, Some(2));
    // A finished gate is not a step; a task written again in its state counts once.
    s.commit(&writes([
        Write::Task(TaskRow {
            action: GATE.into(),
            ..task(A, "j7", "j7-end", TaskState::Complete, 0)
        }),
        Write::Task(task(A, "j7", "j7-003", TaskState::Complete, 0)),
    ]))
    .await?;
    assert_eq!(steps("j7").await?, Some(2));
    Ok(())
}

async fn light_reads_of_jobs_and_tasks(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let mut j2 = job(A, 1, "j2", 10);
    j2.status = JobStatus::Complete;
    let on = |id: &str, node: &str, state: TaskState, started_at: i64| TaskRow {
        node_id: node.into(),
        started_at,
        ..task(A, "j", id, state, 0)
    };
    s.commit(&writes([
        Write::Job(job(A, 1, "j", 5)),
        Write::Job(j2.clone()),
        Write::Task(on("j-001", "n1", TaskState::Complete, 30)),
        Write::Task(on("j-002", "n1", TaskState::InProgress, 40)),
        Write::Task(on("j-003", "n1", TaskState::Queued, 0)),
        Write::Task(on("j-004", "n2", TaskState::Complete, 10)),
        Write::Task(TaskRow {
            action: GATE.into(),
            ..on("j-end", "", TaskState::Complete, 0)
        }),
        Write::Task(TaskRow {
            tenant_id: B.into(),
            ..on("j-001", "n1", TaskState::Complete, 30)
        }),
        Write::Task(TaskRow {
            job_id: "j2".into(),
            ..on("j2-001", "n3", TaskState::Complete, 0)
        }),
    ]))
    .await?;
    let job_of = |tenant: &'static str, id: &'static str| async move {
        s.task_with_job(tenant, id)
            .await
            .map(|t| t.and_then(|(_, j)| j))
    };
    assert_eq!(job_of(A, "j-001").await?, Some((JobStatus::Running, 1)));
    assert_eq!(
        job_of(A, "j2-001").await?.map(|j| j.0),
        Some(JobStatus::Complete)
    );
    assert_eq!(job_of(B, "j-001").await?, None);
    assert_eq!(
        s.get_job(A, "j").await?.map(|j| j.steps_done),
        Some(2),
        "completed tasks of the job, gates not counted"
    );
    let hist: Vec<String> = s
        .node_tasks(A, "n1", 10)
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(hist, ["j-001", "j-002"], "taken tasks, oldest first");
    let last: Vec<String> = s
        .node_tasks(A, "n1", 1)
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(last, ["j-002"], "the limit keeps the newest");
    // The janitor's sweep: a running job whose end gate is complete.
    let ended: Vec<String> = s.ended_jobs().await?.into_iter().map(|j| j.id).collect();
    assert_eq!(ended, ["j"]);
    Ok(())
}

// ---- the queue ---------------------------------------------------------------------------------

async fn take_task_is_fifo_per_tenant(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.commit(&writes([
        Write::Task(task(A, "j", "a-3", TaskState::Queued, 30)),
        Write::Task(task(A, "j", "a-1", TaskState::Queued, 10)),
        Write::Task(task(A, "j", "a-2b", TaskState::Queued, 20)),
        Write::Task(task(A, "j", "a-2a", TaskState::Queued, 20)),
        Write::Task(task(A, "j", "a-pending", TaskState::Pending, 1)),
        Write::Task(task(A, "j", "a-done", TaskState::Complete, 1)),
        Write::Task(task(A, "j", "a-later", TaskState::Queued, 5_000)),
        Write::Task(task(B, "j", "b-1", TaskState::Queued, 1)),
    ]))
    .await?;
    let before = s.get_task(A, "a-1").await?.context("a-1")?;

    let mut taken = Vec::new();
    while let Some(t) = s.take_task(A, "p1.w1", 1_000, 2_000).await? {
        taken.push(t);
    }
    let ids: Vec<&str> = taken.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["a-1", "a-2a", "a-2b", "a-3"],
        "FIFO by (queued_at, id); B's and future tasks not taken"
    );
    let first = &taken[0];
    assert_eq!(
        *first,
        at(&before, |r| {
            r.state = TaskState::InProgress;
            r.lease_owner = Some("p1.w1".into());
            r.lease_deadline = 2_000;
            r.attempts = before.attempts + 1;
            r.started_at = 1_000;
            r.rev = before.rev + 1;
        })
    );
    assert_eq!(
        s.get_task(A, "a-1").await?.as_ref(),
        Some(first),
        "returned as stored"
    );
    // The task queued in the future is due later.
    let later = s
        .take_task(A, "p1.w1", 5_000, 6_000)
        .await?
        .context("due now")?;
    assert_eq!(later.id, "a-later");
    assert_eq!(s.take_task(A, "p1.w1", 9_000, 9_999).await?, None);
    // B's task is still there for B.
    assert_eq!(
        s.take_task(B, "p2.w1", 1_000, 2_000).await?.map(|t| t.id),
        Some("b-1".into())
    );
    assert_eq!(s.take_task("tenant-c", "p3.w1", 1_000, 2_000).await?, None);
    Ok(())
}

async fn take_next_reads_the_job_and_cluster_with_the_task(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.commit(&writes([
        Write::Cluster(cluster(A, 1, "alice", "pending", 0)),
        Write::Node(node(A, 1, "n-1", 1)),
        Write::Job(job(A, 1, "j", 5)),
        Write::Task(task(A, "j", "j-001", TaskState::Queued, 1)),
        Write::Task(TaskRow {
            cluster_id: 9,
            ..task(A, "nojob", "x-001", TaskState::Queued, 2)
        }),
    ]))
    .await?;
    let t = s.take_next(A, "p.w", 10, 20).await?.context("first")?;
    assert_eq!(t.task.id, "j-001");
    assert_eq!(t.job, Some((JobStatus::Running, 1)));
    assert_eq!(
        t.cluster,
        Some(ClusterStamp {
            rev: 1,
            nodes_rev: 1
        })
    );
    let (again, job) = s.task_with_job(A, "j-001").await?.context("read")?;
    assert_eq!(again, t.task);
    assert_eq!(job, Some((JobStatus::Running, 1)));
    let orphan = s.take_next(A, "p.w", 10, 20).await?.context("second")?;
    assert_eq!(
        (orphan.job, orphan.cluster),
        (None, None),
        "missing rows read as None"
    );
    assert_eq!(
        s.task_with_job(A, "x-001").await?.map(|(_, j)| j),
        Some(None)
    );
    assert_eq!(s.task_with_job(A, "nope").await?, None);
    Ok(())
}

async fn take_task_hands_each_task_out_exactly_once(ctx: &Ctx) -> Result<()> {
    const TASKS: usize = 200;
    const TAKERS: usize = 8;
    let mut cs = ChangeSet::new();
    for i in 0..TASKS {
        cs.write(Write::Task(task(
            A,
            "j",
            &format!("t-{i:04}"),
            TaskState::Queued,
            i as i64,
        )));
    }
    cs.write(Write::Task(task(B, "j", "b-only", TaskState::Queued, 0)));
    ctx.store.commit(&cs).await?;

    let mut handles = Vec::new();
    for w in 0..TAKERS {
        let s: Arc<dyn Store> = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(t) = s.take_task(A, &format!("p.w{w}"), 10_000, 20_000).await? {
                got.push((t.id, t.lease_owner, t.attempts));
            }
            Ok::<_, StoreError>(got)
        }));
    }
    let mut ids = Vec::new();
    let mut per_taker = Vec::new();
    for (w, h) in handles.into_iter().enumerate() {
        let got = h.await??;
        per_taker.push(got.len());
        for (id, owner, attempts) in got {
            assert_eq!(owner, Some(format!("p.w{w}")));
            assert_eq!(attempts, 1);
            ids.push(id);
        }
    }
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        ids.len(),
        TASKS,
        "every task handed out, once: {per_taker:?}"
    );
    assert_eq!(unique.len(), TASKS);
    assert!(!ids.iter().any(|id| id == "b-only"));
    // Every stored task agrees: in progress, taken once.
    for t in ctx.store.list_tasks(A, "j").await? {
        assert_eq!(
            (t.state, t.attempts, t.rev),
            (TaskState::InProgress, 1, 2),
            "{}",
            t.id
        );
    }
    Ok(())
}

// ---- the janitor's queries and counts ----------------------------------------------------------

async fn expired_leases_are_found_across_tenants(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let leased = |tenant: &str, id: &str, state: TaskState, deadline: i64| {
        at(&task(tenant, "j", id, state, 0), |t| {
            t.lease_owner = Some("p.w".into());
            t.lease_deadline = deadline;
        })
    };
    s.commit(&writes([
        Write::Task(leased(A, "a-late", TaskState::InProgress, 90)),
        Write::Task(leased(B, "b-late", TaskState::InProgress, 50)),
        Write::Task(leased(A, "a-edge", TaskState::InProgress, 100)),
        Write::Task(leased(A, "a-fine", TaskState::InProgress, 500)),
        Write::Task(leased(A, "a-done", TaskState::Complete, 10)),
        Write::Task(leased(A, "a-queued", TaskState::Queued, 10)),
        Write::Cluster(cluster(A, 1, "u", "active", 90)),
        Write::Cluster(cluster(B, 2, "u", "incomplete", 50)),
        Write::Cluster(cluster(A, 3, "u", "active", 0)),
        Write::Cluster(cluster(A, 4, "u", "active", 100)),
        Write::Cluster(cluster(A, 5, "u", "pending", 10)),
        Write::Cluster(cluster(A, 6, "u", "terminated", 10)),
        Write::Cluster(cluster(A, 7, "u", "inconsistent", 10)),
        Write::Cluster(cluster(A, 8, "u", "active", 500)),
    ]))
    .await?;
    let tasks: Vec<(String, String)> = s
        .expired_tasks(100)
        .await?
        .into_iter()
        .map(|t| (t.tenant_id, t.id))
        .collect();
    assert_eq!(
        tasks,
        [
            (B.to_string(), "b-late".to_string()),
            (A.into(), "a-late".into())
        ]
    );
    let clusters: Vec<(String, u64)> = s
        .expired_clusters(100)
        .await?
        .into_iter()
        .map(|c| (c.tenant_id, c.id))
        .collect();
    assert_eq!(clusters, [(B.to_string(), 2), (A.to_string(), 1)]);
    assert_eq!(s.expired_tasks(0).await?, vec![]);
    assert_eq!(s.expired_clusters(0).await?, vec![]);

    // A provisioner's leases, by the owner's prefix (`<provisioner>.<worker>`), never by pattern.
    s.commit(&writes([Write::Task(at(
        &task(A, "j", "other", TaskState::InProgress, 0),
        |t| {
            t.lease_owner = Some("p_.w".into());
            t.lease_deadline = 10;
        },
    ))]))
    .await?;
    let by = |p: &'static str| async move {
        let tasks = s.tasks_leased_by(p).await?;
        Ok::<_, weft_store::StoreError>(tasks.into_iter().map(|t| t.id).collect::<Vec<_>>())
    };
    assert_eq!(by("p").await?, ["b-late", "a-late", "a-edge", "a-fine"]);
    assert_eq!(by("p_").await?, ["other"]);
    assert!(by("%").await?.is_empty() && by("p.w").await?.is_empty());
    Ok(())
}

async fn queue_and_quota_counts(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert_eq!(s.queue_counts().await?, BTreeMap::new());
    assert_eq!(s.count_clusters(A).await?, (0, 0));
    let mut cs = ChangeSet::new();
    for i in 0..3 {
        cs.write(Write::Task(task(
            A,
            "j",
            &format!("a-q{i}"),
            TaskState::Queued,
            0,
        )));
    }
    cs.write(Write::Task(task(A, "j", "a-ip", TaskState::InProgress, 0)))
        .write(Write::Task(task(A, "j", "a-p", TaskState::Pending, 0)))
        .write(Write::Task(task(B, "j", "b-ip", TaskState::InProgress, 0)))
        .write(Write::Task(task(B, "j", "b-f", TaskState::Failed, 0)))
        .write(Write::Task(task(
            "tenant-c",
            "j",
            "c-done",
            TaskState::Complete,
            0,
        )));
    for (id, status, nodes) in [(1, "active", 3), (2, "pending", 2), (3, "terminated", 5)] {
        cs.write(Write::Cluster(cluster(A, id, "u", status, 0)));
        for n in 0..nodes {
            cs.write(Write::Node(node(A, id, &format!("c{id}-n{n}"), n)));
        }
    }
    cs.write(Write::Cluster(cluster(B, 4, "u", "active", 0)))
        .write(Write::Node(node(B, 4, "b-n", 1)));
    s.commit(&cs).await?;
    assert_eq!(
        s.queue_counts().await?,
        BTreeMap::from([(A.to_string(), (3, 1)), (B.to_string(), (0, 1))])
    );
    assert_eq!(s.count_clusters(A).await?, (2, 5));
    assert_eq!(s.count_clusters(B).await?, (1, 1));
    // Taking moves a task from queued to in progress.
    s.take_task(A, "p.w", 10, 20).await?.context("a task")?;
    assert_eq!(s.queue_counts().await?.get(A), Some(&(2, 2)));
    Ok(())
}

// ---- leader election ---------------------------------------------------------------------------

/// Leadership is a lease row: exclusive while its deadline holds, taken over once it has passed
/// (with a new term), renewed by its holder, given up by a resign; and the same from two stores
/// on one database.
async fn one_store_leads_at_a_time(ctx: &Ctx) -> Result<()> {
    let a = &*ctx.store;
    let b = weft_store::open(&ctx.url).await?;
    let t0 = 1_000_000;
    assert_eq!(a.leader("janitor").await?, None);
    assert_eq!(a.lead("janitor", "A", t0, 100).await?, Some(1));
    assert_eq!(b.lead("janitor", "B", t0 + 50, 100).await?, None);
    assert_eq!(
        b.lead("janitor", "B", t0 + 100, 100).await?,
        None,
        "the deadline itself still holds"
    );
    assert_eq!(
        b.lead("balancer", "B", t0, 100).await?,
        Some(1),
        "roles are separate"
    );
    // Renewing keeps the term and moves the deadline.
    assert_eq!(a.lead("janitor", "A", t0 + 90, 100).await?, Some(1));
    assert_eq!(b.lead("janitor", "B", t0 + 150, 100).await?, None);
    let row = b.leader("janitor").await?.context("a row")?;
    assert_eq!(
        (row.holder.as_str(), row.term, row.deadline),
        ("A", 1, t0 + 190)
    );
    // Once it has passed, another takes it in a new term, and the old holder cannot renew.
    assert_eq!(b.lead("janitor", "B", t0 + 191, 100).await?, Some(2));
    assert_eq!(a.lead("janitor", "A", t0 + 200, 100).await?, None);
    // A holder renewing after its own deadline (nobody took it meanwhile) starts a new term.
    assert_eq!(b.lead("janitor", "B", t0 + 400, 100).await?, Some(3));
    // A resign frees it at once; the next holder's term is higher still.
    a.resign("janitor", "B-not").await?;
    assert_eq!(
        a.lead("janitor", "A", t0 + 401, 100).await?,
        None,
        "only the holder resigns"
    );
    b.resign("janitor", "B").await?;
    assert_eq!(a.lead("janitor", "A", t0 + 402, 100).await?, Some(4));

    // Concurrent takers of a free role: exactly one leads.
    let mut takers = tokio::task::JoinSet::new();
    for (i, s) in [weft_store::open(&ctx.url).await?, b.clone()]
        .into_iter()
        .enumerate()
    {
        for j in 0..4 {
            let s = s.clone();
            takers.spawn(async move { s.lead("free", &format!("h{i}.{j}"), t0, 100).await });
        }
    }
    let terms: Vec<Option<i64>> = takers
        .join_all()
        .await
        .into_iter()
        .collect::<std::result::Result<_, _>>()?;
    assert_eq!(terms.iter().flatten().count(), 1, "one of {terms:?} leads");

    // The helper: a lease knows its deadline by its own clock and renews past half of it.
    let mut lease = Lease::take(a, "helper", "A", 100, t0)
        .await?
        .context("free")?;
    assert!(Lease::take(&*b, "helper", "B", 100, t0 + 10)
        .await?
        .is_none());
    assert!(lease.keep(a, t0 + 10).await, "early: no renewal needed");
    assert_eq!(a.leader("helper").await?.context("row")?.deadline, t0 + 100);
    assert!(lease.keep(a, t0 + 60).await, "past half: renewed");
    assert_eq!(lease.deadline(), t0 + 160);
    assert_eq!(a.leader("helper").await?.context("row")?.deadline, t0 + 160);
    assert!(!lease.keep(a, t0 + 160).await, "a passed lease is not kept");
    let mut taken = Lease::take(&*b, "helper", "B", 100, t0 + 161)
        .await?
        .context("passed: B takes it")?;
    assert_eq!(taken.term(), lease.term() + 1);
    // A leader that froze before its deadline and woke after the takeover finds it lost.
    let mut frozen = Lease::take(&*b, "frozen", "A", 100, t0)
        .await?
        .context("free")?;
    assert_eq!(a.lead("frozen", "B", t0 + 101, 100).await?, Some(2));
    assert!(
        !frozen.renew(a, t0 + 99).await?,
        "taken over: lost even by A's clock"
    );
    assert!(!frozen.keep(a, t0 + 99).await, "and stays lost");
    assert!(taken.keep(&*b, t0 + 220).await);
    taken.resign(&*b).await?;
    assert!(Lease::take(a, "helper", "A", 100, t0 + 221)
        .await?
        .is_some());
    b.close().await;
    Ok(())
}

// ---- deleting tenants and opening again --------------------------------------------------------

async fn engine_rows_survive_reopening_and_go_with_their_tenant(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let mut cs = ChangeSet::new();
    for tenant in [A, B] {
        cs.write(Write::Cluster(cluster(
            tenant,
            s.next_id("clusters").await?,
            "u",
            "active",
            0,
        )))
        .write(Write::Node(node(tenant, 1, &format!("{tenant}-n"), 1)))
        .write(Write::Job(job(tenant, 1, &format!("{tenant}-j"), 1)))
        .write(Write::Task(task(
            tenant,
            &format!("{tenant}-j"),
            &format!("{tenant}-t"),
            TaskState::Queued,
            1,
        )));
    }
    s.commit(&cs).await?;
    let again = weft_store::open(&ctx.url).await?;
    assert_eq!(again.next_id("clusters").await?, 3, "counters survive");
    assert_eq!(
        again.list_clusters(A, None).await?,
        s.list_clusters(A, None).await?
    );
    assert_eq!(again.get_cluster(A, 1).await?.map(|c| c.rev), Some(1));
    assert_eq!(again.list_tenant_nodes(B).await?.len(), 1);
    assert_eq!(again.list_jobs(A, 1).await?.len(), 1);
    let t = again.get_task(A, "tenant-a-t").await?.context("task")?;
    assert_eq!(
        (t.state, t.successors),
        (TaskState::Queued, vec!["tenant-a-t-next".to_string()])
    );

    again.delete_tenant(A).await?;
    assert_eq!(s.list_clusters(A, None).await?, vec![]);
    assert_eq!(s.list_tenant_nodes(A).await?, vec![]);
    assert_eq!(s.get_job(A, "tenant-a-j").await?, None);
    assert_eq!(s.get_task(A, "tenant-a-t").await?, None);
    assert_eq!(
        s.list_clusters(B, None).await?.len(),
        1,
        "other tenants keep theirs"
    );
    assert_eq!(
        s.queue_counts().await?,
        BTreeMap::from([(B.to_string(), (1, 0))])
    );
    again.close().await;
    Ok(())
}

/// A finish's change set (PostgreSQL: through the batch function, whose operations travel as
/// JSON) carries any text in its rows, quotes, backslashes and dollar signs included.
async fn a_finish_carries_any_text(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let id = "00000001-001-001";
    let t = task(A, "00000001-001", id, TaskState::InProgress, 0);
    s.commit(&writes([Write::Task(t.clone())])).await?;
    let text = "it's $w$ $$ $w1$ \\ \" \u{e9} $x$";
    let done = at(&t, |r| {
        r.state = TaskState::Complete;
        r.body = json!({"stdout": text, "$w$": [text]});
    });
    let cs = ChangeSet {
        expect: vec![Expect::TaskRev {
            tenant_id: A.into(),
            id: id.into(),
            rev: 1,
        }],
        writes: vec![Write::Task(done.clone())],
    };
    s.commit(&cs).await?;
    assert_eq!(s.get_task(A, id).await?, Some(at(&done, |r| r.rev = 2)));
    Ok(())
}

/// Statuses are stored as their lowercase names; a row whose status is none of them reads as
/// corrupt rather than as some status.
async fn an_unknown_status_reads_as_corrupt(ctx: &Ctx) -> Result<()> {
    use sqlx::Connection;
    let s = &*ctx.store;
    let j = job(A, 7, "00000007-001", 0);
    s.commit(&writes([
        Write::Cluster(cluster(A, 7, "alice", "inconsistent", 0)),
        Write::Job(j.clone()),
    ]))
    .await?;
    let mut conn = sqlx::AnyConnection::connect(&ctx.url).await?;
    let stored: (String, String) = sqlx::query_as(
        "SELECT c.status, j.status FROM clusters c, jobs j WHERE c.id = 7 AND j.id = '00000007-001'",
    )
    .fetch_one(&mut conn)
    .await?;
    ensure!(
        stored == ("inconsistent".into(), "running".into()),
        "{stored:?}"
    );
    sqlx::raw_sql(
        "UPDATE clusters SET status = 'Active' WHERE id = 7; UPDATE jobs SET status = 'done'",
    )
    .execute(&mut conn)
    .await?;
    let c = s.get_cluster(A, 7).await;
    ensure!(matches!(c, Err(StoreError::Corrupt(_))), "{c:?}");
    let j = s.get_job(A, "00000007-001").await;
    ensure!(matches!(j, Err(StoreError::Corrupt(_))), "{j:?}");
    Ok(())
}

contract_tests!(
    a_finish_carries_any_text,
    an_unknown_status_reads_as_corrupt,
    commit_writes_rows_and_bumps_revisions,
    reads_are_ordered_and_filtered,
    a_stale_expectation_writes_nothing,
    concurrent_commits_with_one_expectation_let_exactly_one_win,
    next_id_is_monotonic_and_unique_under_concurrency,
    take_task_is_fifo_per_tenant,
    take_task_hands_each_task_out_exactly_once,
    take_next_reads_the_job_and_cluster_with_the_task,
    release_counts_down_queues_and_cascades_through_gates,
    release_without_queueing_leaves_ready_tasks_pending,
    concurrent_releases_of_one_join_count_every_predecessor,
    node_writes_bump_the_cluster_nodes_revision,
    counts_are_kept_with_their_rows,
    light_reads_of_jobs_and_tasks,
    expired_leases_are_found_across_tenants,
    queue_and_quota_counts,
    one_store_leads_at_a_time,
    engine_rows_survive_reopening_and_go_with_their_tenant,
);
