//! Host pools: machines that already exist, registered per (tenant, provider) and lent to the
//! nodes of clusters of a `hostpool` provider ([`weft_model::hostpool`]).
//!
//! [`HostPoolStore`] is part of every [`Store`](crate::Store) (a supertrait). Its one rule: **a
//! host is lent to at most one node at a time**. [`reserve_pool_hosts`] takes hosts for a set of
//! nodes atomically, all or nothing: under concurrent reservations (threads or servers sharing a
//! PostgreSQL database) no host is handed out twice, and a reservation that cannot be met takes
//! nothing and says how many matching hosts are free against how many are needed. A host is
//! `reserved` from the moment it is taken until the engine has recorded its node
//! ([`confirm_pool_hosts`]), then `in_use` until it is released.
//!
//! [`reserve_pool_hosts`]: HostPoolStore::reserve_pool_hosts
//! [`confirm_pool_hosts`]: HostPoolStore::confirm_pool_hosts

use std::collections::BTreeMap;

use async_trait::async_trait;
use weft_model::{HostState, LabelSelector};

use crate::Result;

/// A host as stored, private key included. Never answer it as it is: the API masks `key`.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolHostRow {
    /// The tenant the host is registered in (its id).
    pub tenant_id: String,
    /// The provider (entity name) whose pool holds the host.
    pub provider: String,
    /// The host's id, unique in its pool (chosen by whoever registered it).
    pub id: String,
    /// The address the host is reached at over SSH (name or IP).
    pub address: String,
    /// Its SSH port.
    pub port: u16,
    /// The user to log in as.
    pub user: String,
    /// The SSH private key's text.
    pub key: String,
    /// Labels that node selectors match against.
    pub labels: BTreeMap<String, String>,
    /// `None` while the host is free.
    pub lease: Option<HostLease>,
    /// When the host was registered, in ms since the epoch.
    pub create_time: i64,
}

impl std::fmt::Debug for PoolHostRow {
    /// Everything but the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolHostRow")
            .field("tenant_id", &self.tenant_id)
            .field("provider", &self.provider)
            .field("id", &self.id)
            .field("address", &self.address)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("key", &weft_model::hostpool::KEY_MASK)
            .field("labels", &self.labels)
            .field("lease", &self.lease)
            .field("create_time", &self.create_time)
            .finish()
    }
}

impl PoolHostRow {
    /// `free`, `reserved` or `in_use`.
    pub fn state(&self) -> HostState {
        self.lease.as_ref().map_or(HostState::Free, |l| l.state)
    }
}

/// Which node holds a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLease {
    /// The cluster of the node that holds the host.
    pub cluster_id: u64,
    /// The node that holds the host.
    pub node_id: String,
    /// [`HostState::Reserved`] or [`HostState::InUse`].
    pub state: HostState,
    /// When the host was taken (ms since the epoch).
    pub since: i64,
}

/// One node that needs a host, and which hosts it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRequest {
    /// The node that needs a host.
    pub node_id: String,
    /// Which hosts may serve it: their labels must match.
    pub selector: LabelSelector,
}

/// What a reservation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Every request has its host, in request order (a node that already held a host of the pool
    /// keeps it).
    Reserved(Vec<PoolHostRow>),
    /// Nothing was taken.
    Short(Shortfall),
}

/// Why a reservation could not be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Nodes that need a new host.
    pub needed: usize,
    /// Free hosts of the pool that match at least one of those nodes.
    pub free: usize,
    /// Per distinct selector, by selector: nodes that need it, free hosts that match it.
    pub groups: Vec<ShortGroup>,
}

/// One selector's share of a [`Shortfall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortGroup {
    /// The selector the nodes of this group share.
    pub selector: LabelSelector,
    /// Nodes that need a host matching it.
    pub needed: usize,
    /// Free hosts that match it.
    pub free: usize,
}

/// What deleting a host did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostDelete {
    /// The host was removed.
    Deleted,
    /// There was no such host.
    Missing,
    /// The host is lent; nothing was deleted.
    InUse(HostLease),
}

/// The host-pool part of the store. See the module doc.
#[async_trait]
pub trait HostPoolStore: Send + Sync {
    /// The hosts of a tenant (of one provider's pool, or of every pool), by provider then id.
    async fn list_pool_hosts(
        &self,
        tenant_id: &str,
        provider: Option<&str>,
    ) -> Result<Vec<PoolHostRow>>;
    /// The host `id` of `provider`'s pool, if any.
    async fn get_pool_host(
        &self,
        tenant_id: &str,
        provider: &str,
        id: &str,
    ) -> Result<Option<PoolHostRow>>;
    /// Adds a free host (`host.lease` is ignored). `Conflict` when the pool has a host of that id
    /// or the tenant has a host at that address and port (in any pool).
    async fn insert_pool_host(&self, host: &PoolHostRow) -> Result<()>;
    /// Replaces the address, port, user, key and labels of a host; its lease and creation time
    /// stay (a node that holds it keeps what it was given). `false` if there is no such host;
    /// `Conflict` if another host of the tenant has that address and port.
    async fn update_pool_host(&self, host: &PoolHostRow) -> Result<bool>;
    /// Deletes a free host.
    async fn delete_pool_host(
        &self,
        tenant_id: &str,
        provider: &str,
        id: &str,
    ) -> Result<HostDelete>;
    /// Takes one free host of the pool for each request whose selector it matches, atomically:
    /// every request gets a different host, or nothing is taken and the answer is a
    /// [`Reservation::Short`]. A request whose node already holds a host of this pool for this
    /// cluster keeps it (so a reservation can be repeated). Taken hosts are `reserved` for
    /// `cluster_id` and their node since `now`.
    async fn reserve_pool_hosts(
        &self,
        tenant_id: &str,
        provider: &str,
        cluster_id: u64,
        requests: &[HostRequest],
        now: i64,
    ) -> Result<Reservation>;
    /// Marks the `reserved` hosts of these nodes of a cluster `in_use`. Returns how many changed.
    async fn confirm_pool_hosts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
        node_ids: &[String],
    ) -> Result<u64>;
    /// Frees the host lent to a node of a cluster, if any, and answers it (as it was).
    async fn release_pool_node(
        &self,
        tenant_id: &str,
        cluster_id: u64,
        node_id: &str,
    ) -> Result<Option<PoolHostRow>>;
    /// Frees every host lent to a cluster's nodes; answers them (as they were).
    async fn release_pool_cluster(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<PoolHostRow>>;
    /// Settles lent hosts (of one tenant's cluster, or of every tenant with `None`), in one
    /// transaction: a `reserved` host whose node is recorded becomes `in_use`; a host whose
    /// cluster is `terminated`, or whose cluster or node no longer exists while it is `in_use` or
    /// was reserved before `reserved_before`, is freed. Answers the freed hosts (as they were).
    async fn settle_pool_hosts(
        &self,
        cluster: Option<(&str, u64)>,
        reserved_before: i64,
    ) -> Result<Vec<PoolHostRow>>;
    /// The hosts lent to a cluster's nodes, by id.
    async fn cluster_pool_hosts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<PoolHostRow>>;
}

/// Assigns a different host to each request (`hosts[answer[i]]` to request `i`), or `None` when no
/// assignment exists. A maximum bipartite matching (augmenting paths), so a request that many
/// hosts match never takes the one host another request needs. Deterministic: hosts are tried in
/// the order given.
pub fn assign(
    selectors: &[&LabelSelector],
    hosts: &[&BTreeMap<String, String>],
) -> Option<Vec<usize>> {
    let fits: Vec<Vec<usize>> = selectors
        .iter()
        .map(|s| (0..hosts.len()).filter(|&h| s.matches(hosts[h])).collect())
        .collect();
    let mut owner: Vec<Option<usize>> = vec![None; hosts.len()];
    fn augment(
        r: usize,
        fits: &[Vec<usize>],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        for &h in &fits[r] {
            if seen[h] {
                continue;
            }
            seen[h] = true;
            if owner[h].is_none_or(|o| augment(o, fits, owner, seen)) {
                owner[h] = Some(r);
                return true;
            }
        }
        false
    }
    // The most constrained requests first: fewer augmenting paths to walk.
    let mut order: Vec<usize> = (0..selectors.len()).collect();
    order.sort_by_key(|&r| fits[r].len());
    for r in order {
        let mut seen = vec![false; hosts.len()];
        if !augment(r, &fits, &mut owner, &mut seen) {
            return None;
        }
    }
    let mut answer = vec![0; selectors.len()];
    for (h, o) in owner.iter().enumerate() {
        if let Some(r) = o {
            answer[*r] = h;
        }
    }
    Some(answer)
}

/// Why `selectors` cannot all be served from `hosts` (the free hosts).
pub fn shortfall(selectors: &[&LabelSelector], hosts: &[&BTreeMap<String, String>]) -> Shortfall {
    let mut groups: BTreeMap<&LabelSelector, usize> = BTreeMap::new();
    for s in selectors {
        *groups.entry(s).or_default() += 1;
    }
    let free = hosts
        .iter()
        .filter(|h| selectors.iter().any(|s| s.matches(h)))
        .count();
    Shortfall {
        needed: selectors.len(),
        free,
        groups: groups
            .into_iter()
            .map(|(s, needed)| ShortGroup {
                selector: s.clone(),
                needed,
                free: hosts.iter().filter(|h| s.matches(h)).count(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> BTreeMap<String, String> {
        s.split(',')
            .filter(|t| !t.is_empty())
            .map(|t| {
                let (k, v) = t.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn assignment_finds_a_matching_where_greed_would_not() {
        // The first request takes anything; greedy would give it the only ssd host.
        let any = LabelSelector::parse("");
        let ssd = LabelSelector::parse("disk=ssd");
        let h1 = labels("disk=ssd");
        let h2 = labels("disk=hdd");
        let a = assign(&[&any, &ssd], &[&h1, &h2]).unwrap();
        assert_eq!(a, vec![1, 0]);
        assert_eq!(assign(&[&ssd, &ssd], &[&h1, &h2]), None);
        assert_eq!(assign(&[], &[&h1]), Some(vec![]));
        let s = shortfall(&[&ssd, &ssd, &any], &[&h1, &h2]);
        assert_eq!((s.needed, s.free), (3, 2));
        assert_eq!(s.groups.len(), 2);
        let ssd_group = s.groups.iter().find(|g| g.selector == ssd).unwrap();
        assert_eq!((ssd_group.needed, ssd_group.free), (2, 1));
    }
}
