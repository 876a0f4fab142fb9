//! Two tenants on one provisioner (issue 14, docs/security.md): with `--tenant-users`, tenant B's
//! shell action tries to read tenant A's synced resources and A's node directory from the
//! provisioner's data directory, and fails; each node's directory belongs to its tenant's own
//! user. Real `weft server` and `weft provisioner` processes; needs root (the provisioner runs
//! tenants' commands as users of their own).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::lost_provisioner::{ok, one_node_cluster, spawn, url_after, SA};
use crate::support::weft;

fn who(tenant: &str) -> [(&str, &str); 2] {
    [("Coopr-TenantID", tenant), ("Coopr-UserID", "admin")]
}

/// A one-node cluster of `tenant` whose install action is `script`; waits until it settles and
/// answers the node (with its action history).
fn cluster(api: &str, tenant: &str, script: &str) -> Value {
    let a = who(tenant);
    let id = one_node_cluster(api, &a, script);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let s = ok(
            "GET",
            &format!("{api}/v2/clusters/{id}/status"),
            &a,
            Value::Null,
        );
        if s["status"] != "pending" {
            assert_eq!(s["status"], "active", "{tenant}: {s}");
            break;
        }
        assert!(Instant::now() < end, "{tenant}'s cluster never settled");
        std::thread::sleep(Duration::from_millis(100));
    }
    ok("GET", &format!("{api}/v2/clusters/{id}"), &a, Value::Null)["nodes"][0].clone()
}

fn install_stdout(node: &Value) -> String {
    node["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "INSTALL")
        .map(|a| {
            format!(
                "{}{}",
                a["stdout"].as_str().unwrap_or(""),
                a["stderr"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn a_tenant_cannot_read_another_tenants_resources_or_nodes_on_a_shared_provisioner() {
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root && !weft_testkit::skip_or_fail("root", "tenant users need a provisioner run as root") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Tenant users must be able to pass through to their node directories.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut cmd = weft();
    cmd.args([
        "server",
        "--port",
        "0",
        "--internal-port",
        "0",
        "--data-dir",
    ])
    .arg(dir.path().join("server"));
    let (_server, lines) = spawn(cmd, "provisioners");
    let (api, internal) = (
        url_after(&lines, "REST API"),
        url_after(&lines, "provisioners"),
    );
    let data = dir.path().join("p");
    let mut cmd = weft();
    cmd.args([
        "provisioner",
        "--server",
        &internal,
        "--id",
        "shared",
        "--capacity",
        "2",
    ])
    .args(["--bind", "127.0.0.1:0", "--tenant-users", "--data-dir"])
    .arg(&data)
    .env("WEFT_TENANT_UIDS", dir.path().join("uids"));
    let (_provisioner, _) = spawn(cmd, "weft provisioner");
    for t in ["alpha", "beta"] {
        ok(
            "POST",
            &format!("{api}/v2/tenants"),
            &SA,
            json!({"tenant": {"name": t, "workers": 1}}),
        );
    }
    // A synced resource of tenant alpha (resources/<tenant id>/<plugin kind>/<plugin>/<type>/...)
    // and a secret in alpha's node directory.
    let resources = data.join("resources");
    let secret_resource = resources.join("alpha-tenant-id/automatortypes/shell/scripts/alpha.sh");
    std::fs::create_dir_all(secret_resource.parent().unwrap()).unwrap();
    std::fs::write(&secret_resource, "echo ALPHA-RESOURCE-SECRET\n").unwrap();
    let alpha = cluster(
        &api,
        "alpha",
        "#!/bin/sh\necho ALPHA-NODE-SECRET > secret.txt\nid -u\n",
    );
    let alpha_dir = data.join("local/nodes").join(alpha["id"].as_str().unwrap());
    assert!(alpha_dir.join("secret.txt").exists());

    // Tenant beta's install action tries to read both, and to list the resources.
    let attack = format!(
        "#!/bin/sh\ncat {} 2>&1\ncat {} 2>&1\nls {}/* 2>&1\nid -u\nexit 0\n",
        secret_resource.display(),
        alpha_dir.join("secret.txt").display(),
        resources.display()
    );
    let beta = cluster(&api, "beta", &attack);
    let out = install_stdout(&beta);
    assert!(!out.contains("SECRET"), "beta read alpha's secrets: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    let beta_dir = data.join("local/nodes").join(beta["id"].as_str().unwrap());
    let (ua, ub) = (
        std::fs::metadata(&alpha_dir).unwrap().uid(),
        std::fs::metadata(&beta_dir).unwrap().uid(),
    );
    assert!(ua != 0 && ub != 0 && ua != ub, "alpha {ua}, beta {ub}");
    assert!(
        out.contains(&ub.to_string()),
        "beta's commands ran as beta's user: {out}"
    );
}
