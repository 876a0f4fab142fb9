//! The engine called directly, on a temporary SQLite store, with no HTTP server: create requests
//! refused in the engine's own terms, a cluster created and run to active by a scripted worker,
//! deleted, and a request that cannot be laid out recorded as a terminated cluster; catalog writes
//! with provider secrets masked and sealed, and plugin resources from upload to a copy in a new
//! tenant; the rules of tenants, API keys, profiles, host pools, sweeps and provisioners; and the
//! time rules (task leases, cluster leases, silent provisioners) on a paused clock moved by hand,
//! without sleeping.

// A test reads as one scenario; short functions (docs/dev/style.md) are for the crates' code.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;
use weft_engine::create::{create_cluster, Created};
use weft_engine::delete::start_delete;
use weft_engine::janitor::{run_once, JanitorReport};
use weft_engine::provisioners;
use weft_engine::work::{finish, take};
use weft_engine::{
    Caller, Clock, Engine, EngineError, EngineSettings, ManualClock, Quiet, Role, SystemClock,
};
use weft_model::Heartbeat;
use weft_model::{
    ClusterCreateRequest, ClusterStatus, EntityKind, FinishTaskRequest, JobStatus, TakeTaskRequest,
};
use weft_store::{ProvisionerRecord, Store, TaskState, Tenant, SUPERADMIN};

/// An engine over a fresh store with tenant `acme`: provider `local`, hardware `small`, image
/// `host`, services `a` and `b` (b needs a) and template `t` (1 to 5 nodes, one `a`).
struct Fixture {
    engine: Engine,
    who: Caller,
    _dir: TempDir,
}

async fn fixture(max_clusters: u64) -> Fixture {
    fixture_on(max_clusters, Arc::new(SystemClock::new())).await
}

/// [`fixture`] with an engine that reads the time from `clock`.
async fn fixture_on(max_clusters: u64, clock: Arc<dyn Clock>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("weft.db").display());
    let store: Arc<dyn Store> = weft_store::open(&url).await.unwrap();
    let tenant = Tenant {
        id: "t-acme".into(),
        spec: serde_json::from_value(
            json!({"name": "acme", "workers": 1, "maxClusters": max_clusters}),
        )
        .unwrap(),
        create_time: 0,
    };
    store.insert_tenant(&tenant).await.unwrap();
    let put = |tenant: &'static str, kind: EntityKind, body: Value| {
        let store = store.clone();
        async move {
            let name = body["name"].as_str().unwrap().to_string();
            store
                .create_entity(tenant, kind, &name, &body)
                .await
                .unwrap();
        }
    };
    put(
        SUPERADMIN,
        EntityKind::ProviderType,
        json!({"name": "local"}),
    )
    .await;
    put(
        SUPERADMIN,
        EntityKind::AutomatorType,
        json!({"name": "shell"}),
    )
    .await;
    let t = "t-acme";
    put(
        t,
        EntityKind::Provider,
        json!({"name": "local", "providertype": "local"}),
    )
    .await;
    put(
        t,
        EntityKind::HardwareType,
        json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
    )
    .await;
    put(
        t,
        EntityKind::ImageType,
        json!({"name": "host", "providermap": {"local": {"image": "img"}}}),
    )
    .await;
    put(t, EntityKind::Service, service("a", &[])).await;
    put(t, EntityKind::Service, service("b", &["a"])).await;
    put(
        t,
        EntityKind::ClusterTemplate,
        json!({"name": "t", "defaults": {"services": ["a", "b"], "provider": "local"},
               "constraints": {"size": {"min": 1, "max": 5},
                               "services": {"a": {"quantities": {"min": 1, "max": 1}}}}}),
    )
    .await;
    store
        .upsert_provisioner(&ProvisionerRecord {
            id: "p1".into(),
            host: "127.0.0.1".into(),
            port: 1,
            capacity_total: 4,
            // p1 holds the tenant's worker: it may take its tasks.
            assignments: BTreeMap::from([("t-acme".to_string(), 1)]),
            usage: BTreeMap::new(),
            last_heartbeat_ms: clock.now_ms(),
            tls: false,
        })
        .await
        .unwrap();
    let settings = EngineSettings {
        task_timeout_ms: 60_000,
        max_action_retries: 3,
        janitor_interval_ms: 1_000,
        provisioner_timeout_ms: 60_000,
        callback_url: None,
        callback_command: None,
        callback_timeout_ms: 1_000,
        check_interval_ms: 0,
        auto_replace_per_hour: 2,
        max_cluster_size: weft_model::MAX_CLUSTER_SIZE,
        audit_retention_ms: 0,
        event_retention_ms: 0,
        webhooks: Default::default(),
    };
    Fixture {
        engine: Engine::new(store, settings, Arc::new(Quiet)).with_clock(clock),
        who: Caller {
            tenant,
            user: "alice".into(),
            role: Role::User,
        },
        _dir: dir,
    }
}

fn service(name: &str, requires: &[&str]) -> Value {
    let action =
        |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-{name}.sh")}});
    json!({"name": name, "dependencies": {"runtime": {"requires": requires}},
           "provisioner": {"actions": {"install": action("install"), "configure": action("configure"),
                                       "start": action("start"), "stop": action("stop")}}})
}

fn request(template: &str, size: i64) -> ClusterCreateRequest {
    serde_json::from_value(json!({"name": "c1", "clusterTemplate": template, "numMachines": size}))
        .unwrap()
}

/// Takes and finishes tasks (all succeed) until none is left; returns how many ran.
async fn run_worker(e: &Engine) -> usize {
    let mut ran = 0;
    loop {
        let req = TakeTaskRequest {
            worker_id: Some("w1".into()),
            provisioner_id: Some("p1".into()),
            tenant_id: Some("t-acme".into()),
            ..Default::default()
        };
        let Some(task) = take(e, req).await.unwrap() else {
            return ran;
        };
        let task: Value = serde_json::from_str(&task).unwrap();
        let fin: FinishTaskRequest = serde_json::from_value(json!({
            "workerId": "w1", "provisionerId": "p1", "tenantId": "t-acme",
            "taskId": task["taskId"], "status": 0
        }))
        .unwrap();
        finish(e, fin).await.unwrap();
        ran += 1;
        assert!(ran < 100, "the job never ends");
    }
}

async fn status(e: &Engine, id: &str) -> ClusterStatus {
    let id = weft_engine::parse_cluster_id(id).unwrap();
    e.store
        .get_cluster("t-acme", id)
        .await
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn a_cluster_is_created_run_and_deleted_without_http() {
    let f = fixture(10).await;
    let Created::Id(id) = create_cluster(&f.engine, &f.who, request("t", 3), false)
        .await
        .unwrap()
    else {
        panic!("not a dry run");
    };
    assert_eq!(id, "00000001");
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Pending);
    let ran = run_worker(&f.engine).await;
    assert!(
        ran >= 3 * 3,
        "create, confirm and bootstrap per node at least; ran {ran}"
    );
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Active);

    let row = weft_engine::view::visible(&f.engine, &f.who, &id)
        .await
        .unwrap();
    assert!(start_delete(&f.engine, &row).await.unwrap().is_some());
    let row = weft_engine::view::visible(&f.engine, &f.who, &id)
        .await
        .unwrap();
    let underway = start_delete(&f.engine, &row).await.unwrap_err();
    assert!(
        matches!(underway, EngineError::JobUnderway { .. }),
        "{underway:?}"
    );
    run_worker(&f.engine).await;
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Terminated);
}

#[tokio::test]
async fn requests_are_refused_in_domain_terms() {
    let f = fixture(1).await;
    let e = create_cluster(&f.engine, &f.who, request("nope", 2), false)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::NotInCatalog { kind: "cluster template", name } if name == "nope"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "cluster template nope does not exist.");

    let e = create_cluster(&f.engine, &f.who, request("t", 9), false)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Size must be at most 5 for template t");

    let e = create_cluster(&f.engine, &f.who, request("t", 0), false)
        .await
        .unwrap_err();
    assert!(matches!(e, EngineError::Invalid(_)), "{e:?}");

    create_cluster(&f.engine, &f.who, request("t", 1), false)
        .await
        .unwrap();
    let e = create_cluster(&f.engine, &f.who, request("t", 1), false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::ClusterQuota {
                limit: 1,
                has: 1,
                ..
            }
        ),
        "{e:?}"
    );

    // Another user of the tenant does not see alice's cluster.
    let bob = Caller {
        user: "bob".into(),
        ..f.who.clone()
    };
    let e = weft_engine::view::visible(&f.engine, &bob, "1")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "cluster 1 not found.");
}

#[tokio::test]
async fn a_dry_run_plans_and_records_nothing() {
    let f = fixture(10).await;
    let Created::Plan(plan) = create_cluster(&f.engine, &f.who, request("t", 2), true)
        .await
        .unwrap()
    else {
        panic!("a dry run answers a plan");
    };
    assert_eq!(plan.action, "CLUSTER_CREATE");
    assert!(!plan.stages.is_empty());
    assert_eq!(
        f.engine.store.count_clusters("t-acme").await.unwrap(),
        (0, 0)
    );
}

#[tokio::test]
async fn a_request_without_a_layout_ends_terminated_with_the_reason() {
    let f = fixture(10).await;
    // Two `a` are asked for where the template allows one.
    let mut req = request("t", 2);
    req.services = Some(vec!["a".into()]);
    let dry = create_cluster(&f.engine, &f.who, req.clone(), true)
        .await
        .unwrap_err();
    assert!(matches!(dry, EngineError::Unservable(_)), "{dry:?}");
    let Created::Id(id) = create_cluster(&f.engine, &f.who, req, false).await.unwrap() else {
        panic!("not a dry run");
    };
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Terminated);
    let row = weft_engine::view::visible(&f.engine, &f.who, &id)
        .await
        .unwrap();
    let body: weft_engine::body::ClusterBody = weft_engine::body::from_body(&row.body).unwrap();
    assert_eq!(body.message.as_deref(), Some(dry.to_string().as_str()));
}

/// A worker whose finishes `answer` writes (`None`: success): takes and finishes until no task
/// is left; returns `(taskName, taskId)` of every task it ran, in order.
async fn run_scripted(
    e: &Engine,
    mut answer: impl FnMut(&Value) -> Option<Value>,
) -> Vec<(String, String)> {
    let mut ran = Vec::new();
    loop {
        let req = TakeTaskRequest {
            worker_id: Some("w1".into()),
            provisioner_id: Some("p1".into()),
            tenant_id: Some("t-acme".into()),
            ..Default::default()
        };
        let Some(task) = take(e, req).await.unwrap() else {
            return ran;
        };
        let task: Value = serde_json::from_str(&task).unwrap();
        let mut fin = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": "t-acme",
                             "taskId": task["taskId"], "status": 0});
        if let Some(Value::Object(failed)) = answer(&task) {
            fin["status"] = json!(1);
            fin.as_object_mut().unwrap().extend(failed);
        }
        finish(e, serde_json::from_value(fin).unwrap())
            .await
            .unwrap();
        ran.push((
            task["taskName"].as_str().unwrap().to_string(),
            task["taskId"].as_str().unwrap().to_string(),
        ));
        assert!(ran.len() < 100, "the job never ends");
    }
}

async fn create_one(f: &Fixture) -> String {
    let Created::Id(id) = create_cluster(&f.engine, &f.who, request("t", 1), false)
        .await
        .unwrap()
    else {
        panic!("not a dry run");
    };
    id
}

/// The cluster's latest job (status, message), the cluster's message, and its tasks.
async fn outcome(
    e: &Engine,
    id: &str,
) -> (
    JobStatus,
    Option<String>,
    Option<String>,
    Vec<weft_store::TaskRow>,
) {
    let cid = weft_engine::parse_cluster_id(id).unwrap();
    let row = e.store.get_cluster("t-acme", cid).await.unwrap().unwrap();
    let job_id = row.latest_job.clone().unwrap();
    let job = e.store.get_job("t-acme", &job_id).await.unwrap().unwrap();
    let jb: weft_engine::body::JobBody = weft_engine::body::from_body(&job.body).unwrap();
    let cb: weft_engine::body::ClusterBody = weft_engine::body::from_body(&row.body).unwrap();
    let tasks = e.store.list_tasks("t-acme", &job_id).await.unwrap();
    (job.status, jb.message, cb.message, tasks)
}

#[tokio::test]
async fn a_fatal_create_fails_the_job_at_once_and_its_clean_up_still_runs() {
    let f = fixture(10).await;
    let id = create_one(&f).await;
    let ran = run_scripted(&f.engine, |t| {
        (t["taskName"] == "CREATE").then(|| {
            json!({"stderr": "ec2: AuthFailure: AWS was not able to validate the credentials",
                   "failure": {"retryable": false, "reason": "auth"}})
        })
    })
    .await;
    let names: Vec<&str> = ran.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["CREATE", "DELETE"],
        "one CREATE, then its clean-up; ran {ran:?}"
    );
    assert!(ran[1].1.ends_with("-cleanup"), "{ran:?}");
    let (job_status, job_msg, cluster_msg, tasks) = outcome(&f.engine, &id).await;
    assert_eq!(job_status, JobStatus::Failed);
    let create = tasks.iter().find(|t| t.action == "CREATE").unwrap();
    assert_eq!(create.attempts, 1, "a fatal failure is not retried");
    let msg = job_msg.unwrap();
    assert!(msg.starts_with("CREATE on "), "{msg}");
    assert!(msg.contains("(status 1, auth): ec2: AuthFailure"), "{msg}");
    assert!(msg.ends_with("; not retried: auth"), "{msg}");
    assert_eq!(
        cluster_msg.as_deref(),
        Some(msg.as_str()),
        "the cause, not the clean-up"
    );
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Incomplete);
    // The clean-up is shown as such in the node's history, and the CREATE as not retryable.
    let node_id = &create.node_id;
    let row = f
        .engine
        .store
        .get_node("t-acme", node_id)
        .await
        .unwrap()
        .unwrap();
    let node = weft_engine::view::node(&f.engine, &row).await.unwrap();
    let create_entry = node.actions.iter().find(|a| a.action == "CREATE").unwrap();
    assert_eq!(
        create_entry.failure,
        Some(weft_model::TaskFailure::new(
            weft_model::FailureReason::Auth,
            false
        ))
    );
    assert!(!create_entry.cleanup);
    let delete_entry = node.actions.iter().find(|a| a.action == "DELETE").unwrap();
    assert!(delete_entry.cleanup, "{delete_entry:?}");
}

#[tokio::test]
async fn a_failed_clean_up_is_added_to_the_cause() {
    let f = fixture(10).await;
    let id = create_one(&f).await;
    let ran = run_scripted(&f.engine, |t| {
        let reason = if t["taskName"] == "CREATE" {
            "auth"
        } else {
            "network"
        };
        Some(json!({"stderr": format!("{reason} trouble"),
                    "failure": {"retryable": reason == "network", "reason": reason}}))
    })
    .await;
    assert_eq!(ran.len(), 2, "a clean-up is tried once: {ran:?}");
    let (_, job_msg, cluster_msg, _) = outcome(&f.engine, &id).await;
    let msg = cluster_msg.unwrap();
    assert_eq!(Some(&msg), job_msg.as_ref());
    assert!(msg.contains("auth trouble; not retried: auth"), "{msg}");
    assert!(
        msg.contains("The clean-up failed too: DELETE (clean-up) on "),
        "{msg}"
    );
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Incomplete);
}

#[tokio::test]
async fn a_fatal_service_task_runs_once_and_names_its_service() {
    let f = fixture(10).await;
    let id = create_one(&f).await;
    let ran = run_scripted(&f.engine, |t| {
        (t["taskName"] == "INSTALL").then(|| {
            json!({"stderr": "script install-a.sh is in none of the script directories",
                   "failure": {"retryable": false, "reason": "not_found"}})
        })
    })
    .await;
    let installs = ran.iter().filter(|(n, _)| n == "INSTALL").count();
    assert_eq!(installs, 1, "{ran:?}");
    assert!(
        !ran.iter().any(|(n, _)| n == "DELETE"),
        "no clean-up but a CREATE's: {ran:?}"
    );
    let (job_status, _, cluster_msg, _) = outcome(&f.engine, &id).await;
    assert_eq!(job_status, JobStatus::Failed);
    let msg = cluster_msg.unwrap();
    assert!(msg.starts_with("INSTALL of a on "), "{msg}");
    assert!(msg.ends_with("not retried: not_found"), "{msg}");
}

#[tokio::test]
async fn retryable_and_unclassified_failures_are_retried() {
    let f = fixture(10).await;
    let id = create_one(&f).await;
    let mut failed_install = false;
    let mut failed_create = false;
    let ran = run_scripted(&f.engine, |t| {
        if t["taskName"] == "INSTALL" && !failed_install {
            failed_install = true;
            return Some(
                json!({"stderr": "exit 1", "failure": {"retryable": true, "reason": "crash"}}),
            );
        }
        if t["taskName"] == "CREATE" && !failed_create {
            failed_create = true;
            // As Coopr's provisioners send it: no classification.
            return Some(json!({"stderr": "boom"}));
        }
        None
    })
    .await;
    let count = |what: &str| ran.iter().filter(|(n, _)| n == what).count();
    assert_eq!(count("CREATE"), 2, "{ran:?}");
    assert_eq!(count("DELETE"), 1, "the retry's clean-up: {ran:?}");
    assert_eq!(count("INSTALL"), 3, "a's twice, b's once: {ran:?}");
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Active);
}

fn take_req(worker: &str) -> TakeTaskRequest {
    TakeTaskRequest {
        worker_id: Some(worker.into()),
        provisioner_id: Some("p1".into()),
        tenant_id: Some("t-acme".into()),
        ..Default::default()
    }
}

async fn task_row(e: &Engine, id: &str) -> weft_store::TaskRow {
    e.store.get_task("t-acme", id).await.unwrap().unwrap()
}

/// A take whose answer never reached its worker: the worker's next take gives the task back (its
/// attempt not counted, no failure recorded) and hands it out again at once; the same for a
/// finish of another task. Another worker's lease is left alone.
#[tokio::test]
async fn a_lease_whose_answer_was_lost_is_released_by_the_workers_next_request() {
    let f = fixture(10).await;
    let e = &f.engine;
    create_one(&f).await;
    let lost: Value =
        serde_json::from_str(&take(e, take_req("w1")).await.unwrap().unwrap()).unwrap();
    let lost_id = lost["taskId"].as_str().unwrap();
    assert_eq!(task_row(e, lost_id).await.attempts, 1);
    // The answer is lost; the worker asks again and gets the same task, as a first attempt.
    let again: Value =
        serde_json::from_str(&take(e, take_req("w1")).await.unwrap().unwrap()).unwrap();
    assert_eq!(again["taskId"], lost["taskId"]);
    let row = task_row(e, lost_id).await;
    assert_eq!(row.attempts, 1, "the lost attempt is not counted");
    assert_eq!(row.state, weft_store::TaskState::InProgress);
    assert_eq!(row.lease_owner.as_deref(), Some("p1.w1"));
    // A finish of the task releases nothing of the worker's own (it holds only that one)...
    let fin = |id: &str, worker: &str| -> FinishTaskRequest {
        serde_json::from_value(json!({"workerId": worker, "provisionerId": "p1",
            "tenantId": "t-acme", "taskId": id, "status": 0}))
        .unwrap()
    };
    finish(e, fin(lost_id, "w1")).await.unwrap();
    assert_eq!(
        task_row(e, lost_id).await.state,
        weft_store::TaskState::Complete
    );
    // ...and a finish that arrives while the worker holds another lease gives that one back.
    let next: Value =
        serde_json::from_str(&take(e, take_req("w1")).await.unwrap().unwrap()).unwrap();
    let next_id = next["taskId"].as_str().unwrap();
    finish(e, fin(lost_id, "w1")).await.unwrap(); // the first finish's answer was lost
    let row = task_row(e, next_id).await;
    assert_eq!(row.state, weft_store::TaskState::Queued);
    assert_eq!(row.lease_owner, None);
    assert_eq!(row.attempts, 0);
    let body: weft_engine::body::TaskBody = weft_engine::body::from_body(&row.body).unwrap();
    assert!(body.retried.is_empty(), "no failed attempt is recorded");
    // Another worker's lease is not this worker's to give back.
    let other: Value =
        serde_json::from_str(&take(e, take_req("w2")).await.unwrap().unwrap()).unwrap();
    assert_eq!(other["taskId"], next["taskId"]);
    assert!(take(e, take_req("w1")).await.unwrap().is_none());
    assert_eq!(
        task_row(e, next_id).await.lease_owner.as_deref(),
        Some("p1.w2")
    );
    // The job still completes, every task run once by the worker that got it.
    finish(e, fin(next_id, "w2")).await.unwrap();
    assert!(run_worker(e).await > 0);
}

/// `f.who` as the tenant's admin.
fn admin(f: &Fixture) -> Caller {
    Caller {
        role: Role::Admin,
        ..f.who.clone()
    }
}

#[tokio::test]
async fn catalog_writes_are_the_admins_and_provider_secrets_are_never_answered() {
    use weft_engine::{entities, plugins, transfer};
    let f = fixture(1).await;
    let (e, admin) = (&f.engine, admin(&f));
    let cloud = json!({"name": "cloud", "parameters": {"admin": {"fields": {
        "key": {"label": "key", "type": "password", "sensitive": true}}}}});
    plugins::register_type(e, "providertypes", "cloud", cloud.to_string().as_bytes())
        .await
        .unwrap();
    let body = json!({"name": "p", "providertype": "cloud",
                      "provisioner": {"key": "s3cret", "region": "eu"}})
    .to_string();

    // The role is checked before the body is read.
    let err = entities::create(e, &f.who, EntityKind::Provider, b"{")
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "user alice is not an admin of tenant acme");
    entities::create(e, &admin, EntityKind::Provider, body.as_bytes())
        .await
        .unwrap();
    let err = entities::create(e, &admin, EntityKind::Provider, body.as_bytes())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::EntityExists { .. }), "{err:?}");
    assert_eq!(err.to_string(), "provider p already exists");

    // Answered masked, stored sealed; written back masked, the secret stays.
    let mut shown = entities::get(e, &f.who, EntityKind::Provider, "p", None)
        .await
        .unwrap();
    assert_eq!(shown["provisioner"]["key"], weft_engine::view::MASK);
    shown["provisioner"]["region"] = json!("us");
    entities::put(
        e,
        &admin,
        EntityKind::Provider,
        "p",
        shown.to_string().as_bytes(),
    )
    .await
    .unwrap();
    let stored = e
        .store
        .get_entity("t-acme", EntityKind::Provider, "p", None)
        .await
        .unwrap()
        .unwrap();
    assert!(weft_engine::seal::is_sealed(&stored["provisioner"]["key"]));
    let mut opened = stored["provisioner"].clone();
    e.sealer.open_all("t-acme", &mut opened).await.unwrap();
    assert_eq!(opened, json!({"key": "s3cret", "region": "us"}));
    let export = transfer::export(e, &f.who).await.unwrap();
    let exported = export["providers"].as_array().unwrap();
    let p = exported.iter().find(|p| p["name"] == "p").unwrap();
    assert_eq!(p["provisioner"]["key"], weft_engine::view::MASK);

    let err = entities::get(e, &f.who, EntityKind::Provider, "p", Some("0"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Version must be higher then zero");
    let err = entities::get(e, &f.who, EntityKind::Provider, "nope", None)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "provider nope  not found.");
    let err = entities::delete(e, &f.who, EntityKind::Provider, "p", Some("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Forbidden(_)), "{err:?}");
}

/// Resource bytes in memory.
#[derive(Default)]
struct Bytes(std::sync::Mutex<BTreeMap<String, bytes::Bytes>>);

fn bytes_key(k: &weft_store::ResourceKey, version: u64) -> String {
    format!(
        "{}/{}/{}/{}/{}/{version}",
        k.tenant_id, k.ptype, k.plugin, k.rtype, k.name
    )
}

#[async_trait::async_trait]
impl weft_engine::plugins::ResourceStore for Bytes {
    async fn put(
        &self,
        key: &weft_store::ResourceKey,
        version: u64,
        bytes: bytes::Bytes,
    ) -> std::io::Result<()> {
        let mut m = self.0.lock().unwrap();
        m.insert(bytes_key(key, version), bytes);
        Ok(())
    }

    async fn get(
        &self,
        key: &weft_store::ResourceKey,
        version: u64,
    ) -> std::io::Result<Option<bytes::Bytes>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .get(&bytes_key(key, version))
            .cloned())
    }

    async fn delete(&self, key: &weft_store::ResourceKey, version: u64) -> std::io::Result<()> {
        self.0.lock().unwrap().remove(&bytes_key(key, version));
        Ok(())
    }
}

#[tokio::test]
async fn plugin_resources_go_through_their_lifecycle_in_the_engine() {
    use weft_engine::plugins::{self, ResourceType};
    let f = fixture(1).await;
    let (e, admin, mem) = (&f.engine, admin(&f), Bytes::default());
    let shell = json!({"name": "shell", "resourceTypes": {"scripts": {"format": "file"}}});
    plugins::register_type(e, "automatortypes", "shell", shell.to_string().as_bytes())
        .await
        .unwrap();
    let at = |ptype: &str, plugin: &str, rtype: &str| ResourceType {
        ptype: ptype.into(),
        plugin: plugin.into(),
        rtype: rtype.into(),
    };
    let scripts = at("automatortypes", "shell", "scripts");
    for (bad, says) in [
        (
            at("bogus", "shell", "scripts"),
            "unknown plugin type bogus: expected providertypes or automatortypes",
        ),
        (
            at("automatortypes", "nope", "scripts"),
            "automator plugin nope not found.",
        ),
        (
            at("automatortypes", "shell", "keys"),
            "keys for automator plugin shell not found.",
        ),
    ] {
        let err = plugins::list_resources(e, &admin, &bad, None)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), says);
    }
    let err = plugins::list_resources(e, &f.who, &scripts, None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Forbidden(_)), "{err:?}");

    let body = bytes::Bytes::from_static(b"echo hi");
    let meta = plugins::upload(e, &mem, &admin, scripts.clone(), "run.sh", body.clone())
        .await
        .unwrap();
    assert_eq!(meta.version, 1);
    let err = plugins::transition(e, &admin, scripts.clone(), ("run.sh", "9"), true)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "resource run.sh version 9 not found.");
    plugins::transition(e, &admin, scripts.clone(), ("run.sh", "1"), true)
        .await
        .unwrap();
    plugins::sync(e, &admin).await.unwrap();
    let live = plugins::list_versions(e, &admin, &scripts, "run.sh", Some("active"))
        .await
        .unwrap();
    assert_eq!(live.len(), 1);
    let got = plugins::download(e, &mem, "t-acme", (scripts.clone(), "run.sh"), "1")
        .await
        .unwrap();
    assert_eq!(got, body);
    let err = plugins::delete_resource(e, &mem, &admin, scripts.clone(), "run.sh", None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::ResourceNotDeletable), "{err:?}");

    // A bootstrapped tenant gets a copy, live as it was.
    plugins::copy_resources(e, &mem, "t-acme", "t-new")
        .await
        .unwrap();
    let got = plugins::download(e, &mem, "t-new", (scripts, "run.sh"), "1")
        .await
        .unwrap();
    assert_eq!(got, body);
    let rows = e
        .store
        .list_resources("t-new", "automatortypes", "shell", "scripts", None)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].meta.status, weft_model::ResourceStatus::Active);
}

/// The superadmin of `f`'s store.
async fn superadmin(f: &Fixture) -> Caller {
    let tenant = f
        .engine
        .store
        .tenant_by_id(SUPERADMIN)
        .await
        .unwrap()
        .unwrap();
    Caller {
        tenant,
        user: "admin".into(),
        role: Role::SuperAdmin,
    }
}

fn spec(v: Value) -> Option<weft_model::TenantSpecification> {
    Some(serde_json::from_value(v).unwrap())
}

#[tokio::test]
async fn tenants_are_the_superadmins_and_checked_in_the_commit_that_writes_them() {
    use weft_engine::tenants;
    let f = fixture(5).await;
    let (e, sa) = (&f.engine, superadmin(&f).await);
    let err = tenants::create(e, &admin(&f), spec(json!({"name": "beta"})), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Forbidden(m) if m.is_empty()),
        "{err}"
    );
    let err = tenants::create(e, &sa, None, None).await.unwrap_err();
    assert_eq!(err.to_string(), "tenant must be specified");
    // p1 has 4 workers; acme holds 1.
    let err = tenants::create(e, &sa, spec(json!({"name": "beta", "workers": 4})), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "not enough worker capacity: tenant beta asks for 4 workers, registered provisioners have 3 free"
    );
    tenants::create(e, &sa, spec(json!({"name": "beta", "workers": 3})), None)
        .await
        .unwrap();
    let err = tenants::create(e, &sa, spec(json!({"name": "beta"})), None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::TenantExists(_)), "{err}");
    let err = tenants::put(e, &sa, "beta", spec(json!({"name": "gamma"})), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    create_one(&f).await;
    let err = tenants::put(
        e,
        &sa,
        "acme",
        spec(json!({"name": "acme", "workers": 1, "maxClusters": 0})),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::LimitsBelowUsage {
                clusters: 1,
                max_clusters: 0,
                ..
            }
        ),
        "{err}"
    );
    let err = tenants::delete(e, &sa, SUPERADMIN).await.unwrap_err();
    assert_eq!(err.to_string(), "Superadmin cannot be deleted.");
    let err = tenants::delete(e, &sa, "acme").await.unwrap_err();
    assert!(
        matches!(err, EngineError::TenantHasWorkers { workers: 1, .. }),
        "{err}"
    );
    tenants::put(e, &sa, "beta", spec(json!({"name": "beta"})), None)
        .await
        .unwrap();
    tenants::delete(e, &sa, "beta").await.unwrap();
    let err = tenants::get(e, &sa, "beta").await.unwrap_err();
    assert_eq!(err.to_string(), "tenant beta not found");
}

#[tokio::test]
async fn keys_profiles_pools_sweeps_and_provisioners_are_checked_in_the_engine() {
    use weft_engine::{apikeys, pools, profiles, provisioners, sweep};
    let f = fixture(5).await;
    let (e, sa, admin) = (&f.engine, superadmin(&f).await, admin(&f));
    let req = |tenant: &str| weft_model::ApiKeyRequest {
        tenant: tenant.into(),
        user: "bob".into(),
        admin: false,
    };
    let err = apikeys::create(e, &admin, &req("acme")).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Forbidden(m) if m.is_empty()),
        "{err}"
    );
    let err = apikeys::create(e, &sa, &req("nope")).await.unwrap_err();
    assert_eq!(err.to_string(), "tenant nope does not exist.");
    let made = apikeys::create(e, &sa, &req("acme")).await.unwrap();
    let stored = e
        .store
        .api_key_by_hash(&apikeys::hash_key(&made.key))
        .await
        .unwrap();
    assert_eq!(stored.map(|k| k.id), Some(made.id.clone()));
    let listed = apikeys::list(e, &sa).await.unwrap();
    assert_eq!((listed.len(), listed[0].tenant.as_str()), (1, "acme"));

    let err = profiles::put(e, &f.who, &json!([1])).await.unwrap_err();
    assert_eq!(err.to_string(), "profile must be a JSON object");
    profiles::put(e, &f.who, &json!({"theme": "dark"}))
        .await
        .unwrap();
    assert_eq!(profiles::get(e, &f.who).await.unwrap()["theme"], "dark");
    profiles::delete(e, &f.who).await.unwrap();
    let err = profiles::get(e, &f.who).await.unwrap_err();
    assert_eq!(err.to_string(), "profile for user alice not found.");

    let err = pools::list(e, &f.who, "local").await.unwrap_err();
    assert!(matches!(err, EngineError::Forbidden(_)), "{err}");
    let err = pools::list(e, &admin, "local").await.unwrap_err();
    assert!(matches!(err, EngineError::NotAPool { .. }), "{err}");
    let err = sweep::sweep(e, &f.who, "local", false).await.unwrap_err();
    assert!(matches!(err, EngineError::Forbidden(_)), "{err}");
    let err = sweep::sweep(e, &admin, "local", false).await.unwrap_err();
    assert!(matches!(err, EngineError::NoProvisioner(_)), "{err}");

    let reg: weft_model::ProvisionerRegistration =
        serde_json::from_value(json!({"host": "p2.example.com", "port": 0, "capacityTotal": 2}))
            .unwrap();
    let err = provisioners::register(e, "p2", reg, false)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "port 0 is not a valid port");
    let hb = weft_model::Heartbeat::default();
    let err = provisioners::heartbeat(e, "p9", &hb).await.unwrap_err();
    assert_eq!(err.to_string(), "Provisioner p9 not found.");
    let err = provisioners::list(e, &admin).await.unwrap_err();
    assert!(matches!(err, EngineError::Forbidden(_)), "{err}");
    assert_eq!(provisioners::list(e, &sa).await.unwrap().len(), 1);
}

// ---- time rules on a paused clock ---------------------------------------------------------------

/// Where the paused clocks of these tests start (milliseconds since the epoch).
const START: i64 = 1_800_000_000_000;

/// The fixture's `task_timeout_ms` and `provisioner_timeout_ms`.
const TIMEOUT: u64 = 60_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A janitor round at the engine's time, after a heartbeat of `p1` at that time (so that only
/// the rule a test looks at fires, not the provisioner's silence).
async fn round(e: &Engine) -> JanitorReport {
    provisioners::heartbeat(e, "p1", &Heartbeat::default())
        .await
        .unwrap();
    run_once(e, e.now_ms()).await.unwrap()
}

fn finish_req(id: &str, worker: &str) -> FinishTaskRequest {
    serde_json::from_value(json!({"workerId": worker, "provisionerId": "p1",
        "tenantId": "t-acme", "taskId": id, "status": 0}))
    .unwrap()
}

async fn take_one(e: &Engine, worker: &str) -> Value {
    serde_json::from_str(&take(e, take_req(worker)).await.unwrap().expect("a task")).unwrap()
}

/// A task's lease holds until its deadline (taken + `task_timeout`) and not a millisecond past
/// it: then the janitor's round fails the attempt (recorded at the clock's time), the worker that
/// held it can no longer finish it, and the task is retried (a CREATE after a clean-up DELETE),
/// its second attempt counted.
#[tokio::test]
async fn a_task_lease_runs_out_only_once_the_clock_passes_its_deadline() {
    let clock = ManualClock::at(START);
    let f = fixture_on(10, clock.clone()).await;
    let e = &f.engine;
    create_one(&f).await;
    let first = take_one(e, "w1").await;
    assert_eq!(first["taskName"], "CREATE");
    let id = first["taskId"].as_str().unwrap();
    let row = task_row(e, id).await;
    assert_eq!(
        (row.started_at, row.lease_deadline),
        (START, START + 60_000)
    );

    clock.advance(ms(TIMEOUT));
    let r = round(e).await;
    assert!(r.timed_out_tasks.is_empty(), "at the deadline: {r:?}");
    assert_eq!(task_row(e, id).await.state, TaskState::InProgress);

    clock.advance(ms(1));
    let r = round(e).await;
    assert_eq!(r.timed_out_tasks, vec![id.to_string()]);
    let row = task_row(e, id).await;
    assert_eq!(row.lease_owner, None);
    assert_ne!(row.state, TaskState::InProgress);
    let body: weft_engine::body::TaskBody = weft_engine::body::from_body(&row.body).unwrap();
    assert_eq!(body.retried.len(), 1, "{body:?}");
    assert_eq!(body.retried[0].finish_time, START + 60_001);
    let stderr = body.retried[0].stderr.as_deref().unwrap_or_default();
    assert!(stderr.contains("timed out after 60 s"), "{stderr}");
    let late = finish(e, finish_req(id, "w1")).await.unwrap_err();
    assert!(matches!(late, EngineError::NotOwner), "{late}");

    let cleanup = take_one(e, "w1").await;
    assert_eq!(cleanup["taskName"], "DELETE");
    finish(e, finish_req(cleanup["taskId"].as_str().unwrap(), "w1"))
        .await
        .unwrap();
    let again = take_one(e, "w1").await;
    assert_eq!(again["taskId"], first["taskId"]);
    assert_eq!(task_row(e, id).await.attempts, 2);
}

/// A cluster whose lease ends at `expire_time` stays until the clock passes it; the janitor's
/// next round then starts its delete, which runs to `terminated`.
#[tokio::test]
async fn a_cluster_is_deleted_by_the_janitor_only_once_its_lease_has_passed() {
    const HOUR: u64 = 3_600_000;
    let clock = ManualClock::at(START);
    let f = fixture_on(10, clock.clone()).await;
    let e = &f.engine;
    let mut req = request("t", 1);
    req.initial_lease_duration = Some(HOUR as i64);
    let Created::Id(id) = create_cluster(e, &f.who, req, false).await.unwrap() else {
        panic!("not a dry run");
    };
    run_worker(e).await;
    assert_eq!(status(e, &id).await, ClusterStatus::Active);
    let cid = weft_engine::parse_cluster_id(&id).unwrap();
    let row = e.store.get_cluster("t-acme", cid).await.unwrap().unwrap();
    assert_eq!(row.expire_time, START + HOUR as i64);

    clock.advance(ms(HOUR));
    let r = round(e).await;
    assert!(r.expired_clusters.is_empty(), "at the lease's end: {r:?}");
    assert_eq!(status(e, &id).await, ClusterStatus::Active);

    clock.advance(ms(1));
    let r = round(e).await;
    assert_eq!(r.expired_clusters.len(), 1, "{r:?}");
    assert_eq!(r.expired_clusters[0].0, cid);
    assert_eq!(status(e, &id).await, ClusterStatus::Pending);
    let job = e
        .store
        .get_job("t-acme", &r.expired_clusters[0].1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (job.action.as_str(), job.status),
        ("CLUSTER_DELETE", JobStatus::Running)
    );
    run_worker(e).await;
    assert_eq!(status(e, &id).await, ClusterStatus::Terminated);
    assert!(round(e).await.expired_clusters.is_empty());
}

/// A provisioner is dropped once it has sent no heartbeat for longer than
/// `provisioner_timeout` (by the engine's clock, heartbeats included), and not before; the task
/// it held is failed over at once, before its own lease ran out.
#[tokio::test]
async fn a_silent_provisioner_is_dropped_only_once_its_timeout_has_passed() {
    let clock = ManualClock::at(START);
    let f = fixture_on(10, clock.clone()).await;
    let e = &f.engine;
    create_one(&f).await;
    clock.advance(ms(10_000));
    provisioners::heartbeat(e, "p1", &Heartbeat::default())
        .await
        .unwrap();
    clock.advance(ms(5_000));
    let task = take_one(e, "w1").await;
    let id = task["taskId"].as_str().unwrap();

    // The last heartbeat was at START + 10 s: silent for exactly the timeout now.
    clock.set(START + 10_000 + TIMEOUT as i64);
    let r = run_once(e, e.now_ms()).await.unwrap();
    assert!(r.dropped_provisioners.is_empty(), "{r:?}");
    assert!(e.store.get_provisioner("p1").await.unwrap().is_some());

    clock.advance(ms(1));
    let r = run_once(e, e.now_ms()).await.unwrap();
    assert_eq!(r.dropped_provisioners, vec!["p1".to_string()]);
    assert_eq!(r.failed_over_tasks, vec![id.to_string()]);
    assert!(
        r.timed_out_tasks.is_empty(),
        "its lease had not run out: {r:?}"
    );
    assert!(e.store.get_provisioner("p1").await.unwrap().is_none());
    assert_eq!(task_row(e, id).await.lease_owner, None);
}

/// Creates cluster `c1` of template `t` with `n` nodes and runs its job to the end.
async fn create_run(f: &Fixture, t: &str, n: i64) -> String {
    let Created::Id(id) = create_cluster(&f.engine, &f.who, request(t, n), false)
        .await
        .unwrap()
    else {
        panic!("not a dry run");
    };
    run_worker(&f.engine).await;
    id
}

/// Tenant `acme` gains service `m`, a member of a quorum (join, leave, healthcheck), and template
/// `q` of `m` alone on 1 to 7 nodes; a cluster of 3 is created and run to active.
async fn quorum_cluster(f: &Fixture) -> String {
    let action =
        |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-m.sh")}});
    let m = json!({"name": "m", "availability": {"quorum": true},
        "provisioner": {"actions": {"install": action("install"), "configure": action("configure"),
            "start": action("start"), "stop": action("stop"), "join": action("join"),
            "leave": action("leave"), "healthcheck": action("health")}}});
    let q = json!({"name": "q", "defaults": {"services": ["m"], "provider": "local"},
        "constraints": {"size": {"min": 1, "max": 7}}});
    for (kind, body) in [(EntityKind::Service, m), (EntityKind::ClusterTemplate, q)] {
        let name = body["name"].as_str().unwrap().to_string();
        f.engine
            .store
            .create_entity("t-acme", kind, &name, &body)
            .await
            .unwrap();
    }
    let id = create_run(f, "q", 3).await;
    assert_eq!(status(&f.engine, &id).await, ClusterStatus::Active);
    id
}

/// Like [`run_worker`], answering each task with its node's address; returns the
/// `config.membership` of every JOIN and LEAVE in the order they ran.
async fn run_members(e: &Engine) -> Vec<Value> {
    let mut seen = Vec::new();
    for ran in 0.. {
        assert!(ran < 200, "the job never ends");
        let Some(task) = take(e, take_req("w1")).await.unwrap() else {
            return seen;
        };
        let task: Value = serde_json::from_str(&task).unwrap();
        if matches!(task["taskName"].as_str(), Some("JOIN" | "LEAVE")) {
            seen.push(task["config"]["membership"].clone());
        }
        let fin: FinishTaskRequest = serde_json::from_value(json!({
            "workerId": "w1", "provisionerId": "p1", "tenantId": "t-acme",
            "taskId": task["taskId"], "status": 0,
            "result": {"ipaddresses": {"bind_v4": format!("10.0.0.{}", ran % 250)}}
        }))
        .unwrap();
        finish(e, fin).await.unwrap();
    }
    unreachable!()
}

fn hosts(m: &Value, side: &str) -> usize {
    m[side].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn members_change_one_at_a_time_and_quorum_breaking_plans_need_force() {
    use weft_engine::jobs::RunMode;
    use weft_engine::ops::{self, ServiceAction};
    let f = fixture(10).await;
    let id = quorum_cluster(&f).await;
    let e = &f.engine;

    // Expand 3 -> 5: two JOINs, each told the members before and after it.
    ops::expand(e, &f.who, &id, Some(2), RunMode::default())
        .await
        .unwrap();
    let joins = run_members(e).await;
    assert_eq!(joins.len(), 2, "{joins:?}");
    for (k, m) in joins.iter().enumerate() {
        assert_eq!(m["change"], "join");
        assert_eq!(m["service"], "m");
        assert_eq!(
            (hosts(m, "before"), hosts(m, "after")),
            (3 + k, 4 + k),
            "{m}"
        );
        let after: Vec<&str> = m["after"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert!(after.contains(&m["node"].as_str().unwrap()));
    }
    assert_eq!(status(e, &id).await, ClusterStatus::Active);

    // Shrink 5 -> 3: two LEAVEs, the membership shrinking with each.
    ops::shrink(e, &f.who, &id, Some(2), RunMode::default())
        .await
        .unwrap();
    let leaves = run_members(e).await;
    let sizes: Vec<(usize, usize)> = leaves
        .iter()
        .map(|m| (hosts(m, "before"), hosts(m, "after")))
        .collect();
    assert_eq!(sizes, vec![(5, 4), (4, 3)], "{leaves:?}");

    // Stopping m on all three members at once, or shrinking 3 -> 1: refused, naming the service.
    let stop = || {
        ops::service_action(
            e,
            &f.who,
            &id,
            ServiceAction::Stop,
            Some("m"),
            None,
            RunMode::default(),
        )
    };
    let err = stop().await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Unavailable(m) if m.contains("service m needs 2 of its 3 nodes")),
        "{err:?}"
    );
    let err = ops::shrink(e, &f.who, &id, Some(2), RunMode::default())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Unavailable(_)), "{err:?}");
    assert_eq!(
        status(e, &id).await,
        ClusterStatus::Active,
        "nothing started"
    );

    // Forced: the stop runs, and its job says so.
    let forced = RunMode {
        dry_run: false,
        force: true,
    };
    ops::service_action(e, &f.who, &id, ServiceAction::Stop, Some("m"), None, forced)
        .await
        .unwrap();
    let cid = weft_engine::parse_cluster_id(&id).unwrap();
    let row = e.store.get_cluster("t-acme", cid).await.unwrap().unwrap();
    let job = e
        .store
        .get_job("t-acme", row.latest_job.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.body["forced"], true, "{}", job.body);
    run_worker(e).await;
}

#[tokio::test]
async fn a_failed_leave_stops_the_shrink_before_anything_is_stopped_or_deleted() {
    use weft_engine::jobs::RunMode;
    let f = fixture(10).await;
    let id = quorum_cluster(&f).await;
    let e = &f.engine;
    weft_engine::ops::expand(e, &f.who, &id, Some(2), RunMode::default())
        .await
        .unwrap();
    run_members(e).await;
    weft_engine::ops::shrink(e, &f.who, &id, Some(1), RunMode::default())
        .await
        .unwrap();
    let ran = run_scripted(e, |t| {
        (t["taskName"] == "LEAVE").then(|| {
            json!({"stderr": "etcdctl: member remove refused: the cluster would lose quorum",
                   "failure": {"retryable": false, "reason": "config"}})
        })
    })
    .await;
    let names: Vec<&str> = ran.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "LEAVE").count(),
        1,
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| matches!(*n, "STOP" | "DELETE")),
        "the leaving node keeps serving: {names:?}"
    );
    let (job_status, _, cluster_msg, _) = outcome(e, &id).await;
    assert_eq!(job_status, JobStatus::Failed);
    assert!(cluster_msg.unwrap().starts_with("LEAVE of m on "));
    let cid = weft_engine::parse_cluster_id(&id).unwrap();
    let nodes = e.store.list_nodes("t-acme", cid).await.unwrap();
    assert_eq!(nodes.len(), 5, "no node removed");
}

/// Tenant `acme` gains provider `priced` (USD, list prices), hardware `tiny` (0.0208 per hour
/// on it), image `lic` (a 0.01 licence) and template `p` (service `a` alone, 1 to 9 nodes,
/// capped at 0.20 per hour).
async fn priced_catalog(f: &Fixture) {
    let entries = [
        (
            EntityKind::Provider,
            json!({"name": "priced", "providertype": "local", "currency": "USD"}),
        ),
        (
            EntityKind::HardwareType,
            json!({"name": "tiny", "providermap": {"priced": {"flavor": "s1", "price": "0.0208"}}}),
        ),
        (
            EntityKind::ImageType,
            json!({"name": "lic", "providermap": {"priced": {"image": "i", "price": "0.01"}}}),
        ),
        (
            EntityKind::ClusterTemplate,
            json!({"name": "p", "defaults": {"services": ["a"], "provider": "priced",
                   "hardwaretype": "tiny", "imagetype": "lic"},
                   "administration": {"maxCostPerHour": "0.20"},
                   "constraints": {"size": {"min": 1, "max": 9}}}),
        ),
    ];
    for (kind, body) in entries {
        let name = body["name"].as_str().unwrap().to_string();
        f.engine
            .store
            .create_entity("t-acme", kind, &name, &body)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn plans_carry_cost_estimates_and_budgets_refuse_what_would_exceed_them() {
    use weft_engine::jobs::RunMode;
    let f = fixture(10).await;
    priced_catalog(&f).await;
    let e = &f.engine;
    // A dry run of 3 nodes at 0.0208 + 0.0100 each.
    let Created::Plan(plan) = create_cluster(e, &f.who, request("p", 3), true)
        .await
        .unwrap()
    else {
        panic!("a dry run answers its plan");
    };
    let c = plan.cost.expect("an estimate");
    assert_eq!(
        (
            c.currency.as_str(),
            c.per_hour_before.as_str(),
            c.per_hour_after.as_str()
        ),
        ("USD", "0.00", "0.0924")
    );
    assert_eq!(c.per_day_after, "2.2176");
    assert!(c.unpriced.is_empty());
    // Over the template's cap (7 x 0.0308 = 0.2156 > 0.20): refused, naming both figures.
    let err = create_cluster(e, &f.who, request("p", 7), true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::OverBudget(m) if m.contains("0.20") && m.contains("0.2156")),
        "{err:?}"
    );

    // The tenant's budget: 0.10 per hour. A cluster of 3 (0.0924) fits; one more node does not.
    let mut tenant = e.store.tenant_by_id("t-acme").await.unwrap().unwrap();
    tenant.spec.max_cost_per_hour = Some("0.10".into());
    e.store.update_tenant(&tenant).await.unwrap();
    let id = create_run(&f, "p", 3).await;
    let err = create_cluster(e, &f.who, request("p", 1), false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("maxCostPerHour (0.10)"), "{err}");
    assert!(err.to_string().contains("cost 0.0924 per hour"), "{err}");
    // An expand's dry run shows before and after; the expand itself is refused in its commit.
    let plan = weft_engine::ops::expand(e, &f.who, &id, Some(1), RunMode::dry(true))
        .await
        .unwrap()
        .unwrap();
    let c = plan.cost.unwrap();
    assert_eq!(
        (c.per_hour_before.as_str(), c.per_hour_after.as_str()),
        ("0.0924", "0.1232")
    );
    let err = weft_engine::ops::expand(e, &f.who, &id, Some(1), RunMode::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("maxCostPerHour"), "{err}");
    // A shrink lowers the cost; then the expand fits again.
    weft_engine::ops::shrink(e, &f.who, &id, Some(1), RunMode::default())
        .await
        .unwrap();
    run_worker(e).await;
    weft_engine::ops::expand(e, &f.who, &id, Some(1), RunMode::default())
        .await
        .unwrap();
    run_worker(e).await;
    assert_eq!(status(e, &id).await, ClusterStatus::Active);
}

#[tokio::test]
async fn accrued_cost_is_each_nodes_time_in_the_cluster_times_its_price_to_the_cent() {
    use weft_engine::jobs::RunMode;
    use weft_model::cost::CostGroupBy;
    const HOUR: u64 = 3_600_000;
    let clock = ManualClock::at(START);
    let f = fixture_on(10, clock.clone()).await;
    priced_catalog(&f).await;
    let e = &f.engine;
    let admin = admin(&f);
    // Two nodes at START; a third 3 h later; the two newest leave at 5 h; the cluster goes at 6 h.
    let id = create_run(&f, "p", 2).await;
    clock.advance(ms(3 * HOUR));
    weft_engine::ops::expand(e, &f.who, &id, Some(1), RunMode::default())
        .await
        .unwrap();
    run_worker(e).await;
    clock.advance(ms(2 * HOUR));
    weft_engine::ops::shrink(e, &f.who, &id, Some(2), RunMode::default())
        .await
        .unwrap();
    run_worker(e).await;
    clock.advance(ms(HOUR));
    let row = weft_engine::view::visible(e, &f.who, &id).await.unwrap();
    start_delete(e, &row).await.unwrap();
    run_worker(e).await;
    assert_eq!(status(e, &id).await, ClusterStatus::Terminated);
    clock.advance(ms(4 * HOUR));

    // 6 + 5 + 2 = 13 node-hours at 0.0308: 0.4004.
    let day = START - START.rem_euclid(86_400_000);
    let r = weft_engine::showback::report(e, &admin, day, None, CostGroupBy::Cluster)
        .await
        .unwrap();
    assert_eq!(r.lines.len(), 1, "{r:?}");
    assert_eq!(
        (r.lines[0].key.as_str(), r.lines[0].amount.as_str()),
        (id.as_str(), "0.4004")
    );
    assert_eq!(r.totals[0].amount, "0.4004");
    let by_day: u64 = r.series.iter().map(|p| p.micros).sum();
    assert_eq!(by_day, 400_400, "{:?}", r.series);
    // Only the first two hours: 2 nodes x 2 h.
    let r = weft_engine::showback::report(
        e,
        &admin,
        START,
        Some(START + 2 * HOUR as i64),
        CostGroupBy::Template,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.lines[0].key.as_str(), r.lines[0].amount.as_str()),
        ("p", "0.1232")
    );
    let csv = weft_engine::showback::csv(&r);
    assert_eq!(csv, "group,name,currency,amount\np,,USD,0.1232\n");
    // A plain user sees only their own clusters (none here).
    let other = Caller {
        user: "bob".into(),
        ..f.who.clone()
    };
    let r = weft_engine::showback::report(e, &other, day, None, CostGroupBy::Cluster)
        .await
        .unwrap();
    assert!(r.lines.is_empty());
}

#[tokio::test]
async fn an_idle_cluster_is_flagged_warned_and_stopped_by_its_templates_policy() {
    const HOUR: u64 = 3_600_000;
    let clock = ManualClock::at(START);
    let f = fixture_on(10, clock.clone()).await;
    let e = &f.engine;
    let idle = json!({"name": "i", "defaults": {"services": ["a", "b"], "provider": "local"},
        "administration": {"idle": {"hours": 4, "autoStop": true, "warnHours": 1}},
        "constraints": {"size": {"min": 1, "max": 5}}});
    e.store
        .create_entity("t-acme", EntityKind::ClusterTemplate, "i", &idle)
        .await
        .unwrap();
    let id = create_run(&f, "i", 2).await;
    let summary = |e: &Engine| {
        let (e, who, id) = (e.clone(), f.who.clone(), id.clone());
        async move {
            let row = weft_engine::view::visible(&e, &who, &id).await.unwrap();
            weft_engine::view::summary(&e, &row).await.unwrap()
        }
    };
    // 2 h: nothing yet.
    clock.advance(ms(2 * HOUR));
    let r = round(e).await;
    assert!(
        r.idle.warned.is_empty() && r.idle.stopped.is_empty(),
        "{r:?}"
    );
    assert_eq!(summary(e).await.idle_since, None);
    // 3 h: the warning, once (an IDLE_WARNING job that is not the cluster's latest).
    clock.advance(ms(HOUR));
    let r = round(e).await;
    assert_eq!(r.idle.warned.len(), 1, "{r:?}");
    let warning = e
        .store
        .get_job("t-acme", &r.idle.warned[0].1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(warning.action, "IDLE_WARNING");
    assert!(
        warning.body["message"]
            .as_str()
            .unwrap()
            .contains("stops it in 1 hours"),
        "{}",
        warning.body
    );
    clock.advance(ms(HOUR / 2));
    let r = round(e).await;
    assert!(r.idle.warned.is_empty(), "warned once: {r:?}");
    // 4 h: idle in the API, and stopped.
    clock.advance(ms(HOUR / 2));
    assert_eq!(summary(e).await.idle_since, Some(START));
    let r = round(e).await;
    assert_eq!(r.idle.stopped.len(), 1, "{r:?}");
    let ran = run_scripted(e, |_| None).await;
    assert!(ran.iter().all(|(n, _)| n == "STOP"), "{ran:?}");
    assert!(!ran.is_empty());
    assert_eq!(status(e, &id).await, ClusterStatus::Active);
    // Stopped on purpose: not idle any more, and left alone.
    assert_eq!(summary(e).await.idle_since, None);
    clock.advance(ms(10 * HOUR));
    let r = round(e).await;
    assert!(
        r.idle.warned.is_empty() && r.idle.stopped.is_empty(),
        "{r:?}"
    );
}

#[tokio::test]
async fn every_operations_dry_run_carries_the_cost_before_and_after() {
    use weft_engine::jobs::RunMode;
    use weft_engine::ops;
    let f = fixture(10).await;
    priced_catalog(&f).await;
    let e = &f.engine;
    let id = create_run(&f, "p", 3).await;
    let dry = RunMode::dry(true);
    let hours = |p: weft_model::PlanView| {
        let c = p.cost.expect("an estimate");
        (c.per_hour_before, c.per_hour_after)
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let shrink = ops::shrink(e, &f.who, &id, Some(1), dry)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hours(shrink), pair("0.0924", "0.0616"));
    let add = ops::add_services(e, &f.who, &id, vec!["b".into()], dry)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hours(add), pair("0.0924", "0.0924"));
    let restart = ops::service_action(e, &f.who, &id, ops::ServiceAction::Restart, None, None, dry)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hours(restart), pair("0.0924", "0.0924"));
    let cid = weft_engine::parse_cluster_id(&id).unwrap();
    let node = e.store.list_nodes("t-acme", cid).await.unwrap()[0]
        .id
        .clone();
    let (_, replace) = weft_engine::replace::replace_node(e, &f.who, &id, &node, dry)
        .await
        .unwrap();
    assert_eq!(hours(replace), pair("0.0924", "0.0924"));
    // Dry runs change nothing: the cluster still costs what it did.
    let row = e.store.get_cluster("t-acme", cid).await.unwrap().unwrap();
    assert_eq!(row.body["costMicrosPerHour"], 92_400);
}
