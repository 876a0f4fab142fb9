//! `weft bench create`: one create of N nodes of the planner benchmark's 20-service catalog (4
//! services on every node, 13 spread over 3 master nodes, 3 on every other node), run to `active`
//! by instant workers over HTTP against a server in this process. Reports the time to active,
//! tasks per second, the bytes of task payloads sent per task, and the server's peak RSS and CPU
//! time: the server runs in a `weft server` process of its own (`--in-process` runs it beside the
//! driver, as before session 9, and then reports the process's figures, driver included). With
//! `-o json` the last line is one JSON object.

use std::time::Instant;

use anyhow::bail;
use serde_json::{json, Value};

use super::bench::{
    check_active, drive, keep_registered, plan_size, proc_status_bytes, send, setup, spawn_server,
    start_server, Driven, ADMIN,
};

#[derive(Debug, clap::Args)]
pub(crate) struct CreateArgs {
    /// Nodes of the cluster.
    #[arg(long, default_value_t = 1000)]
    nodes: u64,
    /// Concurrent instant workers.
    #[arg(long, default_value_t = 100)]
    workers: usize,
    /// The server's database: sqlite (temp dir) or postgres (needs --database-url).
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// PostgreSQL URL, with --database postgres.
    #[arg(long)]
    database_url: Option<String>,
    /// Workers that get the whole `nodes` map in every payload, as Coopr's did (by default they
    /// announce `nodesByRevision` and fetch the map when it changed, as weft's provisioner does).
    #[arg(long)]
    nodes_in_payload: bool,
    /// Workers take each task with a request of its own, as Coopr's did (by default a finish takes
    /// the worker's next task, `next`, as weft's provisioner does).
    #[arg(long)]
    separate_takes: bool,
    /// Run the server in this process, beside the load driver (its RSS and CPU are then counted
    /// with the driver's).
    #[arg(long)]
    in_process: bool,
    /// table (default) or json (the last line is one object).
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
}

const EVERY: [&str; 4] = ["hosts", "firewall", "base", "monitoring-agent"];
const MASTERS: [&str; 13] = [
    "zookeeper-server",
    "hadoop-hdfs-namenode",
    "hadoop-hdfs-secondarynamenode",
    "hadoop-yarn-resourcemanager",
    "hadoop-mapreduce-historyserver",
    "hbase-master",
    "hive-metastore",
    "hive-server2",
    "oozie",
    "hue",
    "mysql-server",
    "spark-history",
    "kafka-broker",
];
const WORKERS: [&str; 3] = [
    "hadoop-hdfs-datanode",
    "hadoop-yarn-nodemanager",
    "hbase-regionserver",
];
const FULL: [&str; 5] = ["install", "configure", "initialize", "start", "stop"];

fn service(name: &str, actions: &[&str], runtime: &[&str], install: &[&str]) -> Value {
    let acts: serde_json::Map<String, Value> = actions
        .iter()
        .map(|a| {
            let script = format!("{name}-{a}.sh");
            (
                a.to_string(),
                json!({"type": "shell", "fields": {"script": script}}),
            )
        })
        .collect();
    json!({"name": name, "provisioner": {"actions": acts},
           "dependencies": {"runtime": {"requires": runtime}, "install": {"requires": install}}})
}

/// The planner benchmark's services, with its dependencies.
fn services() -> Vec<Value> {
    let mut out = vec![
        service("hosts", &["configure"], &[], &[]),
        service(
            "firewall",
            &["install", "configure", "start", "stop"],
            &[],
            &[],
        ),
        service("base", &["install"], &[], &[]),
        service("monitoring-agent", &FULL, &["hosts"], &["base"]),
    ];
    let mut prev = "hosts";
    for m in MASTERS {
        out.push(service(m, &FULL, &[prev], &["base"]));
        prev = m;
    }
    let needs = [
        ["hadoop-hdfs-namenode", "hosts"],
        ["hadoop-yarn-resourcemanager", "hadoop-hdfs-datanode"],
        ["hbase-master", "hadoop-hdfs-datanode"],
    ];
    for (w, needs) in WORKERS.iter().zip(needs) {
        out.push(service(w, &FULL, &needs, &["base"]));
    }
    out
}

/// Masters in three groups on three nodes of their own, workers together on every other node.
fn template() -> Value {
    let all: Vec<&str> = EVERY
        .iter()
        .chain(&MASTERS)
        .chain(&WORKERS)
        .copied()
        .collect();
    let (a, b, c) = (&MASTERS[..5], &MASTERS[5..9], &MASTERS[9..]);
    let one: serde_json::Map<String, Value> = MASTERS
        .iter()
        .map(|m| (m.to_string(), json!({"quantities": {"min": 1, "max": 1}})))
        .collect();
    let apart = |x: &str, y: &str| json!([x, y]);
    json!({"name": "bench20",
        "compatibility": {"services": all, "hardwaretypes": ["small"], "imagetypes": ["host"]},
        "defaults": {"services": all, "provider": "local", "hardwaretype": "small", "imagetype": "host"},
        "constraints": {"size": {"min": 4, "max": weft_model::LARGEST_CLUSTER}, "services": one,
            "layout": {"mustcoexist": [a, b, c, WORKERS, EVERY],
                "cantcoexist": [apart(a[0], b[0]), apart(a[0], c[0]), apart(b[0], c[0]),
                    apart(a[0], WORKERS[0]), apart(b[0], WORKERS[0]), apart(c[0], WORKERS[0])]}}})
}

/// The 20-service catalog and its template `bench20`, in the bench tenant.
pub(super) async fn put_catalog(
    http: &reqwest::Client,
    server: &super::bench::Server,
) -> anyhow::Result<()> {
    let entities = services()
        .into_iter()
        .map(|s| ("services", s))
        .chain([("clustertemplates", template())]);
    for (kind, v) in entities {
        let url = format!(
            "{}/v2/{kind}/{}",
            server.api,
            v["name"].as_str().unwrap_or("")
        );
        send(http, reqwest::Method::PUT, &url, ADMIN, Some(v)).await?;
    }
    Ok(())
}

pub(crate) async fn run(a: CreateArgs) -> anyhow::Result<()> {
    if !matches!(a.output.as_str(), "table" | "json") {
        bail!("-o {}: expected table or json", a.output);
    }
    let server = if a.in_process {
        start_server(&a.database, a.database_url.as_deref()).await?
    } else {
        spawn_server(&a.database, a.database_url.as_deref()).await?
    };
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(600))
        .pool_max_idle_per_host(2000)
        .build()?;
    let tenant_id = setup(&http, &server).await?;
    keep_registered(&http, &server, &tenant_id).await;
    put_catalog(&http, &server).await?;

    let t0 = Instant::now();
    let body = json!({"name": "big", "clusterTemplate": "bench20", "numMachines": a.nodes});
    let url = format!("{}/v2/clusters", server.api);
    let text = send(&http, reqwest::Method::POST, &url, ADMIN, Some(body)).await?;
    let posted = t0.elapsed().as_secs_f64();
    let id: Value = serde_json::from_str(&text)?;
    let id = id["id"].as_str().unwrap_or_default().to_string();
    let total = plan_size(&http, &server, &id).await?;
    let driven = drive(
        &http,
        &server,
        &tenant_id,
        a.workers,
        total,
        !a.nodes_in_payload,
        !a.separate_takes,
    )
    .await?;
    check_active(&http, &server, &id).await?;
    let run = Run {
        posted,
        seconds: t0.elapsed().as_secs_f64(),
        driven,
        usage: Usage::of(&server),
    };
    if a.output == "json" {
        println!("{}", report(&a, &run));
    } else {
        println!("{}", summary(&a, &run));
    }
    Ok(())
}

/// What one create took.
struct Run {
    /// Seconds until the POST was answered, and until the cluster was active.
    posted: f64,
    seconds: f64,
    driven: Driven,
    usage: Usage,
}

/// Peak RSS (the server's and the driver's) and the server's CPU time.
struct Usage {
    peak_rss: u64,
    driver_rss: u64,
    cpu_user: f64,
    cpu_sys: f64,
}

impl Usage {
    /// The server process's figures; the driver's own when the server runs in this process.
    fn of(server: &super::bench::Server) -> Usage {
        let driver_rss = proc_status_bytes("/proc/self/status", "VmHWM");
        let (peak_rss, (cpu_user, cpu_sys)) = match &server.process {
            Some(p) => (p.status_bytes("VmHWM"), p.cpu_seconds()),
            None => (driver_rss, (0.0, 0.0)),
        };
        Usage {
            peak_rss,
            driver_rss,
            cpu_user,
            cpu_sys,
        }
    }
}

/// The run as one JSON object (`-o json`).
fn report(a: &CreateArgs, run: &Run) -> Value {
    let d = &run.driven;
    let u = &run.usage;
    let bytes_total = d.payload_bytes + d.nodes_bytes;
    json!({
        "database": a.database,
        "nodes": a.nodes,
        "workers": a.workers,
        "tasks": d.done,
        "post_seconds": run.posted,
        "seconds": run.seconds,
        "tasks_per_s": d.done as f64 / run.seconds,
        "nodes_in_payload": a.nodes_in_payload,
        "separate_takes": a.separate_takes,
        "bytes_per_task": bytes_total / d.done.max(1),
        "bytes_total": bytes_total,
        "payload_bytes": d.payload_bytes,
        "nodes_map_bytes": d.nodes_bytes,
        "nodes_map_fetches": d.nodes_fetches,
        "finishes_answered_500": d.errors,
        "takes_answered_204": d.empty_takes,
        "take_ms_mean": d.take_ms,
        "finish_ms_mean": d.finish_ms,
        "server_in_process": a.in_process,
        "peak_rss_bytes": u.peak_rss,
        "driver_peak_rss_bytes": u.driver_rss,
        "server_cpu_user_s": u.cpu_user,
        "server_cpu_system_s": u.cpu_sys,
    })
}

/// The run in one sentence (`-o table`).
fn summary(a: &CreateArgs, run: &Run) -> String {
    let Run {
        posted,
        seconds,
        driven: d,
        usage: u,
    } = run;
    let (done, nodes_fetches, nodes_bytes) = (d.done, d.nodes_fetches, d.nodes_bytes);
    let (cpu_user, cpu_sys) = (u.cpu_user, u.cpu_sys);
    format!(
        "create of {} nodes ({done} tasks) with {} instant workers on {}: POST answered in \
         {posted:.2} s, active after {seconds:.2} s ({:.0} tasks/s); {} bytes per task \
         (payloads and {nodes_fetches} nodes-map fetches of {nodes_bytes} bytes); server \
         peak RSS {} MiB{}; server CPU {cpu_user:.1} s user, {cpu_sys:.1} s system",
        a.nodes,
        a.workers,
        a.database,
        done as f64 / seconds,
        (d.payload_bytes + nodes_bytes) / done.max(1),
        u.peak_rss / (1024 * 1024),
        if a.in_process {
            " (driver included)"
        } else {
            ""
        }
    )
}
