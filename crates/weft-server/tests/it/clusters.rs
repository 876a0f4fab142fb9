//! The engine through the API: clusters created, run by a scripted worker over the provisioner API
//! (take and finish), failed and retried, deleted; who sees which cluster.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::Method;
use serde_json::{json, Value};

use crate::common::{admin, user, Harness, Who};

pub(crate) const T: &str = "acme";

/// A tenant with a provisioner, the `local` provider type and `shell` automator, two hardware
/// types, an image, services `a` and `b` (b requires a at runtime) and template `t`.
pub(crate) async fn setup(h: &Harness) -> String {
    h.tenant(T).await;
    h.provisioner("p1", 10).await;
    // p1 holds a worker of the tenant: only then may it take the tenant's tasks.
    h.workers(T, 1).await;
    let local = json!({"name": "local", "parameters": {"user": {"fields": {
        "token": {"label": "token", "type": "password", "sensitive": true}}}}});
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/local",
        local.to_string(),
    )
    .await
    .expect(200);
    let shell = json!({"name": "shell", "parameters": {"admin": {"fields": {"script": {"label": "script", "type": "text"}}}}});
    h.internal(
        Method::PUT,
        "/v2/plugins/automatortypes/shell",
        shell.to_string(),
    )
    .await
    .expect(200);
    let a = admin(T);
    let posts = [
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "host", "providermap": {"local": {"image": "img", "sshuser": "weft"}}}),
        ),
        ("services", service("a", &[])),
        ("services", service("b", &["a"])),
        (
            "clustertemplates",
            json!({"name": "t",
            "defaults": {"services": ["a", "b"], "provider": "local", "config": {"peer": "%ip.service.a%", "n": "%num.service.b%"}},
            "constraints": {"size": {"min": 1, "max": 10}, "services": {"a": {"quantities": {"min": 1, "max": 1}}}}}),
        ),
    ];
    for (kind, body) in posts {
        h.post(a, &format!("/v2/{kind}"), body.to_string())
            .await
            .expect(200);
    }
    h.tenant_id(T).await
}

fn service(name: &str, requires: &[&str]) -> Value {
    let action = |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-{name}.sh"), "me": "%host.self%"}});
    json!({"name": name, "dependencies": {"runtime": {"requires": requires}},
           "provisioner": {"actions": {"install": action("install"), "configure": action("configure"), "start": action("start"), "stop": action("stop")}}})
}

pub(crate) async fn create(h: &Harness, who: Who, size: u64) -> String {
    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": size, "providerFields": {"token": "s3cret"}});
    let r = h
        .post(who, "/v2/clusters", body.to_string())
        .await
        .expect(200)
        .json();
    r["id"].as_str().unwrap().to_string()
}

pub(crate) async fn take(h: &Harness, tenant_id: &str, worker: &str) -> Option<Value> {
    let body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tenant_id});
    let r = h
        .internal(Method::POST, "/v2/tasks/take", body.to_string())
        .await;
    match r.status.as_u16() {
        204 => None,
        200 => {
            assert!(
                r.content_type().starts_with("text/plain"),
                "Coopr sends tasks as text/plain"
            );
            Some(r.json())
        }
        other => panic!("take answered {other}: {}", r.text()),
    }
}

pub(crate) async fn finish(
    h: &Harness,
    tenant_id: &str,
    worker: &str,
    task: &Value,
    status: i64,
    stderr: &str,
) -> u16 {
    let mut body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tenant_id,
        "taskId": task["taskId"], "status": status.to_string(), "stdout": "out", "stderr": stderr});
    if task["taskName"] == "CONFIRM" && status == 0 {
        let n = task["config"]["nodenum"].as_u64().unwrap();
        body["ipaddresses"] = json!({"access_v4": format!("10.1.0.{}", n - 990), "bind_v4": format!("10.1.0.{}", n - 990)});
        body["result"] = json!({"ssh_host_keys": {"rsa": "KEY"}});
    }
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .status
        .as_u16()
}

/// Takes and finishes tasks until the queue is empty; `fail` says which tasks to fail. Returns every
/// task taken, in order.
pub(crate) async fn drain(
    h: &Harness,
    tenant_id: &str,
    mut fail: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let mut taken = Vec::new();
    while let Some(task) = take(h, tenant_id, "w1").await {
        let status = if fail(&task) { 1 } else { 0 };
        assert_eq!(
            finish(h, tenant_id, "w1", &task, status, "it broke").await,
            200
        );
        taken.push(task);
        assert!(taken.len() < 500, "the job does not end");
    }
    taken
}

#[tokio::test]
async fn a_cluster_is_created_run_by_workers_and_deleted() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 3).await;
    assert_eq!(id.len(), 8, "ids are 8 digits: {id}");
    let status = h
        .get(a, &format!("/v2/clusters/{id}/status"))
        .await
        .expect(200)
        .json();
    assert_eq!(status["status"], "pending");
    assert_eq!(status["action"], "cluster_create");
    assert_eq!(status["actionstatus"], "running");

    // Nothing of one node is handed out while another of its tasks runs.
    let mut held = Vec::new();
    while let Some(t) = take(&h, &tid, &format!("w{}", held.len())).await {
        held.push(t);
    }
    let nodes: BTreeSet<&str> = held.iter().map(|t| t["nodeId"].as_str().unwrap()).collect();
    assert_eq!(
        nodes.len(),
        held.len(),
        "two tasks of one node were ready at once"
    );
    assert!(held.iter().all(|t| t["taskName"] == "CREATE"));
    let q = h.get(a, "/v2/metrics/queues").await.expect(200).json();
    assert_eq!(
        q[T],
        json!({"queued": 0, "inProgress": 3, "total": 3}),
        "queue metrics count the tenant's tasks"
    );
    for (i, t) in held.iter().enumerate() {
        assert_eq!(finish(&h, &tid, &format!("w{i}"), t, 0, "").await, 200);
    }

    let taken = drain(&h, &tid, |_| false).await;
    let ids: BTreeSet<&str> = taken
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), taken.len(), "every task is handed out once");
    // The payload as Coopr's workers expect it.
    let install_b = taken
        .iter()
        .find(|t| t["taskName"] == "INSTALL" && t["config"]["service"]["name"] == "b")
        .unwrap();
    let c = &install_b["config"];
    assert_eq!(install_b["clusterId"], id.as_str());
    assert_eq!(c["service"]["action"]["type"], "shell");
    assert_eq!(c["service"]["action"]["fields"]["script"], "install-b.sh");
    assert_eq!(
        c["service"]["action"]["fields"]["me"], c["hostname"],
        "action fields are macro-expanded"
    );
    assert!(
        c["cluster"]["peer"]
            .as_str()
            .unwrap()
            .starts_with("10.1.0."),
        "config is macro-expanded: {}",
        c["cluster"]
    );
    assert_eq!(
        c["provider"]["provisioner"]["token"], "s3cret",
        "workers get the sensitive fields"
    );
    assert_eq!(
        c["ssh_host_keys"]["rsa"], "KEY",
        "results of earlier tasks are carried into later ones"
    );
    assert_eq!(c["sshuser"], "weft");
    assert_eq!(c["nodes"].as_object().unwrap().len(), 3);
    let bootstrap = taken.iter().find(|t| t["taskName"] == "BOOTSTRAP").unwrap();
    assert_eq!(bootstrap["config"]["automators"], json!(["shell"]));
    assert!(bootstrap["config"].get("service").is_none());

    let details = h
        .get(a, &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    assert_eq!(details["status"], "active");
    assert_eq!(details["account"]["userId"], "admin");
    assert_eq!(details["progress"]["actionstatus"], "complete");
    assert_eq!(
        details["progress"]["stepscompleted"],
        details["progress"]["stepstotal"]
    );
    assert!(
        details["provider"]["provisioner"].get("token").is_none(),
        "secrets never show: {}",
        details["provider"]
    );
    let nodes = details["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        assert!(n["properties"]["ipaddresses"]["access_v4"]
            .as_str()
            .unwrap()
            .starts_with("10.1.0."));
        assert!(n["properties"]["hostname"]
            .as_str()
            .unwrap()
            .starts_with("c1"));
        assert!(n["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["status"] == "complete"));
    }
    let plans = h
        .get(a, &format!("/v2/clusters/{id}/plans"))
        .await
        .expect(200)
        .json();
    assert_eq!(plans[0]["action"], "CLUSTER_CREATE");
    assert_eq!(plans[0]["stages"][0][0]["taskName"], "CREATE");
    assert_eq!(plans[0]["stages"][0][0]["service"], "");
    let job = plans[0]["id"].as_str().unwrap();
    h.get(a, &format!("/v2/clusters/{id}/plans/{job}"))
        .await
        .expect(200);
    h.get(a, &format!("/v2/clusters/{id}/plans/99999999-001"))
        .await
        .expect(400);
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/services"))
            .await
            .expect(200)
            .json(),
        json!(["a", "b"])
    );
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/config"))
            .await
            .expect(200)
            .json()["n"],
        "%num.service.b%"
    );

    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    // A delete while the delete runs is no error and starts nothing new (issue 13).
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    let deleted = drain(&h, &tid, |_| false).await;
    assert_eq!(deleted.len(), 3);
    assert!(deleted.iter().all(|t| t["taskName"] == "DELETE"));
    let s = h
        .get(a, &format!("/v2/clusters/{id}/status"))
        .await
        .expect(200)
        .json();
    assert_eq!(s["status"], "terminated");
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
}

#[tokio::test]
async fn failed_tasks_are_retried_and_a_task_that_keeps_failing_fails_the_job() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 1).await;
    let mut create_failures = 0;
    let mut install_failures = 0;
    let taken = drain(&h, &tid, |t| {
        if t["taskName"] == "CREATE" && create_failures == 0 {
            create_failures += 1;
            return true;
        }
        if t["taskName"] == "INSTALL"
            && t["config"]["service"]["name"] == "a"
            && install_failures == 0
        {
            install_failures += 1;
            return true;
        }
        false
    })
    .await;
    let names: Vec<&str> = taken
        .iter()
        .map(|t| t["taskName"].as_str().unwrap())
        .collect();
    assert_eq!(
        &names[..3],
        ["CREATE", "DELETE", "CREATE"],
        "a retried CREATE first deletes what the failed try made"
    );
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["status"],
        "active"
    );

    // A start that fails every time: three attempts, then the job fails and the cluster is incomplete.
    let id2 = {
        let body = json!({"name": "c2", "clusterTemplate": "t", "numMachines": 1, "providerFields": {"token": "x"}});
        h.post(a, "/v2/clusters", body.to_string())
            .await
            .expect(200)
            .json()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let taken = drain(&h, &tid, |t| t["taskName"] == "START").await;
    let starts = taken.iter().filter(|t| t["taskName"] == "START").count();
    assert_eq!(starts, 3, "bounded retries: 3 attempts by default");
    let d = h
        .get(a, &format!("/v2/clusters/{id2}"))
        .await
        .expect(200)
        .json();
    assert_eq!(d["status"], "incomplete");
    assert!(
        d["message"].as_str().unwrap().contains("it broke"),
        "the failing task's output is visible: {}",
        d["message"]
    );
    let failed_actions: Vec<&Value> = d["nodes"][0]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "failed")
        .collect();
    assert_eq!(failed_actions.len(), 3);
    assert_eq!(failed_actions[0]["stderr"], "it broke");
    // Retries read as attempts of one task, not as identical failed rows (issue 13).
    let numbered: Vec<(u64, u64)> = failed_actions
        .iter()
        .map(|a| {
            assert_eq!(a["taskId"], failed_actions[0]["taskId"], "one task");
            (
                a["attempt"].as_u64().unwrap(),
                a["maxAttempts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(numbered, [(1, 3), (2, 3), (3, 3)]);
    assert_eq!(d["progress"]["actionstatus"], "failed");
}

#[tokio::test]
async fn only_the_holder_finishes_a_task_and_twice_is_once() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    create(&h, admin(T), 1).await;
    let t = take(&h, &tid, "w1").await.unwrap();
    assert_eq!(finish(&h, &tid, "w2", &t, 0, "").await, 417);
    assert_eq!(finish(&h, &tid, "w1", &t, 0, "").await, 200);
    assert_eq!(
        finish(&h, &tid, "w1", &t, 0, "").await,
        200,
        "a repeated finish is accepted"
    );
    let next = take(&h, &tid, "w1").await.unwrap();
    assert_eq!(next["taskName"], "CONFIRM");
    // Asked by another worker: w1 runs one task at a time, so its own take would give `next`
    // back as a lease whose answer was lost.
    assert!(
        take(&h, &tid, "w2").await.is_none(),
        "the repeated finish released nothing twice"
    );
    let ghost = json!({"taskId": "00000099-001-001"});
    assert_eq!(finish(&h, &tid, "w1", &ghost, 0, "").await, 417);

    let bad = [
        (json!({"workerId": "w", "tenantId": tid}), 400),
        (
            json!({"workerId": "w", "provisionerId": "nobody", "tenantId": tid}),
            403,
        ),
    ];
    for (body, code) in bad {
        h.internal(Method::POST, "/v2/tasks/take", body.to_string())
            .await
            .expect(code);
    }
    // A tenant p1 holds no workers of: refused (its tasks carry that tenant's cloud secrets).
    let other = json!({"workerId": "w", "provisionerId": "p1", "tenantId": "some-other-tenant"});
    let r = h
        .internal(Method::POST, "/v2/tasks/take", other.to_string())
        .await
        .expect(403);
    assert_eq!(
        r.text(),
        "provisioner p1 holds no workers of tenant some-other-tenant"
    );
    h.internal(Method::POST, "/v2/tasks/finish", "{'workerId':'w'}")
        .await
        .expect(400);
    h.internal(Method::POST, "/v2/tasks/take", "{nope")
        .await
        .expect(400);
}

#[tokio::test]
async fn create_requests_are_checked() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    let h = &h;
    let post = |body: Value| async move { h.post(a, "/v2/clusters", body.to_string()).await };
    post(json!({"clusterTemplate": "t", "numMachines": 1}))
        .await
        .expect_text(400, "cluster name must be specified");
    post(json!({"name": "x", "numMachines": 1}))
        .await
        .expect_text(400, "cluster template must be specified");
    post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 0}))
        .await
        .expect_text(400, "cluster size must be greater than 0");
    // A missing size names the field; a misspelt one names itself and the nearest known field
    // (issue 13); numbers in strings stay accepted as in Coopr.
    post(json!({"name": "x", "clusterTemplate": "t"}))
        .await
        .expect_text(400, "numMachines must be specified");
    post(json!({"name": "x", "clusterTemplate": "t", "numMachine": 2}))
        .await
        .expect_text(400, "unknown field numMachine (did you mean numMachines?)");
    post(json!({"name": "x", "clusterTemplate": "t", "numMachines": "2", "dryrun": true}))
        .await
        .expect(400);
    h.post(a, "/v2/clusters?dryrun=true", json!({"name": "x", "clusterTemplate": "t", "numMachines": "2", "providerFields": {"token": "x"}}).to_string())
        .await
        .expect(200);
    post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 10001}))
        .await
        .expect(400);
    // Above the template's range: the template cannot serve it.
    post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 11, "providerFields": {"token": "x"}})).await.expect(409);
    post(json!({"name": "x", "clusterTemplate": "nope", "numMachines": 1}))
        .await
        .expect_text(404, "cluster template nope does not exist.");
    post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 1, "provider": "gone"}))
        .await
        .expect(404);
    h.post(a, "/v2/clusters", "{'name':").await.expect(400);
    h.post(a, "/v2/clusters", "").await.expect(400);

    // The provider type requires nothing here; make `token` required and leave it out.
    let local = json!({"name": "local", "parameters": {"user": {"fields": {
        "token": {"label": "token", "type": "password", "sensitive": true, "default": "d"}}, "required": [["token"]]}}});
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/local",
        local.to_string(),
    )
    .await
    .expect(200);
    let r = post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 1}))
        .await
        .expect(400)
        .json();
    assert_eq!(r["missingFields"][0]["token"]["label"], "token");
    assert_eq!(r["missingFields"][0]["token"]["defaultValue"], "d");

    // No layout: a cluster that is terminated with the solver's explanation, not a 4xx.
    let r = post(json!({"name": "x", "clusterTemplate": "t", "numMachines": 2, "services": ["a"], "providerFields": {"token": "x"}}))
        .await
        .expect(200)
        .json();
    let d = h
        .get(a, &format!("/v2/clusters/{}", r["id"].as_str().unwrap()))
        .await
        .expect(200)
        .json();
    assert_eq!(d["status"], "terminated");
    assert!(
        d["message"].as_str().unwrap().contains('a'),
        "{}",
        d["message"]
    );
    let metrics = h
        .call(None, Method::GET, "/metrics", axum::body::Body::empty())
        .await
        .text();
    assert!(
        metrics.contains(r#"weft_jobs_total{action="SOLVE_LAYOUT",result="failure"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn quotas_are_checked_before_a_job_starts() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let body = json!({"tenant": {"name": T, "workers": 0, "maxClusters": 1, "maxNodes": 3}});
    h.put(
        crate::common::SA,
        &format!("/v2/tenants/{T}"),
        body.to_string(),
    )
    .await
    .expect(200);
    let a = admin(T);
    let big = json!({"name": "x", "clusterTemplate": "t", "numMachines": 4, "providerFields": {"token": "x"}});
    let r = h.post(a, "/v2/clusters", big.to_string()).await.expect(409);
    assert!(r.text().contains("maxNodes"), "{}", r.text());
    create(&h, a, 2).await;
    let r = h.post(a, "/v2/clusters", big.to_string()).await.expect(409);
    assert!(r.text().contains("maxClusters"), "{}", r.text());
    // Quotas cannot go below what the tenant already uses.
    let lower = json!({"tenant": {"name": T, "workers": 0, "maxClusters": 1, "maxNodes": 1}});
    h.put(
        crate::common::SA,
        &format!("/v2/tenants/{T}"),
        lower.to_string(),
    )
    .await
    .expect(409);
    drop(tid);
}

#[tokio::test]
async fn users_see_only_their_clusters_and_admins_see_all_of_their_tenant() {
    let h = Harness::new().await;
    setup(&h).await;
    h.tenant("beta").await;
    let bob = user("bob", T);
    let carol = user("carol", T);
    let id = create(&h, bob, 1).await;
    let path = format!("/v2/clusters/{id}");
    h.get(bob, &path).await.expect(200);
    h.get(admin(T), &path).await.expect(200);
    for who in [carol, admin("beta"), user("bob", "beta")] {
        h.get(who, &path).await.expect(404);
        h.get(who, &format!("{path}/status")).await.expect(404);
        h.get(who, &format!("{path}/plans")).await.expect(404);
        h.get(who, &format!("{path}/config")).await.expect(404);
        h.delete(who, &path).await.expect(404);
        assert_eq!(
            h.get(who, "/v2/clusters").await.expect(200).json(),
            json!([])
        );
    }
    let mine = h.get(bob, "/v2/clusters").await.expect(200).json();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["ownerId"], "bob");
    let all = h
        .get(admin(T), "/v2/clusters?status=pending,bogus")
        .await
        .expect(200)
        .json();
    assert_eq!(all.as_array().unwrap().len(), 1);
    let none = h
        .get(admin(T), "/v2/clusters?status=active")
        .await
        .expect(200)
        .json();
    assert_eq!(none, json!([]));
    let counts: BTreeMap<String, Value> =
        serde_json::from_value(h.get(bob, "/v2/clusters").await.json()[0].clone()).unwrap();
    assert!(counts.contains_key("progress"));
}

/// Issue 14: large answers come in pages. A cluster's details hold `?offset=&limit=` nodes and
/// say where the page is in headers; clusters up to 1,000 nodes are answered whole by default.
#[tokio::test]
async fn cluster_details_page_their_nodes() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 3).await;
    let header = |r: &crate::common::Resp, k: &str| {
        r.headers
            .get(k)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let whole = h.get(a, &format!("/v2/clusters/{id}")).await.expect(200);
    assert_eq!(whole.json()["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(header(&whole, "weft-nodes-total"), "3");
    assert_eq!(header(&whole, "link"), "", "no next page");

    let page = h
        .get(a, &format!("/v2/clusters/{id}?offset=1&limit=1"))
        .await
        .expect(200);
    let ids: Vec<String> = whole.json()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    let nodes = page.json()["nodes"].as_array().unwrap().clone();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["id"], ids[1].as_str());
    assert_eq!(
        (
            header(&page, "weft-nodes-offset"),
            header(&page, "weft-nodes-count")
        ),
        ("1".to_string(), "1".to_string())
    );
    assert_eq!(
        header(&page, "link"),
        format!("</v2/clusters/{id}?offset=2&limit=1>; rel=\"next\"")
    );
    // Links and the rest of the cluster do not depend on the page.
    assert_eq!(page.json()["links"], whole.json()["links"]);
    let past = h
        .get(a, &format!("/v2/clusters/{id}?offset=9"))
        .await
        .expect(200);
    assert!(past.json()["nodes"].as_array().unwrap().is_empty());
    for bad in ["limit=0", "limit=1001", "limit=x", "offset=-1"] {
        h.get(a, &format!("/v2/clusters/{id}?{bad}"))
            .await
            .expect(400);
    }
}

#[tokio::test]
async fn the_servers_max_cluster_size_bounds_creates_and_expands() {
    let h = Harness::with(|r| r.max_cluster_size = Some(3)).await;
    let tid = setup(&h).await;
    let a = admin(T);
    let body = json!({"name": "x", "clusterTemplate": "t", "numMachines": 4, "providerFields": {"token": "x"}});
    let r = h.post(a, "/v2/clusters", body.to_string()).await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(
        r.text().contains("limit of 3 (max_cluster_size)"),
        "{}",
        r.text()
    );
    let id = create(&h, a, 3).await;
    drain(&h, &tid, |_| false).await;
    let r = h
        .post(
            a,
            &format!("/v2/clusters/{id}/nodes"),
            json!({"count": 1}).to_string(),
        )
        .await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(r.text().contains("cluster size 4"), "{}", r.text());
    for bad in [0, 100_001] {
        let e = weft_server::config::RawConfig {
            max_cluster_size: Some(bad),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("max_cluster_size"), "{e}");
    }
}

/// Prices the tenant's `small` machines at 0.25 per hour on `local`, in USD.
pub(crate) async fn price_small_machines(h: &Harness) {
    let a = admin(T);
    let mut local = h.get(a, "/v2/providers/local").await.expect(200).json();
    local["currency"] = json!("USD");
    h.put(a, "/v2/providers/local", local.to_string())
        .await
        .expect(200);
    let mut small = h.get(a, "/v2/hardwaretypes/small").await.expect(200).json();
    small["providermap"]["local"]["price"] = json!("0.25");
    h.put(a, "/v2/hardwaretypes/small", small.to_string())
        .await
        .expect(200);
}
