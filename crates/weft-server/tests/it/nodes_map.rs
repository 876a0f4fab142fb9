//! The `nodes` map of payloads both ways: a worker that announces nothing (Coopr's) gets the map
//! in every task; weft's client announces `nodesByRevision`, gets a revision instead, and splices
//! the map it holds (fetched, then brought up to date by changes) into the task: the plugin sees
//! the same map either way, and a node changed between two tasks is seen by the next.

use axum::http::Method;
use serde_json::{json, Value};

use crate::clusters::{create, setup, T};
use crate::common::{admin, Harness};

/// The internal router on a real socket, for weft_client.
async fn serve(h: &Harness) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = h.app.internal.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

async fn raw_take(h: &Harness, tid: &str, worker: &str, capabilities: Value) -> Option<Value> {
    let body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tid,
        "capabilities": capabilities});
    let r = h
        .internal(Method::POST, "/v2/tasks/take", body.to_string())
        .await;
    match r.status.as_u16() {
        204 => None,
        200 => Some(r.json()),
        other => panic!("take answered {other}: {}", r.text()),
    }
}

async fn finish(h: &Harness, tid: &str, worker: &str, task: &Value, hostname: Option<&str>) {
    let mut body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tid,
        "taskId": task["taskId"], "status": 0});
    if task["taskName"] == "CONFIRM" {
        let n = task["config"]["nodenum"].as_u64().unwrap();
        let ip = format!("10.1.0.{}", n - 990);
        body["ipaddresses"] = json!({"access_v4": ip, "bind_v4": ip});
    }
    if let Some(name) = hostname {
        body["hostname"] = json!(name);
    }
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
}

fn is_provider(task: &Value) -> bool {
    ["CREATE", "CONFIRM", "DELETE"].contains(&task["taskName"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_workers_get_the_coopr_map_from_their_cache_and_see_changes() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    create(&h, admin(T), 3).await;
    let client = weft_client::Client::new(&serve(&h).await).unwrap();

    // Takers in turn: Coopr's (no capability) and weft's client. `last` is the map of the last
    // service or bootstrap task and whether the map changed since.
    let mut last: Option<String> = None;
    let (mut compared, mut renamed) = (0, None::<String>);
    for i in 0.. {
        assert!(i < 200, "the job does not end");
        let coopr = i % 2 == 0;
        let task = if coopr {
            raw_take(&h, &tid, "w1", json!([])).await
        } else {
            client.take("p1", "w2", &tid).await.unwrap()
        };
        let Some(task) = task else { break };
        assert!(task.get("nodesRevision").is_none(), "{task}");
        let nodes = task["config"].get("nodes");
        if is_provider(&task) && !coopr {
            assert!(
                nodes.is_none(),
                "a provider task of weft's worker has no map"
            );
        } else {
            let nodes = nodes.expect("the map is in the task").clone();
            assert_eq!(nodes.as_object().unwrap().len(), 3);
            let text = serde_json::to_string(&nodes).unwrap();
            if !is_provider(&task) {
                if let Some(before) = &last {
                    assert_eq!(&text, before, "task {i} ({coopr}) sees the same map");
                    compared += 1;
                }
                last = Some(text);
            }
            if let Some(id) = &renamed {
                assert_eq!(nodes[id]["hostname"], "renamed.example", "task {i}");
            }
        }
        // Once, a service task renames its node: every later task sees it.
        let rename = renamed.is_none() && !coopr && task["config"].get("service").is_some();
        let worker = if coopr { "w1" } else { "w2" };
        finish(&h, &tid, worker, &task, rename.then_some("renamed.example")).await;
        if rename {
            renamed = Some(task["nodeId"].as_str().unwrap().to_string());
        }
        if rename || task["taskName"] == "CONFIRM" {
            last = None;
        }
    }
    assert!(renamed.is_some() && compared > 10, "compared {compared}");
}

#[tokio::test]
async fn the_nodes_route_answers_the_whole_map_then_only_changes() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 2).await;
    let nodes = |since: Option<&str>| {
        json!({"provisionerId": "p1", "tenantId": tid, "clusterId": id, "since": since}).to_string()
    };
    let post = |body: String| h.internal(Method::POST, "/v2/tasks/nodes", body);
    let whole = post(nodes(None)).await.expect(200).json();
    assert_eq!(whole["full"], true);
    assert_eq!(whole["nodes"].as_object().unwrap().len(), 2);
    let rev = whole["revision"].as_str().unwrap().to_string();

    // Run the CREATEs and CONFIRMs with the capability: no map and no revision in them.
    let mut confirmed = 0;
    while confirmed < 2 {
        let task = raw_take(&h, &tid, "w1", json!(["nodesByRevision"]))
            .await
            .unwrap();
        assert!(is_provider(&task), "{task}");
        assert!(task["config"].get("nodes").is_none() && task.get("nodesRevision").is_none());
        if task["taskName"] == "CONFIRM" {
            confirmed += 1;
        }
        finish(&h, &tid, "w1", &task, None).await;
    }
    let changes = post(nodes(Some(&rev))).await.expect(200).json();
    assert_eq!(changes["full"], false, "{changes}");
    assert_eq!(changes["nodes"].as_object().unwrap().len(), 2, "{changes}");
    for n in changes["nodes"].as_object().unwrap().values() {
        assert!(n["ipaddresses"]["access_v4"].is_string(), "{changes}");
    }
    let rev2 = changes["revision"].as_str().unwrap().to_string();
    let task = raw_take(&h, &tid, "w1", json!("nodesByRevision"))
        .await
        .unwrap();
    assert_eq!(task["taskName"], "BOOTSTRAP");
    assert_eq!(
        task["nodesRevision"],
        rev2.as_str(),
        "nothing changed since"
    );
    assert!(task["config"].get("nodes").is_none());
    let none = post(nodes(Some(&rev2))).await.expect(200).json();
    assert_eq!(none["full"], false);
    assert_eq!(none["nodes"], json!({}));
    assert_eq!(none["removed"], json!([]));

    // A revision of another server, or nonsense, gets the whole map.
    for other in ["ffff.1.1", "junk"] {
        let r = post(nodes(Some(other))).await.expect(200).json();
        assert_eq!(r["full"], true, "{other}");
    }
    // Bad input names the field; a cluster of another tenant is not there.
    post(json!({"provisionerId": "p1", "tenantId": tid}).to_string())
        .await
        .expect(400);
    post(json!({"provisionerId": "p1", "tenantId": tid, "clusterId": "x"}).to_string())
        .await
        .expect(400);
    post(json!({"provisionerId": "p1", "tenantId": "other", "clusterId": id}).to_string())
        .await
        .expect(403);
    post(json!({"provisionerId": "nobody", "tenantId": tid, "clusterId": id}).to_string())
        .await
        .expect(403);
}

/// `next` in a finish (issue 24): weft's client finishes each task and takes the next in one
/// request, through a whole create; the tasks are those a take gives (the map spliced in from the
/// client's cache); the last finish answers 204; a finish without `next` still answers an empty
/// 200, and one sent again with `next` is applied once and takes nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_with_next_takes_the_workers_next_task_through_a_whole_create() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 3).await;
    let client = weft_client::Client::new(&serve(&h).await).unwrap();
    let finish_of = |task: &Value| {
        let mut f = weft_client::Finish {
            worker_id: "w1".into(),
            provisioner_id: "p1".into(),
            tenant_id: tid.clone(),
            task_id: task["taskId"].as_str().unwrap().into(),
            ..Default::default()
        };
        if task["taskName"] == "CONFIRM" {
            let n = task["config"]["nodenum"].as_u64().unwrap();
            let ip = format!("10.1.0.{}", n - 990);
            let ips = [
                ("access_v4".to_string(), ip.clone()),
                ("bind_v4".to_string(), ip),
            ];
            f.ipaddresses = Some(ips.into());
        }
        f
    };
    let mut task = client.take("p1", "w1", &tid).await.unwrap().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut last = None;
    for i in 0.. {
        assert!(i < 200, "the job does not end");
        assert!(
            seen.insert(task["taskId"].to_string()),
            "taken twice: {task}"
        );
        if !is_provider(&task) {
            let nodes = task["config"]["nodes"]
                .as_object()
                .expect("the map is spliced in");
            assert_eq!(nodes.len(), 3, "{task}");
        }
        let f = finish_of(&task);
        match client.finish_and_take(&f).await.unwrap() {
            Some(next) => task = next,
            None => {
                last = Some(f);
                break;
            }
        }
    }
    let status = h
        .get(admin(T), &format!("/v2/clusters/{id}/status"))
        .await
        .expect(200)
        .json();
    assert_eq!(status["status"], "active", "{status}");
    // The last finish again: applied once, nothing to take.
    let last = last.unwrap();
    assert_eq!(client.finish_and_take(&last).await.unwrap(), None);
    let mut body = serde_json::to_value(&last).unwrap();
    body.as_object_mut().unwrap().remove("next");
    let r = h
        .internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
    assert_eq!(r.text(), "");
    // `next` names what it asks in the field: not an object is a 400 that says so.
    body["next"] = json!(true);
    let r = h
        .internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(400);
    assert!(r.text().contains("next"), "{}", r.text());
}
