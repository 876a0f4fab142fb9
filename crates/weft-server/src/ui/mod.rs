//! The web UI: server-rendered pages (minijinja templates, a little plain JavaScript, no external
//! assets) on the external port, at `/` and under `/ui/`.
//!
//! A login form (tenant, user, API key) opens a cookie session. Every page reads and writes through
//! the REST API v2 itself: the UI sends the request in-process to the same router the external port
//! serves, with the session's identity headers, so the UI has the API's rules, roles and messages and
//! no business logic of its own. The browser reaches the API the same way through `/ui/api/...`
//! (used for file uploads). Live job progress comes from a server-sent event stream
//! (`/ui/clusters/{id}/events`), driven by [`AppState::events`] and a periodic refresh.
//!
//! Modules: `clusters` (catalog, cluster list, create with plan preview), `cluster` (one cluster's
//! page: node x service grid, job swimlanes, job history, actions, events),
//! `admin` (catalog entities as JSON forms, plugin resources, import and export, host pools),
//! `editors` (structured editors of templates, with a live solve preview, and of services), `superadmin` (tenants,
//! provisioners, queue metrics), `html` (templates, static files and small helpers).

mod admin;
mod cluster;
mod clusters;
mod editors;
mod html;
mod superadmin;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Form, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::auth::{Identity, Role, APIKEY_HEADER, TENANT_HEADER, USER_HEADER};
use crate::state::AppState;

pub use html::render_error;

/// The session cookie's name.
pub const COOKIE: &str = "weft_session";

/// What a session remembers: the credentials given at login, as resolved by the API.
#[derive(Debug, Clone)]
pub struct Login {
    pub tenant: String,
    pub user: String,
    pub key: Option<String>,
}

/// The UI's shared parts: the API router it calls, the templates and the sessions.
pub struct Ui {
    api: Router,
    env: minijinja::Environment<'static>,
    sessions: Mutex<HashMap<String, Login>>,
}

/// The UI routes, to merge into the external router.
pub fn router(state: &AppState) -> Router<AppState> {
    let api = crate::routes::external(state.settings.resource_body_limit)
        .router
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
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/api/{*path}", any(proxy))
        .merge(clusters::routes())
        .merge(cluster::routes())
        .merge(admin::routes())
        .merge(superadmin::routes())
        .layer(Extension(ui))
}

/// A logged-in caller: the session, the identity the API resolved for it, and the UI.
pub struct Ctx {
    pub ui: Arc<Ui>,
    pub login: Login,
    pub who: Identity,
    pub state: AppState,
}

/// The rejection of [`Ctx`]: a redirect to the login page.
pub struct NeedLogin;

impl IntoResponse for NeedLogin {
    fn into_response(self) -> Response {
        Redirect::to("/ui/login").into_response()
    }
}

fn cookie_token(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Resolves an identity exactly as the API does, from the headers a session sends.
async fn identity(state: &AppState, login: &Login) -> Result<Identity, String> {
    let mut b = axum::http::Request::builder()
        .header(USER_HEADER, &login.user)
        .header(TENANT_HEADER, &login.tenant);
    if let Some(k) = &login.key {
        b = b.header(APIKEY_HEADER, k);
    }
    let (mut parts, ()) = b.body(()).map_err(|e| e.to_string())?.into_parts();
    Identity::from_request_parts(&mut parts, state)
        .await
        .map_err(|e| e.to_string())
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = NeedLogin;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, NeedLogin> {
        let ui = parts
            .extensions
            .get::<Arc<Ui>>()
            .cloned()
            .ok_or(NeedLogin)?;
        let token = cookie_token(parts).ok_or(NeedLogin)?;
        let login = ui
            .sessions
            .lock()
            .map_err(|_| NeedLogin)?
            .get(&token)
            .cloned()
            .ok_or(NeedLogin)?;
        let who = identity(state, &login).await.map_err(|_| NeedLogin)?;
        Ok(Ctx {
            ui,
            login,
            who,
            state: state.clone(),
        })
    }
}

/// An answer of the API, fully read.
#[derive(Debug)]
pub struct ApiResp {
    pub status: StatusCode,
    pub body: Bytes,
}

impl ApiResp {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The error message as a person reads it (missing fields listed by name).
    pub fn message(&self) -> String {
        if let Ok(v) = serde_json::from_slice::<Value>(&self.body) {
            if let Some(m) = v.get("missingFields").and_then(Value::as_array) {
                let names: Vec<String> = m
                    .iter()
                    .filter_map(Value::as_object)
                    .map(|o| o.keys().cloned().collect::<Vec<_>>().join(", "))
                    .collect();
                return format!("missing fields: {}", names.join(" or "));
            }
        }
        let t = self.text();
        if t.trim().is_empty() {
            format!(
                "{} {}",
                self.status.as_u16(),
                self.status.canonical_reason().unwrap_or("")
            )
        } else {
            t
        }
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("unexpected answer: {e}"))
    }

    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

impl Ctx {
    /// Sends a request to the REST API as the session's caller.
    pub async fn api(&self, method: Method, path: &str, body: Option<String>) -> ApiResp {
        self.api_bytes(method, path, body.map(Bytes::from).unwrap_or_default())
            .await
    }

    async fn api_bytes(&self, method: Method, path: &str, body: Bytes) -> ApiResp {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(USER_HEADER, &self.login.user)
            .header(TENANT_HEADER, &self.login.tenant);
        if let Some(k) = &self.login.key {
            b = b.header(APIKEY_HEADER, k);
        }
        let req = match b.body(Body::from(body)) {
            Ok(r) => r,
            Err(e) => {
                return ApiResp {
                    status: StatusCode::BAD_REQUEST,
                    body: Bytes::from(e.to_string()),
                }
            }
        };
        let resp = match self.ui.api.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        ApiResp { status, body }
    }

    pub async fn get(&self, path: &str) -> ApiResp {
        self.api(Method::GET, path, None).await
    }

    /// GET that must succeed with JSON; otherwise an error page.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, Response> {
        let r = self.get(path).await;
        if !r.ok() {
            return Err(self.error_page(r.status, &r.message()));
        }
        r.json()
            .map_err(|m| self.error_page(StatusCode::BAD_GATEWAY, &m))
    }

    /// A 403 page unless the caller has `role`.
    // The error is the page to answer, handed straight back to axum.
    #[allow(clippy::result_large_err)]
    pub fn require(&self, role: Role) -> Result<(), Response> {
        if self.who.role >= role {
            Ok(())
        } else {
            Err(self.error_page(
                StatusCode::FORBIDDEN,
                &format!(
                    "user {} of tenant {} may not open this page",
                    self.who.user, self.who.tenant.spec.name
                ),
            ))
        }
    }

    /// The values every page's layout needs.
    pub fn base(&self, title: &str, section: &str) -> Value {
        json!({
            "title": title,
            "section": section,
            "user": self.who.user,
            "tenant": self.who.tenant.spec.name,
            "is_admin": self.who.role >= Role::Admin,
            "is_super": self.who.role == Role::SuperAdmin,
            "role": match self.who.role { Role::User => "user", Role::Admin => "tenant admin", Role::SuperAdmin => "superadmin" },
        })
    }

    /// Renders `template` with the layout values plus `extra`.
    pub fn page(&self, template: &str, title: &str, section: &str, extra: Value) -> Response {
        let mut ctx = self.base(title, section);
        if let (Some(c), Value::Object(e)) = (ctx.as_object_mut(), extra) {
            c.extend(e);
        }
        html::render(&self.ui.env, StatusCode::OK, template, ctx)
    }

    pub fn page_status(
        &self,
        status: StatusCode,
        template: &str,
        title: &str,
        section: &str,
        extra: Value,
    ) -> Response {
        let mut r = self.page(template, title, section, extra);
        *r.status_mut() = status;
        r
    }

    pub fn error_page(&self, status: StatusCode, message: &str) -> Response {
        let mut ctx = self.base(status.canonical_reason().unwrap_or("Error"), "");
        ctx["status"] = json!(status.as_u16());
        ctx["message"] = json!(message);
        html::render(&self.ui.env, status, "error.html", ctx)
    }
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
    Form(f): Form<LoginForm>,
) -> Response {
    let key = Some(f.apikey.trim().to_string()).filter(|k| !k.is_empty());
    let mut login = Login {
        tenant: f.tenant.trim().to_string(),
        user: f.user.trim().to_string(),
        key,
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
    let who = match identity(&state, &login).await {
        Ok(w) => w,
        Err(m) => return fail(m),
    };
    // With an API key, the key decides: remember the tenant and user it belongs to.
    login.tenant = who.tenant.spec.name.clone();
    login.user = who.user.clone();
    let token = crate::auth::new_key();
    match ui.sessions.lock() {
        Ok(mut s) => {
            s.insert(token.clone(), login);
        }
        Err(_) => return fail("session store unavailable".into()),
    }
    let mut r = Redirect::to("/ui/clusters").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
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
