//! Drift end to end on the local provider with the example catalog: a node whose processes are
//! killed behind weft's back is found by a check (its machine `stopped`, its services unhealthy),
//! `replace-node` brings the cluster back to serving on every node, and with a template's
//! `autoReplace` the janitor does both by itself.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use weft_server::config::RawConfig;

use crate::common::{until, Server};

const T: &str = "acme";

async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

async fn wait_active(s: &Server, id: &str) -> Value {
    until(Duration::from_secs(240), "cluster active", || async {
        let c = cluster(s, id).await;
        let st = c["status"].as_str().unwrap_or_default().to_string();
        assert!(
            !["incomplete", "inconsistent", "terminated"].contains(&st.as_str()),
            "cluster went {st}: {c}"
        );
        (st == "active").then_some(c)
    })
    .await
}

async fn agent(s: &Server, tenant_id: &str) -> weft_provisioner::Agent {
    let agent = s.agent("p-drift").await;
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

/// Runs a check and waits for its report; the cluster's status does not change.
async fn check(s: &Server, id: &str) -> Value {
    let path = format!("/v2/clusters/{id}/check");
    let (code, run) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 200, "{run}");
    let r = until(Duration::from_secs(120), "the check", || async {
        let r = s.ext(Method::GET, T, &path, None).await.1;
        (r["jobId"] == run["jobId"] && r["jobStatus"] != "running").then_some(r)
    })
    .await;
    assert_eq!(r["jobStatus"], "complete", "{r}");
    assert_eq!(cluster(s, id).await["status"], "active");
    r
}

fn node<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("node {id} in {r}"))
}

/// A web node that runs neither the primary nor the balancer (the one whose processes die), and
/// the balancer's address.
fn victim(c: &Value) -> (String, String) {
    let mut web = None;
    let mut lb = None;
    for n in c["nodes"].as_array().unwrap() {
        let svcs: BTreeSet<&str> = n["properties"]["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        if svcs.contains("lb") {
            lb = n["properties"]["ipaddresses"]["bind_v4"]
                .as_str()
                .map(String::from);
        }
        if svcs.contains("web") && !svcs.contains("lb") && !svcs.contains("kv-primary") {
            web = n["id"].as_str().map(String::from);
        }
    }
    (web.expect("a web node"), lb.expect("a balancer"))
}

/// Kills every process of local node `id` (each carries `WEFT_LOCAL_NODE=id`), as a crash would.
fn kill_node_processes(id: &str) -> usize {
    let needle = format!("{}={id}", weft_provisioner::transport::NODE_MARK);
    let mut killed = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let marked = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()));
        if marked {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            killed += 1;
        }
    }
    killed
}

/// The web nodes the balancer at `lb` answers from, asked until it is every one of `want`.
async fn serving(s: &Server, lb: &str, want: &BTreeSet<String>) {
    let url = format!("http://{lb}:8000/");
    until(
        Duration::from_secs(30),
        "every web node serving",
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..(2 * want.len() + 4) {
                let r = s.http.get(&url).send().await.ok()?;
                let v: Value = r.json().await.ok()?;
                if v["greeting"] != "hello from weft" {
                    return None;
                }
                seen.insert(v["node"].as_str()?.to_string());
            }
            (seen == *want).then_some(())
        },
    )
    .await
}

fn web_hosts(c: &Value) -> BTreeSet<String> {
    c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| {
            n["properties"]["services"]
                .as_array()
                .unwrap()
                .contains(&json!("web"))
        })
        .map(|n| n["properties"]["hostname"].as_str().unwrap().to_string())
        .collect()
}

async fn create(s: &Server, template: &str) -> String {
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "drifty", "clusterTemplate": template, "numMachines": 4})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    c["id"].as_str().unwrap().to_string()
}

async fn delete(s: &Server, id: &str) {
    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    until(Duration::from_secs(120), "cluster deleted", || async {
        (cluster(s, id).await["status"] == "terminated").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_local_node_is_found_by_a_check_and_replaced() {
    let (s, tenant_id) = Server::start(T).await;
    let agent = agent(&s, &tenant_id).await;
    let id = create(&s, "kv-web").await;
    let c = wait_active(&s, &id).await;
    let web = web_hosts(&c);
    let (victim, lb) = victim(&c);

    // All is as weft left it.
    let r = check(&s, &id).await;
    assert_eq!(r["drift"], false, "{r}");
    assert!(r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["machine"] == "running"));
    // The local provider cannot list its machines: orphans are not looked for, and it says so.
    assert!(r["orphansUnknown"].is_string(), "{r}");

    // A node's processes die behind weft's back: the check finds it.
    assert!(kill_node_processes(&victim) > 0);
    let r = check(&s, &id).await;
    assert_eq!(r["drift"], true, "{r}");
    let n = node(&r, &victim);
    assert_eq!(n["machine"], "stopped", "{r}");
    let web_cell = n["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["service"] == "web")
        .unwrap();
    assert_eq!(web_cell["state"], "unhealthy", "{r}");
    // A bad node id is a 404 naming it; a dry run plans without changing anything.
    let (code, body) = s
        .ext(
            Method::POST,
            T,
            &format!("/v2/clusters/{id}/nodes/nope/replace"),
            None,
        )
        .await;
    assert_eq!(code, 404, "{body}");
    assert!(body.to_string().contains("nope"), "{body}");
    let (code, plan) = s
        .ext(
            Method::POST,
            T,
            &format!("/v2/clusters/{id}/nodes/{victim}/replace?dryrun=true"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{plan}");
    assert_eq!(plan["action"], "REPLACE_NODE", "{plan}");
    assert_eq!(cluster(&s, &id).await["status"], "active");

    // Replaced: the cluster serves from every web node again, and a check finds nothing.
    let (code, run) = s
        .ext(
            Method::POST,
            T,
            &format!("/v2/clusters/{id}/nodes/{victim}/replace"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{run}");
    assert_eq!(run["node"], victim.as_str());
    let c = wait_active(&s, &id).await;
    assert_eq!(web_hosts(&c), web, "the same nodes");
    serving(&s, &lb, &web).await;
    let r = check(&s, &id).await;
    assert_eq!(r["drift"], false, "{r}");

    delete(&s, &id).await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auto_replace_the_janitor_replaces_a_dead_node_by_itself() {
    let (s, tenant_id) = Server::start_with(
        T,
        RawConfig {
            janitor_interval: Some(1),
            check_interval: Some(1),
            auto_replace_per_hour: Some(1),
            ..Default::default()
        },
    )
    .await;
    let agent = agent(&s, &tenant_id).await;
    // kv-web, opting in to automatic replacement.
    let (_, mut tpl) = s
        .ext(Method::GET, T, "/v2/clustertemplates/kv-web", None)
        .await;
    tpl["name"] = json!("kv-web-auto");
    tpl["autoReplace"] = json!(true);
    let (code, body) = s
        .ext(Method::POST, T, "/v2/clustertemplates", Some(tpl))
        .await;
    assert_eq!(code, 200, "{body}");
    let (_, tpl) = s
        .ext(Method::GET, T, "/v2/clustertemplates/kv-web-auto", None)
        .await;
    assert_eq!(tpl["autoReplace"], true, "{tpl}");

    let id = create(&s, "kv-web-auto").await;
    let c = wait_active(&s, &id).await;
    let web = web_hosts(&c);
    let (victim, lb) = victim(&c);
    let check_path = format!("/v2/clusters/{id}/check");
    // The janitor checks by itself, and finds nothing.
    until(
        Duration::from_secs(60),
        "a clean periodic check",
        || async {
            let r = s.ext(Method::GET, T, &check_path, None).await.1;
            (r["jobStatus"] == "complete" && r["drift"] == false).then_some(())
        },
    )
    .await;

    assert!(kill_node_processes(&victim) > 0);
    // ... then finds the dead node and replaces it, once.
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
    let done = &r["replacements"][0];
    assert_eq!(done["node"], victim.as_str(), "{r}");
    let job = done["jobId"].as_str().unwrap().to_string();
    // The cluster serves from every web node again, and the next checks find nothing.
    until(Duration::from_secs(240), "the replacement done", || async {
        let c = cluster(&s, &id).await;
        (c["latestJobId"] == job.as_str() && c["status"] == "active").then_some(())
    })
    .await;
    wait_active(&s, &id).await;
    serving(&s, &lb, &web).await;
    until(
        Duration::from_secs(120),
        "a clean check after it",
        || async {
            let r = s.ext(Method::GET, T, &check_path, None).await.1;
            (r["jobStatus"] == "complete" && r["drift"] == false).then_some(r)
        },
    )
    .await;
    let r = s.ext(Method::GET, T, &check_path, None).await.1;
    assert_eq!(r["replacements"].as_array().unwrap().len(), 1, "{r}");

    delete(&s, &id).await;
    agent.shutdown().await;
}
