//! `weft_provisioner::sweep` on the docker provider: a container made behind weft's back with
//! weft's labels is found, told apart from a live node's, and removed by the provider's DELETE.
//! Needs docker and the `weft-node:bookworm` image: skipped without them, failed in CI.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use serde_json::Map;
use weft_provisioner::docker::DockerProvider;
use weft_provisioner::sweep;
use weft_provisioner::Provider;

const IMAGE: &str = "weft-node:bookworm";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn sweep_finds_a_container_made_behind_weft_s_back() {
    if !weft_testkit::require("docker") {
        return;
    }
    let ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok
        && !weft_testkit::skip_or_fail(IMAGE, "the image is missing (images/build-node-image.sh)")
    {
        return;
    }
    let node = format!("sweep-rogue-{}", std::process::id());
    let name = format!("weft-{node}");
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        &format!("weft.node={node}"),
        "--label",
        "weft.cluster=sweepc",
        "--label",
        "weft.tenant=sweept",
        "--entrypoint",
        "sleep",
        IMAGE,
        "600",
    ]);
    let found = sweep::docker_machines(None).await.expect("listing");
    let mine: Vec<_> = found.iter().filter(|t| t.node == node).cloned().collect();
    assert_eq!(mine.len(), 1, "{found:?}");
    assert_eq!(mine[0].providerid, name);
    assert_eq!(
        (mine[0].cluster.as_str(), mine[0].tenant.as_str()),
        ("sweepc", "sweept")
    );
    assert!(
        sweep::orphans(mine.clone(), &BTreeSet::from([node.clone()])).is_empty(),
        "a live node's container is not an orphan"
    );
    let orphans = sweep::orphans(mine, &BTreeSet::new());
    assert_eq!(orphans.len(), 1);

    let dir = tempfile::tempdir().unwrap();
    let p = DockerProvider::new(dir.path());
    p.delete(&sweep::delete_task(
        &orphans[0],
        &Map::new(),
        Duration::from_secs(60),
    ))
    .await
    .expect("the sweep's delete");
    let left = sweep::docker_machines(None).await.unwrap();
    assert!(left.iter().all(|t| t.node != node), "{left:?}");
}
