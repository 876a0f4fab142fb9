//! The client commands (`weft login`, `weft cluster ...`, the catalog and admin commands) run as a
//! user runs them: the `weft` binary against a real server (in-process, on 127.0.0.1:0), with a
//! temporary config file. A scripted worker takes and finishes tasks over the internal port, so jobs
//! really run and end.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use weft_client::api::{ApiClient, Identity};
use weft_client::{Client, Finish, PluginKind, Registration};
use weft_model::{
    ApiKeyCreated, ApiKeyInfo, CatalogExport, ClusterDetails, ClusterStatus, ClusterStatusView,
    ClusterSummary, ClusterTemplate, PlanView, PluginType, Provider, Provisioner, ResourceMeta,
    Service, TenantSpecification,
};
use weft_server::config::RawConfig;

use crate::support::weft;

const TENANT: &str = "default";

/// A weft server in this process (SQLite in a temp dir, calls out to provisioners off) and the
/// `weft` binary pointed at it with a temporary config file. Shared by the CLI test modules.
pub(crate) struct Cli {
    pub api: String,
    pub internal: String,
    pub store: Arc<dyn weft_store::Store>,
    pub dir: tempfile::TempDir,
    pub rt: tokio::runtime::Runtime,
    /// Added to every command line.
    args: Vec<String>,
    /// Texts no command may print (secrets).
    secrets: Vec<String>,
}

impl Cli {
    pub(crate) fn start() -> Cli {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let data = dir.path().join("data");
        let (api, internal, store) = rt.block_on(async {
            let settings = RawConfig {
                data_dir: Some(data),
                port: Some(0),
                internal_port: Some(0),
                bind: Some("127.0.0.1".into()),
                auth: Some("none".into()),
                ..Default::default()
            }
            .resolve()
            .unwrap();
            let app = weft_server::build(settings).await.unwrap();
            // The provisioners the tests register do not listen: no calls out to them.
            app.state.outbound.set_enabled(false);
            let store = app.state.store.clone();
            let bound = weft_server::bind(app).await.unwrap();
            let api = format!("http://{}", bound.external_addr().unwrap());
            let internal = format!("http://{}", bound.internal_addr().unwrap());
            tokio::spawn(bound.run());
            (api, internal, store)
        });
        Cli {
            api,
            internal,
            store,
            dir,
            rt,
            args: Vec::new(),
            secrets: Vec::new(),
        }
    }

    /// Adds `args` to every command line.
    pub(crate) fn with_args(mut self, args: &[&str]) -> Cli {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Fails any command that prints `secret`.
    pub(crate) fn never_printing(mut self, secret: &str) -> Cli {
        self.secrets.push(secret.to_string());
        self
    }

    /// Runs `weft` with this test's config file; returns its output.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    pub(crate) fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = weft();
        c.env("WEFT_CLI_CONFIG", self.config())
            .env("HOME", self.dir.path())
            .env("NO_COLOR", "1")
            .args(args)
            .args(&self.args)
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        for secret in &self.secrets {
            for stream in [&out.stdout, &out.stderr] {
                let text = String::from_utf8_lossy(stream);
                assert!(
                    !text.contains(secret.as_str()),
                    "a secret was printed: {text}"
                );
            }
        }
        out
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.dir.path().join("weft-cli.toml")
    }

    /// Runs and asserts exit 0; returns stdout.
    #[track_caller]
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "weft {args:?} exited {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs with `-o json` and parses stdout as `T`.
    #[track_caller]
    pub(crate) fn json<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.ok(&all);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("weft {args:?} -o json is not the API type ({e}): {out}"))
    }

    /// Runs, expecting exit `code`; returns stderr.
    #[track_caller]
    pub(crate) fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "weft {args:?}\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Writes `text` to a file of the test's directory.
    pub(crate) fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// A [`Cli`] with tenant `default`, plugin types `local` and `shell`, and a scripted worker.
struct Server {
    cli: Cli,
    /// When set, the worker fails every task it takes.
    fail: Arc<AtomicBool>,
}

impl std::ops::Deref for Server {
    type Target = Cli;
    fn deref(&self) -> &Cli {
        &self.cli
    }
}

impl Server {
    fn start() -> Server {
        let s = Server::idle();
        let tenant_id = s.rt.block_on(s.tenant_id());
        s.rt.spawn(worker(s.internal.clone(), tenant_id, s.fail.clone()));
        s
    }

    /// The server and catalog with no worker taking tasks: jobs stay underway.
    fn idle() -> Server {
        let s = Server {
            cli: Cli::start(),
            fail: Arc::new(AtomicBool::new(false)),
        };
        s.rt.block_on(s.setup());
        s
    }

    async fn tenant_id(&self) -> String {
        self.store
            .tenant_by_name(TENANT)
            .await
            .unwrap()
            .expect("tenant default")
            .id
    }

    async fn setup(&self) -> String {
        let internal = &self.internal;
        let sa = ApiClient::new(
            &self.api,
            Identity {
                tenant: "superadmin".into(),
                user: "admin".into(),
                api_key: None,
            },
        )
        .unwrap();
        let spec = TenantSpecification {
            name: TENANT.into(),
            description: None,
            workers: 1,
            max_clusters: weft_model::UNBOUNDED,
            max_nodes: weft_model::UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        };
        let c = Client::new(internal).unwrap();
        c.register(&Registration {
            scheme: "http",
            id: "p1".into(),
            host: "127.0.0.1".into(),
            port: 9,
            capacity_total: 10,
        })
        .await
        .unwrap();
        let local: PluginType = serde_json::from_value(json!({"name": "local"})).unwrap();
        c.register_plugin_type(PluginKind::Provider, &local)
            .await
            .unwrap();
        let shell: PluginType = serde_json::from_value(json!({"name": "shell",
            "parameters": {"admin": {"fields": {"script": {"label": "script", "type": "text"}}}},
            "resourceTypes": {"scripts": {"format": "file"}}}))
        .unwrap();
        c.register_plugin_type(PluginKind::Automator, &shell)
            .await
            .unwrap();
        sa.create_tenant(&spec, false).await.unwrap();
        self.store
            .tenant_by_name(TENANT)
            .await
            .unwrap()
            .expect("tenant default")
            .id
    }

    fn login(&self) {
        self.ok(&[
            "login", "--server", &self.api, "--tenant", TENANT, "--user", "admin",
        ]);
    }

    /// A small catalog, made with the CLI: services `a`, `b` (requires a), `c`, template `t`.
    fn catalog(&self) {
        let dir = self.dir.path();
        let action = |what: &str, name: &str| json!({"type": "shell", "fields": {"script": format!("{what}-{name}.sh")}});
        let service = |name: &str, requires: &[&str]| {
            json!({"name": name, "dependencies": {"runtime": {"requires": requires}},
                "provisioner": {"actions": {"install": action("install", name), "configure": action("configure", name),
                "start": action("start", name), "stop": action("stop", name)}}})
        };
        let files = [
            (
                "provider",
                json!({"name": "local", "description": "this machine", "providertype": "local"}),
            ),
            (
                "hardwaretype",
                json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
            ),
            (
                "imagetype",
                json!({"name": "host", "providermap": {"local": {"image": "img", "sshuser": "weft"}}}),
            ),
            (
                "service",
                json!([service("a", &[]), service("b", &["a"]), service("c", &[])]),
            ),
            (
                "template",
                json!({"name": "t", "description": "a and b",
                "defaults": {"services": ["a", "b"], "provider": "local", "config": {"port": 7000}},
                "compatibility": {"services": ["a", "b", "c"]},
                "constraints": {"size": {"min": 1, "max": 10}, "services": {"a": {"quantities": {"min": 1, "max": 1}}}}}),
            ),
        ];
        for (kind, body) in files {
            let f = dir.join(format!("{kind}.json"));
            std::fs::write(&f, body.to_string()).unwrap();
            self.ok(&[kind, "create", "-f", f.to_str().unwrap()]);
        }
    }
}

/// Takes tasks of the tenant and finishes them (successfully unless `fail` is set).
async fn worker(internal: String, tenant_id: String, fail: Arc<AtomicBool>) {
    let c = Client::new(&internal).unwrap();
    loop {
        let task = match c.take("p1", "w1", &tenant_id).await {
            Ok(Some(t)) => t,
            _ => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let failing = fail.load(Ordering::SeqCst);
        let mut f = Finish {
            worker_id: "w1".into(),
            provisioner_id: "p1".into(),
            tenant_id: tenant_id.clone(),
            task_id: task["taskId"].as_str().unwrap_or_default().into(),
            status: if failing { 1 } else { 0 },
            stdout: Some(format!("ran {}", task["taskName"].as_str().unwrap_or(""))),
            stderr: failing.then(|| "disk full".to_string()),
            ..Default::default()
        };
        if task["taskName"] == "CONFIRM" && !failing {
            let n = task["config"]["nodenum"].as_u64().unwrap_or(1000) % 250;
            let ip = format!("10.1.0.{n}");
            f.ipaddresses = Some(
                [
                    ("access_v4".to_string(), ip.clone()),
                    ("bind_v4".into(), ip),
                ]
                .into_iter()
                .collect(),
            );
        }
        let _ = c.finish(&f).await;
    }
}

#[test]
fn a_new_user_follows_the_readme() {
    let s = Server::start();
    s.login();
    s.catalog();
    // login wrote the profile; every later command reads it.
    let cfg = std::fs::read_to_string(s.config()).unwrap();
    assert!(
        cfg.contains(&s.api) && cfg.contains("tenant = \"default\""),
        "{cfg}"
    );

    let templates = s.ok(&["template", "list"]);
    assert!(
        templates.contains("t") && templates.contains("a and b"),
        "{templates}"
    );

    let out = s.ok(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "2",
        "--name",
        "demo",
        "--wait",
    ]);
    assert!(
        out.contains("CLUSTER_CREATE"),
        "the plan is shown first: {out}"
    );
    assert!(out.contains("created cluster 00000001"), "{out}");

    let show = s.ok(&["cluster", "show", "00000001"]);
    for needle in ["demo", "active", "10.1.0.", "weft", "a, b"] {
        assert!(show.contains(needle), "show names {needle}: {show}");
    }
    let d: ClusterDetails = s.json(&["cluster", "show", "00000001"]);
    assert_eq!((d.status, d.nodes.len()), (ClusterStatus::Active, 2));

    let d: ClusterDetails = s.json(&["cluster", "expand", "00000001", "--count", "1", "--wait"]);
    assert_eq!((d.status, d.nodes.len()), (ClusterStatus::Active, 3));

    let d: ClusterDetails = s.json(&["cluster", "delete", "00000001", "--wait"]);
    assert_eq!(d.status, ClusterStatus::Terminated);
    // Live clusters by default; --all shows the terminated one too.
    let live: Vec<ClusterSummary> = s.json(&["cluster", "list"]);
    assert!(live.is_empty(), "{live:?}");
    let all: Vec<ClusterSummary> = s.json(&["cluster", "list", "--all"]);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].status, ClusterStatus::Terminated);
}

#[test]
fn cluster_commands_change_a_running_cluster() {
    let s = Server::start();
    s.login();
    s.catalog();
    let plan: PlanView = s.json(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "3",
        "--dry-run",
    ]);
    assert_eq!(plan.action, "CLUSTER_CREATE");
    assert!(
        s.json::<Vec<ClusterSummary>>(&["cluster", "list"])
            .is_empty(),
        "a dry run creates nothing"
    );

    let d: ClusterDetails = s.json(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "3",
        "--name",
        "c1",
        "--config",
        "kv.mode=fast",
        "--wait",
    ]);
    let id = d.id.clone();
    assert_eq!(d.config["port"], 7000, "the template's config is kept");
    assert_eq!(d.config["kv"]["mode"], "fast");

    let list: Vec<ClusterSummary> = s.json(&["cluster", "list"]);
    assert_eq!(list.len(), 1);
    assert!(s.ok(&["cluster", "list"]).contains("c1"));
    let st: ClusterStatusView = s.json(&["cluster", "status", &id]);
    assert_eq!(st.status, ClusterStatus::Active);

    let d: ClusterDetails = s.json(&["cluster", "shrink", &id, "--count", "1", "--wait"]);
    assert_eq!(d.nodes.len(), 2);

    let plan: PlanView = s.json(&["cluster", "add-service", &id, "c", "--dry-run"]);
    assert!(!plan.stages.is_empty());
    let d: ClusterDetails = s.json(&["cluster", "add-service", &id, "c", "--wait"]);
    assert!(d.services.contains(&"c".to_string()), "{:?}", d.services);
    let d: ClusterDetails = s.json(&["cluster", "remove-service", &id, "c", "--wait"]);
    assert!(!d.services.contains(&"c".to_string()), "{:?}", d.services);

    let d: ClusterDetails = s.json(&[
        "cluster",
        "reconfigure",
        &id,
        "--config",
        "port=8000",
        "--no-restart",
        "--wait",
    ]);
    assert_eq!(d.config["port"], 8000);
    assert_eq!(
        d.config["kv"]["mode"], "fast",
        "reconfigure changes only the keys given"
    );

    for action in ["stop", "start", "restart"] {
        let d: ClusterDetails = s.json(&["cluster", action, &id, "--wait"]);
        assert_eq!(d.status, ClusterStatus::Active, "{action}");
    }
    let d: ClusterDetails = s.json(&["cluster", "restart", &id, "b", "--wait"]);
    assert_eq!(d.status, ClusterStatus::Active);
    let d: ClusterDetails = s.json(&[
        "cluster",
        "upgrade",
        &id,
        "a",
        "--batch-size",
        "1",
        "--wait",
    ]);
    assert_eq!(d.status, ClusterStatus::Active);

    let before = d.expire_time;
    let out: Value = s.json(&["cluster", "extend-lease", &id, "--until", "+48h"]);
    let d: ClusterDetails = s.json(&["cluster", "show", &id]);
    assert_eq!(Some(d.expire_time), out["expireTime"].as_i64());
    assert!(d.expire_time > before);

    let plan: PlanView = s.json(&["cluster", "plan", &id]);
    assert_eq!(Some(&plan.id), d.latest_job_id.as_ref());
    let first: PlanView = s.json(&["cluster", "plan", &id, &format!("{id}-001")]);
    assert_eq!(
        first.action, "SOLVE_LAYOUT",
        "a create solves its layout first"
    );
    assert!(first.stages.is_empty());
    let create: PlanView = s.json(&["cluster", "plan", &id, &format!("{id}-002")]);
    assert_eq!(create.action, "CLUSTER_CREATE");
    assert!(s.ok(&["cluster", "plan", &id]).contains("longest chain"));

    let logs = s.ok(&["cluster", "logs", &id]);
    assert!(
        logs.contains("ran INSTALL") && logs.contains("INSTALL a"),
        "{logs}"
    );
    let ssh = s.ok(&["cluster", "ssh", "--print", &id, "1000"]);
    assert!(ssh.starts_with("ssh weft@10.1.0."), "{ssh}");
    let node = &d.nodes[0].id;
    assert!(s
        .ok(&["cluster", "ssh", "--print", &id, node])
        .starts_with("ssh weft@"));
    s.fails(&["cluster", "ssh", "--print", &id, "nope"], 1);

    // The tenant's events: the backlog as NDJSON, numbered 1, 2, 3, ...; one cluster's, as lines
    // for people; a bad kind refused by name.
    let lines: Vec<serde_json::Value> = s
        .ok(&["events", "--since", "0", "-o", "json"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let ids: Vec<u64> = lines.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert!(lines
        .iter()
        .any(|e| e["kind"] == "task" && e["clusterId"] == id.as_str()));
    let mine = s.ok(&["events", "--cluster", &id, "--kind", "cluster"]);
    assert!(mine.contains("pending -> active"), "{mine}");
    let err = s.fails(&["events", "--kind", "bogus"], 2);
    assert!(err.contains("kind"), "{err}");
}

#[test]
fn pause_resume_and_abort_control_a_job_from_the_cli() {
    let s = Server::idle();
    s.login();
    s.catalog();
    s.ok(&["cluster", "create", "--template", "t", "--size", "2"]);
    let id = "00000001";
    let status = |s: &Server| -> Value { s.json(&["cluster", "status", id]) };
    assert!(s.ok(&["cluster", "pause", id]).contains("paused"));
    assert_eq!(status(&s)["actionstatus"], "paused");
    assert!(s.ok(&["cluster", "resume", id]).contains("resumed"));
    assert_eq!(status(&s)["actionstatus"], "running");
    let out: Value = s.json(&["cluster", "abort", id]);
    assert_eq!(out["job"], "aborted");
    assert_eq!(status(&s)["actionstatus"], "failed");
    // Aborting again changes nothing.
    s.ok(&["cluster", "abort", id]);
    assert_eq!(status(&s)["actionstatus"], "failed");
}

/// `cluster delete` while a create is underway (issue 13): the create is aborted and the delete
/// runs; `--wait` follows it to `terminated` instead of stopping at the aborted create.
#[test]
fn delete_from_the_cli_while_a_create_is_underway() {
    let s = Server::idle();
    s.login();
    s.catalog();
    s.ok(&["cluster", "create", "--template", "t", "--size", "2"]);
    let id = "00000001";
    assert!(s.ok(&["cluster", "delete", id]).contains("deleting"));
    // No worker took a task of the create: no machine can exist, so the delete ends it at once.
    let st: Value = s.json(&["cluster", "status", id]);
    assert_eq!(st["status"], "terminated", "{st}");
    let d: ClusterDetails = s.json(&["cluster", "delete", id, "--wait"]);
    assert_eq!(d.status, ClusterStatus::Terminated);
    assert_eq!(
        d.message.as_deref(),
        Some("Deleted before any of its tasks ran: no machine was made.")
    );
}

#[test]
fn a_failed_job_exits_4_and_shows_the_task_output() {
    let s = Server::start();
    s.login();
    s.catalog();
    s.fail.store(true, Ordering::SeqCst);
    let err = s.fails(
        &[
            "cluster",
            "create",
            "--template",
            "t",
            "--size",
            "1",
            "--wait",
        ],
        4,
    );
    assert!(err.contains("failed"), "{err}");
    let logs = s.ok(&["cluster", "logs", "00000001", "--failed"]);
    assert!(logs.contains("disk full"), "{logs}");
}

#[test]
fn errors_exit_with_the_documented_codes_and_the_server_message() {
    let s = Server::start();
    s.login();
    let err = s.fails(&["cluster", "show", "00000042"], 2);
    assert!(err.contains("404"), "{err}");
    let err = s.fails(&["template", "show", "nothing"], 2);
    assert!(
        err.contains("cluster template nothing  not found."),
        "the server's message, as it is: {err}"
    );
    s.fails(&["cluster", "bogus"], 1);
    let err = s.fails(&["cluster", "list", "--server", "http://127.0.0.1:9"], 3);
    // Said once, with what to try.
    assert_eq!(err.matches("127.0.0.1:9").count(), 1, "{err}");
    for hint in [
        "cannot reach the weft server",
        "weft up",
        "--server",
        "weft login",
    ] {
        assert!(err.contains(hint), "{hint}: {err}");
    }
    s.fails(&["cluster", "list", "--profile", "nosuch"], 1);
    // A plain user may not write the catalog: 403.
    let f = s.dir.path().join("p.json");
    std::fs::write(&f, r#"{"name":"x","providertype":"local"}"#).unwrap();
    s.fails(
        &[
            "provider",
            "create",
            "-f",
            f.to_str().unwrap(),
            "--user",
            "bob",
        ],
        2,
    );
    std::fs::write(&f, "{not json").unwrap();
    s.fails(&["provider", "create", "-f", f.to_str().unwrap()], 1);
    let help = s.ok(&["--help"]);
    assert!(help.contains("Exit codes"), "{help}");
}

#[test]
fn cluster_logs_filter_by_node_service_and_job_keep_the_last_and_follow_a_job() {
    let s = Server::start();
    s.login();
    s.catalog();
    let d: ClusterDetails = s.json(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "2",
        "--wait",
    ]);
    let id = d.id.clone();
    let all: Vec<Value> = s.json(&["cluster", "logs", &id]);
    assert!(all.len() > 6, "{all:?}");
    let task = |v: &Value| v["taskId"].as_str().unwrap().to_string();

    let only_a: Vec<Value> = s.json(&["cluster", "logs", &id, "--service", "a"]);
    assert!(!only_a.is_empty() && only_a.len() < all.len());
    assert!(only_a.iter().all(|v| v["service"] == "a"), "{only_a:?}");

    let node = &d.nodes[1];
    let num = node.properties.nodenum.to_string();
    let on_node: Vec<Value> = s.json(&["cluster", "logs", &id, "--node", &num]);
    assert!(!on_node.is_empty() && on_node.len() < all.len());
    assert!(on_node.iter().all(|v| v["nodeId"] == node.id.as_str()));

    let last_two: Vec<Value> = s.json(&["cluster", "logs", &id, "--tail", "2"]);
    assert_eq!(
        last_two.iter().map(task).collect::<Vec<_>>(),
        all[all.len() - 2..].iter().map(task).collect::<Vec<_>>()
    );

    // Nothing failed: said on stderr, nothing on stdout.
    let out = s.run(&["cluster", "logs", &id, "--failed"]);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no task of cluster"));

    // An expand, followed: every task of its job, then the command ends with the job.
    s.ok(&["cluster", "expand", &id, "--count", "1"]);
    let job = s
        .json::<ClusterDetails>(&["cluster", "show", &id])
        .latest_job_id
        .unwrap();
    let followed = s.ok(&["cluster", "logs", &id, "--follow", "--job", &job]);
    let d: ClusterDetails = s.json(&["cluster", "show", &id]);
    assert_eq!(d.nodes.len(), 3, "the expand ended");
    let of_job: Vec<Value> = s.json(&["cluster", "logs", &id, "--job", &job]);
    assert!(!of_job.is_empty());
    assert!(of_job
        .iter()
        .all(|v| task(v).starts_with(&format!("{job}-"))));
    for v in &of_job {
        assert!(
            followed.contains(&task(v)),
            "{} not followed: {followed}",
            task(v)
        );
    }
    assert_eq!(followed.matches("== ").count(), of_job.len(), "{followed}");
}

#[test]
fn a_reader_that_goes_away_ends_a_command_quietly() {
    let s = Server::start();
    s.login();
    for args in [
        &["template", "list"][..],
        &["template", "list", "-o", "json"],
        &["completions", "bash"],
    ] {
        let mut c = weft();
        c.env("WEFT_CLI_CONFIG", s.config())
            .env("RUST_BACKTRACE", "1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        // The reader is gone before the command writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0) | Some(141)),
            "{args:?}: {:?} {err}",
            out.status
        );
        assert!(
            !err.contains("panicked") && err.is_empty(),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn profiles_flags_and_variables_pick_the_server_and_identity() {
    let s = Server::start();
    s.login();
    s.catalog();
    // A second profile for another user; WEFT_PROFILE or --profile chooses it.
    s.ok(&[
        "login",
        "--profile",
        "bob",
        "--server",
        &s.api,
        "--tenant",
        TENANT,
        "--user",
        "bob",
    ]);
    s.ok(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "1",
        "--profile",
        "bob",
        "--wait",
    ]);
    let mine: Vec<ClusterSummary> = s.json(&["cluster", "list", "--profile", "bob"]);
    assert_eq!(mine[0].owner_id, "bob");
    let out = s.run_env(
        &["cluster", "list", "-o", "json"],
        &[("WEFT_PROFILE", "bob"), ("WEFT_USER", "carol")],
    );
    let carol: Vec<ClusterSummary> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        carol.is_empty(),
        "WEFT_USER beats the profile: carol owns nothing"
    );
    let out = s.run_env(
        &["cluster", "list", "-o", "json", "--user", "bob"],
        &[("WEFT_USER", "carol")],
    );
    let bob: Vec<ClusterSummary> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(bob.len(), 1, "a flag beats its variable");
    // The server from the environment, no profile at all.
    std::fs::remove_file(s.config()).unwrap();
    let out = s.run_env(&["template", "list", "-o", "json"], &[("WEFT_URL", &s.api)]);
    let t: Vec<ClusterTemplate> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t[0].name, "t");
    for shell in ["bash", "zsh", "fish"] {
        assert!(s.ok(&["completions", shell]).contains("cluster"), "{shell}");
    }
}

#[test]
fn catalog_commands_show_edit_export_and_import() {
    let s = Server::start();
    s.login();
    s.catalog();
    let providers: Vec<Provider> = s.json(&["provider", "list"]);
    assert_eq!(providers[0].name, "local");
    let p: Provider = s.json(&["provider", "show", "local"]);
    assert_eq!(p.description.as_deref(), Some("this machine"));
    let services: Vec<Service> = s.json(&["service", "list"]);
    assert_eq!(services.len(), 3);
    let t: ClusterTemplate = s.json(&["template", "show", "t"]);
    assert_eq!(t.defaults.services, vec!["a", "b"]);
    assert!(s.ok(&["hardwaretype", "list"]).contains("small"));
    assert!(s.ok(&["imagetype", "show", "host"]).contains("sshuser"));

    // edit: the editor changes the JSON; the change is written back as a new version.
    let out = s.run_env(
        &["provider", "edit", "local"],
        &[("EDITOR", "sed -i s/this.machine/here/")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: Provider = s.json(&["provider", "show", "local"]);
    assert_eq!(p.description.as_deref(), Some("here"));
    let out = s.run_env(&["provider", "edit", "local"], &[("EDITOR", "true")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no change"));

    // export, change the file, import: the diff, the refusal without a terminal, then --yes.
    let export = s.ok(&["catalog", "export"]);
    let mut cat: CatalogExport = serde_json::from_str(&export).unwrap();
    assert_eq!(cat.services.len(), 3);
    cat.services.retain(|s| s.name != "c");
    cat.providers[0].description = Some("changed".into());
    let f = s.dir.path().join("catalog.json");
    std::fs::write(&f, serde_json::to_string(&cat).unwrap()).unwrap();
    let f = f.to_str().unwrap();
    let err = s.fails(&["catalog", "import", f], 1);
    assert!(err.contains("--yes"), "{err}");
    let out = s.ok(&["catalog", "import", f, "--yes"]);
    assert!(
        out.contains("services") && out.contains("c") && out.contains("imported"),
        "{out}"
    );
    let services: Vec<Service> = s.json(&["service", "list"]);
    assert_eq!(services.len(), 2);
    assert!(s
        .ok(&["catalog", "import", f])
        .contains("nothing to import"));

    s.ok(&["service", "delete", "b"]);
    assert_eq!(s.json::<Vec<Service>>(&["service", "list"]).len(), 1);
}

#[test]
fn catalog_export_includes_secrets_only_sealed_under_a_passphrase() {
    const SECRET: &str = "cli-secret-8d2f61";
    let s = Server::start();
    s.login();
    let vault = json!({"name": "vault", "parameters": {"admin": {"fields": {
        "secret": {"label": "secret", "type": "password", "sensitive": true}}}}});
    let url = format!("{}/v2/plugins/providertypes/vault", s.internal);
    let (code, text) = crate::support::http("PUT", &url, &[], &vault.to_string());
    assert_eq!(code, 200, "{text}");
    let p = json!({"name": "v", "providertype": "vault", "provisioner": {"secret": SECRET}});
    let f = s.dir.path().join("v.json");
    std::fs::write(&f, p.to_string()).unwrap();
    s.ok(&["provider", "create", "-f", f.to_str().unwrap()]);
    let masked = s.ok(&["catalog", "export"]);
    assert!(masked.contains("********"), "{masked}");
    let err = s.fails(&["catalog", "export", "--include-secrets"], 1);
    assert!(err.contains("passphrase"), "{err}");
    let pass = s.dir.path().join("pass");
    std::fs::write(&pass, "a passphrase for this test\n").unwrap();
    let pass = pass.to_str().unwrap();
    let export = [
        "catalog",
        "export",
        "--include-secrets",
        "--passphrase-file",
        pass,
    ];
    let sealed = s.ok(&export);
    assert!(sealed.contains("passphrase:v1:"), "{sealed}");
    let backup = s.dir.path().join("backup.json");
    std::fs::write(&backup, &sealed).unwrap();
    let backup = backup.to_str().unwrap();
    s.ok(&["provider", "delete", "v"]);
    let wrong = s.dir.path().join("wrong");
    std::fs::write(&wrong, "not the passphrase at all").unwrap();
    let wrong = wrong.to_str().unwrap();
    let err = s.fails(
        &[
            "catalog",
            "import",
            backup,
            "--yes",
            "--passphrase-file",
            wrong,
        ],
        2,
    );
    assert!(err.contains("does not open providers[v]"), "{err}");
    s.ok(&[
        "catalog",
        "import",
        backup,
        "--yes",
        "--passphrase-file",
        pass,
    ]);
    // Back in the store, sealed again, and exported again under the passphrase.
    let again = s.ok(&export);
    assert!(again.contains("passphrase:v1:") && !again.contains(SECRET));
}

#[test]
fn admin_commands_manage_tenants_provisioners_resources_and_keys() {
    let s = Server::start();
    let sa = ["--tenant", "superadmin", "--user", "admin"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(sa.iter())
            .map(|a| a.to_string())
            .collect()
    };
    let run = |args: &[&str]| s.ok(&with(args).iter().map(String::as_str).collect::<Vec<_>>());
    let json = |args: &[&str]| -> Value {
        let mut a = with(args);
        a.extend(["-o".into(), "json".into()]);
        serde_json::from_str(&s.ok(&a.iter().map(String::as_str).collect::<Vec<_>>())).unwrap()
    };
    s.ok(&["login", "--server", &s.api]);

    run(&[
        "tenant",
        "create",
        "acme",
        "--workers",
        "2",
        "--max-clusters",
        "5",
    ]);
    let t: TenantSpecification = serde_json::from_value(json(&["tenant", "show", "acme"])).unwrap();
    assert_eq!((t.workers, t.max_clusters), (2, 5));
    run(&["tenant", "update", "acme", "--max-nodes", "20"]);
    let t: TenantSpecification = serde_json::from_value(json(&["tenant", "show", "acme"])).unwrap();
    assert_eq!((t.workers, t.max_clusters, t.max_nodes), (2, 5, 20));
    let all: Vec<TenantSpecification> = serde_json::from_value(json(&["tenant", "list"])).unwrap();
    assert!(all.iter().any(|t| t.name == "acme"));
    assert!(run(&["tenant", "list"]).contains("acme"));
    run(&["tenant", "update", "acme", "--workers", "0"]);
    run(&["tenant", "delete", "acme"]);
    s.fails(&["tenant", "show", "acme", "--tenant", "superadmin"], 2);
    s.fails(&["tenant", "list"], 2); // tenant default's admin is not the superadmin

    let ps: Vec<Provisioner> = serde_json::from_value(json(&["provisioners", "list"])).unwrap();
    assert_eq!(ps[0].id, "p1");
    let p: Provisioner = serde_json::from_value(json(&["provisioners", "show", "p1"])).unwrap();
    assert_eq!(p.capacity_total, 10);

    let k: ApiKeyCreated = serde_json::from_value(json(&[
        "apikey",
        "create",
        "--for-tenant",
        "default",
        "--for-user",
        "admin",
        "--admin",
    ]))
    .unwrap();
    let keys: Vec<ApiKeyInfo> = serde_json::from_value(json(&["apikey", "list"])).unwrap();
    assert!(keys.iter().any(|i| i.id == k.id));
    run(&["apikey", "delete", &k.id]);
    let keys: Vec<ApiKeyInfo> = serde_json::from_value(json(&["apikey", "list"])).unwrap();
    assert!(keys.iter().all(|i| i.id != k.id));

    // Plugin resources, as tenant default's admin.
    let f = s.dir.path().join("setup.sh");
    std::fs::write(&f, "echo hi\n").unwrap();
    let at = ["automator", "shell", "scripts"];
    let up = |args: &[&str]| s.ok(args);
    let meta: ResourceMeta = serde_json::from_str(&up(&[
        "resource",
        "upload",
        at[0],
        at[1],
        at[2],
        "setup",
        "-f",
        f.to_str().unwrap(),
        "--tenant",
        TENANT,
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(meta.version, 1);
    up(&[
        "resource", "stage", at[0], at[1], at[2], "setup", "1", "--tenant", TENANT,
    ]);
    up(&["resource", "sync", "--tenant", TENANT]);
    let list: std::collections::BTreeMap<String, Vec<ResourceMeta>> = serde_json::from_str(&up(&[
        "resource", "list", at[0], at[1], at[2], "--tenant", TENANT, "-o", "json",
    ]))
    .unwrap();
    assert_eq!(format!("{:?}", list["setup"][0].status), "Active");
    up(&[
        "resource", "recall", at[0], at[1], at[2], "setup", "1", "--tenant", TENANT,
    ]);
    up(&["resource", "sync", "--tenant", TENANT]);
    up(&[
        "resource", "delete", at[0], at[1], at[2], "setup", "--tenant", TENANT,
    ]);
    assert!(!up(&["resource", "list", at[0], at[1], at[2], "--tenant", TENANT]).contains("setup"));
}

#[test]
fn cluster_health_runs_the_checks_and_exits_5_when_one_fails() {
    let s = Server::start();
    s.login();
    s.catalog();
    // Service a checks itself; b declares no check.
    let admin = ApiClient::new(
        &s.api,
        Identity {
            tenant: TENANT.into(),
            user: "admin".into(),
            api_key: None,
        },
    )
    .unwrap();
    let mut a: Value =
        s.rt.block_on(admin.entity(weft_client::api::Kind::Service, "a"))
            .unwrap();
    a["provisioner"]["actions"]["healthcheck"] =
        json!({"type": "shell", "fields": {"script": "check-a.sh"}, "tries": 1});
    s.rt.block_on(admin.put_entity(weft_client::api::Kind::Service, "a", &a))
        .unwrap();
    s.ok(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "2",
        "--wait",
    ]);
    let id = "00000001";

    // The fake worker finishes HEALTHCHECK with status 0: healthy.
    let out = s.ok(&["cluster", "health", id]);
    assert!(out.contains("healthy") && out.contains("none"), "{out}");
    let grid: weft_model::ClusterHealth = s.json(&["cluster", "health", id]);
    assert!(grid.healthy && grid.finished(), "{grid:?}");
    assert_eq!(
        grid.cells(weft_model::HealthState::Healthy).count(),
        1,
        "a runs on one node: {grid:?}"
    );

    // A failing check: exit 5, the grid says which, the cluster stays active.
    s.fail.store(true, Ordering::SeqCst);
    let err = s.fails(&["cluster", "health", id], 5);
    assert!(err.contains("not healthy"), "{err}");
    s.fail.store(false, Ordering::SeqCst);
    let latest = s.run(&["cluster", "health", id, "--latest"]);
    assert_eq!(
        latest.status.code(),
        Some(5),
        "--latest runs nothing and says the same"
    );
    let text = String::from_utf8_lossy(&latest.stdout);
    assert!(
        text.contains("unhealthy") && text.contains("disk full"),
        "{text}"
    );
    let status: Value = s.json(&["cluster", "status", id]);
    assert_eq!(status["status"], "active", "{status}");
}

#[test]
fn restart_upgrade_and_reconfigure_take_rollout_flags() {
    let s = Server::start();
    s.login();
    s.catalog();
    s.ok(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "3",
        "--wait",
    ]);
    let id = "00000001";
    // A bad value is the server's 400, naming the field (exit 2).
    let err = s.fails(&["cluster", "restart", id, "--max-in-flight", "0"], 2);
    assert!(err.contains("rollout.maxInFlight"), "{err}");
    let err = s.fails(&["cluster", "upgrade", id, "a", "--on-failure", "maybe"], 2);
    assert!(err.contains("rollout.onFailure"), "{err}");
    // The dry run shows the policy; the rolling restart runs to the end.
    let plan: Value = s.json(&[
        "cluster",
        "restart",
        id,
        "--canaries",
        "0",
        "--max-in-flight",
        "50%",
        "--dry-run",
    ]);
    assert_eq!(
        plan["rollout"]["policy"],
        json!({"canaries": 0, "maxInFlight": "50%", "onFailure": "pause"}),
        "{plan}"
    );
    s.ok(&["cluster", "restart", id, "--max-in-flight", "1", "--wait"]);
    s.ok(&[
        "cluster",
        "reconfigure",
        id,
        "--config",
        "x=1",
        "--max-in-flight",
        "2",
        "--wait",
    ]);
    let status: Value = s.json(&["cluster", "status", id]);
    assert_eq!(status["status"], "active", "{status}");
}

#[test]
fn cluster_check_exits_5_on_drift_and_replace_node_rebuilds_a_node() {
    let s = Server::start();
    s.login();
    s.catalog();
    let admin = ApiClient::new(
        &s.api,
        Identity {
            tenant: TENANT.into(),
            user: "admin".into(),
            api_key: None,
        },
    )
    .unwrap();
    let mut a: Value =
        s.rt.block_on(admin.entity(weft_client::api::Kind::Service, "a"))
            .unwrap();
    a["provisioner"]["actions"]["healthcheck"] =
        json!({"type": "shell", "fields": {"script": "check-a.sh"}, "tries": 1});
    s.rt.block_on(admin.put_entity(weft_client::api::Kind::Service, "a", &a))
        .unwrap();
    s.ok(&[
        "cluster",
        "create",
        "--template",
        "t",
        "--size",
        "2",
        "--wait",
    ]);
    let id = "00000001";

    // The fake worker answers STATUS without a report (unknown: no drift) and the check healthy.
    let r: weft_model::DriftReport = s.json(&["cluster", "check", id]);
    assert!(!r.drift && r.finished(), "{r:?}");
    assert_eq!(r.nodes.len(), 2);
    let out = s.ok(&["cluster", "check", id, "--latest"]);
    assert!(out.contains("no drift"), "{out}");

    // A failing check is drift: exit 5, and the cluster stays active.
    s.fail.store(true, Ordering::SeqCst);
    let err = s.fails(&["cluster", "check", id], 5);
    assert!(err.contains("drift found"), "{err}");
    s.fail.store(false, Ordering::SeqCst);
    let status: Value = s.json(&["cluster", "status", id]);
    assert_eq!(status["status"], "active", "{status}");

    // Replace a node: a dry run shows the plan, then the job runs; an unknown node is exit 2.
    let node = r.nodes[0].id.clone();
    let plan = s.ok(&["cluster", "replace-node", id, &node, "--dry-run", "-v"]);
    assert!(plan.contains("DELETE") && plan.contains("CREATE"), "{plan}");
    s.ok(&["cluster", "replace-node", id, &node, "--wait"]);
    let status: Value = s.json(&["cluster", "status", id]);
    assert_eq!(status["status"], "active", "{status}");
    let err = s.fails(&["cluster", "replace-node", id, "nope"], 2);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn template_test_checks_against_the_servers_catalog() {
    let s = Server::idle();
    s.login();
    s.catalog();
    let out = s.ok(&["template", "test", "t"]);
    assert!(out.starts_with("template t: PASS\n"), "{out}");
    assert!(
        out.contains("sizes 1..10 (provider local): layouts at 1..10"),
        "{out}"
    );

    // A file's template replaces the server's of the same name, and is tested there.
    let mut t: Value = serde_json::from_str(&s.ok(&["template", "show", "t"])).unwrap();
    t["defaults"]["services"] = json!(["a", "b", "zzz"]);
    let f = s.file("t.json", &t.to_string());
    let out = s.run(&["template", "test", f.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(5));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["templates"][0]["template"], "t");
    assert_eq!(
        v["templates"][0]["problems"],
        json!([{"check": "references", "field": "defaults.services[2]",
                "message": "service zzz does not exist (yet)"}])
    );
    let err = s.fails(&["template", "test", "nope"], 1);
    assert!(err.contains("no template nope in the catalog"), "{err}");
}
