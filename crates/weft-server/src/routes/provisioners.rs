//! Provisioners: they register and heartbeat on the internal port; the superadmin lists them on the
//! external port (tenant ids shown as tenant names).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::Json;
use weft_model::{EntityKind, Heartbeat, HeartbeatAnswer, Provisioner, ProvisionerRegistration};
use weft_store::ProvisionerRecord;
use weft_store::SUPERADMIN;

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::outbound::spawn_assignments;
use crate::state::{now_ms, AppState};
use weft_engine::work::fail_over_leases;
use weft_engine::workers::{reassign, rebalance, Moved};

pub fn external_routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/provisioners",
        list,
        op("provisioners", "List provisioners (superadmin)")
            .ok(200, "provisioners", Body::Array("Provisioner"))
            .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::GET,
        "/v2/provisioners/{id}",
        get,
        op("provisioners", "Get a provisioner (superadmin)")
            .ok(200, "the provisioner", Body::Json("Provisioner"))
            .status(403, "not the superadmin (empty body)")
            .status(404, "Provisioner X not found."),
    )
}

pub fn internal_routes(api: Api) -> Api {
    api.route(
        MethodFilter::PUT,
        "/v2/provisioners/{id}",
        register,
        op(
            "provisioners",
            "Register a provisioner; tenants' workers are re-placed",
        )
        .body(Body::Json("ProvisionerRegistration"))
        .status(200, "registered")
        .status(
            400,
            "id mismatch, host or port missing, capacityTotal not positive, or not JSON",
        ),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/provisioners/{id}",
        unregister,
        op(
            "provisioners",
            "Unregister a provisioner (200 also if unknown)",
        )
        .status(200, "removed"),
    )
    .route(
        MethodFilter::POST,
        "/v2/provisioners/{id}/heartbeat",
        heartbeat,
        op("provisioners", "Report live workers per tenant id")
            .body(Body::Json("Heartbeat"))
            .ok(
                200,
                "recorded; a heartbeat that lists its plugin types gets those the server lacks",
                Body::Json("HeartbeatAnswer"),
            )
            .status(404, "unknown provisioner: register again"),
    )
}

/// The API view: tenant ids translated to names, free capacity computed.
async fn view(st: &AppState, p: ProvisionerRecord) -> ApiResult<Provisioner> {
    let mut names = BTreeMap::new();
    for t in st.store.list_tenants().await? {
        names.insert(t.id, t.spec.name);
    }
    let rename = |m: BTreeMap<String, u32>| -> BTreeMap<String, u32> {
        m.into_iter()
            .map(|(k, v)| (names.get(&k).cloned().unwrap_or(k), v))
            .collect()
    };
    let assigned: u32 = p.assignments.values().sum();
    Ok(Provisioner {
        capacity_free: p.capacity_total.saturating_sub(assigned),
        id: p.id,
        host: p.host,
        port: p.port,
        capacity_total: p.capacity_total,
        assignments: rename(p.assignments),
        usage: rename(p.usage),
        scheme: if p.tls { "https" } else { "http" }.into(),
    })
}

async fn list(State(st): State<AppState>, id: Identity) -> ApiResult<Json<Vec<Provisioner>>> {
    id.require_superadmin()?;
    let mut out = Vec::new();
    for p in st.store.list_provisioners().await? {
        out.push(view(&st, p).await?);
    }
    Ok(Json(out))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    Path(pid): Path<String>,
) -> ApiResult<Json<Provisioner>> {
    id.require_superadmin()?;
    let p = st
        .store
        .get_provisioner(&pid)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Provisioner {pid} not found.")))?;
    Ok(Json(view(&st, p).await?))
}

async fn register(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    body: Bytes,
) -> ApiResult<()> {
    let reg: ProvisionerRegistration = parse_body(&body, "{id, host, port, capacityTotal}")?;
    if reg.id.as_deref().is_some_and(|i| i != pid) {
        return Err(ApiError::BadRequest(format!(
            "id in the body ({}) does not match the id in the path ({pid})",
            reg.id.unwrap_or_default()
        )));
    }
    let host = reg
        .host
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| ApiError::BadRequest("host must be specified".into()))?;
    let port = reg
        .port
        .ok_or_else(|| ApiError::BadRequest("port must be specified".into()))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ApiError::BadRequest(format!("port {port} is not a valid port")))?;
    let capacity = reg.capacity_total.unwrap_or(0);
    if capacity <= 0 {
        return Err(ApiError::BadRequest(
            "capacityTotal must be greater than 0".into(),
        ));
    }
    let capacity = u32::try_from(capacity)
        .map_err(|_| ApiError::BadRequest("capacityTotal is too large".into()))?;
    let tls = api_scheme(reg.scheme.as_deref(), &host, st.settings.tls.is_some())?;
    let existing = st.store.get_provisioner(&pid).await?;
    let record = ProvisionerRecord {
        id: pid.clone(),
        host,
        port,
        capacity_total: capacity,
        assignments: existing
            .as_ref()
            .map(|e| e.assignments.clone())
            .unwrap_or_default(),
        usage: existing.map(|e| e.usage).unwrap_or_default(),
        last_heartbeat_ms: now_ms(),
        tls,
    };
    st.store.upsert_provisioner(&record).await?;
    // Every registration is a new incarnation: it holds no lease and runs no worker yet. The
    // leases of its predecessor are failed over now (not when they time out), and it is told
    // every worker count it holds, changed or not.
    let why = format!("provisioner {pid} registered again; its earlier run's lease was released");
    fail_over_leases(&st.engine, &pid, &why).await?;
    let mut moved = reassign(st.store.as_ref()).await?;
    if let Some(p) = st.store.get_provisioner(&pid).await? {
        moved.extend(p.assignments.into_keys().map(|tenant_id| Moved {
            provisioner_id: pid.clone(),
            tenant_id,
        }));
    }
    moved.sort();
    moved.dedup();
    if !moved.is_empty() {
        spawn_assignments(&st.courier, moved);
    }
    Ok(())
}

/// Whether the server calls a provisioner's API over TLS (`scheme`, `http` when absent). A server
/// that serves TLS refuses a provisioner elsewhere than on loopback that would take the server's
/// calls, and the token they carry, in clear.
fn api_scheme(scheme: Option<&str>, host: &str, server_tls: bool) -> ApiResult<bool> {
    let tls = match scheme.map(str::trim).unwrap_or("http") {
        "http" | "" => false,
        "https" => true,
        other => {
            return Err(ApiError::BadRequest(format!(
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
        return Err(ApiError::BadRequest(format!(
            "scheme: this server serves TLS, so the provisioner at {host} must serve its API over \
             TLS too (its calls carry the provisioner token): give the provisioner --tls-cert and \
             --tls-key, a certificate for {host} signed by the server's client CA"
        )));
    }
    Ok(tls)
}

async fn unregister(State(st): State<AppState>, Path(pid): Path<String>) -> ApiResult<()> {
    let deleted = st.store.delete_provisioner(&pid).await?;
    st.engine.provisioners.forget(&pid);
    // A provisioner unregisters after its workers finished what they held; anything still leased
    // to it will never be finished.
    fail_over_leases(&st.engine, &pid, &format!("provisioner {pid} unregistered")).await?;
    if deleted {
        rebalance(&st.engine).await?;
    }
    Ok(())
}

async fn heartbeat(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let hb: Heartbeat = parse_body(&body, "{\"usage\": {...}}")?;
    if !st
        .store
        .heartbeat_provisioner(&pid, &hb.usage, now_ms())
        .await?
    {
        return Err(ApiError::NotFound(format!("Provisioner {pid} not found.")));
    }
    // The tenants it holds workers of may have changed: takes read them anew.
    st.engine.provisioners.forget(&pid);
    if hb.plugin_types.is_empty() {
        return Ok(StatusCode::OK.into_response());
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
    Ok(Json(answer).into_response())
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
