//! Drift (weft's extension): `POST /v2/clusters/{id}/check` asks each node's provider about its
//! machine (STATUS) without touching the cluster's status; `GET` answers what it found;
//! `POST /v2/clusters/{id}/nodes/{node}/replace` rebuilds one node.

use axum::http::Method;
use serde_json::{json, Value};

use crate::clusters::{create, drain, setup, take, T};
use crate::common::{admin, Harness};

async fn finish_status(h: &Harness, tid: &str, task: &Value, status: i64, result: Value) {
    let body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid,
        "taskId": task["taskId"], "status": status, "stdout": "asked", "stderr": "no answer", "result": result});
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
}

fn machines(r: &Value) -> Vec<String> {
    r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["machine"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_check_reports_each_machine_and_leaves_the_cluster_active() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 3).await;
    drain(&h, &tid, |_| false).await;
    let path = format!("/v2/clusters/{id}/check");

    // Before any check: nothing known, nothing found.
    let r = h.get(a, &path).await.expect(200).json();
    assert!(r.get("jobId").is_none(), "{r}");
    assert_eq!(r["drift"], false);
    assert!(machines(&r).iter().all(|m| m == "unknown"), "{r}");

    let run = h.post(a, &path, "").await.expect(200).json();
    assert_eq!(
        run["tasks"], 3,
        "a STATUS per node (no service declares a check)"
    );
    let status = h.get(a, &format!("/v2/clusters/{id}/status")).await.json();
    assert_eq!(
        status["status"], "active",
        "a check leaves the status alone"
    );

    // One machine runs, one is missing, and one provider fails to answer: a finding each,
    // nothing retried, and the check completes.
    let mut taken = Vec::new();
    while let Some(t) = take(&h, &tid, "w1").await {
        assert_eq!(t["taskName"], "STATUS");
        assert_eq!(t["config"]["provider"]["providertype"], "local");
        assert_eq!(
            t["config"]["provider"]["provisioner"]["token"], "s3cret",
            "the provider's secrets reach the provider"
        );
        match taken.len() {
            0 => {
                let m = json!({"machine": {"state": "running"}});
                finish_status(&h, &tid, &t, 0, m).await
            }
            1 => {
                let m = json!({"machine": {"state": "missing", "message": "gone"}});
                finish_status(&h, &tid, &t, 0, m).await
            }
            _ => finish_status(&h, &tid, &t, 1, json!({})).await,
        }
        taken.push(t);
        assert!(taken.len() <= 3, "a failed STATUS is not retried");
    }
    let r = h.get(a, &path).await.expect(200).json();
    assert_eq!(r["jobId"], run["jobId"]);
    assert_eq!(r["jobStatus"], "complete", "{r}");
    assert_eq!(r["drift"], true);
    let mut m = machines(&r);
    m.sort();
    assert_eq!(m, ["missing", "running", "unknown"], "{r}");
    let missing = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["machine"] == "missing")
        .unwrap();
    assert_eq!(missing["message"], "gone");
    let unknown = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["machine"] == "unknown")
        .unwrap();
    assert_eq!(unknown["message"], "no answer", "{r}");
    // No provisioner here can list machines: orphans are not known, and the report says why.
    assert!(r["orphansUnknown"].is_string(), "{r}");
    let c = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(c["status"], "active");
    assert!(
        !c.to_string().contains("\"machine\""),
        "STATUS results stay off the nodes"
    );

    // Replace the missing node: a dry run plans it, an unknown node is a 404 naming it.
    let node = missing["id"].as_str().unwrap().to_string();
    let body = h
        .post(a, &format!("/v2/clusters/{id}/nodes/nope/replace"), "")
        .await
        .expect(404)
        .text();
    assert!(body.contains("nope"), "{body}");
    let plan = h
        .post(
            a,
            &format!("/v2/clusters/{id}/nodes/{node}/replace?dryrun=true"),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(plan["action"], "REPLACE_NODE");
    let run = h
        .post(a, &format!("/v2/clusters/{id}/nodes/{node}/replace"), "")
        .await
        .expect(200)
        .json();
    assert_eq!(run["node"], node.as_str());
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["status"],
        "pending"
    );
    // While it runs, neither a check nor another replacement may start.
    h.post(a, &path, "").await.expect(409);
    h.post(a, &format!("/v2/clusters/{id}/nodes/{node}/replace"), "")
        .await
        .expect(409);
    let tasks = drain(&h, &tid, |_| false).await;
    let on_node: Vec<&str> = tasks
        .iter()
        .filter(|t| t["nodeId"] == node.as_str())
        .map(|t| t["taskName"].as_str().unwrap())
        .collect();
    assert_eq!(&on_node[..4], ["DELETE", "CREATE", "CONFIRM", "BOOTSTRAP"]);
    assert!(tasks
        .iter()
        .filter(|t| t["nodeId"] != node.as_str())
        .all(|t| ["CONFIGURE", "STOP", "START"].contains(&t["taskName"].as_str().unwrap())));
    let c = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(c["status"], "active");
    assert_eq!(c["nodes"].as_array().unwrap().len(), 3, "the same nodes");
}

#[tokio::test]
async fn unknown_clusters_are_refused() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    h.get(a, "/v2/clusters/00000999/check").await.expect(404);
    h.post(a, "/v2/clusters/00000999/check", "")
        .await
        .expect(404);
    h.post(a, "/v2/clusters/00000999/nodes/x/replace", "")
        .await
        .expect(404);
}

#[tokio::test]
async fn a_service_cannot_declare_status() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    let mut svc = h.get(a, "/v2/services/a").await.json();
    svc["provisioner"]["actions"]["status"] = json!({"type": "shell", "fields": {"script": "x"}});
    let body = h
        .put(a, "/v2/services/a", svc.to_string())
        .await
        .expect(400)
        .text();
    assert!(body.contains("provisioner.actions.status"), "{body}");
}

async fn cluster_status(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}/status"))
        .await
        .json()["status"]
        .clone()
}

/// A janitor round at `now`, provisioner `p1` alive.
async fn round(h: &Harness, now: i64) -> weft_engine::janitor::JanitorReport {
    let st = &h.app.state.engine;
    st.store
        .heartbeat_provisioner("p1", &std::collections::BTreeMap::new(), now)
        .await
        .unwrap();
    weft_engine::janitor::run_once(st, now).await.unwrap()
}

#[tokio::test]
async fn the_janitor_checks_and_replaces_a_missing_node_once_per_hour_at_most() {
    let h = Harness::with(|raw| {
        raw.check_interval = Some(1);
        raw.auto_replace_per_hour = Some(1);
    })
    .await;
    let tid = setup(&h).await;
    let a = admin(T);
    let mut tpl = h.get(a, "/v2/clustertemplates/t").await.expect(200).json();
    tpl["autoReplace"] = json!(true);
    h.put(a, "/v2/clustertemplates/t", tpl.to_string())
        .await
        .expect(200);
    let id = create(&h, a, 2).await;
    drain(&h, &tid, |_| false).await;
    let cid: u64 = id.parse().unwrap();

    // A round starts a check; one machine is missing.
    let now = weft_server::state::now_ms();
    let r = round(&h, now).await;
    assert_eq!(r.drift.checks.len(), 1, "{r:?}");
    let mut missing = None;
    while let Some(t) = take(&h, &tid, "w1").await {
        let state = if missing.is_none() {
            missing = t["nodeId"].as_str().map(String::from);
            "missing"
        } else {
            "running"
        };
        finish_status(&h, &tid, &t, 0, json!({"machine": {"state": state}})).await;
    }
    let missing = missing.unwrap();

    // The next round records it and replaces the node.
    let r = round(&h, now + 10).await;
    assert_eq!(r.drift.recorded, vec![cid]);
    assert_eq!(r.drift.replaced.len(), 1, "{r:?}");
    assert_eq!(r.drift.replaced[0].1, missing);
    assert_eq!(cluster_status(&h, &id).await, "pending");
    let tasks = drain(&h, &tid, |_| false).await;
    assert!(tasks
        .iter()
        .any(|t| t["nodeId"] == missing.as_str() && t["taskName"] == "CREATE"));
    assert_eq!(cluster_status(&h, &id).await, "active");

    // Later, both machines are missing: recorded, but the hourly bound holds.
    let r = round(&h, now + 2_000).await;
    assert_eq!(r.drift.checks.len(), 1, "{r:?}");
    while let Some(t) = take(&h, &tid, "w1").await {
        finish_status(&h, &tid, &t, 0, json!({"machine": {"state": "missing"}})).await;
    }
    let r = round(&h, now + 2_010).await;
    assert_eq!(r.drift.recorded, vec![cid]);
    assert!(r.drift.replaced.is_empty(), "{r:?}");
    assert_eq!(cluster_status(&h, &id).await, "active");
    let report = h
        .get(a, &format!("/v2/clusters/{id}/check"))
        .await
        .expect(200)
        .json();
    assert_eq!(report["drift"], true);
    let done = report["replacements"].as_array().unwrap();
    assert_eq!(done.len(), 1, "{report}");
    assert_eq!(done[0]["node"], missing.as_str());
    assert!(done[0]["jobId"].as_str().is_some_and(|j| !j.is_empty()));
}

#[tokio::test]
async fn periodic_checks_are_off_by_default() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 1).await;
    drain(&h, &tid, |_| false).await;
    let r = round(&h, weft_server::state::now_ms()).await;
    assert_eq!(r.drift, Default::default());
    let report = h
        .get(admin(T), &format!("/v2/clusters/{id}/check"))
        .await
        .json();
    assert!(report.get("jobId").is_none(), "{report}");
}

#[tokio::test]
async fn a_tenants_check_interval_turns_its_checks_on() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 1).await;
    drain(&h, &tid, |_| false).await;
    let sa = crate::common::SA;
    let put = |spec: Value| {
        let h = &h;
        async move {
            h.put(
                sa,
                &format!("/v2/tenants/{T}"),
                json!({ "tenant": spec }).to_string(),
            )
            .await
        }
    };
    let r = put(json!({"name": T, "workers": 0, "checkInterval": 999_999_999})).await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(r.text().contains("checkInterval"), "{}", r.text());
    put(json!({"name": T, "workers": 0, "checkInterval": "60"}))
        .await
        .expect(200);
    let t = h
        .get(sa, &format!("/v2/tenants/{T}"))
        .await
        .expect(200)
        .json();
    assert_eq!(t["checkInterval"], 60, "{t}");
    // The server's check_interval is off; the tenant's is on.
    let now = weft_server::state::now_ms();
    let r = round(&h, now).await;
    assert_eq!(r.drift.checks.len(), 1, "{r:?}");
    assert_eq!(r.drift.checks[0].0, id.parse::<u64>().unwrap());
    while let Some(t) = take(&h, &tid, "w1").await {
        finish_status(&h, &tid, &t, 0, json!({"machine": {"state": "running"}})).await;
    }
    // Recorded next round; no new check before the minute is up, one after it.
    let r = round(&h, now + 10).await;
    assert!(r.drift.checks.is_empty(), "{r:?}");
    let r = round(&h, now + 61_000).await;
    assert_eq!(r.drift.checks.len(), 1, "{r:?}");
}

#[tokio::test]
async fn quorum_services_refuse_unsafe_plans_and_stop_automatic_replacement_when_two_are_lost() {
    let h = Harness::with(|raw| {
        raw.check_interval = Some(1);
        raw.auto_replace_per_hour = Some(5);
    })
    .await;
    let tid = setup(&h).await;
    let a = admin(T);
    // b (on every node) keeps data and needs a quorum.
    let mut b = h.get(a, "/v2/services/b").await.expect(200).json();
    b["stateful"] = json!(true);
    b["availability"] = json!({"quorum": true});
    h.put(a, "/v2/services/b", b.to_string()).await.expect(200);
    let mut tpl = h.get(a, "/v2/clustertemplates/t").await.expect(200).json();
    tpl["autoReplace"] = json!(true);
    h.put(a, "/v2/clustertemplates/t", tpl.to_string())
        .await
        .expect(200);
    let id = create(&h, a, 3).await;
    drain(&h, &tid, |_| false).await;

    // Stopping b on its three nodes at once: a 409 that names the service and the numbers.
    let stop = format!("/v2/clusters/{id}/services/b/stop");
    let refused = h.post(a, &stop, "").await.expect(409).text();
    assert!(
        refused.contains("service b needs 2 of its 3 nodes") && refused.contains("quorum"),
        "{refused}"
    );
    assert_eq!(cluster_status(&h, &id).await, "active");
    // Forced: it runs (the job records it).
    h.post(a, &format!("{stop}?force=true"), "")
        .await
        .expect(200);
    drain(&h, &tid, |_| false).await;
    h.post(a, &format!("/v2/clusters/{id}/services/b/start"), "")
        .await
        .expect(200);
    drain(&h, &tid, |_| false).await;
    assert_eq!(cluster_status(&h, &id).await, "active");

    // Two of b's machines are lost at once: the janitor replaces neither and says why.
    let now = weft_server::state::now_ms();
    let r = round(&h, now).await;
    assert_eq!(r.drift.checks.len(), 1, "{r:?}");
    let mut lost = 0;
    while let Some(t) = take(&h, &tid, "w1").await {
        let state = if t["taskName"] == "STATUS" && lost < 2 {
            lost += 1;
            "missing"
        } else {
            "running"
        };
        finish_status(&h, &tid, &t, 0, json!({"machine": {"state": state}})).await;
    }
    let r = round(&h, now + 10).await;
    assert!(r.drift.replaced.is_empty(), "{r:?}");
    assert_eq!(cluster_status(&h, &id).await, "inconsistent");
    let c = h
        .get(a, &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("Automatic replacement stopped: 2 nodes of stateful service b"),
        "{c}"
    );
}

#[tokio::test]
async fn a_machine_a_check_found_lost_is_replaced_without_its_leave() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    // b (on every node) is a member of a group: join and leave.
    let mut b = h.get(a, "/v2/services/b").await.expect(200).json();
    let action =
        |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-b.sh")}});
    b["provisioner"]["actions"]["join"] = action("join");
    b["provisioner"]["actions"]["leave"] = action("leave");
    h.put(a, "/v2/services/b", b.to_string()).await.expect(200);
    let id = create(&h, a, 3).await;
    drain(&h, &tid, |_| false).await;
    let plan_of = |node: String| {
        let (h, id) = (&h, id.clone());
        async move {
            let path = format!("/v2/clusters/{id}/nodes/{node}/replace?dryrun=true");
            let plan = h.post(a, &path, "").await.expect(200).json();
            let actions: Vec<String> = plan["stages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s.as_array().unwrap().iter())
                .filter(|t| t["nodeId"] == node.as_str())
                .map(|t| t["taskName"].as_str().unwrap().to_string())
                .collect();
            actions
        }
    };
    // A check asked through the API finds one machine missing.
    h.post(a, &format!("/v2/clusters/{id}/check"), "")
        .await
        .expect(200);
    let mut lost = None;
    while let Some(t) = take(&h, &tid, "w1").await {
        let state = if lost.is_none() {
            lost = t["nodeId"].as_str().map(String::from);
            "missing"
        } else {
            "running"
        };
        finish_status(&h, &tid, &t, 0, json!({"machine": {"state": state}})).await;
    }
    let lost = lost.unwrap();
    let live = h.get(a, &format!("/v2/clusters/{id}")).await.json()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .find(|n| *n != lost)
        .unwrap();
    let gone = plan_of(lost).await;
    assert!(!gone.contains(&"LEAVE".to_string()), "{gone:?}");
    assert!(gone.contains(&"JOIN".to_string()), "{gone:?}");
    let alive = plan_of(live).await;
    assert_eq!(
        alive.first().map(String::as_str),
        Some("LEAVE"),
        "{alive:?}"
    );
}
