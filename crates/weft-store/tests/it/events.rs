//! The event backlog (both backends): every change of a cluster, job, task, node and the audit
//! trail is an event written in its commit, numbered per tenant without gaps; reads filter by
//! cluster, kind and owner; a reader resuming after the last number it saw never misses an event,
//! also while commits race; retention keeps each tenant's newest.

use std::collections::BTreeSet;

use anyhow::{ensure, Result};
use weft_store::{
    AuditEntry, Event, EventKind, EventQuery, Store, TaskRow, TaskState, Write, GATE,
};

use crate::engine::{cluster, job, node, task, writes, A, B};
use crate::harness::{contract_tests, Ctx};

fn all(tenant: &str, after: u64) -> EventQuery {
    EventQuery {
        tenant_id: tenant.into(),
        after,
        limit: 100_000,
        ..EventQuery::default()
    }
}

/// What an event says, in a line a test can compare.
fn line(e: &Event) -> String {
    let subject = e
        .cluster_name
        .clone()
        .or(e.task_id.clone())
        .or(e.job_id.clone())
        .or(e.node_id.clone())
        .unwrap_or_default();
    format!(
        "{} {} {}->{}",
        e.kind.as_str(),
        subject,
        e.previous.as_deref().unwrap_or("-"),
        e.status.as_deref().unwrap_or("-")
    )
}

async fn read(s: &dyn Store, q: &EventQuery) -> Result<Vec<Event>> {
    s.sequence_events().await?;
    Ok(s.read_events(q).await?)
}

fn audit(tenant: &str, user: &str) -> AuditEntry {
    AuditEntry {
        time: 5,
        tenant_id: tenant.into(),
        request_id: "r1".into(),
        user: user.into(),
        role: "admin".into(),
        key_id: None,
        source: "127.0.0.1:1".into(),
        method: "DELETE".into(),
        route: "/v2/clusters/{id}".into(),
        entity: "clusters".into(),
        entity_id: Some("7".into()),
        action: "delete".into(),
        status: 200,
    }
}

async fn every_change_is_an_event_in_commit_order(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.commit(&writes([
        Write::Cluster(cluster(A, 7, "alice", "pending", 0)),
        Write::Job(job(A, 7, "j7", 1)),
        Write::Task(TaskRow {
            cluster_id: 7,
            ..task(A, "j7", "j7-1", TaskState::Queued, 0)
        }),
        Write::Node(node(A, 7, "n-1", 1)),
    ]))
    .await?;
    s.commit(&writes([Write::Cluster(cluster(
        B, 1, "bob", "pending", 0,
    ))]))
    .await?;
    // A task runs and completes, a gate completes (not reported), the job and cluster settle, a
    // node leaves; rewriting a row in its status is no event.
    for state in [TaskState::InProgress, TaskState::Complete] {
        s.commit(&writes([Write::Task(TaskRow {
            cluster_id: 7,
            ..task(A, "j7", "j7-1", state, 0)
        })]))
        .await?;
    }
    let mut done = job(A, 7, "j7", 1);
    done.status = weft_model::JobStatus::Complete;
    s.commit(&writes([
        Write::Task(TaskRow {
            action: GATE.into(),
            cluster_id: 7,
            ..task(A, "j7", "j7-end", TaskState::Complete, 0)
        }),
        Write::Job(done),
        Write::Cluster(cluster(A, 7, "alice", "active", 0)),
        Write::Cluster(cluster(A, 8, "carol", "active", 0)),
    ]))
    .await?;
    s.commit(&writes([
        Write::Cluster(cluster(A, 7, "alice", "active", 0)),
        Write::DeleteNode {
            tenant_id: A.into(),
            id: "n-1".into(),
        },
    ]))
    .await?;
    s.append_audit(&audit(A, "alice")).await?;

    let got = read(s, &all(A, 0)).await?;
    let lines: Vec<String> = got.iter().map(line).collect();
    let want = [
        "cluster cluster-7 -->pending",
        "job j7 -->running",
        "node n-1 -->added",
        "task j7-1 queued->in_progress",
        "task j7-1 in_progress->complete",
        "job j7 running->complete",
        "cluster cluster-7 pending->active",
        "cluster cluster-8 -->active",
        "node n-1 -->removed",
        "audit  -->-",
    ];
    // Rows of one commit may be written in another order than listed: compare commit by commit.
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    ensure!(
        sorted(&lines[..3]) == sorted(&want[..3].iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        "{lines:#?}"
    );
    ensure!(lines[3..5] == want[3..5], "{lines:#?}");
    ensure!(
        sorted(&lines[5..8])
            == sorted(&want[5..8].iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        "{lines:#?}"
    );
    ensure!(lines[8..] == want[8..], "{lines:#?}");
    let ids: Vec<u64> = got.iter().map(|e| e.id).collect();
    ensure!(
        ids == (1..=10).collect::<Vec<_>>(),
        "numbered without gaps: {ids:?}"
    );
    let t = &got[3];
    ensure!(
        (
            t.job_id.as_deref(),
            t.node_id.as_deref(),
            t.service.as_deref()
        ) == (Some("j7"), Some("n1"), Some("hdfs")),
        "{t:?}"
    );
    ensure!(t.cluster_id.as_deref() == Some("00000007") && t.action.as_deref() == Some("install"));
    ensure!(got[9].audit.as_ref().map(|a| a.user.as_str()) == Some("alice"));

    // Each tenant counts its own; filters.
    let b = read(s, &all(B, 0)).await?;
    ensure!(b.len() == 1 && b[0].id == 1, "{b:?}");
    let only7 = EventQuery {
        cluster_id: Some(8),
        ..all(A, 0)
    };
    ensure!(read(s, &only7).await?.len() == 1);
    let kinds = EventQuery {
        kinds: vec![EventKind::Job, EventKind::Audit],
        ..all(A, 0)
    };
    let k: Vec<u64> = read(s, &kinds).await?.iter().map(|e| e.id).collect();
    ensure!(k.len() == 3 && k[2] == 10, "{k:?}");
    let carol = EventQuery {
        owner: Some("carol".into()),
        ..all(A, 0)
    };
    let c = read(s, &carol).await?;
    ensure!(
        c.len() == 1 && c[0].cluster_id.as_deref() == Some("00000008"),
        "{c:?}"
    );
    // Alice's own audit record is not among a plain user's events.
    let alice = EventQuery {
        owner: Some("alice".into()),
        ..all(A, 0)
    };
    ensure!(read(s, &alice)
        .await?
        .iter()
        .all(|e| e.kind != EventKind::Audit));
    ensure!(read(s, &all(A, 8)).await?.len() == 2);
    let bounds = s.event_bounds(A).await?;
    ensure!((bounds.oldest, bounds.newest) == (1, 10), "{bounds:?}");
    Ok(())
}

/// Writers commit task changes in two tenants at once while a reader sequences and reads after
/// the last number it saw: it ends with every event, each once, in order.
async fn a_reader_resuming_after_its_last_event_misses_none_while_commits_race(
    ctx: &Ctx,
) -> Result<()> {
    let s = ctx.store.clone();
    s.commit(&writes([
        Write::Cluster(cluster(A, 1, "alice", "active", 0)),
        Write::Cluster(cluster(B, 1, "bob", "active", 0)),
    ]))
    .await?;
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let tenant = if w % 2 == 0 { A } else { B };
                for i in 0..15 {
                    let id = format!("w{w}-t{i}");
                    for state in [TaskState::Queued, TaskState::InProgress] {
                        let t = TaskRow {
                            cluster_id: 1,
                            ..task(tenant, "j", &id, state, 0)
                        };
                        s.commit(&writes([Write::Task(t)])).await?;
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    let mut seen: Vec<u64> = Vec::new();
    let mut last = 0;
    loop {
        let finished = writers.iter().all(|w| w.is_finished());
        let page = read(&*s, &all(A, last)).await?;
        for e in &page {
            seen.push(e.id);
            last = e.id;
        }
        if finished && page.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    for w in writers {
        w.await??;
    }
    let every: Vec<u64> = read(&*s, &all(A, 0)).await?.iter().map(|e| e.id).collect();
    ensure!(
        every.len() == 1 + 4 * 15,
        "one event per change: {}",
        every.len()
    );
    ensure!(
        seen == every,
        "the follower saw {seen:?}\nthe backlog holds {every:?}"
    );
    ensure!(every == (1..=every.len() as u64).collect::<Vec<_>>());
    Ok(())
}

async fn retention_keeps_each_tenants_newest_and_numbers_go_on(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    for status in ["pending", "active", "incomplete"] {
        s.commit(&writes([Write::Cluster(cluster(A, 1, "alice", status, 0))]))
            .await?;
    }
    read(s, &all(A, 0)).await?;
    let gone = s.purge_events(i64::MAX).await?;
    ensure!(gone == 2, "two of three went: {gone}");
    s.commit(&writes([Write::Cluster(cluster(
        A, 1, "alice", "active", 0,
    ))]))
    .await?;
    let left: Vec<u64> = read(s, &all(A, 0)).await?.iter().map(|e| e.id).collect();
    ensure!(left == vec![3, 4], "{left:?}");
    let bounds = s.event_bounds(A).await?;
    ensure!((bounds.oldest, bounds.newest) == (3, 4), "{bounds:?}");
    Ok(())
}

contract_tests!(
    every_change_is_an_event_in_commit_order,
    a_reader_resuming_after_its_last_event_misses_none_while_commits_race,
    retention_keeps_each_tenants_newest_and_numbers_go_on,
);
