//! `weft bench queue`: a load driver for the engine's task queue. Simulated workers take and finish
//! no-op tasks over HTTP (the provisioner API, as real workers do) against a real server, either
//! one started in this process (SQLite in a temp dir, or PostgreSQL at `--database-url`) or a
//! running one (`--server`). Reports tasks per second for each worker count, and the time of a
//! 1,000-node create run by instant workers.
//!
//! The work is real cluster jobs: a catalog of three independent services, so each node has 12
//! tasks (CREATE, CONFIRM, BOOTSTRAP, then INSTALL, CONFIGURE, START of each service), chained per
//! node. At most one task per node is ready at a time, so a run uses at least as many nodes as
//! workers. Figures go to BENCHMARKS.md.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use weft_server::config::RawConfig;

/// Tasks each node runs: CREATE, CONFIRM, BOOTSTRAP and three actions of three services.
const TASKS_PER_NODE: u64 = 12;
pub(super) const TENANT: &str = "bench";
pub(super) const PROVISIONER: &str = "bench";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Tasks per second through take and finish, and the time of a 1,000-node create.
    Queue(QueueArgs),
    /// One create of N nodes of the 20-service catalog: time to active, tasks/s, bytes sent per
    /// task, peak RSS.
    Create(super::bench_create::CreateArgs),
    /// Many concurrent cluster lists and status reads in a tenant with one large cluster:
    /// latency percentiles and the server's memory.
    Reads(super::bench_reads::ReadsArgs),
    /// The same clusters created and run with no webhook and with several: time to active and
    /// tasks/s side by side, deliveries and their lag.
    Webhooks(super::bench_webhooks::WebhooksArgs),
    /// N nodes made at once through one aws provider against moto behind a rate-limiting proxy
    /// with the provider's budget: times, calls, calls refused over the budget (must be none).
    Throttle(super::bench_throttle::ThrottleArgs),
}

#[derive(Debug, clap::Args)]
struct QueueArgs {
    /// External API of a running server (http://HOST:PORT). Without it a server runs in-process.
    #[arg(long, requires_all = ["internal", "database_url"])]
    server: Option<String>,
    /// Provisioner API of the running server (http://HOST:PORT), with --server.
    #[arg(long)]
    internal: Option<String>,
    /// Concurrent workers, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    workers: Vec<usize>,
    /// Tasks per run (rounded up to whole nodes of 12 tasks; at least 12 per worker).
    #[arg(long, default_value_t = 20_000)]
    tasks: u64,
    /// In-process server's database: sqlite (temp dir) or postgres (needs --database-url).
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// PostgreSQL URL for the in-process server; with --server, the running server's database
    /// (read once, for the tenant id, which the API does not show).
    #[arg(long)]
    database_url: Option<String>,
    /// Nodes of the create-time run (0 skips it).
    #[arg(long, default_value_t = 1000)]
    create_nodes: u64,
    /// Nodes per cluster of the throughput runs (0: one cluster per run). Each task's payload
    /// carries its cluster's nodes, so this sets the payload's size; more tasks then mean more
    /// clusters of this size rather than larger payloads.
    #[arg(long, default_value_t = 0)]
    cluster_nodes: u64,
    /// Workers of the create-time run.
    #[arg(long, default_value_t = 100)]
    create_workers: usize,
    /// In-process servers on the one database (postgres only), the workers spread over them in
    /// turn: several servers on one PostgreSQL against one.
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// Workers take each task with a request of its own, as Coopr's did (by default a finish takes
    /// the worker's next task, `next`, as weft's provisioner does).
    #[arg(long)]
    separate_takes: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Queue(q) => super::runtime::runtime()?.block_on(queue(q))?,
        What::Create(c) => super::runtime::runtime()?.block_on(super::bench_create::run(c))?,
        What::Reads(r) => super::runtime::runtime()?.block_on(super::bench_reads::run(r))?,
        What::Webhooks(w) => super::runtime::runtime()?.block_on(super::bench_webhooks::run(w))?,
        What::Throttle(t) => {
            return super::runtime::runtime()?.block_on(super::bench_throttle::run(t));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the server is.
pub(super) struct Server {
    pub(super) api: String,
    pub(super) internal: String,
    pub(super) database_url: String,
    /// Keeps the server's data directory.
    _dir: Option<tempfile::TempDir>,
    /// The server's own process, when it runs in one (killed when dropped).
    pub(super) process: Option<ServerProcess>,
}

/// A `weft server` child process.
pub(super) struct ServerProcess(std::process::Child);

impl ServerProcess {
    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The process's `/proc/<pid>/status` line `key` in bytes (a `kB` figure), 0 where /proc does
    /// not say.
    pub(super) fn status_bytes(&self, key: &str) -> u64 {
        proc_status_bytes(&format!("/proc/{}/status", self.0.id()), key)
    }

    /// CPU seconds (user, system) the process has used, from `/proc/<pid>/stat`.
    pub(super) fn cpu_seconds(&self) -> (f64, f64) {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces), from field 3 on.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
        (tick(11), tick(12))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `/proc/.../status` line `key` (a `kB` figure) in bytes; 0 where the file does not say.
pub(super) fn proc_status_bytes(path: &str, key: &str) -> u64 {
    let status = std::fs::read_to_string(path).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `--servers` servers in this process, all on the one database.
async fn start_in_process(q: &QueueArgs) -> anyhow::Result<Vec<Server>> {
    if q.servers > 1 && q.database != "postgres" {
        bail!("--servers {} needs --database postgres", q.servers);
    }
    let mut servers = Vec::new();
    for _ in 0..q.servers.max(1) {
        servers.push(start_server(&q.database, q.database_url.as_deref()).await?);
    }
    Ok(servers)
}

/// A server in this process on `database` (sqlite in a temp dir, or postgres at `database_url`).
pub(super) async fn start_server(
    database: &str,
    database_url: Option<&str>,
) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let database_url = database_at(database, database_url, &dir)?;
    let settings = RawConfig {
        data_dir: Some(dir.path().to_path_buf()),
        database: Some(database_url.clone()),
        port: Some(0),
        internal_port: Some(0),
        // Benchmarks go past the default limit of 10,000 nodes.
        max_cluster_size: Some(weft_model::LARGEST_CLUSTER),
        ..Default::default()
    }
    .resolve()?;
    let app = weft_server::build(settings).await?;
    let bound = weft_server::bind(app).await?;
    let api = format!("http://{}", bound.external_addr()?);
    let internal = format!("http://{}", bound.internal_addr()?);
    tokio::spawn(async move {
        if let Err(e) = bound.run().await {
            eprintln!("server: {e}");
        }
    });
    Ok(Server {
        api,
        internal,
        database_url,
        _dir: Some(dir),
        process: None,
    })
}

/// The database URL of a bench server: SQLite in `dir`, or PostgreSQL at `url`.
fn database_at(
    database: &str,
    url: Option<&str>,
    dir: &tempfile::TempDir,
) -> anyhow::Result<String> {
    Ok(match database {
        "sqlite" => format!("sqlite://{}", dir.path().join("weft.db").display()),
        "postgres" => url
            .map(str::to_string)
            .ok_or_else(|| anyhow!("--database postgres needs --database-url"))?,
        other => bail!("--database {other}: expected sqlite or postgres"),
    })
}

/// A server in a `weft server` process of its own on `database`, so that its memory and CPU are
/// measured apart from the load driver's. Returns once it answers `/status`.
pub(super) async fn spawn_server(
    database: &str,
    database_url: Option<&str>,
) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let database_url = database_at(database, database_url, &dir)?;
    let (process, api, internal) = spawn_at(dir.path(), &database_url).await?;
    Ok(Server {
        api,
        internal,
        database_url,
        _dir: Some(dir),
        process: Some(process),
    })
}

/// Stops the server's process and starts a new one on the same data, so that what is measured
/// next (its memory) starts from a fresh process.
pub(super) async fn restart(server: &mut Server) -> anyhow::Result<()> {
    let dir = server
        ._dir
        .as_ref()
        .ok_or_else(|| anyhow!("only a server this bench started can be restarted"))?
        .path()
        .to_path_buf();
    server.process = None;
    let (process, api, internal) = spawn_at(&dir, &server.database_url).await?;
    (server.process, server.api, server.internal) = (Some(process), api, internal);
    Ok(())
}

/// `weft server` on `dir` and `database_url`, on free ports: the process and its two base URLs.
// The benchmark starts the weft server it measures (clippy.toml).
#[allow(clippy::disallowed_methods)]
async fn spawn_at(
    dir: &std::path::Path,
    database_url: &str,
) -> anyhow::Result<(ServerProcess, String, String)> {
    let free_port = || -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (port, internal_port) = (free_port()?, free_port()?);
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("server")
        .arg("--data-dir")
        .arg(dir)
        .args(["--database", database_url])
        .args(["--port", &port.to_string()])
        .args(["--internal-port", &internal_port.to_string()])
        // Benchmarks go past the default limit of 10,000 nodes.
        .args([
            "--max-cluster-size",
            &weft_model::LARGEST_CLUSTER.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .spawn()
        .context("starting weft server")?;
    let process = ServerProcess(child);
    let api = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    // Polled: the child says nothing else when it is ready.
    while http.get(format!("{api}/status")).send().await.is_err() {
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("weft server did not answer on {api} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((process, api, format!("http://127.0.0.1:{internal_port}")))
}

async fn queue(q: QueueArgs) -> anyhow::Result<()> {
    let servers = match &q.server {
        Some(api) => vec![Server {
            api: api.trim_end_matches('/').to_string(),
            internal: q.internal.clone().expect("clap requires it"),
            database_url: q.database_url.clone().expect("clap requires it"),
            _dir: None,
            process: None,
        }],
        None => start_in_process(&q).await?,
    };
    let server = &servers[0];
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(2000)
        .build()?;
    let tenant_id = setup(&http, server).await?;
    refuse_leftovers(server, &tenant_id).await?;
    keep_registered(&http, server, &tenant_id).await;
    let backend = if server.database_url.starts_with("sqlite") {
        "sqlite"
    } else {
        "postgres"
    };
    println!(
        "weft bench queue: {backend}, {} server(s) {}, {} cores",
        servers.len(),
        if q.server.is_some() {
            "external"
        } else {
            "in-process"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| backend | workers | nodes | tasks | seconds | tasks/s | finishes answered 500 |");
    println!("|---|---|---|---|---|---|---|");
    let run = QueueRun {
        http: &http,
        servers: &servers,
        tenant_id: &tenant_id,
        backend,
        q: &q,
    };
    for (i, &workers) in q.workers.iter().enumerate() {
        run.row(i, workers).await?;
    }
    if q.create_nodes > 0 {
        run.big_create().await?;
    }
    Ok(())
}

/// What every measurement of `weft bench queue` runs against.
struct QueueRun<'a> {
    http: &'a reqwest::Client,
    servers: &'a [Server],
    tenant_id: &'a str,
    backend: &'a str,
    q: &'a QueueArgs,
}

impl QueueRun<'_> {
    /// One row of the table: clusters with enough tasks for `workers` (the `i`th count), all
    /// driven to the end.
    async fn row(&self, i: usize, workers: usize) -> anyhow::Result<()> {
        let (http, server, q) = (self.http, &self.servers[0], self.q);
        let nodes = q.tasks.div_ceil(TASKS_PER_NODE).max(workers as u64).max(1);
        let per_cluster = if q.cluster_nodes == 0 {
            nodes
        } else {
            q.cluster_nodes
        };
        let mut clusters = Vec::new();
        let mut total = 0;
        for c in 0..nodes.div_ceil(per_cluster) {
            let size = per_cluster.min(nodes - c * per_cluster);
            let cluster = create(http, server, &format!("q{i}-{c}"), size).await?;
            total += plan_size(http, server, &cluster).await?;
            clusters.push(cluster);
        }
        let t0 = Instant::now();
        let Driven { done, errors, .. } = self.drive(workers, total).await?;
        let secs = t0.elapsed().as_secs_f64();
        for cluster in &clusters {
            check_active(http, server, cluster).await?;
        }
        println!(
            "| {} | {workers} | {nodes} | {done} | {secs:.2} | {:.0} | {errors} |",
            self.backend,
            done as f64 / secs
        );
        Ok(())
    }

    /// One create of `--create-nodes` nodes, timed from the POST until the cluster is active.
    async fn big_create(&self) -> anyhow::Result<()> {
        let (http, server, q) = (self.http, &self.servers[0], self.q);
        let t0 = Instant::now();
        let cluster = create(http, server, "big", q.create_nodes).await?;
        let posted = t0.elapsed().as_secs_f64();
        let total = plan_size(http, server, &cluster).await?;
        let Driven { done, errors, .. } = self.drive(q.create_workers, total).await?;
        check_active(http, server, &cluster).await?;
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "\ncreate of {} nodes ({done} tasks) with {} instant workers on {}: \
             POST answered in {posted:.2} s, cluster active after {secs:.2} s \
             ({errors} finishes answered 500)",
            q.create_nodes, q.create_workers, self.backend
        );
        Ok(())
    }

    /// Runs `workers` instant workers until `total` tasks are done.
    async fn drive(&self, workers: usize, total: u64) -> anyhow::Result<Driven> {
        drive_on(
            self.http,
            self.servers,
            self.tenant_id,
            workers,
            total,
            true,
            !self.q.separate_takes,
        )
        .await
    }
}

/// Refuses a database with queued or leased tasks of the bench's tenant: a run counts the tasks
/// it drives, so an interrupted run's tasks would be taken too (or failed over by the janitor) and
/// the run would never reach its count.
async fn refuse_leftovers(server: &Server, tenant_id: &str) -> anyhow::Result<()> {
    let store = weft_store::open(&server.database_url).await?;
    if let Some((queued, leased)) = store.queue_counts().await?.get(tenant_id) {
        bail!(
            "the database holds {queued} queued and {leased} leased tasks of an earlier run; \
             start from a fresh database"
        );
    }
    Ok(())
}

/// Keeps the bench's provisioner registered (the janitor drops one that stops heartbeating),
/// holding the workers of tenant `tenant_id` (a provisioner takes only tasks of tenants it holds
/// workers of): the first heartbeat is sent before this returns.
pub(super) async fn keep_registered(http: &reqwest::Client, server: &Server, tenant_id: &str) {
    let (http, url) = (
        http.clone(),
        format!(
            "{}/v2/provisioners/{PROVISIONER}/heartbeat",
            server.internal
        ),
    );
    let body = json!({"usage": {tenant_id: 1}}).to_string();
    let _ = http.post(&url).body(body.clone()).send().await;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = http.post(&url).body(body.clone()).send().await;
        }
    });
}

pub(super) async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    who: Option<(&str, &str)>,
    body: Option<Value>,
) -> anyhow::Result<String> {
    let mut b = http.request(method.clone(), url);
    if let Some((user, tenant)) = who {
        b = b
            .header("Coopr-UserID", user)
            .header("Coopr-TenantID", tenant);
    }
    if let Some(v) = body {
        b = b.body(v.to_string());
    }
    let r = b.send().await.with_context(|| format!("{method} {url}"))?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() {
        bail!("{method} {url}: {status}: {text}");
    }
    Ok(text)
}

pub(super) const SA: Option<(&str, &str)> = Some(("admin", "superadmin"));
pub(super) const ADMIN: Option<(&str, &str)> = Some(("admin", TENANT));

/// Tenant, provisioner, plugin types and a catalog of three independent services. Returns the
/// tenant id.
pub(super) async fn setup(http: &reqwest::Client, s: &Server) -> anyhow::Result<String> {
    use reqwest::Method;
    let (api, int) = (&s.api, &s.internal);
    let store = weft_store::open(&s.database_url).await?;
    if store.tenant_by_name(TENANT).await?.is_none() {
        let t = json!({"tenant": {"name": TENANT, "workers": 0}});
        send(
            http,
            Method::POST,
            &format!("{api}/v2/tenants"),
            SA,
            Some(t),
        )
        .await?;
    }
    let p = json!({"id": PROVISIONER, "host": "127.0.0.1", "port": 1, "capacityTotal": 10000});
    let url = format!("{int}/v2/provisioners/{PROVISIONER}");
    send(http, Method::PUT, &url, None, Some(p)).await?;
    for (kind, name) in [("providertypes", "local"), ("automatortypes", "shell")] {
        let url = format!("{int}/v2/plugins/{kind}/{name}");
        send(http, Method::PUT, &url, None, Some(json!({"name": name}))).await?;
    }
    let action = |a: &str| json!({"type": "shell", "fields": {"script": format!("{a}.sh")}});
    let service = |n: &str| {
        json!({"name": n, "provisioner": {"actions": {
        "install": action("install"), "configure": action("configure"), "start": action("start")}}})
    };
    let entities = [
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "host", "providermap": {"local": {"image": "img", "sshuser": "weft"}}}),
        ),
        ("services", service("s1")),
        ("services", service("s2")),
        ("services", service("s3")),
        (
            "clustertemplates",
            json!({"name": "bench",
                   "defaults": {"services": ["s1", "s2", "s3"], "provider": "local"},
                   "constraints": {"size": {"min": 1, "max": 10000}}}),
        ),
    ];
    for (kind, body) in entities {
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let url = format!("{api}/v2/{kind}/{name}");
        send(http, Method::PUT, &url, ADMIN, Some(body)).await?;
    }
    let id = store
        .tenant_by_name(TENANT)
        .await?
        .ok_or_else(|| anyhow!("tenant {TENANT} missing"))?
        .id;
    Ok(id)
}

pub(super) async fn create(
    http: &reqwest::Client,
    s: &Server,
    name: &str,
    nodes: u64,
) -> anyhow::Result<String> {
    let name = format!("{name}-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"name": name, "clusterTemplate": "bench", "numMachines": nodes});
    let url = format!("{}/v2/clusters", s.api);
    let text = send(http, reqwest::Method::POST, &url, ADMIN, Some(body)).await?;
    let v: Value = serde_json::from_str(&text)?;
    v["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no id in {text}"))
}

/// Tasks in the cluster's plan.
pub(super) async fn plan_size(
    http: &reqwest::Client,
    s: &Server,
    cluster: &str,
) -> anyhow::Result<u64> {
    let url = format!("{}/v2/clusters/{cluster}/plans", s.api);
    let text = send(http, reqwest::Method::GET, &url, ADMIN, None).await?;
    let plans: Vec<Value> = serde_json::from_str(&text)?;
    let plan = plans.first().ok_or_else(|| anyhow!("no plan"))?;
    Ok(plan["stages"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(Value::as_array)
                .map(Vec::len)
                .sum::<usize>()
        })
        .unwrap_or(0) as u64)
}

pub(super) async fn check_active(
    http: &reqwest::Client,
    s: &Server,
    cluster: &str,
) -> anyhow::Result<()> {
    let url = format!("{}/v2/clusters/{cluster}/status", s.api);
    let text = send(http, reqwest::Method::GET, &url, ADMIN, None).await?;
    let v: Value = serde_json::from_str(&text)?;
    if v["status"] != weft_model::ClusterStatus::Active.as_str() {
        bail!("cluster {cluster} is not active: {text}");
    }
    Ok(())
}

/// How much of a payload's head holds the ids a no-op worker needs.
const HEAD: usize = 512;

/// The fields of a task payload a no-op worker reads.
#[derive(serde::Deserialize)]
struct Taken {
    #[serde(rename = "taskId")]
    task_id: String,
    #[serde(rename = "taskName")]
    task_name: String,
    #[serde(rename = "clusterId", default)]
    cluster_id: String,
    /// The revision of the cluster's `nodes` map the task needs (the workers announce
    /// `nodesByRevision`, as weft's provisioner does).
    #[serde(rename = "nodesRevision", default)]
    nodes_revision: Option<String>,
}

impl Taken {
    /// The server writes `taskId`, `jobId`, `clusterId`, `taskName` and `nodeId` first and the
    /// (large) `config` last: a load driver reads the two it needs from the head of the text rather
    /// than keeping and scanning the whole payload, which on this machine would take CPU from the
    /// server it measures. Falls back to parsing everything if the head does not hold them.
    async fn receive(mut r: reqwest::Response, bytes: &AtomicU64) -> anyhow::Result<Taken> {
        let mut text = Vec::new();
        while let Some(chunk) = r.chunk().await? {
            bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            text.extend_from_slice(&chunk);
            if text.len() >= HEAD {
                if let Some(task) = Taken::from_head(&text) {
                    // The rest is read (the connection is reused) but not kept.
                    while let Some(rest) = r.chunk().await? {
                        bytes.fetch_add(rest.len() as u64, Ordering::Relaxed);
                    }
                    return Ok(task);
                }
            }
        }
        match Taken::from_head(&text) {
            Some(task) => Ok(task),
            None => Ok(serde_json::from_slice(&text)?),
        }
    }

    fn from_head(text: &[u8]) -> Option<Taken> {
        let head = &text[..text.len().min(HEAD)];
        // The revision, when there is one, comes before `config`.
        let config = find(head, "\"config\":").unwrap_or(head.len());
        Some(Taken {
            task_id: field(head, "taskId")?,
            task_name: field(head, "taskName")?,
            cluster_id: field(head, "clusterId")?,
            nodes_revision: field(&head[..config], "nodesRevision"),
        })
    }
}

fn find(text: &[u8], pat: &str) -> Option<usize> {
    text.windows(pat.len()).position(|w| w == pat.as_bytes())
}

/// The string value of `"key":"..."` in `text` (no escapes), if it is there whole.
fn field(text: &[u8], key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let at = find(text, &pat)? + pat.len();
    let len = text[at..].iter().position(|b| *b == b'"' || *b == b'\\')?;
    (text[at + len] == b'"').then(|| String::from_utf8_lossy(&text[at..at + len]).into_owned())
}

/// What the workers of one [`drive`] hold of each cluster's `nodes` map, as one provisioner does
/// (weft_client's `NodesCache`): its revision only, since no-op workers never read the map; the
/// bytes of every fetch are counted.
#[derive(Default)]
struct HeldMaps {
    revisions: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    bytes: AtomicU64,
    fetches: AtomicU64,
}

impl HeldMaps {
    fn covers(&self, cluster: &str, wanted: &str) -> Option<String> {
        let held = self.revisions.lock().expect("lock");
        let r = held.get(cluster)?;
        weft_model::nodes_revision_covers(r, wanted).then(|| r.clone())
    }

    /// Brings the cluster's map to `wanted` or newer: the changes since the revision held.
    async fn ensure(
        &self,
        http: &reqwest::Client,
        url: &str,
        ids: &Value,
        cluster: &str,
        wanted: &str,
    ) -> anyhow::Result<()> {
        if self.covers(cluster, wanted).is_some() {
            return Ok(());
        }
        let _one = self.fetching.lock().await;
        if self.covers(cluster, wanted).is_some() {
            return Ok(());
        }
        let since = self.revisions.lock().expect("lock").get(cluster).cloned();
        let body = json!({"provisionerId": ids["provisionerId"], "tenantId": ids["tenantId"],
            "clusterId": cluster, "since": since});
        let mut r = http.post(url).body(body.to_string()).send().await?;
        if r.status() != 200 {
            bail!("nodes: {}: {}", r.status(), r.text().await?);
        }
        let mut head = Vec::new();
        while let Some(chunk) = r.chunk().await? {
            self.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if head.len() < HEAD {
                head.extend_from_slice(&chunk[..chunk.len().min(HEAD)]);
            }
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let revision =
            field(&head, "revision").ok_or_else(|| anyhow!("nodes: no revision in the answer"))?;
        self.revisions
            .lock()
            .expect("lock")
            .insert(cluster.to_string(), revision);
        Ok(())
    }
}

/// What a run of [`drive`] did.
pub(super) struct Driven {
    /// Tasks finished.
    pub(super) done: u64,
    /// Finishes answered 500 (and retried).
    pub(super) errors: u64,
    /// Bytes of task payloads the server sent.
    pub(super) payload_bytes: u64,
    /// Bytes of `nodes` maps the server sent (`POST /v2/tasks/nodes`), and how many answers.
    pub(super) nodes_bytes: u64,
    pub(super) nodes_fetches: u64,
    /// Takes answered 204 (nothing ready for the worker).
    pub(super) empty_takes: u64,
    /// Mean time from sending a take (that got a task) or a finish to its whole answer, in ms (a
    /// finish that takes the next task included).
    pub(super) take_ms: f64,
    pub(super) finish_ms: f64,
}

/// Runs `workers` workers until `total` tasks have been finished. With `by_revision` they announce
/// `nodesByRevision` and fetch each cluster's `nodes` map when a task names a newer revision, as
/// weft's provisioner does; without it they get the map in every payload, as Coopr's did. With
/// `one_request` each finish takes the worker's next task (`next`), as weft's provisioner does.
pub(super) async fn drive(
    http: &reqwest::Client,
    s: &Server,
    tenant_id: &str,
    workers: usize,
    total: u64,
    by_revision: bool,
    one_request: bool,
) -> anyhow::Result<Driven> {
    drive_on(
        http,
        std::slice::from_ref(s),
        tenant_id,
        workers,
        total,
        by_revision,
        one_request,
    )
    .await
}

/// The capabilities a worker announces when it takes.
fn take_body_capabilities(by_revision: bool) -> Vec<&'static str> {
    if by_revision {
        vec![weft_model::NODES_BY_REVISION]
    } else {
        Vec::new()
    }
}

/// `micros` over `n` events, in milliseconds.
fn mean_ms(micros: &AtomicU64, n: u64) -> f64 {
    micros.load(Ordering::Relaxed) as f64 / 1000.0 / n.max(1) as f64
}

/// One server's routes for the instant workers, and the node maps held from it.
#[derive(Clone)]
struct ServerUrls {
    take_url: Arc<str>,
    finish_url: Arc<str>,
    nodes_url: Arc<str>,
    maps: Arc<HeldMaps>,
}

impl ServerUrls {
    fn of(s: &Server) -> Self {
        ServerUrls {
            take_url: format!("{}/v2/tasks/take", s.internal).into(),
            finish_url: format!("{}/v2/tasks/finish", s.internal).into(),
            nodes_url: format!("{}/v2/tasks/nodes", s.internal).into(),
            maps: Arc::new(HeldMaps::default()),
        }
    }
}

/// [`drive`] with the workers spread over `servers` in turn (worker `w` on server `w % n`).
async fn drive_on(
    http: &reqwest::Client,
    servers: &[Server],
    tenant_id: &str,
    workers: usize,
    total: u64,
    by_revision: bool,
    one_request: bool,
) -> anyhow::Result<Driven> {
    let shared = Arc::new(Shared {
        addresses: AtomicU64::new(1),
        ..Default::default()
    });
    // Per server: its routes, and the maps held from it (revisions are a server process's own).
    let urls: Vec<ServerUrls> = servers.iter().map(ServerUrls::of).collect();
    let mut handles = Vec::new();
    for w in 0..workers {
        let worker = InstantWorker {
            http: http.clone(),
            shared: shared.clone(),
            urls: urls[w % urls.len()].clone(),
            ids: json!({"workerId": format!("w{w}"), "provisionerId": PROVISIONER, "tenantId": tenant_id}),
            by_revision,
            one_request,
            total,
        };
        handles.push(tokio::spawn(worker.run()));
    }
    for h in handles {
        h.await??;
    }
    let s = &shared;
    Ok(Driven {
        done: s.done.load(Ordering::Relaxed),
        errors: s.errors.load(Ordering::Relaxed),
        empty_takes: s.empty.load(Ordering::Relaxed),
        take_ms: mean_ms(&s.waited[0], s.waited[2].load(Ordering::Relaxed)),
        finish_ms: mean_ms(&s.waited[1], s.done.load(Ordering::Relaxed)),
        payload_bytes: s.bytes.load(Ordering::Relaxed),
        nodes_bytes: urls
            .iter()
            .map(|u| u.maps.bytes.load(Ordering::Relaxed))
            .sum(),
        nodes_fetches: urls
            .iter()
            .map(|u| u.maps.fetches.load(Ordering::Relaxed))
            .sum(),
    })
}

/// What the instant workers of one drive share: counters, the next address, the stop flag.
#[derive(Default)]
struct Shared {
    bytes: AtomicU64,
    done: AtomicU64,
    errors: AtomicU64,
    empty: AtomicU64,
    /// Microseconds spent in takes that got a task and in finishes, and how many such takes.
    waited: [AtomicU64; 3],
    stop: AtomicBool,
    addresses: AtomicU64,
}

/// One instant worker: takes a task, finishes it at once, until `total` tasks are done.
struct InstantWorker {
    http: reqwest::Client,
    shared: Arc<Shared>,
    urls: ServerUrls,
    ids: Value,
    by_revision: bool,
    one_request: bool,
    total: u64,
}

impl InstantWorker {
    async fn run(self) -> anyhow::Result<()> {
        let mut take_body = self.ids.clone();
        if self.by_revision {
            take_body["capabilities"] = json!([weft_model::NODES_BY_REVISION]);
        }
        let take_body = take_body.to_string();
        // The task the last finish took (`next`), if it took one.
        let mut held: Option<Taken> = None;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let task = match held.take() {
                Some(task) => task,
                None => match self.take(&take_body).await? {
                    Some(task) => task,
                    None => continue,
                },
            };
            if let Some(wanted) = &task.nodes_revision {
                let urls = &self.urls;
                urls.maps
                    .ensure(
                        &self.http,
                        &urls.nodes_url,
                        &self.ids,
                        &task.cluster_id,
                        wanted,
                    )
                    .await?;
            }
            held = self.finish(&task).await?;
            if self.shared.done.fetch_add(1, Ordering::Relaxed) + 1 >= self.total {
                self.shared.stop.store(true, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Takes a task; `None`, after a short sleep, when none is ready.
    async fn take(&self, take_body: &str) -> anyhow::Result<Option<Taken>> {
        let s = &self.shared;
        let sent = Instant::now();
        let r = self
            .http
            .post(&*self.urls.take_url)
            .body(take_body.to_string())
            .send()
            .await?;
        let status = r.status().as_u16();
        if status == 204 {
            s.empty.fetch_add(1, Ordering::Relaxed);
            // Nothing ready: this node's next task waits on another worker.
            tokio::time::sleep(Duration::from_millis(2)).await;
            return Ok(None);
        }
        if status != 200 {
            bail!("take: {status}: {}", r.text().await?);
        }
        let task = Taken::receive(r, &s.bytes).await?;
        s.waited[0].fetch_add(sent.elapsed().as_micros() as u64, Ordering::Relaxed);
        s.waited[2].fetch_add(1, Ordering::Relaxed);
        Ok(Some(task))
    }

    /// Finishes `task` as a success (a CONFIRM with an address of its own), retrying a finish
    /// answered 500 up to 20 times; the next task when the finish took one.
    async fn finish(&self, task: &Taken) -> anyhow::Result<Option<Taken>> {
        let s = &self.shared;
        let mut body = self.ids.clone();
        body["taskId"] = json!(task.task_id);
        body["status"] = json!(0);
        if task.task_name == "CONFIRM" {
            // An address of its own per node.
            let n = s.addresses.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
            body["ipaddresses"] = json!({"access_v4": ip, "bind_v4": ip});
        }
        if self.one_request {
            body["next"] = json!({"capabilities": take_body_capabilities(self.by_revision)});
        }
        let body = body.to_string();
        let mut held = None;
        let mut tries = 0;
        loop {
            let sent = Instant::now();
            let r = self
                .http
                .post(&*self.urls.finish_url)
                .body(body.clone())
                .send()
                .await?;
            let status = r.status().as_u16();
            if status == 200 && self.one_request {
                held = Some(Taken::receive(r, &s.bytes).await?);
            } else if status != 204 || !self.one_request {
                let text = r.text().await?;
                match status {
                    200 => {}
                    // A real worker retries a finish the server could not apply.
                    500 if tries < 20 => {
                        tries += 1;
                        s.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    _ => bail!("finish: {status}: {text}"),
                }
            }
            s.waited[1].fetch_add(sent.elapsed().as_micros() as u64, Ordering::Relaxed);
            return Ok(held);
        }
    }
}
