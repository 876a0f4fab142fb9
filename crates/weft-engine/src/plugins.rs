//! Plugin types and plugin resources.
//!
//! Plugin types are global: provisioners register them and they are kept under the superadmin
//! tenant; every tenant reads the same ones; only the superadmin deletes them. Plugin resources
//! (scripts, keys, archives) belong to a tenant and are managed by its admin: an upload makes an
//! inactive version, stage and recall mark what the next sync makes live (and the [`Messenger`]
//! pushes to provisioners), and provisioners download the bytes. The bytes live behind
//! [`ResourceStore`] (weft-server keeps them on the local filesystem), their versions in the store.
//!
//! [`Messenger`]: crate::Messenger

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;
use weft_model::{validate_name, EntityKind, PluginType, ResourceMeta, ResourceStatus};
use weft_store::{ResourceDelete, ResourceKey, SUPERADMIN};

use crate::entities::{normalize, parse_version};
use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine};

/// Where the bytes of plugin resource versions live.
#[async_trait::async_trait]
pub trait ResourceStore: Send + Sync + 'static {
    /// Stores the bytes of one version, replacing any there were.
    async fn put(&self, key: &ResourceKey, version: u64, bytes: Bytes) -> std::io::Result<()>;
    /// `None` if there are no bytes for this version.
    async fn get(&self, key: &ResourceKey, version: u64) -> std::io::Result<Option<Bytes>>;
    /// Removes the bytes; absent bytes are not an error.
    async fn delete(&self, key: &ResourceKey, version: u64) -> std::io::Result<()>;
}

/// A resource type of a plugin type, as a path names it: `{ptype}/{plugin}/{rtype}`.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// `providertypes` or `automatortypes`.
    pub ptype: String,
    /// The plugin type's name.
    pub plugin: String,
    /// The resource type, one the plugin type declares.
    pub rtype: String,
}

impl ResourceType {
    fn key(self, tenant_id: &str, name: &str) -> ResourceKey {
        ResourceKey {
            tenant_id: tenant_id.to_string(),
            ptype: self.ptype,
            plugin: self.plugin,
            rtype: self.rtype,
            name: name.to_string(),
        }
    }
}

/// The kind of plugin type a path segment names.
pub fn plugin_kind(ptype: &str) -> EngineResult<EntityKind> {
    match ptype {
        "providertypes" => Ok(EntityKind::ProviderType),
        "automatortypes" => Ok(EntityKind::AutomatorType),
        other => Err(EngineError::UnknownPluginKind(other.to_string())),
    }
}

/// Every plugin type of the kind `ptype` names.
pub async fn list_types(st: &Engine, ptype: &str) -> EngineResult<Vec<Value>> {
    let kind = plugin_kind(ptype)?;
    Ok(st.store.list_entities(SUPERADMIN, kind).await?)
}

/// The plugin type `name` of the kind `ptype` names.
pub async fn get_type(st: &Engine, ptype: &str, name: &str) -> EngineResult<Value> {
    let kind = plugin_kind(ptype)?;
    st.store
        .get_entity(SUPERADMIN, kind, name, None)
        .await?
        .ok_or_else(|| not_registered(kind, name))
}

/// Deletes every version of a plugin type, or the one `version` names (the superadmin only).
pub async fn delete_type(
    st: &Engine,
    who: &Caller,
    ptype: &str,
    name: &str,
    version: Option<&str>,
) -> EngineResult<()> {
    who.require_superadmin()?;
    let kind = plugin_kind(ptype)?;
    let version = version.map(parse_version).transpose()?;
    Ok(st
        .store
        .delete_entity(SUPERADMIN, kind, name, version)
        .await?)
}

/// Registers the plugin type in `body` (a provisioner at start) as a new version of `name`.
pub async fn register_type(st: &Engine, ptype: &str, name: &str, body: &[u8]) -> EngineResult<()> {
    let kind = plugin_kind(ptype)?;
    let value: Value = weft_model::lenient::parse_as(body, "a plugin type object")?;
    if !value.is_object() {
        return Err(EngineError::Invalid(
            "request body must be a plugin type object".into(),
        ));
    }
    let (name, doc) = normalize(kind, value, Some(name))?;
    st.store.put_entity(SUPERADMIN, kind, &name, &doc).await?;
    Ok(())
}

fn not_registered(kind: EntityKind, name: &str) -> EngineError {
    EngineError::PluginNotFound {
        kind: kind.label(),
        name: name.to_string(),
    }
}

/// Checks the caller (the tenant's admin) and that the plugin type has the resource type.
async fn resource_scope(st: &Engine, who: &Caller, at: &ResourceType) -> EngineResult<()> {
    who.require_admin()?;
    let kind = plugin_kind(&at.ptype)?;
    let doc = st
        .store
        .get_entity(SUPERADMIN, kind, &at.plugin, None)
        .await?
        .ok_or_else(|| not_registered(kind, &at.plugin))?;
    let pt: PluginType =
        serde_json::from_value(doc).map_err(|e| EngineError::Internal(e.to_string()))?;
    if !pt.resource_types.contains_key(&at.rtype) {
        return Err(EngineError::ResourceTypeNotFound {
            rtype: at.rtype.clone(),
            kind: kind.label(),
            plugin: at.plugin.clone(),
        });
    }
    Ok(())
}

/// A `?status=` filter.
fn status_filter(status: Option<&str>) -> EngineResult<Option<ResourceStatus>> {
    status
        .map(|s| {
            ResourceStatus::parse(s)
                .ok_or_else(|| EngineError::Invalid("invalid status filter.".into()))
        })
        .transpose()
}

/// The tenant's resources of one resource type, name -> versions (admin), those in `status`.
pub async fn list_resources(
    st: &Engine,
    who: &Caller,
    at: &ResourceType,
    status: Option<&str>,
) -> EngineResult<BTreeMap<String, Vec<ResourceMeta>>> {
    resource_scope(st, who, at).await?;
    let filter = status_filter(status)?;
    let mut out: BTreeMap<String, Vec<ResourceMeta>> = BTreeMap::new();
    for row in st
        .store
        .list_resources(&who.tenant.id, &at.ptype, &at.plugin, &at.rtype, None)
        .await?
    {
        if filter.is_none_or(|f| f == row.meta.status) {
            out.entry(row.key.name).or_default().push(row.meta);
        }
    }
    Ok(out)
}

/// Every version of the resource `name` (admin), those in `status`.
pub async fn list_versions(
    st: &Engine,
    who: &Caller,
    at: &ResourceType,
    name: &str,
    status: Option<&str>,
) -> EngineResult<Vec<ResourceMeta>> {
    resource_scope(st, who, at).await?;
    let filter = status_filter(status)?;
    let rows = st
        .store
        .list_resources(&who.tenant.id, &at.ptype, &at.plugin, &at.rtype, Some(name))
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| r.meta)
        .filter(|m| filter.is_none_or(|f| f == m.status))
        .collect())
}

/// A new, inactive version of the resource `name` with `body` as its bytes (admin).
pub async fn upload(
    st: &Engine,
    resources: &dyn ResourceStore,
    who: &Caller,
    at: ResourceType,
    name: &str,
    body: Bytes,
) -> EngineResult<ResourceMeta> {
    resource_scope(st, who, &at).await?;
    validate_name("resource name", name)?;
    let key = at.key(&who.tenant.id, name);
    let version = st.store.create_resource_version(&key).await?;
    if let Err(e) = resources.put(&key, version, body).await {
        // Without its bytes the version must not exist: take the record back.
        let _ = st.store.delete_resource(&key, Some(version)).await;
        return Err(EngineError::Internal(format!(
            "storing resource bytes: {e}"
        )));
    }
    Ok(ResourceMeta {
        name: key.name,
        version,
        status: ResourceStatus::Inactive,
    })
}

/// Stages (`stage`) or recalls a version of the resource `name` for the next sync (admin).
pub async fn transition(
    st: &Engine,
    who: &Caller,
    at: ResourceType,
    (name, version): (&str, &str),
    stage: bool,
) -> EngineResult<()> {
    resource_scope(st, who, &at).await?;
    let version = parse_version(version)?;
    let key = at.key(&who.tenant.id, name);
    let found = if stage {
        st.store.stage_resource(&key, version).await?
    } else {
        st.store.recall_resource(&key, version).await?
    };
    if found {
        Ok(())
    } else {
        Err(EngineError::ResourceVersionNotFound {
            name: key.name,
            version,
        })
    }
}

/// Deletes every version of the resource `name`, or the one `version` names (admin), with
/// their bytes; only when each is inactive.
pub async fn delete_resource(
    st: &Engine,
    resources: &dyn ResourceStore,
    who: &Caller,
    at: ResourceType,
    name: &str,
    version: Option<&str>,
) -> EngineResult<()> {
    resource_scope(st, who, &at).await?;
    let version = version.map(parse_version).transpose()?;
    let key = at.key(&who.tenant.id, name);
    let rows = st
        .store
        .list_resources(
            &key.tenant_id,
            &key.ptype,
            &key.plugin,
            &key.rtype,
            Some(name),
        )
        .await?;
    match st.store.delete_resource(&key, version).await? {
        ResourceDelete::NotDeletable => Err(EngineError::ResourceNotDeletable),
        ResourceDelete::Deleted => {
            for row in rows
                .iter()
                .filter(|r| version.is_none_or(|v| v == r.meta.version))
            {
                if let Err(e) = resources.delete(&key, row.meta.version).await {
                    tracing::warn!(resource = %key.name, version = row.meta.version, error = %e, "could not remove resource bytes");
                }
            }
            Ok(())
        }
    }
}

/// Makes staged versions live and recalled ones inactive (admin); the [`Messenger`] pushes the
/// live ones to provisioners in the background.
///
/// [`Messenger`]: crate::Messenger
pub async fn sync(st: &Engine, who: &Caller) -> EngineResult<()> {
    who.require_admin()?;
    st.store.sync_resources(&who.tenant.id).await?;
    st.messenger.resources_synced(&who.tenant.id);
    Ok(())
}

/// The bytes of a resource version of `tenant_id`, for a provisioner's worker.
pub async fn download(
    st: &Engine,
    resources: &dyn ResourceStore,
    tenant_id: &str,
    (at, name): (ResourceType, &str),
    version: &str,
) -> EngineResult<Bytes> {
    let version = parse_version(version)?;
    plugin_kind(&at.ptype)?;
    let key = at.key(tenant_id, name);
    let known = st
        .store
        .list_resources(tenant_id, &key.ptype, &key.plugin, &key.rtype, Some(name))
        .await?
        .iter()
        .any(|r| r.meta.version == version);
    let bytes = match known {
        true => resources
            .get(&key, version)
            .await
            .map_err(|e| EngineError::Internal(e.to_string()))?,
        false => None,
    };
    bytes.ok_or(EngineError::ResourceNotFound)
}

/// Copies every resource version of `from` into `to` (a bootstrapped tenant), keeping what was
/// live or staged live after a sync.
pub async fn copy_resources(
    st: &Engine,
    resources: &dyn ResourceStore,
    from: &str,
    to: &str,
) -> EngineResult<()> {
    let internal = |e: std::io::Error| EngineError::Internal(e.to_string());
    for kind in [EntityKind::ProviderType, EntityKind::AutomatorType] {
        for doc in st.store.list_entities(SUPERADMIN, kind).await? {
            let Ok(pt) = serde_json::from_value::<PluginType>(doc) else {
                continue;
            };
            for rtype in pt.resource_types.keys() {
                for row in st
                    .store
                    .list_resources(from, kind.as_str(), &pt.name, rtype, None)
                    .await?
                {
                    let Some(bytes) = resources
                        .get(&row.key, row.meta.version)
                        .await
                        .map_err(internal)?
                    else {
                        continue;
                    };
                    let key = ResourceKey {
                        tenant_id: to.to_string(),
                        ..row.key.clone()
                    };
                    let v = st.store.create_resource_version(&key).await?;
                    resources.put(&key, v, bytes).await.map_err(internal)?;
                    if matches!(
                        row.meta.status,
                        ResourceStatus::Active | ResourceStatus::Staged
                    ) {
                        st.store.stage_resource(&key, v).await?;
                    }
                }
            }
        }
    }
    st.store.sync_resources(to).await?;
    Ok(())
}
