//! The janitor, one round at a chosen time (`run_once(state, now)`): expired task leases fail and
//! retry (and the worker that lost the lease gets 417), expired cluster leases start a delete job,
//! silent provisioners are dropped and their workers placed elsewhere. Leadership: of two servers on
//! one database, exactly one runs the janitor, and the other takes over when it goes.
//!
//! Also the small engine driver the callback tests share: a catalog, a cluster, take and finish.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::Method;
use serde_json::{json, Value};
use weft_engine::janitor::{run_once, Janitor, JanitorReport};
use weft_server::config::RawConfig;
use weft_store::{ChangeSet, Expect, Write};

use crate::common::{admin, Harness, SA};

pub(crate) const T: &str = "acme";

/// Tenant `acme` with provisioner `p1`, provider type `local`, automator `shell`, and template `t`
/// with one service `a` (install, start). Returns the tenant id.
pub(crate) async fn setup(h: &Harness) -> String {
    h.tenant(T).await;
    h.provisioner("p1", 10).await;
    h.workers(T, 1).await;
    let local = json!({"name": "local"});
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
    let action = |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}.sh")}});
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
        (
            "services",
            json!({"name": "a", "provisioner": {"actions": {"install": action("install"), "start": action("start")}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["a"], "provider": "local"},
                   "constraints": {"size": {"min": 1, "max": 10}}}),
        ),
    ];
    for (kind, body) in posts {
        h.post(admin(T), &format!("/v2/{kind}"), body.to_string())
            .await
            .expect(200);
    }
    h.tenant_id(T).await
}

/// Creates cluster `c1` of one node; returns its id text.
pub(crate) async fn create(h: &Harness) -> String {
    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": 1});
    let r = h
        .post(admin(T), "/v2/clusters", body.to_string())
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
        200 => Some(r.json()),
        other => panic!("take answered {other}: {}", r.text()),
    }
}

pub(crate) async fn finish(
    h: &Harness,
    tenant_id: &str,
    worker: &str,
    task: &Value,
    status: i64,
) -> u16 {
    let mut body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tenant_id,
        "taskId": task["taskId"], "status": status, "stdout": "out", "stderr": "err"});
    if task["taskName"] == "CONFIRM" && status == 0 {
        body["ipaddresses"] = json!({"access_v4": "10.1.0.1", "bind_v4": "10.1.0.1"});
    }
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .status
        .as_u16()
}

/// Takes and finishes (successfully) every task until the queue is empty; returns the task names.
pub(crate) async fn drain(h: &Harness, tenant_id: &str) -> Vec<String> {
    let mut names = Vec::new();
    while let Some(task) = take(h, tenant_id, "w1").await {
        assert_eq!(finish(h, tenant_id, "w1", &task, 0).await, 200);
        names.push(task["taskName"].as_str().unwrap().to_string());
        assert!(names.len() < 100, "the job does not end");
    }
    names
}

async fn cluster(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json()
}

/// A time after every lease handed out now has run out.
fn after_leases(h: &Harness) -> i64 {
    weft_server::state::now_ms() + h.app.state.settings.task_timeout_ms + 1000
}

/// A janitor round at `now`, with provisioner `p1` having sent a heartbeat at `now` (so that only
/// leases run out, not the provisioner).
async fn round(h: &Harness, now: i64) -> JanitorReport {
    let st = &h.app.state.engine;
    assert!(st
        .store
        .heartbeat_provisioner("p1", &BTreeMap::new(), now)
        .await
        .unwrap());
    run_once(st, now).await.unwrap()
}

#[tokio::test]
async fn an_expired_task_is_retried_and_its_late_finish_is_refused() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h).await;
    let first = take(&h, &tid, "w1").await.expect("a task");
    assert_eq!(first["taskName"], "CREATE");

    // Not yet expired: nothing happens.
    let r = round(&h, weft_server::state::now_ms()).await;
    assert!(r.timed_out_tasks.is_empty(), "{r:?}");

    let r = round(&h, after_leases(&h)).await;
    assert_eq!(r.timed_out_tasks, vec![first["taskId"].as_str().unwrap()]);
    // The worker that lost the lease cannot finish the task any more.
    assert_eq!(finish(&h, &tid, "w1", &first, 0).await, 417);
    // The node's action is failed with the timeout message.
    let c = cluster(&h, &id).await;
    let action = c["nodes"][0]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|a| a["taskId"] == first["taskId"])
        .cloned()
        .expect("the node keeps the action");
    assert_eq!(action["status"], "failed", "{action}");
    assert!(
        action["stderr"]
            .as_str()
            .unwrap()
            .contains("timed out after 1800 s"),
        "{action}"
    );
    // The retry of a CREATE starts with a cleanup DELETE, then runs CREATE again; the job succeeds.
    let names = drain(&h, &tid).await;
    assert_eq!(&names[..2], ["DELETE", "CREATE"], "{names:?}");
    assert_eq!(cluster(&h, &id).await["status"], "active");
    // A second round finds nothing left to time out.
    let r = round(&h, after_leases(&h)).await;
    assert!(r.timed_out_tasks.is_empty(), "{r:?}");
}

#[tokio::test]
async fn a_task_that_times_out_too_often_fails_its_job() {
    let h = Harness::with(|c: &mut RawConfig| c.max_action_retries = Some(1)).await;
    let tid = setup(&h).await;
    let id = create(&h).await;
    let mut events = h.app.state.engine.events.subscribe();
    let task = take(&h, &tid, "w1").await.expect("a task");
    let r = round(&h, after_leases(&h)).await;
    assert_eq!(r.timed_out_tasks.len(), 1);
    assert_eq!(finish(&h, &tid, "w1", &task, 0).await, 417);
    let c = cluster(&h, &id).await;
    assert_eq!(c["status"], "incomplete", "{c}");
    assert!(take(&h, &tid, "w1").await.is_none());
    let ev = events.try_recv().expect("a failure notice");
    assert_eq!(ev.kind, weft_engine::JobEventKind::Failure);
}

/// Sets a cluster's lease end directly in the store.
async fn set_expiry(h: &Harness, tenant_id: &str, id: &str, expire: i64) {
    let n: u64 = id.parse().unwrap();
    let row = h
        .app
        .state
        .store
        .get_cluster(tenant_id, n)
        .await
        .unwrap()
        .unwrap();
    let mut new = row.clone();
    new.expire_time = expire;
    let cs = ChangeSet {
        expect: vec![Expect::cluster(&row)],
        writes: vec![Write::Cluster(new)],
    };
    h.app.state.store.commit(&cs).await.unwrap();
}

#[tokio::test]
async fn an_expired_cluster_is_deleted() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h).await;
    drain(&h, &tid).await;
    assert_eq!(cluster(&h, &id).await["status"], "active");
    let now = weft_server::state::now_ms();
    // No lease (0): never expires.
    let r = round(&h, now).await;
    assert!(r.expired_clusters.is_empty());
    set_expiry(&h, &tid, &id, now + 60_000).await;
    let r = round(&h, now).await;
    assert!(r.expired_clusters.is_empty(), "not expired yet: {r:?}");

    let mut events = h.app.state.engine.events.subscribe();
    let r = round(&h, now + 120_000).await;
    assert_eq!(r.expired_clusters.len(), 1, "{r:?}");
    let (cid, job) = r.expired_clusters[0].clone();
    assert_eq!(format!("{cid:08}"), id);
    let c = cluster(&h, &id).await;
    assert_eq!(c["status"], "pending");
    assert_eq!(c["latestJobId"], job.as_str());
    let ev = events.try_recv().expect("a start notice");
    assert_eq!(ev.job_id, job);
    // The same delete job as DELETE /v2/clusters/{id}: only node deletes, then terminated.
    let names = drain(&h, &tid).await;
    assert!(names.iter().all(|n| n == "DELETE"), "{names:?}");
    assert_eq!(cluster(&h, &id).await["status"], "terminated");
    let plans = h
        .get(admin(T), &format!("/v2/clusters/{id}/plans/{job}"))
        .await
        .expect(200)
        .json();
    assert_eq!(plans["action"], "CLUSTER_DELETE", "{plans}");
    // Terminated clusters are not deleted again.
    let r = round(&h, now + 240_000).await;
    assert!(r.expired_clusters.is_empty());
}

#[tokio::test]
async fn silent_provisioners_are_dropped_and_their_workers_placed_elsewhere() {
    let h = Harness::new().await;
    h.provisioner("p1", 4).await;
    h.provisioner("p2", 4).await;
    let body = json!({"tenant": {"name": "busy", "workers": 4}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let tid = h.tenant_id("busy").await;
    let store = &h.app.state.store;
    let assigned = |ps: &[weft_store::ProvisionerRecord]| -> BTreeMap<String, u32> {
        ps.iter()
            .map(|p| (p.id.clone(), p.assignments.get(&tid).copied().unwrap_or(0)))
            .collect()
    };
    let before = assigned(&store.list_provisioners().await.unwrap());
    assert_eq!(before.values().sum::<u32>(), 4);
    assert!(before.values().all(|n| *n > 0), "{before:?}");

    let later = weft_server::state::now_ms() + h.app.state.settings.provisioner_timeout_ms + 5000;
    // p2 keeps beating; p1 has been silent since it registered.
    assert!(store
        .heartbeat_provisioner("p2", &BTreeMap::new(), later)
        .await
        .unwrap());
    let r = run_once(&h.app.state.engine, later).await.unwrap();
    assert_eq!(r.dropped_provisioners, vec!["p1".to_string()]);
    let after = store.list_provisioners().await.unwrap();
    assert_eq!(assigned(&after), BTreeMap::from([("p2".to_string(), 4)]));
    // The next round drops nobody.
    let r = run_once(&h.app.state.engine, later).await.unwrap();
    assert!(r.dropped_provisioners.is_empty());
}

/// Two servers on the same SQLite file in this process: one leads, the other takes over when the
/// first goes.
#[tokio::test]
async fn one_janitor_leads_per_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = weft_testkit::temp_sqlite_url(&dir);
    let a = server(&url, &dir).await;
    let b = server(&url, &dir).await;
    let mut ja = Janitor::new(a.state.engine.clone());
    let mut jb = Janitor::new(b.state.engine.clone());
    assert!(ja.lead().await.unwrap());
    assert!(!jb.lead().await.unwrap());
    assert!(ja.lead().await.unwrap(), "a leader keeps leading");
    let now = weft_server::state::now_ms();
    assert!(ja.tick(now).await.unwrap().is_some());
    assert!(
        jb.tick(now).await.unwrap().is_none(),
        "only the leader runs rounds"
    );
    // A leader that stops renewing (gone, or frozen) is replaced once its lease has passed.
    let lease = a.state.settings.janitor_interval_ms as i64;
    let later = weft_server::state::now_ms() + lease + 1;
    assert!(
        jb.lead_at(later).await.unwrap(),
        "the second server takes over"
    );
    assert!(jb.is_leader());
    assert!(
        !ja.lead_at(later).await.unwrap(),
        "the first finds its lease lost"
    );
}

/// The same on PostgreSQL, where the servers could be on different machines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_janitor_leads_per_postgres_database() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = server(&pg.url(), &dir).await;
    let b = server(&pg.url(), &dir).await;
    let mut ja = Janitor::new(a.state.engine.clone());
    let mut jb = Janitor::new(b.state.engine.clone());
    assert!(ja.lead().await.unwrap());
    assert!(!jb.lead().await.unwrap());
    assert!(!jb.lead().await.unwrap());
    assert!(ja.lead().await.unwrap(), "a leader keeps leading");
    // A leader that resigns hands over at once.
    ja.resign().await;
    assert!(!ja.is_leader());
    assert!(jb.lead().await.unwrap());
    assert!(!ja.lead().await.unwrap());
    // A leader that dies or freezes (stops renewing) is replaced once its lease has passed, and
    // cannot renew afterwards.
    let lease = a.state.settings.janitor_interval_ms as i64;
    let later = weft_server::state::now_ms() + lease + 1;
    assert!(ja.lead_at(later).await.unwrap());
    assert!(!jb.lead_at(later + 1).await.unwrap());
    let now = weft_server::state::now_ms();
    assert!(ja.tick(now).await.unwrap().is_some());
}

async fn server(url: &str, dir: &tempfile::TempDir) -> weft_server::App {
    let settings = RawConfig {
        data_dir: Some(dir.path().to_path_buf()),
        secrets_key_file: Some(crate::common::shared_key_file(url)),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    let store = weft_store::open(url).await.unwrap();
    let app = weft_server::app(Arc::clone(&store), settings);
    app.state.outbound.set_enabled(false);
    app
}
