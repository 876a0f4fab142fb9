//! `weft server` and `weft up`: start the server (and, for `up`, everything a laptop needs).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use weft_server::config::{RawConfig, Settings};
use weft_store::{Tenant, SUPERADMIN};

/// The example catalog `weft up` loads on first start.
pub(crate) const EXAMPLE_CATALOG: &str = include_str!("../../../../examples/catalog/catalog.json");

/// The tenant `weft up` creates for people to work in.
pub(crate) const DEFAULT_TENANT: &str = "default";

/// Workers of the provisioner `weft up` runs in-process, all for the default tenant.
pub(crate) const UP_WORKERS: u32 = 8;

/// Arguments of `weft server`. Each flag is also a TOML key in --config and a WEFT_* variable.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// TOML file with any of the keys below (data_dir, port, internal_port, bind, database, auth, ...).
    #[arg(long, env = "WEFT_CONFIG")]
    config: Option<PathBuf>,
    /// Directory for the embedded SQLite database and plugin resources [default: ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// External API port [default: 55054].
    #[arg(long, env = "WEFT_PORT")]
    port: Option<u16>,
    /// Provisioner API port [default: 55055].
    #[arg(long, env = "WEFT_INTERNAL_PORT")]
    internal_port: Option<u16>,
    /// Address to bind both listeners to [default: 127.0.0.1].
    #[arg(long, env = "WEFT_BIND")]
    bind: Option<String>,
    /// sqlite://PATH or postgres://USER@HOST/DB [default: SQLite under --data-dir].
    #[arg(long, env = "WEFT_DATABASE")]
    database: Option<String>,
    /// none (trust the Coopr-UserID/Coopr-TenantID headers) or apikey (require Coopr-ApiKey) [default: none].
    #[arg(long, env = "WEFT_AUTH")]
    auth: Option<String>,
    /// Largest request body in bytes [default: 1048576].
    #[arg(long, env = "WEFT_BODY_LIMIT")]
    body_limit: Option<u64>,
    /// Largest plugin resource upload in bytes [default: 104857600].
    #[arg(long, env = "WEFT_RESOURCE_BODY_LIMIT")]
    resource_body_limit: Option<u64>,
    /// How long a worker may hold a task before it is failed and retried (30m; plain seconds too) [default: 30m].
    #[arg(long, env = "WEFT_TASK_TIMEOUT", value_parser = seconds)]
    task_timeout: Option<u64>,
    /// Executions per task before its job fails [default: 3].
    #[arg(long, env = "WEFT_MAX_ACTION_RETRIES")]
    max_action_retries: Option<u32>,
    /// Time between janitor runs (10s; plain seconds too) [default: 10s].
    #[arg(long, env = "WEFT_JANITOR_INTERVAL", value_parser = seconds)]
    janitor_interval: Option<u64>,
    /// Time without a heartbeat before a provisioner is dropped (2m; plain seconds too) [default: 2m].
    #[arg(long, env = "WEFT_PROVISIONER_TIMEOUT", value_parser = seconds)]
    provisioner_timeout: Option<u64>,
    /// URL to POST the cluster and job JSON to at the start, success and failure of every job.
    #[arg(long, env = "WEFT_CALLBACK_URL")]
    callback_url: Option<String>,
    /// Command to run (JSON on stdin, WEFT_EVENT set) at the start, success and failure of every job.
    #[arg(long, env = "WEFT_CALLBACK_COMMAND")]
    callback_command: Option<String>,
    /// How long a callback may take before it is abandoned (10s; plain seconds too) [default: 10s].
    #[arg(long, env = "WEFT_CALLBACK_TIMEOUT", value_parser = seconds)]
    callback_timeout: Option<u64>,
    /// The most nodes a cluster may have, up to 100000 [default: 10000].
    #[arg(long, env = "WEFT_MAX_CLUSTER_SIZE")]
    max_cluster_size: Option<u64>,
    /// Provisioner token file, one token per line (first presented, all accepted; re-read when it
    /// changes) [default with --auth apikey: <data dir>/provisioner.token, made when missing].
    #[arg(long, env = "WEFT_PROVISIONER_TOKEN_FILE")]
    provisioner_token_file: Option<PathBuf>,
    /// Time between the janitor's drift checks of every active cluster (10m; plain seconds too;
    /// 0 or unset: off). Templates with autoReplace get missing nodes replaced.
    #[arg(long, env = "WEFT_CHECK_INTERVAL", value_parser = seconds)]
    check_interval: Option<u64>,
    /// Nodes of one cluster the janitor replaces by itself per hour [default: 2].
    #[arg(long, env = "WEFT_AUTO_REPLACE_PER_HOUR")]
    auto_replace_per_hour: Option<u32>,
    /// Days the audit trail keeps a record [default: 400; 0: for ever].
    #[arg(long, env = "WEFT_AUDIT_RETENTION_DAYS")]
    audit_retention_days: Option<u64>,
    /// Hours the event stream's backlog keeps an event [default: 72; 0: for ever].
    #[arg(long, env = "WEFT_EVENT_RETENTION_HOURS")]
    event_retention_hours: Option<u64>,
    /// Let tenants' webhook URLs point at loopback and link-local addresses (refused by default).
    #[arg(long, env = "WEFT_WEBHOOKS_ALLOW_LOOPBACK")]
    webhooks_allow_loopback: bool,
    /// Hours a webhook delivery is retried before it is marked failed [default: 25].
    #[arg(long, env = "WEFT_WEBHOOK_RETRY_HOURS")]
    webhook_retry_hours: Option<u64>,
    /// The first webhook retry's back-off ceiling in ms, doubled per retry [default: 1000].
    #[arg(long, env = "WEFT_WEBHOOK_RETRY_BASE_MS")]
    webhook_retry_base_ms: Option<u64>,
    /// PEM certificate chain both ports serve over TLS (with --tls-key); re-read when it changes.
    #[arg(long, env = "WEFT_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "WEFT_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// PEM CA certificates: the provisioner port then requires client certificates they signed.
    #[arg(long, env = "WEFT_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback --bind (keys, tokens and secrets in clear).
    #[arg(long, env = "WEFT_INSECURE_HTTP")]
    insecure_http: bool,
    /// The master key of the secrets sealed in the store, made on first start; every server of
    /// one database needs the same file (WEFT_SECRETS_KEY may hold the key itself)
    /// [default: <data dir>/secrets.key].
    #[arg(long, env = "WEFT_SECRETS_KEY_FILE")]
    secrets_key_file: Option<PathBuf>,
}

impl ServerArgs {
    /// Flags and environment over the config file over defaults.
    pub(crate) fn settings(self) -> anyhow::Result<Settings> {
        let file = match &self.config {
            Some(p) => RawConfig::from_file(p)?,
            None => RawConfig::default(),
        };
        let flags = RawConfig {
            data_dir: self.data_dir,
            port: self.port,
            internal_port: self.internal_port,
            bind: self.bind,
            database: self.database,
            auth: self.auth,
            body_limit: self.body_limit,
            resource_body_limit: self.resource_body_limit,
            task_timeout: self.task_timeout,
            max_action_retries: self.max_action_retries,
            janitor_interval: self.janitor_interval,
            provisioner_timeout: self.provisioner_timeout,
            callback_url: self.callback_url,
            callback_command: self.callback_command,
            callback_timeout: self.callback_timeout,
            max_cluster_size: self.max_cluster_size,
            provisioner_token_file: self.provisioner_token_file,
            check_interval: self.check_interval,
            auto_replace_per_hour: self.auto_replace_per_hour,
            audit_retention_days: self.audit_retention_days,
            event_retention_hours: self.event_retention_hours,
            webhooks_allow_loopback: self.webhooks_allow_loopback.then_some(true),
            webhook_retry_hours: self.webhook_retry_hours,
            webhook_retry_base_ms: self.webhook_retry_base_ms,
            tls_cert: self.tls_cert,
            tls_key: self.tls_key,
            client_ca: self.client_ca,
            insecure_http: self.insecure_http.then_some(true),
            secrets_key_file: self.secrets_key_file,
        };
        Ok(file.overlay(flags).resolve()?)
    }
}

/// Arguments of `weft up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Where weft keeps its data [default: ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// External API port [default: 55054].
    #[arg(long, env = "WEFT_PORT")]
    port: Option<u16>,
    /// Provisioner API port [default: 55055].
    #[arg(long, env = "WEFT_INTERNAL_PORT")]
    internal_port: Option<u16>,
    /// How long a task may hold its lease before it is retried (30m; plain seconds too)
    /// [default: 30m]. A provisioner that restarts or goes silent has its tasks retried at once,
    /// whatever this says.
    #[arg(long, env = "WEFT_TASK_TIMEOUT", value_parser = seconds)]
    task_timeout: Option<u64>,
    /// Time between drift checks of every active cluster (10m; plain seconds too) [default: off].
    /// Templates with autoReplace get nodes whose machine is gone replaced.
    #[arg(long, env = "WEFT_CHECK_INTERVAL", value_parser = seconds)]
    check_interval: Option<u64>,
    /// Serve both ports over HTTPS with a CA made in the data dir on first start (its path and
    /// fingerprint are printed); the embedded provisioner verifies it and presents a client
    /// certificate of its own.
    #[arg(long, env = "WEFT_TLS")]
    tls: bool,
    /// Address both ports listen on [default: 127.0.0.1]. Any other address (0.0.0.0 included)
    /// serves HTTPS as with --tls and requires API keys: an admin key of the default tenant is
    /// written to <data dir>/admin.key (0600) on first start.
    #[arg(long, env = "WEFT_BIND")]
    bind: Option<std::net::IpAddr>,
    /// Copy the log (<data dir>/weft.log) to the terminal.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// How much to log: a level (error, warn, info, debug, trace) or a filter such as
    /// `debug,sqlx=warn`; WEFT_LOG wins [default: info,sqlx=warn].
    #[arg(long, value_parser = super::up_log::level)]
    log_level: Option<String>,
}

pub(crate) fn server(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let settings = args.settings()?;
    for w in settings.warnings() {
        eprintln!("weft server: warning: {w}");
    }
    let settings_tokens = settings.provisioner_token_file.clone();
    super::runtime::runtime()?.block_on(async {
        let (external, internal) = bind_ports(&settings, "weft server").await?;
        let app = weft_server::build(settings).await?;
        let bound = weft_server::bound(app, external, internal)?;
        let scheme = bound.scheme();
        println!("weft server");
        println!("  REST API     {scheme}://{}/v2", bound.external_addr()?);
        println!("  provisioners {scheme}://{}", bound.internal_addr()?);
        if let Some(p) = &settings_tokens {
            println!(
                "  provisioner token file {} (give it to provisioners: --token-file)",
                p.display()
            );
        }
        bound.run().await.context("serving")?;
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    // Beyond loopback, weft up is secure by itself: HTTPS with its local CA and API keys.
    let bind = args.bind.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    let network = !bind.is_loopback();
    let mut settings = RawConfig {
        data_dir: args.data_dir,
        port: args.port,
        internal_port: args.internal_port,
        task_timeout: args.task_timeout,
        check_interval: args.check_interval,
        bind: Some(bind.to_string()),
        auth: Some(if network { "apikey" } else { "none" }.into()),
        // The check that refuses plain HTTP beyond loopback: up_tls below gives the certificates.
        insecure_http: network.then_some(true),
        ..Default::default()
    }
    .resolve()?;
    super::runtime::runtime()?.block_on(async {
        // The ports first: a port in use must leave nothing behind (no data dir, no database).
        let (external, internal) = bind_ports(&settings, "weft up").await?;
        weft_server::private::dir(&settings.data_dir)?;
        let log = super::up_log::init(&settings.data_dir, args.verbose, args.log_level.as_deref())?;
        let local_tls = match args.tls || network {
            true => Some(up_tls(&mut settings)?),
            false => None,
        };
        let (app, first) = open_up_store(&settings).await?;
        let engine = app.state.engine.clone();
        let jobs = super::up_log::print_jobs(&engine.events, app.state.store.clone());
        let store = app.state.store.clone();
        let admin_key = match network {
            true => Some(up_admin_key(&settings.data_dir, store.as_ref()).await?),
            false => None,
        };
        // The external port answers 503 (Retry-After) until the provisioner has registered its
        // plugin types: a create right after `/status` answers must find them.
        let ready = app.ready.clone();
        ready.store(false, std::sync::atomic::Ordering::Release);
        let bound = weft_server::bound(app, external, internal)?;
        let scheme = bound.scheme();
        let api = format!("{scheme}://{}", reachable(bound.external_addr()?));
        let internal = reachable(bound.internal_addr()?);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(bound.run_until(async {
            let _ = stop_rx.await;
        }));
        let embedded = super::provisioner::Embedded {
            server: internal,
            capacity: UP_WORKERS,
            tls: local_tls.as_ref().map(|t| weft_client::TlsTrust {
                ca_cert: Some(t.ca.clone()),
                client_cert: Some(t.client_cert.clone()),
                client_key: Some(t.client_key.clone()),
            }),
            token_file: settings.provisioner_token_file.clone(),
        };
        let agent = start_up_provisioner(&settings.data_dir, store.as_ref(), embedded).await?;
        ready.store(true, std::sync::atomic::Ordering::Release);
        super::up_record::record_address(&settings.data_dir, &api)?;
        if let Err(e) = super::cli::config::remember_up(&api, &settings.data_dir) {
            tracing::warn!(error = %e, "cannot note this data dir for the CLI (cluster ssh needs --data-dir)");
        }
        // Only now is everything ready (the provisioner has registered its plugin types): say so.
        let shown = UpShown {
            first,
            api: &api,
            internal: &format!("{scheme}://{internal}"),
            agent: &format!("{scheme}://{}", agent.addr()),
            tls: local_tls.as_ref(),
            admin_key: admin_key.as_deref(),
            log: &log,
        };
        print_up(&settings, &shown);
        super::runtime::shutdown_signal().await;
        jobs.abort();
        super::up_record::forget_address(&settings.data_dir);
        let live = super::up_record::live_in_store(&engine)
            .await
            .unwrap_or_default();
        // The provisioner unregisters while the server still listens.
        agent.shutdown().await;
        let _ = stop_tx.send(());
        serving.await?.context("serving")?;
        super::up_record::print_left_behind(&settings.data_dir, &live);
        Ok(ExitCode::SUCCESS)
    })
}

/// Where this machine reaches a listener: loopback for a wildcard address (the name the local CA's
/// server certificate holds).
fn reachable(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    let ip: std::net::IpAddr = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    std::net::SocketAddr::new(ip, addr.port())
}

/// The admin API key of the default tenant that `weft up` beyond loopback makes on first start,
/// kept in `<data dir>/admin.key` (0600); returns the file's path.
async fn up_admin_key(
    data_dir: &std::path::Path,
    store: &dyn weft_store::Store,
) -> anyhow::Result<std::path::PathBuf> {
    let path = data_dir.join("admin.key");
    if path.is_file() {
        return Ok(path);
    }
    let request = weft_model::ApiKeyRequest {
        tenant: DEFAULT_TENANT.into(),
        user: "admin".into(),
        admin: true,
    };
    let made = weft_engine::apikeys::make_key(store, &request, weft_engine::now_ms())
        .await
        .map_err(|e| anyhow::anyhow!("making the admin API key: {e}"))?;
    weft_server::private::write(&path, format!("{}\n", made.key).as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Makes (or finds) the local CA of `weft up --tls` and serves both ports with it, the
/// provisioner port requiring the embedded provisioner's client certificate.
fn up_tls(settings: &mut Settings) -> anyhow::Result<super::local_ca::LocalTls> {
    weft_server::private::dir(&settings.data_dir)?;
    let t = super::local_ca::ensure(&settings.data_dir, settings.bind)?;
    settings.tls = Some(weft_server::config::TlsSettings {
        cert: t.cert.clone(),
        key: t.key.clone(),
        client_ca: Some(t.ca.clone()),
    });
    Ok(t)
}

/// What `weft up` says it serves.
struct UpShown<'a> {
    /// The example catalog was loaded now.
    first: bool,
    api: &'a str,
    internal: &'a str,
    agent: &'a str,
    tls: Option<&'a super::local_ca::LocalTls>,
    admin_key: Option<&'a std::path::Path>,
    log: &'a std::path::Path,
}

/// What `weft up` prints once everything is ready (a closed stdout is not an error); the last
/// line starts with `stop:`.
fn print_up(settings: &Settings, up: &UpShown) {
    let loaded = if up.first {
        ", example catalog loaded"
    } else {
        ""
    };
    let (api, dir) = (up.api, settings.data_dir.display());
    let mut lines = vec![
        format!("weft is up (data in {dir}{loaded})"),
        format!("  REST API     {api}/v2   (OpenAPI: {api}/v2/openapi.json)"),
        format!("  provisioners {}", up.internal),
        format!(
            "  provisioner  {} ({UP_WORKERS} workers, local provider, shell automator)",
            up.agent
        ),
    ];
    let mut curl = String::from("curl");
    let mut login = format!("weft login --server {api}");
    if let Some(t) = up.tls {
        let fingerprint = t
            .fingerprint()
            .unwrap_or_else(|e| format!("unreadable: {e}"));
        lines.push(format!(
            "  TLS          CA {} (SHA-256 {fingerprint})",
            t.ca.display()
        ));
        curl = format!("curl --cacert {}", t.ca.display());
        login = format!("{login} --ca-cert {}", t.ca.display());
    }
    let who = match up.admin_key {
        Some(key) => {
            let key = key.display();
            lines.push(format!(
                "  API key      {key} (tenant {DEFAULT_TENANT}, admin; every call needs a key)"
            ));
            lines.push(format!("  web UI       {api}/   (log in with that key)"));
            login = format!("{login} --api-key \"$(cat {key})\"");
            format!("-H \"Coopr-ApiKey: $(cat {key})\"")
        }
        None => {
            lines.push(format!(
                "  web UI       {api}/   (log in with tenant {DEFAULT_TENANT}, user admin)"
            ));
            login = format!("{login} --tenant {DEFAULT_TENANT} --user admin");
            format!("-H 'Coopr-TenantID: {DEFAULT_TENANT}' -H 'Coopr-UserID: admin'")
        }
    };
    lines.push(format!("  CLI          {login}"));
    lines.push(format!("  try: {curl} {who} '{api}/v2/clustertemplates'"));
    lines.push(format!(
        "  log          {} (-v shows it here; jobs are listed below as they start and end)",
        up.log.display()
    ));
    lines.push(format!(
        "  stop: Ctrl-C (clusters keep running); remove every cluster: weft down --data-dir {dir}"
    ));
    super::up_log::say(&lines.join("\n"));
}

/// Binds the external and internal ports of `settings`; a port in use is an error naming the
/// port and the flag that changes it.
pub(crate) async fn bind_ports(
    settings: &Settings,
    command: &str,
) -> anyhow::Result<(tokio::net::TcpListener, tokio::net::TcpListener)> {
    let one = |port: u16, flag: &'static str| async move {
        tokio::net::TcpListener::bind((settings.bind, port))
            .await
            .map_err(|e| port_error(e, settings.bind, port, flag, command))
    };
    let external = one(settings.port, "--port").await?;
    let internal = one(settings.internal_port, "--internal-port").await?;
    Ok((external, internal))
}

fn port_error(
    e: std::io::Error,
    bind: std::net::IpAddr,
    port: u16,
    flag: &str,
    command: &str,
) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        anyhow::anyhow!(
            "port {port} on {bind} is in use (is weft already running?): pick another with `{command} {flag} PORT`"
        )
    } else {
        anyhow::anyhow!("cannot listen on {bind}:{port} ({flag}): {e}")
    }
}

/// Opens (or makes) the store of `weft up`: the example catalog and the default tenant on first
/// start. Returns the app and whether the catalog was loaded now.
pub(crate) async fn open_up_store(settings: &Settings) -> anyhow::Result<(weft_server::App, bool)> {
    let app = weft_server::build(settings.clone()).await?;
    let store = app.state.store.clone();
    let first = weft_server::seed_catalog(store.as_ref(), SUPERADMIN, EXAMPLE_CATALOG).await?;
    if store.tenant_by_name(DEFAULT_TENANT).await?.is_none() {
        let spec = weft_model::TenantSpecification {
            name: DEFAULT_TENANT.into(),
            description: Some("the tenant weft up makes for you".into()),
            workers: 0,
            max_clusters: weft_model::UNBOUNDED,
            max_nodes: weft_model::UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        };
        let tenant = Tenant {
            id: uuid::Uuid::new_v4().to_string(),
            spec,
            create_time: 0,
        };
        store.insert_tenant(&tenant).await?;
        weft_server::seed_catalog(store.as_ref(), &tenant.id, EXAMPLE_CATALOG).await?;
    }
    Ok((app, first))
}

/// Starts the in-process provisioner of `weft up` and gives it the workers of every tenant (the
/// default tenant gets [`UP_WORKERS`] when it has none).
pub(crate) async fn start_up_provisioner(
    data_dir: &std::path::Path,
    store: &dyn weft_store::Store,
    embedded: super::provisioner::Embedded,
) -> anyhow::Result<weft_provisioner::agent::Agent> {
    if let Some(mut t) = store
        .tenant_by_name(DEFAULT_TENANT)
        .await?
        .filter(|t| t.spec.workers == 0)
    {
        t.spec.workers = UP_WORKERS;
        store.update_tenant(&t).await?;
    }
    let agent = super::provisioner::start_in_process(data_dir, embedded).await?;
    for t in store.list_tenants().await? {
        if t.spec.workers > 0 && t.spec.name != SUPERADMIN {
            agent
                .set_workers(&t.id, t.spec.workers.min(UP_WORKERS))
                .await?;
        }
    }
    Ok(agent)
}

/// A duration flag as seconds: `30m`, `90s`, `1h30m`, or plain seconds (as in config files).
fn seconds(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) => Ok(n),
        Err(_) => super::cli::duration::parse(s).map(|d| d.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn duration_flags_read_units_and_plain_seconds() {
        assert_eq!(seconds("30m"), Ok(1800));
        assert_eq!(seconds("1800"), Ok(1800));
        assert_eq!(seconds("1h30m"), Ok(5400));
        assert!(seconds("soon").is_err());
    }
}
