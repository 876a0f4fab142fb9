//! The `local` provider: machines on this machine. A node is a directory under
//! `<data dir>/local/nodes/<providerid>` plus its own loopback address (127.77.y.z, unique per node
//! among the nodes of the data dir), so services on different nodes can use the same port. CONFIRM
//! answers that address as both `access_v4` and `bind_v4`. DELETE kills every process started for
//! the node (its recorded process groups, and any process marked with the node's id), removes the
//! containers the `docker` automator ran for it on this machine's engine (label
//! `weft.container.node`; when there is a `docker` CLI), and removes the directory and the address.

// This module is a transport: it starts processes (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use weft_model::PluginType;

use weft_model::MachineState;

use crate::plugin::{status_output, Provider};
use crate::task::{providerid, PluginError, PluginResult, Task, TaskOutput};
use crate::transport::{kill_group, proc_stat, NODE_MARK, PGID_FILE};

/// The provider type name.
pub const NAME: &str = "local";

/// The `local` provider over one data directory.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    root: PathBuf,
    /// With tenant users, each node's directory belongs to its tenant's user (see `tenancy`).
    users: Option<std::sync::Arc<crate::tenancy::TenantUsers>>,
}

impl LocalProvider {
    /// Nodes and addresses live under `<data_dir>/local`.
    pub fn new(data_dir: &Path) -> LocalProvider {
        LocalProvider {
            root: data_dir.join("local"),
            users: None,
        }
    }

    /// Each node's directory belongs to its tenant's user, mode 0700, so that no other tenant
    /// reads it; the directories above it can be passed through but not listed.
    pub fn with_tenant_users(
        mut self,
        users: std::sync::Arc<crate::tenancy::TenantUsers>,
    ) -> LocalProvider {
        self.users = Some(users);
        self
    }

    /// Gives a new node's directory to the task's tenant user, with tenant users.
    fn hand_over(&self, task: &Task, dir: &Path) -> Result<(), PluginError> {
        use std::os::unix::fs::PermissionsExt;
        let Some(users) = &self.users else {
            return Ok(());
        };
        let uid = users.uid(&task.tenant_id)?;
        let fail = |e: std::io::Error| PluginError::retryable(format!("{}: {e}", dir.display()));
        for above in [&self.root, &self.nodes_dir()] {
            std::fs::set_permissions(above, std::fs::Permissions::from_mode(0o711))
                .map_err(fail)?;
        }
        std::os::unix::fs::chown(dir, Some(uid), Some(uid)).map_err(fail)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)
    }

    /// The directory holding one directory per node: `<data_dir>/local/nodes`.
    pub fn nodes_dir(&self) -> PathBuf {
        self.root.join("nodes")
    }

    /// The machine-wide address registry: one file per reserved address, shared by every local
    /// provisioner on the machine (`WEFT_LOCAL_ADDRESSES`, default `<temp dir>/weft-local-addresses`),
    /// so two provisioners (two `weft up`s, parallel tests) never hand out the same address.
    fn addresses_dir(&self) -> PathBuf {
        std::env::var_os("WEFT_LOCAL_ADDRESSES")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("weft-local-addresses"))
    }

    /// The directory of a node.
    pub fn node_dir(&self, providerid: &str) -> PathBuf {
        self.nodes_dir().join(providerid)
    }

    /// Reserves the first free loopback address for `providerid`: a file per address in the
    /// machine-wide registry, holding the node's directory. A reservation is stale, and taken
    /// over, only when its node's directory is gone (a provisioner's data removed without DELETE)
    /// and no process of that node is alive. An address something listens on (TCP, any port) is
    /// never handed out, reserved or not. Every allocation and release holds an exclusive lock on
    /// the registry (`.lock`, flock), also across processes, so a reservation is never taken over
    /// twice or released by anyone but its node.
    async fn allocate(&self, providerid: &str) -> Result<Ipv4Addr, PluginError> {
        let dir = self.addresses_dir();
        let owner = self.node_dir(providerid).to_string_lossy().into_owned();
        tokio::task::spawn_blocking(move || {
            let _lock = lock_registry(&dir)?;
            // A CREATE killed after reserving but before recording: take the same address again.
            if let Some(ip) = held_by(&dir, &owner) {
                return Ok(ip);
            }
            let listening = listening_addresses();
            for y in 0..=255u8 {
                for z in 1..=254u8 {
                    let ip = Ipv4Addr::new(127, 77, y, z);
                    if listening.contains(&ip) {
                        continue;
                    }
                    let path = dir.join(ip.to_string());
                    let free = match std::fs::read_to_string(&path) {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                        Err(e) => return Err(PluginError::retryable(format!("reading {ip}: {e}"))),
                        Ok(holder) => is_stale(holder.trim()),
                    };
                    if free {
                        std::fs::write(&path, owner.as_bytes()).map_err(|e| {
                            PluginError::retryable(format!("writing {}: {e}", path.display()))
                        })?;
                        return Ok(ip);
                    }
                }
            }
            Err(PluginError::retryable("no free loopback address left"))
        })
        .await
        .map_err(|e| PluginError::retryable(format!("allocating an address: {e}")))?
    }

    /// Gives `ip` back, if `providerid`'s node still holds it.
    async fn release(&self, providerid: &str, ip: String) -> Result<(), PluginError> {
        let dir = self.addresses_dir();
        let owner = self.node_dir(providerid).to_string_lossy().into_owned();
        tokio::task::spawn_blocking(move || {
            let _lock = lock_registry(&dir)?;
            let path = dir.join(ip);
            if std::fs::read_to_string(&path).is_ok_and(|h| h.trim() == owner) {
                let _ = std::fs::remove_file(&path);
            }
            Ok(())
        })
        .await
        .map_err(|e| PluginError::retryable(format!("releasing an address: {e}")))?
    }

    async fn read_node(&self, providerid: &str) -> Option<Map<String, Value>> {
        let bytes = tokio::fs::read(self.node_dir(providerid).join("node.json"))
            .await
            .ok()?;
        serde_json::from_slice::<Value>(&bytes)
            .ok()?
            .as_object()
            .cloned()
    }
}

/// Whether a reservation held by the node directory `holder` may be taken over: the directory is
/// gone and no process marked with its node id (the directory's last component) is alive.
/// The address the registry `dir` already reserves for `owner` (a node's directory), if any.
fn held_by(dir: &Path, owner: &str) -> Option<Ipv4Addr> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let ip: Ipv4Addr = e.file_name().to_str()?.parse().ok()?;
        let holder = std::fs::read_to_string(e.path()).ok()?;
        (holder.trim() == owner).then_some(ip)
    })
}

fn is_stale(holder: &str) -> bool {
    let path = Path::new(holder);
    if holder.is_empty() || path.exists() {
        return false;
    }
    match path.file_name().and_then(|n| n.to_str()) {
        Some(id) => !marked_alive(id),
        None => false,
    }
}

/// Whether a live (not zombie) process carries `NODE_MARK=id` (Linux /proc).
fn marked_alive(id: &str) -> bool {
    let needle = format!("{NODE_MARK}={id}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return false;
    };
    rd.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            return false;
        };
        let marked = std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()));
        marked && !is_zombie(pid)
    })
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_none_or(|state| state == "Z")
    })
}

/// The IPv4 addresses with a listening TCP socket on this machine's network namespace
/// (`/proc/net/tcp`; an address bound as `0.0.0.0` is not any one of them).
fn listening_addresses() -> std::collections::HashSet<Ipv4Addr> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1)?;
            let state = cols.nth(1)?;
            if state != "0A" {
                return None; // not LISTEN
            }
            let hex = local.split(':').next()?;
            // The kernel prints the address's bytes as one host-order word.
            let n = u32::from_str_radix(hex, 16).ok()?;
            Some(Ipv4Addr::from(n.to_ne_bytes()))
        })
        .collect()
}

/// A provider id must name a directory and nothing else.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && id != "."
        && id != ".."
}

/// Processes whose environment carries `NODE_MARK=id` (Linux /proc; none elsewhere).
async fn marked_processes(id: &str) -> Vec<u32> {
    let needle = format!("{NODE_MARK}={id}");
    let mut found = Vec::new();
    let Ok(mut rd) = tokio::fs::read_dir("/proc").await else {
        return found;
    };
    while let Ok(Some(e)) = rd.next_entry().await {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(env) = tokio::fs::read(e.path().join("environ")).await {
            if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                found.push(pid);
            }
        }
    }
    found
}

/// Kills every process of local node `id` in `dir` (its recorded process groups, and whatever
/// left them with `setsid` but still carries the node's mark) and waits until they are gone.
/// Answers how many marked processes there were.
/// Removes the containers of the node's services (the `docker` automator's label
/// `weft.container.node`) from this machine's engine: a local node's services run there, and a
/// cluster's deletion, like Coopr's, stops no service. Without a `docker` CLI, or an engine that
/// does not answer the listing, there is nothing to remove; a container that cannot be removed is
/// a retryable failure.
async fn remove_containers(node_id: &str) -> Result<usize, PluginError> {
    use crate::automators::docker::LABEL_NODE;
    if node_id.is_empty() {
        return Ok(0);
    }
    let docker = |args: Vec<String>, secs: u64| {
        let mut c = tokio::process::Command::new("docker");
        c.args(args).stdin(std::process::Stdio::null());
        c.kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(secs), c.output())
    };
    let filter = format!("label={LABEL_NODE}={node_id}");
    let listed = docker(
        vec!["ps".into(), "-aq".into(), "--filter".into(), filter],
        20,
    )
    .await;
    let ids: Vec<String> = match listed {
        Ok(Ok(out)) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        Ok(Ok(out)) => {
            tracing::warn!(node_id, stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "docker ps failed: no service containers removed");
            return Ok(0);
        }
        Ok(Err(_)) | Err(_) => return Ok(0), // no docker CLI, or it hung
    };
    if ids.is_empty() {
        return Ok(0);
    }
    let mut args = vec!["rm".to_string(), "-f".into()];
    args.extend(ids.iter().cloned());
    match docker(args, 60).await {
        Ok(Ok(out)) if out.status.success() => Ok(ids.len()),
        Ok(Ok(out)) => Err(PluginError::retryable(format!(
            "removing the node's containers: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Ok(Err(e)) => Err(PluginError::retryable(format!("docker rm: {e}"))),
        Err(_) => Err(PluginError::timeout("docker rm took longer than 60s")),
    }
}

async fn kill_node(id: &str, dir: &Path) -> Result<usize, PluginError> {
    // A process whose environment could not be read during a scan (it was between fork and
    // exec, say) is found by the next one: scan again until a scan finds nothing.
    let mut killed = 0;
    for _ in 0..5 {
        let n = kill_marked(id, dir).await?;
        if n == 0 {
            break;
        }
        killed += n;
    }
    Ok(killed)
}

/// One round of [`kill_node`]: kills what one scan finds and waits until it is gone.
async fn kill_marked(id: &str, dir: &Path) -> Result<usize, PluginError> {
    // Kill the node's process groups, and whatever left them (setsid) but still carries the
    // node's mark. A recorded group is killed only while a marked process is in it, so a group
    // id reused by an unrelated process is never touched.
    let recorded: std::collections::BTreeSet<u32> = tokio::fs::read_to_string(dir.join(PGID_FILE))
        .await
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let marked = marked_processes(id).await;
    let mut groups = std::collections::BTreeSet::new();
    for pid in &marked {
        if let Some(g) = proc_stat(*pid)
            .await
            .map(|(_, g)| g)
            .filter(|g| recorded.contains(g))
        {
            groups.insert(g);
        }
    }
    for g in &groups {
        kill_group(*g).await;
    }
    for pid in &marked {
        let _ = tokio::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
    }
    // A signal is only queued by kill(2): wait until the processes are really gone, so that
    // their ports and files are free once DELETE reports success.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut alive = Vec::new();
        for pid in &marked {
            if running(*pid).await {
                alive.push(*pid);
            }
        }
        if alive.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(PluginError::retryable(format!(
                "processes {alive:?} of node {id} survived SIGKILL"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(marked.len())
}

/// Whether a process exists and is not a zombie.
async fn running(pid: u32) -> bool {
    proc_stat(pid)
        .await
        .is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// Holds the address registry's lock (created if missing) until dropped.
fn lock_registry(dir: &Path) -> Result<std::fs::File, PluginError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| PluginError::retryable(format!("creating {}: {e}", dir.display())))?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))
        .map_err(|e| PluginError::retryable(format!("opening the address lock: {e}")))?;
    f.lock()
        .map_err(|e| PluginError::retryable(format!("locking the address registry: {e}")))?;
    Ok(f)
}

#[async_trait]
impl Provider for LocalProvider {
    fn plugin_type(&self) -> PluginType {
        crate::descriptor::provider_type(
            NAME,
            "Local",
            "nodes on the provisioner's machine: a directory and a loopback address each",
            &[],
        )
    }

    async fn create(&self, task: &Task) -> PluginResult {
        // The node id is the provider id: a retried CREATE finds what the first one made.
        let id = if task.node_id.is_empty() {
            format!("task-{}", task.id)
        } else {
            task.node_id.clone()
        };
        if !valid_id(&id) {
            return Err(PluginError::fatal(format!(
                "node id {id} cannot name a directory"
            )));
        }
        let dir = self.node_dir(&id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| PluginError::retryable(format!("creating {}: {e}", dir.display())))?;
        self.hand_over(task, &dir)?;
        if self.read_node(&id).await.is_none() {
            let ip = self.allocate(&id).await?;
            let node = json!({"providerid": id, "ip": ip.to_string()});
            tokio::fs::write(dir.join("node.json"), node.to_string())
                .await
                .map_err(|e| PluginError::retryable(format!("writing node.json: {e}")))?;
        }
        let mut out = TaskOutput::default();
        out.result.insert("providerid".into(), json!(id));
        out.result.insert("transport".into(), json!("local"));
        out.result
            .insert("nodedir".into(), json!(dir.to_string_lossy()));
        out.stdout = format!("node {id} in {}\n", dir.display());
        Ok(out)
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let id = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        if !valid_id(&id) {
            return Err(PluginError::fatal(format!(
                "providerid {id} is not a local node"
            )));
        }
        let node = self
            .read_node(&id)
            .await
            .ok_or_else(|| PluginError::not_found(format!("local node {id} does not exist")))?;
        let ip = node
            .get("ip")
            .and_then(Value::as_str)
            .ok_or_else(|| PluginError::fatal(format!("local node {id} has no address")))?
            .to_string();
        // The address must be usable: bind it once.
        let probe = tokio::net::TcpListener::bind((ip.as_str(), 0))
            .await
            .map_err(|e| PluginError::retryable(format!("address {ip} is not usable: {e}")))?;
        drop(probe);
        Ok(TaskOutput {
            ipaddresses: Some(
                [
                    ("access_v4".to_string(), ip.clone()),
                    ("bind_v4".to_string(), ip.clone()),
                ]
                .into(),
            ),
            stdout: format!("node {id} at {ip}\n"),
            ..Default::default()
        })
    }

    /// A local node exists while its `node.json` does; it runs while a process marked with its
    /// id is alive. So a node whose processes were killed behind weft's back is `stopped` (and
    /// its services' checks fail), and one whose directory was removed is `missing`. (A node
    /// that runs no process at all, services stopped or none that leave one, is `stopped` too.)
    async fn status(&self, task: &Task) -> PluginResult {
        let Some(id) = providerid(task).filter(|id| valid_id(id)) else {
            return Ok(status_output(
                MachineState::Missing,
                Some("no local providerid: CREATE never ran".into()),
            ));
        };
        if self.read_node(&id).await.is_none() {
            let dir = self.node_dir(&id);
            return Ok(status_output(
                MachineState::Missing,
                Some(format!("{} is gone", dir.display())),
            ));
        }
        let probe = id.clone();
        let alive = tokio::task::spawn_blocking(move || marked_alive(&probe))
            .await
            .unwrap_or(false);
        Ok(if alive {
            status_output(MachineState::Running, None)
        } else {
            status_output(
                MachineState::Stopped,
                Some(format!("no process of node {id} is alive")),
            )
        })
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let Some(id) = providerid(task) else {
            return Ok(TaskOutput {
                stdout: "no providerid: nothing was made\n".into(),
                ..Default::default()
            });
        };
        if !valid_id(&id) {
            return Ok(TaskOutput {
                stdout: format!("providerid {id} is not a local node: nothing to delete\n"),
                ..Default::default()
            });
        }
        let dir = self.node_dir(&id);
        let killed = kill_node(&id, &dir).await?;
        let containers = remove_containers(&task.node_id).await?;
        let ip = self
            .read_node(&id)
            .await
            .and_then(|n| n.get("ip").and_then(Value::as_str).map(str::to_string));
        // Give the address back (if this node still holds it) before the directory goes, so the
        // reservation never looks stale while it is being released.
        if let Some(ip) = ip {
            self.release(&id, ip).await?;
        }
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(PluginError::retryable(format!(
                    "removing {}: {e}",
                    dir.display()
                )))
            }
        }
        Ok(TaskOutput {
            stdout: format!(
                "node {id} deleted ({killed} processes killed, {containers} containers removed)\n"
            ),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::valid_id;

    #[test]
    fn provider_ids_cannot_escape_the_nodes_dir() {
        assert!(valid_id("6f1c-11ee_x.1"));
        for bad in ["", ".", "..", "a/b", "../x", "a b"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
