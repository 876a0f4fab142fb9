//! `weft cluster ssh` on a host-pool node (issue 15): a pool host is a `weft-node:bookworm`
//! container running sshd on a port of 127.0.0.1; `weft up` makes a one-node cluster on it, and
//! `weft cluster ssh ID 1000 --identity KEY -- hostname` runs over real ssh (the host key recorded
//! at CONFIRM) with the command's exit code. Needs docker and the image.

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::weft;
use crate::up_down::up;

const IMAGE: &str = "weft-node:bookworm";

/// A container removed when dropped.
struct Host(String);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.0])
            .output();
    }
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls until sshd on `port` sends its banner (at most 30 s).
fn wait_for_sshd(port: u16) {
    let t0 = Instant::now();
    loop {
        let mut banner = [0u8; 4];
        let ok = std::net::TcpStream::connect(("127.0.0.1", port))
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                s.read_exact(&mut banner)
            })
            .is_ok();
        if ok && &banner == b"SSH-" {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "sshd did not answer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

#[test]
fn cluster_ssh_runs_commands_on_a_host_pool_node() {
    if !weft_testkit::require("docker") {
        return;
    }
    let has_image = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_image
        && !weft_testkit::skip_or_fail(IMAGE, "missing (build it with images/build-node-image.sh)")
    {
        return;
    }
    let host = Host(docker(&["run", "-d", "--rm", "-p", "127.0.0.1::22", IMAGE]));
    let addr = docker(&["port", &host.0, "22/tcp"]);
    let port: u16 = addr
        .lines()
        .next()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    docker(&[
        "exec",
        &host.0,
        "sh",
        "-c",
        "set -e; mkdir -p /root/.ssh; ssh-keygen -q -t ed25519 -N '' -f /tmp/k; \
         cat /tmp/k.pub >> /root/.ssh/authorized_keys; chmod 600 /root/.ssh/authorized_keys",
    ]);
    let key = docker(&["exec", &host.0, "cat", "/tmp/k"]);
    let container_hostname = docker(&["exec", &host.0, "hostname"]);
    wait_for_sshd(port);

    let dir = tempfile::tempdir().unwrap();
    let key_file = write(dir.path(), "pool_key", &format!("{key}\n"));
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let data = dir.path().join("data");
    let _cleanup = crate::up_down::Cleanup(data.clone());
    let mut u = up(&data);
    let cli = |args: &[&str]| {
        let out = weft()
            .args(args)
            .args(["--server", &u.api])
            .output()
            .unwrap();
        assert!(out.status.success(), "weft {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let files = [
        (
            "provider",
            r#"{"name": "pool", "providertype": "hostpool", "provisioner": {"wipe_command": "true"}}"#,
        ),
        (
            "hardwaretype",
            r#"{"name": "pooled", "providermap": {"pool": {"flavor": "role=node"}}}"#,
        ),
        (
            "imagetype",
            r#"{"name": "pooled-os", "providermap": {"pool": {"image": "bookworm"}}}"#,
        ),
        (
            "service",
            r##"{"name": "marker", "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": "#!/bin/bash\necho installed\n"}}}}}"##,
        ),
        (
            "template",
            r#"{"name": "pooled", "compatibility": {"services": ["marker"], "hardwaretypes": ["pooled"], "imagetypes": ["pooled-os"]},
            "defaults": {"services": ["marker"], "provider": "pool", "hardwaretype": "pooled", "imagetype": "pooled-os"},
            "constraints": {"size": {"min": 1, "max": 10}}}"#,
        ),
    ];
    for (kind, body) in files {
        let f = write(dir.path(), &format!("{kind}.json"), body);
        cli(&[kind, "create", "-f", &f]);
    }
    let port_text = port.to_string();
    cli(&[
        "hostpool",
        "add",
        "h1",
        "-p",
        "pool",
        "--address",
        "127.0.0.1",
        "--port",
        &port_text,
        "--key-file",
        &key_file,
        "--label",
        "role=node",
    ]);
    cli(&[
        "cluster",
        "create",
        "--template",
        "pooled",
        "--size",
        "1",
        "--name",
        "pooled",
        "--wait",
    ]);
    let list: Value = serde_json::from_str(&cli(&["cluster", "list", "-o", "json"])).unwrap();
    let id = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "pooled")
        .and_then(|c| c["id"].as_str())
        .unwrap()
        .to_string();

    let ssh = |cmd: &str| {
        weft()
            .args([
                "cluster",
                "ssh",
                "--server",
                &u.api,
                "--identity",
                &key_file,
            ])
            .args([id.as_str(), "1000", "--", cmd])
            .output()
            .unwrap()
    };
    let out = ssh("hostname");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        container_hostname
    );
    assert_eq!(ssh("false").status.code(), Some(1));

    let down = weft()
        .args(["down", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(down.status.success(), "{down:?}");
    let _ = u.child.kill();
    let _ = u.child.wait();
}
