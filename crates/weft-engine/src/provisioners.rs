//! Provisioners as the server knows them: they register (each registration a new incarnation:
//! its predecessor's leases are failed over and it is told every worker count it holds), send
//! heartbeats with their workers' usage and the plugin types they offer, and unregister; the
//! superadmin lists them, tenant ids shown as tenant names.

use std::collections::BTreeMap;

use weft_model::{EntityKind, Heartbeat, HeartbeatAnswer, Provisioner, ProvisionerRegistration};
use weft_store::{ProvisionerRecord, SUPERADMIN};

use crate::error::{EngineError, EngineResult};
use crate::tenants::names_by_id;
use crate::work::fail_over_leases;
use crate::workers::{reassign, rebalance, Moved};
use crate::{Caller, Engine};

/// Every provisioner (the superadmin's).
pub async fn list(st: &Engine, who: &Caller) -> EngineResult<Vec<Provisioner>> {
    who.require_superadmin()?;
    let names = names_by_id(st).await?;
    Ok(st
        .store
        .list_provisioners()
        .await?
        .into_iter()
        .map(|p| view(&names, p))
        .collect())
}

/// Provisioner `id` (the superadmin's).
pub async fn get(st: &Engine, who: &Caller, id: &str) -> EngineResult<Provisioner> {
    who.require_superadmin()?;
    let p = st
        .store
        .get_provisioner(id)
        .await?
        .ok_or_else(|| EngineError::ProvisionerNotFound(id.to_string()))?;
    Ok(view(&names_by_id(st).await?, p))
}

/// Each provisioner's last heartbeat (ms), by id (the superadmin's).
pub async fn heartbeats(st: &Engine, who: &Caller) -> EngineResult<BTreeMap<String, i64>> {
    who.require_superadmin()?;
    Ok(st
        .store
        .list_provisioners()
        .await?
        .into_iter()
        .map(|p| (p.id, p.last_heartbeat_ms))
        .collect())
}

/// The API view: tenant ids translated to names, free capacity computed.
fn view(names: &BTreeMap<String, String>, p: ProvisionerRecord) -> Provisioner {
    let rename = |m: BTreeMap<String, u32>| -> BTreeMap<String, u32> {
        m.into_iter()
            .map(|(k, v)| (names.get(&k).cloned().unwrap_or(k), v))
            .collect()
    };
    let assigned: u32 = p.assignments.values().sum();
    Provisioner {
        capacity_free: p.capacity_total.saturating_sub(assigned),
        id: p.id,
        host: p.host,
        port: p.port,
        capacity_total: p.capacity_total,
        assignments: rename(p.assignments),
        usage: rename(p.usage),
        scheme: if p.tls { "https" } else { "http" }.into(),
    }
}

/// Registers provisioner `id` as `reg` says; `server_tls`: whether this server serves TLS.
pub async fn register(
    st: &Engine,
    id: &str,
    reg: ProvisionerRegistration,
    server_tls: bool,
) -> EngineResult<()> {
    let record = checked_registration(st, id, reg, server_tls).await?;
    st.store.upsert_provisioner(&record).await?;
    // Every registration is a new incarnation: it holds no lease and runs no worker yet. The
    // leases of its predecessor are failed over now (not when they time out), and it is told
    // every worker count it holds, changed or not.
    let why = format!("provisioner {id} registered again; its earlier run's lease was released");
    fail_over_leases(st, id, &why).await?;
    let mut moved = reassign(st.store.as_ref()).await?;
    if let Some(p) = st.store.get_provisioner(id).await? {
        moved.extend(p.assignments.into_keys().map(|tenant_id| Moved {
            provisioner_id: id.to_string(),
            tenant_id,
        }));
    }
    moved.sort();
    moved.dedup();
    if !moved.is_empty() {
        st.messenger.workers_moved(moved);
    }
    Ok(())
}

/// The record `reg` makes, its assignments and usage kept from an earlier registration.
async fn checked_registration(
    st: &Engine,
    id: &str,
    reg: ProvisionerRegistration,
    server_tls: bool,
) -> EngineResult<ProvisionerRecord> {
    let bad = |m: String| EngineError::Invalid(m);
    if reg.id.as_deref().is_some_and(|i| i != id) {
        return Err(bad(format!(
            "id in the body ({}) does not match the id in the path ({id})",
            reg.id.unwrap_or_default()
        )));
    }
    let host = reg
        .host
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| bad("host must be specified".into()))?;
    let port = reg
        .port
        .ok_or_else(|| bad("port must be specified".into()))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad(format!("port {port} is not a valid port")))?;
    let capacity = reg.capacity_total.unwrap_or(0);
    if capacity <= 0 {
        return Err(bad("capacityTotal must be greater than 0".into()));
    }
    let capacity = u32::try_from(capacity).map_err(|_| bad("capacityTotal is too large".into()))?;
    let tls = api_scheme(reg.scheme.as_deref(), &host, server_tls)?;
    let existing = st.store.get_provisioner(id).await?;
    Ok(ProvisionerRecord {
        id: id.to_string(),
        host,
        port,
        capacity_total: capacity,
        assignments: existing
            .as_ref()
            .map(|e| e.assignments.clone())
            .unwrap_or_default(),
        usage: existing.map(|e| e.usage).unwrap_or_default(),
        last_heartbeat_ms: st.now_ms(),
        tls,
    })
}

/// Whether the server calls a provisioner's API over TLS (`scheme`, `http` when absent). A server
/// that serves TLS refuses a provisioner elsewhere than on loopback that would take the server's
/// calls, and the token they carry, in clear.
fn api_scheme(scheme: Option<&str>, host: &str, server_tls: bool) -> EngineResult<bool> {
    let tls = match scheme.map(str::trim).unwrap_or("http") {
        "http" | "" => false,
        "https" => true,
        other => {
            return Err(EngineError::Invalid(format!(
                "scheme must be http or https, not {other:?}"
            )))
        }
    };
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if server_tls && !tls && !loopback {
        return Err(EngineError::Invalid(format!(
            "scheme: this server serves TLS, so the provisioner at {host} must serve its API over \
             TLS too (its calls carry the provisioner token): give the provisioner --tls-cert and \
             --tls-key, a certificate for {host} signed by the server's client CA"
        )));
    }
    Ok(tls)
}

/// Unregisters provisioner `id`: what it still leased is failed over, its workers placed
/// elsewhere.
pub async fn unregister(st: &Engine, id: &str) -> EngineResult<()> {
    let deleted = st.store.delete_provisioner(id).await?;
    st.provisioners.forget(id);
    // A provisioner unregisters after its workers finished what they held; anything still leased
    // to it will never be finished.
    fail_over_leases(st, id, &format!("provisioner {id} unregistered")).await?;
    if deleted {
        rebalance(st).await?;
    }
    Ok(())
}

/// Records provisioner `id`'s heartbeat; answers which plugin types it offers that the catalog
/// lacks (`None` when it named none).
pub async fn heartbeat(
    st: &Engine,
    id: &str,
    hb: &Heartbeat,
) -> EngineResult<Option<HeartbeatAnswer>> {
    if !st
        .store
        .heartbeat_provisioner(id, &hb.usage, st.now_ms())
        .await?
    {
        return Err(EngineError::ProvisionerNotFound(id.to_string()));
    }
    // The tenants it holds workers of may have changed: takes read them anew.
    st.provisioners.forget(id);
    if hb.plugin_types.is_empty() {
        return Ok(None);
    }
    let mut answer = HeartbeatAnswer::default();
    for (ptype, names) in &hb.plugin_types {
        let kind = match ptype.as_str() {
            "providertypes" => EntityKind::ProviderType,
            "automatortypes" => EntityKind::AutomatorType,
            _ => continue,
        };
        for name in names {
            if st
                .store
                .get_entity(SUPERADMIN, kind, name, None)
                .await?
                .is_none()
            {
                answer
                    .missing_plugin_types
                    .entry(ptype.clone())
                    .or_default()
                    .push(name.clone());
            }
        }
    }
    Ok(Some(answer))
}

#[cfg(test)]
mod tests {
    use super::api_scheme;

    #[test]
    fn a_tls_server_refuses_provisioners_that_would_take_its_calls_in_clear() {
        assert_eq!(api_scheme(None, "10.1.2.3", false).ok(), Some(false));
        assert_eq!(api_scheme(Some("https"), "p1", true).ok(), Some(true));
        for loopback in ["127.0.0.1", "::1", "[::1]", "localhost"] {
            assert_eq!(api_scheme(Some("http"), loopback, true).ok(), Some(false));
        }
        let refused = api_scheme(Some("http"), "provisioners", true).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.starts_with("scheme:") && text.contains("--tls-cert"),
            "{text}"
        );
        let bad = api_scheme(Some("ftp"), "p1", false)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("scheme must be http or https"), "{bad}");
    }
}
