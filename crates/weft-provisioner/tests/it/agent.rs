//! The agent against a real server: registration, plugin types, the server's worker placement
//! reaching the agent's API, re-registration, failing tasks, and a graceful shutdown.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{until, Server};

const T: &str = "acme";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_takes_assignments_and_serves_its_api() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_test_writer()
        .try_init();
    let (s, tenant_id) = Server::start(T).await;
    let agent = s.agent("p-a").await;
    let (code, p) = s
        .ext(Method::GET, "superadmin", "/v2/provisioners/p-a", None)
        .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["host"], "127.0.0.1");
    assert_eq!(p["port"], agent.addr().port());
    assert_eq!(p["capacityTotal"], 8);
    let (code, shell) = s
        .ext(
            Method::GET,
            "superadmin",
            "/v2/plugins/automatortypes/shell",
            None,
        )
        .await;
    assert_eq!(code, 200, "{shell}");
    assert_eq!(
        shell["parameters"]["admin"]["fields"]["script"]["type"],
        "text"
    );
    let (code, _) = s
        .ext(
            Method::GET,
            "superadmin",
            "/v2/plugins/providertypes/local",
            None,
        )
        .await;
    assert_eq!(code, 200);

    // The server places the tenant's 4 workers on this provisioner and tells it (PUT /v2/tenants).
    until(
        Duration::from_secs(20),
        "the server's assignment",
        || async { (agent.usage().get(&tenant_id) == Some(&4)).then_some(()) },
    )
    .await;

    let api = format!("http://{}", agent.addr());
    let http = &s.http;
    assert_eq!(
        http.get(format!("{api}/status"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "OK\n"
    );
    let put = |path: &str, body: String| http.put(format!("{api}{path}")).body(body).send();
    assert_eq!(
        put("/v2/tenants/t2", "nope".into())
            .await
            .unwrap()
            .status()
            .as_u16(),
        400
    );
    assert_eq!(
        put("/v2/tenants/t2", r#"{"workers":-1}"#.into())
            .await
            .unwrap()
            .status()
            .as_u16(),
        400
    );
    let over = put("/v2/tenants/t2", r#"{"workers":5}"#.into())
        .await
        .unwrap();
    assert_eq!(
        over.status().as_u16(),
        409,
        "4 + 5 workers exceed a capacity of 8"
    );
    assert_eq!(
        put("/v2/tenants/t2", r#"{'workers':'2','resources':{}}"#.into())
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let hb: Value = http
        .get(format!("{api}/heartbeat"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(hb["usage"]["t2"], 2);
    assert_eq!(hb["usage"][&tenant_id], 4);
    let del = http
        .delete(format!("{api}/v2/tenants/t2"))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 200);
    assert!(!agent.usage().contains_key("t2"));

    // A server that forgot the provisioner sees it again at the next heartbeat.
    let r = http
        .delete(format!("{}/v2/provisioners/p-a", s.internal))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    assert_eq!(code, 200, "{}", r.text().await.unwrap_or_default());
    until(Duration::from_secs(20), "re-registration", || async {
        let (code, _) = s
            .ext(Method::GET, "superadmin", "/v2/provisioners/p-a", None)
            .await;
        (code == 200).then_some(())
    })
    .await;
    // A superadmin deletes a plugin type the live provisioner serves: its heartbeat registers it
    // again (creates would otherwise fail until the provisioner restarts).
    let (code, _) = s
        .ext(
            Method::DELETE,
            "superadmin",
            "/v2/plugins/providertypes/local",
            None,
        )
        .await;
    assert_eq!(code, 200);
    until(
        Duration::from_secs(20),
        "the type registered again",
        || async {
            let (code, _) = s
                .ext(
                    Method::GET,
                    "superadmin",
                    "/v2/plugins/providertypes/local",
                    None,
                )
                .await;
            (code == 200).then_some(())
        },
    )
    .await;
    agent.shutdown().await;
}

/// A provisioner started before its server listens (both started together, the server slower)
/// keeps trying to register, with back-off, and registers once the server is up.
#[tokio::test]
async fn a_provisioner_waits_for_a_server_that_is_not_up_yet() {
    // The port answers nothing useful at first: each connection is closed at once, as a server
    // that is still starting would.
    let early = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = early.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = weft_provisioner::AgentConfig::new(
        &format!("http://127.0.0.1:{port}"),
        dir.path().join("p"),
    );
    cfg.id = "p-early".into();
    cfg.heartbeat_interval = Duration::from_millis(500);
    let plugins = weft_provisioner::Plugins::new().provider(std::sync::Arc::new(
        weft_provisioner::local::LocalProvider::new(dir.path()),
    ));
    let starting = tokio::spawn(weft_provisioner::Agent::start(cfg, plugins));
    // The agent has tried (and failed) twice before the server is there.
    for _ in 0..2 {
        let (conn, _) = tokio::time::timeout(Duration::from_secs(30), early.accept())
            .await
            .expect("the agent tries again")
            .unwrap();
        drop(conn);
    }
    assert!(!starting.is_finished(), "the agent gave up");
    drop(early);
    let extra = weft_server::config::RawConfig {
        internal_port: Some(port),
        ..Default::default()
    };
    let (s, _) = Server::start_with(T, extra).await;
    let agent = tokio::time::timeout(Duration::from_secs(30), starting)
        .await
        .expect("the provisioner registers once the server is up")
        .unwrap()
        .expect("it started");
    let (code, p) = s
        .ext(Method::GET, "superadmin", "/v2/provisioners/p-early", None)
        .await;
    assert_eq!(code, 200, "{p}");
    agent.shutdown().await;
}

async fn add_template(s: &Server, name: &str, script: &str) {
    let svc = json!({"name": name, "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": script}}}}});
    let (code, body) = s.ext(Method::POST, T, "/v2/services", Some(svc)).await;
    assert_eq!(code, 200, "{body}");
    let tpl = json!({"name": format!("{name}-t"), "defaults": {"services": [name], "provider": "local",
        "hardwaretype": "small", "imagetype": "host"}, "constraints": {"size": {"min": 1, "max": 5}}});
    let (code, body) = s
        .ext(Method::POST, T, "/v2/clustertemplates", Some(tpl))
        .await;
    assert_eq!(code, 200, "{body}");
}

async fn create(s: &Server, template: &str) -> String {
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": template, "clusterTemplate": template, "numMachines": 1})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    c["id"].as_str().unwrap().to_string()
}

fn actions(c: &Value) -> Vec<Value> {
    c["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["actions"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_tasks_are_reported_and_shutdown_finishes_the_running_task() {
    let (s, tenant_id) = Server::start(T).await;
    let agent = s.agent("p-b").await;
    until(Duration::from_secs(20), "workers", || async {
        (agent.usage().get(&tenant_id) == Some(&4)).then_some(())
    })
    .await;

    add_template(&s, "broken", "#!/bin/bash\necho boom\nexit 7\n").await;
    let id = create(&s, "broken-t").await;
    let c = until(Duration::from_secs(60), "the create to fail", || async {
        let (_, c) = s
            .ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
            .await;
        (c["status"] != "pending").then_some(c)
    })
    .await;
    assert_eq!(c["status"], "incomplete", "{c}");
    let failed: Vec<Value> = actions(&c)
        .into_iter()
        .filter(|a| a["action"] == "INSTALL" && a["status"] == "failed")
        .collect();
    assert!(!failed.is_empty(), "{c}");
    let out = format!("{}{}", failed[0]["stdout"], failed[0]["stderr"]);
    assert!(
        out.contains("boom") && out.contains("exited with 7"),
        "{out}"
    );
    assert_eq!(
        agent.usage().get(&tenant_id),
        Some(&4),
        "no worker died of a bad task"
    );

    // Shutdown while a task runs: the task is finished and reported before the agent leaves.
    add_template(&s, "slow", "#!/bin/bash\nsleep 2\necho slept\n").await;
    let id = create(&s, "slow-t").await;
    until(
        Duration::from_secs(60),
        "the slow install to start",
        || async {
            let (_, c) = s
                .ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
                .await;
            actions(&c)
                .iter()
                .any(|a| a["action"] == "INSTALL" && a["status"] == "in_progress")
                .then_some(())
        },
    )
    .await;
    agent.shutdown().await;
    let (_, c) = s
        .ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await;
    let install: Vec<Value> = actions(&c)
        .into_iter()
        .filter(|a| a["action"] == "INSTALL")
        .collect();
    assert_eq!(install.len(), 1, "{c}");
    assert_eq!(install[0]["status"], "complete", "{c}");
    assert!(install[0]["stdout"]
        .as_str()
        .unwrap_or_default()
        .contains("slept"));
    let (code, _) = s
        .ext(Method::GET, "superadmin", "/v2/provisioners/p-b", None)
        .await;
    assert_eq!(code, 404, "the provisioner unregistered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_script_resources_reach_the_shell_automator() {
    let (s, tenant_id) = Server::start(T).await;
    let agent = s.agent("p-c").await;
    until(Duration::from_secs(20), "workers", || async {
        (agent.usage().get(&tenant_id) == Some(&4)).then_some(())
    })
    .await;
    let base = format!(
        "{}/v2/plugins/automatortypes/shell/scripts/hello.sh",
        s.external
    );
    let send = |url: String, body: &'static str| {
        s.http
            .post(url)
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", T)
            .body(body)
            .send()
    };
    let script = "#!/bin/bash\necho \"hello from a resource on $WEFT_HOSTNAME\"\n";
    let r = send(base.clone(), script).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let r = send(format!("{base}/versions/1/stage"), "").await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let r = send(format!("{}/v2/plugins/sync", s.external), "")
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());

    // The server pushes the live resources; the agent downloads and activates them.
    let live = s.provisioner_data().join(format!(
        "resources/{tenant_id}/automatortypes/shell/scripts/hello.sh"
    ));
    until(
        Duration::from_secs(20),
        "the resource to be live",
        || async { (std::fs::read_to_string(&live).ok()? == script).then_some(()) },
    )
    .await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&live).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o755,
        "the shell plugin's scripts resource type is 0755"
    );

    add_template(&s, "greeter", "hello.sh").await;
    let id = create(&s, "greeter-t").await;
    let c = until(Duration::from_secs(60), "the cluster", || async {
        let (_, c) = s
            .ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
            .await;
        (c["status"] != "pending").then_some(c)
    })
    .await;
    assert_eq!(c["status"], "active", "{c}");
    let install: Vec<Value> = actions(&c)
        .into_iter()
        .filter(|a| a["action"] == "INSTALL")
        .collect();
    assert!(
        install[0]["stdout"]
            .as_str()
            .unwrap()
            .contains("hello from a resource on "),
        "{c}"
    );
    agent.shutdown().await;
}
