//! The store contract: every test here runs against every backend (see `contract_tests!` at the
//! bottom). Each test gets a fresh, empty store (apart from the superadmin tenant).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use weft_model::{EntityKind, ResourceStatus, TenantSpecification, UNBOUNDED};
use weft_store::{
    ApiKeyRecord, ProvisionerRecord, ResourceDelete, ResourceKey, Store, StoreError, Tenant,
    SCHEMA_VERSION, SUPERADMIN,
};

use crate::harness::{contract_tests, Ctx};

const A: &str = "tenant-a";
const B: &str = "tenant-b";

fn tenant(id: &str, name: &str, workers: u32) -> Tenant {
    Tenant {
        id: id.into(),
        spec: TenantSpecification {
            name: name.into(),
            description: Some(format!("{name} tenant")),
            workers,
            max_clusters: 10,
            max_nodes: UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        },
        create_time: 1_700_000_000_000,
    }
}

fn rkey(tenant_id: &str, name: &str) -> ResourceKey {
    ResourceKey {
        tenant_id: tenant_id.into(),
        ptype: "automatortypes".into(),
        plugin: "chef-solo".into(),
        rtype: "cookbooks".into(),
        name: name.into(),
    }
}

/// `(name, version, status)` of every version of the test resources named `name` (or all names).
async fn statuses(
    s: &dyn Store,
    tenant_id: &str,
    name: Option<&str>,
) -> Result<Vec<(String, u64, ResourceStatus)>> {
    let rows = s
        .list_resources(tenant_id, "automatortypes", "chef-solo", "cookbooks", name)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.key.name, r.meta.version, r.meta.status))
        .collect())
}

fn row(name: &str, version: u64, status: ResourceStatus) -> (String, u64, ResourceStatus) {
    (name.to_string(), version, status)
}

fn provisioner(id: &str, port: u16) -> ProvisionerRecord {
    ProvisionerRecord {
        id: id.into(),
        host: format!("{id}.example.com"),
        port,
        capacity_total: 10,
        assignments: BTreeMap::from([(A.to_string(), 3), (B.to_string(), 2)]),
        usage: BTreeMap::new(),
        last_heartbeat_ms: 5,
        tls: true,
    }
}

fn api_key(id: &str, hash: &str, create_time: i64) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        hash: hash.into(),
        tenant_id: A.into(),
        user: "alice".into(),
        admin: true,
        create_time,
    }
}

fn version_of(v: &Value) -> Option<u64> {
    v.get("version").and_then(Value::as_u64)
}

// ---- schema and tenants ------------------------------------------------------------------------

async fn schema_is_current_and_superadmin_exists(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert_eq!(s.schema_version().await?, SCHEMA_VERSION);
    let sa = s
        .tenant_by_name(SUPERADMIN)
        .await?
        .context("superadmin tenant")?;
    assert_eq!(sa.id, SUPERADMIN);
    assert_eq!(
        sa.spec,
        TenantSpecification {
            name: SUPERADMIN.into(),
            description: Some("super admin tenant".into()),
            workers: 0,
            max_clusters: UNBOUNDED,
            max_nodes: UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        }
    );
    assert_eq!(s.tenant_by_id(SUPERADMIN).await?, Some(sa));
    Ok(())
}

async fn tenants_insert_update_list_delete(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let a = tenant(A, "zeta", 4);
    let b = tenant(B, "alpha", 0);
    s.insert_tenant(&a).await?;
    s.insert_tenant(&b).await?;
    assert!(matches!(
        s.insert_tenant(&tenant("other-id", "zeta", 1)).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.insert_tenant(&tenant(A, "new-name", 1)).await,
        Err(StoreError::Conflict(_))
    ));

    assert_eq!(s.tenant_by_id(A).await?, Some(a.clone()));
    assert_eq!(s.tenant_by_name("zeta").await?, Some(a.clone()));
    assert_eq!(s.tenant_by_name("nobody").await?, None);
    let names: Vec<String> = s
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| t.spec.name)
        .collect();
    assert_eq!(names, ["alpha", SUPERADMIN, "zeta"]);

    // The specification changes, the name does not.
    let mut changed = tenant(A, "renamed", 9);
    changed.spec.description = None;
    s.update_tenant(&changed).await?;
    let got = s.tenant_by_id(A).await?.context("tenant a")?;
    assert_eq!(got.spec.name, "zeta");
    assert_eq!(got.spec.workers, 9);
    assert_eq!(got.spec.description, None);
    assert_eq!(got.create_time, a.create_time);

    // Deleting a tenant deletes what it owns, and only that.
    for t in [A, B] {
        s.put_entity(t, EntityKind::Service, "hadoop", &json!({"name": "hadoop"}))
            .await?;
        s.create_resource_version(&rkey(t, "cb")).await?;
        s.put_profile(t, "alice", &json!({"k": t})).await?;
    }
    s.insert_api_key(&api_key("k1", "h1", 1)).await?;
    s.delete_tenant(A).await?;
    assert_eq!(s.tenant_by_id(A).await?, None);
    assert_eq!(
        s.get_entity(A, EntityKind::Service, "hadoop", None).await?,
        None
    );
    assert!(statuses(s, A, None).await?.is_empty());
    assert_eq!(s.get_profile(A, "alice").await?, None);
    assert_eq!(s.api_key_by_hash("h1").await?, None);
    assert!(s
        .get_entity(B, EntityKind::Service, "hadoop", None)
        .await?
        .is_some());
    assert_eq!(statuses(s, B, None).await?.len(), 1);
    assert!(s.get_profile(B, "alice").await?.is_some());
    s.delete_tenant(A).await?; // idempotent
    Ok(())
}

// ---- versioned entities ------------------------------------------------------------------------

async fn create_entity_conflicts_when_any_version_exists(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let body = json!({"name": "aws", "description": "d", "version": 42});
    assert_eq!(
        s.create_entity(A, EntityKind::Provider, "aws", &body)
            .await?,
        1
    );
    match s.create_entity(A, EntityKind::Provider, "aws", &body).await {
        Err(StoreError::Conflict(what)) => {
            ensure!(what.contains("aws"), "conflict names the entity: {what}")
        }
        other => anyhow::bail!("expected Conflict, got {other:?}"),
    }
    let got = s
        .get_entity(A, EntityKind::Provider, "aws", None)
        .await?
        .context("aws")?;
    assert_eq!(
        got,
        json!({"name": "aws", "description": "d", "version": 1})
    );
    // The same name in another kind or tenant is another entity.
    assert_eq!(
        s.create_entity(A, EntityKind::Service, "aws", &body)
            .await?,
        1
    );
    assert_eq!(
        s.create_entity(B, EntityKind::Provider, "aws", &body)
            .await?,
        1
    );
    Ok(())
}

async fn put_entity_writes_new_versions(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    for (i, expected) in [1u64, 2, 3].into_iter().enumerate() {
        let body = json!({"name": "t", "n": i, "version": 99});
        assert_eq!(
            s.put_entity(A, EntityKind::ClusterTemplate, "t", &body)
                .await?,
            expected
        );
    }
    let latest = s
        .get_entity(A, EntityKind::ClusterTemplate, "t", None)
        .await?
        .context("latest")?;
    assert_eq!(latest, json!({"name": "t", "n": 2, "version": 3}));
    let v2 = s
        .get_entity(A, EntityKind::ClusterTemplate, "t", Some(2))
        .await?
        .context("v2")?;
    assert_eq!(v2, json!({"name": "t", "n": 1, "version": 2}));
    assert_eq!(
        s.get_entity(A, EntityKind::ClusterTemplate, "t", Some(4))
            .await?,
        None
    );
    assert_eq!(
        s.get_entity(A, EntityKind::ClusterTemplate, "nope", None)
            .await?,
        None
    );
    // create after put: the name exists.
    assert!(matches!(
        s.create_entity(A, EntityKind::ClusterTemplate, "t", &json!({}))
            .await,
        Err(StoreError::Conflict(_))
    ));
    Ok(())
}

async fn deleted_versions_make_room_for_max_plus_one(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let k = EntityKind::HardwareType;
    for _ in 0..3 {
        s.put_entity(A, k, "small", &json!({"name": "small"}))
            .await?;
    }
    s.delete_entity(A, k, "small", Some(3)).await?;
    assert_eq!(s.get_entity(A, k, "small", Some(3)).await?, None);
    assert_eq!(
        version_of(&s.get_entity(A, k, "small", None).await?.context("latest")?),
        Some(2)
    );
    assert_eq!(
        s.put_entity(A, k, "small", &json!({"name": "small"}))
            .await?,
        3
    );

    s.delete_entity(A, k, "small", Some(2)).await?;
    s.delete_entity(A, k, "small", Some(2)).await?; // idempotent
    assert_eq!(s.get_entity(A, k, "small", Some(2)).await?, None);
    assert!(s.get_entity(A, k, "small", Some(1)).await?.is_some());
    assert_eq!(
        s.put_entity(A, k, "small", &json!({"name": "small"}))
            .await?,
        4
    );

    s.delete_entity(A, k, "small", None).await?;
    assert_eq!(s.get_entity(A, k, "small", None).await?, None);
    for v in 1..=4 {
        assert_eq!(s.get_entity(A, k, "small", Some(v)).await?, None);
    }
    s.delete_entity(A, k, "small", None).await?; // idempotent
    assert_eq!(
        s.create_entity(A, k, "small", &json!({"name": "small"}))
            .await?,
        1
    );
    Ok(())
}

async fn entity_versions_lists_every_version_oldest_first(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let k = EntityKind::ClusterTemplate;
    assert!(s.entity_versions(A, k, "hadoop").await?.is_empty());
    for w in 0..3 {
        s.put_entity(A, k, "hadoop", &json!({"name": "hadoop", "w": w}))
            .await?;
    }
    s.put_entity(B, k, "hadoop", &json!({"name": "hadoop", "w": 9}))
        .await?;
    s.delete_entity(A, k, "hadoop", Some(2)).await?;
    let got: Vec<(Option<u64>, i64)> = s
        .entity_versions(A, k, "hadoop")
        .await?
        .iter()
        .map(|v| (version_of(v), v["w"].as_i64().unwrap_or(-1)))
        .collect();
    assert_eq!(got, vec![(Some(1), 0), (Some(3), 2)]);
    Ok(())
}

async fn list_entities_gives_latest_versions_by_name(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let k = EntityKind::ImageType;
    assert!(s.list_entities(A, k).await?.is_empty());
    for (name, writes) in [("ubuntu", 2), ("Centos", 1), ("alma", 3), ("b", 1)] {
        for w in 0..writes {
            s.put_entity(A, k, name, &json!({"name": name, "w": w}))
                .await?;
        }
    }
    s.put_entity(
        A,
        EntityKind::Service,
        "zookeeper",
        &json!({"name": "zookeeper"}),
    )
    .await?;
    s.put_entity(B, k, "debian", &json!({"name": "debian"}))
        .await?;

    let listed = s.list_entities(A, k).await?;
    let got: Vec<(String, u64)> = listed
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default().to_string(),
                version_of(v).unwrap_or(0),
            )
        })
        .collect();
    // Bytewise order on both backends: upper case first.
    let expected = [("Centos", 1), ("alma", 3), ("b", 1), ("ubuntu", 2)];
    assert_eq!(got, expected.map(|(n, v)| (n.to_string(), v)));
    assert_eq!(listed[1], json!({"name": "alma", "w": 2, "version": 3}));
    Ok(())
}

async fn replace_entities_swaps_the_admin_kinds(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.put_entity(A, EntityKind::Provider, "aws", &json!({"name": "aws"}))
        .await?;
    s.put_entity(A, EntityKind::Provider, "aws", &json!({"name": "aws"}))
        .await?;
    s.put_entity(A, EntityKind::Service, "old", &json!({"name": "old"}))
        .await?;
    s.put_entity(
        A,
        EntityKind::AutomatorType,
        "chef-solo",
        &json!({"name": "chef-solo"}),
    )
    .await?;
    s.put_entity(B, EntityKind::Service, "old", &json!({"name": "old"}))
        .await?;

    let new = vec![
        (
            EntityKind::Provider,
            "aws".to_string(),
            json!({"name": "aws", "new": true}),
        ),
        (
            EntityKind::Service,
            "hdfs".to_string(),
            json!({"name": "hdfs"}),
        ),
        (
            EntityKind::PartialTemplate,
            "base".to_string(),
            json!({"name": "base"}),
        ),
    ];
    s.replace_entities(A, &new).await?;

    assert_eq!(
        s.get_entity(A, EntityKind::Provider, "aws", None).await?,
        Some(json!({"name": "aws", "new": true, "version": 1}))
    );
    assert_eq!(
        s.get_entity(A, EntityKind::Provider, "aws", Some(2))
            .await?,
        None
    );
    assert_eq!(
        s.get_entity(A, EntityKind::Service, "old", None).await?,
        None
    );
    assert_eq!(
        s.list_entities(A, EntityKind::Service).await?,
        vec![json!({"name": "hdfs", "version": 1})]
    );
    assert_eq!(
        s.list_entities(A, EntityKind::PartialTemplate).await?.len(),
        1
    );
    // Plugin types and other tenants are not touched.
    assert!(s
        .get_entity(A, EntityKind::AutomatorType, "chef-solo", None)
        .await?
        .is_some());
    assert!(s
        .get_entity(B, EntityKind::Service, "old", None)
        .await?
        .is_some());

    s.replace_entities(A, &[]).await?;
    for kind in EntityKind::ADMIN {
        assert!(
            s.list_entities(A, kind).await?.is_empty(),
            "{kind:?} is empty after an empty import"
        );
    }
    Ok(())
}

async fn concurrent_puts_get_distinct_consecutive_versions(ctx: &Ctx) -> Result<()> {
    const TASKS: u64 = 8;
    const PUTS: u64 = 4;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let s: Arc<dyn Store> = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            let mut versions = Vec::new();
            for p in 0..PUTS {
                let body = json!({"name": "busy", "task": t, "put": p});
                versions.push(s.put_entity(A, EntityKind::Service, "busy", &body).await?);
            }
            Ok::<_, StoreError>(versions)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await??);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=TASKS * PUTS).collect::<Vec<_>>());
    let latest = ctx
        .store
        .get_entity(A, EntityKind::Service, "busy", None)
        .await?
        .context("busy")?;
    assert_eq!(version_of(&latest), Some(TASKS * PUTS));
    Ok(())
}

async fn concurrent_creates_let_exactly_one_win(ctx: &Ctx) -> Result<()> {
    let mut handles = Vec::new();
    for t in 0..8 {
        let s: Arc<dyn Store> = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            s.create_entity(
                A,
                EntityKind::Provider,
                "race",
                &json!({"name": "race", "task": t}),
            )
            .await
        }));
    }
    let (mut won, mut conflicts) = (Vec::new(), 0);
    for h in handles {
        match h.await? {
            Ok(v) => won.push(v),
            Err(StoreError::Conflict(_)) => conflicts += 1,
            Err(e) => return Err(e.into()),
        }
    }
    assert_eq!(won, [1]);
    assert_eq!(conflicts, 7);
    Ok(())
}

// ---- tenant isolation --------------------------------------------------------------------------

async fn tenants_never_see_each_other(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.put_entity(
        A,
        EntityKind::ClusterTemplate,
        "hadoop",
        &json!({"name": "hadoop"}),
    )
    .await?;
    let v = s.create_resource_version(&rkey(A, "cb")).await?;
    s.stage_resource(&rkey(A, "cb"), v).await?;
    s.sync_resources(A).await?;
    s.put_profile(A, "alice", &json!({"theme": "dark"})).await?;

    assert_eq!(
        s.get_entity(B, EntityKind::ClusterTemplate, "hadoop", None)
            .await?,
        None
    );
    assert_eq!(
        s.get_entity(B, EntityKind::ClusterTemplate, "hadoop", Some(1))
            .await?,
        None
    );
    assert!(s
        .list_entities(B, EntityKind::ClusterTemplate)
        .await?
        .is_empty());
    assert!(statuses(s, B, None).await?.is_empty());
    assert!(s.live_resources(B).await?.is_empty());
    assert!(s.sync_resources(B).await?.is_empty());
    assert_eq!(s.get_profile(B, "alice").await?, None);
    assert!(!s.stage_resource(&rkey(B, "cb"), v).await?);
    assert!(!s.recall_resource(&rkey(B, "cb"), v).await?);

    // Writes and deletes in B leave A alone.
    assert_eq!(
        s.put_entity(
            B,
            EntityKind::ClusterTemplate,
            "hadoop",
            &json!({"name": "hadoop"})
        )
        .await?,
        1
    );
    assert_eq!(s.create_resource_version(&rkey(B, "cb")).await?, 1);
    s.delete_entity(B, EntityKind::ClusterTemplate, "hadoop", None)
        .await?;
    assert_eq!(
        s.delete_resource(&rkey(B, "cb"), None).await?,
        ResourceDelete::Deleted
    );
    s.delete_profile(B, "alice").await?;
    s.replace_entities(B, &[]).await?;

    assert!(s
        .get_entity(A, EntityKind::ClusterTemplate, "hadoop", None)
        .await?
        .is_some());
    assert_eq!(
        statuses(s, A, None).await?,
        [row("cb", 1, ResourceStatus::Active)]
    );
    assert_eq!(s.live_resources(A).await?.len(), 1);
    assert_eq!(
        s.get_profile(A, "alice").await?,
        Some(json!({"theme": "dark"}))
    );
    Ok(())
}

// ---- plugin resources --------------------------------------------------------------------------

async fn resources_move_through_their_statuses(ctx: &Ctx) -> Result<()> {
    use ResourceStatus::*;
    let s = &*ctx.store;
    let k = rkey(A, "hadoop");
    assert_eq!(s.create_resource_version(&k).await?, 1);
    assert_eq!(s.create_resource_version(&k).await?, 2);
    assert_eq!(
        statuses(s, A, Some("hadoop")).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Inactive)]
    );

    assert!(s.stage_resource(&k, 1).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Staged), row("hadoop", 2, Inactive)]
    );
    // Staging another version un-slates the first: staged -> inactive.
    assert!(s.stage_resource(&k, 2).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Staged)]
    );
    assert!(
        s.live_resources(A).await?.is_empty(),
        "staged is not live before a sync"
    );

    let live = s.sync_resources(A).await?;
    assert_eq!(live.len(), 1);
    assert_eq!(
        (
            live[0].key.clone(),
            live[0].meta.version,
            live[0].meta.status
        ),
        (k.clone(), 2, Active)
    );
    assert_eq!(s.live_resources(A).await?, live);

    // Staging v1 while v2 is active: v1 staged, v2 recalled; sync swaps them.
    assert!(s.stage_resource(&k, 1).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Staged), row("hadoop", 2, Recalled)]
    );
    // Staging a recalled version makes it active again.
    assert!(s.stage_resource(&k, 2).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Active)]
    );
    assert!(s.stage_resource(&k, 1).await?);
    let live = s.sync_resources(A).await?;
    assert_eq!(live.iter().map(|r| r.meta.version).collect::<Vec<_>>(), [1]);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Active), row("hadoop", 2, Inactive)]
    );

    // Recall: active -> recalled -> (sync) inactive; staged -> inactive at once.
    assert!(s.recall_resource(&k, 1).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Recalled), row("hadoop", 2, Inactive)]
    );
    assert!(s.sync_resources(A).await?.is_empty());
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Inactive)]
    );
    assert!(s.stage_resource(&k, 2).await?);
    assert!(s.recall_resource(&k, 2).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Inactive)]
    );
    // Recalling an inactive version changes nothing.
    assert!(s.recall_resource(&k, 2).await?);
    assert_eq!(
        statuses(s, A, None).await?,
        [row("hadoop", 1, Inactive), row("hadoop", 2, Inactive)]
    );

    assert!(!s.stage_resource(&k, 3).await?);
    assert!(!s.recall_resource(&k, 3).await?);
    assert!(!s.stage_resource(&rkey(A, "absent"), 1).await?);
    Ok(())
}

async fn resources_list_by_name_then_version(ctx: &Ctx) -> Result<()> {
    use ResourceStatus::*;
    let s = &*ctx.store;
    for name in ["zk", "hadoop", "zk", "Hbase"] {
        s.create_resource_version(&rkey(A, name)).await?;
    }
    // Other plugins and resource types are listed separately.
    let mut other = rkey(A, "hadoop");
    other.rtype = "data_bags".into();
    assert_eq!(s.create_resource_version(&other).await?, 1);
    s.stage_resource(&rkey(A, "zk"), 2).await?;

    assert_eq!(
        statuses(s, A, None).await?,
        [
            row("Hbase", 1, Inactive),
            row("hadoop", 1, Inactive),
            row("zk", 1, Inactive),
            row("zk", 2, Staged)
        ]
    );
    assert_eq!(
        statuses(s, A, Some("zk")).await?,
        [row("zk", 1, Inactive), row("zk", 2, Staged)]
    );
    assert!(statuses(s, A, Some("absent")).await?.is_empty());
    let rows = s
        .list_resources(A, "automatortypes", "chef-solo", "data_bags", None)
        .await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].key, other);
    Ok(())
}

async fn resources_are_deleted_only_when_inactive(ctx: &Ctx) -> Result<()> {
    use ResourceStatus::*;
    let s = &*ctx.store;
    let k = rkey(A, "keys");
    for _ in 0..3 {
        s.create_resource_version(&k).await?;
    }
    s.stage_resource(&k, 2).await?;
    assert_eq!(
        s.delete_resource(&k, Some(2)).await?,
        ResourceDelete::NotDeletable
    );
    assert_eq!(
        s.delete_resource(&k, None).await?,
        ResourceDelete::NotDeletable
    );
    assert_eq!(statuses(s, A, None).await?.len(), 3, "nothing was removed");

    assert_eq!(
        s.delete_resource(&k, Some(3)).await?,
        ResourceDelete::Deleted
    );
    assert_eq!(
        s.delete_resource(&k, Some(3)).await?,
        ResourceDelete::Deleted,
        "idempotent"
    );
    assert_eq!(
        statuses(s, A, None).await?,
        [row("keys", 1, Inactive), row("keys", 2, Staged)]
    );
    // Versions continue from the highest stored one.
    assert_eq!(s.create_resource_version(&k).await?, 3);

    s.sync_resources(A).await?; // v2 active
    assert_eq!(
        s.delete_resource(&k, Some(2)).await?,
        ResourceDelete::NotDeletable
    );
    s.recall_resource(&k, 2).await?; // recalled: still live
    assert_eq!(
        s.delete_resource(&k, Some(2)).await?,
        ResourceDelete::NotDeletable
    );
    s.sync_resources(A).await?; // inactive
    assert_eq!(s.delete_resource(&k, None).await?, ResourceDelete::Deleted);
    assert!(statuses(s, A, None).await?.is_empty());
    assert_eq!(
        s.delete_resource(&k, None).await?,
        ResourceDelete::Deleted,
        "idempotent"
    );
    assert_eq!(s.create_resource_version(&k).await?, 1);
    Ok(())
}

// ---- profiles, provisioners, api keys ----------------------------------------------------------

async fn profiles_put_get_delete(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert_eq!(s.get_profile(A, "alice").await?, None);
    s.put_profile(A, "alice", &json!({"name": "Alice"})).await?;
    s.put_profile(A, "bob", &json!({"name": "Bob"})).await?;
    assert_eq!(
        s.get_profile(A, "alice").await?,
        Some(json!({"name": "Alice"}))
    );
    s.put_profile(A, "alice", &json!({"name": "Alice", "email": "a@x"}))
        .await?;
    assert_eq!(
        s.get_profile(A, "alice").await?,
        Some(json!({"name": "Alice", "email": "a@x"}))
    );
    s.delete_profile(A, "alice").await?;
    s.delete_profile(A, "alice").await?; // idempotent
    assert_eq!(s.get_profile(A, "alice").await?, None);
    assert_eq!(s.get_profile(A, "bob").await?, Some(json!({"name": "Bob"})));
    Ok(())
}

async fn provisioners_upsert_heartbeat_delete(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    assert!(s.list_provisioners().await?.is_empty());
    let p2 = provisioner("p2", 58025);
    let mut p1 = provisioner("p1", 1);
    s.upsert_provisioner(&p2).await?;
    s.upsert_provisioner(&p1).await?;
    assert_eq!(s.get_provisioner("p2").await?, Some(p2.clone()));
    assert_eq!(s.get_provisioner("p3").await?, None);
    assert_eq!(s.list_provisioners().await?, [p1.clone(), p2.clone()]);

    p1.port = 65535;
    p1.capacity_total = 20;
    p1.assignments = BTreeMap::from([(B.to_string(), 7)]);
    s.upsert_provisioner(&p1).await?;
    assert_eq!(s.get_provisioner("p1").await?, Some(p1.clone()));

    let usage = BTreeMap::from([(A.to_string(), 3)]);
    assert!(s.heartbeat_provisioner("p1", &usage, 1234).await?);
    assert!(!s.heartbeat_provisioner("p9", &usage, 1234).await?);
    let got = s.get_provisioner("p1").await?.context("p1")?;
    assert_eq!(
        (got.usage, got.last_heartbeat_ms, got.assignments),
        (usage, 1234, p1.assignments.clone())
    );

    assert!(s.delete_provisioner("p1").await?);
    assert!(!s.delete_provisioner("p1").await?);
    assert_eq!(s.list_provisioners().await?, [p2]);
    Ok(())
}

async fn api_keys_insert_find_list_delete(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    let k1 = api_key("k1", "hash-1", 300);
    let mut k2 = api_key("k2", "hash-2", 100);
    k2.admin = false;
    k2.tenant_id = B.into();
    s.insert_api_key(&k1).await?;
    s.insert_api_key(&k2).await?;
    assert!(matches!(
        s.insert_api_key(&api_key("k1", "hash-3", 1)).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.insert_api_key(&api_key("k3", "hash-1", 1)).await,
        Err(StoreError::Conflict(_))
    ));

    assert_eq!(s.api_key_by_hash("hash-1").await?, Some(k1.clone()));
    assert_eq!(s.api_key_by_hash("hash-2").await?, Some(k2.clone()));
    assert_eq!(s.api_key_by_hash("hash-3").await?, None);
    assert_eq!(
        s.list_api_keys().await?,
        [k2.clone(), k1.clone()],
        "by creation time"
    );

    assert!(s.delete_api_key("k2").await?);
    assert!(!s.delete_api_key("k2").await?);
    assert_eq!(s.list_api_keys().await?, [k1]);
    Ok(())
}

// ---- opening again -----------------------------------------------------------------------------

async fn reopening_keeps_data_and_migrations(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.put_entity(A, EntityKind::Service, "kept", &json!({"name": "kept"}))
        .await?;
    s.insert_tenant(&tenant(A, "kept", 2)).await?;
    let first = weft_store::open(&ctx.url).await?;
    let applied = first.applied_migrations().await?;
    assert_eq!(applied.len(), weft_store::MIGRATIONS.len());
    first.close().await;

    // Two more opens at the same time: neither fails, nothing is applied twice.
    let (a, b) = tokio::join!(weft_store::open(&ctx.url), weft_store::open(&ctx.url));
    let (a, b) = (a?, b?);
    assert_eq!(
        a.applied_migrations().await?,
        applied,
        "migrations were not re-run"
    );
    assert_eq!(a.schema_version().await?, SCHEMA_VERSION);
    assert_eq!(
        b.get_entity(A, EntityKind::Service, "kept", None).await?,
        Some(json!({"name": "kept", "version": 1}))
    );
    assert_eq!(b.tenant_by_id(A).await?.map(|t| t.spec.workers), Some(2));
    let superadmins = b
        .list_tenants()
        .await?
        .into_iter()
        .filter(|t| t.id == SUPERADMIN)
        .count();
    assert_eq!(superadmins, 1);
    // Writes through one handle are seen through another.
    assert_eq!(
        a.put_entity(A, EntityKind::Service, "kept", &json!({"name": "kept"}))
            .await?,
        2
    );
    assert_eq!(
        version_of(
            &s.get_entity(A, EntityKind::Service, "kept", None)
                .await?
                .context("kept")?
        ),
        Some(2)
    );
    a.close().await;
    b.close().await;
    Ok(())
}

contract_tests!(
    schema_is_current_and_superadmin_exists,
    tenants_insert_update_list_delete,
    create_entity_conflicts_when_any_version_exists,
    put_entity_writes_new_versions,
    deleted_versions_make_room_for_max_plus_one,
    list_entities_gives_latest_versions_by_name,
    entity_versions_lists_every_version_oldest_first,
    replace_entities_swaps_the_admin_kinds,
    concurrent_puts_get_distinct_consecutive_versions,
    concurrent_creates_let_exactly_one_win,
    tenants_never_see_each_other,
    resources_move_through_their_statuses,
    resources_list_by_name_then_version,
    resources_are_deleted_only_when_inactive,
    profiles_put_get_delete,
    provisioners_upsert_heartbeat_delete,
    api_keys_insert_find_list_delete,
    reopening_keeps_data_and_migrations,
);
