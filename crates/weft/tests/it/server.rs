//! `weft up`, `weft server` and `weft admin apikey create` as a user runs them.

use crate::support::{http, start, weft};

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "default"), ("Coopr-UserID", "admin")];

#[test]
fn up_answers_status_and_lists_the_example_templates() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = weft();
    cmd.current_dir(dir.path())
        .args(["up", "--port", "0", "--internal-port", "0"]);
    let up = start(cmd);
    assert_eq!(
        http("GET", &format!("{}/status", up.api), &[], ""),
        (200, "OK\n".to_string())
    );
    let (code, body) = http(
        "GET",
        &format!("{}/v2/clustertemplates", up.api),
        &ADMIN,
        "",
    );
    assert_eq!(code, 200, "{body}");
    let templates: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = templates
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"kv-web"), "{names:?}");
    assert!(names.contains(&"kv-web-docker"), "{names:?}");
    assert!(
        dir.path().join(".weft/weft.db").exists(),
        "data goes to ./.weft by default"
    );
}

#[test]
fn up_keeps_data_across_restarts_and_loads_the_catalog_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = || {
        let mut cmd = weft();
        cmd.args(["up", "--port", "0", "--internal-port", "0", "--data-dir"])
            .arg(&data);
        start(cmd)
    };
    {
        let up = run();
        for t in ["kv-web", "kv-web-docker", "kv-web-aws"] {
            let (code, _) = http(
                "DELETE",
                &format!("{}/v2/clustertemplates/{t}", up.api),
                &ADMIN,
                "",
            );
            assert_eq!(code, 200, "{t}");
        }
    }
    let up = run();
    let (_, body) = http(
        "GET",
        &format!("{}/v2/clustertemplates", up.api),
        &ADMIN,
        "",
    );
    assert_eq!(
        body, "[]",
        "a restart must not load the example catalog again"
    );
    let (_, services) = http("GET", &format!("{}/v2/services", up.api), &ADMIN, "");
    assert!(services.contains("kv-primary"));
}

fn fails_naming(args: &[&str], envs: &[(&str, &str)], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = weft()
        .current_dir(dir.path())
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(needle),
        "stderr of {args:?} should name {needle}: {stderr}"
    );
}

#[test]
fn bad_configuration_exits_non_zero_naming_the_key() {
    fails_naming(&["server", "--auth", "magic"], &[], "`auth`");
    fails_naming(&["server", "--bind", "nowhere"], &[], "`bind`");
    fails_naming(&["server", "--database", "mysql://x"], &[], "`database`");
    fails_naming(&["server"], &[("WEFT_PORT", "abc")], "--port");
    fails_naming(&["server"], &[("WEFT_AUTH", "sometimes")], "`auth`");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weft.toml");
    std::fs::write(&cfg, "port = 1\ncolour = \"blue\"\n").unwrap();
    fails_naming(
        &["server", "--config", cfg.to_str().unwrap()],
        &[],
        "colour",
    );
    std::fs::write(&cfg, "internal_port = \"high\"\n").unwrap();
    fails_naming(
        &["server", "--config", cfg.to_str().unwrap()],
        &[],
        "internal_port",
    );
}

#[test]
fn server_with_apikey_auth_accepts_only_valid_keys() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let out = weft()
        .args([
            "admin",
            "apikey",
            "create",
            "--tenant",
            "superadmin",
            "--user",
            "admin",
            "--admin",
            "--data-dir",
            data,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = created["key"].as_str().unwrap().to_string();

    let cfg = dir.path().join("weft.toml");
    std::fs::write(
        &cfg,
        format!("data_dir = \"{data}\"\nauth = \"apikey\"\nport = 0\ninternal_port = 0\n"),
    )
    .unwrap();
    let mut cmd = weft();
    cmd.args(["server", "--config", cfg.to_str().unwrap()]);
    let srv = start(cmd);
    let url = format!("{}/v2/tenants", srv.api);
    assert_eq!(
        http(
            "GET",
            &url,
            &[("Coopr-TenantID", "superadmin"), ("Coopr-UserID", "admin")],
            ""
        )
        .0,
        401
    );
    assert_eq!(
        http("GET", &url, &[("Coopr-ApiKey", "weft_wrong")], "").0,
        401
    );
    let (code, body) = http("GET", &url, &[("Coopr-ApiKey", &key)], "");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("superadmin"));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                "{} holds the key in clear",
                path.display()
            );
        }
    }
}

/// Polls `path` until `done` says yes, at most `secs` seconds; returns the last body.
fn wait_for(
    api: &str,
    path: &str,
    secs: u64,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let (_, body) = http("GET", &format!("{api}{path}"), &ADMIN, "");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if done(&v) || std::time::Instant::now() > end {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn up_runs_the_example_cluster_with_its_default_relative_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = weft();
    cmd.current_dir(dir.path())
        .args(["up", "--port", "0", "--internal-port", "0"]);
    let up = start(cmd);
    let body = r#"{"name":"demo","clusterTemplate":"kv-web","numMachines":3}"#;
    let (code, created) = http("POST", &format!("{}/v2/clusters", up.api), &ADMIN, body);
    assert_eq!(code, 200, "{created}");
    let id = serde_json::from_str::<serde_json::Value>(&created).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = wait_for(&up.api, &format!("/v2/clusters/{id}/status"), 120, |s| {
        s["status"] != "pending"
    });
    let details = wait_for(&up.api, &format!("/v2/clusters/{id}"), 1, |_| true);
    assert_eq!(status["status"], "active", "{}", details["message"]);
    let lb = details["links"][0]["url"].as_str().unwrap().to_string();
    let (code, page) = http("GET", &lb, &[], "");
    assert_eq!(code, 200);
    assert!(page.contains("hello from weft"), "{page}");

    http(
        "DELETE",
        &format!("{}/v2/clusters/{id}", up.api),
        &ADMIN,
        "",
    );
    let status = wait_for(&up.api, &format!("/v2/clusters/{id}/status"), 60, |s| {
        s["status"] != "pending"
    });
    assert_eq!(status["status"], "terminated");
    let nodes = dir.path().join(".weft/provisioner/local/nodes");
    let left = std::fs::read_dir(&nodes).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "delete leaves no node directory behind");
}
