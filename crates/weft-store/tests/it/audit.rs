//! The audit trail's store (both backends): appends chained per tenant, also when concurrent;
//! filtered reads; tampering found by verification; retention that leaves a chain that verifies.

use anyhow::Result;
use sqlx::Connection;
use weft_store::audit::{verify_all, Pending};
use weft_store::{AuditEntry, AuditQuery, ChangeSet, Expect, StoreError, Write};

use crate::engine::cluster;
use crate::harness::{contract_tests, Ctx};

fn entry(tenant: &str, time: i64, user: &str, action: &str) -> AuditEntry {
    AuditEntry {
        time,
        tenant_id: tenant.into(),
        request_id: format!("r-{tenant}-{time}-{user}"),
        user: user.into(),
        role: "admin".into(),
        key_id: None,
        source: "127.0.0.1:40000".into(),
        method: "POST".into(),
        route: "/v2/clusters".into(),
        entity: "clusters".into(),
        entity_id: None,
        action: action.into(),
        status: 200,
    }
}

fn query(tenant: Option<&str>) -> AuditQuery {
    AuditQuery {
        tenant_id: tenant.map(str::to_string),
        limit: 1000,
        ..AuditQuery::default()
    }
}

/// Runs `sql` on the store's database over a connection of its own (what someone with access to
/// the database could do).
async fn raw(ctx: &Ctx, sql: &str) -> Result<()> {
    let mut conn = sqlx::AnyConnection::connect(&ctx.url).await?;
    sqlx::raw_sql(sql).execute(&mut conn).await?;
    Ok(())
}

async fn concurrent_appends_form_one_chain_per_tenant(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    let appends = (0..20).map(|i| {
        let s = s.clone();
        let (tenant, user) = if i % 4 == 0 {
            ("t-b", "bob")
        } else {
            ("t-a", "alice")
        };
        tokio::spawn(async move {
            s.append_audit(&entry(tenant, 1000 + i, user, "create"))
                .await
        })
    });
    for a in appends.collect::<Vec<_>>() {
        a.await??;
    }
    let reports = verify_all(s.as_ref(), None).await?;
    let by_tenant: Vec<(String, u64, bool)> = reports
        .iter()
        .map(|r| (r.tenant_id.clone(), r.records, r.ok))
        .collect();
    assert_eq!(
        by_tenant,
        [("t-a".to_string(), 15, true), ("t-b".to_string(), 5, true)]
    );
    let a = s.list_audit(&query(Some("t-a"))).await?;
    assert_eq!(a.len(), 15);
    assert!(
        a.iter().all(|r| r.entry.tenant_id == "t-a"),
        "one tenant's only"
    );
    let mut seqs: Vec<u64> = a.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=15).collect::<Vec<_>>(), "numbers without gaps");
    assert!(
        a.windows(2).all(|w| w[0].entry.time >= w[1].entry.time),
        "newest first"
    );
    Ok(())
}

async fn reads_filter_and_page(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    for (t, user, action) in [
        (10, "alice", "create"),
        (20, "bob", "delete"),
        (30, "alice", "delete"),
        (40, "carol", "update"),
    ] {
        s.append_audit(&entry("t", t, user, action)).await?;
    }
    let users = |q: AuditQuery| async move {
        s.list_audit(&q)
            .await
            .map(|v| v.into_iter().map(|r| r.entry.user).collect::<Vec<_>>())
    };
    let q = query(Some("t"));
    assert_eq!(users(q.clone()).await?, ["carol", "alice", "bob", "alice"]);
    let by_user = AuditQuery {
        user: Some("alice".into()),
        ..q.clone()
    };
    assert_eq!(users(by_user).await?, ["alice", "alice"]);
    let by_action = AuditQuery {
        action: Some("delete".into()),
        ..q.clone()
    };
    assert_eq!(users(by_action).await?, ["alice", "bob"]);
    let window = AuditQuery {
        from: Some(20),
        to: Some(40),
        ..q.clone()
    };
    assert_eq!(users(window).await?, ["alice", "bob"]);
    let page = AuditQuery {
        offset: 1,
        limit: 2,
        ..q.clone()
    };
    assert_eq!(users(page).await?, ["alice", "bob"]);
    let other = query(Some("nobody"));
    assert!(users(other).await?.is_empty());
    Ok(())
}

async fn an_edited_or_removed_record_is_found(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    for (tenant, n) in [("edited", 4), ("cut", 4), ("kept", 2)] {
        for i in 1..=n {
            s.append_audit(&entry(tenant, i, "alice", "create")).await?;
        }
    }
    raw(
        ctx,
        "UPDATE audit SET body = REPLACE(body, 'create', 'read'), action = 'read' \
         WHERE tenant_id = 'edited' AND seq = 2",
    )
    .await?;
    raw(ctx, "DELETE FROM audit WHERE tenant_id = 'cut' AND seq = 4").await?;
    let reports = verify_all(s.as_ref(), None).await?;
    let found: Vec<(String, bool, Option<u64>)> = reports
        .iter()
        .map(|r| (r.tenant_id.clone(), r.ok, r.first_bad_seq))
        .collect();
    assert_eq!(
        found,
        [
            ("cut".to_string(), false, Some(4)),
            ("edited".to_string(), false, Some(2)),
            ("kept".to_string(), true, None),
        ]
    );
    Ok(())
}

async fn retention_removes_old_records_and_the_rest_verifies(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    for t in [100, 200, 300] {
        s.append_audit(&entry("t", t, "alice", "create")).await?;
    }
    assert_eq!(s.purge_audit(50).await?, 0, "nothing is old enough");
    assert_eq!(s.purge_audit(250).await?, 2);
    let left: Vec<u64> = s
        .list_audit(&query(Some("t")))
        .await?
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(left, [3]);
    s.append_audit(&entry("t", 400, "alice", "create")).await?;
    let r = &verify_all(s.as_ref(), Some("t")).await?[0];
    assert!(r.ok && r.records == 2, "{r:?}");
    // A record removed by hand from the start (not by retention) is found.
    raw(ctx, "DELETE FROM audit WHERE tenant_id = 't' AND seq = 3").await?;
    let r = &verify_all(s.as_ref(), Some("t")).await?[0];
    assert_eq!((r.ok, r.first_bad_seq), (false, Some(3)), "{r:?}");
    Ok(())
}

/// How many records wait in `audit_pending`, read over a connection of the test's own.
async fn pending_rows(ctx: &Ctx) -> Result<i64> {
    let mut conn = sqlx::AnyConnection::connect(&ctx.url).await?;
    Ok(sqlx::query_scalar("SELECT COUNT(*) FROM audit_pending")
        .fetch_one(&mut conn)
        .await?)
}

/// A request's record commits with its change on each commit path (a change set, a plain write),
/// leaves with the change when it rolls back, is chained once with the answer's status, and when
/// no answer came (the server stopped) is chained by `settle_audit` with status 0.
async fn a_requests_record_commits_with_its_change(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    let pending = |id: &str| {
        let mut e = entry("t-a", 5_000, "alice", "create");
        e.request_id = id.into();
        e.status = 0;
        Pending::new(id, move || e.clone())
    };
    let mut cs = ChangeSet::new();
    cs.write(Write::Cluster(cluster("t-a", 1, "alice", "pending", 0)));
    // A stopped server: the changes committed, the answers were never recorded. One request
    // commits a change set, the other a plain write and then a change set.
    let stopped = pending("req-stopped");
    Pending::scope(stopped.clone(), s.commit_released(&cs)).await?;
    assert!(stopped.written());
    assert_eq!(
        pending_rows(ctx).await?,
        1,
        "a change set carries the record"
    );
    let profile = serde_json::json!({"a": 1});
    Pending::scope(pending("req-plain"), async {
        s.put_profile("t-a", "alice", &profile).await?;
        assert_eq!(
            pending_rows(ctx).await?,
            2,
            "a plain write carries the record"
        );
        s.commit_released(&cs).await?;
        anyhow::Ok(())
    })
    .await?;
    assert_eq!(pending_rows(ctx).await?, 2, "one row per request");
    assert!(s.list_audit(&query(Some("t-a"))).await?.is_empty());
    // A change that rolls back takes its record with it.
    let mut stale = ChangeSet::new();
    stale.expect(Expect::ClusterRev {
        tenant_id: "t-a".into(),
        id: 1,
        rev: 99,
    });
    stale.write(Write::Cluster(cluster("t-a", 1, "alice", "active", 0)));
    let refused = Pending::scope(pending("req-stale"), s.commit_released(&stale)).await;
    assert!(matches!(refused, Err(StoreError::Stale(_))), "{refused:?}");
    assert_eq!(pending_rows(ctx).await?, 2);
    // An answered request: chained once, with its status, its pending row gone.
    let answered = pending("req-answered");
    Pending::scope(answered.clone(), s.commit_owned(cs.clone())).await?;
    assert_eq!(
        pending_rows(ctx).await?,
        3,
        "an owned change set carries the record"
    );
    let mut done = answered.entry();
    done.status = 201;
    s.append_audit(&done).await?;
    assert_eq!(pending_rows(ctx).await?, 2);
    // Outside a request nothing is pending.
    s.commit_released(&cs).await?;
    assert_eq!(pending_rows(ctx).await?, 2);
    assert_eq!(s.settle_audit(4_000).await?, 0, "not old enough");
    assert_eq!(s.settle_audit(i64::MAX).await?, 2);
    assert_eq!(s.settle_audit(i64::MAX).await?, 0, "settled once");
    assert_eq!(pending_rows(ctx).await?, 0);
    let records = s.list_audit(&query(Some("t-a"))).await?;
    let got: Vec<(&str, u16)> = records
        .iter()
        .map(|r| (r.entry.request_id.as_str(), r.entry.status))
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains(&("req-answered", 201)), "{got:?}");
    assert!(got.contains(&("req-stopped", 0)), "{got:?}");
    assert!(got.contains(&("req-plain", 0)), "{got:?}");
    let reports = verify_all(s.as_ref(), None).await?;
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    Ok(())
}

contract_tests!(
    a_requests_record_commits_with_its_change,
    concurrent_appends_form_one_chain_per_tenant,
    reads_filter_and_page,
    an_edited_or_removed_record_is_found,
    retention_removes_old_records_and_the_rest_verifies,
);
