//! `weft bench webhooks`: what tenants' webhooks cost the jobs they report on. The same load runs
//! twice on fresh servers, side by side: `--clusters` creates at once, run to `active` by instant
//! workers, first with no webhook, then with `--webhooks` webhooks (every event kind) to a
//! receiver in this process that answers 200. Reports, for each run, the time from the first POST
//! to the last cluster active and the task rate; for the run with webhooks, the deliveries, how
//! long after the last cluster became active the last delivery arrived, and deliveries per second.
//! With `-o json` the last line is one JSON object.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use super::bench::{
    check_active, drive, keep_registered, plan_size, send, setup, spawn_server, Server, ADMIN,
};

#[derive(Debug, clap::Args)]
pub(crate) struct WebhooksArgs {
    /// Clusters created at once.
    #[arg(long, default_value_t = 100)]
    clusters: u64,
    /// Nodes per cluster (12 tasks each).
    #[arg(long, default_value_t = 2)]
    nodes: u64,
    /// Webhooks of the second run.
    #[arg(long, default_value_t = 10)]
    webhooks: u64,
    /// Instant workers.
    #[arg(long, default_value_t = 100)]
    workers: usize,
    /// The server's database: sqlite (temp dir) or postgres (needs --database-url).
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// PostgreSQL URL, with --database postgres (drop and create the database between runs).
    #[arg(long)]
    database_url: Option<String>,
    /// table (default) or json (the last line is one object).
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
}

/// What the in-process receiver counted.
#[derive(Default)]
struct Received {
    deliveries: AtomicU64,
    /// Milliseconds since the run's start at the last delivery.
    last_ms: AtomicU64,
}

/// A receiver on a free loopback port that answers 200 to every POST and counts.
async fn receiver(t0: Instant) -> anyhow::Result<(String, Arc<Received>)> {
    let got = Arc::new(Received::default());
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/hook/{n}",
        axum::routing::post(move || {
            let seen = seen.clone();
            async move {
                seen.deliveries.fetch_add(1, Ordering::Relaxed);
                let ms = t0.elapsed().as_millis() as u64;
                seen.last_ms.fetch_max(ms, Ordering::Relaxed);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}"), got))
}

/// One run: a fresh server, `webhooks` webhooks to `hook`, the clusters created at once and run.
/// The server is answered too: it delivers for as long as it runs.
async fn one_run(a: &WebhooksArgs, webhooks: u64, hook: &str) -> anyhow::Result<(Value, Server)> {
    let server = spawn_server(&a.database, a.database_url.as_deref()).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .pool_max_idle_per_host(1000)
        .build()?;
    let tenant_id = setup(&http, &server).await?;
    keep_registered(&http, &server, &tenant_id).await;
    let mut cursors = Vec::new();
    for n in 0..webhooks {
        let body = json!({"url": format!("{hook}/hook/{n}")});
        let url = format!("{}/v2/webhooks", server.api);
        let made = send(&http, reqwest::Method::POST, &url, ADMIN, Some(body)).await?;
        let made: Value = serde_json::from_str(&made)?;
        cursors.push(made["cursor"].as_u64().unwrap_or(0));
    }
    let t0 = Instant::now();
    let ids = create_all(&http, &server, a).await?;
    let mut total = 0;
    for id in &ids {
        total += plan_size(&http, &server, id).await?;
    }
    drive(&http, &server, &tenant_id, a.workers, total, true, true).await?;
    let active_s = t0.elapsed().as_secs_f64();
    for id in &ids {
        check_active(&http, &server, id).await?;
    }
    let events = count_events(&http, &server).await?;
    // Each webhook is due every event after its cursor (ids run 1..=events without gaps).
    let due: u64 = cursors.iter().map(|c| events.saturating_sub(*c)).sum();
    let report = json!({
        "webhooks": webhooks, "clusters": ids.len(), "tasks": total, "deliveries_due": due,
        "seconds_to_active": active_s, "tasks_per_s": total as f64 / active_s,
        "events": events, "server": server.api,
    });
    Ok((report, server))
}

/// Every cluster's POST at once; their ids.
async fn create_all(
    http: &reqwest::Client,
    server: &Server,
    a: &WebhooksArgs,
) -> anyhow::Result<Vec<String>> {
    let url = format!("{}/v2/clusters", server.api);
    let posts = (0..a.clusters).map(|i| {
        let body =
            json!({"name": format!("c{i}"), "clusterTemplate": "bench", "numMachines": a.nodes});
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(
            async move { send(&http, reqwest::Method::POST, &url, ADMIN, Some(body)).await },
        )
    });
    let mut ids = Vec::new();
    for p in posts.collect::<Vec<_>>() {
        let text = p.await??;
        let v: Value = serde_json::from_str(&text)?;
        ids.push(
            v["id"]
                .as_str()
                .ok_or_else(|| anyhow!("no id in {text}"))?
                .to_string(),
        );
    }
    Ok(ids)
}

/// The tenant's events so far.
async fn count_events(http: &reqwest::Client, server: &Server) -> anyhow::Result<u64> {
    let url = format!(
        "{}/v2/events?format=ndjson&follow=false&since=0",
        server.api
    );
    let text = send(http, reqwest::Method::GET, &url, ADMIN, None).await?;
    Ok(text.lines().count() as u64)
}

pub(crate) async fn run(a: WebhooksArgs) -> anyhow::Result<()> {
    if !matches!(a.output.as_str(), "table" | "json") {
        bail!("-o {}: expected table or json", a.output);
    }
    // The servers this bench starts deliver to its receiver on the loopback.
    std::env::set_var("WEFT_WEBHOOKS_ALLOW_LOOPBACK", "true");
    let start = Instant::now();
    let (hook, got) = receiver(start).await?;
    let (without, first) = one_run(&a, 0, &hook).await?;
    drop(first);
    let run_start_ms = start.elapsed().as_millis() as u64;
    // This server runs until its deliveries have arrived.
    let (with, _server) = one_run(&a, a.webhooks, &hook).await?;
    let active_ms = start.elapsed().as_millis() as u64;
    let due = with["deliveries_due"].as_u64().unwrap_or(0);
    let t = Instant::now();
    while got.deliveries.load(Ordering::Relaxed) < due && t.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered = got.deliveries.load(Ordering::Relaxed);
    let last_ms = got.last_ms.load(Ordering::Relaxed);
    let spread_s = (last_ms.saturating_sub(run_start_ms)) as f64 / 1000.0;
    let report = json!({
        "database": a.database,
        "without_webhooks": without,
        "with_webhooks": with,
        "deliveries": delivered,
        "deliveries_due": due,
        "last_delivery_after_active_s": last_ms.saturating_sub(active_ms) as f64 / 1000.0,
        "deliveries_per_s": delivered as f64 / spread_s.max(0.001),
    });
    if a.output == "json" {
        println!("{report}");
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &Value) {
    for (name, run) in [
        ("no webhooks", &r["without_webhooks"]),
        ("webhooks", &r["with_webhooks"]),
    ] {
        println!(
            "{name:>12}: {} clusters, {} tasks, active in {:.2} s ({:.0} tasks/s), {} events",
            run["clusters"],
            run["tasks"],
            run["seconds_to_active"].as_f64().unwrap_or(0.0),
            run["tasks_per_s"].as_f64().unwrap_or(0.0),
            run["events"]
        );
    }
    println!(
        "  deliveries: {} of {} due, the last {:.2} s after the last cluster was active, {:.0}/s",
        r["deliveries"],
        r["deliveries_due"],
        r["last_delivery_after_active_s"].as_f64().unwrap_or(0.0),
        r["deliveries_per_s"].as_f64().unwrap_or(0.0)
    );
}
