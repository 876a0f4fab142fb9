//! Sealing what an older store keeps in clear, once at start: providers' sensitive fields (a
//! provider's older versions that held them in clear are removed: the sealed version replaces
//! them), the secrets clusters keep, nodes' SSH keys and passwords, pool hosts' keys. Values
//! already sealed are left alone, so a store sealed before costs one read of each row.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use weft_model::{EntityKind, PluginType};
use weft_store::{ChangeSet, Expect, Write, SUPERADMIN};

use crate::body::{from_body, to_body, ClusterBody};
use crate::error::EngineResult;
use crate::seal::is_sealed;
use crate::{view, Engine};

/// The counter that says the store was read through once and nothing is left in clear: every
/// secret written since is sealed as it is written, so later starts skip the pass (which reads
/// every node of every tenant).
const DONE: &str = "sealed-at-rest";

/// Seals every secret the store still holds in clear, once per store; answers how many rows it
/// rewrote.
pub async fn seal_what_is_clear(st: &Engine) -> EngineResult<usize> {
    if st.store.counter(DONE).await? > 0 {
        return Ok(0);
    }
    let rewritten = seal_every_row(st).await?;
    st.store.next_id(DONE).await?;
    Ok(rewritten)
}

/// The pass itself: every tenant's providers, clusters, nodes and pool hosts.
pub async fn seal_every_row(st: &Engine) -> EngineResult<usize> {
    let sensitive = sensitive_by_type(st).await?;
    let mut rewritten = 0;
    for tenant in st.store.list_tenants().await? {
        rewritten += seal_providers(st, &tenant.id, &sensitive).await?;
        rewritten += seal_clusters(st, &tenant.id, &sensitive).await?;
        rewritten += seal_nodes(st, &tenant.id).await?;
        rewritten += seal_pool_hosts(st, &tenant.id).await?;
    }
    if rewritten > 0 {
        tracing::info!(rows = rewritten, "sealed secrets the store held in clear");
    }
    Ok(rewritten)
}

/// Provider type name -> its sensitive fields.
async fn sensitive_by_type(st: &Engine) -> EngineResult<HashMap<String, BTreeSet<String>>> {
    let mut out = HashMap::new();
    for doc in st
        .store
        .list_entities(SUPERADMIN, EntityKind::ProviderType)
        .await?
    {
        if let Ok(pt) = serde_json::from_value::<PluginType>(doc) {
            let fields = pt.sensitive_fields().into_iter().map(str::to_string);
            out.insert(pt.name.clone(), fields.collect());
        }
    }
    Ok(out)
}

/// The sensitive fields of `provisioner` that are not sealed yet.
fn clear_fields<'a>(
    provisioner: Option<&serde_json::Map<String, Value>>,
    sensitive: Option<&'a BTreeSet<String>>,
) -> Vec<&'a str> {
    let (Some(p), Some(s)) = (provisioner, sensitive) else {
        return Vec::new();
    };
    s.iter()
        .filter(|f| p.get(f.as_str()).is_some_and(|v| !is_sealed(v)))
        .map(String::as_str)
        .collect()
}

async fn seal_providers(
    st: &Engine,
    tenant: &str,
    sensitive: &HashMap<String, BTreeSet<String>>,
) -> EngineResult<usize> {
    let mut n = 0;
    for mut doc in st.store.list_entities(tenant, EntityKind::Provider).await? {
        let ptype = doc["providertype"].as_str().unwrap_or_default().to_string();
        let name = doc["name"].as_str().unwrap_or_default().to_string();
        let latest = doc["version"].as_u64().unwrap_or(0);
        let fields = clear_fields(doc["provisioner"].as_object(), sensitive.get(&ptype));
        if fields.is_empty() {
            continue;
        }
        if let Some(p) = doc["provisioner"].as_object_mut() {
            st.sealer.seal_fields(tenant, p, fields).await?;
        }
        st.store
            .put_entity(tenant, EntityKind::Provider, &name, &doc)
            .await?;
        for v in 1..=latest {
            st.store
                .delete_entity(tenant, EntityKind::Provider, &name, Some(v))
                .await?;
        }
        n += 1;
    }
    Ok(n)
}

async fn seal_clusters(
    st: &Engine,
    tenant: &str,
    sensitive: &HashMap<String, BTreeSet<String>>,
) -> EngineResult<usize> {
    let mut n = 0;
    for row in st.store.list_clusters(tenant, None).await? {
        let mut body: ClusterBody = from_body(&row.body)?;
        let copy = clear_fields(
            Some(&body.provider.provisioner),
            sensitive.get(&body.provider.providertype),
        );
        let own = body.secrets.values().any(|v| !is_sealed(v));
        if copy.is_empty() && !own {
            continue;
        }
        st.sealer
            .seal_fields(tenant, &mut body.provider.provisioner, copy)
            .await?;
        for v in body.secrets.values_mut() {
            *v = st.sealer.seal(tenant, v).await?;
        }
        let mut new = row.clone();
        new.body = to_body(&body)?;
        commit_one(st, Expect::cluster(&row), Write::Cluster(new)).await?;
        n += 1;
    }
    Ok(n)
}

async fn seal_nodes(st: &Engine, tenant: &str) -> EngineResult<usize> {
    let mut n = 0;
    for row in st.store.list_tenant_nodes(tenant).await? {
        let mut node: weft_model::Node = from_body(&row.body)?;
        let before = node.provisioner_results.clone();
        view::seal_results(st, tenant, &mut node.provisioner_results).await?;
        if node.provisioner_results == before {
            continue;
        }
        let mut new = row.clone();
        new.body = to_body(&node)?;
        commit_one(st, Expect::node(&row), Write::Node(new)).await?;
        n += 1;
    }
    Ok(n)
}

/// One row rewritten, if it has not changed since it was read.
async fn commit_one(st: &Engine, expect: Expect, write: Write) -> EngineResult<()> {
    let mut cs = ChangeSet::new();
    cs.expect(expect);
    cs.write(write);
    Ok(st.store.commit(&cs).await?)
}

async fn seal_pool_hosts(st: &Engine, tenant: &str) -> EngineResult<usize> {
    let mut n = 0;
    for mut host in st.store.list_pool_hosts(tenant, None).await? {
        let key = Value::String(host.key.clone());
        if is_sealed(&key) {
            continue;
        }
        let sealed = st.sealer.seal(tenant, &key).await?;
        host.key = sealed.as_str().unwrap_or_default().to_string();
        st.store.update_pool_host(&host).await?;
        n += 1;
    }
    Ok(n)
}
