//! `weft bench throttle`: N nodes made at once through one `aws` provider against moto behind a
//! rate-limiting proxy ([`super::bench_limiter`]) whose budget is the provider's own
//! (`requests_per_second`, `request_burst`). CREATE of every node at once (N concurrent tasks on
//! the one provider object, as N workers of one provisioner run them), then CONFIRM of every node,
//! then DELETE of every node. Reports the time until all were created, confirmed and deleted, the
//! calls the proxy saw, those it refused as over the budget, and the most calls in any one second.
//! It fails (exit status 1) when a call was refused, a node's task failed, a node has not exactly
//! one instance (DescribeInstances by the `weft:node` tag, sent to moto past the proxy), or an
//! instance is left live after DELETE. With `-o json` the last line is one JSON object.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};
use weft_provisioner::aws::client::{QueryClient, EC2_VERSION};
use weft_provisioner::aws::ec2::Ec2;
use weft_provisioner::aws::sigv4::Credentials;
use weft_provisioner::aws::{AwsProvider, TAG_NODE};
use weft_provisioner::task::{Action, Task};
use weft_provisioner::{PluginError, Provider, TaskOutput};

use super::bench_limiter::{Counts, Proxy};

const REGION: &str = "us-east-1";
/// How long each node's task may run.
const TASK_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Debug, clap::Args)]
pub(crate) struct ThrottleArgs {
    /// Nodes made at once.
    #[arg(long, default_value_t = 200)]
    nodes: usize,
    /// The budget, calls a second: the proxy's, and the provider's `requests_per_second`.
    #[arg(long, default_value_t = weft_provisioner::throttle::DEFAULT_RATE)]
    rate: f64,
    /// Calls at once after a quiet spell: the proxy's, and the provider's `request_burst`.
    #[arg(long, default_value_t = weft_provisioner::throttle::DEFAULT_BURST)]
    burst: f64,
    /// moto's `moto_server` (default: ~/.cache/weft/moto/bin/moto_server, the venv `.ci/setup`
    /// makes).
    #[arg(long, env = "WEFT_MOTO_SERVER")]
    moto: Option<PathBuf>,
    /// table (default) or json (the last line is one object).
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
}

/// A `moto_server` child process, killed when dropped.
struct Moto {
    child: std::process::Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `moto_server` on a free loopback port, with AMI validation (RunInstances refuses an AMI it
/// does not know, as EC2 does), once it accepts connections.
// The benchmark starts the emulator it measures against (clippy.toml).
#[allow(clippy::disallowed_methods)]
async fn start_moto(bin: &Path) -> anyhow::Result<Moto> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = std::process::Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("MOTO_ENABLE_AMI_VALIDATION", "true")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}/"),
    };
    let t0 = Instant::now();
    // Polled: moto says nothing else when it is ready.
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if t0.elapsed() > Duration::from_secs(60) {
            bail!(
                "{} did not listen on port {port} within 60 s",
                bin.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(moto)
}

/// The moto server of `--moto`, else of the venv under the home directory.
fn moto_path(a: &ThrottleArgs) -> anyhow::Result<PathBuf> {
    let path = match &a.moto {
        Some(p) => p.clone(),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
            .join(".cache/weft/moto/bin/moto_server"),
    };
    if !path.is_file() {
        bail!(
            "no moto server at {} (python3 -m venv ~/.cache/weft/moto && \
             ~/.cache/weft/moto/bin/pip install 'moto[server,ec2]', or --moto PATH)",
            path.display()
        );
    }
    Ok(path)
}

/// moto's credentials (it checks no signature unless told to).
fn credentials() -> Credentials {
    Credentials {
        access_key_id: "AKIDWEFTBENCH".into(),
        secret_access_key: "weft-bench-secret".into(),
        session_token: None,
    }
}

/// An EC2 client straight to moto (past the proxy, so not counted), without a budget.
fn direct(moto: &Moto) -> anyhow::Result<Ec2> {
    let q = QueryClient::new(
        reqwest::Client::new(),
        &moto.endpoint,
        REGION,
        "ec2",
        EC2_VERSION,
        credentials(),
    )
    .map_err(anyhow::Error::msg)?;
    Ok(Ec2 { q })
}

/// The id of an AMI moto ships.
async fn some_ami(ec2: &Ec2) -> anyhow::Result<String> {
    let images = ec2.call("DescribeImages", &[]).await?;
    let mut ids = Vec::new();
    images.find_all("imageId", &mut ids);
    Ok(ids
        .first()
        .context("moto lists no AMI")?
        .text
        .trim()
        .to_string())
}

/// The provider's fields: the proxy as the endpoint, the cluster key imported, and the budget.
fn fields(a: &ThrottleArgs, endpoint: &str, ami: &str) -> Map<String, Value> {
    let creds = credentials();
    let v = json!({"region": REGION, "access_key_id": creds.access_key_id,
        "secret_access_key": creds.secret_access_key, "endpoint": endpoint,
        "instance_type": "t3.micro", "ami": ami, "import_key": "true",
        "sshkeyseed": "weft bench throttle seed",
        "requests_per_second": a.rate.to_string(), "request_burst": a.burst.to_string()});
    v.as_object().cloned().unwrap_or_default()
}

/// The task `action` of `node`: the provider and what earlier tasks of the node answered.
fn task(
    action: Action,
    node: &str,
    fields: &Map<String, Value>,
    results: &Map<String, Value>,
) -> Task {
    let mut config = results.clone();
    config.insert(
        "provider".into(),
        json!({"name": "aws", "providertype": "aws", "provisioner": fields}),
    );
    config.insert("hostname".into(), json!(format!("{node}.bench.example")));
    let raw = json!({"taskId": format!("{node}-{}", action.lower()), "jobId": "bench",
        "clusterId": "bench", "taskName": action.lower().to_uppercase(), "nodeId": node,
        "config": config});
    let mut t = Task::from_json(raw, TASK_TIMEOUT).expect("a well-formed task");
    t.tenant_id = "bench".into();
    t
}

/// Runs `action` for every node at once on the one provider, each in a task of its own; answers
/// each node's outcome, in the nodes' order.
async fn all_at_once(
    p: &Arc<AwsProvider>,
    action: Action,
    fields: &Map<String, Value>,
    results: &[Map<String, Value>],
) -> Vec<Result<TaskOutput, PluginError>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, r) in results.iter().enumerate() {
        let t = task(action, &node_name(i), fields, r);
        let p = Arc::clone(p);
        set.spawn(async move {
            let out = match t.action {
                Action::Create => p.create(&t).await,
                Action::Confirm => p.confirm(&t).await,
                _ => p.delete(&t).await,
            };
            (i, out)
        });
    }
    let mut outs: Vec<Option<Result<TaskOutput, PluginError>>> = vec![None; results.len()];
    while let Some(joined) = set.join_next().await {
        if let Ok((i, out)) = joined {
            outs[i] = Some(out);
        }
    }
    outs.into_iter()
        .map(|o| o.unwrap_or_else(|| Err(PluginError::fatal("the node's task panicked"))))
        .collect()
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i:04}")
}

/// One phase's figures: seconds from the start until every node's task ended, the proxy's
/// counts then, and the nodes whose task failed (node, error).
struct Phase {
    seconds: f64,
    counts: Counts,
    failed: Vec<(String, String)>,
}

/// Runs one phase and folds each node's answer into its results.
async fn phase(
    p: &Arc<AwsProvider>,
    action: Action,
    fields: &Map<String, Value>,
    results: &mut [Map<String, Value>],
    proxy: &Proxy,
    t0: Instant,
) -> Phase {
    let outs = all_at_once(p, action, fields, results).await;
    let seconds = t0.elapsed().as_secs_f64();
    let mut failed = Vec::new();
    for (i, out) in outs.into_iter().enumerate() {
        match out {
            Ok(o) => results[i].extend(o.result),
            Err(e) => failed.push((node_name(i), e.to_string())),
        }
    }
    Phase {
        seconds,
        counts: proxy.counts(),
        failed,
    }
}

/// Instances per `weft:node` tag value, all states: (how many, how many live).
async fn instances_by_node(ec2: &Ec2) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    let mut by = BTreeMap::<String, (u64, u64)>::new();
    for i in ec2.instances_with_tag_key(TAG_NODE, &[]).await? {
        let e = by
            .entry(i.tags.get(TAG_NODE).cloned().unwrap_or_default())
            .or_default();
        e.0 += 1;
        e.1 += u64::from(i.is_live());
    }
    Ok(by)
}

/// What the instances say of the run.
struct Instances {
    /// Nodes with exactly one instance after CONFIRM.
    one_each: usize,
    /// Nodes with none or more than one (node, count).
    not_one: Vec<(String, u64)>,
    /// Instances still live after DELETE.
    live_after_delete: u64,
}

/// The whole run: three phases and the instances' check.
struct Run {
    create: Phase,
    confirm: Phase,
    delete: Phase,
    instances: Instances,
}

impl Run {
    fn passed(&self) -> bool {
        let p = [&self.create, &self.confirm, &self.delete];
        self.delete.counts.refused == 0
            && p.iter().all(|p| p.failed.is_empty())
            && self.instances.not_one.is_empty()
            && self.instances.live_after_delete == 0
    }
}

/// CREATE, CONFIRM and DELETE of `a.nodes` nodes through the proxy, and the instances checked
/// after CONFIRM and after DELETE.
async fn measure(a: &ThrottleArgs, moto: &Moto) -> anyhow::Result<Run> {
    let ec2 = direct(moto)?;
    let ami = some_ami(&ec2).await?;
    let proxy = Proxy::start(&moto.endpoint, a.rate, a.burst).await?;
    let fields = fields(a, &proxy.endpoint, &ami);
    let p = Arc::new(AwsProvider::new());
    let mut results = vec![Map::new(); a.nodes];
    let t0 = Instant::now();
    let create = phase(&p, Action::Create, &fields, &mut results, &proxy, t0).await;
    let confirm = phase(&p, Action::Confirm, &fields, &mut results, &proxy, t0).await;
    let made = instances_by_node(&ec2).await?;
    let count = |i: usize| made.get(&node_name(i)).map_or(0, |c| c.0);
    let not_one: Vec<(String, u64)> = (0..a.nodes)
        .filter(|&i| count(i) != 1)
        .map(|i| (node_name(i), count(i)))
        .collect();
    let delete = phase(&p, Action::Delete, &fields, &mut results, &proxy, t0).await;
    let left = instances_by_node(&ec2).await?;
    Ok(Run {
        create,
        confirm,
        delete,
        instances: Instances {
            one_each: a.nodes - not_one.len(),
            not_one,
            live_after_delete: left.values().map(|c| c.1).sum(),
        },
    })
}

pub(crate) async fn run(a: ThrottleArgs) -> anyhow::Result<ExitCode> {
    if !matches!(a.output.as_str(), "table" | "json") {
        bail!("-o {}: expected table or json", a.output);
    }
    if a.nodes == 0 || !a.rate.is_finite() || a.rate <= 0.0 || !a.burst.is_finite() || a.burst < 1.0
    {
        bail!("--nodes must be at least 1, --rate above 0 and --burst at least 1");
    }
    let moto = start_moto(&moto_path(&a)?).await?;
    let run = measure(&a, &moto).await?;
    if a.output == "json" {
        println!("{}", report(&a, &run));
    } else {
        println!("{}", summary(&a, &run));
    }
    Ok(if run.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The first few failures of every phase, `ACTION node: error`.
fn failures(run: &Run) -> Vec<String> {
    [
        ("CREATE", &run.create),
        ("CONFIRM", &run.confirm),
        ("DELETE", &run.delete),
    ]
    .iter()
    .flat_map(|(name, p)| {
        p.failed
            .iter()
            .take(5)
            .map(move |(node, e)| format!("{name} {node}: {e}"))
    })
    .collect()
}

/// The run as one JSON object (`-o json`).
fn report(a: &ThrottleArgs, run: &Run) -> Value {
    let (c, f, d) = (&run.create, &run.confirm, &run.delete);
    let failed: usize = [c, f, d].iter().map(|p| p.failed.len()).sum();
    json!({
        "nodes": a.nodes,
        "requests_per_second": a.rate,
        "request_burst": a.burst,
        "created_seconds": c.seconds,
        "confirmed_seconds": f.seconds,
        "deleted_seconds": d.seconds,
        "calls": d.counts.calls,
        "calls_create": c.counts.calls,
        "calls_confirm": f.counts.calls - c.counts.calls,
        "calls_delete": d.counts.calls - f.counts.calls,
        "refused": d.counts.refused,
        "refused_create": c.counts.refused,
        "refused_confirm": f.counts.refused - c.counts.refused,
        "refused_delete": d.counts.refused - f.counts.refused,
        "refused_early_ms": d.counts.refused_early_us as f64 / 1000.0,
        "peak_calls_per_second": d.counts.peak_per_second,
        "failed": failed,
        "failures": failures(run),
        "nodes_with_one_instance": run.instances.one_each,
        "nodes_not_one_instance": run.instances.not_one,
        "live_after_delete": run.instances.live_after_delete,
        "passed": run.passed(),
    })
}

/// The run in a few sentences (`-o table`).
fn summary(a: &ThrottleArgs, run: &Run) -> String {
    let (c, f, d) = (&run.create, &run.confirm, &run.delete);
    let mut s = format!(
        "{} nodes at once through one aws provider, budget {} calls/s with a burst of {}: all \
         created after {:.1} s, confirmed after {:.1} s, deleted after {:.1} s; {} calls \
         ({} create, {} confirm, {} delete), {} refused over the budget{}, at most {} in one \
         second; {} of {} nodes with exactly one instance, {} live after DELETE: {}",
        a.nodes,
        a.rate,
        a.burst,
        c.seconds,
        f.seconds,
        d.seconds,
        d.counts.calls,
        c.counts.calls,
        f.counts.calls - c.counts.calls,
        d.counts.calls - f.counts.calls,
        d.counts.refused,
        if d.counts.refused > 0 {
            format!(
                " (the earliest {:.1} ms before its token)",
                d.counts.refused_early_us as f64 / 1000.0
            )
        } else {
            String::new()
        },
        d.counts.peak_per_second,
        run.instances.one_each,
        a.nodes,
        run.instances.live_after_delete,
        if run.passed() { "passed" } else { "FAILED" },
    );
    for line in failures(run) {
        s.push_str(&format!("\n  {line}"));
    }
    for (node, n) in run.instances.not_one.iter().take(5) {
        s.push_str(&format!("\n  {node}: {n} instances"));
    }
    s
}
