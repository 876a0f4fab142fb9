//! Users' profiles: a JSON object per user of a tenant that the UI and the CLI keep for them
//! (preferences, defaults). A user reads and writes only their own.

use serde_json::Value;

use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine};

/// The caller's profile.
pub async fn get(st: &Engine, who: &Caller) -> EngineResult<Value> {
    st.store
        .get_profile(&who.tenant.id, &who.user)
        .await?
        .ok_or_else(|| EngineError::ProfileNotFound(who.user.clone()))
}

/// Replaces the caller's profile with `profile`, which must be a JSON object.
pub async fn put(st: &Engine, who: &Caller, profile: &Value) -> EngineResult<()> {
    if !profile.is_object() {
        return Err(EngineError::Invalid("profile must be a JSON object".into()));
    }
    Ok(st
        .store
        .put_profile(&who.tenant.id, &who.user, profile)
        .await?)
}

/// Removes the caller's profile (nothing happens if there is none).
pub async fn delete(st: &Engine, who: &Caller) -> EngineResult<()> {
    Ok(st.store.delete_profile(&who.tenant.id, &who.user).await?)
}
