//! `weft bench reads`: what many concurrent readers cost. A tenant holds one large cluster of the
//! 20-service catalog (created and run to `active` by instant workers) and a few small pending
//! ones; the server is then restarted, so that its memory is that of the reads alone, and
//! `--concurrency` cluster lists (`GET /v2/clusters`) are sent at once, then as many status reads
//! of the large cluster (`GET /v2/clusters/ID/status`). Reports each phase's latency percentiles,
//! answers and failures, and the server's peak memory. With `-o json` the last line is one JSON
//! object.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use super::bench::{
    check_active, drive, keep_registered, plan_size, proc_status_bytes, restart, send, setup,
    spawn_server, Server, ADMIN,
};

#[derive(Debug, clap::Args)]
pub(crate) struct ReadsArgs {
    /// Nodes of the large cluster.
    #[arg(long, default_value_t = 10_000)]
    nodes: u64,
    /// Small clusters (4 nodes, left pending) beside it.
    #[arg(long, default_value_t = 5)]
    small: u64,
    /// Requests of each kind sent at once.
    #[arg(long, default_value_t = 500)]
    concurrency: usize,
    /// Instant workers that run the large cluster's create.
    #[arg(long, default_value_t = 100)]
    workers: usize,
    /// The server's database: sqlite (temp dir) or postgres (needs --database-url).
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// PostgreSQL URL, with --database postgres.
    #[arg(long)]
    database_url: Option<String>,
    /// table (default) or json (the last line is one object).
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
}

pub(crate) async fn run(a: ReadsArgs) -> anyhow::Result<()> {
    if !matches!(a.output.as_str(), "table" | "json") {
        bail!("-o {}: expected table or json", a.output);
    }
    let mut server = spawn_server(&a.database, a.database_url.as_deref()).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .pool_max_idle_per_host(a.concurrency * 2)
        .build()?;
    let big = populate(&http, &server, &a).await?;
    restart(&mut server).await?;
    let pid = server
        .process
        .as_ref()
        .map(|p| p.pid())
        .ok_or_else(|| anyhow!("the server runs in a process of its own"))?;
    let rss_at_start = proc_status_bytes(&format!("/proc/{pid}/status"), "VmRSS");
    let list_url = format!("{}/v2/clusters", server.api);
    let status_url = format!("{}/v2/clusters/{big}/status", server.api);
    let lists = phase(&http, &list_url, a.concurrency, pid).await;
    let statuses = phase(&http, &status_url, a.concurrency, pid).await;
    let hwm = proc_status_bytes(&format!("/proc/{pid}/status"), "VmHWM");
    let report = json!({
        "database": a.database,
        "nodes": a.nodes,
        "small_clusters": a.small,
        "concurrency": a.concurrency,
        "server_rss_at_start_bytes": rss_at_start,
        "server_peak_rss_bytes": hwm,
        "list": lists.json(),
        "status": statuses.json(),
    });
    if a.output == "json" {
        println!("{report}");
    } else {
        println!(
            "{} concurrent reads in a tenant with a {}-node cluster and {} small ones, on {} \
             (server restarted before the reads: {} MiB)",
            a.concurrency,
            a.nodes,
            a.small,
            a.database,
            rss_at_start / (1024 * 1024)
        );
        for (name, p) in [("GET /v2/clusters", &lists), ("GET .../status", &statuses)] {
            println!("  {name}: {}", p.line());
        }
        println!("  server peak RSS {} MiB", hwm / (1024 * 1024));
    }
    Ok(())
}

/// The tenant's clusters: the large one, run to `active`, and the small pending ones. Returns the
/// large one's id.
async fn populate(
    http: &reqwest::Client,
    server: &Server,
    a: &ReadsArgs,
) -> anyhow::Result<String> {
    let tenant_id = setup(http, server).await?;
    keep_registered(http, server, &tenant_id).await;
    super::bench_create::put_catalog(http, server).await?;
    let url = format!("{}/v2/clusters", server.api);
    let body = json!({"name": "big", "clusterTemplate": "bench20", "numMachines": a.nodes});
    let text = send(http, reqwest::Method::POST, &url, ADMIN, Some(body)).await?;
    let id: Value = serde_json::from_str(&text)?;
    let id = id["id"]
        .as_str()
        .ok_or_else(|| anyhow!("no id in {text}"))?
        .to_string();
    let total = plan_size(http, server, &id).await?;
    drive(http, server, &tenant_id, a.workers, total, true, true).await?;
    check_active(http, server, &id).await?;
    for i in 0..a.small {
        let body =
            json!({"name": format!("small-{i}"), "clusterTemplate": "bench20", "numMachines": 4});
        send(http, reqwest::Method::POST, &url, ADMIN, Some(body)).await?;
    }
    Ok(id)
}

/// What one phase measured.
struct Phase {
    /// Latencies of the answers that came (200), sorted.
    ms: Vec<f64>,
    failures: u64,
    first_failure: Option<String>,
    answer_bytes: u64,
    /// The server's largest resident set seen while the phase ran.
    peak_rss: u64,
    seconds: f64,
}

impl Phase {
    fn percentile(&self, q: f64) -> f64 {
        if self.ms.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.ms.len() as f64).ceil() as usize).clamp(1, self.ms.len());
        self.ms[rank - 1]
    }

    fn json(&self) -> Value {
        json!({
            "answered": self.ms.len(),
            "failed": self.failures,
            "first_failure": self.first_failure,
            "p50_ms": self.percentile(0.50),
            "p99_ms": self.percentile(0.99),
            "max_ms": self.percentile(1.0),
            "answer_bytes": self.answer_bytes,
            "peak_rss_bytes": self.peak_rss,
            "seconds": self.seconds,
        })
    }

    fn line(&self) -> String {
        format!(
            "{} answered, {} failed; p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {} bytes each; \
             server RSS up to {} MiB; {:.2} s in all",
            self.ms.len(),
            self.failures,
            self.percentile(0.50),
            self.percentile(0.99),
            self.percentile(1.0),
            self.answer_bytes,
            self.peak_rss / (1024 * 1024),
            self.seconds
        )
    }
}

/// `n` GETs of `url` sent at once, each timed from its send to its whole answer, while the
/// server's resident set is sampled.
async fn phase(http: &reqwest::Client, url: &str, n: usize, pid: u32) -> Phase {
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        tokio::spawn(async move {
            let path = format!("/proc/{pid}/status");
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(proc_status_bytes(&path, "VmRSS"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let t0 = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let (http, url) = (http.clone(), url.to_string());
            tokio::spawn(async move { timed_get(&http, &url).await })
        })
        .collect();
    let mut out = Phase {
        ms: Vec::with_capacity(n),
        failures: 0,
        first_failure: None,
        answer_bytes: 0,
        peak_rss: 0,
        seconds: 0.0,
    };
    for c in calls {
        match c.await.map_err(|e| anyhow!("{e}")).and_then(|r| r) {
            Ok((ms, bytes)) => {
                out.ms.push(ms);
                out.answer_bytes = bytes;
            }
            Err(e) => {
                out.failures += 1;
                out.first_failure.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    out.seconds = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    out.peak_rss = peak.load(Ordering::Relaxed);
    out.ms.sort_by(f64::total_cmp);
    out
}

/// One GET as the bench's admin: its latency in milliseconds and the answer's size.
async fn timed_get(http: &reqwest::Client, url: &str) -> anyhow::Result<(f64, u64)> {
    let t = Instant::now();
    let (user, tenant) = ADMIN.ok_or_else(|| anyhow!("no bench identity"))?;
    let r = http
        .get(url)
        .header("Coopr-UserID", user)
        .header("Coopr-TenantID", tenant)
        .send()
        .await?;
    let status = r.status();
    let body = r.bytes().await?;
    if !status.is_success() {
        bail!("GET {url}: {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok((t.elapsed().as_secs_f64() * 1000.0, body.len() as u64))
}
