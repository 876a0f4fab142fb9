//! What task payloads derive from a cluster, cached per process: the parsed cluster body (valid
//! for one revision of the cluster row), each parsed node (valid for one revision of its row), the
//! layout the macros see, and the `nodes` map of every payload already serialized.
//!
//! Every payload of a cluster carries every node's properties (contract §5.11), so without this a
//! take reads and parses the whole cluster: a 1,000-node create would parse nodes a million times.
//! With it, a take reads the cluster's [`ClusterStamp`] (two integers) and, when a node changed
//! since, the `(id, rev)` list of the nodes and only the rows that moved.
//!
//! The cache never answers older data than the stamp read at the start of a lookup: the stamp is
//! bumped in the same transaction as every write of a cluster or its nodes. Several servers on one
//! database each keep their own cache; nothing needs invalidating across them.
//!
//! Workers that cache the `nodes` map themselves (weft's provisioner) get a [`MapRevision`] in
//! their payloads instead of the map, and the map's changes since the revision they hold from
//! [`Snapshot::nodes_since`]. Each snapshot numbers its map: a node's properties carry the
//! sequence number of the snapshot that first held them, and a snapshot is built from the one
//! before it (a *lineage*), so the changes since a revision of the same lineage are the nodes
//! numbered after it and the ids that left after it. A revision of another lineage or process gets
//! the whole map. The layout and the whole serialized map are built on first use only: a take of
//! a worker that caches the map, or of a provider task, never needs them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::value::RawValue;
use weft_model::{JobStatus, Node, Service};
use weft_planner::PlanNode;
use weft_store::{ClusterStamp, Store, TaskRow};

use super::body::plan_node;
use super::body::{from_body, ClusterBody};

/// Clusters kept; the least recently used goes first.
const CAPACITY: usize = 256;

/// Ids that left a map, remembered per lineage; past this many a new lineage starts (workers then
/// fetch the whole map once).
const MAX_REMOVED: usize = 4096;

/// One node as payloads use it.
pub struct CachedNode {
    /// The node row's revision this entry was parsed at.
    pub rev: i64,
    /// The node, its `services` moved to [`CachedNode::services`].
    pub node: Node,
    /// The node's services, one list shared by the nodes of a snapshot that have the same ones
    /// (each holds its services' whole definitions, some 4 KB of JSON: a 10,000-node cluster's
    /// nodes hold a handful of distinct lists).
    pub services: Arc<[Service]>,
    /// `node.properties` as JSON.
    props_json: Box<RawValue>,
}

/// The distinct service lists of the nodes parsed for one snapshot.
#[derive(Default)]
struct SharedServices(Vec<Arc<[Service]>>);

impl SharedServices {
    /// Past this many distinct lists, a node keeps a list of its own.
    const MAX: usize = 64;

    fn share(&mut self, services: Vec<Service>) -> Arc<[Service]> {
        if let Some(same) = self.0.iter().find(|s| ***s == *services) {
            return same.clone();
        }
        let list: Arc<[Service]> = services.into();
        if self.0.len() < Self::MAX {
            self.0.push(list.clone());
        }
        list
    }
}

/// A revision of a cluster's `nodes` map in this process: which process, which lineage of
/// snapshots, which snapshot. Written as `instance.lineage.seq` (an opaque text to workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapRevision {
    instance: u64,
    lineage: u64,
    seq: u64,
}

impl MapRevision {
    /// The revision as workers get it: `<instance hex>.<lineage>.<seq>`.
    pub fn text(&self) -> String {
        format!("{:x}.{}.{}", self.instance, self.lineage, self.seq)
    }

    fn parse(s: &str) -> Option<MapRevision> {
        let mut parts = s.split('.');
        let instance = u64::from_str_radix(parts.next()?, 16).ok()?;
        let lineage = parts.next()?.parse().ok()?;
        let seq = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(MapRevision {
            instance,
            lineage,
            seq,
        })
    }
}

/// A cluster as payloads use it, at one [`ClusterStamp`].
pub struct Snapshot {
    /// The cluster's revisions this snapshot was built at.
    pub stamp: ClusterStamp,
    /// The cluster's owner (a user id).
    pub owner: String,
    /// The cluster's body, parsed.
    pub body: Arc<ClusterBody>,
    nodes: BTreeMap<String, Arc<CachedNode>>,
    /// The nodes of the map (all but those the running job retires), each with the sequence
    /// number of the snapshot that first held its properties.
    staying: BTreeMap<String, u64>,
    /// Ids that left the map in this lineage, with the sequence number they left at, oldest first.
    removed: Vec<(String, u64)>,
    revision: MapRevision,
    layout: OnceLock<Vec<PlanNode>>,
    layout_all: OnceLock<Vec<PlanNode>>,
    nodes_json: OnceLock<Result<Box<RawValue>, String>>,
}

impl Snapshot {
    /// A node, with its services.
    pub fn node(&self, id: &str) -> Option<&CachedNode> {
        self.nodes.get(id).map(|n| &**n)
    }

    /// The revision of this snapshot's `nodes` map.
    pub fn revision(&self) -> MapRevision {
        self.revision
    }

    /// The nodes that stay (all but those the running job retires), by nodenum, as the macro
    /// expander wants them: a layout change configures against the layout it makes.
    pub fn layout(&self) -> &[PlanNode] {
        self.layout.get_or_init(|| {
            self.layout_all()
                .iter()
                .filter(|n| self.staying.contains_key(&n.id))
                .cloned()
                .collect()
        })
    }

    /// Every node, retiring ones too (for the tasks of a retiring node itself).
    pub fn layout_all(&self) -> &[PlanNode] {
        self.layout_all.get_or_init(|| {
            let mut all: Vec<PlanNode> = self
                .nodes
                .values()
                .map(|n| plan_node(&n.node.id, &n.node.properties))
                .collect();
            all.sort_by(|a, b| (a.nodenum, &a.id).cmp(&(b.nodenum, &b.id)));
            all
        })
    }

    /// `{nodeId: properties, ...}` of every node that stays, serialized once.
    pub fn nodes_json(&self) -> Result<&RawValue, String> {
        self.nodes_json
            .get_or_init(|| {
                let map: BTreeMap<&str, &RawValue> = self
                    .staying
                    .keys()
                    .filter_map(|id| Some((id.as_str(), &*self.nodes.get(id)?.props_json)))
                    .collect();
                serde_json::value::to_raw_value(&map).map_err(|e| e.to_string())
            })
            .as_deref()
            .map_err(Clone::clone)
    }

    /// The answer of `POST /v2/tasks/nodes` (a `weft_model::TaskNodes` as JSON): the changes of
    /// the map since `since` if that is a revision of this snapshot's lineage, else the whole map.
    pub fn nodes_since(&self, since: Option<&str>) -> Result<String, String> {
        #[derive(serde::Serialize)]
        struct Answer<'a, N: serde::Serialize> {
            revision: String,
            full: bool,
            nodes: N,
            removed: Vec<&'a str>,
        }
        let revision = self.revision.text();
        let base = since.and_then(MapRevision::parse).filter(|r| {
            r.instance == self.revision.instance
                && r.lineage == self.revision.lineage
                && r.seq <= self.revision.seq
        });
        let Some(base) = base else {
            let nodes = self.nodes_json()?;
            let answer = Answer {
                revision,
                full: true,
                nodes,
                removed: vec![],
            };
            return serde_json::to_string(&answer).map_err(|e| e.to_string());
        };
        let nodes: BTreeMap<&str, &RawValue> = self
            .staying
            .iter()
            .filter(|(_, seen)| **seen > base.seq)
            .filter_map(|(id, _)| Some((id.as_str(), &*self.nodes.get(id)?.props_json)))
            .collect();
        let removed = self
            .removed
            .iter()
            .filter(|(id, at)| *at > base.seq && !self.staying.contains_key(id))
            .map(|(id, _)| id.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let answer = Answer {
            revision,
            full: false,
            nodes,
            removed,
        };
        serde_json::to_string(&answer).map_err(|e| e.to_string())
    }
}

/// Snapshots of recently used clusters (at most 256, least recently used evicted first), from which
/// task payloads are built.
pub struct PayloadCache {
    inner: Mutex<Inner>,
    /// One rebuild per cluster at a time: concurrent takes of a cluster whose nodes just changed
    /// wait for the first one's rebuild instead of each reading the nodes again.
    building: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// This process's mark in map revisions: a revision another server (or an earlier run of this
    /// one) handed out is never mistaken for one of ours.
    instance: u64,
    /// Numbers snapshots, in the order they are built.
    seq: AtomicU64,
}

impl Default for PayloadCache {
    fn default() -> Self {
        PayloadCache {
            inner: Mutex::default(),
            building: Mutex::default(),
            instance: rand::random(),
            seq: AtomicU64::new(0),
        }
    }
}

/// A cluster: tenant id and cluster id.
type Key = (String, u64);

/// Above this many changed nodes, a rebuild reads the whole cluster in one query.
const BULK: usize = 16;

#[derive(Default)]
struct Inner {
    clock: u64,
    entries: HashMap<Key, (u64, Arc<Snapshot>)>,
}

impl PayloadCache {
    fn get(&self, key: &Key) -> Option<Arc<Snapshot>> {
        let mut g = self.inner.lock().expect("cache lock");
        g.clock += 1;
        let now = g.clock;
        g.entries.get_mut(key).map(|(used, s)| {
            *used = now;
            s.clone()
        })
    }

    /// Keeps `snap`, built from `old`, and returns it; or returns the newer snapshot a concurrent
    /// rebuild kept meanwhile. A snapshot kept in place of another than the one it was built from
    /// starts a lineage of its own, so that every lineage is one chain of snapshots.
    fn put(&self, key: Key, old: Option<&Arc<Snapshot>>, mut snap: Snapshot) -> Arc<Snapshot> {
        let mut g = self.inner.lock().expect("cache lock");
        g.clock += 1;
        let now = g.clock;
        if let Some((_, cur)) = g.entries.get(&key) {
            if (cur.stamp.rev, cur.stamp.nodes_rev) > (snap.stamp.rev, snap.stamp.nodes_rev) {
                return cur.clone();
            }
            if !old.is_some_and(|o| Arc::ptr_eq(o, cur)) {
                snap.new_lineage();
            }
        }
        let snap = Arc::new(snap);
        g.entries.insert(key, (now, snap.clone()));
        if g.entries.len() > CAPACITY {
            if let Some(oldest) = g
                .entries
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone())
            {
                g.entries.remove(&oldest);
                self.building.lock().expect("cache lock").remove(&oldest);
            }
        }
        snap
    }

    /// The cluster as of `stamp` (the caller has just read it; `None` if it found no cluster row,
    /// which is read again here). `Err` carries a message for the task's failure.
    pub async fn snapshot(
        &self,
        store: &dyn Store,
        tenant_id: &str,
        cluster_id: u64,
        stamp: Option<ClusterStamp>,
    ) -> Result<Arc<Snapshot>, String> {
        let key = (tenant_id.to_string(), cluster_id);
        let stamp = match stamp {
            Some(s) => s,
            None => current_stamp(store, tenant_id, cluster_id).await?,
        };
        if let Some(s) = self.get(&key).filter(|s| fresh(s, stamp)) {
            return Ok(s);
        }
        let gate = self
            .building
            .lock()
            .expect("cache lock")
            .entry(key.clone())
            .or_default()
            .clone();
        let _building = gate.lock().await;
        // Someone else may have rebuilt it while this one waited. What is read from here on is at
        // least as new as `stamp`, so a snapshot labelled with it never claims too much.
        let old = self.get(&key);
        if let Some(s) = old.as_ref().filter(|s| fresh(s, stamp)) {
            return Ok(s.clone());
        }
        let (owner, body) =
            read_cluster(store, tenant_id, cluster_id, old.as_deref(), stamp).await?;
        let nodes = read_nodes(store, tenant_id, cluster_id, old.as_deref(), stamp).await?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let revision = MapRevision {
            instance: self.instance,
            lineage: old.as_ref().map_or(seq, |o| o.revision.lineage),
            seq,
        };
        let snap = build(revision, old.as_deref(), stamp, owner, body, nodes);
        Ok(self.put(key, old.as_ref(), snap))
    }

    /// The cluster body and one node as of `stamp`, for a task that needs no other node (a
    /// provider task of a worker that caches the map): from the snapshot when it is fresh, else
    /// the body (cached while the cluster row is unchanged) and the one node row, so that a
    /// stream of CONFIRMs, each changing a node, does not rebuild the snapshot for each take.
    pub async fn node_view(
        &self,
        store: &dyn Store,
        tenant_id: &str,
        cluster_id: u64,
        node_id: &str,
        stamp: Option<ClusterStamp>,
    ) -> Result<(Arc<ClusterBody>, Node), String> {
        let key = (tenant_id.to_string(), cluster_id);
        let stamp = match stamp {
            Some(s) => s,
            None => current_stamp(store, tenant_id, cluster_id).await?,
        };
        let cached = self.get(&key);
        if let Some(s) = cached.as_ref().filter(|s| fresh(s, stamp)) {
            let node = s.node(node_id).ok_or("the task's node no longer exists")?;
            let mut node_copy = node.node.clone();
            node_copy.services = node.services.to_vec();
            return Ok((s.body.clone(), node_copy));
        }
        let (_, body) =
            read_cluster(store, tenant_id, cluster_id, cached.as_deref(), stamp).await?;
        let row = store
            .get_node(tenant_id, node_id)
            .await
            .map_err(|e| e.to_string())?
            .filter(|r| r.cluster_id == cluster_id)
            .ok_or("the task's node no longer exists")?;
        let node: Node = from_body(&row.body).map_err(|e| e.to_string())?;
        Ok((body, node))
    }
}

async fn current_stamp(
    store: &dyn Store,
    tenant_id: &str,
    cluster_id: u64,
) -> Result<ClusterStamp, String> {
    Ok(store
        .cluster_stamp(tenant_id, cluster_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the task's cluster no longer exists")?)
}

/// The cluster's owner and body: from `old` when the cluster row has not changed since.
async fn read_cluster(
    store: &dyn Store,
    tenant_id: &str,
    cluster_id: u64,
    old: Option<&Snapshot>,
    stamp: ClusterStamp,
) -> Result<(String, Arc<ClusterBody>), String> {
    if let Some(s) = old.filter(|s| s.stamp.rev == stamp.rev) {
        return Ok((s.owner.clone(), s.body.clone()));
    }
    let row = store
        .get_cluster(tenant_id, cluster_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the task's cluster no longer exists")?;
    let body: ClusterBody = from_body(&row.body).map_err(|e| e.to_string())?;
    Ok((row.owner, Arc::new(body)))
}

/// The cluster's nodes: `old`'s when no node changed; else the changed ones read one by one, or
/// all at once when more than [`BULK`] changed.
async fn read_nodes(
    store: &dyn Store,
    tenant_id: &str,
    cluster_id: u64,
    old: Option<&Snapshot>,
    stamp: ClusterStamp,
) -> Result<BTreeMap<String, Arc<CachedNode>>, String> {
    if let Some(s) = old.filter(|s| s.stamp.nodes_rev == stamp.nodes_rev) {
        return Ok(s.nodes.clone());
    }
    let revs = store
        .node_revs(tenant_id, cluster_id)
        .await
        .map_err(|e| e.to_string())?;
    let known = |id: &str, rev: i64| {
        old.and_then(|s| s.nodes.get(id))
            .filter(|n| n.rev == rev)
            .cloned()
    };
    let changed = revs
        .iter()
        .filter(|(id, rev)| known(id, *rev).is_none())
        .count();
    let mut nodes = BTreeMap::new();
    let mut shared = SharedServices::default();
    if changed > BULK {
        let rows = store
            .node_texts(tenant_id, cluster_id)
            .await
            .map_err(|e| e.to_string())?;
        for (id, rev, text) in rows {
            let node: Node = serde_json::from_str(&text).map_err(|e| format!("node {id}: {e}"))?;
            nodes.insert(id, cached_node(rev, node, &mut shared)?);
        }
        return Ok(nodes);
    }
    for (id, rev) in revs {
        if let Some(n) = known(&id, rev) {
            nodes.insert(id, n);
            continue;
        }
        let Some(row) = store
            .get_node(tenant_id, &id)
            .await
            .map_err(|e| e.to_string())?
        else {
            continue; // deleted since the list was read
        };
        let node: Node = from_body(&row.body).map_err(|e| e.to_string())?;
        nodes.insert(id, cached_node(row.rev, node, &mut shared)?);
    }
    Ok(nodes)
}

/// Whether a snapshot is as new as `stamp` (a newer one, built by a concurrent rebuild, is fine).
fn fresh(s: &Snapshot, stamp: ClusterStamp) -> bool {
    s.stamp.rev >= stamp.rev && s.stamp.nodes_rev >= stamp.nodes_rev
}

fn cached_node(
    rev: i64,
    mut node: Node,
    shared: &mut SharedServices,
) -> Result<Arc<CachedNode>, String> {
    let props_json =
        serde_json::value::to_raw_value(&node.properties).map_err(|e| e.to_string())?;
    let services = shared.share(std::mem::take(&mut node.services));
    Ok(Arc::new(CachedNode {
        rev,
        node,
        services,
        props_json,
    }))
}

/// A snapshot at `revision`, built from `old` (the one cached before, if any): a node of the map
/// keeps the number `old` gave it while its properties are the same.
fn build(
    revision: MapRevision,
    old: Option<&Snapshot>,
    stamp: ClusterStamp,
    owner: String,
    body: Arc<ClusterBody>,
    nodes: BTreeMap<String, Arc<CachedNode>>,
) -> Snapshot {
    let old = old.filter(|o| o.revision.lineage == revision.lineage);
    let retiring: BTreeSet<&str> = body.retiring.iter().map(String::as_str).collect();
    let seen_before = |id: &str, n: &CachedNode| -> Option<u64> {
        let o = old?;
        let before = o.nodes.get(id)?;
        let same = std::ptr::eq(&**before, n) || before.props_json.get() == n.props_json.get();
        o.staying.get(id).copied().filter(|_| same)
    };
    let staying: BTreeMap<String, u64> = nodes
        .iter()
        .filter(|(id, _)| !retiring.contains(id.as_str()))
        .map(|(id, n)| (id.clone(), seen_before(id, n).unwrap_or(revision.seq)))
        .collect();
    let mut removed = old.map(|o| o.removed.clone()).unwrap_or_default();
    if let Some(o) = old {
        let left = o.staying.keys().filter(|id| !staying.contains_key(*id));
        removed.extend(left.map(|id| (id.clone(), revision.seq)));
    }
    let mut snap = Snapshot {
        stamp,
        owner,
        body,
        nodes,
        staying,
        removed,
        revision,
        layout: OnceLock::new(),
        layout_all: OnceLock::new(),
        nodes_json: OnceLock::new(),
    };
    if snap.removed.len() > MAX_REMOVED {
        snap.new_lineage();
    }
    snap
}

impl Snapshot {
    /// Makes this snapshot the first of a lineage: every revision handed out before gets the
    /// whole map.
    fn new_lineage(&mut self) {
        self.revision.lineage = self.revision.seq;
        self.removed.clear();
    }
}

/// How long a provisioner seen registered is trusted without reading the store again. Deletes in
/// this process forget it at once; another server's delete is noticed within this time.
const PROVISIONER_TTL: Duration = Duration::from_secs(2);

/// Provisioners recently seen registered, with the tenants each holds workers of: `take`,
/// `finish` and the nodes map check the worker's provisioner on every call, which would
/// otherwise be a read per request.
#[derive(Default)]
pub struct ProvisionerCache {
    /// When each was read (the engine clock's monotonic reading), and its tenants.
    seen: Mutex<HashMap<String, (Duration, BTreeSet<String>)>>,
}

impl ProvisionerCache {
    /// Whether `id` is registered, at `now` (the engine clock's monotonic reading).
    pub async fn is_registered(
        &self,
        store: &dyn Store,
        id: &str,
        now: Duration,
    ) -> weft_store::Result<bool> {
        Ok(self.tenants_of(store, id, now).await?.is_some())
    }

    /// The tenants whose workers provisioner `id` holds (assigned by the server, or reported
    /// live in its heartbeats), or `None` when it is not registered; at `now` (the engine
    /// clock's monotonic reading).
    pub async fn tenants_of(
        &self,
        store: &dyn Store,
        id: &str,
        now: Duration,
    ) -> weft_store::Result<Option<BTreeSet<String>>> {
        if let Some((at, tenants)) = self.seen.lock().expect("cache lock").get(id) {
            if now.saturating_sub(*at) < PROVISIONER_TTL {
                return Ok(Some(tenants.clone()));
            }
        }
        let record = store.get_provisioner(id).await?;
        let mut seen = self.seen.lock().expect("cache lock");
        let Some(r) = record else {
            seen.remove(id);
            return Ok(None);
        };
        let tenants: BTreeSet<String> = r
            .assignments
            .iter()
            .chain(&r.usage)
            .filter(|(_, n)| **n > 0)
            .map(|(t, _)| t.clone())
            .collect();
        seen.insert(id.to_string(), (now, tenants.clone()));
        Ok(Some(tenants))
    }

    /// Forgets `id` (it was just deleted, or its workers moved).
    pub fn forget(&self, id: &str) {
        self.seen.lock().expect("cache lock").remove(id);
    }
}

/// How long a provider read from the catalog is used for task payloads: a rotated credential
/// reaches every cluster's next task within this time, on every server.
const PROVIDER_TTL: Duration = Duration::from_secs(2);

/// Providers as the tenant's catalog has them now, for task payloads: credentials are read when
/// used, not frozen into each cluster at create.
#[derive(Default)]
pub struct ProviderCache {
    read: Mutex<HashMap<(String, String), ProviderRead>>,
}

/// When a provider was read (the engine clock's monotonic reading), and what the catalog had
/// (`None`: no such provider).
type ProviderRead = (Duration, Option<weft_model::Provider>);

impl ProviderCache {
    /// The tenant's provider `name` as the catalog has it at `now` (the engine clock's
    /// monotonic reading; `None` when it is gone).
    pub async fn current(
        &self,
        store: &dyn Store,
        tenant_id: &str,
        name: &str,
        now: Duration,
    ) -> weft_store::Result<Option<weft_model::Provider>> {
        let key = (tenant_id.to_string(), name.to_string());
        if let Some((at, p)) = self.read.lock().expect("cache lock").get(&key) {
            if now.saturating_sub(*at) < PROVIDER_TTL {
                return Ok(p.clone());
            }
        }
        let doc = store
            .get_entity(tenant_id, weft_model::EntityKind::Provider, name, None)
            .await?;
        let provider = doc.and_then(|d| weft_model::lenient::from_value(d).ok());
        self.read
            .lock()
            .expect("cache lock")
            .insert(key, (now, provider.clone()));
        Ok(provider)
    }

    /// Forgets the tenant's providers (one was just written or deleted in this process).
    pub fn forget(&self, tenant_id: &str) {
        self.read
            .lock()
            .expect("cache lock")
            .retain(|(t, _), _| t != tenant_id);
    }
}

/// At most this many leases are remembered (a lease that never finishes stays until the janitor
/// times it out).
const LEASES_MAX: usize = 100_000;

/// A task and its job's status and revision, as [`Store::task_with_job`] answers.
pub type LeasedTask = (TaskRow, Option<(JobStatus, i64)>);

/// Tasks this server just leased, as `take` read them. The finish of the lease, which almost
/// always comes back to the same server, starts from this copy instead of reading the task and
/// its job again. A copy is used once, and only when it agrees with the finish (same worker, still
/// in progress); the finish's change set still expects both revisions, so a copy gone stale (the
/// janitor re-leased the task, the job was paused) fails that check and the finish reads the store.
#[derive(Default)]
pub struct LeaseCache {
    leased: Mutex<HashMap<(String, String), LeasedTask>>,
}

impl LeaseCache {
    /// Keeps a copy of a task this server just leased, with its job's status and revision (dropped
    /// when the cache is full).
    pub fn remember(&self, task: TaskRow, job: Option<(JobStatus, i64)>) {
        let mut leased = self.leased.lock().expect("cache lock");
        if leased.len() < LEASES_MAX {
            leased.insert((task.tenant_id.clone(), task.id.clone()), (task, job));
        }
    }

    /// The copy of task `id` of `tenant`, removed.
    pub fn take(&self, tenant: &str, id: &str) -> Option<LeasedTask> {
        self.leased
            .lock()
            .expect("cache lock")
            .remove(&(tenant.to_string(), id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn body(retiring: &[&str]) -> Arc<ClusterBody> {
        Arc::new(
            serde_json::from_value(json!({
                "provider": {"name": "p", "providertype": "local"},
                "template": {"name": "t"},
                "services": [], "dns_suffix": "local", "retiring": retiring,
            }))
            .unwrap(),
        )
    }

    fn node(id: &str, rev: i64, host: &str) -> Arc<CachedNode> {
        let n = json!({"id": id, "clusterId": "1", "services": [], "properties": {
            "nodenum": 1000, "hostname": host, "hardwaretype": "h", "imagetype": "i", "sshuser": "u"}});
        cached_node(
            rev,
            serde_json::from_value(n).unwrap(),
            &mut SharedServices::default(),
        )
        .unwrap()
    }

    fn snap(
        old: Option<&Snapshot>,
        seq: u64,
        retiring: &[&str],
        nodes: &[(&str, i64, &str)],
    ) -> Snapshot {
        let revision = MapRevision {
            instance: 7,
            lineage: old.map_or(seq, |o| o.revision.lineage),
            seq,
        };
        let stamp = ClusterStamp {
            rev: 1,
            nodes_rev: seq as i64,
        };
        let nodes = nodes
            .iter()
            .map(|(id, rev, host)| {
                let same = old.and_then(|o| o.nodes.get(*id)).filter(|n| n.rev == *rev);
                (
                    id.to_string(),
                    same.cloned().unwrap_or_else(|| node(id, *rev, host)),
                )
            })
            .collect();
        build(revision, old, stamp, "o".into(), body(retiring), nodes)
    }

    fn since(s: &Snapshot, r: Option<&Snapshot>) -> Value {
        let text = r.map(|r| r.revision.text());
        serde_json::from_str(&s.nodes_since(text.as_deref()).unwrap()).unwrap()
    }

    #[test]
    fn nodes_with_the_same_services_share_one_list() {
        let svc = |name: &str| {
            json!({"name": name, "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": format!("{name}.sh")}}}}})
        };
        let node = |id: &str, services: Value| -> Node {
            serde_json::from_value(json!({"id": id, "clusterId": "1", "services": services,
                "properties": {"nodenum": 1000, "hostname": id, "hardwaretype": "h",
                    "imagetype": "i", "sshuser": "u"}}))
            .unwrap()
        };
        let mut shared = SharedServices::default();
        let a = cached_node(1, node("a", json!([svc("x"), svc("y")])), &mut shared).unwrap();
        let b = cached_node(1, node("b", json!([svc("x"), svc("y")])), &mut shared).unwrap();
        let c = cached_node(1, node("c", json!([svc("x")])), &mut shared).unwrap();
        assert!(Arc::ptr_eq(&a.services, &b.services));
        assert!(!Arc::ptr_eq(&a.services, &c.services));
        assert_eq!(a.services.len(), 2);
        assert_eq!(c.services[0].name, "x");
        assert!(a.node.services.is_empty(), "moved to the shared list");
    }

    #[test]
    fn changes_since_a_revision_hold_what_moved_and_what_left() {
        let a = snap(
            None,
            1,
            &[],
            &[("n1", 1, "h1"), ("n2", 1, "h2"), ("n3", 1, "h3")],
        );
        let whole = since(&a, None);
        assert_eq!(whole["full"], true);
        assert_eq!(whole["nodes"].as_object().unwrap().len(), 3);
        assert_eq!(
            whole["nodes"].to_string(),
            a.nodes_json().unwrap().get(),
            "the whole map is the payloads' map"
        );

        // n2 renamed, n3 retired by a shrink, n1 written with the same properties (results only).
        let b = snap(
            Some(&a),
            2,
            &["n3"],
            &[("n1", 2, "h1"), ("n2", 2, "h2b"), ("n3", 1, "h3")],
        );
        let d = since(&b, Some(&a));
        assert_eq!(d["full"], false);
        assert_eq!(
            d["nodes"],
            json!({"n2": serde_json::to_value(&b.nodes["n2"].node.properties).unwrap()})
        );
        assert_eq!(d["removed"], json!(["n3"]));
        assert_eq!(since(&b, Some(&b))["nodes"], json!({}));
        assert_eq!(b.layout().len(), 2, "the macros see the nodes that stay");
        assert_eq!(b.layout_all().len(), 3);

        // n3 stays after all: it comes back, and is no longer listed as removed.
        let c = snap(
            Some(&b),
            3,
            &[],
            &[("n1", 2, "h1"), ("n2", 2, "h2b"), ("n3", 1, "h3")],
        );
        let d = since(&c, Some(&a));
        assert_eq!(d["removed"], json!([]));
        assert_eq!(
            d["nodes"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["n2", "n3"]
        );
        assert_eq!(since(&c, Some(&b))["nodes"].as_object().unwrap().len(), 1);

        // A revision of another server or lineage, or nonsense, gets the whole map.
        let mut other = c.revision;
        other.instance = 8;
        for r in [other.text(), "1.2".into(), "x.y.z".into()] {
            let d: Value = serde_json::from_str(&c.nodes_since(Some(&r)).unwrap()).unwrap();
            assert_eq!(d["full"], true, "{r}");
        }
        let mut fresh = snap(Some(&c), 4, &[], &[("n1", 2, "h1")]);
        fresh.new_lineage();
        assert_eq!(since(&fresh, Some(&c))["full"], true);
    }
}
