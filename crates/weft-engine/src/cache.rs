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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use weft_model::Node;
use weft_planner::PlanNode;
use weft_store::{ClusterStamp, Store, TaskRow};

use super::body::plan_node;
use super::body::{from_body, ClusterBody};

/// Clusters kept; the least recently used goes first.
const CAPACITY: usize = 256;

/// One node as payloads use it.
pub struct CachedNode {
    pub rev: i64,
    pub node: Node,
    /// `node.properties` as JSON.
    props_json: String,
}

/// A cluster as payloads use it, at one [`ClusterStamp`].
pub struct Snapshot {
    pub stamp: ClusterStamp,
    pub owner: String,
    pub body: Arc<ClusterBody>,
    nodes: BTreeMap<String, Arc<CachedNode>>,
    /// The nodes that stay (all but those the running job retires), by nodenum, as the macro
    /// expander wants them: a layout change configures against the layout it makes.
    pub layout: Vec<PlanNode>,
    /// Every node, retiring ones too (for the tasks of a retiring node itself).
    pub layout_all: Vec<PlanNode>,
    /// `{nodeId: properties, ...}` of every node that stays.
    pub nodes_json: Box<RawValue>,
}

impl Snapshot {
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id).map(|n| &n.node)
    }
}

#[derive(Default)]
pub struct PayloadCache {
    inner: Mutex<Inner>,
    /// One rebuild per cluster at a time: concurrent takes of a cluster whose nodes just changed
    /// wait for the first one's rebuild instead of each reading the nodes again.
    building: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
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

    fn put(&self, key: Key, snap: Arc<Snapshot>) {
        let mut g = self.inner.lock().expect("cache lock");
        g.clock += 1;
        let now = g.clock;
        // Never replace a newer snapshot with an older one built concurrently.
        if let Some((_, old)) = g.entries.get(&key) {
            if (old.stamp.rev, old.stamp.nodes_rev) > (snap.stamp.rev, snap.stamp.nodes_rev) {
                return;
            }
        }
        g.entries.insert(key, (now, snap));
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
            None => store
                .cluster_stamp(tenant_id, cluster_id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the task's cluster no longer exists")?,
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
        self.finish(key, stamp, owner, body, nodes)
    }

    fn finish(
        &self,
        key: Key,
        stamp: ClusterStamp,
        owner: String,
        body: Arc<ClusterBody>,
        nodes: BTreeMap<String, Arc<CachedNode>>,
    ) -> Result<Arc<Snapshot>, String> {
        let snap = Arc::new(build(stamp, owner, body, nodes)?);
        self.put(key, snap.clone());
        Ok(snap)
    }
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
    if changed > BULK {
        let rows = store
            .list_nodes(tenant_id, cluster_id)
            .await
            .map_err(|e| e.to_string())?;
        for row in rows {
            let n = cached(row.rev, &row.body)?;
            nodes.insert(row.id, n);
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
        nodes.insert(id, cached(row.rev, &row.body)?);
    }
    Ok(nodes)
}

/// Whether a snapshot is as new as `stamp` (a newer one, built by a concurrent rebuild, is fine).
fn fresh(s: &Snapshot, stamp: ClusterStamp) -> bool {
    s.stamp.rev >= stamp.rev && s.stamp.nodes_rev >= stamp.nodes_rev
}

fn cached(rev: i64, body: &serde_json::Value) -> Result<Arc<CachedNode>, String> {
    let node: Node = from_body(body).map_err(|e| e.to_string())?;
    let props_json = serde_json::to_string(&node.properties).map_err(|e| e.to_string())?;
    Ok(Arc::new(CachedNode {
        rev,
        node,
        props_json,
    }))
}

fn build(
    stamp: ClusterStamp,
    owner: String,
    body: Arc<ClusterBody>,
    nodes: BTreeMap<String, Arc<CachedNode>>,
) -> Result<Snapshot, String> {
    let retiring: std::collections::BTreeSet<&str> =
        body.retiring.iter().map(String::as_str).collect();
    let mut layout_all: Vec<PlanNode> = nodes
        .values()
        .map(|n| plan_node(&n.node.id, &n.node.properties))
        .collect();
    layout_all.sort_by(|a, b| (a.nodenum, &a.id).cmp(&(b.nodenum, &b.id)));
    let layout: Vec<PlanNode> = layout_all
        .iter()
        .filter(|n| !retiring.contains(n.id.as_str()))
        .cloned()
        .collect();
    let mut json = String::with_capacity(nodes.values().map(|n| n.props_json.len() + 40).sum());
    json.push('{');
    let staying = nodes
        .iter()
        .filter(|(id, _)| !retiring.contains(id.as_str()));
    for (i, (id, n)) in staying.enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&serde_json::to_string(id).map_err(|e| e.to_string())?);
        json.push(':');
        json.push_str(&n.props_json);
    }
    json.push('}');
    let nodes_json = RawValue::from_string(json).map_err(|e| e.to_string())?;
    Ok(Snapshot {
        stamp,
        owner,
        body,
        nodes,
        layout,
        layout_all,
        nodes_json,
    })
}

/// How long a provisioner seen registered is trusted without reading the store again. Deletes in
/// this process forget it at once; another server's delete is noticed within this time.
const PROVISIONER_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// Provisioners recently seen registered: `take` and `finish` check the worker's provisioner on
/// every call, which would otherwise be a read per request.
#[derive(Default)]
pub struct ProvisionerCache {
    seen: Mutex<HashMap<String, std::time::Instant>>,
}

impl ProvisionerCache {
    /// Whether `id` is registered.
    pub async fn is_registered(&self, store: &dyn Store, id: &str) -> weft_store::Result<bool> {
        let fresh = self
            .seen
            .lock()
            .expect("cache lock")
            .get(id)
            .is_some_and(|t| t.elapsed() < PROVISIONER_TTL);
        if fresh {
            return Ok(true);
        }
        let known = store.get_provisioner(id).await?.is_some();
        let mut seen = self.seen.lock().expect("cache lock");
        if known {
            seen.insert(id.to_string(), std::time::Instant::now());
        } else {
            seen.remove(id);
        }
        Ok(known)
    }

    /// Forgets `id` (it was just deleted).
    pub fn forget(&self, id: &str) {
        self.seen.lock().expect("cache lock").remove(id);
    }
}

/// At most this many leases are remembered (a lease that never finishes stays until the janitor
/// times it out).
const LEASES_MAX: usize = 100_000;

/// A task and its job's status and revision, as [`Store::task_with_job`] answers.
pub type LeasedTask = (TaskRow, Option<(String, i64)>);

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
    pub fn remember(&self, task: TaskRow, job: Option<(String, i64)>) {
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
