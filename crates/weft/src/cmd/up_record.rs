//! What a running `weft up` leaves in its data dir (its API address) and what it says on exit
//! about the clusters that keep running; `weft down` reads the same.

use std::path::Path;

use anyhow::Context;

use weft_client::api::{ApiClient, Identity};
use weft_model::ClusterStatus;
use weft_store::SUPERADMIN;

/// The file in the data dir where `weft up` records its API address.
pub(crate) const ADDRESS_FILE: &str = "up.url";

/// A cluster that is not terminated, and its tenant.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub tenant: String,
    pub id: String,
    pub name: String,
    pub provider: String,
    pub nodes: u64,
    pub status: ClusterStatus,
}

/// Records the API address and process id of a running `weft up` in its data dir.
pub(crate) fn record_address(data_dir: &Path, api: &str) -> anyhow::Result<()> {
    let text = format!("{api}\n{}\n", std::process::id());
    std::fs::write(data_dir.join(ADDRESS_FILE), text)
        .with_context(|| format!("writing {}", data_dir.join(ADDRESS_FILE).display()))
}

/// Forgets the address (`weft up` is stopping).
pub(crate) fn forget_address(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(ADDRESS_FILE));
}

pub(crate) fn client(api: &str, tenant: &str) -> anyhow::Result<ApiClient> {
    let who = Identity {
        tenant: tenant.into(),
        user: "admin".into(),
        api_key: None,
    };
    Ok(ApiClient::new(api, who)?)
}

/// Every cluster of every tenant that is not terminated.
pub(crate) async fn live_clusters(api: &str) -> anyhow::Result<Vec<Live>> {
    let mut live = Vec::new();
    for t in client(api, SUPERADMIN)?.tenants().await? {
        for c in client(api, &t.name)?.clusters(None).await? {
            if c.status != ClusterStatus::Terminated {
                live.push(Live {
                    tenant: t.name.clone(),
                    id: c.id,
                    name: c.name,
                    provider: c.provider.name.clone(),
                    nodes: c.num_nodes,
                    status: c.status,
                });
            }
        }
    }
    Ok(live)
}

/// Every cluster of every tenant that is not terminated, read from the store through the engine
/// (`weft up` on exit: whatever its API asks of callers, TLS and API keys included).
pub(crate) async fn live_in_store(engine: &weft_engine::Engine) -> anyhow::Result<Vec<Live>> {
    let mut live = Vec::new();
    for t in engine.store.list_tenants().await? {
        for row in engine.store.list_clusters(&t.id, None).await? {
            if row.status == ClusterStatus::Terminated {
                continue;
            }
            let c = weft_engine::view::summary(engine, &row).await?;
            live.push(Live {
                tenant: t.spec.name.clone(),
                id: c.id,
                name: c.name,
                provider: c.provider.name.clone(),
                nodes: c.num_nodes,
                status: c.status,
            });
        }
    }
    Ok(live)
}

/// What `weft up` says on exit: the clusters that keep running and how to remove them.
pub(crate) fn print_left_behind(data_dir: &Path, live: &[Live]) {
    let dir = data_dir.display();
    if live.is_empty() {
        println!("weft stopped; no cluster is running (data kept in {dir})");
        return;
    }
    let nodes: u64 = live.iter().map(|c| c.nodes).sum();
    println!(
        "weft stopped; {} cluster{} with {nodes} node{} keep running (node processes, loopback listeners, containers, networks):",
        live.len(),
        if live.len() == 1 { "" } else { "s" },
        if nodes == 1 { "" } else { "s" },
    );
    for c in live {
        println!(
            "  {}  {}  {} node{} on {} ({}, tenant {})",
            c.id,
            c.name,
            c.nodes,
            if c.nodes == 1 { "" } else { "s" },
            c.provider,
            c.status.as_str(),
            c.tenant
        );
    }
    println!("  manage them again:  weft up --data-dir {dir}");
    println!("  remove them all:    weft down --data-dir {dir}   (do this before deleting {dir})");
}
