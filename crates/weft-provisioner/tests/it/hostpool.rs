//! The `hostpool` provider on a pool made of node containers running sshd (the `weft-node:bookworm`
//! image, as in `ssh.rs`): the provider contract suite, claims that keep two nodes off one host,
//! and end to end through a real server and agent: clusters on pool hosts, a cluster larger than
//! the free pool refused before anything is taken, two clusters never sharing a host, delete
//! running the wipe command and giving the hosts back. Needs docker and the image: skipped
//! without them, failed in CI.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::contract::{self, task};
use reqwest::Method;
use serde_json::{json, Map, Value};
use weft_provisioner::hostpool::{HostPoolProvider, CLAIM_FILE};
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::task::Action;
use weft_provisioner::{Agent, Plugins, Provider};

use crate::common::{until, Server};
use crate::ssh::Node;

const T: &str = "acme";

/// What the server gives a node holding pool host `id` (the container `n`), as `user`.
fn lent(n: &Node, id: &str, user: &str) -> Map<String, Value> {
    let key = if user == "root" {
        &n.root_key
    } else {
        &n.user_key
    };
    json!({
        "hostpool": {"provider": "pool", "host": id},
        "ipaddresses": {"access_v4": "127.0.0.1"},
        "ssh-auth": {"user": user, "key": key, "port": n.port},
    })
    .as_object()
    .cloned()
    .unwrap()
}

fn with_provider(mut config: Map<String, Value>, wipe: &str) -> Map<String, Value> {
    config.insert(
        "provider".into(),
        json!({"name": "pool", "providertype": "hostpool", "provisioner": {"wipe_command": wipe}}),
    );
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hostpool_provider_passes_the_contract_and_claims_keep_nodes_apart() {
    let Some(n) = Node::start().await else {
        return;
    };
    let p = HostPoolProvider::new();
    // The contract, as the sudo user; the wipe command leaves a mark.
    let fields = json!({"wipe_command": "echo \"$WEFT_NODE_ID $WEFT_HOST_ID\" > /tmp/wiped; rm -rf /opt/app"})
        .as_object()
        .cloned()
        .unwrap();
    contract::provider_contract_on(&p, fields, lent(&n, "c1", "weft"), "node-a").await;
    assert_eq!(n.exec("cat /tmp/wiped").trim(), "node-a c1");
    assert_eq!(
        n.exec(&format!(
            "test -e {CLAIM_FILE} && echo claimed || echo free"
        ))
        .trim(),
        "free"
    );

    // Node a claims the host; node b cannot, and its DELETE leaves a's host alone.
    let t = |action, node: &str, wipe: &str| {
        task(
            action,
            node,
            with_provider(lent(&n, "c1", "root"), wipe),
            Duration::from_secs(30),
        )
    };
    n.exec("rm -f /tmp/wiped; mkdir -p /opt/app && touch /opt/app/data");
    let made = p.create(&t(Action::Create, "node-a", "")).await.unwrap();
    assert_eq!(made.result["providerid"], "c1");
    assert_eq!(made.result["transport"], "ssh");
    assert_eq!(n.exec(&format!("cat {CLAIM_FILE}")).trim(), "node-a");
    let e = p
        .create(&t(Action::Create, "node-b", ""))
        .await
        .unwrap_err();
    assert!(
        !e.retryable && e.message.contains("claimed by node node-a"),
        "{e}"
    );
    let wipe = "rm -rf /opt/app; touch /tmp/wiped";
    let out = p.delete(&t(Action::Delete, "node-b", wipe)).await.unwrap();
    assert!(out.stdout.contains("left alone"), "{out:?}");
    assert_eq!(
        n.exec("ls /opt/app").trim(),
        "data",
        "not wiped for another node"
    );
    // CONFIRM answers the host's own address to bind to, its name and its key.
    let mut config = with_provider(lent(&n, "c1", "root"), "");
    config.extend(made.result.clone());
    let ok = p
        .confirm(&task(
            Action::Confirm,
            "node-a",
            config.clone(),
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    let ips = ok.ipaddresses.unwrap();
    assert_eq!(ips["access_v4"], "127.0.0.1");
    let inside = n.exec("ip -4 -o route get 1.1.1.1 | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p'");
    assert_eq!(ips["bind_v4"], inside.trim());
    assert_eq!(
        ok.hostname.as_deref(),
        Some(n.exec("hostname -f 2>/dev/null || hostname").trim())
    );
    assert_eq!(ok.result["ssh_host_keys"], made.result["ssh_host_keys"]);
    // A failing wipe keeps the claim, so the retry wipes again.
    config = with_provider(config, "exit 3");
    let e = p
        .delete(&task(
            Action::Delete,
            "node-a",
            config.clone(),
            Duration::from_secs(30),
        ))
        .await
        .unwrap_err();
    assert!(e.retryable && e.message.contains("wipe"), "{e}");
    assert_eq!(n.exec(&format!("cat {CLAIM_FILE}")).trim(), "node-a");
    config = with_provider(config, wipe);
    p.delete(&task(
        Action::Delete,
        "node-a",
        config,
        Duration::from_secs(30),
    ))
    .await
    .unwrap();
    assert_eq!(
        n.exec("test -e /opt/app && echo kept || echo wiped").trim(),
        "wiped"
    );
    assert_eq!(
        n.exec(&format!(
            "test -e {CLAIM_FILE} && echo claimed || echo free"
        ))
        .trim(),
        "free"
    );
}

async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

async fn wait_status(s: &Server, id: &str, want: &str) -> Value {
    until(
        Duration::from_secs(180),
        &format!("cluster {id} {want}"),
        || async {
            let c = cluster(s, id).await;
            match c["status"].as_str().unwrap_or_default() {
                st if st == want => Some(c),
                "incomplete" | "inconsistent" => panic!("cluster went wrong: {c:#}"),
                _ => None,
            }
        },
    )
    .await
}

/// The pool as the API shows it: host id -> (state, node id).
async fn pool(s: &Server) -> BTreeMap<String, (String, Option<String>)> {
    let (code, v) = s
        .ext(Method::GET, T, "/v2/providers/pool/hosts", None)
        .await;
    assert_eq!(code, 200, "{v}");
    let text = v.to_string();
    assert!(!text.contains("PRIVATE KEY"), "a key leaked: {text}");
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap().to_string(),
                (
                    h["state"].as_str().unwrap().to_string(),
                    h["nodeId"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

async fn create(s: &Server, name: &str, size: u64) -> (u16, Value) {
    let body = json!({"name": name, "clusterTemplate": "pooled", "numMachines": size});
    s.ext(Method::POST, T, "/v2/clusters", Some(body)).await
}

/// Node id -> pool host id, for a cluster.
fn hosts_of(c: &Value) -> BTreeMap<String, String> {
    c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_string(),
                n["provisionerResults"]["hostpool"]["host"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusters_run_on_pool_hosts_never_share_one_and_give_them_back_wiped() {
    // Four hosts, started side by side.
    let starts: Vec<_> = (0..4).map(|_| tokio::spawn(Node::start())).collect();
    let mut nodes = Vec::new();
    for s in starts {
        match s.await.unwrap() {
            Some(n) => nodes.push(n),
            None => return,
        }
    }
    let (s, tenant_id) = Server::start(T).await;
    let plugins = Plugins::new()
        .provider(Arc::new(HostPoolProvider::new()))
        .automator(Arc::new(ShellAutomator::new(vec![])));
    let agent = Agent::start(s.config("p-pool"), plugins)
        .await
        .expect("agent starts");
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let script = |lines: &str| json!({"type": "shell", "fields": {"script": format!("#!/bin/bash\nset -e\n{lines}\n")}});
    for (kind, body) in [
        (
            "providers",
            json!({"name": "pool", "providertype": "hostpool", "provisioner": {
            "wipe_command": "rm -rf /var/lib/weft-e2e; echo \"$WEFT_NODE_ID\" > /tmp/wiped"}}),
        ),
        (
            "hardwaretypes",
            json!({"name": "pooled", "providermap": {"pool": {"flavor": "role=node"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "pooled-os", "providermap": {"pool": {"image": "bookworm"}}}),
        ),
        (
            "services",
            json!({"name": "marker", "provisioner": {"actions": {
            "install": script("mkdir -p /var/lib/weft-e2e\necho \"$WEFT_NODE_ID\" > /var/lib/weft-e2e/marker"),
            "start": script("echo \"$WEFT_HOSTNAME $WEFT_IP\" > /var/lib/weft-e2e/started")}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "pooled",
            "compatibility": {"services": ["marker"], "hardwaretypes": ["pooled"], "imagetypes": ["pooled-os"]},
            "defaults": {"services": ["marker"], "provider": "pool", "hardwaretype": "pooled", "imagetype": "pooled-os"},
            "constraints": {"size": {"min": 1, "max": 10}}}),
        ),
    ] {
        let (code, v) = s
            .ext(Method::POST, T, &format!("/v2/{kind}"), Some(body))
            .await;
        assert_eq!(code, 200, "{kind}: {v}");
    }
    // The pool: two hosts reached as root, two as a sudo user.
    let mut container = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let id = format!("h{}", i + 1);
        let (user, key) = if i < 2 {
            ("root", &n.root_key)
        } else {
            ("weft", &n.user_key)
        };
        let body = json!({"id": id, "address": "127.0.0.1", "port": n.port, "user": user, "key": key,
            "labels": {"role": "node"}});
        let (code, v) = s
            .ext(Method::POST, T, "/v2/providers/pool/hosts", Some(body))
            .await;
        assert_eq!(code, 200, "{v}");
        container.insert(id, n);
    }
    let all_free = pool(&s).await;
    assert!(all_free.values().all(|(st, _)| st == "free"));

    // A three-node cluster runs on three hosts, each running its node's service.
    let (code, v) = create(&s, "a", 3).await;
    assert_eq!(code, 200, "{v}");
    let a = v["id"].as_str().unwrap().to_string();
    let ca = wait_status(&s, &a, "active").await;
    let a_hosts = hosts_of(&ca);
    assert_eq!(
        a_hosts.values().collect::<BTreeSet<_>>().len(),
        3,
        "{a_hosts:?}"
    );
    for n in ca["nodes"].as_array().unwrap() {
        let node_id = n["id"].as_str().unwrap();
        let c = container[&a_hosts[node_id]];
        assert_eq!(c.exec("cat /var/lib/weft-e2e/marker").trim(), node_id);
        assert_eq!(c.exec(&format!("cat {CLAIM_FILE}")).trim(), node_id);
        let p = &n["properties"];
        let started = c.exec("cat /var/lib/weft-e2e/started");
        assert_eq!(
            started.trim(),
            format!(
                "{} {}",
                p["hostname"].as_str().unwrap(),
                p["ipaddresses"]["bind_v4"].as_str().unwrap()
            )
        );
        assert_eq!(p["ipaddresses"]["access_v4"], "127.0.0.1");
    }

    // Two more nodes than the one free host: refused before anything is taken.
    let before = pool(&s).await;
    let (code, v) = create(&s, "b", 2).await;
    assert_eq!(code, 409, "{v}");
    let msg = v.as_str().unwrap_or_default();
    assert!(
        msg.contains("pool") && msg.contains("2 new nodes") && msg.contains("1 free"),
        "{msg}"
    );
    assert_eq!(pool(&s).await, before, "nothing was taken");
    let (_, list) = s.ext(Method::GET, T, "/v2/clusters", None).await;
    assert_eq!(
        list.as_array().unwrap().len(),
        1,
        "no cluster was made: {list}"
    );

    // One fits, on the host nobody holds.
    let (code, v) = create(&s, "b", 1).await;
    assert_eq!(code, 200, "{v}");
    let b = v["id"].as_str().unwrap().to_string();
    let b_hosts = hosts_of(&wait_status(&s, &b, "active").await);
    let a_set: BTreeSet<&String> = a_hosts.values().collect();
    assert!(
        b_hosts.values().all(|h| !a_set.contains(h)),
        "{a_hosts:?} {b_hosts:?}"
    );
    assert!(pool(&s).await.values().all(|(st, _)| st == "in_use"));

    // Deleting a wipes its hosts and gives them back.
    let (code, v) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{a}"), None)
        .await;
    assert_eq!(code, 200, "{v}");
    wait_status(&s, &a, "terminated").await;
    let back = until(
        Duration::from_secs(30),
        "a's hosts back in the pool",
        || async {
            let p = pool(&s).await;
            let free: BTreeSet<String> = p
                .iter()
                .filter(|(_, (st, _))| st == "free")
                .map(|(h, _)| h.clone())
                .collect();
            (free.len() == 3).then_some(free)
        },
    )
    .await;
    assert_eq!(back, a_hosts.values().cloned().collect());
    for (node_id, h) in &a_hosts {
        let c = container[h];
        assert_eq!(
            c.exec("cat /tmp/wiped").trim(),
            node_id,
            "host {h} was wiped"
        );
        assert_eq!(
            c.exec("test -e /var/lib/weft-e2e && echo kept || echo gone")
                .trim(),
            "gone"
        );
        assert_eq!(
            c.exec(&format!(
                "test -e {CLAIM_FILE} && echo claimed || echo free"
            ))
            .trim(),
            "free"
        );
    }
    // b's host was not touched.
    let bh = container[b_hosts.values().next().unwrap()];
    assert_eq!(
        bh.exec("test -e /tmp/wiped && echo wiped || echo untouched")
            .trim(),
        "untouched"
    );

    // The wiped hosts serve the next cluster.
    let (code, v) = create(&s, "c", 3).await;
    assert_eq!(code, 200, "{v}");
    let c = v["id"].as_str().unwrap().to_string();
    let c_hosts = hosts_of(&wait_status(&s, &c, "active").await);
    assert_eq!(c_hosts.values().cloned().collect::<BTreeSet<_>>(), back);
    agent.shutdown().await;
}
