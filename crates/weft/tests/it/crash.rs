//! Crash safety: `weft server` is killed with SIGKILL at random points while scripted workers run a
//! 50-node cluster create, and restarted on the same data and ports each time. The job must still
//! complete, with every planned task completed exactly once. And a worker that takes a task and
//! vanishes: once the lease runs out the task goes to another worker and the job completes.
//!
//! Kill points are drawn from a seeded RNG; the seed is printed, and `WEFT_CRASH_SEED=<n>` replays
//! a run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::follow::{assert_saw_every_event_once, Follower};
use crate::support::{start, weft, Running};
use crate::worker::{Pool, Record, Target, Worker};

const TENANT: &str = "acme";
const PROVISIONER: &str = "p1";
/// How long a whole job may take, crashes included, before the test gives up.
const JOB_DEADLINE: Duration = Duration::from_secs(180);

/// Two distinct free TCP ports on the loopback (bound together and released, so the server and its
/// restarts can take them).
pub(crate) fn free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().expect("local addr").port();
    (port(&a), port(&b))
}

/// A `weft server` child process over one database, on fixed ports, restartable.
struct Server {
    data_dir: PathBuf,
    database: String,
    port: u16,
    internal_port: u16,
    task_timeout: u64,
    running: Option<Running>,
    restarts: u32,
    /// The fault point `WEFT_TEST_HOLD_TAKE` (`<n>@<marker file>`) of the next start.
    hold_take: Option<String>,
}

impl Server {
    fn new(data_dir: PathBuf, database: String, task_timeout: u64) -> Server {
        let (port, internal_port) = free_ports();
        let mut s = Server {
            data_dir,
            database,
            port,
            internal_port,
            task_timeout,
            running: None,
            restarts: 0,
            hold_take: None,
        };
        s.start();
        s
    }

    fn start(&mut self) {
        let mut cmd = weft();
        cmd.arg("server")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--database", &self.database])
            .args(["--port", &self.port.to_string()])
            .args(["--internal-port", &self.internal_port.to_string()])
            .args(["--task-timeout", &self.task_timeout.to_string()])
            .args(["--janitor-interval", "1"])
            .args(["--max-action-retries", "10"])
            .args(["--provisioner-timeout", "3600"]);
        if let Some(hold) = &self.hold_take {
            cmd.env("WEFT_TEST_HOLD_TAKE", hold);
        }
        let r = start(cmd);
        assert_eq!(r.api, self.api(), "the server came back on its port");
        self.running = Some(r);
    }

    /// SIGKILL (`Child::kill`), then start again on the same data and ports.
    fn crash_and_restart(&mut self) {
        let mut r = self.running.take().expect("running");
        r.child.kill().expect("SIGKILL");
        r.child.wait().expect("reap");
        drop(r);
        self.restarts += 1;
        self.start();
    }

    fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn internal(&self) -> String {
        format!("http://127.0.0.1:{}", self.internal_port)
    }
}

/// Plain HTTP against the server; `who` = (user, tenant) for the identity headers.
struct Http {
    client: reqwest::Client,
}

impl Http {
    fn new() -> Http {
        Http {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        who: Option<(&str, &str)>,
        body: Option<&Value>,
    ) -> reqwest::Result<(u16, String)> {
        let mut b = self.client.request(method, url);
        if let Some((user, tenant)) = who {
            b = b
                .header("Coopr-UserID", user)
                .header("Coopr-TenantID", tenant);
        }
        if let Some(v) = body {
            b = b.body(v.to_string());
        }
        let r = b.send().await?;
        let status = r.status().as_u16();
        Ok((status, r.text().await?))
    }

    /// Sends and asserts a 200; returns the body.
    async fn ok(
        &self,
        method: reqwest::Method,
        url: &str,
        who: Option<(&str, &str)>,
        body: Option<&Value>,
    ) -> String {
        let (status, text) = self
            .send(method.clone(), url, who, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        assert_eq!(status, 200, "{method} {url}: {text}");
        text
    }
}

const SA: Option<(&str, &str)> = Some(("admin", "superadmin"));
const ADMIN: Option<(&str, &str)> = Some(("admin", TENANT));

fn service(name: &str, requires: &[&str]) -> Value {
    let action =
        |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-{name}.sh")}});
    json!({"name": name, "dependencies": {"runtime": {"requires": requires}},
           "provisioner": {"actions": {"install": action("install"), "configure": action("configure"),
                                       "start": action("start")}}})
}

/// Tenant, provisioner, plugin types and catalog (services a <- b <- c, template `t`), all over
/// HTTP. Returns the tenant's id (read from the store: the API shows tenants by name only).
async fn setup(http: &Http, s: &Server) -> String {
    use reqwest::Method;
    let (api, int) = (s.api(), s.internal());
    let tenant = json!({"tenant": {"name": TENANT, "workers": 0}});
    http.ok(
        Method::POST,
        &format!("{api}/v2/tenants"),
        SA,
        Some(&tenant),
    )
    .await;
    let p = json!({"id": PROVISIONER, "host": "127.0.0.1", "port": 1, "capacityTotal": 100});
    http.ok(
        Method::PUT,
        &format!("{int}/v2/provisioners/{PROVISIONER}"),
        None,
        Some(&p),
    )
    .await;
    for (kind, name) in [("providertypes", "local"), ("automatortypes", "shell")] {
        http.ok(
            Method::PUT,
            &format!("{int}/v2/plugins/{kind}/{name}"),
            None,
            Some(&json!({"name": name})),
        )
        .await;
    }
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
        ("services", service("c", &["b"])),
        (
            "clustertemplates",
            json!({"name": "t",
                   "defaults": {"services": ["a", "b", "c"], "provider": "local",
                                "config": {"a_host": "%host.service.a%"}},
                   "constraints": {"size": {"min": 1, "max": 100},
                                   "services": {"a": {"quantities": {"min": 1, "max": 1}}}}}),
        ),
    ];
    for (kind, body) in posts {
        http.ok(
            Method::POST,
            &format!("{api}/v2/{kind}"),
            ADMIN,
            Some(&body),
        )
        .await;
    }
    let store = weft_store::open(&s.database).await.expect("open the store");
    let id = store
        .tenant_by_name(TENANT)
        .await
        .expect("read tenant")
        .expect("tenant exists")
        .id;
    drop(store);
    // The scripted provisioner holds the tenant's workers: only then may it take its tasks.
    http.ok(
        Method::POST,
        &format!("{int}/v2/provisioners/{PROVISIONER}/heartbeat"),
        None,
        Some(&json!({"usage": {&id: 1}})),
    )
    .await;
    id
}

async fn create_cluster(http: &Http, s: &Server, size: u64) -> String {
    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": size});
    let text = http
        .ok(
            reqwest::Method::POST,
            &format!("{}/v2/clusters", s.api()),
            ADMIN,
            Some(&body),
        )
        .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    v["id"].as_str().expect("cluster id").to_string()
}

/// The task ids of the cluster's CLUSTER_CREATE plan.
async fn plan_tasks(http: &Http, s: &Server, cluster: &str) -> BTreeSet<String> {
    let text = http
        .ok(
            reqwest::Method::GET,
            &format!("{}/v2/clusters/{cluster}/plans", s.api()),
            ADMIN,
            None,
        )
        .await;
    let plans: Vec<Value> = serde_json::from_str(&text).unwrap();
    let actions: Vec<&str> = plans.iter().filter_map(|p| p["action"].as_str()).collect();
    assert_eq!(
        actions,
        ["CLUSTER_CREATE", "SOLVE_LAYOUT"],
        "a create's two jobs: {text}"
    );
    assert_eq!(plans[1]["stages"], serde_json::json!([]));
    plans[0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stage| stage.as_array().unwrap().iter())
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

/// Polls the cluster's status (short timeouts, bounded) until its job ends; returns the status.
async fn wait_for_job(http: &Http, s: &Server, cluster: &str, since: Instant) -> Value {
    wait_for_job_within(http, s, cluster, since, JOB_DEADLINE).await
}

/// [`wait_for_job`] that gives up `within` after `since`.
async fn wait_for_job_within(
    http: &Http,
    s: &Server,
    cluster: &str,
    since: Instant,
    within: Duration,
) -> Value {
    let url = format!("{}/v2/clusters/{cluster}/status", s.api());
    loop {
        if let Ok((200, text)) = http.send(reqwest::Method::GET, &url, ADMIN, None).await {
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["actionstatus"] != "running" && v["actionstatus"] != "not_submitted" {
                return v;
            }
        }
        assert!(
            since.elapsed() < within,
            "the job did not end within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn seed() -> u64 {
    std::env::var("WEFT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen())
}

/// The crash run over one database.
async fn crash_run(data_dir: PathBuf, database: String) {
    let seed = seed();
    eprintln!("crash test seed: {seed} (replay with WEFT_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let http = Http::new();
    let mut server = Server::new(data_dir, database, 5);
    let tenant_id = setup(&http, &server).await;
    // A client follows the tenant's event stream through every crash (issue 38).
    let follower = Follower::start(vec![server.api()], TENANT, "admin");
    let cluster = create_cluster(&http, &server, 50).await;
    let planned = plan_tasks(&http, &server, &cluster).await;
    assert!(planned.len() > 300, "{} tasks planned", planned.len());

    // Several kill points, as counts of completed tasks; the first may come before any work.
    let mut kills: Vec<usize> = (0..4)
        .map(|_| rng.gen_range(0..planned.len() * 9 / 10))
        .collect();
    kills.sort_unstable();
    eprintln!("killing the server after {kills:?} completed tasks");

    let target = Target {
        internal: server.internal(),
        provisioner: PROVISIONER.into(),
        tenant_id,
    };
    let since = Instant::now();
    let pool = Pool::start(&target, 8);
    for k in &kills {
        while pool.record.completed_count() < *k {
            assert!(
                since.elapsed() < JOB_DEADLINE,
                "stuck at {} completed tasks before kill point {k}",
                pool.record.completed_count()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A moment into the next requests, so that some are in flight when the server dies.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..30))).await;
        tokio::task::block_in_place(|| server.crash_and_restart());
    }
    let status = wait_for_job(&http, &server, &cluster, since).await;
    let record = pool.stop().await;

    eprintln!(
        "{} restarts; {} tasks completed, {} takes, {} requests without an answer, {} finishes refused; {:?}",
        server.restarts,
        record.completed_count(),
        record.taken.lock().unwrap().len(),
        record.errors.lock().unwrap(),
        record.refused.lock().unwrap().len(),
        since.elapsed()
    );
    assert_eq!(status["status"], "active", "{status}");
    assert_eq!(status["actionstatus"], "complete", "{status}");
    assert_eq!(server.restarts, kills.len() as u32);
    let cleanups = check_exactly_once(&record, &planned);
    eprintln!("cleanup DELETEs of lost CREATEs: {cleanups:?}");
    tokio::task::block_in_place(|| {
        assert_saw_every_event_once(&follower, &server.api(), TENANT, "admin");
    });
    eprintln!(
        "the event follower saw {} events, reconnecting {} times",
        follower.ids().len(),
        follower.reconnects()
    );
}

/// Asserts that no task was completed twice and that the completed tasks are the planned ones plus
/// cleanup DELETEs (`<CREATE task id>-r<attempt>`: a CREATE whose lease ran out is retried after a
/// DELETE of whatever it may have made). Returns the cleanups.
fn check_exactly_once(record: &Record, planned: &BTreeSet<String>) -> Vec<String> {
    let dups = record.duplicates();
    assert!(dups.is_empty(), "tasks completed more than once: {dups:?}");
    let done: BTreeSet<String> = record.completed().into_iter().collect();
    let missing: Vec<_> = planned.difference(&done).collect();
    assert!(missing.is_empty(), "planned but not completed: {missing:?}");
    let extra: Vec<String> = done.difference(planned).cloned().collect();
    for id in &extra {
        let cleanup_of = id
            .rsplit_once("-r")
            .filter(|(_, n)| n.parse::<u32>().is_ok())
            .map(|(base, _)| base);
        assert!(
            cleanup_of.is_some_and(|b| planned.contains(b)),
            "completed but neither planned nor a cleanup: {id}"
        );
    }
    extra
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_a_50_node_create_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let db = format!("sqlite://{}", data.join("weft.db").display());
    crash_run(data, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_a_50_node_create_on_postgres() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.expect("postgres");
    let dir = tempfile::tempdir().unwrap();
    crash_run(dir.path().join("data"), pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_worker_vanished_goes_to_another_worker_after_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let db = format!("sqlite://{}", data.join("weft.db").display());
    let http = Http::new();
    let server = Server::new(data, db, 2);
    let tenant_id = setup(&http, &server).await;
    let cluster = create_cluster(&http, &server, 3).await;
    let planned = plan_tasks(&http, &server, &cluster).await;
    let target = Target {
        internal: server.internal(),
        provisioner: PROVISIONER.into(),
        tenant_id,
    };

    // The ghost takes one task and is never heard of again.
    let ghost = Worker::new(target.clone(), "ghost".into());
    let lost = ghost.take().await.expect("take").expect("a queued task");
    let lost_id = lost["taskId"].as_str().unwrap().to_string();
    let taken_at = Instant::now();
    drop(ghost);

    let pool = Pool::start(&target, 2);
    let status = wait_for_job(&http, &server, &cluster, taken_at).await;
    let record = pool.stop().await;
    assert_eq!(status["status"], "active", "{status}");
    assert_eq!(status["actionstatus"], "complete", "{status}");
    assert!(
        taken_at.elapsed() >= Duration::from_secs(2),
        "the job ended before the lost task's lease ran out"
    );
    assert!(
        record.completed().contains(&lost_id),
        "the lost task {lost_id} was completed by another worker"
    );
    let cleanups = check_exactly_once(&record, &planned);
    assert_eq!(lost["taskName"], "CREATE", "the first task of a node");
    assert_eq!(
        cleanups,
        vec![format!("{lost_id}-r1")],
        "a lost CREATE is retried after a cleanup DELETE"
    );
}

/// How soon after a restart a job whose take's answer died with the server must end.
const AFTER_RESTART: Duration = Duration::from_secs(20);

/// A server SIGKILLed between a take's commit and its answer, on PostgreSQL, with a task time-out
/// of 30 minutes: the fault point `WEFT_TEST_HOLD_TAKE` holds the answer of the n-th task the
/// server hands out (n drawn per round) and the test kills the server then, and starts it again.
/// The worker whose answer was lost takes again: the task it never received goes back to the
/// queue at once, and the job completes within seconds of the restart, every task run once, in
/// 20 of 20 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_take_whose_answer_died_with_the_server_is_given_back_at_the_next_take() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.expect("postgres");
    let seed = seed();
    eprintln!("lost answer test seed: {seed} (replay with WEFT_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("take-held");
    let http = Http::new();
    let mut server = Server::new(dir.path().join("data"), pg.url(), 1800);
    let tenant_id = setup(&http, &server).await;
    let target = Target {
        internal: server.internal(),
        provisioner: PROVISIONER.into(),
        tenant_id,
    };
    let mut slowest = Duration::ZERO;
    for round in 0..20 {
        let n: u32 = rng.gen_range(1..=8);
        let _ = std::fs::remove_file(&marker);
        server.hold_take = Some(format!("{n}@{}", marker.display()));
        tokio::task::block_in_place(|| server.crash_and_restart());
        let cluster = create_cluster(&http, &server, 2).await;
        let since = Instant::now();
        let pool = Pool::start(&target, 2);
        while !marker.exists() {
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "round {round}: the server never handed out task {n}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        server.hold_take = None;
        tokio::task::block_in_place(|| server.crash_and_restart());
        let restarted = Instant::now();
        let status = wait_for_job_within(&http, &server, &cluster, restarted, AFTER_RESTART).await;
        let took = restarted.elapsed();
        let record = pool.stop().await;
        assert_eq!(
            status["actionstatus"], "complete",
            "round {round}: {status}"
        );
        assert_eq!(status["status"], "active", "round {round}: {status}");
        let dups = record.duplicates();
        assert!(dups.is_empty(), "round {round}: run twice: {dups:?}");
        eprintln!("round {round}: task {n} held; the job ended {took:?} after the restart");
        slowest = slowest.max(took);
    }
    eprintln!("20 of 20 rounds; the slowest ended {slowest:?} after its restart");
}
