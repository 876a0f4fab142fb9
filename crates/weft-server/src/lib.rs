//! weft-server: the server process.
//!
//! Two listeners, as in Coopr: the external REST API v2 (default port 55054) for users, admins and
//! the superadmin, and the internal provisioner API (default 55055), which checks no identity headers.
//! [`build`] makes both routers from [`config::Settings`] without binding a socket, so tests drive
//! them in-process; [`serve`] binds them.
//!
//! The engine (cluster operations, jobs, the janitor) is the crate `weft-engine`; this crate is its
//! HTTP face. Module map, bottom up (ARCHITECTURE.md's layers): `config` (settings), `error` (the one
//! error-to-HTTP mapping), `listen` (the listeners: header and body read time-outs), `resources`
//! (plugin resource bytes), `outbound` (calls to provisioners; the engine's messenger), `state`,
//! `auth` (identity and roles), `api` (route registration that also writes the OpenAPI document),
//! `metrics`, `routes` (handlers per route group: parse, call the engine, render), `ui`.
//! [`spawn_background`] starts the janitor and the job callbacks.
#![warn(missing_docs)]

pub mod api;
pub mod audit;
pub mod auth;
pub mod config;
pub mod doc_rules;
pub mod error;
pub mod lenient_doc;
pub use weft_client::listen;
pub mod metrics;
pub mod outbound;
pub mod private;
pub mod resources;
pub mod routes;
pub mod state;
pub use weft_client::tls;
pub mod ui;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use utoipa::OpenApi;
use weft_engine::Engine;
use weft_model::EntityKind;
use weft_store::Store;

use crate::config::Settings;
use crate::error::text;
use crate::resources::LocalResourceStore;
use crate::state::AppState;

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened, migrated or read.
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    /// A file or directory under the data directory, or the provisioner token file, could not be
    /// made or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The example catalog given to seed a tenant is not valid JSON or not a valid catalog.
    #[error("example catalog: {0}")]
    Catalog(String),
    /// The engine refused to start: typically the secrets key is missing or does not open the
    /// sealed secrets.
    #[error(transparent)]
    Engine(#[from] weft_engine::error::EngineError),
}

/// The two routers and the state behind them.
pub struct App {
    /// The external REST API (users, admins, the superadmin), on `port`.
    pub external: Router,
    /// The internal provisioner API, on `internal_port`.
    pub internal: Router,
    /// The state both routers share: store, engine, settings.
    pub state: AppState,
    /// Whether the external port serves requests: true unless the caller holds it back until
    /// something it needs is ready (`weft up`: its provisioner's registration); meanwhile every
    /// external request answers 503 with `Retry-After`, `/status` too.
    pub ready: Arc<std::sync::atomic::AtomicBool>,
}

/// Opens the store named by the settings and builds the app.
pub async fn build(settings: Settings) -> Result<App, ServerError> {
    if settings.database_url.starts_with("sqlite:") {
        private::dir(&settings.data_dir)?;
        private::sqlite_files(&settings.database_url)?;
    }
    if let Some(path) = &settings.provisioner_token_file {
        if weft_client::tokens::create_if_missing(path, rand::random())? {
            tracing::info!(path = %path.display(), "made a provisioner token file");
        }
    }
    let store = weft_store::open(&settings.database_url).await?;
    let app = app(store, settings);
    // A missing or wrong secrets key stops the server here, with the fix named.
    app.state.engine.sealer.ready().await?;
    weft_engine::reseal::seal_what_is_clear(&app.state.engine).await?;
    Ok(app)
}

/// Builds the app over an open store.
pub fn app(store: Arc<dyn Store>, settings: Settings) -> App {
    let resources = Arc::new(LocalResourceStore::new(settings.data_dir.join("resources")));
    let tokens = settings
        .provisioner_token_file
        .as_ref()
        .map(|p| Arc::new(weft_client::tokens::Tokens::new(p)));
    let provisioner_ca = settings.tls.as_ref().and_then(|t| t.client_ca.as_deref());
    let outbound = Arc::new(
        outbound::Outbound::default()
            .with_tokens(tokens.clone())
            .with_provisioner_ca(provisioner_ca),
    );
    let provisioners = Arc::<weft_engine::cache::ProvisionerCache>::default();
    let courier = outbound::Courier {
        outbound: outbound.clone(),
        store: store.clone(),
        provisioners: provisioners.clone(),
    };
    let mut engine = Engine::new(store.clone(), settings.engine(), Arc::new(courier.clone()))
        .with_secrets_key(settings.secrets_key.clone());
    engine.provisioners = provisioners;
    let state = AppState {
        engine,
        store,
        resources,
        settings: Arc::new(settings),
        outbound,
        courier,
        tokens,
    };
    let limit = state.settings.body_limit;
    let external = routes::external(state.settings.resource_body_limit);
    let internal = routes::internal();
    let external =
        audit::layer(external.router, &state).route("/metrics", get(metrics::external_metrics));
    let external = finish(
        external.merge(ui::router(&state)),
        limit,
        Listener::External,
    )
    .with_state(state.clone());
    let internal = internal.router.route("/metrics", get(metrics::metrics));
    let internal = finish(internal, limit, Listener::Internal)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_provisioner_token,
        ))
        .with_state(state.clone());
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut external = external.layer(axum::middleware::from_fn_with_state(
        ready.clone(),
        not_before_ready,
    ));
    if state.settings.tls.is_some() {
        external = external.layer(axum::middleware::map_response(strict_transport));
    }
    App {
        external: ignore_trailing_slash(external),
        internal: ignore_trailing_slash(internal),
        state,
        ready,
    }
}

/// 503 with `Retry-After` until the app is ready ([`App::ready`]).
async fn not_before_ready(
    axum::extract::State(ready): axum::extract::State<Arc<std::sync::atomic::AtomicBool>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if ready.load(std::sync::atomic::Ordering::Acquire) {
        return next.run(req).await;
    }
    let mut r = text(
        StatusCode::SERVICE_UNAVAILABLE,
        "weft is starting: its provisioner has not registered yet; try again in a moment".into(),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    r
}

/// Coopr's router ignores one trailing `/` (its own Java client asks for
/// `.../scripts/?status=INACTIVE`): a request for `/v2/x/` is served as `/v2/x`. The UI's own
/// routes are left alone (`/ui/` is a page of its own).
fn ignore_trailing_slash(inner: Router) -> Router {
    Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(strip_trailing_slash)
            .service(inner),
    )
}

fn strip_trailing_slash(mut req: axum::extract::Request) -> axum::extract::Request {
    let path = req.uri().path();
    let Some(bare) = path.strip_suffix('/') else {
        return req;
    };
    if bare.is_empty() || bare.ends_with('/') || path == "/ui/" || path.starts_with("/ui/") {
        return req;
    }
    let with_query = match req.uri().query() {
        Some(q) => format!("{bare}?{q}"),
        None => bare.to_string(),
    };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(pq) = with_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Over TLS, browsers are told to come back over HTTPS only (a year, as is usual).
async fn strict_transport(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::STRICT_TRANSPORT_SECURITY,
        header::HeaderValue::from_static("max-age=31536000"),
    );
    r
}

fn finish(router: Router<AppState>, limit: usize, listener: Listener) -> Router<AppState> {
    let doc = match listener {
        Listener::External => get(openapi_json),
        Listener::Internal => get(internal_openapi_json),
    };
    router
        .route("/status", get(status))
        .route("/v2/openapi.json", doc)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(run_to_completion))
        .layer(tower_http::trace::TraceLayer::new_for_http())
}

/// Runs every request that may change state on a task of its own, so that a client that goes away
/// mid-request cannot cancel it halfway: a store transaction always commits or rolls back, and a
/// leased task is never half-handed out. A read (`GET`, `HEAD`, `OPTIONS`) runs in the connection's
/// own future instead, so a client that goes away takes its work with it (counted in
/// `weft_http_reads_abandoned_total`): a store read dropped halfway leaves nothing half-done.
async fn run_to_completion(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.method().is_safe() && req.method() != axum::http::Method::TRACE {
        let mut guard = metrics::AbandonedRead::new();
        let resp = next.run(req).await;
        guard.answered();
        return resp;
    }
    match tokio::spawn(next.run(req)).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(error = %e, "request handler panicked");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error; the server log has the cause".into(),
            )
        }
    }
}

async fn status() -> Response {
    (
        [
            (header::CONNECTION, "close"),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        "OK\n",
    )
        .into_response()
}

async fn not_found(uri: Uri) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!("Problem accessing: {uri}. Reason: Not Found"),
    )
}

async fn method_not_allowed(uri: Uri) -> Response {
    text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("Problem accessing: {uri}. Reason: Method Not Allowed"),
    )
}

async fn openapi_json() -> Json<serde_json::Value> {
    Json(openapi(Listener::External))
}

async fn internal_openapi_json() -> Json<serde_json::Value> {
    Json(openapi(Listener::Internal))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft REST API v2",
        description = "Wire-compatible with Coopr's REST API v2. The external port (default 55054) serves \
users, admins and the superadmin; operations tagged \"(internal port)\" are served on the provisioner port \
(default 55055) without identity headers. Errors are plain text. Differences from Coopr: Coopr-ApiKey is \
checked when auth is apikey; malformed JSON is a 400, never a 500; sensitive provider fields read as ********."
    ),
    components(schemas(
        weft_model::Provider,
        weft_model::MachineType,
        weft_model::Service,
        weft_model::ClusterTemplate,
        weft_model::PartialTemplate,
        weft_model::CatalogExport,
        weft_model::SealedExportRequest,
        weft_model::CatalogWarning,
        weft_model::CatalogWriteAnswer,
        weft_model::PluginType,
        weft_model::ResourceMeta,
        weft_model::TenantSpecification,
        weft_model::TenantWriteRequest,
        weft_model::Provisioner,
        weft_model::ProvisionerRegistration,
        weft_model::Heartbeat,
        weft_model::HeartbeatAnswer,
        weft_model::ApiKeyInfo,
        weft_model::ApiKeyRequest,
        weft_model::ApiKeyCreated,
        weft_model::audit::AuditEntry,
        weft_model::audit::AuditRecord,
        weft_model::audit::ChainReport,
        weft_model::Event,
        weft_model::EventKind,
        weft_model::Webhook,
        weft_model::WebhookRequest,
        weft_model::WebhookCreated,
        weft_model::WebhookFormat,
        weft_model::Delivery,
        weft_model::DeliveryStatus,
        weft_model::PoolHost,        // host pools
        weft_model::PoolHostRequest, // host pools
        weft_model::HostState,       // host pools
        weft_model::SweptMachine,    // provider sweep
        weft_model::SweepReport,     // provider sweep
        weft_model::SweepError,      // provider sweep
        weft_model::ClusterHealth,   // health runs
        weft_model::NodeHealth,      // health runs
        weft_model::ServiceHealth,   // health runs
        weft_model::HealthState,     // health runs
        weft_model::HealthRun,       // health runs
        weft_model::DriftRun,        // drift checks
        weft_model::DriftReport,     // drift checks
        weft_model::NodeDrift,       // drift checks
        weft_model::MachineState,    // drift checks
        weft_model::AutoReplacement, // drift checks
        weft_model::ReplaceRun,      // node replacement
        weft_model::RolloutSpec,     // rolling changes
        weft_model::Rollout,         // rolling changes
        weft_model::RolloutReport,   // rolling changes
        weft_model::RolloutOutcome,  // rolling changes
        weft_model::GateFailure,     // rolling changes
        routes::metrics::QueueMetrics,
        routes::metrics::UsageReport,
        weft_model::ClusterCreateRequest,
        routes::cluster_ops::LeaseReq,
        routes::cluster_ops::ConfigReq,
        routes::cluster_ops::ServicesReq,
        routes::cluster_ops::UpgradeReq,
        routes::cluster_ops::CountReq,
        routes::nodes::PropsReq,
        routes::solve::SolveRequest, // layout preview
        weft_model::ClusterSummary,
        weft_model::ClusterDetails,
        weft_model::ClusterStatusView,
        weft_model::PlanView,
        weft_model::CostEstimate,      // cost
        weft_model::ClusterSpec,       // declared clusters
        weft_model::ApplyRequest,      // declared clusters
        weft_model::ClusterChange,     // declared clusters, template sync
        weft_model::DiffLine,          // versions
        weft_model::DiffKind,          // versions
        weft_model::cost::CostReport,  // showback
        weft_model::cost::CostLine,    // showback
        weft_model::cost::CostPoint,   // showback
        weft_model::cost::CostGroupBy, // showback
        weft_model::PlanTask,
        weft_model::Progress,
        weft_model::EntityRef,
        weft_model::Account,
        weft_model::Node,
        weft_model::NodeProperties,
        weft_model::NodeAction,
        weft_model::NodeActionStatus,
        weft_model::ClusterStatus,
        weft_model::JobStatus,
        weft_model::TakeTaskRequest,
        weft_model::TaskNodesRequest,
        weft_model::TaskNodes,
        weft_model::FinishTaskRequest,
        weft_model::TakeNext,
    ))
)]
struct Components;

/// The two listeners, each with an OpenAPI document of its own routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The REST API v2 for users, tenant admins and the superadmin (55054).
    External,
    /// The provisioner API (55055).
    Internal,
}

/// The OpenAPI 3 document of one listener, built from its registered routes: what a client
/// generated from it may call is exactly what that port serves.
pub fn openapi(listener: Listener) -> serde_json::Value {
    let mut doc = Components::openapi();
    let own = match listener {
        Listener::External => routes::external(1),
        Listener::Internal => routes::internal(),
    };
    // The routes `finish` adds to both listeners.
    let both = api::Api::new(match listener {
        Listener::External => "",
        Listener::Internal => " (internal port)",
    })
        .route(
            axum::routing::MethodFilter::GET,
            "/status",
            status,
            api::op("health", "Health check (both ports, no headers needed)").ok(
                200,
                "OK\\n",
                api::Body::Text,
            ),
        )
        .route(
            axum::routing::MethodFilter::GET,
            "/v2/openapi.json",
            openapi_json,
            api::op(
                "health",
                "This OpenAPI document (both ports, no headers needed)",
            )
            .ok(200, "the document", api::Body::AnyJson),
        )
        .route(
            axum::routing::MethodFilter::GET,
            "/metrics",
            metrics::metrics,
            api::op(
                "health",
                "Prometheus metrics: queue depth per tenant, tasks in flight, task durations, job outcomes, live provisioners (both ports; with auth apikey the external port serves them to the superadmin only and the internal port to holders of a provisioner token)",
            )
            .ok(200, "Prometheus text format 0.0.4", api::Body::Text),
        );
    let mut paths = own.paths;
    for (p, item) in both.paths {
        match paths.get_mut(&p) {
            Some(mine) => mine.merge_operations(item),
            None => {
                paths.insert(p, item);
            }
        }
    }
    for (p, item) in paths {
        doc.paths.paths.insert(p, item);
    }
    let mut doc = lenient_doc::state(doc);
    doc_rules::state(&mut doc);
    doc
}

/// Loads a catalog (the JSON of `GET /v2/export`) into a tenant that has no catalog yet. Returns
/// whether anything was loaded.
pub async fn seed_catalog(
    store: &dyn Store,
    tenant_id: &str,
    json: &str,
) -> Result<bool, ServerError> {
    for kind in EntityKind::ADMIN {
        if !store.list_entities(tenant_id, kind).await?.is_empty() {
            return Ok(false);
        }
    }
    let v = weft_model::lenient::parse(json.as_bytes())
        .map_err(|e| ServerError::Catalog(e.to_string()))?;
    let entities = weft_engine::entities::catalog_entities(v)
        .map_err(|e| ServerError::Catalog(e.to_string()))?;
    store.replace_entities(tenant_id, &entities).await?;
    Ok(true)
}

/// Both listeners, bound and not yet serving.
pub struct Bound {
    app: App,
    external: tokio::net::TcpListener,
    internal: tokio::net::TcpListener,
    tls: Option<Listeners>,
}

/// The listeners' TLS: their configurations and the certificates reloaded behind them.
struct Listeners {
    external: Arc<rustls::ServerConfig>,
    internal: Arc<rustls::ServerConfig>,
    certificates: [Arc<tls::Certificates>; 2],
}

impl Listeners {
    /// Loads the certificate files of `s` (an error names the file); the internal port requires
    /// client certificates when `client_ca` is set.
    fn load(s: &config::TlsSettings) -> std::io::Result<Listeners> {
        let files = |client_ca| tls::TlsFiles {
            cert: s.cert.clone(),
            key: s.key.clone(),
            client_ca,
        };
        let ext = tls::Certificates::load(files(None))?;
        let int = tls::Certificates::load(files(s.client_ca.clone()))?;
        Ok(Listeners {
            external: ext.server_config()?,
            internal: int.server_config()?,
            certificates: [ext, int],
        })
    }
}

/// Binds both listeners (port 0 picks a free port).
pub async fn bind(app: App) -> Result<Bound, ServerError> {
    let s = app.state.settings.clone();
    let external = tokio::net::TcpListener::bind((s.bind, s.port)).await?;
    let internal = tokio::net::TcpListener::bind((s.bind, s.internal_port)).await?;
    bound(app, external, internal)
}

/// Serves `app` on listeners the caller bound (`weft up` binds its ports before it creates
/// anything, so a port in use leaves no data behind). Reads the TLS files the settings name.
pub fn bound(
    app: App,
    external: tokio::net::TcpListener,
    internal: tokio::net::TcpListener,
) -> Result<Bound, ServerError> {
    let tls = match &app.state.settings.tls {
        Some(s) => Some(Listeners::load(s)?),
        None => None,
    };
    Ok(Bound {
        app,
        external,
        internal,
        tls,
    })
}

impl Bound {
    /// The address the external listener is bound to (the actual port when 0 was asked for).
    pub fn external_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.external.local_addr()
    }

    /// The address the internal listener is bound to (the actual port when 0 was asked for).
    pub fn internal_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.internal.local_addr()
    }

    /// `https` when the listeners serve TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Starts the background work ([`spawn_background`]) and serves until ctrl-c or SIGTERM.
    pub async fn run(self) -> Result<(), ServerError> {
        self.run_until(shutdown_signal()).await
    }

    /// [`Bound::run`], but serves until `stop` completes (the caller handles signals; `weft up`
    /// stops its provisioner first so that it can unregister).
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        tracing::info!(external = %self.external.local_addr()?, internal = %self.internal.local_addr()?, "weft server listening");
        let background = spawn_background(&self.app.state);
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stop.await;
            let _ = tx.send(true);
        });
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let patience = listen::Patience::default();
        let (ext_tls, int_tls) = match &self.tls {
            Some(t) => (Some(t.external.clone()), Some(t.internal.clone())),
            None => (None, None),
        };
        let watchers: Vec<_> = self
            .tls
            .iter()
            .flat_map(|t| t.certificates.iter().map(|c| c.watch()))
            .collect();
        let a = listen::serve(
            self.external,
            self.app.external,
            patience,
            ext_tls,
            wait(rx.clone()),
        );
        let b = listen::serve(
            self.internal,
            self.app.internal,
            patience,
            int_tls,
            wait(rx),
        );
        let (ra, rb) = tokio::join!(a, b);
        watchers.iter().for_each(|w| w.abort());
        background.stop();
        ra?;
        rb?;
        Ok(())
    }
}

/// The server's background tasks; aborted by [`Background::stop`] (not on drop).
pub struct Background {
    /// The janitor loop (see [`weft_engine::janitor`]).
    pub janitor: tokio::task::JoinHandle<()>,
    /// Runs the job callbacks (see [`weft_engine::callbacks`]).
    pub callbacks: tokio::task::JoinHandle<()>,
    /// Gives pool hosts back when their clusters' jobs succeed (see [`weft_engine::hostpool`]).
    pub hostpool: tokio::task::JoinHandle<()>,
    /// Numbers committed events and wakes event followers (see [`weft_engine::feed`]).
    pub feed: tokio::task::JoinHandle<()>,
    /// Delivers tenants' webhooks (see [`weft_engine::webhooks`]).
    pub webhooks: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Aborts every background task; they stop at their next await point.
    pub fn stop(self) {
        self.janitor.abort();
        self.callbacks.abort();
        self.hostpool.abort();
        self.feed.abort();
        self.webhooks.abort();
    }
}

/// Starts the background work: the janitor loop (runs only while this server holds the store's
/// `janitor` leadership; see [`weft_engine::janitor`]) and the job callbacks (see
/// [`weft_engine::callbacks`]; subscribed before this returns).
pub fn spawn_background(state: &AppState) -> Background {
    Background {
        callbacks: weft_engine::callbacks::spawn(state.engine.clone()),
        hostpool: weft_engine::hostpool::spawn(state.engine.clone()),
        feed: weft_engine::feed::spawn(state.engine.clone()),
        webhooks: weft_engine::webhooks::spawn(state.engine.clone()),
        janitor: weft_engine::janitor::spawn(state.engine.clone()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// Binds both listeners and serves until ctrl-c or SIGTERM.
pub async fn serve(app: App) -> Result<(), ServerError> {
    bind(app).await?.run().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::routing::{get, post};
    use axum::Router;
    use tokio::io::AsyncWriteExt;
    use tokio::sync::{mpsc, Notify};

    /// Says `dropped` if the handler is dropped before it ends, `ended` if it ends.
    struct Watch(mpsc::UnboundedSender<&'static str>, bool);

    impl Drop for Watch {
        fn drop(&mut self) {
            let _ = self.0.send(if self.1 { "ended" } else { "dropped" });
        }
    }

    async fn hold(
        events: mpsc::UnboundedSender<&'static str>,
        release: std::sync::Arc<Notify>,
    ) -> &'static str {
        let mut watch = Watch(events.clone(), false);
        let _ = events.send("started");
        release.notified().await;
        watch.1 = true;
        "done"
    }

    /// Sends `head` on a new connection, waits until its handler has started, and closes the
    /// connection without reading an answer.
    async fn call_and_leave(addr: std::net::SocketAddr, head: &str, events: &mut Rx) {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        assert_eq!(next(events).await, "started");
        drop(conn);
    }

    type Rx = mpsc::UnboundedReceiver<&'static str>;

    async fn next(events: &mut Rx) -> &'static str {
        tokio::time::timeout(Duration::from_secs(20), events.recv())
            .await
            .expect("an event within 20 s")
            .expect("the sender lives")
    }

    #[tokio::test]
    async fn a_read_stops_when_its_client_goes_away_and_a_write_runs_to_its_end() {
        let (tx, mut events) = mpsc::unbounded_channel();
        let release = std::sync::Arc::new(Notify::new());
        let (t1, r1, t2, r2) = (tx.clone(), release.clone(), tx, release.clone());
        let router = Router::new()
            .route("/read", get(move || hold(t1.clone(), r1.clone())))
            .route("/write", post(move || hold(t2.clone(), r2.clone())))
            .layer(axum::middleware::from_fn(super::run_to_completion));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let patience = weft_client::listen::Patience::default();
        let server = tokio::spawn(weft_client::listen::serve(
            listener,
            router,
            patience,
            None,
            std::future::pending(),
        ));
        let before = crate::metrics::ABANDONED_READS.load(std::sync::atomic::Ordering::Relaxed);
        call_and_leave(addr, "GET /read HTTP/1.1\r\nhost: t\r\n\r\n", &mut events).await;
        assert_eq!(next(&mut events).await, "dropped", "the read's work stops");
        let after = crate::metrics::ABANDONED_READS.load(std::sync::atomic::Ordering::Relaxed);
        assert!(after > before, "the abandoned read is counted");

        let head = "POST /write HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\n\r\n";
        call_and_leave(addr, head, &mut events).await;
        release.notify_one();
        assert_eq!(
            next(&mut events).await,
            "ended",
            "the write runs to its end"
        );
        server.abort();
    }
}
