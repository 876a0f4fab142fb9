//! A UI session: the login cookie, the caller it stands for, and [`Ctx`], which sends a page's
//! requests in-process to the REST API as that caller and renders pages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Router;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::html;
use crate::auth::{Identity, Role, APIKEY_HEADER, TENANT_HEADER, USER_HEADER};
use crate::state::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "weft_session";

/// What a session remembers: the credentials given at login, as resolved by the API.
#[derive(Debug, Clone)]
pub struct Login {
    /// The tenant name given at login.
    pub tenant: String,
    /// The user id given at login.
    pub user: String,
    /// The API key given at login (`auth = "apikey"`); `None` with `auth = "none"`.
    pub key: Option<String>,
    /// The token every form of this session carries (see `guard`).
    pub csrf: String,
}

/// The UI's shared parts: the API router it calls, the templates and the sessions.
pub struct Ui {
    pub(super) api: Router,
    pub(super) env: minijinja::Environment<'static>,
    pub(super) sessions: Mutex<HashMap<String, Login>>,
}

/// A logged-in caller: the session, the identity the API resolved for it, and the UI.
pub struct Ctx {
    /// The UI's router, templates and sessions.
    pub ui: Arc<Ui>,
    /// The session's credentials.
    pub login: Login,
    /// The caller as the API resolved it at the request.
    pub who: Identity,
    /// The server's state, for reads the UI makes without the API.
    pub state: AppState,
    /// The browser's address, passed on to the API calls made for it (the audit trail's source).
    pub peer: Option<axum::extract::ConnectInfo<std::net::SocketAddr>>,
}

/// The rejection of [`Ctx`]: a redirect to the login page.
pub struct NeedLogin;

impl IntoResponse for NeedLogin {
    fn into_response(self) -> Response {
        Redirect::to("/ui/login").into_response()
    }
}

pub(super) fn cookie_token(parts: &Parts) -> Option<String> {
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
pub(super) async fn identity(state: &AppState, login: &Login) -> Result<Identity, String> {
    identity_noted(state, login, None).await
}

/// [`identity`], leaving what was found (or claimed) in `slot` for the audit trail.
pub(super) async fn identity_noted(
    state: &AppState,
    login: &Login,
    slot: Option<&crate::auth::ClaimSlot>,
) -> Result<Identity, String> {
    let mut b = axum::http::Request::builder()
        .header(USER_HEADER, &login.user)
        .header(TENANT_HEADER, &login.tenant);
    if let Some(k) = &login.key {
        b = b.header(APIKEY_HEADER, k);
    }
    let (mut parts, ()) = b.body(()).map_err(|e| e.to_string())?.into_parts();
    if let Some(slot) = slot {
        parts.extensions.insert(slot.clone());
    }
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
        let peer = parts.extensions.get().copied();
        Ok(Ctx {
            ui,
            login,
            who,
            state: state.clone(),
            peer,
        })
    }
}

/// An answer of the API, fully read.
#[derive(Debug)]
pub struct ApiResp {
    /// The API's status.
    pub status: StatusCode,
    /// The API's response headers.
    pub headers: axum::http::HeaderMap,
    /// The whole response body.
    pub body: Bytes,
}

impl ApiResp {
    /// Whether the status is a 2xx.
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// The body as text (invalid UTF-8 replaced).
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

    /// The body parsed as JSON into `T`; `Err` says why it does not fit.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("unexpected answer: {e}"))
    }

    /// The body as JSON, or `null` when it is not JSON.
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

    pub(super) async fn api_bytes(&self, method: Method, path: &str, body: Bytes) -> ApiResp {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(USER_HEADER, &self.login.user)
            .header(TENANT_HEADER, &self.login.tenant);
        if let Some(k) = &self.login.key {
            b = b.header(APIKEY_HEADER, k);
        }
        let req = match b.body(Body::from(body)) {
            Ok(mut r) => {
                if let Some(peer) = self.peer {
                    r.extensions_mut().insert(peer);
                }
                r
            }
            Err(e) => {
                return ApiResp {
                    status: StatusCode::BAD_REQUEST,
                    headers: Default::default(),
                    body: Bytes::from(e.to_string()),
                }
            }
        };
        let resp = match self.ui.api.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        ApiResp {
            status,
            headers,
            body,
        }
    }

    /// `GET path` on the REST API as the session's caller.
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
            "csrf": self.login.csrf,
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

    /// Like [`Ctx::page`], answered with `status` instead of 200.
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

    /// The error page: `status` with `message`, in the layout.
    pub fn error_page(&self, status: StatusCode, message: &str) -> Response {
        let mut ctx = self.base(status.canonical_reason().unwrap_or("Error"), "");
        ctx["status"] = json!(status.as_u16());
        ctx["message"] = json!(message);
        html::render(&self.ui.env, status, "error.html", ctx)
    }
}
