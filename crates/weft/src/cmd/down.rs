//! `weft down`: delete every cluster `weft up` made on a data dir and wait until nothing is left.
//! Goes through the running `weft up` when there is one (its address is recorded in the data dir),
//! else starts the server and its provisioner in-process on the data dir, as `weft up` does.
//! Also what `weft up` prints on exit about the clusters that keep running.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use weft_model::ClusterStatus;
use weft_server::config::RawConfig;
use weft_store::SUPERADMIN;

use super::up_record::{client, live_clusters, ADDRESS_FILE};

/// Arguments of `weft down`.
#[derive(Debug, clap::Args)]
pub(crate) struct DownArgs {
    /// The data dir of the `weft up` whose clusters to delete [default: ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// How long to wait for every cluster to be deleted (e.g. 90s, 10m).
    #[arg(long, default_value = "10m", value_parser = crate::cmd::cli::duration::parse)]
    timeout: Duration,
}

pub(crate) fn down(args: DownArgs) -> anyhow::Result<ExitCode> {
    let settings = RawConfig {
        data_dir: args.data_dir,
        port: Some(0),
        internal_port: Some(0),
        bind: Some("127.0.0.1".into()),
        auth: Some("none".into()),
        ..Default::default()
    }
    .resolve()?;
    let data_dir = settings.data_dir.clone();
    if !data_dir.join("weft.db").exists() {
        println!("nothing to do: no weft data in {}", data_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    super::runtime::runtime()?.block_on(async {
        if let Some(api) = running_up(&data_dir).await {
            // Its API wants the local CA and API keys: a second server on the same store while
            // it runs is no way round that.
            anyhow::ensure!(
                !api.starts_with("https://"),
                "the weft up on {} serves {api} over TLS (--tls or --bind): stop it (Ctrl-C), then \
                 run weft down again",
                data_dir.display()
            );
            println!("deleting through the running weft up at {api}");
            return delete_all(&api, args.timeout).await;
        }
        println!(
            "starting weft on {} to delete its clusters",
            data_dir.display()
        );
        let (external, internal) = super::server::bind_ports(&settings, "weft down").await?;
        let (app, _) = super::server::open_up_store(&settings).await?;
        let store = app.state.store.clone();
        let bound = weft_server::bound(app, external, internal)?;
        let api = format!("http://{}", bound.external_addr()?);
        let internal = bound.internal_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(bound.run_until(async {
            let _ = stop_rx.await;
        }));
        let embedded = super::provisioner::Embedded {
            server: internal,
            capacity: super::server::UP_WORKERS,
            tls: None,
            token_file: None,
        };
        let agent =
            super::server::start_up_provisioner(&data_dir, store.as_ref(), embedded).await?;
        let result = delete_all(&api, args.timeout).await;
        agent.shutdown().await;
        let _ = stop_tx.send(());
        serving.await?.context("serving")?;
        result
    })
}

/// The address of the `weft up` serving `data_dir`, if its process lives and it answers (a
/// port now used by another weft, after a `weft up` that was killed, is not taken for it).
async fn running_up(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(ADDRESS_FILE)).ok()?;
    let mut lines = text.lines();
    let api = lines.next()?.trim().to_string();
    let pid = lines.next()?.trim().parse::<u32>().ok()?;
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return None;
    }
    if api.starts_with("https://") {
        return Some(api);
    }
    let c = client(&api, SUPERADMIN).ok()?;
    let answer = tokio::time::timeout(Duration::from_secs(5), c.tenants()).await;
    matches!(answer, Ok(Ok(_))).then_some(api)
}

/// Deletes every live cluster (waiting out jobs underway first) until none is left.
async fn delete_all(api: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let mut asked = std::collections::BTreeMap::<String, u32>::new();
    loop {
        let live = live_clusters(api).await?;
        if live.is_empty() {
            let n = asked.len();
            println!(
                "done: {n} cluster{} deleted, nothing left",
                if n == 1 { "" } else { "s" }
            );
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "{} cluster(s) still not deleted after {}: {} (see `weft cluster logs ID --failed`, or wait longer with --timeout)",
            live.len(),
            super::cli::duration::format(timeout),
            live.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", ")
        );
        for c in live.iter().filter(|c| c.status != ClusterStatus::Pending) {
            let tries = asked.entry(c.id.clone()).or_insert(0);
            anyhow::ensure!(
                *tries < 3,
                "cluster {} ({}) failed to delete 3 times: see `weft cluster logs {} --failed`",
                c.id,
                c.name,
                c.id
            );
            *tries += 1;
            println!(
                "deleting cluster {} ({}, {} nodes on {})",
                c.id, c.name, c.nodes, c.provider
            );
            if let Err(e) = client(api, &c.tenant)?.delete_cluster(&c.id).await {
                tracing::debug!(error = %e, cluster = %c.id, "delete not started; trying again");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
