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
    let dir = tempfile::tempdir().unwrap();
    let p = DockerProvider::new(dir.path());
    let found = p.machines(&Map::new()).await.expect("listing");
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

    p.delete(&sweep::delete_task(
        &orphans[0],
        &Map::new(),
        Duration::from_secs(60),
    ))
    .await
    .expect("the sweep's delete");
    let left = p.machines(&Map::new()).await.unwrap();
    assert!(left.iter().all(|t| t.node != node), "{left:?}");
}

/// Launches an instance on moto behind weft's back, tagged for `node` of `tenant`; its id.
async fn rogue_instance(m: &crate::aws::Moto, ami: &str, node: &str, tenant: &str) -> String {
    let p = |k: &str, v: &str| (k.to_string(), v.to_string());
    let out = m
        .ec2()
        .call(
            "RunInstances",
            &[
                p("ImageId", ami),
                p("MinCount", "1"),
                p("MaxCount", "1"),
                p("InstanceType", "t3.micro"),
                p("TagSpecification.1.ResourceType", "instance"),
                p("TagSpecification.1.Tag.1.Key", "weft:node"),
                p("TagSpecification.1.Tag.1.Value", node),
                p("TagSpecification.1.Tag.2.Key", "weft:cluster"),
                p("TagSpecification.1.Tag.2.Value", "1"),
                p("TagSpecification.1.Tag.3.Key", "weft:tenant"),
                p("TagSpecification.1.Tag.3.Value", tenant),
            ],
        )
        .await
        .expect("RunInstances");
    let mut ids = Vec::new();
    out.find_all("instanceId", &mut ids);
    ids[0].text.trim().to_string()
}

/// `POST /v2/providers/{name}/sweep` through a real server and provisioner agent on moto: an
/// instance made behind weft's back for this tenant is found and deleted (`?delete=true`); a live
/// node's instance and another tenant's instance in the same account are never listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sweeps_an_aws_account_for_one_tenant_only() {
    use reqwest::Method;
    use serde_json::json;
    use weft_model::SweepReport;

    let Some(m) = crate::aws::moto().await else {
        return;
    };
    let (s, tenant_id) = crate::common::Server::start("acme").await;
    // No workers: the cluster below is recorded but none of its tasks runs.
    let (code, body) = s
        .ext(
            Method::PUT,
            "superadmin",
            "/v2/tenants/acme",
            Some(json!({"tenant":
            {"name": "acme", "workers": 0, "maxClusters": weft_model::UNBOUNDED,
            "maxNodes": weft_model::UNBOUNDED}})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let plugins =
        weft_provisioner::Plugins::new().provider(std::sync::Arc::new(crate::aws::provider()));
    let _agent = weft_provisioner::Agent::start(s.config("sweeper"), plugins)
        .await
        .expect("agent starts");
    let fields = m.fields(&m.endpoint);
    let ami = fields["ami"].as_str().unwrap().to_string();
    let mut cluster = String::new();
    for (path, body) in [
        (
            "/v2/providers",
            json!({"name": "ec2", "providertype": "aws", "provisioner": fields}),
        ),
        (
            "/v2/hardwaretypes",
            json!({"name": "hw-ec2", "providermap": {"ec2": {"flavor": "t3.micro"}}}),
        ),
        (
            "/v2/imagetypes",
            json!({"name": "img-ec2", "providermap": {"ec2": {"image": ami}}}),
        ),
        (
            "/v2/services",
            json!({"name": "s-ec2", "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": "echo"}}}}}),
        ),
        (
            "/v2/clustertemplates",
            json!({"name": "t-ec2", "defaults": {"services": ["s-ec2"],
            "provider": "ec2", "hardwaretype": "hw-ec2", "imagetype": "img-ec2"},
            "compatibility": {"services": ["s-ec2"]}, "constraints": {"size": {"min": 1, "max": 2}}}),
        ),
        (
            "/v2/clusters",
            json!({"name": "c", "clusterTemplate": "t-ec2", "numMachines": 1}),
        ),
    ] {
        let (code, body) = s.ext(Method::POST, "acme", path, Some(body)).await;
        assert_eq!(code, 200, "{path}: {body}");
        cluster = body["id"].as_str().unwrap_or_default().to_string();
    }
    let (_, c) = s
        .ext(
            Method::GET,
            "acme",
            &format!("/v2/clusters/{cluster}"),
            None,
        )
        .await;
    let live = c["nodes"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|n| n["id"].as_str())
        .unwrap_or_else(|| panic!("the cluster's node: {c}"))
        .to_string();

    let rogue = rogue_instance(&m, &ami, "rogue-node", &tenant_id).await;
    let kept = rogue_instance(&m, &ami, &live, &tenant_id).await;
    let foreign = rogue_instance(&m, &ami, "foreign-node", "another-tenant-id").await;

    let sweep = |q: &'static str| {
        let s = &s;
        async move {
            let (code, body) = s
                .ext(
                    Method::POST,
                    "acme",
                    &format!("/v2/providers/ec2/sweep{q}"),
                    None,
                )
                .await;
            assert_eq!(code, 200, "{body}");
            serde_json::from_value::<SweepReport>(body).expect("a sweep report")
        }
    };
    let found = sweep("").await;
    let ids: Vec<&str> = found
        .machines
        .iter()
        .map(|m| m.providerid.as_str())
        .collect();
    assert_eq!(ids, vec![rogue.as_str()], "{found:?}");
    assert!(found.deleted.is_empty());

    let swept = sweep("?delete=true").await;
    assert_eq!(swept.deleted, vec![rogue.clone()], "{swept:?}");
    assert!(swept.errors.is_empty(), "{swept:?}");
    assert!(
        m.instances_of("rogue-node")
            .await
            .iter()
            .all(|i| !i.is_live()),
        "the orphan is terminated"
    );
    for (node, id) in [(live.as_str(), &kept), ("foreign-node", &foreign)] {
        let left = m.instances_of(node).await;
        assert!(
            left.iter().any(|i| &i.id == id && i.is_live()),
            "{node} kept: {left:?}"
        );
    }
    assert!(sweep("").await.machines.is_empty());

    // A user who is not the tenant admin may not sweep.
    let r = s
        .http
        .post(format!("{}/v2/providers/ec2/sweep", s.external))
        .header("Coopr-UserID", "someone")
        .header("Coopr-TenantID", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
}

/// Sweeps a provider of type `providertype` with `fields` through a real server and a
/// provisioner agent holding `plugin`, as the admin of tenant `acme`: once to list, once with
/// `?delete=true`. Before the sweeps `rogue` gets the tenant's id and makes machines behind
/// weft's back. The tenant has no cluster, so every machine marked with its id is an orphan.
/// Answers the provider ids the first sweep found and those the second deleted.
pub(crate) async fn through_the_server(
    plugin: std::sync::Arc<dyn Provider>,
    providertype: &str,
    fields: Map<String, serde_json::Value>,
    rogue: impl FnOnce(&str),
) -> (Vec<String>, Vec<String>) {
    use reqwest::Method;
    use serde_json::json;

    let (s, tenant_id) = crate::common::Server::start("acme").await;
    let plugins = weft_provisioner::Plugins::new().provider(plugin);
    let _agent = weft_provisioner::Agent::start(s.config("sweeper"), plugins)
        .await
        .expect("agent starts");
    let provider = json!({"name": "cloud", "providertype": providertype, "provisioner": fields});
    let (code, body) = s
        .ext(Method::POST, "acme", "/v2/providers", Some(provider))
        .await;
    assert_eq!(code, 200, "{body}");
    rogue(&tenant_id);
    let mut reports = Vec::new();
    for q in ["", "?delete=true"] {
        let (code, body) = s
            .ext(
                Method::POST,
                "acme",
                &format!("/v2/providers/cloud/sweep{q}"),
                None,
            )
            .await;
        assert_eq!(code, 200, "sweep{q}: {body}");
        let report: weft_model::SweepReport = serde_json::from_value(body).expect("a report");
        reports.push(report);
    }
    let found = reports[0].machines.iter().map(|m| m.providerid.clone());
    (found.collect(), reports[1].deleted.clone())
}
