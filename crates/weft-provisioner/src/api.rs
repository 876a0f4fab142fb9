//! The provisioner's own HTTP API, called by the server (contract §4.13): `PUT /v2/tenants/{id}`
//! `{"workers":n,"resources":{..}}` sets a tenant's workers and live resources, `POST /v2/tenants`
//! does the same with the id in the body, `PUT /v2/tenants/{id}/workers` and `.../resources` set
//! one of them, `DELETE /v2/tenants/{id}` stops the tenant's workers; `GET /status` and
//! `GET /heartbeat` answer health and usage; `POST /v2/sweep` lists (and, when asked, deletes) a
//! tenant's machines that belong to no live node ([`crate::sweep`]). Errors are plain text.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::plugin::Provider;

/// What the API serves and changes; the agent provides it.
pub(crate) trait Handler: Send + Sync + 'static {
    /// The provisioner's id.
    fn id(&self) -> &str;
    /// How many workers it runs at most.
    fn capacity(&self) -> u32;
    /// Live workers per tenant id.
    fn usage(&self) -> BTreeMap<String, u32>;
    /// Replaces a tenant's live resources.
    fn set_resources(&self, tenant_id: &str, resources: Value);
    /// Sets a tenant's worker count; `Err` says why it cannot.
    fn set_workers(&self, tenant_id: &str, workers: u32) -> Result<(), String>;
    /// The tokens a caller must present, if any.
    fn tokens(&self) -> Option<&weft_client::tokens::Tokens>;
    /// The provider plugin of a provider type.
    fn provider_plugin(&self, providertype: &str) -> Option<Arc<dyn Provider>>;
}

type Inner = dyn Handler;

pub(crate) fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route("/status", get(|| async { "OK\n" }))
        .route("/heartbeat", get(heartbeat))
        .route("/v2/tenants", post(post_tenant))
        .route("/v2/tenants/{id}", put(put_tenant).delete(delete_tenant))
        .route("/v2/tenants/{id}/workers", put(put_tenant))
        .route("/v2/tenants/{id}/resources", put(put_resources))
        .route("/v2/sweep", post(sweep))
        .layer(axum::middleware::from_fn_with_state(
            inner.clone(),
            require_token,
        ))
        .with_state(inner)
}

/// With a token file, every call but `/status` must present one of its tokens: otherwise anyone
/// who reaches this port could give the agent workers or resources of any tenant.
async fn require_token(
    State(inner): State<Arc<Inner>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let presented = req
        .headers()
        .get(weft_client::tokens::HEADER)
        .and_then(|v| v.to_str().ok());
    match inner.tokens() {
        Some(t) if req.uri().path() != "/status" && !t.accepts(presented) => (
            axum::http::StatusCode::UNAUTHORIZED,
            "provisioner token missing or not accepted\n",
        )
            .into_response(),
        _ => next.run(req).await,
    }
}

fn bad(msg: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, msg.into()).into_response()
}

/// The body as a JSON object; `Err` is the 400 message.
fn parse(body: &Bytes) -> Result<Value, String> {
    let v = weft_model::lenient::parse(body).map_err(|e| e.to_string())?;
    if v.is_object() {
        Ok(v)
    } else {
        Err("the body must be a JSON object".into())
    }
}

fn workers(v: &Value) -> Result<Option<u32>, String> {
    match v.get("workers") {
        None | Some(Value::Null) => Ok(None),
        Some(w) => w
            .as_u64()
            .or_else(|| w.as_str().and_then(|s| s.trim().parse().ok()))
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("workers must be a non-negative number, not {w}")),
    }
}

fn apply(inner: &Arc<Inner>, id: &str, v: &Value) -> Response {
    if id.trim().is_empty() {
        return bad("tenant id must be specified");
    }
    let n = match workers(v) {
        Ok(n) => n,
        Err(m) => return bad(m),
    };
    if let Some(res) = v.get("resources").filter(|r| !r.is_null()) {
        inner.set_resources(id, res.clone());
    }
    if let Some(n) = n {
        if let Err(e) = inner.set_workers(id, n) {
            return (StatusCode::CONFLICT, e).into_response();
        }
    }
    StatusCode::OK.into_response()
}

async fn put_tenant(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    match parse(&body) {
        Ok(v) => apply(&inner, &id, &v),
        Err(m) => bad(m),
    }
}

async fn put_resources(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    match parse(&body) {
        Ok(v) => {
            let only = json!({"resources": v.get("resources").cloned().unwrap_or(Value::Null)});
            apply(&inner, &id, &only)
        }
        Err(m) => bad(m),
    }
}

async fn post_tenant(State(inner): State<Arc<Inner>>, body: Bytes) -> Response {
    match parse(&body) {
        Ok(v) => {
            let id = v
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            apply(&inner, &id, &v)
        }
        Err(m) => bad(m),
    }
}

async fn delete_tenant(State(inner): State<Arc<Inner>>, Path(id): Path<String>) -> Response {
    match inner.set_workers(&id, 0) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => (StatusCode::CONFLICT, e).into_response(),
    }
}

async fn heartbeat(State(inner): State<Arc<Inner>>) -> Json<Value> {
    Json(json!({"id": inner.id(), "capacityTotal": inner.capacity(), "usage": inner.usage()}))
}

/// `POST /v2/sweep`: 404 when this provisioner lacks the provider type (the server tries another),
/// 400 when the plugin cannot list or the fields are wrong, 503 when the cloud may answer later.
async fn sweep(State(inner): State<Arc<Inner>>, body: Bytes) -> Response {
    let req: crate::sweep::SweepRequest = match parse(&body)
        .and_then(|v| serde_json::from_value(v).map_err(|e| format!("sweep request: {e}")))
    {
        Ok(r) => r,
        Err(m) => return bad(m),
    };
    let Some(p) = inner.provider_plugin(&req.providertype) else {
        let msg = format!("no provider plugin for provider type {}", req.providertype);
        return (StatusCode::NOT_FOUND, msg).into_response();
    };
    // In a task of its own: deletes carry on when the caller stops waiting.
    let run = tokio::spawn(async move { crate::sweep::sweep(p, &req).await });
    match run
        .await
        .unwrap_or_else(|e| Err(crate::task::PluginError::fatal(format!("sweep: {e}"))))
    {
        Ok(report) => Json(report).into_response(),
        Err(e) if e.retryable => (StatusCode::SERVICE_UNAVAILABLE, e.message).into_response(),
        Err(e) => bad(e.message),
    }
}
