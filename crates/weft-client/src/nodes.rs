//! The `nodes` maps of clusters, held by revision for a provisioner's workers. A worker that
//! announces [`weft_model::NODES_BY_REVISION`] gets payloads that name a revision of the cluster's
//! map (`nodesRevision`) instead of carrying it (contract §5.11's `config.nodes`: every node's
//! properties in every task, which grows with the square of the cluster over a create). The client
//! fetches the map once, then only its changes (`POST /v2/tasks/nodes`), and splices it into
//! the task, so plugins see the payload the contract describes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use weft_model::TaskNodes;

/// Clusters whose map is held; past this, one is dropped (and fetched whole if needed again).
const CLUSTERS: usize = 64;

/// One cluster's map at one revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeldMap {
    /// The map's revision, `instance.lineage.seq` as the server names it.
    pub revision: String,
    /// Each node's properties, by node id, as `config.nodes` carries them.
    pub nodes: BTreeMap<String, Value>,
}

impl HeldMap {
    /// The map after `answer`: replaced by a whole map, else changed and pruned.
    pub fn apply(&mut self, answer: TaskNodes) {
        if answer.full {
            self.nodes.clear();
        }
        for id in &answer.removed {
            self.nodes.remove(id);
        }
        self.nodes.extend(answer.nodes);
        self.revision = answer.revision;
    }

    /// The map as `config.nodes` carries it (ordered by node id, as the server writes it).
    pub fn to_config(&self) -> Value {
        Value::Object(
            self.nodes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<String, Value>>(),
        )
    }
}

/// A cluster: tenant id and cluster id (as the task names it).
type Key = (String, String);

/// The maps held, shared by every worker of a client.
#[derive(Debug, Default)]
pub struct NodesCache {
    held: Mutex<HashMap<Key, Arc<HeldMap>>>,
    /// One fetch per cluster at a time: workers whose tasks name a newer revision wait for the
    /// first one's fetch instead of each fetching.
    fetching: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl NodesCache {
    /// The map held for the cluster, if it is at least as new as `wanted`.
    pub fn covering(&self, tenant: &str, cluster: &str, wanted: &str) -> Option<Arc<HeldMap>> {
        let held = self.held.lock().expect("nodes cache lock");
        held.get(&(tenant.to_string(), cluster.to_string()))
            .filter(|m| weft_model::nodes_revision_covers(&m.revision, wanted))
            .cloned()
    }

    /// The map held for the cluster, whatever its revision.
    pub fn held(&self, tenant: &str, cluster: &str) -> Option<Arc<HeldMap>> {
        let held = self.held.lock().expect("nodes cache lock");
        held.get(&(tenant.to_string(), cluster.to_string()))
            .cloned()
    }

    /// Keeps `map` for the cluster (unless a newer one is held already) and returns what is held.
    pub fn keep(&self, tenant: &str, cluster: &str, map: HeldMap) -> Arc<HeldMap> {
        let mut held = self.held.lock().expect("nodes cache lock");
        let key = (tenant.to_string(), cluster.to_string());
        if let Some(cur) = held.get(&key) {
            if weft_model::nodes_revision_covers(&cur.revision, &map.revision)
                && cur.revision != map.revision
            {
                return cur.clone();
            }
        }
        if held.len() >= CLUSTERS && !held.contains_key(&key) {
            if let Some(k) = held.keys().next().cloned() {
                held.remove(&k);
                self.fetching.lock().expect("nodes cache lock").remove(&k);
            }
        }
        let map = Arc::new(map);
        held.insert(key, map.clone());
        map
    }

    /// The gate of the cluster's fetches.
    pub fn gate(&self, tenant: &str, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.fetching
            .lock()
            .expect("nodes cache lock")
            .entry((tenant.to_string(), cluster.to_string()))
            .or_default()
            .clone()
    }
}

/// Puts `map` into a task as `config.nodes` and drops `nodesRevision`: the payload a worker gets
/// without the capability.
pub fn splice(task: &mut Value, map: &HeldMap) {
    if let Some(o) = task.as_object_mut() {
        o.remove("nodesRevision");
    }
    if let Some(config) = task.get_mut("config").and_then(Value::as_object_mut) {
        config.insert("nodes".into(), map.to_config());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(v: Value) -> TaskNodes {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_whole_map_replaces_and_changes_change() {
        let mut m = HeldMap::default();
        m.apply(answer(json!({"revision": "a.1.1", "full": true,
            "nodes": {"n2": {"hostname": "h2"}, "n1": {"hostname": "h1"}}})));
        m.apply(answer(json!({"revision": "a.1.4", "full": false,
            "nodes": {"n3": {"hostname": "h3"}, "n1": {"hostname": "h1b"}}, "removed": ["n2"]})));
        assert_eq!(m.revision, "a.1.4");
        assert_eq!(
            serde_json::to_string(&m.to_config()).unwrap(),
            r#"{"n1":{"hostname":"h1b"},"n3":{"hostname":"h3"}}"#,
            "ordered by id, as the server writes the whole map"
        );
        m.apply(answer(
            json!({"revision": "b.7.7", "full": true, "nodes": {"n9": {}}}),
        ));
        assert_eq!(m.nodes.len(), 1);
    }

    #[test]
    fn a_newer_map_is_kept_over_an_older_one_and_covers_older_tasks() {
        let c = NodesCache::default();
        let new = HeldMap {
            revision: "a.1.5".into(),
            ..Default::default()
        };
        c.keep("t", "1", new);
        let old = HeldMap {
            revision: "a.1.3".into(),
            ..Default::default()
        };
        assert_eq!(c.keep("t", "1", old).revision, "a.1.5");
        assert!(c.covering("t", "1", "a.1.4").is_some());
        assert!(c.covering("t", "1", "a.1.6").is_none());
        assert!(c.covering("t", "1", "a.2.2").is_none(), "another lineage");
        assert!(c.covering("t", "1", "b.1.1").is_none(), "another server");
        assert!(c.covering("u", "1", "a.1.1").is_none(), "another tenant");
        let mut task = json!({"taskId": "x", "nodesRevision": "a.1.5", "config": {"k": 1}});
        let mut held = HeldMap::default();
        held.nodes.insert("n1".into(), json!({"hostname": "h"}));
        splice(&mut task, &held);
        assert_eq!(
            task,
            json!({"taskId": "x", "config": {"k": 1, "nodes": {"n1": {"hostname": "h"}}}})
        );
    }
}
