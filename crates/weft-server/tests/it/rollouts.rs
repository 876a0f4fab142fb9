//! Rolling changes (issue 20): a restart, upgrade or reconfigure with a `rollout` runs batch by
//! batch behind health gates; a failed gate pauses the job (resumable) or fails it and reverts the
//! nodes it changed, and the job's plan says which, on which nodes.

use std::collections::BTreeSet;

use axum::http::Method;
use serde_json::{json, Value};

use crate::clusters::{create, drain, finish, setup, take, T};
use crate::common::{admin, Harness};
use crate::health::with_healthcheck;

/// Finishes a HEALTHCHECK task with a report.
async fn report(h: &Harness, tid: &str, task: &Value, healthy: bool) {
    let result = json!({"health": {"healthy": healthy, "tries": 1,
        "message": if healthy { Value::Null } else { json!("connection refused") }}});
    let body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid,
        "taskId": task["taskId"], "status": 0, "stdout": "", "stderr": "", "result": result});
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
}

/// Runs the queue: checks answer `healthy(task)`, other tasks succeed. Returns what was taken.
async fn run(h: &Harness, tid: &str, mut healthy: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut taken = Vec::new();
    while let Some(t) = take(h, tid, "w1").await {
        if t["taskName"] == "HEALTHCHECK" {
            let ok = healthy(&t);
            report(h, tid, &t, ok).await;
        } else {
            assert_eq!(finish(h, tid, "w1", &t, 0, "").await, 200);
        }
        taken.push(t);
        assert!(taken.len() < 500, "the job does not end");
    }
    taken
}

fn nodes_of(tasks: &[Value], name: &str) -> Vec<String> {
    tasks
        .iter()
        .filter(|t| t["taskName"] == name)
        .map(|t| t["nodeId"].as_str().unwrap().to_string())
        .collect()
}

async fn status(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}/status"))
        .await
        .expect(200)
        .json()
}

async fn plan(h: &Harness, id: &str, job: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}/plans/{job}"))
        .await
        .expect(200)
        .json()
}

/// The id of the cluster's newest job.
async fn latest_job(h: &Harness, id: &str) -> String {
    let plans = h
        .get(admin(T), &format!("/v2/clusters/{id}/plans"))
        .await
        .expect(200)
        .json();
    plans[0]["id"].as_str().unwrap().to_string()
}

/// A cluster of `size` nodes whose service b has a health check, built and active.
async fn cluster(h: &Harness, size: u64) -> (String, String) {
    let tid = setup(h).await;
    assert_eq!(with_healthcheck(h, "b", json!({})).await, 200);
    let id = create(h, admin(T), size).await;
    drain(h, &tid, |_| false).await;
    assert_eq!(status(h, &id).await["status"], "active");
    (tid, id)
}

#[tokio::test]
async fn a_failed_gate_pauses_the_rollout_and_a_resume_checks_again() {
    let h = Harness::new().await;
    let (tid, id) = cluster(&h, 4).await;
    let a = admin(T);
    let body = json!({"rollout": {"canaries": 1, "maxInFlight": 2, "onFailure": "pause"}});
    h.post(
        a,
        &format!("/v2/clusters/{id}/services/b/restart"),
        body.to_string(),
    )
    .await
    .expect(200);
    let job = latest_job(&h, &id).await;

    // The canary's check fails: nothing else of the rollout runs.
    let taken = run(&h, &tid, |_| false).await;
    let stops = nodes_of(&taken, "STOP");
    assert_eq!(stops.len(), 1, "only the canary restarted: {stops:?}");
    let p = plan(&h, &id, &job).await;
    let r = &p["rollout"];
    assert_eq!(r["outcome"], "paused", "{p}");
    assert_eq!(
        r["policy"],
        json!({"canaries": 1, "maxInFlight": 2, "onFailure": "pause"})
    );
    assert_eq!(r["changedNodes"], json!(stops));
    assert_eq!(r["failedGate"]["node"], stops[0].as_str());
    assert_eq!(r["failedGate"]["service"], "b");
    assert!(r["message"].as_str().unwrap().contains("paused"), "{r}");
    let st = status(&h, &id).await;
    assert_eq!(
        st["status"], "pending",
        "a paused job keeps its cluster: {st}"
    );

    // After a fix, resume: the check runs again, passes, and the rollout goes on to the end.
    h.post(a, &format!("/v2/clusters/{id}/resume"), "")
        .await
        .expect(200);
    let rest = run(&h, &tid, |_| true).await;
    assert_eq!(rest[0]["taskName"], "HEALTHCHECK", "the failed check first");
    assert_eq!(rest[0]["nodeId"], stops[0].as_str());
    let mut all = stops.clone();
    all.extend(nodes_of(&rest, "STOP"));
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "no node restarted twice: {all:?}"
    );
    assert_eq!(status(&h, &id).await["status"], "active");
}

#[tokio::test]
async fn a_failed_gate_with_rollback_reverts_an_upgrade_on_the_canary_only() {
    let h = Harness::new().await;
    let (tid, id) = cluster(&h, 4).await;
    let a = admin(T);
    // A new version of b whose check will fail.
    let mut b = h.get(a, "/v2/services/b").await.json();
    b["provisioner"]["actions"]["install"]["fields"]["script"] = json!("install-b-v2.sh");
    h.put(a, "/v2/services/b", b.to_string()).await.expect(200);
    let body = json!({"rollout": {"onFailure": "rollback"}});
    h.post(
        a,
        &format!("/v2/clusters/{id}/services/b/upgrade"),
        body.to_string(),
    )
    .await
    .expect(200);
    let job = latest_job(&h, &id).await;
    let mut checks = 0;
    let taken = run(&h, &tid, |_| {
        checks += 1;
        checks > 1 // the canary's check fails; the revert has no gates
    })
    .await;
    assert_eq!(checks, 1, "one gate ran");
    let installs = nodes_of(&taken, "INSTALL");
    assert_eq!(
        installs.len(),
        2,
        "the canary's upgrade, then its revert: {installs:?}"
    );
    assert_eq!(installs[0], installs[1]);
    let scripts: Vec<&Value> = taken
        .iter()
        .filter(|t| t["taskName"] == "INSTALL")
        .map(|t| &t["config"]["service"]["action"]["fields"]["script"])
        .collect();
    assert_eq!(scripts, [&json!("install-b-v2.sh"), &json!("install-b.sh")]);

    let p = plan(&h, &id, &job).await;
    let r = &p["rollout"];
    assert_eq!(r["outcome"], "rollingBack", "{p}");
    assert_eq!(r["changedNodes"], json!([installs[0]]));
    let revert = r["revertJob"].as_str().unwrap();
    assert_ne!(revert, job);
    assert_eq!(plan(&h, &id, revert).await["action"], "ROLLBACK_UPGRADE");
    assert!(r["message"].as_str().unwrap().contains(&installs[0]), "{r}");
    assert_eq!(status(&h, &id).await["status"], "active");
}

#[tokio::test]
async fn a_restart_that_fails_its_gate_says_it_cannot_be_reverted() {
    let h = Harness::new().await;
    let (tid, id) = cluster(&h, 3).await;
    let a = admin(T);
    let body = json!({"rollout": {"canaries": 0, "maxInFlight": "50%", "onFailure": "rollback"}});
    h.post(
        a,
        &format!("/v2/clusters/{id}/services/restart"),
        body.to_string(),
    )
    .await
    .expect(200);
    let job = latest_job(&h, &id).await;
    run(&h, &tid, |_| false).await;
    let r = plan(&h, &id, &job).await["rollout"].clone();
    assert_eq!(r["outcome"], "notReverted", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("a restart changes nothing that can be reverted"),
        "{r}"
    );
    let st = status(&h, &id).await;
    assert_eq!(st["status"], "inconsistent", "{st}");
    let c = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert!(c.to_string().contains("Not reverted"), "{c}");
}

#[tokio::test]
async fn bad_rollouts_are_refused_naming_the_field_and_templates_give_defaults() {
    let h = Harness::new().await;
    let (_tid, id) = cluster(&h, 2).await;
    let a = admin(T);
    let restart = format!("/v2/clusters/{id}/services/b/restart");
    for (body, field) in [
        (
            json!({"rollout": {"maxInFlight": 0}}),
            "rollout.maxInFlight",
        ),
        (
            json!({"rollout": {"maxInFlight": "150%"}}),
            "rollout.maxInFlight",
        ),
        (json!({"rollout": {"canaries": "x"}}), "rollout.canaries"),
        (
            json!({"rollout": {"onFailure": "retry"}}),
            "rollout.onFailure",
        ),
        (json!({"rollout": 3}), "rollout"),
    ] {
        let r = h.post(a, &restart, body.to_string()).await;
        let text = r.text();
        assert_eq!(r.status.as_u16(), 400, "{body}: {text}");
        assert!(text.contains(field), "{body}: {text}");
    }
    let r = h
        .post(
            a,
            &format!("/v2/clusters/{id}/services/b/stop"),
            json!({"rollout": {}}).to_string(),
        )
        .await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text());
    assert!(r.text().contains("rollout"));
    let r = h
        .put(
            a,
            &format!("/v2/clusters/{id}/config"),
            json!({"config": {}, "rollout": {"onFailure": 1}}).to_string(),
        )
        .await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(r.text().contains("rollout.onFailure"), "{}", r.text());

    // A template's administration.rollout is checked, and gives the defaults.
    let mut t = h.get(a, "/v2/clustertemplates/t").await.json();
    t["administration"] = json!({"rollout": {"maxInFlight": "-5%"}});
    let r = h.put(a, "/v2/clustertemplates/t", t.to_string()).await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(
        r.text().contains("administration.rollout.maxInFlight"),
        "{}",
        r.text()
    );
    t["administration"] = json!({"rollout": {"maxInFlight": "50%", "onFailure": "rollback"}});
    h.put(a, "/v2/clustertemplates/t", t.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id(T).await;
    let id2 = create(&h, a, 2).await;
    drain(&h, &tid, |_| false).await;
    let preview = h
        .post(
            a,
            &format!("/v2/clusters/{id2}/services/b/restart?dryrun=true"),
            json!({"rollout": {"canaries": 0}}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        preview["rollout"]["policy"],
        json!({"canaries": 0, "maxInFlight": "50%", "onFailure": "rollback"}),
        "{preview}"
    );
    // Without a rollout anywhere, a restart is the plain one.
    let plain = h
        .post(a, &format!("{restart}?dryrun=true"), "")
        .await
        .expect(200)
        .json();
    assert!(plain.get("rollout").is_none(), "{plain}");
}
