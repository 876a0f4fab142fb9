//! `weft provisioner`: the provisioner agent (local and docker providers, shell automator), and the
//! in-process provisioner that `weft up` starts.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weft_provisioner::automators;
use weft_provisioner::docker::DockerProvider;
use weft_provisioner::hostpool::HostPoolProvider;
use weft_provisioner::local::LocalProvider;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::tenancy::TenantUsers;
use weft_provisioner::{Agent, AgentConfig, Automator, Plugins};

/// The example catalog's scripts, written to `<data dir>/scripts` so the shell automator finds them.
pub(crate) const EXAMPLE_SCRIPTS: [(&str, &str); 9] = [
    (
        "lib.sh",
        include_str!("../../../../examples/catalog/scripts/lib.sh"),
    ),
    (
        "kv.sh",
        include_str!("../../../../examples/catalog/scripts/kv.sh"),
    ),
    (
        "kv.py",
        include_str!("../../../../examples/catalog/scripts/kv.py"),
    ),
    (
        "web.sh",
        include_str!("../../../../examples/catalog/scripts/web.sh"),
    ),
    (
        "web.py",
        include_str!("../../../../examples/catalog/scripts/web.py"),
    ),
    (
        "lb.sh",
        include_str!("../../../../examples/catalog/scripts/lb.sh"),
    ),
    (
        "lb.py",
        include_str!("../../../../examples/catalog/scripts/lb.py"),
    ),
    (
        "etcd.sh",
        include_str!("../../../../examples/catalog/scripts/etcd.sh"),
    ),
    (
        "redis.sh",
        include_str!("../../../../examples/catalog/scripts/redis.sh"),
    ),
];

/// Arguments of `weft provisioner`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server's provisioner API (its internal port); several servers on one database as a
    /// comma-separated list, used in turn when one cannot be reached.
    #[arg(long, env = "WEFT_SERVER", default_value = "http://127.0.0.1:55055")]
    server: String,
    /// Provisioner id [default: provisioner-<host>-<pid>].
    #[arg(long, env = "WEFT_PROVISIONER_ID")]
    id: Option<String>,
    /// Workers this provisioner runs over all tenants.
    #[arg(long, env = "WEFT_CAPACITY", default_value_t = 10)]
    capacity: u32,
    /// Where local nodes and scripts live.
    #[arg(
        long,
        env = "WEFT_PROVISIONER_DATA_DIR",
        default_value = "./.weft-provisioner"
    )]
    data_dir: PathBuf,
    /// Address of the provisioner's own API, which the server calls.
    #[arg(long, env = "WEFT_PROVISIONER_BIND", default_value = "127.0.0.1:55056")]
    bind: SocketAddr,
    /// Host the server should call back [default: the bind address].
    #[arg(long, env = "WEFT_PROVISIONER_HOST")]
    advertise_host: Option<String>,
    /// More directories of shell automator scripts (searched before the example scripts).
    #[arg(long = "scripts")]
    scripts: Vec<PathBuf>,
    /// Seconds a task may run before it is killed.
    #[arg(long, default_value_t = 1800)]
    task_timeout: u64,
    /// Provisioner token file (the server's `provisioner_token_file`): its first token is
    /// presented to the server, and the server's calls here must present one of its tokens.
    #[arg(long, env = "WEFT_PROVISIONER_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// PEM CA certificate(s) the server's certificate must chain to (an https:// --server);
    /// only these are trusted, not the system's roots.
    #[arg(long, env = "WEFT_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// PEM certificate of this provisioner, with --tls-key: presented to the server (a server
    /// with `client_ca` requires one) and served by the provisioner's own API, which the server
    /// then calls over HTTPS. It must name the --advertise-host and allow client and server use.
    #[arg(long, env = "WEFT_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "WEFT_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Run each tenant's local commands as an OS user of its own (uids from 2000000, kept in
    /// $WEFT_TENANT_UIDS, default /var/lib/weft/tenant-uids), so tenants sharing this
    /// provisioner cannot read each other's nodes or synced resources. Needs root.
    #[arg(long, env = "WEFT_TENANT_USERS")]
    tenant_users: bool,
    /// Start this many workers for --tenant without waiting for the server to assign them.
    #[arg(long, requires = "tenant")]
    workers: Option<u32>,
    /// Tenant id (internal id) for --workers.
    #[arg(long)]
    tenant: Option<String>,
}

/// The plugins weft ships: the `local` and `docker` providers and the `shell` automator. Writes the
/// example scripts into `<data_dir>/scripts`, searched after `extra_scripts`.
/// With `users`, each tenant's local commands run as its own user and the synced resources
/// directory is this process's alone (docs/security.md).
pub(crate) fn plugins(
    data_dir: &Path,
    extra_scripts: Vec<PathBuf>,
    users: Option<Arc<TenantUsers>>,
) -> anyhow::Result<Plugins> {
    // Scripts run with a node's directory as their working directory: paths must be absolute.
    let data_dir =
        &std::path::absolute(data_dir).with_context(|| format!("{}", data_dir.display()))?;
    let dir = data_dir.join("scripts");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in EXAMPLE_SCRIPTS {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    let mut dirs = extra_scripts;
    dirs.push(dir);
    let mut local = LocalProvider::new(data_dir);
    let mut shell = ShellAutomator::new(dirs).with_resources(data_dir.join("resources"));
    if let Some(users) = users {
        let resources = data_dir.join("resources");
        std::fs::create_dir_all(&resources)?;
        std::fs::set_permissions(&resources, std::fs::Permissions::from_mode(0o700))?;
        local = local.with_tenant_users(users.clone());
        shell = shell.with_tenant_users(users);
    }
    let plugins = Plugins::new()
        .provider(Arc::new(local))
        .provider(Arc::new(DockerProvider::new(data_dir)))
        .provider(Arc::new(HostPoolProvider::new())) // host pools
        .provider(Arc::new(weft_provisioner::google::GoogleProvider::new()))
        .provider(Arc::new(weft_provisioner::joyent::JoyentProvider::new()))
        .provider(Arc::new(
            weft_provisioner::openstack::NovaProvider::openstack(),
        )) // openstack
        .provider(Arc::new(
            weft_provisioner::openstack::NovaProvider::rackspace(),
        )) // rackspace
        .provider(Arc::new(weft_provisioner::aws::AwsProvider::new())); // aws
    let resources = data_dir.join("resources");
    Ok(automators(shell, &resources)
        .into_iter()
        .fold(plugins, Plugins::automator))
}

/// The automators weft ships, the shell automator as given, the others with their resources
/// under `resources`.
fn automators(shell: ShellAutomator, resources: &Path) -> [Arc<dyn Automator>; 5] {
    [
        Arc::new(shell),
        Arc::new(automators::AnsibleAutomator::new(vec![]).with_resources(resources.into())),
        Arc::new(automators::PuppetAutomator::new(vec![]).with_resources(resources.into())),
        Arc::new(automators::ChefSoloAutomator::new(vec![]).with_resources(resources.into())),
        Arc::new(automators::DockerAutomator::new()),
    ]
}

/// The automator types weft's provisioner offers, as it registers them (`weft template test`
/// checks service actions against them offline). Nothing is written.
pub(crate) fn automator_types() -> Vec<weft_model::PluginType> {
    automators(ShellAutomator::new(Vec::new()), Path::new(""))
        .iter()
        .map(|a| a.plugin_type())
        .collect()
}

/// The provisioner `weft up` runs in its own process.
pub(crate) struct Embedded {
    /// The server's provisioner port.
    pub server: SocketAddr,
    pub capacity: u32,
    /// The local CA to trust and the certificate to present and serve its API with.
    pub tls: Option<weft_client::TlsTrust>,
    /// The provisioner token file of a server that requires API keys.
    pub token_file: Option<std::path::PathBuf>,
}

/// Starts a provisioner for `weft up`: data under `<data_dir>/provisioner`, API on a free port.
pub(crate) async fn start_in_process(data_dir: &Path, embedded: Embedded) -> anyhow::Result<Agent> {
    let data = data_dir.join("provisioner");
    let scheme = if embedded.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut cfg = AgentConfig::new(&format!("{scheme}://{}", embedded.server), data.clone());
    cfg.tls = embedded.tls.unwrap_or_default();
    cfg.token_file = embedded.token_file;
    cfg.id = "weft-up".into();
    cfg.capacity = embedded.capacity;
    Agent::start(cfg, plugins(&data, Vec::new(), None)?)
        .await
        .context("starting the provisioner")
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime::runtime()?.block_on(async {
        let mut cfg = AgentConfig::new(&args.server, args.data_dir.clone());
        if let Some(id) = args.id {
            cfg.id = id;
        }
        cfg.capacity = args.capacity;
        cfg.bind = args.bind;
        cfg.advertise_host = args.advertise_host;
        cfg.task_timeout = Duration::from_secs(args.task_timeout);
        cfg.token_file = args.token_file;
        cfg.tls = weft_client::TlsTrust {
            ca_cert: args.ca_cert,
            client_cert: args.tls_cert,
            client_key: args.tls_key,
        };
        let users = if args.tenant_users {
            anyhow::ensure!(
                is_root(),
                "--tenant-users runs tenants' commands as users of their own: start the provisioner as root"
            );
            Some(Arc::new(TenantUsers::from_env()))
        } else {
            None
        };
        let agent = Agent::start(cfg, plugins(&args.data_dir, args.scripts, users)?)
            .await
            .context("starting the provisioner")?;
        if let (Some(n), Some(t)) = (args.workers, args.tenant.as_deref()) {
            agent.set_workers(t, n).await?;
        }
        println!(
            "weft provisioner {} (API http://{}, server {})",
            agent.id(),
            agent.addr(),
            args.server
        );
        super::runtime::shutdown_signal().await;
        println!("stopping: finishing running tasks");
        agent.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Whether this process runs as root.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
