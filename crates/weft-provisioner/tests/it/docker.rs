//! The `docker` provider against the real Docker Engine: the provider contract; nodes of one
//! cluster made concurrently by two provisioners share one network and one key; a missing image
//! fails clearly and leaves nothing; and the example `kv-web-docker` cluster end to end through a
//! real server and agent (services answer across containers, expand, shrink, delete leaves no
//! container and no network). Needs docker and the `weft-node:bookworm` image
//! (images/build-node-image.sh): skipped without them, failed in CI.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::contract;
use reqwest::Method;
use serde_json::{json, Map, Value};
use weft_provisioner::docker::{DockerProvider, LABEL_CLUSTER, LABEL_TENANT};
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::ssh::SshTransport;
use weft_provisioner::task::{Action, Task};
use weft_provisioner::transport::{CommandSpec, Transport};
use weft_provisioner::{Agent, AgentConfig, Plugins, Provider};

use crate::common::{scripts_dir, until, Server};

const IMAGE: &str = "weft-node:bookworm";

pub(crate) fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Docker and the node image are there; `false` (skip) when not, outside CI.
pub(crate) fn ready() -> bool {
    if !weft_testkit::require("docker") {
        return false;
    }
    if docker(&["image", "inspect", IMAGE]).is_err() {
        return weft_testkit::skip_or_fail(
            IMAGE,
            "the image is missing (build it with images/build-node-image.sh)",
        );
    }
    true
}

/// The names of the containers (`kind` "container") or networks ("network") that match every
/// filter (`label=k=v`, `name=x`).
pub(crate) fn listed(kind: &str, filters: &[String]) -> Vec<String> {
    let mut args = vec![kind, "ls"];
    if kind == "container" {
        args.push("-a");
    }
    for f in filters {
        args.extend(["--filter", f.as_str()]);
    }
    args.extend(["--format", "{{.Names}}"]);
    if kind == "network" {
        args.pop();
        args.push("{{.Name}}");
    }
    docker(&args)
        .expect("docker ls")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Containers or networks carrying every label in `labels` (`k=v`).
pub(crate) fn labelled(kind: &str, labels: &[String]) -> Vec<String> {
    let filters: Vec<String> = labels.iter().map(|l| format!("label={l}")).collect();
    listed(kind, &filters)
}

/// Removes what a test left (also when it panicked): the containers and networks matching its
/// filters.
pub(crate) struct Cleanup(Vec<String>);

impl Cleanup {
    pub(crate) fn labels(labels: &[String]) -> Cleanup {
        Cleanup(labels.iter().map(|l| format!("label={l}")).collect())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in listed("container", &self.0) {
            let _ = docker(&["rm", "-f", "-v", &c]);
        }
        for n in listed("network", &self.0) {
            let _ = docker(&["network", "rm", &n]);
        }
    }
}

fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{what}{}x{nanos}", std::process::id())
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn task(
    action: Action,
    tenant: &str,
    cluster: &str,
    node: &str,
    config: &Map<String, Value>,
) -> Task {
    let raw = json!({"taskId": format!("{cluster}-{node}-{}", action.lower()), "jobId": "j",
        "clusterId": cluster, "taskName": action.lower().to_uppercase(), "nodeId": node,
        "config": config});
    let mut t = Task::from_json(raw, Duration::from_secs(60)).unwrap();
    t.tenant_id = tenant.to_string();
    t
}

#[tokio::test]
async fn the_docker_provider_passes_the_provider_contract() {
    if !ready() {
        return;
    }
    let prefix = unique("weftct");
    let _cleanup = Cleanup(vec![format!("name={prefix}")]);
    let dir = tempfile::tempdir().unwrap();
    let p = DockerProvider::new(dir.path());
    let fields = obj(json!({"image": IMAGE, "network_prefix": prefix}));
    contract::provider_contract(&p, fields, "node-d").await;
    let name = [format!("name={prefix}")];
    assert!(listed("container", &name).is_empty(), "no container left");
    assert!(listed("network", &name).is_empty(), "no network left");
}

#[tokio::test]
async fn nodes_made_at_once_by_two_provisioners_share_one_network_and_one_key() {
    if !ready() {
        return;
    }
    let (tenant, cluster) = (unique("tenant"), unique("c"));
    let labels = vec![
        format!("{LABEL_CLUSTER}={cluster}"),
        format!("{LABEL_TENANT}={tenant}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p1 = DockerProvider::new(d1.path());
    let p2 = DockerProvider::new(d2.path());
    let base = |n: &str| {
        obj(json!({
            "provider": {"providertype": "docker", "provisioner":
                {"network_prefix": "wefttest", "sshkeyseed": "a long random secret for this test"}},
            "hostname": format!("{n}.example"), "image": IMAGE, "flavor": "small"}))
    };
    let nodes = ["n1", "n2", "n3", "n4"];
    let t = |a: Action, n: &str, c: &Map<String, Value>| task(a, &tenant, &cluster, n, c);
    let (b1, b2, b3, b4) = (base("n1"), base("n2"), base("n3"), base("n4"));
    let (t1, t2, t3, t4) = (
        t(Action::Create, "n1", &b1),
        t(Action::Create, "n2", &b2),
        t(Action::Create, "n3", &b3),
        t(Action::Create, "n4", &b4),
    );
    let made = tokio::join!(
        p1.create(&t1),
        p2.create(&t2),
        p1.create(&t3),
        p2.create(&t4)
    );
    let made = [made.0, made.1, made.2, made.3].map(|r| r.expect("create"));
    let auth: BTreeSet<String> = made
        .iter()
        .map(|o| o.result["ssh-auth"].to_string())
        .collect();
    assert_eq!(auth.len(), 1, "one key per cluster: {auth:?}");
    assert_eq!(labelled("container", &labels).len(), 4);
    let nets = labelled("network", &labels);
    assert_eq!(nets.len(), 1, "one network per cluster: {nets:?}");
    let limits = docker(&[
        "inspect",
        "-f",
        "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.Config.Hostname}}",
        made[0].result["providerid"].as_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(limits.trim(), "1000000000 536870912 n1", "flavor small");

    let mut ready_nodes = Vec::new();
    for (n, out) in nodes.iter().zip(&made) {
        let mut c = base(n);
        c.extend(out.result.clone());
        ready_nodes.push(c);
    }
    let confirm = |i: usize| {
        let (p, n, c) = ([&p1, &p2][i % 2], nodes[i], &ready_nodes[i]);
        let t = t(Action::Confirm, n, c);
        async move { p.confirm(&t).await }
    };
    let c = tokio::join!(confirm(0), confirm(1), confirm(2), confirm(3));
    let confirmed = [c.0, c.1, c.2, c.3].map(|r| r.expect("confirm"));
    let ips: BTreeSet<String> = confirmed
        .iter()
        .map(|o| o.ipaddresses.as_ref().unwrap()["access_v4"].clone())
        .collect();
    assert_eq!(ips.len(), 4, "{ips:?}");
    for (node, out) in ready_nodes.iter_mut().zip(&confirmed) {
        assert_eq!(out.hostname.as_deref(), node["hostname"].as_str());
        node.insert("ipaddresses".into(), json!(out.ipaddresses));
        node.extend(out.result.clone());
    }

    // Over SSH, with the recorded host key: the nodes find each other by hostname.
    let ssh = SshTransport::from_task(&t(Action::Install, "n1", &ready_nodes[0])).unwrap();
    let sh = |l: &str| CommandSpec::new(vec!["sh".into(), "-c".into(), l.into()]);
    let out = ssh
        .run(&sh(
            "hostname; getent hosts n2 | cut -d' ' -f1; getent hosts n4.example | cut -d' ' -f1",
        ))
        .await
        .unwrap();
    let ip = |i: usize| confirmed[i].ipaddresses.as_ref().unwrap()["access_v4"].clone();
    assert_eq!(out.stdout, format!("n1\n{}\n{}\n", ip(1), ip(3)), "{out:?}");

    // Every node is deleted, by either provisioner: nothing is left.
    let del = |i: usize| {
        let (p, n, c) = ([&p2, &p1][i % 2], nodes[i], &ready_nodes[i]);
        let t = t(Action::Delete, n, c);
        async move { p.delete(&t).await }
    };
    let d = tokio::join!(del(0), del(1), del(2), del(3));
    for r in [d.0, d.1, d.2, d.3] {
        r.expect("delete");
    }
    assert!(labelled("container", &labels).is_empty());
    assert!(
        labelled("network", &labels).is_empty(),
        "the network went with the last node"
    );
}

#[tokio::test]
async fn without_a_seed_each_provisioner_keys_its_own_clusters_and_a_foreign_key_is_replaced() {
    if !ready() {
        return;
    }
    let (tenant, cluster) = (unique("tenant"), unique("c"));
    let labels = vec![format!("{LABEL_CLUSTER}={cluster}")];
    let _cleanup = Cleanup::labels(&labels);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (p1, p2) = (
        DockerProvider::new(d1.path()),
        DockerProvider::new(d2.path()),
    );
    let base = obj(json!({"provider": {"providertype": "docker",
        "provisioner": {"image": IMAGE, "network_prefix": "wefttest"}}, "hostname": "a.example"}));
    let t = |a: Action, n: &str| task(a, &tenant, &cluster, n, &base);

    let a = p1.create(&t(Action::Create, "a")).await.unwrap();
    let b = p1.create(&t(Action::Create, "b")).await.unwrap();
    assert_eq!(
        a.result["ssh-auth"], b.result["ssh-auth"],
        "one key per cluster"
    );
    let seed = d1.path().join("docker/ssh-key-seed");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&seed).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the seed is private");

    // Another provisioner with a seed of its own re-runs a CREATE: the container it finds has a
    // key it cannot know, so it makes the node again, with its key.
    let again = p2.create(&t(Action::Create, "a")).await.unwrap();
    assert_ne!(again.result["ssh-auth"], a.result["ssh-auth"]);
    assert_eq!(again.result["providerid"], a.result["providerid"]);
    assert_ne!(again.result["containerid"], a.result["containerid"]);
    assert!(again.stdout.contains("replacing"), "{}", again.stdout);
    let mut node = base.clone();
    node.extend(again.result.clone());
    let confirmed = p2
        .confirm(&task(Action::Confirm, &tenant, &cluster, "a", &node))
        .await
        .unwrap();
    node.insert("ipaddresses".into(), json!(confirmed.ipaddresses));
    node.extend(confirmed.result);
    let ssh =
        SshTransport::from_task(&task(Action::Install, &tenant, &cluster, "a", &node)).unwrap();
    let out = ssh
        .run(&CommandSpec::new(vec!["true".into()]))
        .await
        .expect("the new key logs in");
    assert!(out.success());

    // A stopped container is replaced too.
    let b_name = b.result["providerid"].as_str().unwrap().to_string();
    docker(&["kill", &b_name]).unwrap();
    let b2 = p1.create(&t(Action::Create, "b")).await.unwrap();
    assert!(b2.stdout.contains("not running"), "{}", b2.stdout);
    let running = docker(&["inspect", "-f", "{{.State.Running}}", &b_name]).unwrap();
    assert_eq!(running.trim(), "true");

    for n in ["a", "b"] {
        p1.delete(&t(Action::Delete, n)).await.unwrap();
    }
    assert!(labelled("container", &labels).is_empty());
    assert!(labelled("network", &labels).is_empty());
}

#[tokio::test]
async fn a_missing_image_fails_for_good_naming_the_fix_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let (tenant, cluster) = (unique("tenant"), unique("c"));
    let labels = vec![format!("{LABEL_CLUSTER}={cluster}")];
    let _cleanup = Cleanup::labels(&labels);
    let dir = tempfile::tempdir().unwrap();
    let p = DockerProvider::new(dir.path());
    let config = obj(
        json!({"provider": {"providertype": "docker", "provisioner": {}},
        "hostname": "x.example", "image": "weft-node:no-such-image", "flavor": "small"}),
    );
    let e = p
        .create(&task(Action::Create, &tenant, &cluster, "x", &config))
        .await
        .unwrap_err();
    assert!(!e.retryable, "{e}");
    assert_eq!(
        e.message,
        "image weft-node:no-such-image not found on the Docker Engine; build it with \
         images/build-node-image.sh"
    );
    assert!(labelled("container", &labels).is_empty());
    assert!(labelled("network", &labels).is_empty());

    let mut bad = config.clone();
    bad.insert("flavor".into(), json!("enormous"));
    bad.insert("image".into(), json!(IMAGE));
    let e = p
        .create(&task(Action::Create, &tenant, &cluster, "x", &bad))
        .await
        .unwrap_err();
    assert!(
        !e.retryable && e.message.contains("unknown docker flavor"),
        "{e}"
    );
    assert!(labelled("network", &labels).is_empty());
}

// ---- end to end: the example catalog's kv-web-docker through a real server and agent ----

pub(crate) const T: &str = "acme";

async fn agent(s: &Server, id: &str, tenant_id: &str) -> Agent {
    agent_with(s, tenant_id, s.config(id)).await
}

/// An agent with the docker provider and the shell automator over the example scripts, started
/// with `config` (`Server::config`, perhaps changed), serving tenant `tenant_id` with four workers.
pub(crate) async fn agent_with(s: &Server, tenant_id: &str, config: AgentConfig) -> Agent {
    let data = s.provisioner_data();
    let plugins = Plugins::new()
        .provider(Arc::new(DockerProvider::new(&data)))
        .automator(Arc::new(ShellAutomator::new(vec![scripts_dir()])));
    let agent = Agent::start(config, plugins).await.expect("agent starts");
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    agent
}

pub(crate) async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

/// Waits until the cluster's status is `want`, failing at any status in `bad` or after four
/// minutes (showing the cluster as last seen).
pub(crate) async fn wait_status(s: &Server, id: &str, want: &str, bad: &[&str]) -> Value {
    let end = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let c = cluster(s, id).await;
        let st = c["status"].as_str().unwrap_or_default().to_string();
        if st == want {
            return c;
        }
        let show = || serde_json::to_string_pretty(&c).unwrap();
        assert!(!bad.contains(&st.as_str()), "cluster went {st}: {}", show());
        assert!(
            tokio::time::Instant::now() < end,
            "cluster not {want} in time: {}",
            show()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) const FAILED: [&str; 3] = ["incomplete", "inconsistent", "terminated"];

pub(crate) async fn run_job(
    s: &Server,
    id: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let (code, answer) = s
        .ext(method, T, &format!("/v2/clusters/{id}/{path}"), body)
        .await;
    assert_eq!(code, 200, "{path}: {answer}");
    wait_status(s, id, "active", &FAILED).await
}

async fn get(http: &reqwest::Client, url: &str) -> Option<String> {
    let r = http.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// Hostnames of the nodes running `service`, and the address of each node running it.
fn running(c: &Value, service: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut hosts = BTreeSet::new();
    let mut ips = Vec::new();
    for n in c["nodes"].as_array().unwrap() {
        let p = &n["properties"];
        if p["services"].as_array().unwrap().contains(&json!(service)) {
            hosts.insert(p["hostname"].as_str().unwrap().to_string());
            ips.push(p["ipaddresses"]["bind_v4"].as_str().unwrap().to_string());
        }
    }
    (hosts, ips)
}

/// Waits until the balancer at `lb` answers from exactly the web nodes `want`, each with the
/// stored message; fails after 30 s showing the last answers.
async fn behind_balancer(s: &Server, lb: &str, want: &BTreeSet<String>) {
    let url = format!("http://{lb}:8000/");
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = BTreeSet::new();
        let mut answers = Vec::new();
        for _ in 0..(2 * want.len() + 2) {
            let body = get(&s.http, &url).await;
            if let Some(v) = body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
            {
                if v["message"] == "written to the primary" {
                    if let Some(n) = v["node"].as_str() {
                        seen.insert(n.to_string());
                    }
                }
            }
            answers.push(body);
        }
        if seen == *want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the balancer answers from {seen:?}, not {want:?}; answers: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_web_docker_cluster_serves_across_containers_expands_shrinks_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let (s, tenant_id) = Server::start(T).await;
    let agent = agent(&s, "p-docker", &tenant_id).await;
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "dock", "clusterTemplate": "kv-web-docker", "numMachines": 5})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let c = wait_status(&s, &id, "active", &FAILED).await;

    let nodes = c["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    let ips: BTreeSet<&str> = nodes
        .iter()
        .map(|n| n["properties"]["ipaddresses"]["bind_v4"].as_str().unwrap())
        .collect();
    assert_eq!(ips.len(), 5, "a container and an address per node: {ips:?}");
    assert!(ips.iter().all(|ip| !ip.starts_with("127.")), "{ips:?}");
    assert_eq!(labelled("container", &labels).len(), 5);
    assert_eq!(labelled("network", &labels).len(), 1);

    let (web, _) = running(&c, "web");
    let (_, primary) = running(&c, "kv-primary");
    let (_, replicas) = running(&c, "kv-replica");
    let (_, lb) = running(&c, "lb");
    let (primary, lb) = (primary[0].clone(), lb[0].clone());
    assert!(!web.is_empty() && !replicas.is_empty());

    // Written to the primary, read from every replica (which follow it across containers).
    let r = s
        .http
        .put(format!("http://{primary}:7000/kv/message"))
        .body("written to the primary")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    for rep in &replicas {
        let url = format!("http://{rep}:7000/kv/message");
        until(Duration::from_secs(20), "replication", || async {
            get(&s.http, &url)
                .await
                .filter(|v| v == "written to the primary")
        })
        .await;
    }
    // The balancer answers from every web node, each reading the store.
    behind_balancer(&s, &lb, &web).await;

    // Expand: one more container, a web node the balancer then uses.
    let c = run_job(&s, &id, Method::POST, "nodes", Some(json!({"count": 1}))).await;
    assert_eq!(labelled("container", &labels).len(), 6);
    let (web_now, _) = running(&c, "web");
    assert_eq!(web_now.len(), web.len() + 1, "expand adds a web node");
    behind_balancer(&s, &lb, &web_now).await;

    // Shrink: the newest node goes, with its container; the network stays for the others.
    let c = run_job(&s, &id, Method::DELETE, "nodes", Some(json!({"count": 1}))).await;
    assert_eq!(c["nodes"].as_array().unwrap().len(), 5);
    assert_eq!(labelled("container", &labels).len(), 5);
    assert_eq!(labelled("network", &labels).len(), 1);
    let (web_after, _) = running(&c, "web");
    assert_eq!(web_after, web);
    // Configured against the nodes that remain: every request succeeds at once, none reaches
    // the removed container (each would hang first).
    let lb_url = format!("http://{lb}:8000/");
    let served = crate::common::hundred_requests(&s.http, &lb_url).await;
    assert!(served.is_subset(&web_after), "{served:?} / {web_after:?}");
    behind_balancer(&s, &lb, &web_after).await;

    // Remove a service: the balancer keeps answering every request.
    run_job(&s, &id, Method::DELETE, "services/kv-replica", None).await;
    let served = crate::common::hundred_requests(&s.http, &lb_url).await;
    assert!(served.is_subset(&web_after), "{served:?}");

    // Delete: no container and no network left.
    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated", &["incomplete", "inconsistent"]).await;
    assert!(labelled("container", &labels).is_empty());
    assert!(labelled("network", &labels).is_empty());
    agent.shutdown().await;
}

/// Issue 20 on the Docker provider: a rolling restart of web keeps the balancer answering every
/// request, and a broken upgrade stops at its canary and is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollouts_on_docker_nodes_keep_the_balancer_serving() {
    if !ready() {
        return;
    }
    let (s, tenant_id) = Server::start(T).await;
    let agent = agent(&s, "p-docker-roll", &tenant_id).await;
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "roll", "clusterTemplate": "kv-web-docker", "numMachines": 5})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let c = wait_status(&s, &id, "active", &FAILED).await;
    let (_, lb) = running(&c, "lb");
    crate::rolling::rollouts_keep_serving(&s, T, &id, &lb[0]).await;
    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated", &["incomplete", "inconsistent"]).await;
    assert!(labelled("container", &labels).is_empty());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_cluster_whose_image_is_missing_fails_with_the_reason_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let (s, tenant_id) = Server::start(T).await;
    // The image type names an image this engine does not have.
    let (code, body) = s
        .ext(
            Method::PUT,
            T,
            "/v2/imagetypes/bookworm",
            Some(json!({"name": "bookworm",
                "providermap": {"docker": {"image": "weft-node:no-such-image"}}})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let agent = agent(&s, "p-docker-missing", &tenant_id).await;
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "noimage", "clusterTemplate": "kv-web-docker", "numMachines": 3})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let c = wait_status(&s, &id, "incomplete", &["active", "terminated"]).await;
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "image weft-node:no-such-image not found on the Docker Engine; build it with \
             images/build-node-image.sh"
        ),
        "{c}"
    );
    assert!(message.starts_with("CREATE"), "{message}");
    assert!(labelled("container", &labels).is_empty());
    assert!(labelled("network", &labels).is_empty());

    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated", &["inconsistent"]).await;
    assert!(labelled("container", &labels).is_empty());
    assert!(labelled("network", &labels).is_empty());
    agent.shutdown().await;
}

// ---- drift: a container removed behind weft's back, an orphan, and replace-node ----

/// Runs a drift check and waits for its report.
pub(crate) async fn check(s: &Server, id: &str) -> Value {
    let path = format!("/v2/clusters/{id}/check");
    let (code, run) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 200, "{run}");
    let r = until(Duration::from_secs(120), "the check", || async {
        let r = s.ext(Method::GET, T, &path, None).await.1;
        (r["jobId"] == run["jobId"] && r["jobStatus"] != "running").then_some(r)
    })
    .await;
    assert_eq!(r["jobStatus"], "complete", "{r}");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_removed_container_is_found_by_a_check_and_replace_node_brings_it_back() {
    if !ready() {
        return;
    }
    let (s, tenant_id) = Server::start(T).await;
    let agent = agent(&s, "p-docker-drift", &tenant_id).await;
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "drift", "clusterTemplate": "kv-web-docker", "numMachines": 4})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let c = wait_status(&s, &id, "active", &FAILED).await;
    let (web, _) = running(&c, "web");
    let (_, primary) = running(&c, "kv-primary");
    let (_, lb) = running(&c, "lb");
    let (primary, lb) = (primary[0].clone(), lb[0].clone());
    let r = s
        .http
        .put(format!("http://{primary}:7000/kv/message"))
        .body("written to the primary")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    behind_balancer(&s, &lb, &web).await;

    let r = check(&s, &id).await;
    assert_eq!(r["drift"], false, "{r}");
    assert!(
        r["orphansUnknown"].is_null(),
        "docker lists its machines: {r}"
    );

    // A web node (not the balancer's, not the primary's) loses its container, and a container
    // with the cluster's marks but no node appears.
    let victim = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            let svcs = n["properties"]["services"].as_array().unwrap();
            svcs.contains(&json!("web"))
                && !svcs.contains(&json!("lb"))
                && !svcs.contains(&json!("kv-primary"))
        })
        .expect("a web node")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = labelled("container", &[format!("weft.node={victim}")]);
    assert_eq!(gone.len(), 1, "{gone:?}");
    docker(&["rm", "-f", "-v", &gone[0]]).unwrap();
    let orphan = unique("orphan");
    docker(&[
        "create",
        "--name",
        &orphan,
        "--label",
        &labels[0],
        "--label",
        &labels[1],
        "--label",
        "weft.node=ghost",
        IMAGE,
        "true",
    ])
    .unwrap();

    let r = check(&s, &id).await;
    assert_eq!(r["drift"], true, "{r}");
    let n = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == victim.as_str())
        .unwrap();
    assert_eq!(n["machine"], "missing", "{r}");
    let others_running = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["id"] != victim.as_str())
        .all(|n| n["machine"] == "running");
    assert!(others_running, "{r}");
    let orphans: Vec<&str> = r["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["providerid"].as_str().unwrap())
        .collect();
    assert_eq!(orphans, vec![orphan.as_str()], "{r}");
    assert_eq!(cluster(&s, &id).await["status"], "active");

    // Replaced: a new container for the same node, every web node behind the balancer again.
    let c = run_job(
        &s,
        &id,
        Method::POST,
        &format!("nodes/{victim}/replace"),
        None,
    )
    .await;
    assert_eq!(running(&c, "web").0, web);
    assert_eq!(
        labelled("container", &[format!("weft.node={victim}")]).len(),
        1
    );
    behind_balancer(&s, &lb, &web).await;
    docker(&["rm", "-f", &orphan]).unwrap();
    let r = check(&s, &id).await;
    assert_eq!(r["drift"], false, "{r}");

    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated", &["incomplete", "inconsistent"]).await;
    assert!(labelled("container", &labels).is_empty());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auto_replace_the_janitor_brings_back_a_removed_container() {
    if !ready() {
        return;
    }
    let (s, tenant_id) = Server::start_with(
        T,
        weft_server::config::RawConfig {
            janitor_interval: Some(1),
            check_interval: Some(1),
            ..Default::default()
        },
    )
    .await;
    let agent = agent(&s, "p-docker-auto", &tenant_id).await;
    let (_, mut tpl) = s
        .ext(Method::GET, T, "/v2/clustertemplates/kv-web-docker", None)
        .await;
    tpl["name"] = json!("kv-web-docker-auto");
    tpl["autoReplace"] = json!(true);
    let (code, body) = s
        .ext(Method::POST, T, "/v2/clustertemplates", Some(tpl))
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(
                json!({"name": "auto", "clusterTemplate": "kv-web-docker-auto", "numMachines": 4}),
            ),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let _cleanup = Cleanup::labels(&labels);
    let c = wait_status(&s, &id, "active", &FAILED).await;
    let (web, _) = running(&c, "web");
    let (_, primary) = running(&c, "kv-primary");
    let (_, lb) = running(&c, "lb");
    let (primary, lb) = (primary[0].clone(), lb[0].clone());
    let r = s
        .http
        .put(format!("http://{primary}:7000/kv/message"))
        .body("written to the primary")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    behind_balancer(&s, &lb, &web).await;

    // A web node's container goes; the janitor's check finds it and replaces the node.
    let victim = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            let svcs = n["properties"]["services"].as_array().unwrap();
            svcs.contains(&json!("web"))
                && !svcs.contains(&json!("lb"))
                && !svcs.contains(&json!("kv-primary"))
        })
        .expect("a web node")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = labelled("container", &[format!("weft.node={victim}")]);
    docker(&["rm", "-f", "-v", &gone[0]]).unwrap();
    let check_path = format!("/v2/clusters/{id}/check");
    let r = until(
        Duration::from_secs(180),
        "an automatic replacement",
        || async {
            let r = s.ext(Method::GET, T, &check_path, None).await.1;
            r["replacements"]
                .as_array()
                .and_then(|a| a.first())
                .filter(|a| a["jobId"].as_str().is_some_and(|j| !j.is_empty()))
                .map(|_| r.clone())
        },
    )
    .await;
    assert_eq!(r["replacements"][0]["node"], victim.as_str(), "{r}");
    let job = r["replacements"][0]["jobId"].as_str().unwrap().to_string();
    until(Duration::from_secs(240), "the replacement done", || async {
        let c = cluster(&s, &id).await;
        assert!(
            !FAILED.contains(&c["status"].as_str().unwrap_or_default()),
            "{c}"
        );
        (c["latestJobId"] == job.as_str() && c["status"] == "active").then_some(())
    })
    .await;
    assert_eq!(
        labelled("container", &[format!("weft.node={victim}")]).len(),
        1
    );
    behind_balancer(&s, &lb, &web).await;

    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated", &["incomplete", "inconsistent"]).await;
    agent.shutdown().await;
}
