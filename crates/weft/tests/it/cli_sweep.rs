//! `weft provider sweep` end to end on docker: the `weft` binary against a real server (in
//! process) and a provisioner agent (in process) with the docker provider. Three containers are
//! made behind weft's back with weft's labels: one for a node that does not exist (found, then
//! deleted with `--delete`), one for a live node of a cluster (never listed), and one marked with
//! another tenant's id (never listed). Needs docker and the `weft-node:bookworm` image: skipped
//! without them, failed in CI.

use std::process::Command;
use std::sync::Arc;

use serde_json::json;
use weft_client::api::{ApiClient, CreateCluster, Identity, Kind};
use weft_model::{SweepReport, TenantSpecification};
use weft_provisioner::docker::DockerProvider;
use weft_provisioner::{Agent, AgentConfig, Plugins};

use crate::cli::Cli;

const TENANT: &str = "default";
const IMAGE: &str = "weft-node:bookworm";

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs")
}

fn docker_ready() -> bool {
    if !weft_testkit::require("docker") {
        return false;
    }
    docker(&["image", "inspect", IMAGE]).status.success()
        || weft_testkit::skip_or_fail(IMAGE, "the image is missing (images/build-node-image.sh)")
}

/// Containers of this test, removed when dropped.
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = docker(&["rm", "-f", c]);
        }
    }
}

impl Containers {
    /// Starts a sleeping container `name` with weft's labels for `node` of `tenant`.
    fn run(&mut self, name: &str, node: &str, tenant: &str) {
        self.0.push(name.to_string());
        let labels = [
            format!("weft.node={node}"),
            "weft.cluster=1".to_string(),
            format!("weft.tenant={tenant}"),
        ];
        let mut args = vec!["run", "-d", "--name", name];
        for l in &labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend(["--entrypoint", "sleep", IMAGE, "600"]);
        let out = docker(&args);
        assert!(out.status.success(), "docker run: {out:?}");
    }
}

fn exists(name: &str) -> bool {
    docker(&["container", "inspect", name]).status.success()
}

/// Tenant `default` (no workers: no task runs), the catalog of a docker provider `dock`, and a
/// provisioner agent with the docker provider; answers the agent.
async fn setup(s: &Cli) -> Agent {
    let who = |tenant: &str| Identity {
        tenant: tenant.into(),
        user: "admin".into(),
        api_key: None,
    };
    let sa = ApiClient::new(&s.api, who("superadmin")).unwrap();
    let spec = TenantSpecification {
        name: TENANT.into(),
        description: None,
        workers: 0,
        max_clusters: weft_model::UNBOUNDED,
        max_nodes: weft_model::UNBOUNDED,
        check_interval: 0,
        max_cost_per_hour: None,
    };
    sa.create_tenant(&spec, false).await.unwrap();
    let data = s.dir.path().join("provisioner");
    let mut cfg = AgentConfig::new(&s.internal, data.clone());
    cfg.id = "sweeper".into();
    let plugins = Plugins::new().provider(Arc::new(DockerProvider::new(&data)));
    let agent = Agent::start(cfg, plugins).await.expect("agent starts");
    let admin = ApiClient::new(&s.api, who(TENANT)).unwrap();
    for (kind, body) in [
        (
            Kind::Provider,
            json!({"name": "dock", "providertype": "docker"}),
        ),
        (
            Kind::HardwareType,
            json!({"name": "small", "providermap": {"dock": {"flavor": "small"}}}),
        ),
        (
            Kind::ImageType,
            json!({"name": "os", "providermap": {"dock": {"image": IMAGE}}}),
        ),
        (
            Kind::Service,
            json!({"name": "s", "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": "echo"}}}}}),
        ),
        (
            Kind::ClusterTemplate,
            json!({"name": "t", "defaults": {"services": ["s"], "provider": "dock",
                "hardwaretype": "small", "imagetype": "os"},
                "compatibility": {"services": ["s"]}, "constraints": {"size": {"min": 1, "max": 5}}}),
        ),
    ] {
        admin.create_entity(kind, &body).await.unwrap();
    }
    admin
        .create_cluster(&CreateCluster {
            name: "c".into(),
            cluster_template: "t".into(),
            num_machines: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    agent
}

#[test]
fn provider_sweep_finds_and_deletes_only_this_tenant_s_orphans() {
    if !docker_ready() {
        return;
    }
    let s = Cli::start();
    let api = s.api.clone();
    let s = s.with_args(&["--server", &api, "--tenant", TENANT, "--user", "admin"]);
    let _agent = s.rt.block_on(setup(&s));
    let tenant_id =
        s.rt.block_on(s.store.tenant_by_name(TENANT))
            .unwrap()
            .expect("tenant")
            .id;
    let nodes =
        s.rt.block_on(s.store.list_tenant_nodes(&tenant_id))
            .unwrap();
    assert_eq!(nodes.len(), 1, "the cluster has one node");
    let live = nodes[0].id.clone();

    let pid = std::process::id();
    let (rogue, kept, foreign) = (
        format!("weft-sweep-rogue-{pid}"),
        format!("weft-sweep-live-{pid}"),
        format!("weft-sweep-foreign-{pid}"),
    );
    let mut cs = Containers(Vec::new());
    cs.run(&rogue, &format!("rogue-node-{pid}"), &tenant_id);
    cs.run(&kept, &live, &tenant_id);
    cs.run(
        &foreign,
        &format!("foreign-node-{pid}"),
        "another-tenant-id",
    );

    let found: SweepReport = s.json(&["provider", "sweep", "dock"]);
    let ids: Vec<&str> = found
        .machines
        .iter()
        .map(|m| m.providerid.as_str())
        .collect();
    assert_eq!(ids, vec![rogue.as_str()], "{found:?}");
    assert_eq!(found.machines[0].tenant, tenant_id);
    assert!(found.deleted.is_empty(), "a listing deletes nothing");
    assert!(exists(&rogue));

    let table = s.ok(&["provider", "sweep", "dock"]);
    assert!(
        table.contains(&rogue) && table.contains("orphaned"),
        "{table}"
    );
    assert!(
        !table.contains(&kept) && !table.contains(&foreign),
        "{table}"
    );

    let swept: SweepReport = s.json(&["provider", "sweep", "dock", "--delete"]);
    assert_eq!(swept.deleted, vec![rogue.clone()], "{swept:?}");
    assert!(swept.errors.is_empty(), "{swept:?}");
    assert!(!exists(&rogue), "the orphan is deleted");
    assert!(exists(&kept), "a live node's container is kept");
    assert!(exists(&foreign), "another tenant's container is kept");

    let again: SweepReport = s.json(&["provider", "sweep", "dock"]);
    assert!(again.machines.is_empty(), "{again:?}");
    let out = s.ok(&["provider", "sweep", "dock"]);
    assert!(out.contains("no orphaned machines"), "{out}");
}
