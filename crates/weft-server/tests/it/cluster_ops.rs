//! Changing running clusters: reconfigure, service actions, add and remove services, expand and
//! shrink, upgrade, leases, template sync, pause, resume and abort, and dry runs.

use serde_json::{json, Value};

use crate::clusters::{create, drain, setup, take, T};
use crate::common::{admin, Harness};

async fn active_cluster(h: &Harness, size: u64) -> (String, String) {
    let tid = setup(h).await;
    let id = create(h, admin(T), size).await;
    drain(h, &tid, |_| false).await;
    assert_eq!(
        h.get(admin(T), &format!("/v2/clusters/{id}/status"))
            .await
            .json()["status"],
        "active"
    );
    (tid, id)
}

fn actions(tasks: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t["taskName"].as_str().unwrap(),
                t["config"]["service"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn reconfigure_restart_and_dry_runs() {
    let h = Harness::new().await;
    let (tid, id) = active_cluster(&h, 2).await;
    let a = admin(T);
    let path = format!("/v2/clusters/{id}/config");
    h.put(a, &path, "{}")
        .await
        .expect_text(400, "Invalid request body.");

    // A dry run answers the plan and changes nothing.
    let plan = h
        .put(
            a,
            &format!("{path}?dryrun=true"),
            json!({"config": {"x": "1"}}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(plan["action"], "CLUSTER_CONFIGURE_WITH_RESTART");
    assert!(!plan["stages"].as_array().unwrap().is_empty());
    assert!(
        take(&h, &tid, "w").await.is_none(),
        "a dry run queues nothing"
    );
    assert_eq!(
        h.get(a, &path).await.json(),
        json!({"peer": "%ip.service.a%", "n": "%num.service.b%"})
    );

    h.put(
        a,
        &path,
        json!({"config": {"x": "1"}, "restart": "false"}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["action"],
        "cluster_configure"
    );
    h.put(a, &path, json!({"config": {"x": "2"}}).to_string())
        .await
        .expect(409);
    let tasks = drain(&h, &tid, |_| false).await;
    assert!(
        tasks
            .iter()
            .all(|t| t["taskName"] == "CONFIGURE" || t["taskName"] == "BOOTSTRAP"),
        "{:?}",
        actions(&tasks)
    );
    assert_eq!(
        tasks.iter().find(|t| t["taskName"] == "CONFIGURE").unwrap()["config"]["cluster"],
        json!({"x": "1"})
    );
    assert_eq!(h.get(a, &path).await.json(), json!({"x": "1"}));

    // Restart one service: b's dependents and b are stopped and started in order.
    h.post(a, &format!("/v2/clusters/{id}/services/b/restart"), "")
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    let names = actions(&tasks);
    assert!(names.iter().any(|n| n == "START b"), "{names:?}");
    h.post(a, &format!("/v2/clusters/{id}/services/nope/start"), "")
        .await
        .expect(404);
    h.post(a, &format!("/v2/clusters/{id}/services/dance"), "")
        .await
        .expect(404);
    h.post(a, &format!("/v2/clusters/{id}/services/stop"), "")
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    let stops: Vec<&str> = tasks
        .iter()
        .map(|t| t["config"]["service"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tasks.len(), 3, "a on one node, b on two: {stops:?}");
    let last_b = stops.iter().rposition(|s| *s == "b").unwrap();
    let first_a = stops.iter().position(|s| *s == "a").unwrap();
    assert!(last_b < first_a, "dependents stop first: {stops:?}");
}

#[tokio::test]
async fn expand_and_shrink_change_the_nodes() {
    let h = Harness::new().await;
    let (tid, id) = active_cluster(&h, 2).await;
    let a = admin(T);
    let nodes_path = format!("/v2/clusters/{id}/nodes");
    h.post(a, &nodes_path, json!({"count": 0}).to_string())
        .await
        .expect(400);
    let plan = h
        .post(
            a,
            &format!("{nodes_path}?dryrun=true"),
            json!({"count": 2}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(plan["action"], "CLUSTER_EXPAND");
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}")).await.json()["nodes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    h.post(a, &nodes_path, json!({"count": 2}).to_string())
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    assert_eq!(
        tasks.iter().filter(|t| t["taskName"] == "CREATE").count(),
        2
    );
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["status"], "active");
    let nodes = d["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    let nums: Vec<u64> = nodes
        .iter()
        .map(|n| n["properties"]["nodenum"].as_u64().unwrap())
        .collect();
    assert_eq!(nums, vec![1000, 1001, 1002, 1003]);

    h.delete(a, &format!("{nodes_path}?count=1"))
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    assert_eq!(
        tasks.iter().filter(|t| t["taskName"] == "DELETE").count(),
        1
    );
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    let nums: Vec<u64> = d["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["properties"]["nodenum"].as_u64().unwrap())
        .collect();
    assert_eq!(nums, vec![1000, 1001, 1002], "the newest node goes first");
    assert_eq!(d["status"], "active");
}

#[tokio::test]
async fn services_are_added_removed_and_upgraded() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let c = json!({"name": "c", "clusterTemplate": "t", "numMachines": 1, "services": ["a"], "providerFields": {"token": "x"}});
    let id = h
        .post(a, "/v2/clusters", c.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    drain(&h, &tid, |_| false).await;
    let svc = format!("/v2/clusters/{id}/services");
    h.post(a, &svc, json!({"services": []}).to_string())
        .await
        .expect(400);
    h.post(a, &svc, json!({"services": ["b"]}).to_string())
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    assert!(
        actions(&tasks).iter().any(|n| n == "INSTALL b"),
        "{:?}",
        actions(&tasks)
    );
    assert_eq!(h.get(a, &svc).await.json(), json!(["a", "b"]));

    // Upgrade b to its latest definition.
    let mut newer = h.get(a, "/v2/services/b").await.json();
    newer["provisioner"]["actions"]["install"]["fields"]["script"] = json!("install-b-v2.sh");
    h.put(a, "/v2/services/b", newer.to_string())
        .await
        .expect(200);
    h.post(
        a,
        &format!("{svc}/b/upgrade"),
        json!({"batchSize": 1}).to_string(),
    )
    .await
    .expect(200);
    let tasks = drain(&h, &tid, |_| false).await;
    let install = tasks.iter().find(|t| t["taskName"] == "INSTALL").unwrap();
    assert_eq!(
        install["config"]["service"]["action"]["fields"]["script"],
        "install-b-v2.sh"
    );
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["status"],
        "active"
    );

    h.delete(a, &format!("{svc}/a")).await.expect(400);
    let dry = h
        .delete(a, &format!("{svc}/b?dryrun=true"))
        .await
        .expect(200)
        .json();
    eprintln!("DRY {dry}");
    let st = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    eprintln!(
        "CL {} {}",
        st["status"], st["nodes"][0]["properties"]["services"]
    );
    h.delete(a, &format!("{svc}/b")).await.expect(200);
    eprintln!(
        "PLANS {}",
        h.get(a, &format!("/v2/clusters/{id}/plans")).await.json()[0]
    );
    let tasks = drain(&h, &tid, |_| false).await;
    assert!(
        actions(&tasks)
            .iter()
            .any(|n| n.starts_with("REMOVE") || n.starts_with("STOP")),
        "{:?}",
        actions(&tasks)
    );
    assert_eq!(h.get(a, &svc).await.json(), json!(["a"]));
}

#[tokio::test]
async fn leases_follow_the_template_rules() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let mut t = h.get(a, "/v2/clustertemplates/t").await.json();
    t["administration"] =
        json!({"leaseduration": {"initial": 1000000, "max": 5000000, "step": 2000000}});
    h.put(a, "/v2/clustertemplates/t", t.to_string())
        .await
        .expect(200);
    let long = json!({"name": "c", "clusterTemplate": "t", "numMachines": 1, "initialLeaseDuration": 2000000, "providerFields": {"token": "x"}});
    h.post(a, "/v2/clusters", long.to_string())
        .await
        .expect(409);
    let id = create(&h, a, 1).await;
    let path = format!("/v2/clusters/{id}");
    h.post(a, &path, json!({"expireTime": 1}).to_string())
        .await
        .expect(400);
    drain(&h, &tid, |_| false).await;
    let d = h.get(a, &path).await.json();
    let (created, expires) = (
        d["createTime"].as_i64().unwrap(),
        d["expireTime"].as_i64().unwrap(),
    );
    assert_eq!(expires - created, 1000000);
    h.post(a, &path, "")
        .await
        .expect_text(400, "expire time not specified");
    h.post(a, &path, json!({"expireTime": created - 1}).to_string())
        .await
        .expect(400);
    h.post(
        a,
        &path,
        json!({"expireTime": expires + 2000001}).to_string(),
    )
    .await
    .expect(400);
    h.post(
        a,
        &path,
        format!("{{'expireTime' : '{}'}}", expires + 2000000),
    )
    .await
    .expect(200);
    assert_eq!(
        h.get(a, &path).await.json()["expireTime"],
        expires + 2000000
    );
    h.post(
        a,
        &path,
        json!({"expireTime": created + 5000001}).to_string(),
    )
    .await
    .expect(400);
}

#[tokio::test]
async fn pause_resume_and_abort_control_a_running_create() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 2).await;
    h.post(a, &format!("/v2/clusters/{id}/pause"), "")
        .await
        .expect(200);
    assert!(
        take(&h, &tid, "w").await.is_none(),
        "a paused job hands out nothing"
    );
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["actionstatus"],
        "paused"
    );
    h.post(a, &format!("/v2/clusters/{id}/resume"), "")
        .await
        .expect(200);
    assert!(take(&h, &tid, "w").await.is_some());
    h.post(a, &format!("/v2/clusters/{id}/abort"), "")
        .await
        .expect(200);
    let metrics = h
        .call(
            None,
            axum::http::Method::GET,
            "/metrics",
            axum::body::Body::empty(),
        )
        .await
        .text();
    assert!(
        metrics.contains(r#"weft_jobs_total{action="CLUSTER_CREATE",result="failure"}"#),
        "an aborted job counts as a failure: {metrics}"
    );
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["progress"]["actionstatus"], "failed");
    assert_eq!(d["status"], "pending", "a task is still in flight");

    // Abort only applies to a running create.
    let (tid2, id2) = {
        let id2 = create(&h, a, 1).await;
        (tid.clone(), id2)
    };
    drain(&h, &tid2, |_| false).await;
    h.post(a, &format!("/v2/clusters/{id2}/abort"), "")
        .await
        .expect(200);
    h.put(
        a,
        &format!("/v2/clusters/{id2}/config"),
        json!({"config": {}}).to_string(),
    )
    .await
    .expect(200);
    h.post(a, &format!("/v2/clusters/{id2}/abort"), "")
        .await
        .expect_text(409, "Cannot be aborted at this time.");
}

#[tokio::test]
async fn template_sync_swaps_in_a_compatible_version_only() {
    let h = Harness::new().await;
    let (_, id) = active_cluster(&h, 2).await;
    let a = admin(T);
    let mut t = h.get(a, "/v2/clustertemplates/t").await.json();
    t["description"] = json!("v2");
    h.put(a, "/v2/clustertemplates/t", t.to_string())
        .await
        .expect(200);
    h.post(a, &format!("/v2/clusters/{id}/clustertemplate/sync"), "")
        .await
        .expect(200);
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["clusterTemplate"]["description"], "v2");
    t["constraints"]["size"] = json!({"min": 5, "max": 10});
    h.put(a, "/v2/clustertemplates/t", t.to_string())
        .await
        .expect(200);
    h.post(a, &format!("/v2/clusters/{id}/clustertemplate/sync"), "")
        .await
        .expect(400);
    // A version whose compatibility no longer lists what the cluster runs (issue 13).
    let running = d["services"][0].as_str().unwrap().to_string();
    let hardware = d["nodes"][0]["properties"]["hardwaretype"]
        .as_str()
        .unwrap()
        .to_string();
    t["constraints"]["size"] = json!({"min": 1, "max": 10});
    for (list, value, named) in [
        ("services", json!(["some-other-service"]), running.clone()),
        ("hardwaretypes", json!(["some-other-hardware"]), hardware),
    ] {
        let mut v = t.clone();
        v["compatibility"][list] = value;
        h.put(a, "/v2/clustertemplates/t", v.to_string())
            .await
            .expect(200);
        let r = h
            .post(a, &format!("/v2/clusters/{id}/clustertemplate/sync"), "")
            .await
            .expect(400);
        assert!(r.text().contains(&named), "{list}: {}", r.text());
    }
}

#[tokio::test]
async fn nodes_and_rpc_routes() {
    let h = Harness::new().await;
    let (_, id) = active_cluster(&h, 2).await;
    let a = admin(T);
    let nodes = h.get(a, "/v2/nodes").await.expect(200).json();
    assert_eq!(nodes.as_array().unwrap().len(), 2);
    assert_eq!(
        h.get(crate::common::user("carol", T), "/v2/nodes")
            .await
            .expect(200)
            .json(),
        json!([])
    );
    let node_id = nodes[0]["id"].as_str().unwrap().to_string();
    h.get(a, &format!("/v2/nodes/{node_id}")).await.expect(200);
    h.get(a, "/v2/nodes/no-such-node").await.expect(404);

    let props = h
        .post(
            a,
            "/v2/getNodeProperties",
            json!({"clusterId": id, "services": ["b"]}).to_string(),
        )
        .await
        .expect(200)
        .json();
    let props = props.as_object().unwrap();
    assert!(!props.is_empty());
    assert!(props
        .values()
        .all(|p| p["services"].as_array().unwrap().contains(&json!("b"))));
    let only = h
        .post(
            a,
            "/v2/getNodeProperties",
            json!({"clusterId": id, "properties": ["hostname"]}).to_string(),
        )
        .await
        .json();
    assert!(only.as_object().unwrap().values().all(|p| p
        .as_object()
        .unwrap()
        .keys()
        .eq(["hostname"].iter())));
    assert_eq!(
        h.post(
            a,
            "/v2/getNodeProperties",
            json!({"clusterId": "00009999"}).to_string()
        )
        .await
        .expect(200)
        .json(),
        json!({})
    );
    h.post(a, "/v2/getNodeProperties", "{}").await.expect(400);
    h.post(a, "/v2/getNodeProperties", "nope").await.expect(400);
    h.post(a, "/v2/getClusterStatuses", "{}").await.expect(501);

    let mut node = nodes[0].clone();
    h.post(crate::common::user("bob", T), "/v2/nodes", node.to_string())
        .await
        .expect(403);
    h.put(a, &format!("/v2/nodes/{node_id}x"), node.to_string())
        .await
        .expect(400);
    node["properties"]["hostname"] = json!("renamed.local");
    h.put(a, &format!("/v2/nodes/{node_id}"), node.to_string())
        .await
        .expect(204);
    assert_eq!(
        h.get(a, &format!("/v2/nodes/{node_id}")).await.json()["properties"]["hostname"],
        "renamed.local"
    );
    h.post(a, "/v2/nodes", node.to_string()).await.expect(409);
    h.delete(a, &format!("/v2/nodes/{node_id}"))
        .await
        .expect(204);
    h.get(a, &format!("/v2/nodes/{node_id}")).await.expect(404);
}

#[tokio::test]
async fn a_create_dry_run_shows_the_plan_and_creates_nothing() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    let body = json!({"name": "c", "clusterTemplate": "t", "numMachines": 2, "providerFields": {"token": "x"}});
    let plan = h
        .post(a, "/v2/clusters?dryrun=true", body.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(plan["action"], "CLUSTER_CREATE");
    let first: Vec<&str> = plan["stages"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskName"].as_str().unwrap())
        .collect();
    assert_eq!(first, ["CREATE", "CREATE"]);
    assert_eq!(h.get(a, "/v2/clusters").await.json(), json!([]));
    let unsolvable = json!({"name": "c", "clusterTemplate": "t", "numMachines": 2, "services": ["a"], "providerFields": {"token": "x"}});
    // The request is valid; the template cannot serve it (409, as a create's no-layout would
    // make a terminated cluster).
    h.post(a, "/v2/clusters?dryrun=true", unsolvable.to_string())
        .await
        .expect(409);
    assert_eq!(
        create(&h, a, 1).await,
        "00000001",
        "a dry run takes no cluster id"
    );
}

#[tokio::test]
async fn failed_creates_and_upgrades_roll_back_when_they_should() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let body = json!({"name": "c", "clusterTemplate": "t", "numMachines": 1, "rollbackOnFailure": "true", "providerFields": {"token": "x"}});
    let id = h
        .post(a, "/v2/clusters", body.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let tasks = drain(&h, &tid, |t| t["taskName"] == "START").await;
    assert_eq!(
        tasks.last().unwrap()["taskName"],
        "DELETE",
        "{:?}",
        actions(&tasks)
    );
    let plans = h.get(a, &format!("/v2/clusters/{id}/plans")).await.json();
    assert_eq!(plans[0]["action"], "CLUSTER_DELETE");
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["status"],
        "terminated"
    );

    // An upgrade whose new install keeps failing goes back to the previous definition.
    let id = create(&h, a, 1).await;
    drain(&h, &tid, |_| false).await;
    let mut newer = h.get(a, "/v2/services/b").await.json();
    newer["provisioner"]["actions"]["install"]["fields"]["script"] = json!("broken.sh");
    h.put(a, "/v2/services/b", newer.to_string())
        .await
        .expect(200);
    h.post(a, &format!("/v2/clusters/{id}/services/b/upgrade"), "")
        .await
        .expect(200);
    let tasks = drain(&h, &tid, |t| {
        t["config"]["service"]["action"]["fields"]["script"] == "broken.sh"
    })
    .await;
    let last_install = tasks
        .iter()
        .rev()
        .find(|t| t["taskName"] == "INSTALL")
        .unwrap();
    assert_eq!(
        last_install["config"]["service"]["action"]["fields"]["script"],
        "install-b.sh"
    );
    let plans = h.get(a, &format!("/v2/clusters/{id}/plans")).await.json();
    assert_eq!(plans[0]["action"], "ROLLBACK_UPGRADE");
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["status"], "active");
    let b = d["nodes"][0]["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "b")
        .unwrap()
        .clone();
    assert_eq!(
        b["provisioner"]["actions"]["install"]["fields"]["script"],
        "install-b.sh"
    );
}

#[tokio::test]
async fn node_secrets_are_masked_in_answers_and_kept_when_written_back() {
    let h = Harness::new().await;
    let (_, id) = active_cluster(&h, 1).await;
    let a = admin(T);
    let mut node = h.get(a, "/v2/nodes").await.expect(200).json()[0].clone();
    let node_id = node["id"].as_str().unwrap().to_string();
    node["provisionerResults"]["ssh-auth"] = json!({"user": "root", "key": "k3y-s3cret"});
    h.put(a, &format!("/v2/nodes/{node_id}"), node.to_string())
        .await
        .expect(204);
    let shown = h.get(a, &format!("/v2/nodes/{node_id}")).await.expect(200);
    assert!(!shown.text().contains("k3y-s3cret"), "{}", shown.text());
    let mut shown = shown.json();
    assert_eq!(shown["provisionerResults"]["ssh-auth"]["key"], "********");
    for path in ["/v2/nodes".to_string(), format!("/v2/clusters/{id}")] {
        let body = h.get(a, &path).await.expect(200).text();
        assert!(!body.contains("k3y-s3cret"), "{path}: {body}");
    }
    // Read, edit, write back: the mask does not replace the secret.
    shown["properties"]["hostname"] = json!("edited.local");
    h.put(a, &format!("/v2/nodes/{node_id}"), shown.to_string())
        .await
        .expect(204);
    let stored = h
        .app
        .state
        .store
        .get_node(&h.tenant_id(T).await, &node_id)
        .await
        .unwrap()
        .unwrap();
    // Stored sealed; it opens to the secret.
    let sealed = stored.body["provisionerResults"]["ssh-auth"]["key"]
        .as_str()
        .unwrap();
    assert!(!stored.body.to_string().contains("k3y-s3cret"));
    let sealer = &h.app.state.engine.sealer;
    let opened = sealer.open(&h.tenant_id(T).await, sealed).await.unwrap();
    assert_eq!(opened, Some(json!("k3y-s3cret")));
    assert_eq!(stored.body["properties"]["hostname"], "edited.local");
}
