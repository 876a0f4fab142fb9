//! Several `weft server` processes on one PostgreSQL under failure (issue 21), with real processes:
//! a throwaway PostgreSQL, two servers on fixed ports, and a provisioner that knows both.
//!
//! * A janitor leader that is stopped (SIGSTOP) but still connected loses its lease: the other
//!   server leads within the lease and does the janitor's work; the woken server finds its lease
//!   lost and does not take it back.
//! * `kill -9` of one server at seeded random moments while clusters are being created: every job
//!   completes through the other server, the janitor moves to the survivor within the lease, a
//!   restarted server does not take the leadership back, no task is left in progress and no node
//!   got a second machine. `WEFT_FAILOVER_SEED` replays a run (the seed is printed);
//!   `WEFT_FAILOVER_ROUNDS` sets the rounds (20). A client follows the tenant's event stream through
//!   whichever server is up and sees every event once, in order.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use weft_store::{PgStore, Store};

use crate::follow::{assert_saw_every_event_once, Follower};
use crate::lost_provisioner::{ok, spawn, Proc, SA};
use crate::support::weft;

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "acme"), ("Coopr-UserID", "admin")];
/// `--janitor-interval`, which is also the janitor's lease, in seconds.
const LEASE_S: u64 = 2;
/// What a loaded test machine may add to a takeover (a tick of the survivor, scheduling).
const SLACK: Duration = Duration::from_millis(1500);

/// A free loopback port (for a server that must come back on the same address).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One `weft server` on fixed ports, which can be killed and started again.
struct Server {
    proc: Option<Proc>,
    port: u16,
    internal: u16,
    data: PathBuf,
    database: String,
    log: PathBuf,
    /// `--provisioner-timeout`, seconds.
    provisioner_timeout: u64,
}

impl Server {
    fn new(dir: &Path, name: &str, database: &str, provisioner_timeout: u64) -> Server {
        Server {
            proc: None,
            port: free_port(),
            internal: free_port(),
            data: dir.join(name),
            database: database.to_string(),
            log: dir.join(format!("{name}.log")),
            provisioner_timeout,
        }
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = weft();
        cmd.args(["server", "--port", &self.port.to_string()])
            .args(["--internal-port", &self.internal.to_string()])
            .args(["--database", &self.database])
            .args(["--janitor-interval", &LEASE_S.to_string()])
            .args(["--task-timeout", "8", "--provisioner-timeout"])
            .arg(self.provisioner_timeout.to_string())
            .arg("--data-dir")
            .arg(&self.data)
            // Servers of one database share the secrets key (the first to start makes it).
            .arg("--secrets-key-file")
            .arg(self.data.with_file_name("secrets.key"))
            .env("WEFT_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd.spawn().expect("spawn weft server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let up = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("provisioners"));
        std::thread::spawn(move || for _ in lines {});
        let proc = Proc(child);
        assert!(
            up,
            "server {} did not start: {}",
            self.data.display(),
            self.log()
        );
        self.proc = Some(proc);
    }

    fn pid(&self) -> u32 {
        self.proc.as_ref().expect("running").0.id()
    }

    fn kill9(&mut self) {
        let mut p = self.proc.take().expect("running");
        p.0.kill().unwrap();
        p.0.wait().unwrap();
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig}");
    }

    fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn internal(&self) -> String {
        format!("http://127.0.0.1:{}", self.internal)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The pid in the janitor's lease row while the lease holds (holders are `<host>/<pid>/<id>`),
/// and the term.
async fn leader(store: &PgStore) -> Option<(u32, i64)> {
    let row = store.leader("janitor").await.unwrap()?;
    let now = weft_server::state::now_ms();
    let pid = row.holder.split('/').nth(1)?.parse().ok()?;
    (row.deadline >= now).then_some((pid, row.term))
}

/// Polls until `want` leads (any server when `None`), for at most `within`; returns the leader
/// and how long it took.
async fn wait_for_leader(
    store: &PgStore,
    want: Option<u32>,
    within: Duration,
) -> ((u32, i64), Duration) {
    let t0 = Instant::now();
    loop {
        let now = leader(store).await;
        if let Some(l) = now.filter(|l| want.is_none_or(|w| w == l.0)) {
            return (l, t0.elapsed());
        }
        assert!(
            t0.elapsed() < within,
            "no janitor leader {want:?} within {within:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `cond` every 100 ms for at most `within`.
fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lease_and_slack() -> Duration {
    Duration::from_secs(LEASE_S) + Duration::from_millis(LEASE_S * 1000 / 3) + SLACK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_janitor_leader_loses_its_lead_to_the_other_server() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.expect("postgres");
    let store = PgStore::open(&pg.url()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut servers = [
        Server::new(dir.path(), "a", &pg.url(), 2),
        Server::new(dir.path(), "b", &pg.url(), 2),
    ];
    servers.iter_mut().for_each(Server::start);
    let ((pid, term), _) = wait_for_leader(&store, None, Duration::from_secs(20)).await;
    let (frozen, survivor) = if pid == servers[0].pid() {
        (&servers[0], &servers[1])
    } else {
        (&servers[1], &servers[0])
    };
    assert_eq!(frozen.pid(), pid, "a server of ours leads");

    frozen.signal("STOP");
    // A provisioner that never sends a heartbeat: only a running janitor drops it.
    let ghost = json!({"id": "ghost", "host": "127.0.0.1", "port": 9, "capacityTotal": 1});
    ok(
        "PUT",
        &format!("{}/v2/provisioners/ghost", survivor.internal()),
        &[],
        ghost,
    );
    let ((_, new_term), took) =
        wait_for_leader(&store, Some(survivor.pid()), Duration::from_secs(30)).await;
    assert!(
        took <= lease_and_slack(),
        "the survivor took over within the lease: {took:?}"
    );
    assert!(new_term > term, "a takeover starts a new term");
    wait_until(
        "the new leader's janitor drops the ghost",
        Duration::from_secs(20),
        || {
            let list = ok(
                "GET",
                &format!("{}/v2/provisioners", survivor.api()),
                &SA,
                Value::Null,
            );
            !list.to_string().contains("ghost")
        },
    );

    frozen.signal("CONT");
    wait_until(
        "the woken server notices its lease is lost",
        Duration::from_secs(20),
        || frozen.log().contains("janitor leadership lost"),
    );
    // Several of its leadership steps later the survivor still leads, in the same term.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(LEASE_S) {
        assert_eq!(
            leader(&store).await,
            Some((survivor.pid(), new_term)),
            "the woken server took nothing back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The catalog: the local provider and a service whose install takes two seconds.
fn catalog(api: &str) {
    let install =
        json!({"type": "shell", "fields": {"script": "#!/bin/sh\nsleep 2\necho installed\n"}});
    let catalog = [
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "small", "providermap": {"local": {"flavor": "small"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "host", "providermap": {"local": {"image": "host"}}}),
        ),
        (
            "services",
            json!({"name": "slow", "provisioner": {"actions": {"install": install}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["slow"], "provider": "local"}}),
        ),
    ];
    for (kind, body) in catalog {
        ok("POST", &format!("{api}/v2/{kind}"), &ADMIN, body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_through_the_other_server_when_one_is_killed() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let seed: u64 = std::env::var("WEFT_FAILOVER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let rounds: u32 = std::env::var("WEFT_FAILOVER_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    eprintln!("failover: seed {seed} ({rounds} rounds; replay with WEFT_FAILOVER_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let pg = weft_testkit::TempPostgres::start().await.expect("postgres");
    let store = PgStore::open(&pg.url()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut servers = [
        Server::new(dir.path(), "a", &pg.url(), 60),
        Server::new(dir.path(), "b", &pg.url(), 60),
    ];
    servers.iter_mut().for_each(Server::start);
    let both = format!("{},{}", servers[0].internal(), servers[1].internal());
    let machines = dir.path().join("provisioner");
    let mut cmd = weft();
    cmd.args([
        "provisioner",
        "--server",
        &both,
        "--id",
        "p1",
        "--capacity",
        "4",
    ])
    .args(["--bind", "127.0.0.1:0", "--data-dir"])
    .arg(&machines);
    let _provisioner = spawn(cmd, "weft provisioner").0;
    let api0 = servers[0].api();
    ok(
        "POST",
        &format!("{api0}/v2/tenants"),
        &SA,
        json!({"tenant": {"name": "acme", "workers": 4}}),
    );
    catalog(&api0);
    wait_for_leader(&store, None, Duration::from_secs(20)).await;
    // A client follows the tenant's events through whichever server is up (issue 38).
    let follower = Follower::start(vec![servers[0].api(), servers[1].api()], "acme", "admin");

    let mut clusters: Vec<(String, u64)> = Vec::new();
    let mut takeovers = Vec::new();
    for round in 0..rounds {
        let victim = rng.gen_range(0..2usize);
        let survivor = 1 - victim;
        let api = servers[survivor].api();
        for k in 0..2 {
            let size = rng.gen_range(1..=2u64);
            let body = json!({"name": format!("r{round}c{k}"), "clusterTemplate": "t", "numMachines": size});
            let id = ok("POST", &format!("{api}/v2/clusters"), &ADMIN, body)["id"]
                .as_str()
                .unwrap()
                .to_string();
            clusters.push((id, size));
        }
        // The fault comes at a random moment of the jobs (this is not waiting for anything).
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..2500))).await;
        let led = leader(&store).await.map(|l| l.0);
        let victim_pid = servers[victim].pid();
        servers[victim].kill9();
        let survivor_pid = servers[survivor].pid();
        if led == Some(victim_pid) {
            let (_, took) =
                wait_for_leader(&store, Some(survivor_pid), Duration::from_secs(30)).await;
            assert!(
                took <= lease_and_slack(),
                "round {round} (seed {seed}): the janitor moved to the survivor in {took:?}"
            );
            takeovers.push(took);
        }
        servers[victim].start();
        let (l, _) = wait_for_leader(&store, None, Duration::from_secs(30)).await;
        assert_eq!(
            l.0, survivor_pid,
            "round {round} (seed {seed}): the restarted server took the leadership back"
        );
    }

    eprintln!(
        "failover: the janitor's leader was killed in {} rounds; took over in {takeovers:?}",
        takeovers.len()
    );
    // Every job completes (through whichever server is up).
    let api = servers[0].api();
    let get = |path: &str| ok("GET", &format!("{api}/v2/{path}"), &ADMIN, Value::Null);
    for (id, _) in &clusters {
        let t0 = Instant::now();
        loop {
            let s = get(&format!("clusters/{id}/status"));
            if s["status"] == "active" && s["actionstatus"] == "complete" {
                break;
            }
            if s["status"] == "incomplete" || t0.elapsed() > Duration::from_secs(120) {
                let details = get(&format!("clusters/{id}"));
                let logs = servers
                    .iter()
                    .map(Server::log)
                    .collect::<Vec<_>>()
                    .join("\n----\n");
                panic!("cluster {id} (seed {seed}): {s}\n{details:#}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let in_progress: u64 = store
        .queue_counts()
        .await
        .unwrap()
        .values()
        .map(|c| c.1)
        .sum();
    assert_eq!(in_progress, 0, "no task is left in progress (seed {seed})");
    // One machine per node: every node's directory, and no other.
    let nodes: u64 = clusters.iter().map(|c| c.1).sum();
    let dirs: Vec<String> = std::fs::read_dir(machines.join("local/nodes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let ids: Vec<Value> = clusters
        .iter()
        .flat_map(|(id, _)| {
            let d = get(&format!("clusters/{id}"));
            d["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["properties"]["providerid"].clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        dirs.len() as u64,
        nodes,
        "one machine per node (seed {seed}): {dirs:?} for {ids:?}"
    );
    assert_saw_every_event_once(&follower, &api, "acme", "admin");
    eprintln!(
        "failover: the event follower saw {} events, reconnecting {} times",
        follower.ids().len(),
        follower.reconnects()
    );
}
