//! docs/guide.md runs as written (issue 15): its ```` ```sh guide ```` blocks, in order, as one bash
//! script against a fresh `weft up`, must build the guide's own service into a running cluster
//! (its nodes answer with the greeting, then with the reconfigured one) and delete it. The
//! README's tour (its ```` ```sh tour ```` block) runs as written too, `weft up` included, with the
//! built binary on PATH (issue 44).

use std::path::Path;
use std::process::Command;

use crate::support::http;
use crate::up_down::up;

/// The guide's runnable blocks, joined in order.
fn guide_script() -> String {
    blocks(include_str!("../../../../docs/guide.md"), "```sh guide")
}

/// The blocks of `text` that open with `fence`, joined in order, as one bash script.
fn blocks(text: &str, fence: &str) -> String {
    let mut script = String::from("set -euo pipefail\n");
    let mut inside = false;
    for line in text.lines() {
        match (inside, line.trim_end()) {
            (false, l) if l == fence => inside = true,
            (true, "```") => inside = false,
            (true, l) => {
                script.push_str(l);
                script.push('\n');
            }
            _ => {}
        }
    }
    script
}

/// `script` in bash in `dir`, with the built `weft` first on PATH, the CLI's files in `dir`, no
/// `WEFT_` variable of the caller's, and `env` set.
fn bash(dir: &Path, script: &str, env: &[(&str, String)]) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_weft")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    for (k, _) in std::env::vars() {
        if k.starts_with("WEFT_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(dir)
        .env("PATH", path)
        .env("WEFT_LOG", "warn")
        .env("WEFT_CLI_CONFIG", dir.join("cli.toml"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("COLUMNS", "100");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(["-c", script]).output().expect("bash")
}

#[test]
fn the_guide_builds_a_running_cluster_of_its_own_service() {
    if !weft_testkit::require("curl") {
        return;
    }
    let script = guide_script();
    assert!(script.lines().count() > 50, "the guide's blocks: {script}");
    let dir = tempfile::tempdir().unwrap();
    let _cleanup = crate::up_down::Cleanup(dir.path().join("data"));
    let mut u = up(&dir.path().join("data"));
    let out = bash(dir.path(), &script, &[("WEFT_URL", u.api.clone())]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The service answered on both nodes, then with the new config; the cluster was deleted.
    for want in [
        "hello from hello-1-1000.local",
        "hello from hello-1-1001.local",
        "bonjour from hello-1-1000.local",
        "bonjour from hello-1-1001.local",
        "12 tasks on 2 nodes",
    ] {
        assert!(
            stdout.contains(want),
            "missing {want:?} in:\n{stdout}\n{stderr}"
        );
    }
    let who = [("Coopr-TenantID", "greeters"), ("Coopr-UserID", "admin")];
    let (code, body) = http("GET", &format!("{}/v2/clusters/00000001", u.api), &who, "");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "terminated", "{body}");
    let _ = u.child.kill();
    let _ = u.child.wait();
}

#[test]
fn the_readme_tour_runs_as_written() {
    if !weft_testkit::require("curl") || !weft_testkit::require("python3") {
        return;
    }
    let readme = include_str!("../../../../README.md");
    let script = blocks(readme, "```sh tour");
    assert!(script.contains("weft up"), "the tour's block: {script}");
    // On ports of its own: the tour's commands as written, with its port numbers replaced.
    let (port, internal) = crate::crash::free_ports();
    let script = script.replace("localhost:55054", &format!("localhost:{port}"));
    let dir = tempfile::tempdir().unwrap();
    let _cleanup = crate::up_down::Cleanup(dir.path().join(".weft"));
    let env = [
        ("WEFT_PORT", port.to_string()),
        ("WEFT_INTERNAL_PORT", internal.to_string()),
        ("WEFT_URL", format!("http://127.0.0.1:{port}")),
    ];
    let out = bash(dir.path(), &script, &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for want in [
        r#""name":"kv-web""#,
        r#""taskName":"CREATE""#,
        r#""cost":{"currency":"USD","perHourBefore":"0.00""#,
        r#"{"id":"00000001"}"#,
        "link balancer: http://127.77.",
        r#""greeting": "hello from weft""#,
        "expanding cluster 00000001 by 1",
        "node.json",
        "START lb complete",
        "cluster 00000001 is terminated",
    ] {
        assert!(
            stdout.contains(want) || stderr.contains(want),
            "missing {want:?} in:\n{stdout}\n{stderr}"
        );
    }
    let banner = std::fs::read_to_string(dir.path().join("weft-up.out")).unwrap();
    assert!(banner.contains("weft is up"), "{banner}");
    assert!(banner.contains("CLUSTER_CREATE  done"), "{banner}");
}
