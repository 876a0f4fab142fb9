//! The host-pool part of the store contract (hosts added, changed, deleted; reservations all or
//! nothing, matched by labels, never sharing a host under concurrency; releases), run against
//! every backend like `contract`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{bail, ensure, Result};
use weft_model::{HostState, LabelSelector};
use weft_store::{
    ChangeSet, ClusterRow, HostDelete, HostRequest, NodeRow, PoolHostRow, Reservation, Store,
    StoreError, Write,
};

use crate::harness::{contract_tests, Ctx};

const A: &str = "tenant-a";
const B: &str = "tenant-b";
const KEY: &str =
    "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n-----END OPENSSH PRIVATE KEY-----\n";

fn host(tenant: &str, provider: &str, id: &str, port: u16, labels: &[(&str, &str)]) -> PoolHostRow {
    PoolHostRow {
        tenant_id: tenant.into(),
        provider: provider.into(),
        id: id.into(),
        address: "10.0.0.1".into(),
        port,
        user: "weft".into(),
        key: KEY.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        lease: None,
        create_time: 1_000,
    }
}

fn req(node: &str, selector: &str) -> HostRequest {
    HostRequest {
        node_id: node.into(),
        selector: LabelSelector::parse(selector),
    }
}

fn reserved(r: Reservation) -> Result<Vec<PoolHostRow>> {
    match r {
        Reservation::Reserved(h) => Ok(h),
        Reservation::Short(s) => bail!("expected a reservation, got {s:?}"),
    }
}

async fn states(
    s: &dyn Store,
    tenant: &str,
    provider: &str,
) -> Result<BTreeMap<String, HostState>> {
    Ok(s.list_pool_hosts(tenant, Some(provider))
        .await?
        .into_iter()
        .map(|h| (h.id.clone(), h.state()))
        .collect())
}

async fn hosts_are_added_listed_changed_and_deleted(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.insert_pool_host(&host(A, "pool", "h1", 22, &[("disk", "ssd")]))
        .await?;
    s.insert_pool_host(&host(A, "pool", "h2", 2222, &[]))
        .await?;
    // Same id, or same address and port in any pool of the tenant: refused.
    for dup in [
        host(A, "pool", "h1", 2200, &[]),
        host(A, "other", "h9", 22, &[]),
    ] {
        match s.insert_pool_host(&dup).await {
            Err(StoreError::Conflict(what)) => ensure!(what.contains(&dup.id), "{what}"),
            other => bail!("expected a conflict for {}, got {other:?}", dup.id),
        }
    }
    // Another tenant's pools are its own.
    s.insert_pool_host(&host(B, "pool", "h1", 22, &[])).await?;
    s.insert_pool_host(&host(A, "other", "h1", 23, &[])).await?;

    let list = s.list_pool_hosts(A, Some("pool")).await?;
    ensure!(list.iter().map(|h| h.id.as_str()).collect::<Vec<_>>() == ["h1", "h2"]);
    ensure!(list[0].key == KEY && list[0].labels["disk"] == "ssd");
    ensure!(list[0].state() == HostState::Free && list[0].lease.is_none());
    let all = s.list_pool_hosts(A, None).await?;
    ensure!(
        all.iter()
            .map(|h| (h.provider.as_str(), h.id.as_str()))
            .collect::<Vec<_>>()
            == [("other", "h1"), ("pool", "h1"), ("pool", "h2")]
    );
    ensure!(
        format!("{:?}", list[0]).contains("********")
            && !format!("{:?}", list[0]).contains("secret")
    );

    let mut changed = host(A, "pool", "h2", 2022, &[("rack", "r1")]);
    changed.address = "10.0.0.2".into();
    changed.user = "root".into();
    ensure!(s.update_pool_host(&changed).await?);
    let got = s.get_pool_host(A, "pool", "h2").await?.expect("h2");
    ensure!(got.address == "10.0.0.2" && got.port == 2022 && got.user == "root");
    ensure!(got.labels.get("rack").map(String::as_str) == Some("r1"));
    ensure!(!s.update_pool_host(&host(A, "pool", "nope", 1, &[])).await?);
    let mut clash = changed.clone();
    clash.address = "10.0.0.1".into();
    clash.port = 22;
    ensure!(matches!(
        s.update_pool_host(&clash).await,
        Err(StoreError::Conflict(_))
    ));

    ensure!(s.delete_pool_host(A, "pool", "h2").await? == HostDelete::Deleted);
    ensure!(s.delete_pool_host(A, "pool", "h2").await? == HostDelete::Missing);
    ensure!(s.get_pool_host(A, "pool", "h2").await?.is_none());
    ensure!(s.get_pool_host(B, "pool", "h1").await?.is_some());
    Ok(())
}

async fn reservations_match_labels_and_take_all_or_nothing(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    s.insert_pool_host(&host(A, "pool", "h1", 1, &[("disk", "ssd")]))
        .await?;
    s.insert_pool_host(&host(A, "pool", "h2", 2, &[("disk", "ssd")]))
        .await?;
    s.insert_pool_host(&host(A, "pool", "h3", 3, &[("disk", "hdd")]))
        .await?;
    let before = states(s, A, "pool").await?;

    // Three ssd nodes, two ssd hosts: nothing is taken.
    let three = [
        req("n1", "disk=ssd"),
        req("n2", "disk=ssd"),
        req("n3", "disk=ssd"),
    ];
    match s.reserve_pool_hosts(A, "pool", 7, &three, 50).await? {
        Reservation::Short(short) => {
            ensure!((short.needed, short.free) == (3, 2), "{short:?}");
            ensure!(short.groups.len() == 1 && short.groups[0].selector.to_string() == "disk=ssd");
        }
        other => bail!("expected a shortfall, got {other:?}"),
    }
    ensure!(
        states(s, A, "pool").await? == before,
        "a failed reservation takes nothing"
    );
    // Another tenant's pool of the same name does not help.
    s.insert_pool_host(&host(B, "pool", "h9", 9, &[("disk", "ssd")]))
        .await?;
    ensure!(matches!(
        s.reserve_pool_hosts(A, "pool", 7, &three, 50).await?,
        Reservation::Short(_)
    ));

    // "Any host" and "ssd": a matching, not a greedy pick (any must leave the ssd hosts alone
    // only when it has to).
    let wants = [req("n1", ""), req("n2", "disk=ssd"), req("n3", "disk=ssd")];
    let got = reserved(s.reserve_pool_hosts(A, "pool", 7, &wants, 100).await?)?;
    ensure!(
        got[0].id == "h3",
        "the any-host node leaves the ssd hosts to the others: {got:?}"
    );
    ensure!(
        BTreeSet::from([got[1].id.as_str(), got[2].id.as_str()]) == BTreeSet::from(["h1", "h2"])
    );
    for (h, r) in got.iter().zip(&wants) {
        let lease = h.lease.as_ref().expect("lent");
        ensure!(lease.node_id == r.node_id && lease.cluster_id == 7 && lease.since == 100);
        ensure!(lease.state == HostState::Reserved);
    }
    // Asking again for the same nodes keeps their hosts.
    let again = reserved(s.reserve_pool_hosts(A, "pool", 7, &wants, 200).await?)?;
    ensure!(again.iter().map(|h| &h.id).eq(got.iter().map(|h| &h.id)));
    // The pool is empty now.
    ensure!(matches!(
        s.reserve_pool_hosts(A, "pool", 8, &[req("m1", "")], 300)
            .await?,
        Reservation::Short(_)
    ));
    // An empty reservation always succeeds.
    ensure!(reserved(s.reserve_pool_hosts(A, "pool", 8, &[], 300).await?)?.is_empty());

    let nodes: Vec<String> = vec!["n1".into(), "n2".into()];
    ensure!(s.confirm_pool_hosts(A, 7, &nodes).await? == 2);
    ensure!(s.confirm_pool_hosts(A, 7, &nodes).await? == 0);
    let n2_host = got[1].id.clone();
    let n3_host = got[2].id.clone();
    let st = states(s, A, "pool").await?;
    ensure!(st["h3"] == HostState::InUse && st[&n2_host] == HostState::InUse);
    ensure!(st[&n3_host] == HostState::Reserved);

    match s.delete_pool_host(A, "pool", &n2_host).await? {
        HostDelete::InUse(lease) => ensure!(lease.node_id == "n2" && lease.cluster_id == 7),
        other => bail!("a lent host is not deleted: {other:?}"),
    }
    let lent = s.cluster_pool_hosts(A, 7).await?;
    ensure!(lent.len() == 3);
    ensure!(s.cluster_pool_hosts(A, 8).await?.is_empty());

    // Releasing a node (of the right cluster only) frees its host.
    ensure!(s.release_pool_node(A, 8, "n2").await?.is_none());
    let freed = s
        .release_pool_node(A, 7, "n2")
        .await?
        .expect("n2 held a host");
    ensure!(freed.id == n2_host);
    ensure!(s.release_pool_node(A, 7, "n2").await?.is_none());
    ensure!(states(s, A, "pool").await?[&n2_host] == HostState::Free);
    let got = reserved(
        s.reserve_pool_hosts(A, "pool", 8, &[req("m1", "disk=ssd")], 400)
            .await?,
    )?;
    ensure!(got[0].id == n2_host);

    let lent_all: Vec<PoolHostRow> = s
        .list_pool_hosts(A, None)
        .await?
        .into_iter()
        .filter(|h| h.lease.is_some())
        .collect();
    ensure!(
        lent_all
            .iter()
            .map(|h| (h.lease.as_ref().unwrap().cluster_id, h.id.as_str()))
            .collect::<BTreeSet<_>>()
            == BTreeSet::from([(7, n3_host.as_str()), (7, "h3"), (8, n2_host.as_str())])
    );
    let freed = s.release_pool_cluster(A, 7).await?;
    ensure!(freed.len() == 2);
    ensure!(s.cluster_pool_hosts(A, 7).await?.is_empty());
    ensure!(s.cluster_pool_hosts(A, 8).await?.len() == 1);

    s.delete_tenant(A).await?;
    ensure!(s.list_pool_hosts(A, None).await?.is_empty());
    ensure!(s.list_pool_hosts(B, None).await?.len() == 1);
    Ok(())
}

async fn concurrent_reservations_never_share_a_host(ctx: &Ctx) -> Result<()> {
    const HOSTS: u16 = 10;
    const RACERS: u64 = 8;
    const EACH: usize = 3;
    for i in 0..HOSTS {
        ctx.store
            .insert_pool_host(&host(A, "pool", &format!("h{i:02}"), 100 + i, &[]))
            .await?;
    }
    let start = Arc::new(tokio::sync::Barrier::new(RACERS as usize));
    let mut handles = Vec::new();
    for c in 1..=RACERS {
        let s: Arc<dyn Store> = ctx.store.clone();
        let start = start.clone();
        handles.push(tokio::spawn(async move {
            let reqs: Vec<HostRequest> =
                (0..EACH).map(|n| req(&format!("c{c}-n{n}"), "")).collect();
            start.wait().await;
            (c, s.reserve_pool_hosts(A, "pool", c, &reqs, 1).await)
        }));
    }
    let mut taken: BTreeMap<String, u64> = BTreeMap::new();
    let mut winners = 0;
    for h in handles {
        let (c, r) = h.await?;
        match r? {
            Reservation::Reserved(hosts) => {
                winners += 1;
                ensure!(hosts.len() == EACH);
                for h in hosts {
                    if let Some(other) = taken.insert(h.id.clone(), c) {
                        bail!("host {} given to clusters {other} and {c}", h.id);
                    }
                }
            }
            Reservation::Short(s) => ensure!(s.free < EACH, "refused with enough free: {s:?}"),
        }
    }
    ensure!(winners == HOSTS as usize / EACH, "{winners} winners");
    // What the store says agrees with what the winners were told.
    let lent: Vec<PoolHostRow> = ctx
        .store
        .list_pool_hosts(A, Some("pool"))
        .await?
        .into_iter()
        .filter(|h| h.lease.is_some())
        .collect();
    ensure!(lent.len() == taken.len());
    for h in lent {
        let lease = h.lease.expect("lent");
        ensure!(taken[&h.id] == lease.cluster_id);
        ensure!(lease
            .node_id
            .starts_with(&format!("c{}-", lease.cluster_id)));
    }
    Ok(())
}

fn cluster_row(tenant: &str, id: u64, status: &str) -> Write {
    Write::Cluster(ClusterRow {
        tenant_id: tenant.into(),
        id,
        owner: "alice".into(),
        name: format!("c{id}"),
        status: weft_store::engine::cluster_status(status).expect("a cluster status"),
        create_time: 1,
        expire_time: 0,
        latest_job: None,
        rev: 0,
        node_count: 0,
        body: serde_json::json!({}),
    })
}

fn node_row(tenant: &str, cluster_id: u64, id: &str) -> Write {
    Write::Node(NodeRow {
        tenant_id: tenant.into(),
        cluster_id,
        id: id.into(),
        nodenum: 1000,
        rev: 0,
        body: serde_json::json!({"id": id}),
    })
}

async fn commit(s: &dyn Store, writes: Vec<Write>) -> Result<()> {
    let mut cs = ChangeSet::new();
    for w in writes {
        cs.write(w);
    }
    Ok(s.commit(&cs).await?)
}

/// Host id -> (state, node) of a tenant's pool.
async fn leases(s: &dyn Store, tenant: &str) -> Result<BTreeMap<String, (HostState, String)>> {
    Ok(s.list_pool_hosts(tenant, Some("pool"))
        .await?
        .into_iter()
        .map(|h| {
            let node = h
                .lease
                .as_ref()
                .map(|l| l.node_id.clone())
                .unwrap_or_default();
            (h.id.clone(), (h.state(), node))
        })
        .collect())
}

async fn settling_frees_hosts_whose_node_left_or_whose_cluster_ended(ctx: &Ctx) -> Result<()> {
    let s = &*ctx.store;
    for i in 1..=4u16 {
        s.insert_pool_host(&host(A, "pool", &format!("h{i}"), i, &[]))
            .await?;
    }
    s.insert_pool_host(&host(B, "pool", "b1", 1, &[])).await?;
    let take = |cluster: u64, node: &'static str| async move {
        reserved(
            s.reserve_pool_hosts(A, "pool", cluster, &[req(node, "")], 1_000)
                .await?,
        )
    };
    take(1, "n1").await?;
    take(1, "n2").await?;
    take(2, "m1").await?;
    take(3, "ghost").await?; // its cluster is never recorded
                             // Tenant b's host is lent to "cluster 1, node n1" too: tenant a's rows must not count for it.
    reserved(
        s.reserve_pool_hosts(B, "pool", 1, &[req("n1", "")], 1_000)
            .await?,
    )?;
    commit(
        s,
        vec![
            cluster_row(A, 1, "active"),
            node_row(A, 1, "n1"),
            node_row(A, 1, "n2"),
            cluster_row(A, 2, "active"),
            node_row(A, 2, "m1"),
        ],
    )
    .await?;

    // Recorded nodes' hosts become in use; the unrecorded one waits for its grace.
    ensure!(s.settle_pool_hosts(None, 500).await?.is_empty());
    let l = leases(s, A).await?;
    ensure!(
        l.values().filter(|(st, _)| *st == HostState::InUse).count() == 3,
        "{l:?}"
    );
    ensure!(
        l.values()
            .any(|(st, n)| *st == HostState::Reserved && n == "ghost"),
        "{l:?}"
    );
    ensure!(leases(s, B).await?["b1"].0 == HostState::Reserved);
    // A cluster's scope leaves other clusters and tenants alone.
    ensure!(s.settle_pool_hosts(Some((A, 1)), 5_000).await?.is_empty());
    ensure!(leases(s, B).await?["b1"].0 == HostState::Reserved);
    // Past the grace, the ghost's host and tenant b's host go back.
    let freed = s.settle_pool_hosts(None, 5_000).await?;
    ensure!(
        freed
            .iter()
            .map(|h| (
                h.tenant_id.as_str(),
                h.lease.as_ref().unwrap().node_id.as_str()
            ))
            .collect::<BTreeSet<_>>()
            == BTreeSet::from([(A, "ghost"), (B, "n1")]),
        "{freed:?}"
    );

    // A node that leaves gives its host back (in use: no grace).
    commit(
        s,
        vec![Write::DeleteNode {
            tenant_id: A.into(),
            id: "n2".into(),
        }],
    )
    .await?;
    let freed = s.settle_pool_hosts(Some((A, 1)), 0).await?;
    ensure!(freed.len() == 1 && freed[0].lease.as_ref().unwrap().node_id == "n2");
    // A terminated cluster gives every host back, its nodes still recorded or not.
    commit(s, vec![cluster_row(A, 2, "terminated")]).await?;
    ensure!(s.settle_pool_hosts(Some((A, 1)), 0).await?.is_empty());
    let freed = s.settle_pool_hosts(None, 0).await?;
    ensure!(freed.len() == 1 && freed[0].lease.as_ref().unwrap().node_id == "m1");
    let l = leases(s, A).await?;
    ensure!(
        l.values().filter(|(st, _)| *st == HostState::Free).count() == 3,
        "only n1's host is still lent: {l:?}"
    );
    ensure!(l
        .values()
        .any(|(st, n)| *st == HostState::InUse && n == "n1"));
    ensure!(s.settle_pool_hosts(None, i64::MAX).await?.is_empty());
    Ok(())
}

contract_tests!(
    hosts_are_added_listed_changed_and_deleted,
    reservations_match_labels_and_take_all_or_nothing,
    concurrent_reservations_never_share_a_host,
    settling_frees_hosts_whose_node_left_or_whose_cluster_ended,
);
