//! Rolling changes on a real kv-web cluster (issue 20), shared by the local and the Docker end to
//! end tests: a rolling restart of `web` one node at a time keeps the balancer answering every
//! request, and an upgrade to a `web` whose health check fails stops after the canary and is
//! rolled back, the broken version never served from more than the canary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{until, Server};

const BROKEN: &str = "broken-v2";

/// What the balancer answered while a change ran.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    pub ok: usize,
    pub failures: Vec<String>,
    /// Web nodes (hostnames) that answered with the broken version's greeting.
    pub broken_from: BTreeSet<String>,
    pub served: BTreeSet<String>,
}

/// Sends requests through the balancer, 50 a second, until the returned flag is set.
fn load(http: reqwest::Client, url: String) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Traffic>) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    let task = tokio::spawn(async move {
        let mut t = Traffic::default();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !done.load(Ordering::SeqCst) {
            tick.tick().await;
            let answer = http.get(&url).timeout(Duration::from_secs(10)).send().await;
            let r = match answer {
                Ok(r) => r,
                Err(e) => {
                    t.failures.push(format!("{e:?}"));
                    continue;
                }
            };
            let code = r.status();
            let body = r.text().await.unwrap_or_default();
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            match v["node"].as_str() {
                Some(node) if code.is_success() => {
                    t.ok += 1;
                    t.served.insert(node.to_string());
                    if v["greeting"] == BROKEN {
                        t.broken_from.insert(node.to_string());
                    }
                }
                _ => t.failures.push(format!("{code}: {body}")),
            }
        }
        t
    });
    (stop, task)
}

async fn finish_load(stop: Arc<AtomicBool>, task: tokio::task::JoinHandle<Traffic>) -> Traffic {
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task")
}

async fn cluster(s: &Server, tenant: &str, id: &str) -> Value {
    s.ext(Method::GET, tenant, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

async fn latest_plan(s: &Server, tenant: &str, id: &str) -> Value {
    let plans = s
        .ext(
            Method::GET,
            tenant,
            &format!("/v2/clusters/{id}/plans"),
            None,
        )
        .await
        .1;
    plans[0].clone()
}

/// Waits until the cluster is active with `job` (or a job after it) done; fails on a failure.
async fn active(s: &Server, tenant: &str, id: &str) -> Value {
    until(Duration::from_secs(300), "the cluster active", || async {
        let c = cluster(s, tenant, id).await;
        match c["status"].as_str().unwrap_or_default() {
            "active" => Some(c),
            "pending" => None,
            other => panic!("cluster went {other}: {c}"),
        }
    })
    .await
}

/// Node id -> hostname of the web nodes.
fn web_hosts(c: &Value) -> BTreeMap<String, String> {
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
        .map(|n| {
            let host = n["properties"]["hostname"].as_str().unwrap().to_string();
            (n["id"].as_str().unwrap().to_string(), host)
        })
        .collect()
}

/// Runs both rollouts on the active kv-web cluster `id` whose balancer listens at `lb`.
pub(crate) async fn rollouts_keep_serving(s: &Server, tenant: &str, id: &str, lb: &str) {
    let c = cluster(s, tenant, id).await;
    let webs = web_hosts(&c);
    assert!(
        webs.len() >= 2,
        "a rolling restart needs two web nodes: {webs:?}"
    );
    let url = format!("http://{lb}:8000/");

    // A rolling restart of web, one node at a time behind the health gate: not one request fails.
    let (stop, task) = load(s.http.clone(), url.clone());
    let body = json!({"rollout": {"canaries": 1, "maxInFlight": 1}});
    let path = format!("/v2/clusters/{id}/services/web/restart");
    let (code, answer) = s.ext(Method::POST, tenant, &path, Some(body)).await;
    assert_eq!(code, 200, "{answer}");
    active(s, tenant, id).await;
    let traffic = finish_load(stop, task).await;
    let plan = latest_plan(s, tenant, id).await;
    assert_eq!(plan["action"], "RESTART_SERVICES");
    let changed: BTreeSet<&str> = plan["rollout"]["changedNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let all: BTreeSet<&str> = webs.keys().map(String::as_str).collect();
    assert_eq!(changed, all, "every web node restarted: {plan}");
    assert!(traffic.ok >= 20, "too little traffic to tell: {traffic:?}");
    assert!(
        traffic.failures.is_empty(),
        "{} of {} requests failed during the rolling restart: {:?}",
        traffic.failures.len(),
        traffic.ok + traffic.failures.len(),
        traffic.failures
    );

    // An upgrade to a web that answers a broken greeting and fails its check: it stops after the
    // canary, which is rolled back; no other node ever serves the broken version.
    let (_, mut web) = s.ext(Method::GET, tenant, "/v2/services/web", None).await;
    let actions = &mut web["provisioner"]["actions"];
    actions["start"] = json!({"type": "shell", "fields": {"script":
        format!("#!/usr/bin/env bash\nexport WEFT_CONFIG_WEB_GREETING={BROKEN}\nexec \"$WEFT_SCRIPTS/web.sh\" start\n")}});
    actions["healthcheck"] = json!({"type": "shell", "tries": 1, "fields": {"script":
        "#!/usr/bin/env bash\necho 'web v2 answers a broken greeting' >&2\nexit 1\n"}});
    let (code, answer) = s
        .ext(Method::PUT, tenant, "/v2/services/web", Some(web))
        .await;
    assert_eq!(code, 200, "{answer}");
    let (stop, task) = load(s.http.clone(), url.clone());
    let body = json!({"rollout": {"onFailure": "rollback"}});
    let path = format!("/v2/clusters/{id}/services/web/upgrade");
    let (code, answer) = s.ext(Method::POST, tenant, &path, Some(body)).await;
    assert_eq!(code, 200, "{answer}");
    let upgrade = latest_plan(s, tenant, id).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The upgrade fails its gate and starts the revert, which then runs to the end. The failed
    // upgrade settles the cluster in its own commit and the revert starts just after: until then
    // the cluster reads `inconsistent` without an outcome, so only a cluster that has moved on to
    // another job without one is answered at once (with the cluster's message, for the assert).
    let report = until(
        Duration::from_secs(300),
        "the upgrade's outcome",
        || async {
            let p = s
                .ext(
                    Method::GET,
                    tenant,
                    &format!("/v2/clusters/{id}/plans/{upgrade}"),
                    None,
                )
                .await
                .1;
            if p["rollout"]["outcome"].as_str().is_some() {
                return Some(p);
            }
            let c = cluster(s, tenant, id).await;
            let status = c["status"].as_str().unwrap_or_default();
            let moved_on = c["latestJobId"] != upgrade.as_str();
            (status != "pending" && moved_on).then(|| json!({"cluster": c, "plan": p}))
        },
    )
    .await;
    let r = &report["rollout"];
    assert_eq!(r["outcome"], "rollingBack", "{report}");
    let canary = r["changedNodes"][0].as_str().unwrap().to_string();
    assert_eq!(r["changedNodes"], json!([canary]), "{report}");
    assert_eq!(r["failedGate"]["node"], canary.as_str());
    let revert = r["revertJob"].as_str().unwrap().to_string();
    let c = active(s, tenant, id).await;
    assert_eq!(c["status"], "active");
    assert_eq!(latest_plan(s, tenant, id).await["id"], revert.as_str());
    let traffic = finish_load(stop, task).await;
    let canary_host = webs[&canary].clone();
    assert!(
        traffic
            .broken_from
            .is_subset(&BTreeSet::from([canary_host.clone()])),
        "the broken version was served from {:?}; the canary is {canary_host}",
        traffic.broken_from
    );
    // After the revert no node serves it.
    for _ in 0..(2 * webs.len() + 2) {
        let r = s.http.get(&url).send().await.expect("the balancer answers");
        let body = r.text().await.unwrap_or_default();
        assert!(!body.contains(BROKEN), "after the revert: {body}");
    }
}
