//! The audit trail's writer: every request of the REST API that may change state (any method but
//! `GET`, `HEAD`, `OPTIONS`), and every request refused for identity or permission (401, 403), is
//! recorded once its answer is known: who (tenant, user, role, API key id), from where, what
//! (method, route, entity and id, action) and the outcome (status). Every request gets an id,
//! answered in `Weft-Request-Id` and carried by every log line of its handling.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use weft_engine::audit::Pending;
use weft_engine::Role;
use weft_store::{AuditEntry, SUPERADMIN};

use crate::auth::{ClaimSlot, Claimed};
use crate::state::AppState;

/// The UI's log-in form: recorded as action `login` of entity `sessions`.
const LOGIN_ROUTE: &str = "/ui/login";

/// The answer header that holds the request's id.
pub const REQUEST_ID_HEADER: &str = "weft-request-id";

/// `router` with every request it routes audited.
pub fn layer(router: axum::Router<AppState>, state: &AppState) -> axum::Router<AppState> {
    router.layer(axum::middleware::from_fn_with_state(state.clone(), audit))
}

/// The middleware (see the module's documentation).
///
/// A request that may change state runs inside [`Pending::scope`]: the store writes its record
/// (status 0) in the transaction of every change the request commits, and the record is chained
/// with the answer's status once it is known, so that no committed change goes unrecorded even if
/// the server stops in between (the janitor chains what is left). Such a request runs to its
/// end even if its client goes away (`run_to_completion`), so its answer is always recorded.
pub async fn audit(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let request_id = uuid::Uuid::new_v4().simple().to_string();
    let slot = ClaimSlot::default();
    req.extensions_mut().insert(slot.clone());
    let what = Asked::of(&req).map(Arc::new);
    let span = tracing::info_span!("request", request_id = %request_id);
    let handling = next.run(req).instrument(span);
    let mut resp = match what.as_ref().filter(|w| w.changes) {
        Some(w) => {
            let (w, who, id) = (Arc::clone(w), slot.clone(), request_id.clone());
            let pending = Pending::new(request_id.clone(), move || w.entry(who.take(), &id, 0));
            Pending::scope(pending, handling).await
        }
        None => handling.await,
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    let status = resp.status().as_u16();
    let refused = status == 401 || status == 403;
    if let Some(what) = what.filter(|w| w.changes || refused) {
        let entry = what.entry(slot.take(), &request_id, status);
        tracing::info!(
            request_id = %entry.request_id,
            tenant_id = %entry.tenant_id,
            user = %entry.user,
            method = %entry.method,
            route = %entry.route,
            status,
            "audit"
        );
        weft_engine::audit::record(&st.engine, &entry).await;
    }
    resp
}

/// What a request asks for, read before it is handled.
struct Asked {
    changes: bool,
    method: Method,
    route: String,
    entity: String,
    entity_id: Option<String>,
    action: String,
    source: String,
}

impl Asked {
    /// `None` for a request no route matched (nothing was asked of anything).
    fn of(req: &Request) -> Option<Asked> {
        let route = req.extensions().get::<MatchedPath>()?.as_str().to_string();
        let source = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "in-process".to_string(), |c| c.0.to_string());
        let method = req.method().clone();
        let (entity, entity_id, tail) = split_route(&route, req.uri().path());
        let verb = match method {
            Method::POST => "create",
            Method::PUT | Method::PATCH => "update",
            Method::DELETE => "delete",
            _ => "read",
        };
        let action = match tail.as_deref() {
            _ if route == LOGIN_ROUTE => "login".to_string(),
            None => verb.to_string(),
            Some(t) if method == Method::POST => t.to_string(),
            Some(t) => format!("{t}.{verb}"),
        };
        let entity = if route == LOGIN_ROUTE {
            "sessions".to_string()
        } else {
            entity
        };
        Some(Asked {
            changes: !method.is_safe(),
            method,
            route,
            entity,
            entity_id,
            action,
            source,
        })
    }

    fn entry(&self, who: Claimed, request_id: &str, status: u16) -> AuditEntry {
        let role = match who.role {
            Some(Role::SuperAdmin) => "superadmin",
            Some(Role::Admin) => "admin",
            Some(Role::User) => "user",
            None => "unknown",
        };
        AuditEntry {
            time: weft_engine::now_ms(),
            // A caller refused before its tenant was known is recorded in the superadmin's.
            tenant_id: who.tenant_id.unwrap_or_else(|| SUPERADMIN.to_string()),
            request_id: request_id.to_string(),
            user: who.user.unwrap_or_default(),
            role: role.into(),
            key_id: who.key_id,
            source: self.source.clone(),
            method: self.method.to_string(),
            route: self.route.clone(),
            entity: self.entity.clone(),
            entity_id: self.entity_id.clone(),
            action: self.action.clone(),
            status,
        }
    }
}

/// A route's entity (its literal segments before the first parameter, `/v2/` left out), the
/// value of that first parameter in `path`, and the literal segments after it (`None` if none).
fn split_route(route: &str, path: &str) -> (String, Option<String>, Option<String>) {
    let template: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    let actual: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let skip = usize::from(template.first() == Some(&"v2"));
    let mut entity = Vec::new();
    let mut id = None;
    let mut tail = Vec::new();
    for (i, seg) in template.iter().enumerate().skip(skip) {
        let param = seg.starts_with('{');
        match (param, id.is_some()) {
            (true, false) => id = actual.get(i).map(|v| percent_decoded(v)),
            (false, false) => entity.push(*seg),
            (false, true) => tail.push(*seg),
            (true, true) => {}
        }
    }
    let tail = (!tail.is_empty()).then(|| tail.join("/"));
    (entity.join("/"), id, tail)
}

/// `%XX` sequences decoded (ids in paths are rarely encoded; a bad sequence stays as it is).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_name_their_entity_id_and_operation() {
        let s = |r: &str, p: &str| split_route(r, p);
        assert_eq!(
            s("/v2/clusters", "/v2/clusters"),
            ("clusters".into(), None, None)
        );
        assert_eq!(
            s("/v2/clusters/{id}", "/v2/clusters/00000007"),
            ("clusters".into(), Some("00000007".into()), None)
        );
        assert_eq!(
            s(
                "/v2/clusters/{id}/services/{service}",
                "/v2/clusters/7/services/a%20b"
            ),
            ("clusters".into(), Some("7".into()), Some("services".into()))
        );
        assert_eq!(
            s(
                "/v2/plugins/providertypes/{name}",
                "/v2/plugins/providertypes/aws"
            ),
            ("plugins/providertypes".into(), Some("aws".into()), None)
        );
        assert_eq!(percent_decoded("a%2Fb%zz%"), "a/b%zz%");
    }
}
