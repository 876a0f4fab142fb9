//! Crash recovery of `weft up` (issue 14): in each round an 8-node `kv-web` cluster is created on
//! the local provider, `weft up` is SIGKILLed at a random moment of the create and started again
//! on the same data and ports. The restarted provisioner registers again, which fails over the
//! leases its killed run held, so the job must finish within 30 s of the restart, with no action
//! of a node completed twice; the cluster is then deleted and no process of its nodes may remain.
//!
//! Kill points come from a seeded RNG; the seed is printed, and `WEFT_CRASH_SEED=<n>` replays a
//! run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::crash::free_ports;
use crate::support::{http, start, weft, Running};

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "default"), ("Coopr-UserID", "admin")];
const ROUNDS: u32 = 10;
/// How long a job may take after `weft up` comes back (the issue's target).
const AFTER_RESTART: Duration = Duration::from_secs(30);

struct Up {
    data: PathBuf,
    ports: (u16, u16),
    running: Option<Running>,
}

impl Up {
    fn start(data: PathBuf) -> Up {
        let mut up = Up {
            data,
            ports: free_ports(),
            running: None,
        };
        up.run();
        up
    }

    fn run(&mut self) {
        let mut cmd = weft();
        cmd.args(["up", "--port", &self.ports.0.to_string()])
            .args(["--internal-port", &self.ports.1.to_string()])
            .arg("--data-dir")
            .arg(&self.data);
        let r = start(cmd);
        assert_eq!(r.api, self.api(), "weft up came back on its port");
        self.running = Some(r);
    }

    fn kill_and_restart(&mut self) {
        let mut r = self.running.take().expect("running");
        r.child.kill().expect("SIGKILL");
        r.child.wait().expect("reap");
        drop(r);
        self.run();
    }

    fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.0)
    }

    fn get(&self, path: &str) -> Value {
        let (code, body) = http("GET", &format!("{}{path}", self.api()), &ADMIN, "");
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("json")
    }

    /// Polls the cluster's status until it is not pending, for at most `within`.
    fn settle(&self, id: &str, within: Duration) -> (String, Duration) {
        let t0 = Instant::now();
        loop {
            let s = self.get(&format!("/v2/clusters/{id}/status"));
            let status = s["status"].as_str().unwrap_or_default().to_string();
            if status != "pending" || t0.elapsed() > within {
                return (status, t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// (node id, service, action) -> how many times it completed, over every node of the cluster.
fn completions(details: &Value) -> BTreeMap<(String, String, String), u32> {
    let mut done = BTreeMap::new();
    for node in details["nodes"].as_array().expect("nodes") {
        let id = node["id"].as_str().unwrap_or_default();
        for a in node["actions"].as_array().into_iter().flatten() {
            if a["status"] == "complete" {
                let key = (
                    id.to_string(),
                    a["service"].as_str().unwrap_or_default().to_string(),
                    a["action"].as_str().unwrap_or_default().to_string(),
                );
                *done.entry(key).or_insert(0) += 1;
            }
        }
    }
    done
}

/// Processes on this machine whose environment marks them as one of `nodes` (the local
/// provider's `WEFT_LOCAL_NODE`).
pub(crate) fn node_processes(nodes: &[String]) -> Vec<u32> {
    let marks: Vec<String> = nodes
        .iter()
        .map(|n| format!("WEFT_LOCAL_NODE={n}"))
        .collect();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env
                .split(|b| *b == 0)
                .any(|kv| marks.iter().any(|m| kv == m.as_bytes()))
            {
                found.push(pid);
            }
        }
    }
    found
}

pub(crate) fn node_dirs(data: &Path) -> usize {
    std::fs::read_dir(data.join("provisioner/local/nodes"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn weft_up_killed_at_random_moments_of_a_create_finishes_the_job_after_a_restart() {
    let seed = std::env::var("WEFT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("crash_up seed {seed} (replay with WEFT_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(dir.path().join("data"));

    for round in 0..ROUNDS {
        let body =
            format!(r#"{{"name":"crash{round}","clusterTemplate":"kv-web","numMachines":8}}"#);
        let (code, created) = http("POST", &format!("{}/v2/clusters", up.api()), &ADMIN, &body);
        assert_eq!(code, 200, "round {round}: {created}");
        let id = serde_json::from_str::<Value>(&created).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        // A random moment of the create (which takes a few seconds here).
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..3000)));
        up.kill_and_restart();

        let (status, took) = up.settle(&id, Duration::from_secs(90));
        let details = up.get(&format!("/v2/clusters/{id}"));
        assert_eq!(
            status, "active",
            "round {round} (seed {seed}): {}",
            details["message"]
        );
        assert!(
            took < AFTER_RESTART,
            "round {round} (seed {seed}): the job took {took:?} after the restart"
        );
        let twice: Vec<_> = completions(&details)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(
            twice.is_empty(),
            "round {round} (seed {seed}): completed twice: {twice:?}"
        );
        let nodes: Vec<String> = details["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["id"].as_str().map(str::to_string))
            .collect();
        assert_eq!(nodes.len(), 8);

        let (code, text) = http(
            "DELETE",
            &format!("{}/v2/clusters/{id}", up.api()),
            &ADMIN,
            "",
        );
        assert_eq!(code, 200, "round {round}: {text}");
        let (status, _) = up.settle(&id, Duration::from_secs(60));
        assert_eq!(status, "terminated", "round {round} (seed {seed})");
        assert_eq!(
            node_processes(&nodes),
            Vec::<u32>::new(),
            "round {round} (seed {seed}): node processes left after delete"
        );
        assert_eq!(
            node_dirs(&up.data),
            0,
            "round {round}: node directories left"
        );
    }
}
