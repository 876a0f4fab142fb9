//! The admin-defined catalog entries (providers, hardware and image types, services, cluster and
//! partial templates) as the API reads and writes them: each read leniently, validated and kept
//! in canonical JSON ([`normalize`]); reads open to every user of the tenant, writes to its admin;
//! what a write answers (the gaps it leaves). Provider secrets: the fields a provider's type marks
//! sensitive are masked in every answer ([`mask_provider`]), kept when written back masked and
//! sealed before they are stored ([`provider_to_store`]).

use serde_json::Value;
use weft_model::{
    lenient, CatalogWriteAnswer, ClusterTemplate, EntityKind, MachineType, PartialTemplate,
    PluginType, Provider, Service, Validate,
};
use weft_store::{StoreError, SUPERADMIN};

use crate::error::{EngineError, EngineResult};
use crate::view::MASK;
use crate::{gaps, Caller, Engine};

/// A version as a path names it, read as Coopr did: a positive number.
pub fn parse_version(s: &str) -> EngineResult<u64> {
    let v: i64 = s
        .trim()
        .parse()
        .map_err(|_| EngineError::Invalid("Version must be a number".into()))?;
    if v <= 0 {
        return Err(EngineError::Invalid(
            "Version must be higher then zero".into(),
        ));
    }
    Ok(v as u64)
}

/// The entity `name` of `kind` that the tenant lacks.
pub fn not_found(kind: EntityKind, name: &str) -> EngineError {
    EngineError::EntityNotFound {
        kind: kind.label(),
        name: name.to_string(),
    }
}

/// The latest version of every entity of `kind`, sensitive provider fields masked; an entry that
/// names what the catalog lacks carries `incomplete` (a list of {field, message}).
pub async fn list(st: &Engine, who: &Caller, kind: EntityKind) -> EngineResult<Vec<Value>> {
    let tenant = &who.tenant.id;
    let mut items = st.store.list_entities(tenant, kind).await?;
    let mut lacking = gaps::incomplete(st, tenant, kind, &items).await?;
    for item in &mut items {
        if kind == EntityKind::Provider {
            mask_provider(st, item).await?;
        }
        let lacks = item["name"].as_str().and_then(|n| lacking.remove(n));
        if let (Some(lacks), Some(obj)) = (lacks, item.as_object_mut()) {
            let lacks =
                serde_json::to_value(lacks).map_err(|e| EngineError::Internal(e.to_string()))?;
            obj.insert("incomplete".into(), lacks);
        }
    }
    Ok(items)
}

/// The entity `name` of `kind` (its latest version, or `version` as a path names it), sensitive
/// provider fields masked.
pub async fn get(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    name: &str,
    version: Option<&str>,
) -> EngineResult<Value> {
    let version = version.map(parse_version).transpose()?;
    let mut item = st
        .store
        .get_entity(&who.tenant.id, kind, name, version)
        .await?
        .ok_or_else(|| not_found(kind, name))?;
    if kind == EntityKind::Provider {
        mask_provider(st, &mut item).await?;
    }
    Ok(item)
}

/// Every stored version of the entity `name` of `kind`, oldest first, sensitive provider fields
/// masked; `EntityNotFound` when it has none.
pub async fn versions(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    name: &str,
) -> EngineResult<Vec<Value>> {
    let mut items = st.store.entity_versions(&who.tenant.id, kind, name).await?;
    if items.is_empty() {
        return Err(not_found(kind, name));
    }
    if kind == EntityKind::Provider {
        for item in &mut items {
            mask_provider(st, item).await?;
        }
    }
    Ok(items)
}

/// Creates version 1 of the entity in `body` (admin); its name must be new.
pub async fn create(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    body: &[u8],
) -> EngineResult<CatalogWriteAnswer> {
    who.require_admin()?;
    let (name, doc) = for_store(st, who, kind, body, None).await?;
    match st
        .store
        .create_entity(&who.tenant.id, kind, &name, &doc)
        .await
    {
        Err(StoreError::Conflict(_)) => Err(EngineError::EntityExists {
            kind: kind.label(),
            name,
        }),
        other => {
            other?;
            written(st, who, kind, &doc).await
        }
    }
}

/// Writes the entity in `body` as a new version of `name` (admin), creating it if absent.
pub async fn put(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    name: &str,
    body: &[u8],
) -> EngineResult<CatalogWriteAnswer> {
    who.require_admin()?;
    let (name, doc) = for_store(st, who, kind, body, Some(name)).await?;
    st.store
        .put_entity(&who.tenant.id, kind, &name, &doc)
        .await?;
    // Credentials are read when used: the next task of every cluster gets the new fields.
    st.providers.forget(&who.tenant.id);
    written(st, who, kind, &doc).await
}

/// Deletes every version of `name`, or the one `version` names (admin); absent is fine.
pub async fn delete(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    name: &str,
    version: Option<&str>,
) -> EngineResult<()> {
    who.require_admin()?;
    let version = version.map(parse_version).transpose()?;
    st.store
        .delete_entity(&who.tenant.id, kind, name, version)
        .await?;
    st.providers.forget(&who.tenant.id);
    Ok(())
}

/// The entity of a write's body as it is stored: read, validated, refused if it can never run,
/// a provider's secrets sealed.
async fn for_store(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    body: &[u8],
    path_name: Option<&str>,
) -> EngineResult<(String, Value)> {
    let value = object(body, kind)?;
    let (name, mut doc) = normalize(kind, value, path_name)?;
    gaps::refuse_unrunnable(st, kind, &doc).await?;
    if kind == EntityKind::Provider {
        provider_to_store(st, &who.tenant.id, &mut doc).await?;
    }
    Ok((name, doc))
}

/// The answer to a write: what the catalog lacks for the entity, or what it may not mean.
async fn written(
    st: &Engine,
    who: &Caller,
    kind: EntityKind,
    doc: &Value,
) -> EngineResult<CatalogWriteAnswer> {
    let warnings = gaps::write_warnings(st, &who.tenant.id, kind, doc).await?;
    Ok(CatalogWriteAnswer { warnings })
}

/// A request body read leniently, which must be an object (`kind` names it in messages).
pub fn object(body: &[u8], kind: EntityKind) -> EngineResult<Value> {
    let v: Value = lenient::parse_as(body, &format!("a {} object", kind.label()))?;
    if !v.is_object() {
        return Err(EngineError::Invalid(format!(
            "request body must be a {} object",
            kind.label()
        )));
    }
    Ok(v)
}

/// Reads an entity of `kind` leniently, validates it, and returns its name and canonical JSON (the
/// form that is stored and answered). With `path_name`, the body's name must match it (a body without
/// a name takes the path's).
pub fn normalize(
    kind: EntityKind,
    mut value: Value,
    path_name: Option<&str>,
) -> EngineResult<(String, Value)> {
    if let (Some(p), Some(obj)) = (path_name, value.as_object_mut()) {
        match obj.get("name") {
            None | Some(Value::Null) => {
                obj.insert("name".into(), Value::String(p.to_string()));
            }
            Some(Value::String(n)) if n == p => {}
            Some(other) => {
                let shown = other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string());
                return Err(EngineError::Invalid(format!(
                    "name in the body ({shown}) does not match the name in the path ({p})"
                )));
            }
        }
    }
    fn typed<T: serde::de::DeserializeOwned + serde::Serialize + Validate>(
        v: Value,
        name_of: fn(&T) -> &str,
    ) -> EngineResult<(String, Value)> {
        let t: T = lenient::from_value(v)?;
        t.validate()?;
        let name = name_of(&t).to_string();
        let doc = serde_json::to_value(&t).map_err(|e| EngineError::Internal(e.to_string()))?;
        Ok((name, doc))
    }
    match kind {
        EntityKind::Provider => typed::<Provider>(value, |t| &t.name),
        EntityKind::HardwareType | EntityKind::ImageType => {
            typed::<MachineType>(value, |t| &t.name)
        }
        EntityKind::Service => typed::<Service>(value, |t| &t.name),
        EntityKind::ClusterTemplate => typed::<ClusterTemplate>(value, |t| &t.name),
        EntityKind::PartialTemplate => typed::<PartialTemplate>(value, |t| &t.name),
        EntityKind::ProviderType | EntityKind::AutomatorType => {
            typed::<PluginType>(value, |t| &t.name)
        }
    }
}

/// The entities of a catalog document (the shape of `GET /v2/export`), each read leniently,
/// validated and in canonical form. A kind left out contributes nothing.
pub fn catalog_entities(v: Value) -> EngineResult<Vec<(EntityKind, String, Value)>> {
    let Value::Object(mut obj) = v else {
        return Err(EngineError::Invalid(
            "Json syntax error: expected an object with the six entity lists".into(),
        ));
    };
    let mut entities = Vec::new();
    for kind in EntityKind::ADMIN {
        let items = match obj.remove(kind.as_str()) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(EngineError::Invalid(format!(
                    "{}: expected an array",
                    kind.as_str()
                )))
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let (name, doc) = normalize(kind, item, None)
                .map_err(|e| EngineError::Invalid(format!("{}[{i}]: {e}", kind.as_str())))?;
            entities.push((kind, name, doc));
        }
    }
    Ok(entities)
}

/// The fields that the provider type of `provider` marks sensitive.
pub async fn sensitive_fields(st: &Engine, provider: &Value) -> EngineResult<Vec<String>> {
    let Some(ptype) = provider.get("providertype").and_then(Value::as_str) else {
        return Ok(Vec::new());
    };
    let Some(doc) = st
        .store
        .get_entity(SUPERADMIN, EntityKind::ProviderType, ptype, None)
        .await?
    else {
        return Ok(Vec::new());
    };
    let pt: PluginType =
        serde_json::from_value(doc).map_err(|e| EngineError::Internal(e.to_string()))?;
    Ok(pt
        .sensitive_fields()
        .into_iter()
        .map(str::to_string)
        .collect())
}

/// Replaces the value of every sensitive provider field with [`MASK`].
pub async fn mask_provider(st: &Engine, provider: &mut Value) -> EngineResult<()> {
    let fields = sensitive_fields(st, provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in fields {
            if let Some(v) = p.get_mut(&f) {
                *v = Value::String(MASK.into());
            }
        }
    }
    Ok(())
}

/// A provider as it is stored: its sensitive fields sealed (a field written back masked keeps the
/// stored secret).
pub async fn provider_to_store(
    st: &Engine,
    tenant_id: &str,
    provider: &mut Value,
) -> EngineResult<()> {
    unmask_provider(st, tenant_id, provider).await?;
    let fields = sensitive_fields(st, provider).await?;
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        st.sealer
            .seal_fields(tenant_id, p, fields.iter().map(String::as_str))
            .await?;
    }
    Ok(())
}

/// A provider written back with masked values keeps the stored secrets for those fields.
async fn unmask_provider(st: &Engine, tenant_id: &str, provider: &mut Value) -> EngineResult<()> {
    let Some(name) = provider
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Ok(());
    };
    let masked: Vec<String> = provider
        .get("provisioner")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(_, v)| v.as_str() == Some(MASK))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    if masked.is_empty() {
        return Ok(());
    }
    let stored = st
        .store
        .get_entity(tenant_id, EntityKind::Provider, &name, None)
        .await?;
    let stored_fields = stored
        .as_ref()
        .and_then(|s| s.get("provisioner"))
        .and_then(Value::as_object);
    if let Some(p) = provider
        .get_mut("provisioner")
        .and_then(Value::as_object_mut)
    {
        for f in masked {
            match stored_fields.and_then(|s| s.get(&f)) {
                Some(old) => {
                    p.insert(f, old.clone());
                }
                None => {
                    p.remove(&f);
                }
            }
        }
    }
    Ok(())
}
