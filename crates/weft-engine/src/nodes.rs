//! Node records written and removed directly (`/v2/nodes`, for admins), and the nodes a caller
//! may see.

use std::collections::BTreeSet;

use weft_model::Node;
use weft_store::{ChangeSet, Expect, NodeRow, Write};

use crate::body::{from_body, to_body};
use crate::error::{EngineError, EngineResult};
use crate::{parse_cluster_id, store_err, view, Caller, Engine};

/// The node records of the clusters `who` may see (all of the tenant's for an admin).
pub async fn visible_nodes(st: &Engine, who: &Caller) -> EngineResult<Vec<NodeRow>> {
    let rows = st.store.list_tenant_nodes(&who.tenant.id).await?;
    if who.is_admin() {
        return Ok(rows);
    }
    let mine: BTreeSet<u64> = st
        .store
        .list_clusters(&who.tenant.id, Some(&who.user))
        .await?
        .iter()
        .map(|c| c.id)
        .collect();
    Ok(rows
        .into_iter()
        .filter(|r| mine.contains(&r.cluster_id))
        .collect())
}

/// The nodes `who` may see as the API shows them, each with its history: an answer that can
/// read many nodes, built under a heavy-read permit.
pub async fn shown(st: &Engine, who: &Caller) -> EngineResult<Vec<Node>> {
    let _permit = st.heavy_read().await?;
    let mut out = Vec::new();
    for r in visible_nodes(st, who).await? {
        out.push(view::node(st, &r).await?);
    }
    Ok(out)
}

/// The node `id` as the API shows it, if `who` may see it.
pub async fn shown_one(st: &Engine, who: &Caller, id: &str) -> EngineResult<Node> {
    let _permit = st.light_read().await?;
    let row = find(st, who, id).await?;
    view::node(st, &row).await
}

/// The node `id` if `who` may see it (an admin any of the tenant's, a user those of their own
/// clusters).
pub async fn find(st: &Engine, who: &Caller, id: &str) -> EngineResult<NodeRow> {
    let missing = || EngineError::NodeNotFound(id.to_string());
    let row = st
        .store
        .get_node(&who.tenant.id, id)
        .await?
        .ok_or_else(missing)?;
    if !who.is_admin() {
        let cluster = st.store.get_cluster(&who.tenant.id, row.cluster_id).await?;
        if cluster.is_none_or(|c| c.owner != who.user) {
            return Err(missing());
        }
    }
    Ok(row)
}

/// Writes a node record of one of the tenant's clusters (a new one when `expect_absent`). Its
/// history is read from tasks, and masked secrets written back keep their values.
async fn put_node(
    st: &Engine,
    who: &Caller,
    mut node: Node,
    expect_absent: bool,
) -> EngineResult<()> {
    node.actions.clear();
    if let Some(old) = st.store.get_node(&who.tenant.id, &node.id).await? {
        let old: Node = from_body(&old.body)?;
        view::unmask_results(&mut node.provisioner_results, &old.provisioner_results);
    }
    view::seal_results(st, &who.tenant.id, &mut node.provisioner_results).await?;
    let cluster_id = parse_cluster_id(&node.cluster_id).ok_or_else(|| {
        EngineError::Invalid(format!("clusterId {} is not a cluster id", node.cluster_id))
    })?;
    st.store
        .get_cluster(&who.tenant.id, cluster_id)
        .await?
        .ok_or_else(|| EngineError::ClusterNotFound(node.cluster_id.clone()))?;
    let mut cs = ChangeSet::new();
    if expect_absent {
        cs.expect(Expect::NodeRev {
            tenant_id: who.tenant.id.clone(),
            id: node.id.clone(),
            rev: 0,
        });
    }
    cs.write(Write::Node(NodeRow {
        tenant_id: who.tenant.id.clone(),
        cluster_id,
        id: node.id.clone(),
        nodenum: node.properties.nodenum,
        rev: 0,
        body: to_body(&node)?,
    }));
    st.store.commit(&cs).await.map_err(|e| match store_err(e) {
        EngineError::Stale(_) => EngineError::NodeExists(node.id.clone()),
        other => other,
    })
}

/// Removes a node record.
async fn delete_node(st: &Engine, who: &Caller, id: String) -> EngineResult<()> {
    let cs = ChangeSet {
        expect: vec![],
        writes: vec![Write::DeleteNode {
            tenant_id: who.tenant.id.clone(),
            id,
        }],
    };
    st.store.commit(&cs).await.map_err(store_err)
}

/// Records a new node (tenant admins).
pub async fn create(st: &Engine, who: &Caller, node: Node) -> EngineResult<()> {
    who.require_admin()?;
    if node.id.is_empty() {
        return Err(EngineError::Invalid("node id must be specified".into()));
    }
    put_node(st, who, node, true).await
}

/// Replaces node `id`'s record (tenant admins).
pub async fn replace(st: &Engine, who: &Caller, id: &str, node: Node) -> EngineResult<()> {
    who.require_admin()?;
    if node.id != id {
        return Err(EngineError::Invalid(format!(
            "node id in the body ({}) does not match the path ({id})",
            node.id
        )));
    }
    find(st, who, id).await?;
    put_node(st, who, node, false).await
}

/// Removes node `id`'s record (tenant admins).
pub async fn remove(st: &Engine, who: &Caller, id: String) -> EngineResult<()> {
    who.require_admin()?;
    delete_node(st, who, id).await
}

/// The properties of cluster `cluster_id`'s nodes that run every service of `services`, by node
/// id, only those named in `properties` (all if none); nothing for a cluster the caller cannot
/// see, as Coopr answered.
pub async fn properties(
    st: &Engine,
    who: &Caller,
    cluster_id: Option<String>,
    properties: &[String],
    services: &[String],
) -> EngineResult<serde_json::Map<String, serde_json::Value>> {
    let id = cluster_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| EngineError::Invalid("clusterId must be specified".into()))?;
    let mut out = serde_json::Map::new();
    let Ok(row) = view::visible(st, who, &id).await else {
        return Ok(out);
    };
    for r in st.store.list_nodes(&row.tenant_id, row.id).await? {
        let node: Node = from_body(&r.body)?;
        if !services
            .iter()
            .all(|s| node.properties.services.contains(s))
        {
            continue;
        }
        let mut props = serde_json::to_value(&node.properties)
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        if let (false, Some(o)) = (properties.is_empty(), props.as_object_mut()) {
            o.retain(|k, _| properties.contains(k));
        }
        out.insert(node.id, props);
    }
    Ok(out)
}
