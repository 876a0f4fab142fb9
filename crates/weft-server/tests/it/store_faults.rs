//! The store after its faults (issue 37): a full disk under a SQLite store (a small tmpfs), a
//! PostgreSQL restart under load, and a take's answer lost between two servers. Writes refused meanwhile are refused whole (503 for a full
//! disk), reads go on, and once the cause is gone the same server creates, runs and deletes
//! clusters again, without a restart; its janitor runs its rounds.
//!
//! Mounting a tmpfs needs root: elsewhere the test is skipped, and in CI (`CI=true`) it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{json, Value};

use crate::common::{admin, Harness};
use crate::janitor::{finish, setup, T};

/// A tmpfs of a given size mounted on a temp dir; unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts one, or says why not: skipped outside CI, a failure in CI.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
        if !root {
            weft_testkit::skip_or_fail("tmpfs", "mounting a tmpfs needs root");
            return None;
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "weft-test"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            Ok(o) => {
                let why = format!("mount failed: {}", String::from_utf8_lossy(&o.stderr));
                weft_testkit::skip_or_fail("tmpfs", &why);
                None
            }
            Err(e) => {
                weft_testkit::skip_or_fail("tmpfs", &format!("cannot run mount: {e}"));
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the file system is full; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = f.write_all(&chunk).and_then(|()| f.flush()) {
                assert_eq!(e.raw_os_error(), Some(28), "filling: {e}");
                break;
            }
        }
        // What a partial chunk could not take, a byte at a time.
        while f.write_all(&[0]).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Asks for a one-node cluster of template `t` named `name`.
async fn create_named(h: &Harness, name: &str) -> crate::common::Resp {
    let body = json!({"name": name, "clusterTemplate": "t", "numMachines": 1});
    h.post(admin(T), "/v2/clusters", body.to_string()).await
}

fn id_of(r: &crate::common::Resp) -> String {
    r.json()["id"].as_str().expect("cluster id").to_string()
}

/// A service whose body takes room (the catalog's writes go through sqlx's pool).
fn service(name: &str) -> String {
    json!({"name": name, "description": "x".repeat(4096)}).to_string()
}

/// How long a client waits before it tries a refused request again.
const RETRY: Duration = Duration::from_millis(10);

/// A take that tolerates a failing store: `Err(status)` for an answer other than 200 or 204.
async fn try_take(h: &Harness, tenant_id: &str, worker: &str) -> Result<Option<Value>, u16> {
    let body = json!({"workerId": worker, "provisionerId": "p1", "tenantId": tenant_id});
    let r = h
        .internal(Method::POST, "/v2/tasks/take", body.to_string())
        .await;
    match r.status.as_u16() {
        204 => Ok(None),
        200 => Ok(Some(r.json())),
        other => Err(other),
    }
}

/// Runs every task to its end as worker `w1`, retrying what the store refuses, until the queue
/// stays empty; returns how many tasks ran.
async fn drain_patiently(h: &Harness, tenant_id: &str) -> usize {
    let since = Instant::now();
    let mut ran = 0;
    loop {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the jobs do not end"
        );
        let task = match try_take(h, tenant_id, "w1").await {
            Ok(Some(task)) => task,
            Ok(None) => return ran,
            Err(_) => {
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        loop {
            match finish(h, tenant_id, "w1", &task, 0).await {
                200 => break,
                s if s >= 500 => {
                    assert!(
                        since.elapsed() < Duration::from_secs(60),
                        "finish answers {s}"
                    );
                    tokio::time::sleep(RETRY).await;
                }
                other => panic!("finish answered {other}"),
            }
        }
        ran += 1;
    }
}

/// Every cluster of the tenant with its status.
async fn statuses(h: &Harness) -> Vec<(String, String)> {
    let list = h.get(admin(T), "/v2/clusters").await.expect(200).json();
    list.as_array()
        .expect("a list")
        .iter()
        .map(|c| {
            let id = c["id"].as_str().unwrap_or_default().to_string();
            (id, c["status"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// After the fault: every cluster accepted is active; a new one is created and run, one is
/// deleted, and the janitor runs a round.
async fn works_again(h: &Harness, tid: &str, accepted: &[String]) {
    drain_patiently(h, tid).await;
    let mut listed = statuses(h).await;
    listed.sort();
    let mut expected: Vec<(String, String)> = accepted
        .iter()
        .map(|id| (id.clone(), "active".to_string()))
        .collect();
    expected.sort();
    assert_eq!(
        listed, expected,
        "every cluster accepted is whole, and no other"
    );
    let late = id_of(&create_named(h, "after").await.expect(200));
    drain_patiently(h, tid).await;
    h.delete(admin(T), &format!("/v2/clusters/{late}"))
        .await
        .expect(200);
    drain_patiently(h, tid).await;
    let late_status = h
        .get(admin(T), &format!("/v2/clusters/{late}/status"))
        .await
        .expect(200)
        .json();
    assert_eq!(late_status["status"], "terminated", "{late_status}");
    let now = weft_server::state::now_ms();
    weft_engine::janitor::run_once(&h.app.state.engine, now)
        .await
        .expect("a janitor round");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_whole_with_503_and_they_succeed_once_space_is_freed() {
    let Some(fs) = Tmpfs::mount("20m") else {
        return;
    };
    let dir = tempfile::tempdir_in(fs.path()).expect("data dir on the tmpfs");
    let h = Harness::in_dir(dir, |_| {}).await;
    let tid = setup(&h).await;
    let first = id_of(&create_named(&h, "first").await.expect(200));
    let task = try_take(&h, &tid, "w1").await.unwrap().expect("a task");
    let filler = fs.fill();

    // Writes go on until the store has no room left; from then on each is refused whole.
    let mut accepted = vec![first];
    let mut refused = 0;
    for i in 0..2000 {
        let r = create_named(&h, &format!("full{i}")).await;
        match r.status.as_u16() {
            200 => accepted.push(id_of(&r)),
            503 => {
                assert!(
                    r.text().contains("the store is out of space"),
                    "{}",
                    r.text()
                );
                assert_eq!(r.headers["retry-after"], "5");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("a create on a full disk answered {other}: {}", r.text()),
        }
    }
    assert_eq!(refused, 3, "the store never ran out of space");
    eprintln!(
        "{} creates accepted on the full disk before {refused} were refused",
        accepted.len() - 1
    );
    let r = h.post(admin(T), "/v2/services", service("big")).await;
    assert_eq!(r.status.as_u16(), 503, "{}", r.text());
    assert_eq!(finish(&h, &tid, "w1", &task, 0).await, 503);
    // Reads keep working, and a janitor round fails without harm.
    assert_eq!(statuses(&h).await.len(), accepted.len());
    let _ = weft_engine::janitor::run_once(&h.app.state.engine, weft_server::state::now_ms()).await;

    std::fs::remove_file(filler).expect("free the space");
    assert_eq!(finish(&h, &tid, "w1", &task, 0).await, 200);
    h.post(admin(T), "/v2/services", service("big"))
        .await
        .expect(200);
    works_again(&h, &tid, &accepted).await;
}

/// Requests that go on while the database goes away and comes back: two clients creating
/// clusters, and a worker (`w1`) running tasks.
#[derive(Default)]
struct Load {
    stop: AtomicBool,
    /// The clusters created, with when.
    accepted: Mutex<Vec<(Instant, String)>>,
    /// The statuses of the creates refused.
    failed: Mutex<Vec<u16>>,
}

impl Load {
    fn start(self: &Arc<Self>, h: &Arc<Harness>, tid: &str) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        for n in 0..2 {
            let (h, load) = (h.clone(), self.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0;
                while !load.stop.load(Ordering::SeqCst) {
                    i += 1;
                    let r = create_named(&h, &format!("load{n}-{i}")).await;
                    match r.status.as_u16() {
                        200 => load
                            .accepted
                            .lock()
                            .unwrap()
                            .push((Instant::now(), id_of(&r))),
                        s => load.failed.lock().unwrap().push(s),
                    }
                }
            }));
        }
        let (h, load, tid) = (h.clone(), self.clone(), tid.to_string());
        tasks.push(tokio::spawn(async move {
            while !load.stop.load(Ordering::SeqCst) {
                match try_take(&h, &tid, "w1").await {
                    Ok(Some(task)) => {
                        while finish(&h, &tid, "w1", &task, 0).await >= 500 {
                            tokio::time::sleep(RETRY).await;
                        }
                    }
                    Ok(None) => tokio::task::yield_now().await,
                    Err(_) => tokio::time::sleep(RETRY).await,
                }
            }
        }));
        tasks
    }

    /// Waits until `n` creates have succeeded after `after`, for at most `within`.
    async fn created_since(&self, after: Instant, n: usize, within: Duration) {
        loop {
            let done = self
                .accepted
                .lock()
                .unwrap()
                .iter()
                .filter(|(t, _)| *t > after)
                .count();
            if done >= n {
                return;
            }
            assert!(
                after.elapsed() < within,
                "{done} of {n} creates succeeded; refused: {:?}",
                self.failed.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgresql_restart_under_load_is_survived_without_restarting_the_server() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start_own()
        .await
        .expect("postgres");
    let h = Arc::new(Harness::over(&pg.url()).await);
    let tid = setup(&h).await;
    let load = Arc::new(Load::default());
    let tasks = load.start(&h, &tid);
    load.created_since(Instant::now(), 5, Duration::from_secs(30))
        .await;
    tokio::task::block_in_place(|| pg.restart()).expect("restart postgres");
    let restarted = Instant::now();
    load.created_since(restarted, 5, Duration::from_secs(30))
        .await;
    let recovered = restarted.elapsed();
    load.stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("load task");
    }
    let failures = load.failed.lock().unwrap().clone();
    assert!(
        failures.iter().all(|s| *s == 500 || *s == 503),
        "{failures:?}"
    );
    let ids: Vec<String> = load
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    eprintln!(
        "{} creates accepted, {} refused during the restart; 5 succeeded {recovered:?} after it",
        ids.len(),
        failures.len()
    );
    // A create answered with an error while the database went away may still have committed:
    // such a cluster runs too, so the check is that every listed one ends active.
    drain_patiently(&h, &tid).await;
    let listed = statuses(&h).await;
    assert!(
        listed.iter().all(|(_, s)| s == "active"),
        "every cluster ends active: {listed:?}"
    );
    let all: Vec<String> = listed.into_iter().map(|(id, _)| id).collect();
    assert!(
        ids.iter().all(|id| all.contains(id)),
        "accepted clusters are listed"
    );
    works_again(&h, &tid, &all).await;
}

/// A take's answer lost between two servers on one PostgreSQL database: the worker asks the other
/// server, which gives the task back and hands it out again at once, its attempt not counted;
/// the job then runs to its end through that server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_answer_was_lost_is_given_back_by_another_server() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.expect("postgres");
    let (a, b) = (
        Harness::over(&pg.url()).await,
        Harness::over(&pg.url()).await,
    );
    let tid = setup(&a).await;
    let cluster = id_of(&create_named(&a, "c1").await.expect(200));
    let lost = try_take(&a, &tid, "w1").await.unwrap().expect("a task");
    let again = try_take(&b, &tid, "w1").await.unwrap().expect("a task");
    assert_eq!(again["taskId"], lost["taskId"], "the lost task, at once");
    let id = lost["taskId"].as_str().unwrap();
    let row = b.app.state.store.get_task(&tid, id).await.unwrap().unwrap();
    assert_eq!(row.attempts, 1, "the lost attempt is not counted");
    assert_eq!(finish(&b, &tid, "w1", &again, 0).await, 200);
    drain_patiently(&b, &tid).await;
    let status = b
        .get(admin(T), &format!("/v2/clusters/{cluster}/status"))
        .await
        .expect(200)
        .json();
    assert_eq!(status["status"], "active", "{status}");
}
