//! The hosts of a `hostpool` provider's pool as its tenant's admins manage them: listed, added,
//! written and removed (a host lent to a node stays). A host's private key is sealed when written
//! and never read back: answers show it as `********`, and a write without a key keeps the
//! stored one. Lending hosts to nodes is [`crate::hostpool`]'s.

use weft_model::{lenient, EntityKind, HostSpec, PoolHost, PoolHostRequest, Provider};
use weft_store::{HostDelete, PoolHostRow, StoreError};

use crate::entities::not_found;
use crate::error::{EngineError, EngineResult};
use crate::hostpool::{is_pool, view};
use crate::{cluster_id_text, Caller, Engine};

/// The hosts of pool `provider`.
pub async fn list(st: &Engine, who: &Caller, provider: &str) -> EngineResult<Vec<PoolHost>> {
    pool(st, who, provider).await?;
    let hosts = st
        .store
        .list_pool_hosts(&who.tenant.id, Some(provider))
        .await?;
    Ok(hosts.iter().map(view).collect())
}

/// Host `host` of pool `provider`.
pub async fn get(st: &Engine, who: &Caller, provider: &str, host: &str) -> EngineResult<PoolHost> {
    pool(st, who, provider).await?;
    let h = st
        .store
        .get_pool_host(&who.tenant.id, provider, host)
        .await?
        .ok_or_else(|| host_not_found(provider, host))?;
    Ok(view(&h))
}

/// Adds a host to pool `provider`.
pub async fn create(
    st: &Engine,
    who: &Caller,
    provider: &str,
    req: PoolHostRequest,
) -> EngineResult<PoolHost> {
    pool(st, who, provider).await?;
    let spec = req.check(None)?;
    let key = spec
        .key
        .clone()
        .ok_or_else(|| EngineError::Invalid("key must be specified".into()))?;
    let row = row(
        who,
        provider,
        &spec,
        seal_key(st, who, key).await?,
        st.now_ms(),
    );
    st.store
        .insert_pool_host(&row)
        .await
        .map_err(|e| conflict(e, &spec))?;
    tracing::info!(provider, host = %row.id, address = %row.address, "pool host added");
    Ok(view(&row))
}

/// Writes host `host` of pool `provider`, creating it if absent; without a key the stored one
/// stays, and a lent host keeps its node.
pub async fn put(
    st: &Engine,
    who: &Caller,
    provider: &str,
    host: &str,
    req: PoolHostRequest,
) -> EngineResult<PoolHost> {
    pool(st, who, provider).await?;
    let spec = req.check(Some(host))?;
    let stored = st
        .store
        .get_pool_host(&who.tenant.id, provider, host)
        .await?;
    let key = match (&spec.key, &stored) {
        (Some(k), _) => seal_key(st, who, k.clone()).await?,
        (None, Some(s)) => s.key.clone(),
        (None, None) => return Err(EngineError::Invalid("key must be specified".into())),
    };
    let mut row = row(who, provider, &spec, key, st.now_ms());
    let written = match stored {
        Some(_) => st.store.update_pool_host(&row).await,
        // Created by a concurrent writer meanwhile: its conflict is this PUT's answer.
        None => st.store.insert_pool_host(&row).await.map(|()| true),
    }
    .map_err(|e| conflict(e, &spec))?;
    if !written {
        return Err(host_not_found(provider, host)); // deleted meanwhile
    }
    if let Some(h) = st
        .store
        .get_pool_host(&who.tenant.id, provider, host)
        .await?
    {
        row = h;
    }
    tracing::info!(provider, host = %row.id, address = %row.address, "pool host written");
    Ok(view(&row))
}

/// Removes host `host` from pool `provider`, unless it is lent to a node.
pub async fn delete(st: &Engine, who: &Caller, provider: &str, host: &str) -> EngineResult<()> {
    pool(st, who, provider).await?;
    match st
        .store
        .delete_pool_host(&who.tenant.id, provider, host)
        .await?
    {
        HostDelete::Deleted => {
            tracing::info!(provider, host, "pool host removed");
            Ok(())
        }
        HostDelete::Missing => Err(host_not_found(provider, host)),
        HostDelete::InUse(l) => Err(EngineError::HostInUse {
            host: host.to_string(),
            node: l.node_id,
            cluster: cluster_id_text(l.cluster_id),
        }),
    }
}

/// The provider, if the caller administers its tenant and it is a host pool.
async fn pool(st: &Engine, who: &Caller, name: &str) -> EngineResult<Provider> {
    who.require_admin()?;
    let doc = st
        .store
        .get_entity(&who.tenant.id, EntityKind::Provider, name, None)
        .await?
        .ok_or_else(|| not_found(EntityKind::Provider, name))?;
    let p: Provider = lenient::from_value(doc)?;
    if !is_pool(&p) {
        return Err(EngineError::NotAPool {
            provider: name.to_string(),
            providertype: p.providertype,
        });
    }
    Ok(p)
}

fn row(who: &Caller, provider: &str, spec: &HostSpec, key: String, now: i64) -> PoolHostRow {
    PoolHostRow {
        tenant_id: who.tenant.id.clone(),
        provider: provider.to_string(),
        id: spec.id.clone(),
        address: spec.address.clone(),
        port: spec.port,
        user: spec.user.clone(),
        key,
        labels: spec.labels.clone(),
        lease: None,
        create_time: now,
    }
}

/// A host's private key as it is stored: sealed.
async fn seal_key(st: &Engine, who: &Caller, key: String) -> EngineResult<String> {
    let sealed = st
        .sealer
        .seal(&who.tenant.id, &serde_json::Value::String(key))
        .await?;
    Ok(sealed.as_str().unwrap_or_default().to_string())
}

fn host_not_found(provider: &str, host: &str) -> EngineError {
    EngineError::HostNotFound {
        provider: provider.to_string(),
        host: host.to_string(),
    }
}

fn conflict(e: StoreError, spec: &HostSpec) -> EngineError {
    match e {
        StoreError::Conflict(_) => EngineError::HostExists {
            host: spec.id.clone(),
            address: spec.address.clone(),
            port: spec.port,
        },
        other => other.into(),
    }
}
