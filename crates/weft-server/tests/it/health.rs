//! Health runs (weft's extension): `POST /v2/clusters/{id}/health` runs the services'
//! `healthcheck` actions without touching the cluster's status; `GET` answers the grid.

use axum::http::Method;
use serde_json::{json, Value};

use crate::clusters::{create, drain, setup, take, T};
use crate::common::{admin, Harness};

/// Gives service `name` a shell healthcheck with `extra` settings.
pub(crate) async fn with_healthcheck(h: &Harness, name: &str, extra: Value) -> u16 {
    let a = admin(T);
    let mut svc = h.get(a, &format!("/v2/services/{name}")).await.json();
    let mut check = json!({"type": "shell", "fields": {"script": format!("check-{name}.sh")}});
    for (k, v) in extra.as_object().unwrap() {
        check[k] = v.clone();
    }
    svc["provisioner"]["actions"]["healthcheck"] = check;
    h.put(a, &format!("/v2/services/{name}"), svc.to_string())
        .await
        .status
        .as_u16()
}

async fn finish_check(h: &Harness, tid: &str, task: &Value, status: i64, result: Value) {
    let body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid,
        "taskId": task["taskId"], "status": status, "stdout": "checked", "stderr": "", "result": result});
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
}

fn cells(grid: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = grid["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["services"].as_array().unwrap().clone())
        .map(|s| {
            (
                s["service"].as_str().unwrap().to_string(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_health_run_reports_each_service_and_leaves_the_cluster_active() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    assert_eq!(with_healthcheck(&h, "a", json!({})).await, 200);
    assert_eq!(
        with_healthcheck(&h, "b", json!({"tries": 2, "interval": "1", "timeout": 4})).await,
        200
    );
    let id = create(&h, a, 2).await;
    drain(&h, &tid, |_| false).await;
    let path = format!("/v2/clusters/{id}/health");

    // Before any run: every checked service is unknown.
    let grid = h.get(a, &path).await.expect(200).json();
    assert!(grid.get("jobId").is_none(), "{grid}");
    assert_eq!(grid["healthy"], false);
    assert!(cells(&grid).iter().all(|(_, s)| s == "unknown"), "{grid}");

    let run = h.post(a, &path, "").await.expect(200).json();
    let job = run["jobId"].as_str().unwrap().to_string();
    let status = h.get(a, &format!("/v2/clusters/{id}/status")).await.json();
    assert_eq!(
        status["status"], "active",
        "a health run leaves the status alone"
    );

    // a reports healthy; b unhealthy on its first node, and on any other its provisioner fails
    // the task: both count as unhealthy, neither is retried, and the run still completes.
    let mut taken: Vec<Value> = Vec::new();
    while let Some(t) = take(&h, &tid, "w1").await {
        assert_eq!(t["taskName"], "HEALTHCHECK");
        let service = t["config"]["service"]["name"].as_str().unwrap().to_string();
        let action = &t["config"]["service"]["action"];
        if service == "a" {
            assert_eq!(action["tries"], 3, "defaults: {action}");
            finish_check(
                &h,
                &tid,
                &t,
                0,
                json!({"health": {"healthy": true, "tries": 1}}),
            )
            .await;
            // Mid-run: what finished shows, the rest is unknown.
            let grid = h.get(a, &path).await.json();
            assert_eq!(grid["jobStatus"], "running");
            assert!(
                cells(&grid).contains(&("a".into(), "healthy".into())),
                "{grid}"
            );
            assert!(
                cells(&grid).contains(&("b".into(), "unknown".into())),
                "{grid}"
            );
        } else if !taken.iter().any(|x| x["config"]["service"]["name"] == "b") {
            assert_eq!(
                *action,
                json!({"type": "shell", "fields": {"script": "check-b.sh"}, "timeout": 4, "tries": 2, "interval": 1})
            );
            let report = json!({"health": {"healthy": false, "tries": 2, "message": "exit 7"}});
            finish_check(&h, &tid, &t, 0, report).await;
        } else {
            finish_check(&h, &tid, &t, 1, json!({})).await;
        }
        taken.push(t);
        assert!(taken.len() < 10, "the run does not end");
    }
    assert_eq!(run["checks"].as_u64().unwrap() as usize, taken.len());
    let bs: Vec<&Value> = taken
        .iter()
        .filter(|t| t["config"]["service"]["name"] == "b")
        .collect();
    assert_eq!(bs.len(), 2, "b runs on both nodes");
    let grid = h.get(a, &path).await.expect(200).json();
    assert_eq!(grid["jobId"], job.as_str());
    assert_eq!(grid["jobStatus"], "complete");
    assert_eq!(grid["healthy"], false);
    let b_cells: Vec<&Value> = grid["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["services"].as_array().unwrap())
        .filter(|s| s["service"] == "b")
        .collect();
    assert_eq!(b_cells.len(), bs.len());
    assert!(b_cells.iter().all(|s| s["state"] == "unhealthy"), "{grid}");
    assert!(
        b_cells
            .iter()
            .any(|s| s["tries"] == 2 && s["output"].as_str().unwrap().contains("exit 7")),
        "{grid}"
    );
    assert!(b_cells.iter().all(|s| s["checkedAt"].as_i64().unwrap() > 0));
    let status = h.get(a, &format!("/v2/clusters/{id}/status")).await.json();
    assert_eq!(
        status["status"], "active",
        "unhealthy services leave the cluster active"
    );
    let node = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert!(
        !node.to_string().contains("\"health\""),
        "health results stay off the nodes"
    );

    // Another operation may run afterwards as usual.
    h.post(a, &format!("/v2/clusters/{id}/services/restart"), "")
        .await
        .expect(200);
    drain(&h, &tid, |_| false).await;
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}/status")).await.json()["status"],
        "active"
    );
    assert_eq!(h.get(a, &path).await.json()["jobId"], job.as_str());
}

#[tokio::test]
async fn unknown_clusters_and_bad_checks_are_refused() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = admin(T);
    h.get(a, "/v2/clusters/00000999/health").await.expect(404);
    h.post(a, "/v2/clusters/00000999/health", "")
        .await
        .expect(404);
    h.post(a, "/v2/clusters/nonsense/health", "")
        .await
        .expect(404);
    for (extra, field) in [
        (json!({"tries": 0}), "provisioner.actions.healthcheck.tries"),
        (
            json!({"timeout": 100000}),
            "provisioner.actions.healthcheck.timeout",
        ),
        (
            json!({"interval": -1}),
            "provisioner.actions.healthcheck.interval",
        ),
        (
            json!({"tries": "often"}),
            "provisioner.actions.healthcheck.tries",
        ),
    ] {
        let mut svc = h.get(a, "/v2/services/a").await.json();
        let mut check = json!({"type": "shell", "fields": {"script": "x"}});
        for (k, v) in extra.as_object().unwrap() {
            check[k] = v.clone();
        }
        svc["provisioner"]["actions"]["healthcheck"] = check;
        let r = h.put(a, "/v2/services/a", svc.to_string()).await;
        let text = r.text();
        assert_eq!(r.status.as_u16(), 400, "{extra}: {text}");
        assert!(text.contains(field), "{extra}: {text}");
    }
    // A pending cluster (its create still runs) has no health run yet.
    let id = create(&h, a, 1).await;
    h.post(a, &format!("/v2/clusters/{id}/health"), "")
        .await
        .expect(409);
}
