//! `weft cluster ssh ID NODE [-- COMMAND...]`: a shell, or one command, on a node; exits with the
//! command's exit code. On the local provider (no sshd) the shell runs in the node's directory
//! with the node's environment; elsewhere it is `ssh` to the node's address as its user.

// Starting the user's shell or `ssh` is what this command does (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use weft_model::Node;

use super::UsageError;

/// Runs `command` (a login shell when empty) on `node`; returns its exit code.
pub(super) fn run_on(node: &Node, command: &[String], opts: &SshOptions) -> anyhow::Result<i32> {
    let results = &node.provisioner_results;
    let status = match results.get("transport").and_then(|t| t.as_str()) {
        Some("local") => {
            let dir = results
                .get("nodedir")
                .and_then(|d| d.as_str())
                .ok_or_else(|| UsageError(format!("node {} has no directory yet", node.id)))?;
            local(node, Path::new(dir), command)?
        }
        _ => remote(node, command, opts)?,
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

/// How to reach a node over SSH: a key file, when one was given or can be derived.
#[derive(Debug, Clone, Default)]
pub(super) struct SshOptions {
    /// A private key file (host pool: the provider's key).
    pub identity: Option<PathBuf>,
    /// The data dir of the provisioner that made a Docker node (its key seed).
    pub data_dir: PathBuf,
}

/// `ssh` to the node's address as its user, with the host key recorded at CONFIRM (strict) and
/// the cluster's key: `--identity`, else the Docker provider's key derived from the
/// provisioner's seed, written mode 0600 in a directory only this user reads.
fn remote(
    node: &Node,
    command: &[String],
    opts: &SshOptions,
) -> anyhow::Result<std::process::ExitStatus> {
    let ip = super::cluster::access_ip(node)
        .ok_or_else(|| UsageError(format!("node {} has no address yet", node.id)))?;
    let user = node
        .provisioner_results
        .get("ssh-auth")
        .and_then(|a| a.get("user"))
        .and_then(|u| u.as_str())
        .unwrap_or(&node.properties.sshuser)
        .to_string();
    let private = private_dir()?;
    let mut cmd = Command::new("ssh");
    let known = private.path().join("known_hosts");
    let keys = host_keys(node, ip);
    if keys.is_empty() {
        cmd.args(["-o", "StrictHostKeyChecking=accept-new"]);
    } else {
        std::fs::write(&known, keys)?;
        cmd.args(["-o", "StrictHostKeyChecking=yes"]);
    }
    cmd.arg("-o")
        .arg(format!("UserKnownHostsFile={}", known.display()));
    let identity = match &opts.identity {
        Some(p) => Some(p.clone()),
        None => docker_key(node, &opts.data_dir, private.path())?,
    };
    if let Some(key) = identity {
        cmd.arg("-i").arg(key).args(["-o", "IdentitiesOnly=yes"]);
    }
    let auth = node.provisioner_results.get("ssh-auth");
    if let Some(port) = auth.and_then(|a| a.get("port")).and_then(|p| p.as_u64()) {
        cmd.arg("-p").arg(port.to_string());
    }
    cmd.args(["-o", "LogLevel=ERROR"])
        .arg(format!("{user}@{ip}"));
    if !command.is_empty() {
        cmd.arg("--").arg(shell_words(command));
    }
    cmd.status().context("running ssh")
}

/// A temporary directory only this user can read (mode 0700).
fn private_dir() -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("weft-ssh-").tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// `known_hosts` lines for the host keys the provider recorded at CONFIRM.
fn host_keys(node: &Node, ip: &str) -> String {
    let Some(keys) = node
        .provisioner_results
        .get("ssh_host_keys")
        .and_then(|k| k.as_object())
    else {
        return String::new();
    };
    keys.values()
        .filter_map(|v| v.as_str())
        .filter(|k| k.starts_with("ssh-") || k.starts_with("ecdsa-"))
        .map(|k| format!("{ip} {k}\n"))
        .collect()
}

/// The Docker provider's key of the node's cluster, derived from the provisioner's seed
/// (`<data dir>/provisioner/docker/ssh-key-seed`, as `weft up` keeps it) and the container's
/// labels, checked against the container's key fingerprint; written mode 0600 in `dir`.
fn docker_key(node: &Node, data_dir: &Path, dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    use russh::keys::ssh_key::LineEnding;
    use russh::keys::HashAlg;
    let Some(container) = node
        .provisioner_results
        .get("containerid")
        .and_then(|c| c.as_str())
    else {
        return Ok(None);
    };
    let labels = container_labels(container)?;
    let label = |k: &str| labels.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let seed_file = data_dir.join("provisioner/docker/ssh-key-seed");
    let seed = std::fs::read_to_string(&seed_file).with_context(|| {
        format!(
            "reading the provisioner's key seed {} (give the provisioner's --data-dir, or --identity)",
            seed_file.display()
        )
    })?;
    let key = weft_provisioner::keys::cluster_key(
        seed.trim().as_bytes(),
        label("weft.tenant"),
        label("weft.cluster"),
    );
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    anyhow::ensure!(
        label(weft_provisioner::docker::LABEL_KEY) == fingerprint,
        "the key of node {} was made from another seed than {} (a provider `sshkeyseed`?): give --identity",
        node.id,
        seed_file.display()
    );
    let path = dir.join("id_ed25519");
    let pem = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| anyhow::anyhow!("encoding the cluster key: {e}"))?;
    write_private(&path, pem.as_bytes())?;
    Ok(Some(path))
}

/// Writes `bytes` to a new file of mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

/// The labels of a container (`docker inspect`).
fn container_labels(container: &str) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let out = Command::new("docker")
        .args(["inspect", "--format", "{{json .Config.Labels}}", container])
        .output()
        .context("running docker inspect (the docker CLI finds the node's cluster key)")?;
    anyhow::ensure!(
        out.status.success(),
        "docker inspect {container}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).context("reading docker inspect")
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
