//! `weft server` and `weft up`: start the server (and, for `up`, everything a laptop needs).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use weft_server::config::{RawConfig, Settings};
use weft_store::{Tenant, SUPERADMIN};

/// The example catalog `weft up` loads on first start.
pub const EXAMPLE_CATALOG: &str = include_str!("../../../../examples/catalog/catalog.json");

/// The tenant `weft up` creates for people to work in.
pub const DEFAULT_TENANT: &str = "default";

/// Workers of the provisioner `weft up` runs in-process, all for the default tenant.
pub const UP_WORKERS: u32 = 8;

/// Arguments of `weft server`. Each flag is also a TOML key in --config and a WEFT_* variable.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
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
    /// Seconds a worker may hold a task before it is failed and retried [default: 1800].
    #[arg(long, env = "WEFT_TASK_TIMEOUT")]
    task_timeout: Option<u64>,
    /// Executions per task before its job fails [default: 3].
    #[arg(long, env = "WEFT_MAX_ACTION_RETRIES")]
    max_action_retries: Option<u32>,
    /// Seconds between janitor runs [default: 10].
    #[arg(long, env = "WEFT_JANITOR_INTERVAL")]
    janitor_interval: Option<u64>,
    /// Seconds without a heartbeat before a provisioner is dropped [default: 120].
    #[arg(long, env = "WEFT_PROVISIONER_TIMEOUT")]
    provisioner_timeout: Option<u64>,
    /// URL to POST the cluster and job JSON to at the start, success and failure of every job.
    #[arg(long, env = "WEFT_CALLBACK_URL")]
    callback_url: Option<String>,
    /// Command to run (JSON on stdin, WEFT_EVENT set) at the start, success and failure of every job.
    #[arg(long, env = "WEFT_CALLBACK_COMMAND")]
    callback_command: Option<String>,
    /// Seconds a callback may take before it is abandoned [default: 10].
    #[arg(long, env = "WEFT_CALLBACK_TIMEOUT")]
    callback_timeout: Option<u64>,
    /// Provisioner token file, one token per line (first presented, all accepted; re-read when it
    /// changes) [default with --auth apikey: <data dir>/provisioner.token, made when missing].
    #[arg(long, env = "WEFT_PROVISIONER_TOKEN_FILE")]
    provisioner_token_file: Option<PathBuf>,
}

impl ServerArgs {
    /// Flags and environment over the config file over defaults.
    pub fn settings(self) -> anyhow::Result<Settings> {
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
            provisioner_token_file: self.provisioner_token_file,
        };
        Ok(file.overlay(flags).resolve()?)
    }
}

/// Arguments of `weft up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Where weft keeps its data [default: ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// External API port [default: 55054].
    #[arg(long, env = "WEFT_PORT")]
    port: Option<u16>,
    /// Provisioner API port [default: 55055].
    #[arg(long, env = "WEFT_INTERNAL_PORT")]
    internal_port: Option<u16>,
    /// Seconds a task may hold its lease before it is retried [default: 1800]. A provisioner
    /// that restarts or goes silent has its tasks retried at once, whatever this says.
    #[arg(long, env = "WEFT_TASK_TIMEOUT")]
    task_timeout: Option<u64>,
}

pub fn server(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let settings = args.settings()?;
    let settings_tokens = settings.provisioner_token_file.clone();
    runtime()?.block_on(async {
        let app = weft_server::build(settings).await?;
        let bound = weft_server::bind(app)
            .await
            .context("binding the API ports")?;
        println!("weft server");
        println!("  REST API     http://{}/v2", bound.external_addr()?);
        println!("  provisioners http://{}", bound.internal_addr()?);
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

pub fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let settings = RawConfig {
        data_dir: args.data_dir,
        port: args.port,
        internal_port: args.internal_port,
        task_timeout: args.task_timeout,
        bind: Some("127.0.0.1".into()),
        auth: Some("none".into()),
        ..Default::default()
    }
    .resolve()?;
    runtime()?.block_on(async {
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
            };
            let tenant = Tenant { id: uuid::Uuid::new_v4().to_string(), spec, create_time: 0 };
            store.insert_tenant(&tenant).await?;
            weft_server::seed_catalog(store.as_ref(), &tenant.id, EXAMPLE_CATALOG).await?;
        }
        let bound = weft_server::bind(app).await.context("binding the API ports")?;
        let api = format!("http://{}", bound.external_addr()?);
        // The in-process provisioner: the default tenant gets its workers.
        let internal = bound.internal_addr()?;
        let serving = tokio::spawn(bound.run());
        let mut tenant = store.tenant_by_name(DEFAULT_TENANT).await?;
        if let Some(t) = tenant.as_mut().filter(|t| t.spec.workers == 0) {
            t.spec.workers = UP_WORKERS;
            store.update_tenant(t).await?;
        }
        let agent = super::provisioner::start_in_process(&settings.data_dir, internal, UP_WORKERS).await?;
        if let Some(t) = &tenant {
            agent.set_workers(&t.id, t.spec.workers.min(UP_WORKERS))?;
        }
        // Only now is everything ready (the provisioner has registered its plugin types): say so.
        println!("weft is up (data in {}{})", settings.data_dir.display(), if first { ", example catalog loaded" } else { "" });
        println!("  REST API     {api}/v2   (OpenAPI: {api}/v2/openapi.json)");
        println!("  provisioners http://{internal}");
        println!("  provisioner  http://{} ({UP_WORKERS} workers, local provider, shell automator)", agent.addr());
        println!("  web UI       {api}/   (log in with tenant {DEFAULT_TENANT}, user admin)");
        println!("  try: curl -H 'Coopr-TenantID: {DEFAULT_TENANT}' -H 'Coopr-UserID: admin' {api}/v2/clustertemplates");
        serving.await?.context("serving")?;
        agent.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
