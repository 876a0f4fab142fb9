//! A provisioner killed in the middle of a task loses nothing: real `weft server` and `weft
//! provisioner` processes; the first provisioner is SIGKILLed while its script runs, the janitor
//! fails the task when its lease passes and drops the silent provisioner, and a second provisioner
//! gets the tenant's worker and finishes the job.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{http, weft};

pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and returns it with the lines of its stdout up to the one containing `until`.
pub(crate) fn spawn(mut cmd: Command, until: &str) -> (Proc, Vec<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("stdout");
        let done = line.contains(until);
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains(until)),
        "exited before printing {until}: {seen:?}"
    );
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), seen)
}

pub(crate) fn url_after(lines: &[String], label: &str) -> String {
    lines
        .iter()
        .find_map(|l| {
            l.trim().strip_prefix(label).map(|r| {
                r.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_end_matches("/v2")
                    .to_string()
            })
        })
        .unwrap_or_else(|| panic!("no {label} line in {lines:?}"))
}

pub(crate) const SA: [(&str, &str); 2] =
    [("Coopr-TenantID", "superadmin"), ("Coopr-UserID", "admin")];
const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "acme"), ("Coopr-UserID", "admin")];

pub(crate) fn ok(method: &str, url: &str, who: &[(&str, &str)], body: Value) -> Value {
    let (code, text) = http(method, url, who, &body.to_string());
    assert!(code < 300, "{method} {url}: {code} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

fn provisioner(internal: &str, id: &str, data: &Path) -> Proc {
    let mut cmd = weft();
    cmd.args([
        "provisioner",
        "--server",
        internal,
        "--id",
        id,
        "--capacity",
        "2",
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(data);
    spawn(cmd, "weft provisioner").0
}

/// A catalog of one service whose install action is `script`, on the local provider, and a
/// one-node cluster of it; answers the cluster id.
pub(crate) fn one_node_cluster(api: &str, who: &[(&str, &str)], script: &str) -> String {
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
            json!({"name": "probe", "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": script}}}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["probe"], "provider": "local"}}),
        ),
    ];
    for (kind, body) in catalog {
        ok("POST", &format!("{api}/v2/{kind}"), who, body);
    }
    ok(
        "POST",
        &format!("{api}/v2/clusters"),
        who,
        json!({"name": "c", "clusterTemplate": "t", "numMachines": 1}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A server (with its janitor every second), the tenant `acme` with one worker, and a one-node
/// cluster whose install script hangs on its first run (writing its pid to `marks/started`) and
/// finishes at once on a retry. Returns the server, its API and internal URLs and the cluster id.
struct Scene {
    _server: Proc,
    api: String,
    internal: String,
    cluster: String,
    started: std::path::PathBuf,
}

fn scene(dir: &Path, task_timeout: &str, provisioner_timeout: &str, first: &str) -> (Scene, Proc) {
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let mut cmd = weft();
    cmd.args(["server", "--port", "0", "--internal-port", "0"])
        .args(["--task-timeout", task_timeout, "--janitor-interval", "1"])
        .args(["--provisioner-timeout", provisioner_timeout, "--data-dir"])
        .arg(dir.join("server"));
    let (server, lines) = spawn(cmd, "provisioners");
    let (api, internal) = (
        url_after(&lines, "REST API"),
        url_after(&lines, "provisioners"),
    );
    let provisioner = provisioner(&internal, first, &dir.join(first));
    ok(
        "POST",
        &format!("{api}/v2/tenants"),
        &SA,
        json!({"tenant": {"name": "acme", "workers": 1}}),
    );
    let m = marks.display();
    let script = format!("#!/bin/sh\nif [ ! -e {m}/started ]; then echo $$ > {m}/started; sleep 600; fi\necho installed\n");
    let cluster = one_node_cluster(&api, &ADMIN, &script);
    let started = marks.join("started");
    let scene = Scene {
        _server: server,
        api,
        internal,
        cluster,
        started,
    };
    (scene, provisioner)
}

impl Scene {
    /// Waits until the first run of the install script is inside its sleep.
    fn wait_until_started(&self) {
        let end = Instant::now() + Duration::from_secs(60);
        while !self.started.exists() {
            assert!(Instant::now() < end, "the install never started");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls the cluster's status until it is no longer pending, for at most `within`; returns
    /// the status and how long it took.
    fn wait_settled(&self, within: Duration) -> (Value, Duration) {
        let t0 = Instant::now();
        loop {
            let s = ok(
                "GET",
                &format!("{}/v2/clusters/{}/status", self.api, self.cluster),
                &ADMIN,
                Value::Null,
            );
            if s["status"] != "pending" || t0.elapsed() > within {
                return (s, t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The cluster's INSTALL attempts, oldest first, after ending the orphaned script of the
    /// killed provisioner (it is not ours to leave behind).
    fn installs(&self) -> (Value, Vec<Value>) {
        if let Ok(pid) = std::fs::read_to_string(&self.started) {
            // Each script runs in a process group of its own: end the group, its sleep included.
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", pid.trim())])
                .status();
        }
        let details = ok(
            "GET",
            &format!("{}/v2/clusters/{}", self.api, self.cluster),
            &ADMIN,
            Value::Null,
        );
        let installs = details["nodes"][0]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["action"] == "INSTALL")
            .cloned()
            .collect();
        (details, installs)
    }

    fn provisioner_ids(&self) -> Vec<String> {
        let provisioners = ok(
            "GET",
            &format!("{}/v2/provisioners", self.api),
            &SA,
            Value::Null,
        );
        provisioners
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["id"].as_str().map(str::to_string))
            .collect()
    }
}

fn kill(mut p: Proc) {
    p.0.kill().unwrap();
    p.0.wait().unwrap();
}

#[test]
fn a_task_of_a_killed_provisioner_is_finished_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let (scene, first) = scene(dir.path(), "3", "2", "p-first");
    scene.wait_until_started();
    kill(first);
    let _second = provisioner(&scene.internal, "p-second", &dir.path().join("p2"));

    let (status, _) = scene.wait_settled(Duration::from_secs(90));
    let (details, installs) = scene.installs();
    assert_eq!(status["status"], "active", "{}", details["message"]);
    assert_eq!(
        installs.first().map(|a| &a["status"]),
        Some(&json!("failed")),
        "the lost attempt failed: {installs:?}"
    );
    assert_eq!(
        installs.last().map(|a| &a["status"]),
        Some(&json!("complete")),
        "and a retry finished it: {installs:?}"
    );
    assert_eq!(
        scene.provisioner_ids(),
        ["p-second"],
        "the silent provisioner was dropped"
    );
}

/// Issue 14: a provisioner restarted with the same id (as `weft up`'s is) gets its workers back,
/// and the lease its killed run held is failed over when it registers again, not when the lease
/// times out (30 minutes here) nor when the janitor finds it silent (an hour here).
#[test]
fn a_provisioner_restarted_with_its_id_gets_its_workers_back_and_its_lease_retried_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (scene, first) = scene(dir.path(), "1800", "3600", "p1");
    scene.wait_until_started();
    kill(first);
    let _again = provisioner(&scene.internal, "p1", &dir.path().join("p1"));

    let (status, took) = scene.wait_settled(Duration::from_secs(60));
    let (details, installs) = scene.installs();
    assert_eq!(status["status"], "active", "{}", details["message"]);
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let states: Vec<&Value> = installs.iter().map(|a| &a["status"]).collect();
    assert_eq!(
        states,
        [&json!("failed"), &json!("complete")],
        "the killed run's attempt failed over, the new run finished it: {installs:?}"
    );
    assert_eq!(scene.provisioner_ids(), ["p1"]);
}
