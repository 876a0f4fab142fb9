//! The web UI: server-rendered pages (minijinja templates, a little plain JavaScript, no external
//! assets) on the external port, at `/` and under `/ui/`.
//!
//! A login form (tenant, user, API key) opens a cookie session. Every page reads and writes through
//! the REST API v2 itself: the UI sends the request in-process to the same router the external port
//! serves, with the session's identity headers, so the UI has the API's rules, roles and messages and
//! no business logic of its own. The browser reaches the API the same way through `/ui/api/...`
//! (used for file uploads). Live job progress comes from a server-sent event stream
//! (`/ui/clusters/{id}/events`), driven by the engine's event feed and a periodic refresh.
//!
//! Modules: `clusters` (catalog, cluster list, create with plan preview), `cluster` (one cluster's
//! page: node x service grid, job swimlanes, job history, actions, events),
//! `admin` (catalog entities as JSON forms, plugin resources, import and export, host pools),
//! `editors` (structured editors of templates, with a live solve preview, and of services), `superadmin` (tenants,
//! provisioners, queue metrics), `html` (templates, static files and small helpers).

mod admin;
mod audit;
mod cluster;
mod clusters;
mod costs;
mod editors;
mod guard;
mod html;
mod session;
mod superadmin;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Form, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::state::AppState;

pub use html::render_error;
use session::cookie_token;
pub use session::{ApiResp, Ctx, Login, NeedLogin, Ui, COOKIE};

/// The UI routes, to merge into the external router.
pub fn router(state: &AppState) -> Router<AppState> {
    let api = crate::routes::external(state.settings.resource_body_limit).router;
    let api = crate::audit::layer(api, state)
        .layer(axum::extract::DefaultBodyLimit::max(
            state.settings.body_limit,
        ))
        .with_state(state.clone());
    let ui = Arc::new(Ui {
        api,
        env: html::environment(),
        sessions: Mutex::new(HashMap::new()),
    });
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(home))
        .route("/ui/static/{file}", get(html::static_file))
        .route(
            "/ui/login",
            get(login_page)
                .post(login)
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    crate::audit::audit,
                )),
        )
        .route("/ui/logout", post(logout))
        .route("/ui/api/{*path}", any(proxy))
        .route("/ui/csp-report", post(guard::csp_report))
        .merge(clusters::routes())
        .merge(cluster::routes())
        .merge(admin::routes())
        .merge(audit::routes())
        .merge(costs::routes())
        .merge(editors::routes())
        .merge(superadmin::routes())
        .layer(axum::middleware::from_fn(guard::cross_site))
        .layer(axum::middleware::from_fn(guard::headers))
        .layer(Extension(ui))
}

async fn home(ctx: Result<Ctx, NeedLogin>) -> Response {
    match ctx {
        Ok(_) => Redirect::to("/ui/clusters").into_response(),
        Err(n) => n.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    apikey: String,
}

async fn login_page(Extension(ui): Extension<Arc<Ui>>) -> Response {
    html::render(
        &ui.env,
        StatusCode::OK,
        "login.html",
        json!({"title": "Log in", "form": {}}),
    )
}

async fn login(
    State(state): State<AppState>,
    Extension(ui): Extension<Arc<Ui>>,
    headers: axum::http::HeaderMap,
    slot: Option<Extension<crate::auth::ClaimSlot>>,
    Form(f): Form<LoginForm>,
) -> Response {
    let key = Some(f.apikey.trim().to_string()).filter(|k| !k.is_empty());
    let mut login = Login {
        tenant: f.tenant.trim().to_string(),
        user: f.user.trim().to_string(),
        key,
        csrf: weft_engine::apikeys::new_key(),
    };
    let fail = |message: String| {
        html::render(
            &ui.env,
            StatusCode::UNAUTHORIZED,
            "login.html",
            json!({"title": "Log in", "error": message,
                   "form": {"tenant": f.tenant, "user": f.user}}),
        )
    };
    if login.key.is_none() && (login.tenant.is_empty() || login.user.is_empty()) {
        return fail("tenant and user are required".into());
    }
    let who = match session::identity_noted(&state, &login, slot.as_ref().map(|s| &s.0)).await {
        Ok(w) => w,
        Err(m) => return fail(m),
    };
    // With an API key, the key decides: remember the tenant and user it belongs to.
    login.tenant = who.tenant.spec.name.clone();
    login.user = who.user.clone();
    let token = weft_engine::apikeys::new_key();
    match ui.sessions.lock() {
        Ok(mut s) => {
            s.insert(token.clone(), login);
        }
        Err(_) => return fail("session store unavailable".into()),
    }
    let mut r = Redirect::to("/ui/clusters").into_response();
    let tls = state.settings.tls.is_some() || over_tls(&headers);
    let secure = if tls { "; Secure" } else { "" };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Whether a TLS proxy in front says the browser came over HTTPS (`X-Forwarded-Proto` or
/// `Forwarded`); with the server's own TLS, or this, the session cookie is `Secure`.
fn over_tls(h: &axum::http::HeaderMap) -> bool {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default();
    get("x-forwarded-proto").eq_ignore_ascii_case("https")
        || get("forwarded")
            .to_ascii_lowercase()
            .contains("proto=https")
}

async fn logout(Extension(ui): Extension<Arc<Ui>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Some(t) = cookie_token(&parts) {
        if let Ok(mut s) = ui.sessions.lock() {
            s.remove(&t);
        }
    }
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("weft_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

/// The REST API for the browser, as the session's caller. Writes need the `X-Weft-UI` header,
/// which a cross-site form cannot send.
async fn proxy(ctx: Ctx, Path(path): Path<String>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if parts.method != Method::GET && !parts.headers.contains_key("x-weft-ui") {
        return ctx.error_page(StatusCode::FORBIDDEN, "missing X-Weft-UI header");
    }
    let limit = ctx.state.settings.resource_body_limit;
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    };
    let mut uri = format!("/{path}");
    if let Some(q) = parts.uri.query() {
        uri.push('?');
        uri.push_str(q);
    }
    let r = ctx.api_bytes(parts.method, &uri, bytes).await;
    let ct = if serde_json::from_slice::<Value>(&r.body).is_ok() && !r.body.is_empty() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    (r.status, [(header::CONTENT_TYPE, ct)], r.body).into_response()
}
