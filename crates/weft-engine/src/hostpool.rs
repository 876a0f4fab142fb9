//! Host pools in the engine: lending hosts to new nodes and taking them back.
//!
//! **Taking.** When a cluster of a provider whose type is `hostpool` gets new nodes (a create, an
//! expand, a service added on new nodes), [`take_for_rows`] / [`take_for_new`] reserve one free
//! host of the provider's pool per new node, all or nothing, **before** the job is committed. The
//! host must carry the labels its hardware type's `flavor` names for the provider
//! ([`weft_model::LabelSelector`]). A pool too small for the request answers 409, naming the pool
//! and the counts, and takes nothing. The new node gets the host: `ipaddresses.access_v4`, and in
//! its provisioner results (which every task of the node receives in its `config`) `ssh-auth`
//! `{user, key, port}` and `hostpool` `{provider, host}`. [`Taken::settle`] then marks the hosts
//! `in_use` when the commit went through, or gives them back when it did not.
//!
//! **Giving back.** A host goes back to its pool when its node is gone (a shrink's retired nodes,
//! an admin's node delete) or its cluster is terminated (a completed CLUSTER_DELETE, which ran
//! the provider's DELETE, and with it the pool's wipe command, on every node). [`sweep_cluster`]
//! does this for one cluster when one of its jobs succeeds (the listener [`spawn`] starts), and
//! [`sweep`] for every lent host at each janitor round, in case a notice was lost. A host only
//! `reserved` (its node's commit not yet seen) is left alone for [`RESERVE_GRACE_MS`], so a
//! sweep never frees a host whose node is about to be recorded.

use std::collections::BTreeSet;

use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use weft_model::{LabelSelector, Node, PoolHost, Provider};
use weft_store::{HostRequest, NodeRow, PoolHostRow, Reservation, Shortfall};

use crate::body::{from_body, to_body};
use crate::error::{EngineError, EngineResult};
use crate::Engine;
use crate::{cluster_id_text, JobEventKind};

/// How long a host may stay `reserved` for a node that no store read finds before a sweep gives
/// it back (the engine commits a job within moments of reserving its hosts; this only frees hosts
/// of a server that stopped in between).
pub const RESERVE_GRACE_MS: i64 = 10 * 60 * 1000;

/// Hosts taken for a job not yet committed. Hand the commit's outcome to [`Taken::settle`].
#[derive(Debug, Default)]
#[must_use = "settle the hosts after the commit"]
pub struct Taken {
    tenant_id: String,
    cluster_id: u64,
    nodes: Vec<String>,
}

impl Taken {
    /// After the job's commit: the hosts are `in_use` if it went through, back in the pool if
    /// not. Errors are logged: a later sweep settles what this could not.
    pub async fn settle(self, st: &Engine, committed: bool) {
        if self.nodes.is_empty() {
            return;
        }
        if committed {
            if let Err(e) = st
                .store
                .confirm_pool_hosts(&self.tenant_id, self.cluster_id, &self.nodes)
                .await
            {
                tracing::warn!(cluster_id = self.cluster_id, error = %e, "confirming pool hosts");
            }
            return;
        }
        for node in &self.nodes {
            match st
                .store
                .release_pool_node(&self.tenant_id, self.cluster_id, node)
                .await
            {
                Ok(Some(h)) => {
                    tracing::info!(cluster_id = self.cluster_id, host = %h.id, "job not recorded; host back in its pool")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(cluster_id = self.cluster_id, node_id = %node, error = %e, "giving a pool host back")
                }
            }
        }
    }
}

/// Whether the provider lends hosts from a pool.
pub fn is_pool(provider: &Provider) -> bool {
    provider.providertype == weft_model::hostpool::HOSTPOOL
}

/// Takes a host for each node of a new cluster (its node rows, before they are committed) and
/// writes the host into the rows. Nothing to do unless the provider is a host pool.
pub async fn take_for_rows(
    st: &Engine,
    tenant_id: &str,
    provider: &Provider,
    cluster_id: u64,
    rows: &mut [NodeRow],
) -> EngineResult<Taken> {
    if !is_pool(provider) {
        return Ok(Taken::default());
    }
    let mut nodes: Vec<Node> = rows
        .iter()
        .map(|r| from_body(&r.body))
        .collect::<EngineResult<_>>()?;
    let taken = take(
        st,
        tenant_id,
        provider,
        cluster_id,
        nodes.iter_mut().collect(),
    )
    .await?;
    for (row, node) in rows.iter_mut().zip(&nodes) {
        row.body = to_body(node)?;
    }
    Ok(taken)
}

/// Takes a host for each node of `after` that is not among `existing` (the nodes an operation
/// adds to a cluster), writing the host into those nodes. Nothing to do unless the provider is a
/// host pool.
pub async fn take_for_new(
    st: &Engine,
    tenant_id: &str,
    provider: &Provider,
    cluster_id: u64,
    existing: &[Node],
    after: &mut [Node],
) -> EngineResult<Taken> {
    if !is_pool(provider) {
        return Ok(Taken::default());
    }
    let old: BTreeSet<&str> = existing.iter().map(|n| n.id.as_str()).collect();
    let new: Vec<&mut Node> = after
        .iter_mut()
        .filter(|n| !old.contains(n.id.as_str()))
        .collect();
    take(st, tenant_id, provider, cluster_id, new).await
}

/// The label selector of a node: its hardware type's `flavor` for the provider.
pub fn selector(node: &Node) -> LabelSelector {
    LabelSelector::parse(node.properties.flavor.as_deref().unwrap_or(""))
}

async fn take(
    st: &Engine,
    tenant_id: &str,
    provider: &Provider,
    cluster_id: u64,
    mut nodes: Vec<&mut Node>,
) -> EngineResult<Taken> {
    if nodes.is_empty() {
        return Ok(Taken::default());
    }
    let requests: Vec<HostRequest> = nodes
        .iter()
        .map(|n| HostRequest {
            node_id: n.id.clone(),
            selector: selector(n),
        })
        .collect();
    let hosts = match st
        .store
        .reserve_pool_hosts(
            tenant_id,
            &provider.name,
            cluster_id,
            &requests,
            st.now_ms(),
        )
        .await?
    {
        Reservation::Reserved(h) => h,
        Reservation::Short(s) => {
            return Err(EngineError::PoolShort(short_message(&provider.name, &s)))
        }
    };
    for (node, host) in nodes.iter_mut().zip(&hosts) {
        lend(node, host);
    }
    tracing::info!(cluster_id, provider = %provider.name,
        hosts = %hosts.iter().map(|h| h.id.as_str()).collect::<Vec<_>>().join(","), "pool hosts reserved");
    Ok(Taken {
        tenant_id: tenant_id.into(),
        cluster_id,
        nodes: requests.into_iter().map(|r| r.node_id).collect(),
    })
}

/// Writes a host into its node: where and how the provisioner reaches it.
fn lend(node: &mut Node, host: &PoolHostRow) {
    node.properties
        .ipaddresses
        .insert("access_v4".into(), host.address.clone());
    node.properties.sshuser = host.user.clone();
    node.provisioner_results.insert(
        "ssh-auth".into(),
        json!({"user": host.user, "key": host.key, "port": host.port}),
    );
    node.provisioner_results.insert(
        "hostpool".into(),
        json!({"provider": host.provider, "host": host.id}),
    );
}

/// The 409's text: the pool, and per flavor how many nodes need a host and how many match.
pub fn short_message(provider: &str, s: &Shortfall) -> String {
    let mut msg = format!(
        "host pool of provider {provider} is short: {} new nodes need a host each, and {} free hosts match",
        s.needed, s.free
    );
    let groups: Vec<String> = s
        .groups
        .iter()
        .map(|g| {
            format!(
                "{} needed and {} free with labels {}",
                g.needed, g.free, g.selector
            )
        })
        .collect();
    if s.groups.len() > 1 || s.groups.iter().any(|g| !g.selector.is_empty()) {
        msg.push_str(&format!(" ({})", groups.join("; ")));
    }
    msg.push_str("; nothing was taken");
    msg
}

/// A host as the API shows it: the key masked.
pub fn view(h: &PoolHostRow) -> PoolHost {
    let lease = h.lease.as_ref();
    PoolHost {
        id: h.id.clone(),
        provider: h.provider.clone(),
        address: h.address.clone(),
        port: h.port,
        user: h.user.clone(),
        key: weft_model::hostpool::KEY_MASK.into(),
        labels: h.labels.clone(),
        state: h.state(),
        cluster_id: lease.map(|l| cluster_id_text(l.cluster_id)),
        node_id: lease.map(|l| l.node_id.clone()),
        reserve_time: lease.map(|l| l.since),
        create_time: h.create_time,
    }
}

/// Gives back the hosts of one cluster whose node is gone, or all of them once the cluster is
/// terminated; marks `in_use` those only `reserved` whose node is recorded. Returns the hosts
/// given back.
pub async fn sweep_cluster(
    st: &Engine,
    tenant_id: &str,
    cluster_id: u64,
) -> EngineResult<Vec<PoolHostRow>> {
    let freed = st
        .store
        .settle_pool_hosts(
            Some((tenant_id, cluster_id)),
            st.now_ms() - RESERVE_GRACE_MS,
        )
        .await?;
    log_freed(&freed);
    Ok(freed)
}

/// [`sweep_cluster`] for every lent host of every tenant, at time `now` (the janitor).
pub async fn sweep(st: &Engine, now: i64) -> EngineResult<Vec<PoolHostRow>> {
    let freed = st
        .store
        .settle_pool_hosts(None, now - RESERVE_GRACE_MS)
        .await?;
    log_freed(&freed);
    Ok(freed)
}

fn log_freed(hosts: &[PoolHostRow]) {
    for h in hosts {
        if let Some(l) = &h.lease {
            tracing::info!(cluster_id = l.cluster_id, node_id = %l.node_id, host = %h.id,
                provider = %h.provider, "host back in its pool");
        }
    }
}

/// Sweeps a cluster each time one of its jobs succeeds (a delete terminates it, a shrink retires
/// nodes), for as long as the returned task lives. Subscribed before this returns.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    let mut rx = st.events.subscribe();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) if ev.kind == JobEventKind::Success => {
                    if let Err(e) = sweep_cluster(&st, &ev.tenant_id, ev.cluster_id).await {
                        tracing::warn!(cluster_id = ev.cluster_id, error = %e, "giving pool hosts back");
                    }
                }
                Ok(_) => {}
                // Lost notices: the janitor's sweep catches up.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    })
}
