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
        let (_, body) = http(
            "GET",
            &format!("{}/v2/clustertemplates", up.api),
            &ADMIN,
            "",
        );
        let templates: serde_json::Value = serde_json::from_str(&body).unwrap();
        let names: Vec<&str> = templates
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(names.contains(&"kv-web"), "{names:?}");
        for t in names {
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

/// `weft ... --api-key K` with no `--tenant` or `--user`: the key says who calls, so the CLI sends
/// no identity headers of its own (it used to send `default`/`admin`, which the server refused
/// with a 401 for any key but the default tenant's admin). Real processes, real key file.
#[test]
fn the_cli_with_only_an_api_key_calls_as_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let out = weft()
        .args(["admin", "apikey", "create", "--tenant", "superadmin"])
        .args(["--user", "admin", "--admin", "--data-dir", data])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = created["key"].as_str().unwrap().to_string();
    let mut cmd = weft();
    cmd.args([
        "server",
        "--auth",
        "apikey",
        "--port",
        "0",
        "--internal-port",
        "0",
    ])
    .args(["--data-dir", data]);
    let srv = start(cmd);
    // No profile to fall back on: a config path that does not exist.
    let cfg = dir.path().join("no-cli-config.toml");
    let cli = |key: &str, args: &[&str]| {
        let out = weft()
            .env("WEFT_CLI_CONFIG", &cfg)
            .args(args)
            .args(["--server", &srv.api, "--api-key", key, "-o", "json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string() + &err,
        )
    };
    let (ok, text) = cli(&root, &["tenant", "create", "acme"]);
    assert!(ok, "the superadmin's key alone creates a tenant: {text}");
    let (ok, text) = cli(&root, &["apikey", "create", "--for-tenant", "acme"]);
    assert!(!ok, "--for-user is required: {text}");
    let (ok, text) = cli(
        &root,
        &[
            "apikey",
            "create",
            "--for-tenant",
            "acme",
            "--for-user",
            "alice",
        ],
    );
    assert!(ok, "{text}");
    let alice: serde_json::Value = serde_json::from_str(text.lines().next().unwrap_or(""))
        .or_else(|_| serde_json::from_str(&text))
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    let alice = alice["key"].as_str().unwrap().to_string();
    let (ok, text) = cli(&alice, &["cluster", "list"]);
    assert!(ok, "a tenant user's key alone lists its clusters: {text}");
    assert_eq!(text.trim(), "[]", "{text}");
    // A tenant or user given beside the key must still be the key's.
    let out = weft()
        .env("WEFT_CLI_CONFIG", &cfg)
        .args(["cluster", "list"])
        .args([
            "--server",
            &srv.api,
            "--api-key",
            &alice,
            "--tenant",
            "other",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a tenant the key is not for is refused"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{out:?}"
    );
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

/// Issue 14: with `--auth apikey` the server makes a provisioner token file; a provisioner
/// without it cannot register, one with it can, and the provisioner's own API refuses calls
/// that do not present it.
#[test]
fn provisioners_need_the_token_when_keys_are_on() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let mut cmd = weft();
    cmd.args([
        "server",
        "--auth",
        "apikey",
        "--port",
        "0",
        "--internal-port",
        "0",
    ])
    .arg("--data-dir")
    .arg(&data);
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.contains("provisioner token file");
        banner.push(line);
        if done {
            break;
        }
    }
    let _server = crate::support::Running {
        child,
        api: String::new(),
    };
    let internal = banner
        .iter()
        .find_map(|l| l.trim().strip_prefix("provisioners"))
        .map(|r| r.trim().to_string())
        .unwrap_or_else(|| panic!("no internal URL in {banner:?}"));
    let token_file = data.join("provisioner.token");
    assert!(
        banner
            .iter()
            .any(|l| l.contains(&*token_file.to_string_lossy())),
        "{banner:?}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "only its owner may read the token file");
    }

    let provisioner = |token: Option<&std::path::Path>| {
        let mut cmd = weft();
        cmd.args(["provisioner", "--server", &internal, "--id", "p1"])
            .args(["--bind", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("p1"));
        if let Some(t) = token {
            cmd.arg("--token-file").arg(t);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let refused = provisioner(None).wait_with_output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("401"), "{stderr}");

    let mut accepted = provisioner(Some(&token_file));
    let first = BufReader::new(accepted.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let _accepted = crate::support::Running {
        child: accepted,
        api: String::new(),
    };
    assert!(first.starts_with("weft provisioner p1"), "{first}");
    let api = first
        .split("API ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap()
        .to_string();
    let (code, _) = http(
        "PUT",
        &format!("{api}/v2/tenants/t1"),
        &[],
        r#"{"workers":1}"#,
    );
    assert_eq!(code, 401, "the provisioner's API wants the token too");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let (code, body) = http(
        "PUT",
        &format!("{api}/v2/tenants/t1"),
        &[("Authorization", &bearer)],
        r#"{"workers":0}"#,
    );
    assert!(code < 300, "{code} {body}");
}
