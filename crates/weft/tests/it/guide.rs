//! docs/guide.md runs as written (issue 15): its ```` ```sh guide ```` blocks, in order, as one bash
//! script against a fresh `weft up`, must build the guide's own service into a running cluster
//! (its nodes answer with the greeting, then with the reconfigured one) and delete it.

use std::path::Path;
use std::process::Command;

use crate::support::http;
use crate::up_down::up;

/// The guide's runnable blocks, joined in order.
fn guide_script() -> String {
    let text = include_str!("../../../../docs/guide.md");
    let mut script = String::from("set -euo pipefail\n");
    let mut inside = false;
    for line in text.lines() {
        match (inside, line.trim_end()) {
            (false, "```sh guide") => inside = true,
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

fn bash(dir: &Path, api: &str, script: &str) -> std::process::Output {
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
        .env("WEFT_URL", api)
        .env("WEFT_LOG", "warn")
        .env("WEFT_CLI_CONFIG", dir.join("cli.toml"))
        .env("COLUMNS", "100")
        .args(["-c", script])
        .output()
        .expect("bash")
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
    let out = bash(dir.path(), &u.api, &script);
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
