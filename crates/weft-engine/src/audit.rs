//! The audit trail as callers read it: records of their tenant (every tenant's for the
//! superadmin), filtered and paged; each tenant's chain verified; retention. What a record holds
//! and how the chain is made is `weft_store::audit`'s; the server writes one record per request
//! that may change state and per refusal (401, 403).

pub use weft_store::audit::Pending;
use weft_store::audit::{verify_all, UNANSWERED_AFTER_MS};
use weft_store::{AuditEntry, AuditQuery, AuditRecord, ChainReport};

use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine, Role};

/// At most this many records per answer (a larger `limit` gets this many); 100 unless asked.
pub const MAX_PAGE: u64 = 1000;

/// What a reader asks for.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// A tenant's name: the superadmin's choice (others read their own tenant's).
    pub tenant: Option<String>,
    /// Only this user's records (exact match).
    pub user: Option<String>,
    /// Only records on this kind of thing (`clusters`, `providers`, `apikeys`, ...).
    pub entity: Option<String>,
    /// Only records of this action (`create`, `update`, `delete`, or an operation's name).
    pub action: Option<String>,
    /// Only records at or after this time, in ms since the epoch.
    pub from: Option<i64>,
    /// Only records before this time, in ms since the epoch.
    pub to: Option<i64>,
    /// How many matching records to skip, newest first; 0 when unset.
    pub offset: Option<u64>,
    /// The most records to answer: 100 when unset, at most [`MAX_PAGE`]; 0 is refused.
    pub limit: Option<u64>,
}

/// Appends `entry` to its tenant's chain. A failure is logged, not returned: the request it
/// records has been answered.
pub async fn record(st: &Engine, entry: &AuditEntry) {
    if let Err(e) = st.store.append_audit(entry).await {
        tracing::error!(
            error = %e,
            request_id = %entry.request_id,
            tenant_id = %entry.tenant_id,
            "the audit record of a request could not be written"
        );
    }
}

fn require_admin(who: &Caller) -> EngineResult<()> {
    if who.is_admin() {
        Ok(())
    } else {
        Err(EngineError::Forbidden(
            "the audit trail is for the tenant's admins".into(),
        ))
    }
}

/// The tenant id `who` reads: its own, or for the superadmin the one named (all if none).
async fn scope(st: &Engine, who: &Caller, tenant: Option<&str>) -> EngineResult<Option<String>> {
    require_admin(who)?;
    if who.role != Role::SuperAdmin {
        return Ok(Some(who.tenant.id.clone()));
    }
    match tenant {
        None => Ok(None),
        Some("") => Ok(None),
        Some(name) => {
            let t = st
                .store
                .tenant_by_name(name)
                .await?
                .ok_or_else(|| EngineError::Invalid(format!("tenant: no tenant {name}")))?;
            Ok(Some(t.id))
        }
    }
}

/// The records `f` asks for, newest first.
pub async fn list(st: &Engine, who: &Caller, f: AuditFilter) -> EngineResult<Vec<AuditRecord>> {
    let limit = f.limit.unwrap_or(100).min(MAX_PAGE);
    if limit == 0 {
        return Err(EngineError::Invalid("limit: at least 1".into()));
    }
    let q = AuditQuery {
        tenant_id: scope(st, who, f.tenant.as_deref()).await?,
        user: f.user,
        entity: f.entity,
        action: f.action,
        from: f.from,
        to: f.to,
        offset: f.offset.unwrap_or(0),
        limit,
    };
    let _permit = st.light_read().await?;
    Ok(st.store.list_audit(&q).await?)
}

/// Verifies the chain of `who`'s tenant (every tenant's for the superadmin).
pub async fn verify(st: &Engine, who: &Caller) -> EngineResult<Vec<ChainReport>> {
    let only = scope(st, who, None).await?;
    let _permit = st.heavy_read().await?;
    Ok(verify_all(st.store.as_ref(), only.as_deref()).await?)
}

/// Retention: removes records older than `keep_ms` before `now`. Returns how many went.
pub async fn purge(st: &Engine, now: i64, keep_ms: i64) -> EngineResult<u64> {
    Ok(st.store.purge_audit(now.saturating_sub(keep_ms)).await?)
}

/// Chains the pending records of requests that changed something and were never answered (their
/// server stopped) once they are [`UNANSWERED_AFTER_MS`] old. Returns how many.
pub async fn settle(st: &Engine, now: i64) -> EngineResult<u64> {
    Ok(st
        .store
        .settle_audit(now.saturating_sub(UNANSWERED_AFTER_MS))
        .await?)
}
