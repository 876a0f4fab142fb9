//! Deleting a cluster whose job is running (issue 13): the job is aborted, its queued tasks never
//! start, tasks already running end (or time out), and then the cluster is deleted: every node gets
//! its DELETE, and the cluster ends terminated.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::clusters::{create, drain, finish, setup, take, T};
use crate::common::{admin, Harness};

async fn status(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}/status"))
        .await
        .expect(200)
        .json()
}

async fn node_ids(h: &Harness, id: &str) -> BTreeSet<String> {
    let d = h
        .get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json();
    d["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// Drains the queue and checks that it held exactly one DELETE per node, and that the cluster is
/// terminated afterwards.
async fn deletes_every_node(h: &Harness, tid: &str, id: &str, nodes: &BTreeSet<String>) {
    let tasks = drain(h, tid, |_| false).await;
    let names: Vec<&str> = tasks
        .iter()
        .map(|t| t["taskName"].as_str().unwrap())
        .collect();
    assert!(names.iter().all(|n| *n == "DELETE"), "{names:?}");
    let deleted: BTreeSet<String> = tasks
        .iter()
        .map(|t| t["nodeId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(&deleted, nodes, "one DELETE per node");
    assert_eq!(tasks.len(), nodes.len());
    assert_eq!(status(h, id).await["status"], "terminated");
}

#[tokio::test]
async fn a_delete_aborts_the_running_job_waits_for_its_task_then_deletes() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 2).await;
    let nodes = node_ids(&h, &id).await;
    let running = take(&h, &tid, "w1").await.expect("a task");
    assert_eq!(running["taskName"], "CREATE");

    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    let s = status(&h, &id).await;
    assert_eq!(s["status"], "pending", "a task is still running: {s}");
    assert_eq!(s["actionstatus"], "failed", "the create is aborted: {s}");
    assert!(
        take(&h, &tid, "w2").await.is_none(),
        "no queued task of the aborted job starts"
    );
    // A second delete meanwhile changes nothing and is no error.
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    assert!(take(&h, &tid, "w2").await.is_none());

    // The running CREATE ends; then, and only then, the delete starts.
    assert_eq!(finish(&h, &tid, "w1", &running, 0, "").await, 200);
    assert_eq!(status(&h, &id).await["action"], "cluster_delete");
    deletes_every_node(&h, &tid, &id, &nodes).await;
}

#[tokio::test]
async fn a_delete_of_a_paused_job_with_nothing_running_starts_at_once() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 2).await;
    let nodes = node_ids(&h, &id).await;
    // One task ran (a machine may exist), then the job is paused with nothing running.
    let first = take(&h, &tid, "w1").await.expect("a task");
    assert_eq!(finish(&h, &tid, "w1", &first, 0, "").await, 200);
    h.post(a, &format!("/v2/clusters/{id}/pause"), "")
        .await
        .expect(200);
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    let s = status(&h, &id).await;
    assert_eq!(s["action"], "cluster_delete", "{s}");
    assert_eq!(s["actionstatus"], "running", "{s}");
    // The aborted create says why it ended.
    let plans = h
        .get(a, &format!("/v2/clusters/{id}/plans"))
        .await
        .expect(200)
        .json();
    assert!(
        plans.as_array().unwrap().len() >= 3,
        "SOLVE_LAYOUT, CLUSTER_CREATE, CLUSTER_DELETE: {plans}"
    );
    deletes_every_node(&h, &tid, &id, &nodes).await;
}

#[tokio::test]
async fn a_delete_waits_for_a_hung_task_until_its_lease_runs_out() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 1).await;
    let nodes = node_ids(&h, &id).await;
    let hung = take(&h, &tid, "w1").await.expect("a task");
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    assert_eq!(status(&h, &id).await["status"], "pending");

    // The janitor fails the task whose lease ran out; that settles the cluster and starts the delete.
    let st = &h.app.state;
    let later = weft_server::state::now_ms() + st.settings.task_timeout_ms + 1000;
    assert!(st
        .store
        .heartbeat_provisioner("p1", &BTreeMap::new(), later)
        .await
        .unwrap());
    let report = weft_engine::janitor::run_once(&st.engine, later)
        .await
        .unwrap();
    assert_eq!(
        report.timed_out_tasks,
        vec![hung["taskId"].as_str().unwrap()]
    );
    assert_eq!(status(&h, &id).await["action"], "cluster_delete");
    // The worker that lost the lease cannot finish the task any more.
    assert_eq!(finish(&h, &tid, "w1", &hung, 0, "").await, 417);
    deletes_every_node(&h, &tid, &id, &nodes).await;
}

#[tokio::test]
async fn a_delete_during_a_running_reconfigure_deletes_too() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 2).await;
    drain(&h, &tid, |_| false).await;
    let nodes = node_ids(&h, &id).await;
    h.put(
        a,
        &format!("/v2/clusters/{id}/config"),
        serde_json::json!({"config": {"x": "1"}}).to_string(),
    )
    .await
    .expect(200);
    let running = take(&h, &tid, "w1").await.expect("a task");
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    // The reconfigure's running task fails; the delete still follows.
    assert_eq!(finish(&h, &tid, "w1", &running, 1, "broke").await, 200);
    deletes_every_node(&h, &tid, &id, &nodes).await;
}

/// A cluster whose delete can never succeed (its machines' credentials are lost for good) is ended
/// by an admin with `?force=true`: refused while a task of it runs, refused to a user, then the
/// cluster is terminated with a message saying who forced it and that no machine was deleted.
#[tokio::test]
async fn an_admin_forces_a_stuck_delete_and_it_is_recorded() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    let id = create(&h, a, 1).await;
    let running = take(&h, &tid, "w1").await.expect("a task");
    let path = format!("/v2/clusters/{id}?force=true");
    let r = h.delete(a, &path).await;
    assert_eq!(r.status.as_u16(), 409, "a task runs: {}", r.text());
    assert_eq!(
        finish(&h, &tid, "w1", &running, 1, "cannot reach the cloud").await,
        200
    );
    // Every attempt fails: the create fails, then so does the delete.
    drain(&h, &tid, |_| true).await;
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    drain(&h, &tid, |_| true).await;
    assert_eq!(details(&h, &id).await["status"], "incomplete");
    let r = h.delete(crate::common::user("bob", T), &path).await;
    assert!(matches!(r.status.as_u16(), 403 | 404), "{}", r.text());
    h.delete(a, &format!("/v2/clusters/{id}?force=maybe"))
        .await
        .expect(400);
    h.delete(a, &path).await.expect(200);
    let c = details(&h, &id).await;
    assert_eq!(c["status"], "terminated");
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Deleted by force by admin")
            && message.contains("none of its 1 machines"),
        "{message}"
    );
    // Nothing is left for a provisioner.
    assert!(take(&h, &tid, "w1").await.is_none());
}

async fn details(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json()
}

/// A cluster no task of which ever ran (no provisioner offers its provider type, or none is
/// running) says why it waits, and its delete completes at once: no machine can exist.
#[tokio::test]
async fn a_cluster_nobody_can_work_on_says_so_and_its_delete_completes() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    h.workers(T, 0).await;
    let a = admin(T);
    let id = create(&h, a, 2).await;
    // The test's tenant has no workers (its tasks are taken by hand here): a real provisioner
    // would run none for it, and the status says so.
    let s = status(&h, &id).await;
    assert_eq!(
        s["waiting"], "waiting: tenant acme has no workers (a superadmin sets them)",
        "{s}"
    );
    // The provisioner goes away.
    let r = h
        .internal(
            axum::http::Method::DELETE,
            "/v2/provisioners/p1",
            String::new(),
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    let s = status(&h, &id).await;
    assert_eq!(s["waiting"], "waiting: no provisioner is running", "{s}");
    assert_eq!(
        details(&h, &id).await["waiting"],
        "waiting: no provisioner is running"
    );
    let cookie = crate::ui::login(&h, T, "admin", "").await;
    let page = crate::ui::page(&h, &cookie, &format!("/ui/clusters/{id}"))
        .await
        .expect(200)
        .text();
    assert!(
        page.contains(">waiting: no provisioner is running</dd>"),
        "{page}"
    );
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    let c = details(&h, &id).await;
    assert_eq!(c["status"], "terminated", "{c}");
    assert_eq!(
        c["message"],
        "Deleted before any of its tasks ran: no machine was made."
    );
    // A provisioner that comes back, given the tenant's workers, finds nothing of it to do.
    h.provisioner("p1", 10).await;
    h.workers(T, 1).await;
    assert!(take(&h, &tid, "w1").await.is_none());
}
