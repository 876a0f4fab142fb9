//! `weft up` then SIGTERM then `weft down` (issue 15): clusters on the local and Docker providers
//! keep running after `weft up` stops (and it says so, with no "could not unregister" warning);
//! `weft down` deletes them and leaves no node process, node directory, container or network.
//! On the way, `weft cluster ssh` runs commands on a local node and (over ssh) a Docker node.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::crash::free_ports;
use crate::support::{http, weft};

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "default"), ("Coopr-UserID", "admin")];

/// A `weft up` child whose stdout and stderr lines arrive on channels.
pub(crate) struct Up {
    pub(crate) child: Child,
    pub(crate) api: String,
    pub(crate) out: mpsc::Receiver<String>,
    pub(crate) err: mpsc::Receiver<String>,
    /// What it printed up to and including its banner's last line.
    pub(crate) banner: Vec<String>,
}

/// A test that fails does not leave its `weft up` running.
impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// After a failed test, `weft down` removes what its clusters left (dropped after the `weft up`,
/// so declare it first).
pub(crate) struct Cleanup(pub(crate) std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if std::thread::panicking() && self.0.exists() {
            let _ = weft()
                .args(["down", "--timeout", "2m", "--data-dir"])
                .arg(&self.0)
                .output();
        }
    }
}

fn lines(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    rx
}

/// `weft up -v` on `data` (its log on stderr as well), once its banner is printed.
pub(crate) fn up(data: &Path) -> Up {
    up_with(data, &["-v"])
}

/// `weft up` on `data` with `extra` arguments, once its banner is printed.
pub(crate) fn up_with(data: &Path, extra: &[&str]) -> Up {
    let (port, internal) = free_ports();
    let mut child = weft()
        .args(["up", "--port", &port.to_string()])
        .args(["--internal-port", &internal.to_string()])
        .args(extra)
        .arg("--data-dir")
        .arg(data)
        .env("WEFT_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weft up");
    let out = lines(child.stdout.take().unwrap());
    let err = lines(child.stderr.take().unwrap());
    let mut banner = Vec::new();
    loop {
        let l = out
            .recv_timeout(Duration::from_secs(60))
            .expect("weft up banner");
        banner.push(l);
        if banner.last().is_some_and(|l| l.contains("stop: Ctrl-C")) {
            break;
        }
    }
    let api = format!("http://127.0.0.1:{port}");
    Up {
        child,
        api,
        out,
        err,
        banner,
    }
}

pub(crate) fn create(api: &str, template: &str, size: u32) -> String {
    let body =
        format!(r#"{{"name":"{template}","clusterTemplate":"{template}","numMachines":{size}}}"#);
    let (code, text) = http("POST", &format!("{api}/v2/clusters"), &ADMIN, &body);
    assert_eq!(code, 200, "{template}: {text}");
    serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Polls until the cluster is not pending (at most 3 minutes); returns its details.
pub(crate) fn settle(api: &str, id: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let (code, text) = http("GET", &format!("{api}/v2/clusters/{id}"), &ADMIN, "");
        assert_eq!(code, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        if v["status"] != "pending" || t0.elapsed() > Duration::from_secs(180) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Containers or networks of one cluster. Cluster ids start at 1 on every test's server, so the
/// tenant's id (a UUID) tells this test's apart from those of tests running beside it.
fn docker_ids(kind: &str, tenant: &str, cluster: &str) -> String {
    let all = if kind == "container" { "-aq" } else { "-q" };
    docker(&[
        kind,
        "ls",
        all,
        "--filter",
        &format!("label=weft.tenant={tenant}"),
        "--filter",
        &format!("label=weft.cluster={cluster}"),
    ])
}

/// The tenant label of a node's container (the default tenant's id in `weft up`).
fn tenant_of_node(node: &str) -> String {
    let filter = format!("label=weft.node={node}");
    let format = "{{.Label \"weft.tenant\"}}";
    docker(&[
        "container",
        "ls",
        "-a",
        "--filter",
        &filter,
        "--format",
        format,
    ])
}

fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn weft_down_removes_what_weft_up_left_running() {
    let docker = weft_testkit::require("docker");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _cleanup = Cleanup(data.clone());
    let mut u = up(&data);
    let local = create(&u.api, "kv-web", 3);
    let boxed = docker.then(|| create(&u.api, "kv-web-docker", 3));
    let details = settle(&u.api, &local);
    assert_eq!(details["status"], "active", "{}", details["message"]);
    let nodes: Vec<String> = details["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str().map(str::to_string))
        .collect();
    assert!(!crate::crash_up::node_processes(&nodes).is_empty());
    let mut tenant = String::new();
    if let Some(id) = &boxed {
        let d = settle(&u.api, id);
        assert_eq!(d["status"], "active", "{}", d["message"]);
        tenant = tenant_of_node(d["nodes"][0]["id"].as_str().unwrap());
        assert!(
            !tenant.is_empty(),
            "the node's container has a tenant label"
        );
        assert_eq!(docker_ids("container", &tenant, id).lines().count(), 3);
        // Real ssh with the cluster's key and the recorded host key.
        let node = &d["nodes"][0];
        let host = node["properties"]["hostname"].as_str().unwrap();
        let num = node["properties"]["nodenum"].to_string();
        // No --data-dir: the CLI finds the key seed in the data dir this `weft up` noted.
        let ssh = |cmd: &str| {
            weft()
                .args(["cluster", "ssh", "--server", &u.api])
                .args([id.as_str(), &num, "--", cmd])
                .output()
                .unwrap()
        };
        let out = ssh("hostname");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            host == said || host.starts_with(&format!("{said}.")),
            "{said} vs {host}"
        );
        assert_eq!(ssh("false").status.code(), Some(1));
    }

    // `weft cluster ssh` on the local provider: the node's hostname, directory and exit codes.
    let node = &details["nodes"][0];
    let (host, dir) = (
        node["properties"]["hostname"].as_str().unwrap(),
        node["provisionerResults"]["nodedir"].as_str().unwrap(),
    );
    let num = node["properties"]["nodenum"].to_string();
    let ssh = |cmd: &[&str]| {
        weft()
            .args(["cluster", "ssh", "--server", &u.api, &local, &num, "--"])
            .args(cmd)
            .output()
            .unwrap()
    };
    let out = ssh(&["hostname"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), host);
    let out = ssh(&["pwd"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), dir);
    assert_eq!(ssh(&["false"]).status.code(), Some(1));
    assert_eq!(ssh(&["sh", "-c", "exit 7"]).status.code(), Some(7));

    // SIGTERM: weft up stops, says what keeps running and how to remove it.
    let pid = u.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = u.child.wait().unwrap();
    assert!(status.success(), "weft up exit {status}");
    // The process has exited; its last lines may still be on their way through the reader
    // thread (and nodes it left running may hold the pipe open): read up to the last one.
    let mut said = Vec::new();
    while let Ok(l) = u.out.recv_timeout(std::time::Duration::from_secs(10)) {
        let last = l.contains("weft down --data-dir");
        said.push(l);
        if last {
            break;
        }
    }
    let said = said.join("\n");
    assert!(said.contains(&local), "names the local cluster: {said}");
    assert!(said.contains("weft down --data-dir"), "{said}");
    let warned: Vec<String> = u.err.try_iter().collect();
    assert!(
        !warned.iter().any(|l| l.contains("could not unregister")),
        "{warned:?}"
    );
    // Logs to a pipe carry no colour codes.
    assert!(
        warned.iter().any(|l| l.contains("provisioner stopped")),
        "{warned:?}"
    );
    assert!(!warned.iter().any(|l| l.contains('\u{1b}')), "{warned:?}");
    // The clusters outlive weft up.
    assert!(!crate::crash_up::node_processes(&nodes).is_empty());

    // weft up again on the same data dir takes them over: the nodes keep their processes and a
    // job on the cluster runs (a restart of its services), then it stops again.
    let mut again = up(&data);
    let restart = weft()
        .args([
            "cluster", "restart", "--server", &again.api, &local, "--wait",
        ])
        .output()
        .unwrap();
    assert!(restart.status.success(), "{restart:?}");
    let d = settle(&again.api, &local);
    assert_eq!(d["status"], "active", "{}", d["message"]);
    assert!(!crate::crash_up::node_processes(&nodes).is_empty());
    let pid = again.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(again.child.wait().unwrap().success());

    let down = weft()
        .args(["down", "--timeout", "3m", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&down.stdout);
    assert!(
        down.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(text.contains("nothing left"), "{text}");

    assert_eq!(crate::crash_up::node_processes(&nodes), Vec::<u32>::new());
    assert_eq!(
        crate::crash_up::node_dirs(&data),
        0,
        "node directories left"
    );
    if let Some(id) = &boxed {
        assert_eq!(docker_ids("container", &tenant, id), "", "containers left");
        assert_eq!(docker_ids("network", &tenant, id), "", "networks left");
    }

    // With weft up running, weft down goes through it (here: nothing left to do).
    let mut third = up(&data);
    let again = weft()
        .args(["down", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(again.status.success(), "{again:?}");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("through the running weft up"), "{said}");
    assert!(said.contains("0 clusters deleted"), "{said}");
    let _ = third.child.kill();
    let _ = third.child.wait();
}

#[test]
fn weft_up_names_a_port_in_use_and_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = weft()
        .args([
            "up",
            "--port",
            &port.to_string(),
            "--internal-port",
            "0",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("port {port}")), "{err}");
    assert!(err.contains("--port"), "{err}");
    assert!(
        !data.exists(),
        "weft up made {} before it had its ports",
        data.display()
    );
}

#[test]
fn weft_up_prints_a_banner_and_job_lines_and_logs_the_rest_to_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _cleanup = Cleanup(data.clone());
    let u = up_with(&data, &[]);
    let cli = |args: &[&str]| {
        let out = weft()
            .args(args)
            .args(["--server", &u.api])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (made, id) = create_kv_web(&cli);
    service_log_is_read_on_the_node(&cli, &made, &id);
    cli(&["cluster", "expand", &id, "--count", "1", "--wait"]);
    cli(&["cluster", "delete", &id, "--wait"]);
    // Three jobs, each started and done: the last line printed is the delete's end.
    let mut printed = Vec::new();
    while !printed
        .iter()
        .any(|l: &String| l.contains("CLUSTER_DELETE  done"))
    {
        let line = u
            .out
            .recv_timeout(Duration::from_secs(30))
            .expect("a job line");
        printed.push(line);
    }
    let said: Vec<String> = u.err.try_iter().collect();
    assert!(said.is_empty(), "nothing on stderr: {said:?}");
    for action in ["CLUSTER_CREATE", "CLUSTER_EXPAND", "CLUSTER_DELETE"] {
        for end in ["started", "done"] {
            let line = format!("{action}  {end}");
            assert!(
                printed.iter().any(|l| l.contains(&line)),
                "{line}: {printed:?}"
            );
        }
    }
    let all = u.banner.len() + printed.len();
    assert!(all < 30, "{all} lines: {:?} {printed:?}", u.banner);
    let log = std::fs::read_to_string(data.join("weft.log")).unwrap();
    assert!(log.lines().count() > 50, "the log has the rest: {log}");
    assert!(log.contains(&id), "the log names the cluster");
}

/// `weft cluster create --template kv-web --size 3 --wait` through `cli`: the cluster and its id.
pub(crate) fn create_kv_web(cli: &dyn Fn(&[&str]) -> String) -> (Value, String) {
    let args = ["cluster", "create", "--template", "kv-web", "--size", "3"];
    let made = cli(&[&args[..], &["--wait", "-o", "json"]].concat());
    let made: Value = serde_json::from_str(&made).expect(&made);
    let id = made["id"].as_str().expect("a cluster id").to_string();
    (made, id)
}

/// `cluster logs --service-log` reads the file the service's `logs` field names, on the node,
/// through the node's transport (here: the local node's directory).
fn service_log_is_read_on_the_node(cli: &dyn Fn(&[&str]) -> String, cluster: &Value, id: &str) {
    let nodes = cluster["nodes"].as_array().expect("nodes");
    let web = nodes
        .iter()
        .find(|n| {
            n["services"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == "web")
        })
        .expect("a web node");
    let dir = web["provisionerResults"]["nodedir"]
        .as_str()
        .expect("a node dir");
    let marker = format!("a line for the test {}", std::process::id());
    let log = Path::new(dir).join("web/web.log");
    let mut text = std::fs::read_to_string(&log).unwrap_or_default();
    text.push_str(&format!("{marker}\n"));
    std::fs::write(&log, text).unwrap();
    let node = web["id"].as_str().unwrap();
    let args = [
        "cluster",
        "logs",
        id,
        "--service",
        "web",
        "--node",
        node,
        "--service-log",
    ];
    let shown = cli(&[&args[..], &["--tail", "1"]].concat());
    assert_eq!(shown.trim_end(), marker);
}
