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

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and returns it with the lines of its stdout up to the one containing `until`.
fn spawn(mut cmd: Command, until: &str) -> (Proc, Vec<String>) {
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

fn url_after(lines: &[String], label: &str) -> String {
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

const SA: [(&str, &str); 2] = [("Coopr-TenantID", "superadmin"), ("Coopr-UserID", "admin")];
const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "acme"), ("Coopr-UserID", "admin")];

fn ok(method: &str, url: &str, who: &[(&str, &str)], body: Value) -> Value {
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

#[test]
fn a_task_of_a_killed_provisioner_is_finished_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let mut cmd = weft();
    cmd.args([
        "server",
        "--port",
        "0",
        "--internal-port",
        "0",
        "--task-timeout",
        "3",
        "--janitor-interval",
        "1",
    ])
    .args(["--provisioner-timeout", "2", "--data-dir"])
    .arg(dir.path().join("server"));
    let (_server, lines) = spawn(cmd, "provisioners");
    let (api, internal) = (
        url_after(&lines, "REST API"),
        url_after(&lines, "provisioners"),
    );

    let mut first = provisioner(&internal, "p-first", &dir.path().join("p1"));
    ok(
        "POST",
        &format!("{api}/v2/tenants"),
        &SA,
        json!({"tenant": {"name": "acme", "workers": 1}}),
    );
    // The first run of the install script hangs (and says so); a retry finishes at once.
    let m = marks.display();
    let script = format!("#!/bin/sh\nif [ ! -e {m}/started ]; then echo $$ > {m}/started; sleep 600; fi\necho installed\n");
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
            json!({"name": "slow", "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": script}}}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["slow"], "provider": "local"}}),
        ),
    ];
    for (kind, body) in catalog {
        ok("POST", &format!("{api}/v2/{kind}"), &ADMIN, body);
    }
    let id = ok(
        "POST",
        &format!("{api}/v2/clusters"),
        &ADMIN,
        json!({"name": "c", "clusterTemplate": "t", "numMachines": 1}),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Wait for the first provisioner to be inside the script, then kill it.
    let started = marks.join("started");
    let end = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(Instant::now() < end, "the install never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let _second = provisioner(&internal, "p-second", &dir.path().join("p2"));

    let end = Instant::now() + Duration::from_secs(90);
    let status = loop {
        let s = ok(
            "GET",
            &format!("{api}/v2/clusters/{id}/status"),
            &ADMIN,
            Value::Null,
        );
        if s["status"] != "pending" || Instant::now() > end {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // The orphaned script of the killed provisioner is not ours to leave behind.
    if let Ok(pid) = std::fs::read_to_string(&started) {
        // Each script runs in a process group of its own: end the group, its sleep included.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", pid.trim())])
            .status();
    }
    let details = ok(
        "GET",
        &format!("{api}/v2/clusters/{id}"),
        &ADMIN,
        Value::Null,
    );
    assert_eq!(status["status"], "active", "{}", details["message"]);
    let installs: Vec<&Value> = details["nodes"][0]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "INSTALL")
        .collect();
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
    let provisioners = ok("GET", &format!("{api}/v2/provisioners"), &SA, Value::Null);
    let ids: Vec<&str> = provisioners
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(ids, ["p-second"], "the silent provisioner was dropped");
}
