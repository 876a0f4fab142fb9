//! No orphans: a CREATE killed after its machine was made, then run again, leaves one machine,
//! for the local, docker and hostpool providers (the cloud providers have theirs in their own
//! modules). Each test runs CREATE in a task of its own, aborts it once the machine exists (the
//! agent's process killed mid-way, or its answer lost), runs CREATE again and counts machines.
//! The docker and hostpool tests need docker and the `weft-node:bookworm` image.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::contract::task;
use serde_json::{json, Map, Value};
use weft_provisioner::docker::DockerProvider;
use weft_provisioner::hostpool::{HostPoolProvider, CLAIM_FILE};
use weft_provisioner::local::LocalProvider;
use weft_provisioner::task::{Action, Task};
use weft_provisioner::{Provider, TaskOutput};

use crate::common::until;

/// Starts `create`, aborts it as soon as `made` sees the machine, then runs `create` again.
async fn kill_then_retry<F, Fut>(p: Arc<dyn Provider>, create: Task, made: F) -> TaskOutput
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let first = {
        let (p, t) = (p.clone(), create.clone());
        tokio::spawn(async move { p.create(&t).await })
    };
    until(
        Duration::from_secs(120),
        "the machine to be made",
        || async { made().await.then_some(()) },
    )
    .await;
    first.abort();
    let _ = first.await;
    p.create(&create).await.expect("the retried create")
}

/// The reservations in the local provider's address registry held by `node_dir`.
fn reservations(node_dir: &Path) -> Vec<String> {
    let dir = std::env::var_os("WEFT_LOCAL_ADDRESSES")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("weft-local-addresses"));
    let owner = node_dir.to_string_lossy().into_owned();
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|h| h.trim() == owner))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_killed_local_create_retried_leaves_one_node_and_one_address() {
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(LocalProvider::new(dir.path()));
    let node = "retry-local";
    let node_dir = p.node_dir(node);
    let t = task(Action::Create, node, Map::new(), Duration::from_secs(30));
    let made = || async { node_dir.exists() };
    let out = kill_then_retry(p.clone(), t.clone(), made).await;
    assert_eq!(out.result["providerid"], node);
    assert_eq!(reservations(&node_dir).len(), 1, "one address");

    // Killed between reserving the address and recording it: the retry takes the same one.
    let held = reservations(&node_dir);
    std::fs::remove_file(node_dir.join("node.json")).unwrap();
    p.create(&t).await.expect("the retried create");
    assert_eq!(
        reservations(&node_dir),
        held,
        "the address it held, and no other"
    );
    let nodes: Vec<_> = std::fs::read_dir(p.nodes_dir()).unwrap().collect();
    assert_eq!(nodes.len(), 1, "one node directory");

    let mut config = Map::new();
    config.insert("providerid".into(), json!(node));
    p.delete(&task(Action::Delete, node, config, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(reservations(&node_dir).is_empty(), "delete gives it back");
}

const IMAGE: &str = "weft-node:bookworm";

fn docker_out(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn docker_ready() -> bool {
    if !weft_testkit::require("docker") {
        return false;
    }
    std::process::Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success())
        || weft_testkit::skip_or_fail(IMAGE, "the image is missing (images/build-node-image.sh)")
}

/// The containers (any state) labelled for `node`.
fn containers_of(node: &str) -> Vec<String> {
    docker_out(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("label=weft.node={node}"),
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_docker_create_retried_leaves_one_container() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(DockerProvider::new(dir.path()));
    let node = format!("retry-docker-{}", std::process::id());
    let mut config = Map::new();
    config.insert(
        "provider".into(),
        json!({"name": "d", "providertype": "docker", "provisioner": {"image": IMAGE}}),
    );
    let mut t = task(
        Action::Create,
        &node,
        config.clone(),
        Duration::from_secs(120),
    );
    t.cluster_id = format!("retry{}", std::process::id());
    t.tenant_id = "retry-tenant".into();
    let n = node.clone();
    let made = move || {
        let n = n.clone();
        async move { !containers_of(&n).is_empty() }
    };
    let out = kill_then_retry(p.clone(), t.clone(), made).await;
    let left = containers_of(&node);
    assert_eq!(left.len(), 1, "one container for the node: {left:?}");

    let mut dconfig: Map<String, Value> = config;
    dconfig.insert("providerid".into(), out.result["providerid"].clone());
    let mut del = task(Action::Delete, &node, dconfig, Duration::from_secs(120));
    del.cluster_id = t.cluster_id.clone();
    del.tenant_id = t.tenant_id.clone();
    p.delete(&del).await.expect("delete");
    assert!(containers_of(&node).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hostpool_create_retried_claims_the_host_once() {
    let Some(n) = crate::ssh::Node::start().await else {
        return;
    };
    let p = Arc::new(HostPoolProvider::new());
    let mut config = json!({
        "hostpool": {"provider": "pool", "host": "h1"},
        "ipaddresses": {"access_v4": "127.0.0.1"},
        "ssh-auth": {"user": "root", "key": n.root_key, "port": n.port},
        "provider": {"name": "pool", "providertype": "hostpool", "provisioner": {}},
    })
    .as_object()
    .cloned()
    .unwrap();
    let t = task(
        Action::Create,
        "retry-pool",
        config.clone(),
        Duration::from_secs(30),
    );
    let claimed = || async {
        n.exec(&format!("cat {CLAIM_FILE} 2>/dev/null || true"))
            .trim()
            == "retry-pool"
    };
    let out = kill_then_retry(p.clone(), t, claimed).await;
    assert_eq!(out.result["providerid"], "h1");
    assert_eq!(n.exec(&format!("cat {CLAIM_FILE}")).trim(), "retry-pool");
    config.extend(out.result);
    p.delete(&task(
        Action::Delete,
        "retry-pool",
        config,
        Duration::from_secs(30),
    ))
    .await
    .expect("delete");
    assert_eq!(
        n.exec(&format!(
            "test -e {CLAIM_FILE} && echo claimed || echo free"
        ))
        .trim(),
        "free"
    );
}
