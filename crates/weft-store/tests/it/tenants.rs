//! Checked tenant writes (both backends): workers within the provisioners' free capacity and
//! limits not below usage, checked in the commit that writes them, also when writes race; and a
//! cluster create's quota checked against the tenant's limits as its commit reads them.

use std::collections::BTreeMap;

use anyhow::Result;
use weft_model::{TenantSpecification, UNBOUNDED};
use weft_store::{
    ChangeSet, Expect, ProvisionerRecord, Quota, StoreError, Tenant, TenantRefusal, Write,
};

use crate::engine::cluster;
use crate::harness::{contract_tests, Ctx};

fn tenant(name: &str, workers: u32, max_clusters: u64) -> Tenant {
    Tenant {
        id: format!("id-{name}"),
        spec: TenantSpecification {
            name: name.into(),
            description: None,
            workers,
            max_clusters,
            max_nodes: UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        },
        create_time: 1,
    }
}

async fn capacity(ctx: &Ctx, total: u32) -> Result<()> {
    ctx.store
        .upsert_provisioner(&ProvisionerRecord {
            id: "p1".into(),
            host: "p1.example.com".into(),
            port: 55055,
            capacity_total: total,
            assignments: BTreeMap::new(),
            usage: BTreeMap::new(),
            last_heartbeat_ms: 1,
            tls: false,
        })
        .await?;
    Ok(())
}

/// A cluster create of one cluster into tenant `t`, its quota as stale as `max_clusters` says.
fn create(t: &Tenant, id: u64, max_clusters: u64) -> ChangeSet {
    let mut cs = ChangeSet::new();
    cs.expect(Expect::Quota(Quota {
        tenant_id: t.id.clone(),
        max_clusters,
        max_nodes: UNBOUNDED,
        add_clusters: 1,
        add_nodes: 0,
        max_cost_micros: None,
        add_cost_micros: 0,
    }));
    cs.write(Write::Cluster(cluster(&t.id, id, "alice", "active", 0)));
    cs
}

async fn refusals_name_capacity_and_usage(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    capacity(ctx, 4).await?;
    s.save_tenant(&tenant("a", 3, 10), true).await?;
    let refused = s.save_tenant(&tenant("b", 2, 10), true).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::TenantRefused(TenantRefusal::Capacity {
                free: 1
            }))
        ),
        "{refused:?}"
    );
    assert!(s.tenant_by_name("b").await?.is_none(), "nothing written");
    s.save_tenant(&tenant("b", 1, 10), true).await?;
    // Its own workers do not count against a tenant's new setting.
    s.save_tenant(&tenant("a", 3, 10), false).await?;
    let a = tenant("a", 0, 10);
    for id in 1..=2 {
        s.commit_released(&create(&a, id, 10)).await?;
    }
    let refused = s.save_tenant(&tenant("a", 0, 1), false).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::TenantRefused(TenantRefusal::BelowUsage {
                clusters: 2,
                nodes: 0
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(s.tenant_by_name("a").await?.unwrap().spec.max_clusters, 10);
    let dup = s.save_tenant(&tenant("a", 0, 10), true).await;
    assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
    Ok(())
}

async fn racing_tenant_writes_never_exceed_the_capacity(ctx: &Ctx) -> Result<()> {
    capacity(ctx, 5).await?;
    let writes = (0..12).map(|i| {
        let s = ctx.store.clone();
        tokio::spawn(async move { s.save_tenant(&tenant(&format!("t{i}"), 1, 10), true).await })
    });
    let mut saved = 0;
    for w in writes.collect::<Vec<_>>() {
        match w.await? {
            Ok(()) => saved += 1,
            Err(StoreError::TenantRefused(TenantRefusal::Capacity { free: 0 })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    assert_eq!(saved, 5);
    let workers: u32 = ctx
        .store
        .list_tenants()
        .await?
        .iter()
        .map(|t| t.spec.workers)
        .sum();
    assert_eq!(workers, 5);
    Ok(())
}

async fn a_create_counts_against_the_limits_its_commit_reads(ctx: &Ctx) -> Result<()> {
    let s = &ctx.store;
    let t = tenant("q", 0, 5);
    s.save_tenant(&t, true).await?;
    s.commit_released(&create(&t, 1, 5)).await?;
    // The limit is lowered after the create read the tenant (its quota still says 5).
    s.save_tenant(&tenant("q", 0, 1), false).await?;
    let refused = s.commit_released(&create(&t, 2, 5)).await;
    match refused {
        Err(StoreError::QuotaExceeded(m)) => assert!(m.contains("maxClusters (1)"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.count_clusters(&t.id).await?, (1, 0));
    Ok(())
}

contract_tests!(
    refusals_name_capacity_and_usage,
    racing_tenant_writes_never_exceed_the_capacity,
    a_create_counts_against_the_limits_its_commit_reads,
);
