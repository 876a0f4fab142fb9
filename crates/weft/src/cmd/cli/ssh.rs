//! `weft cluster ssh ID NODE [-- COMMAND...]`: a shell, or one command, on a node; exits with the
//! command's exit code. On the local provider (no sshd) the shell runs in the node's directory
//! with the node's environment; elsewhere it is `ssh` to the node's address as its user.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use weft_model::Node;

use super::UsageError;

/// Runs `command` (a login shell when empty) on `node`; returns its exit code.
pub fn run_on(node: &Node, command: &[String]) -> anyhow::Result<i32> {
    let results = &node.provisioner_results;
    let status = match results.get("transport").and_then(|t| t.as_str()) {
        Some("local") => {
            let dir = results
                .get("nodedir")
                .and_then(|d| d.as_str())
                .ok_or_else(|| UsageError(format!("node {} has no directory yet", node.id)))?;
            local(node, Path::new(dir), command)?
        }
        _ => remote(node, command)?,
    };
    Ok(status.code().unwrap_or(1))
}

/// A shell (or `command` through `sh -c`) in the node's directory, with the node's environment:
/// `WEFT_LOCAL_NODE`, `HOSTNAME` and a `hostname` that answers the node's name.
fn local(node: &Node, dir: &Path, command: &[String]) -> anyhow::Result<std::process::ExitStatus> {
    let hostname = node.properties.hostname.clone().unwrap_or_default();
    let shims = tempfile::tempdir().context("making a directory for the node's hostname")?;
    let shim = shims.path().join("hostname");
    std::fs::write(
        &shim,
        format!("#!/bin/sh\necho '{}'\n", hostname.replace('\'', "")),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o700))?;
    let path = format!(
        "{}:{}",
        shims.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = if command.is_empty() {
        Command::new(std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into()))
    } else {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(shell_words(command));
        c
    };
    cmd.current_dir(dir)
        .env("WEFT_LOCAL_NODE", &node.id)
        .env("HOSTNAME", &hostname)
        .env("PATH", path);
    if let Some(ip) = node.properties.ipaddresses.get("access_v4") {
        cmd.env("WEFT_NODE_IP", ip);
    }
    cmd.status().context("running the shell")
}

/// `ssh USER@ADDRESS [COMMAND]` with the node's address and user.
fn remote(node: &Node, command: &[String]) -> anyhow::Result<std::process::ExitStatus> {
    let ip = super::cluster::access_ip(node)
        .ok_or_else(|| UsageError(format!("node {} has no address yet", node.id)))?;
    let mut cmd = Command::new("ssh");
    cmd.arg(format!("{}@{ip}", node.properties.sshuser));
    if !command.is_empty() {
        cmd.arg("--").arg(shell_words(command));
    }
    cmd.status().context("running ssh")
}

/// The command as one shell line, each word quoted.
fn shell_words(command: &[String]) -> String {
    if command.len() == 1 {
        return command[0].clone();
    }
    command
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}
