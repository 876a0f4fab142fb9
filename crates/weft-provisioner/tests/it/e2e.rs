//! The example catalog end to end: a kv-web cluster made by the local provider and the shell
//! automator through the real server, its services answering, and its deletion leaving nothing.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{hundred_requests, until, Server};

const T: &str = "acme";

fn pids_under(dir: &Path, out: &mut Vec<u32>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            pids_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "pid") {
            if let Some(pid) = std::fs::read_to_string(&p)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                out.push(pid);
            }
        }
    }
}

/// Alive: exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn status(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

async fn wait_status(s: &Server, id: &str, want: &str) -> Value {
    until(
        Duration::from_secs(240),
        &format!("cluster {want}"),
        || async {
            let c = status(s, id).await;
            let st = c["status"].as_str().unwrap_or_default().to_string();
            if st == want {
                return Some(c);
            }
            if ["incomplete", "inconsistent", "terminated"].contains(&st.as_str()) {
                panic!(
                    "cluster went {st}: {}",
                    serde_json::to_string_pretty(&c).unwrap()
                );
            }
            None
        },
    )
    .await
}

/// Calls a cluster route that starts a job and waits until the cluster is active again.
async fn run_job(s: &Server, id: &str, method: Method, path: &str, body: Option<Value>) {
    let (code, answer) = s
        .ext(method, T, &format!("/v2/clusters/{id}/{path}"), body)
        .await;
    assert_eq!(code, 200, "{path}: {answer}");
    wait_status(s, id, "active").await;
}

/// Runs the cluster's health checks and waits for the grid of that run; the cluster stays active.
async fn health_run(s: &Server, id: &str) -> Value {
    let path = format!("/v2/clusters/{id}/health");
    let (code, run) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 200, "{run}");
    let grid = until(Duration::from_secs(120), "the health run", || async {
        let g = s.ext(Method::GET, T, &path, None).await.1;
        (g["jobId"] == run["jobId"] && g["jobStatus"] != "running").then_some(g)
    })
    .await;
    assert_eq!(status(s, id).await["status"], "active");
    grid
}

/// Every (service, state) of a health grid.
fn health_states(grid: &Value) -> BTreeSet<(String, String)> {
    grid["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["services"].as_array().unwrap())
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("service"), text("state"))
        })
        .collect()
}

async fn get(http: &reqwest::Client, url: &str) -> Option<String> {
    let r = http.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// The hostnames of a cluster's web nodes.
fn web_nodes(c: &Value) -> BTreeSet<String> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_web_cluster_runs_serves_and_is_deleted_without_a_trace() {
    let (s, tenant_id) = Server::start(T).await;
    let agent = s.agent("p-e2e").await;
    // The server's side of worker placement: give the tenant workers on this provisioner.
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "shop", "clusterTemplate": "kv-web", "numMachines": 4})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let c = wait_status(&s, &id, "active").await;

    // Who runs what, at which address.
    let nodes = c["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    let mut ips = BTreeSet::new();
    let (mut web, mut primary, mut replicas, mut lb) = (BTreeSet::new(), None, Vec::new(), None);
    for n in nodes {
        let p = &n["properties"];
        let ip = p["ipaddresses"]["bind_v4"].as_str().unwrap().to_string();
        assert!(ip.starts_with("127."), "{ip}");
        assert_eq!(p["ipaddresses"]["access_v4"], p["ipaddresses"]["bind_v4"]);
        ips.insert(ip.clone());
        for svc in p["services"].as_array().unwrap() {
            match svc.as_str().unwrap() {
                "web" => {
                    web.insert(p["hostname"].as_str().unwrap().to_string());
                }
                "kv-primary" => primary = Some(ip.clone()),
                "kv-replica" => replicas.push(ip.clone()),
                "lb" => lb = Some(ip.clone()),
                other => panic!("unexpected service {other}"),
            }
        }
    }
    assert_eq!(ips.len(), 4, "every node has its own address");
    let (primary, lb) = (primary.unwrap(), lb.unwrap());
    assert!(!replicas.is_empty() && !web.is_empty());

    // Data written to the primary is read from every replica.
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

    // The balancer answers from every web node, with the stored message.
    let seen = until(
        Duration::from_secs(20),
        "every web node behind the balancer",
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..(2 * web.len() + 2) {
                let body = get(&s.http, &format!("http://{lb}:8000/")).await?;
                let v: Value = serde_json::from_str(&body).ok()?;
                if v["message"] != "written to the primary" || v["greeting"] != "hello from weft" {
                    return None;
                }
                seen.insert(v["node"].as_str()?.to_string());
            }
            Some(seen)
        },
    )
    .await;
    assert_eq!(seen, web);

    // The example services' health checks pass while they run...
    let grid = health_run(&s, &id).await;
    assert_eq!(grid["healthy"], true, "{grid}");
    assert!(
        health_states(&grid).iter().all(|(_, st)| st == "healthy"),
        "{grid}"
    );

    // Stop, start and restart through the API.
    let lb_url = format!("http://{lb}:8000/");
    run_job(&s, &id, Method::POST, "services/stop", None).await;
    assert!(
        get(&s.http, &lb_url).await.is_none(),
        "stopped services do not answer"
    );
    // ... and fail once they are stopped.
    let grid = health_run(&s, &id).await;
    assert_eq!(grid["healthy"], false, "{grid}");
    assert!(
        health_states(&grid).iter().all(|(_, st)| st == "unhealthy"),
        "{grid}"
    );
    run_job(&s, &id, Method::POST, "services/start", None).await;
    assert!(
        get(&s.http, &lb_url).await.is_some(),
        "started services answer"
    );
    run_job(&s, &id, Method::POST, "services/web/restart", None).await;
    assert!(
        get(&s.http, &lb_url).await.is_some(),
        "restarted services answer"
    );

    // Reconfigure: a new greeting, and the web nodes show it after their restart.
    let mut config = s
        .ext(Method::GET, T, &format!("/v2/clusters/{id}/config"), None)
        .await
        .1;
    config["web"]["greeting"] = json!("reconfigured by weft");
    run_job(
        &s,
        &id,
        Method::PUT,
        "config",
        Some(json!({"config": config})),
    )
    .await;
    let body = get(&s.http, &lb_url).await.expect("the balancer answers");
    assert!(body.contains("reconfigured by weft"), "{body}");

    // Expand by one node: a new web node, which the balancer then uses.
    run_job(&s, &id, Method::POST, "nodes", Some(json!({"count": 1}))).await;
    let web_now = web_nodes(&status(&s, &id).await);
    assert_eq!(web_now.len(), web.len() + 1, "expand adds a web node");
    let seen = until(
        Duration::from_secs(20),
        "the new web node behind the balancer",
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..(2 * web_now.len() + 2) {
                let body = get(&s.http, &lb_url).await?;
                let v: Value = serde_json::from_str(&body).ok()?;
                seen.insert(v["node"].as_str()?.to_string());
            }
            (seen == web_now).then_some(seen)
        },
    )
    .await;
    assert_eq!(seen, web_now);

    // Shrink by one node: the balancer is configured against the nodes that remain, before the
    // leaving node goes, so every request succeeds and none reaches the removed node (issue 13).
    run_job(&s, &id, Method::DELETE, "nodes", Some(json!({"count": 1}))).await;
    let web_after = web_nodes(&status(&s, &id).await);
    assert_eq!(
        web_after.len(),
        web_now.len() - 1,
        "shrink removes a web node"
    );
    let removed: Vec<&String> = web_now.difference(&web_after).collect();
    let served = hundred_requests(&s.http, &lb_url).await;
    assert!(
        served.is_subset(&web_after),
        "after shrink the balancer named {served:?}; the web nodes are {web_after:?}, {removed:?} left"
    );

    // Remove a service: the balancer keeps answering every request.
    run_job(&s, &id, Method::DELETE, "services/kv-replica", None).await;
    let served = hundred_requests(&s.http, &lb_url).await;
    assert!(served.is_subset(&web_after), "{served:?}");

    // Delete: no process and no file left.
    let nodes_dir = s.provisioner_data().join("local/nodes");
    let mut pids = Vec::new();
    pids_under(&nodes_dir, &mut pids);
    assert!(pids.len() >= 4, "the services wrote pid files: {pids:?}");
    assert!(pids.iter().all(|p| alive(*p)));
    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated").await;
    for pid in &pids {
        assert!(!alive(*pid), "process {pid} outlived its node");
    }
    let left: Vec<_> = std::fs::read_dir(&nodes_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "node directories left: {left:?}");
    // The address registry is machine-wide; none of its reservations may still point at this test's nodes.
    let registry = std::env::var_os("WEFT_LOCAL_ADDRESSES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("weft-local-addresses"));
    let mine = s.provisioner_data().to_string_lossy().to_string();
    let addrs: Vec<_> = std::fs::read_dir(&registry)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|h| h.starts_with(&mine)))
        .map(|e| e.path())
        .collect();
    assert!(addrs.is_empty(), "addresses left reserved: {addrs:?}");
    assert!(get(&s.http, &format!("http://{lb}:8000/health"))
        .await
        .is_none());

    agent.shutdown().await;
    let (code, _) = s
        .ext(Method::GET, "superadmin", "/v2/provisioners/p-e2e", None)
        .await;
    assert_eq!(code, 404, "the provisioner unregistered on shutdown");
}

/// Issue 20 on the local provider: a rolling restart of web keeps the balancer answering every
/// request, and a broken upgrade stops at its canary and is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollouts_on_local_nodes_keep_the_balancer_serving() {
    let (s, tenant_id) = Server::start(T).await;
    let agent = s.agent("p-roll").await;
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "roll", "clusterTemplate": "kv-web", "numMachines": 5})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let c = wait_status(&s, &id, "active").await;
    let lb = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            n["properties"]["services"]
                .as_array()
                .unwrap()
                .contains(&json!("lb"))
        })
        .map(|n| {
            n["properties"]["ipaddresses"]["bind_v4"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .unwrap();
    crate::rolling::rollouts_keep_serving(&s, T, &id, &lb).await;
    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "terminated").await;
    agent.shutdown().await;
}
