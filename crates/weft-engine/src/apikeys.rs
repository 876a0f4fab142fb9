//! API keys: the superadmin makes them for a user of a tenant and revokes them. A key's secret
//! is answered once, when it is made; the store keeps only its SHA-256 ([`hash_key`]), which is
//! what a request's key is looked up by.

use sha2::{Digest, Sha256};
use weft_model::{validate_name, ApiKeyCreated, ApiKeyInfo, ApiKeyRequest};
use weft_store::{ApiKeyRecord, Store};

use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine};

/// The SHA-256 of an API key, hex-encoded: the only form in which keys are stored.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random secret (API keys, and the UI's session and CSRF tokens).
pub fn new_key() -> String {
    format!("weft_{}", hex::encode(rand::random::<[u8; 24]>()))
}

/// Every key, without its secret (the superadmin's).
pub async fn list(st: &Engine, who: &Caller) -> EngineResult<Vec<ApiKeyInfo>> {
    who.require_superadmin()?;
    let mut out = Vec::new();
    for k in st.store.list_api_keys().await? {
        let tenant = st
            .store
            .tenant_by_id(&k.tenant_id)
            .await?
            .map(|t| t.spec.name)
            .unwrap_or(k.tenant_id);
        out.push(ApiKeyInfo {
            id: k.id,
            tenant,
            user: k.user,
            admin: k.admin,
            create_time: k.create_time,
        });
    }
    Ok(out)
}

/// Makes a key as the superadmin asks.
pub async fn create(st: &Engine, who: &Caller, req: &ApiKeyRequest) -> EngineResult<ApiKeyCreated> {
    who.require_superadmin()?;
    make_key(st.store.as_ref(), req, st.now_ms()).await
}

/// Makes and stores a key made at `now` (ms); also used by `weft admin apikey create`, which
/// works on the store directly (no server, no caller).
pub async fn make_key(
    store: &dyn Store,
    req: &ApiKeyRequest,
    now: i64,
) -> EngineResult<ApiKeyCreated> {
    validate_name("tenant", &req.tenant)?;
    if req.user.trim().is_empty() {
        return Err(EngineError::Invalid("user must be specified".into()));
    }
    let tenant = store
        .tenant_by_name(&req.tenant)
        .await?
        .ok_or_else(|| EngineError::TenantMissing(req.tenant.clone()))?;
    let key = new_key();
    let record = ApiKeyRecord {
        id: uuid::Uuid::new_v4().to_string(),
        hash: hash_key(&key),
        tenant_id: tenant.id,
        user: req.user.clone(),
        admin: req.admin,
        create_time: now,
    };
    store.insert_api_key(&record).await?;
    Ok(ApiKeyCreated {
        id: record.id,
        key,
        tenant: req.tenant.clone(),
        user: record.user,
        admin: record.admin,
    })
}

/// Revokes key `id` (nothing happens if there is none).
pub async fn delete(st: &Engine, who: &Caller, id: &str) -> EngineResult<()> {
    who.require_superadmin()?;
    st.store.delete_api_key(id).await?;
    Ok(())
}
