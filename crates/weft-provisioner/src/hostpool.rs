//! The `hostpool` provider: machines that already exist (bare metal, VMs), lent from a pool.
//!
//! The server picks the host: when it makes a node of a `hostpool` provider it takes a free host
//! of the provider's pool and puts it into the node, so every task of the node carries it in its
//! `config`: `hostpool` `{provider, host}`, `ipaddresses.access_v4` and `ssh-auth`
//! `{user, key, port}`. This provider only makes the host the node's, over SSH:
//!
//! - **CREATE** claims the host for the node: it writes the node's id into [`CLAIM_FILE`] on the
//!   host, and refuses (for good) a host that another node claims, so two nodes never share a
//!   machine even if two pools list it. Answers `providerid` (the host's id in the pool),
//!   `transport: ssh` and the host key it saw (`ssh_host_keys`), which every later connection
//!   checks.
//! - **CONFIRM** checks the claim and answers `ipaddresses` (`access_v4` as registered; `bind_v4`
//!   the host's own source address, which services bind to), the host's `hostname` and its host
//!   key.
//! - **DELETE** runs the provider's `wipe_command` admin field (a shell line, as root, with
//!   `WEFT_NODE_ID`, `WEFT_CLUSTER_ID`, `WEFT_HOST_ID` set) and removes the claim; the server
//!   then gives the host back to its pool. A task without a host, or a host not (or no longer)
//!   claimed by the node, is success without wiping anything. A failing wipe keeps the claim, so
//!   the retried DELETE wipes again.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use weft_model::PluginType;

use crate::plugin::Provider;
use crate::ssh::{
    known_host_keys, scan_host_key, SshAuth, SshTarget, SshTransport, CONNECT_TIMEOUT,
};
use crate::task::{PluginError, PluginResult, Task, TaskOutput};
use crate::transport::{CommandOutput, CommandSpec, Transport, TransportError};

/// The provider type name.
pub const NAME: &str = weft_model::hostpool::HOSTPOOL;

/// Where a host records the node that holds it.
pub const CLAIM_FILE: &str = "/var/lib/weft-hostpool/claim";

/// The admin field naming the wipe command.
pub const WIPE_FIELD: &str = "wipe_command";

/// The `hostpool` provider. Stateless: everything it needs comes with the task.
#[derive(Debug, Clone, Default)]
pub struct HostPoolProvider;

/// The host a task's node holds.
struct Host {
    id: String,
    address: String,
    port: u16,
    user: String,
    key: String,
}

fn plugin_error(e: TransportError) -> PluginError {
    e.into()
}

/// The host in a task's config, `None` when the node holds none.
fn host_of(task: &Task) -> Result<Option<Host>, PluginError> {
    let Some(id) = task
        .config
        .get("hostpool")
        .and_then(|h| h.get("host"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    let address = task.ip("access_v4").ok_or_else(|| {
        PluginError::fatal(format!(
            "pool host {id}: the node has no ipaddresses.access_v4"
        ))
    })?;
    let auth = task
        .config
        .get("ssh-auth")
        .and_then(Value::as_object)
        .ok_or_else(|| PluginError::fatal(format!("pool host {id}: the node has no ssh-auth")))?;
    let s = |k: &str| {
        auth.get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let port = match auth.get("port") {
        None | Some(Value::Null) => 22,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|p| p.parse().ok()))
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| PluginError::fatal(format!("pool host {id}: ssh-auth: bad port {v}")))?,
    };
    Ok(Some(Host {
        id: id.to_string(),
        address: address.to_string(),
        port,
        user: s("user").unwrap_or("root").to_string(),
        key: s("key")
            .ok_or_else(|| PluginError::fatal(format!("pool host {id}: ssh-auth has no key")))?
            .to_string(),
    }))
}

fn sh(line: &str, timeout: Duration) -> CommandSpec {
    let mut c = CommandSpec::new(vec!["sh".into(), "-c".into(), line.into()]);
    c.timeout = timeout;
    c
}

/// A command that must succeed; its failure is worth retrying (the host may be busy).
async fn must(
    t: &SshTransport,
    host: &Host,
    line: &str,
    what: &str,
) -> Result<CommandOutput, PluginError> {
    let out = t
        .run(&sh(line, Duration::from_secs(60)))
        .await
        .map_err(plugin_error)?;
    if out.success() {
        Ok(out)
    } else {
        Err(PluginError::retryable(format!(
            "pool host {} ({}): {what} failed (exit {:?}{})",
            host.id,
            host.address,
            out.exit,
            if out.timed_out { ", timed out" } else { "" }
        ))
        .with_output(out.stdout, out.stderr))
    }
}

impl HostPoolProvider {
    /// A provider that connects to pool hosts with the SSH transport's default time-out.
    pub fn new() -> HostPoolProvider {
        HostPoolProvider
    }

    /// A transport to the host that checks the host key recorded for the node (before one is
    /// recorded: the key the host shows now), and that key as `ssh_host_keys` answers it.
    async fn connect(
        &self,
        task: &Task,
        host: &Host,
    ) -> Result<(SshTransport, Value), PluginError> {
        let recorded = task
            .config
            .get("ssh_host_keys")
            .filter(|k| !known_host_keys(k).is_empty())
            .cloned();
        let keys = match recorded {
            Some(k) => k,
            None => scan_host_key(&host.address, host.port, CONNECT_TIMEOUT)
                .await
                .map_err(|e| {
                    plugin_error(TransportError {
                        message: format!("pool host {}: {}", host.id, e.message),
                        ..e
                    })
                })?
                .to_result(),
        };
        let auth = SshAuth::key_text(&host.key).map_err(plugin_error)?;
        let target = SshTarget::new(host.address.clone(), host.port, host.user.clone(), auth);
        Ok((SshTransport::new(target.with_host_keys(&keys)), keys))
    }

    /// The node that claims the host, if any.
    async fn claim(t: &SshTransport, host: &Host) -> Result<Option<String>, PluginError> {
        let out = must(
            t,
            host,
            &format!("cat {CLAIM_FILE} 2>/dev/null || true"),
            "reading the claim",
        )
        .await?;
        let holder = out.stdout.trim();
        Ok((!holder.is_empty()).then(|| holder.to_string()))
    }
}

fn node_id(task: &Task) -> Result<&str, PluginError> {
    if task.node_id.is_empty() {
        Err(PluginError::fatal("the task names no node"))
    } else {
        Ok(&task.node_id)
    }
}

#[async_trait]
impl Provider for HostPoolProvider {
    fn plugin_type(&self) -> PluginType {
        let wipe = crate::descriptor::field(
            "Wipe command",
            "a shell line run as root on a host when its node is deleted, before the host goes back to the pool (e.g. rm -rf /var/lib/weft /opt/app)",
        );
        crate::descriptor::provider_type(
            NAME,
            "Host pool",
            "machines that already exist, lent from the provider's pool of hosts (see /v2/providers/{name}/hosts)",
            &[(WIPE_FIELD, wipe)],
        )
    }

    async fn create(&self, task: &Task) -> PluginResult {
        let node = node_id(task)?;
        let host = host_of(task)?.ok_or_else(|| {
            PluginError::fatal(
                "the node holds no pool host (config.hostpool): the server lends one to every node of a hostpool provider",
            )
        })?;
        let (t, key) = self.connect(task, &host).await?;
        match Self::claim(&t, &host).await? {
            Some(holder) if holder != node => {
                return Err(PluginError::fatal(format!(
                    "pool host {} ({}) is claimed by node {holder} ({CLAIM_FILE}); free it there or take it out of the pool",
                    host.id, host.address
                )))
            }
            Some(_) => {}
            None => {
                t.write_file(CLAIM_FILE, format!("{node}\n").as_bytes(), 0o644)
                    .await
                    .map_err(plugin_error)?;
            }
        }
        let mut result = Map::new();
        result.insert("providerid".into(), json!(host.id));
        result.insert("transport".into(), json!("ssh"));
        result.insert("ssh_host_keys".into(), key);
        Ok(TaskOutput {
            result,
            stdout: format!(
                "claimed pool host {} ({}:{})\n",
                host.id, host.address, host.port
            ),
            ..Default::default()
        })
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let node = node_id(task)?;
        task.config_str("providerid")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                PluginError::fatal("confirm without a providerid: CREATE did not run")
            })?;
        let host = host_of(task)?
            .ok_or_else(|| PluginError::fatal("the node holds no pool host (config.hostpool)"))?;
        let (t, key) = self.connect(task, &host).await?;
        match Self::claim(&t, &host).await? {
            Some(holder) if holder == node => {}
            other => {
                return Err(PluginError::fatal(format!(
                "pool host {} is not claimed by node {node} (claim: {}): it was deleted or taken",
                host.id,
                other.as_deref().unwrap_or("none")
            )))
            }
        }
        let out = must(
            &t,
            &host,
            "hostname -f 2>/dev/null || hostname; \
             ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p'",
            "reading the host's name and address",
        )
        .await?;
        let mut lines = out.stdout.lines().map(str::trim);
        let hostname = lines.next().filter(|h| !h.is_empty()).map(str::to_string);
        let bind = lines
            .next()
            .filter(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
            .unwrap_or(&host.address)
            .to_string();
        let mut result = Map::new();
        result.insert("ssh_host_keys".into(), key);
        Ok(TaskOutput {
            hostname,
            ipaddresses: Some(BTreeMap::from([
                ("access_v4".to_string(), host.address.clone()),
                ("bind_v4".to_string(), bind),
            ])),
            result,
            ..Default::default()
        })
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let Some(host) = host_of(task)? else {
            return Ok(TaskOutput {
                stdout: "the node holds no pool host: nothing to do\n".into(),
                ..Default::default()
            });
        };
        let node = node_id(task)?;
        let (t, _) = self.connect(task, &host).await?;
        match Self::claim(&t, &host).await? {
            None => {
                return Ok(TaskOutput {
                    stdout: format!("pool host {} is not claimed: nothing to wipe\n", host.id),
                    ..Default::default()
                })
            }
            Some(holder) if holder != node => {
                return Ok(TaskOutput {
                    stdout: format!(
                        "pool host {} is claimed by node {holder}, not {node}: left alone\n",
                        host.id
                    ),
                    ..Default::default()
                })
            }
            Some(_) => {}
        }
        let wipe = crate::cloud::fields::Fields::of(task).text(WIPE_FIELD);
        let mut output = TaskOutput::default();
        if let Some(line) = wipe {
            let mut spec = sh(&line, task.timeout);
            spec.env.insert("WEFT_NODE_ID".into(), node.to_string());
            spec.env
                .insert("WEFT_CLUSTER_ID".into(), task.cluster_id.clone());
            spec.env.insert("WEFT_HOST_ID".into(), host.id.clone());
            let out = t.run(&spec).await.map_err(plugin_error)?;
            if !out.success() {
                return Err(PluginError::retryable(format!(
                    "pool host {}: the wipe command failed (exit {:?}{}); the host stays claimed",
                    host.id,
                    out.exit,
                    if out.timed_out { ", timed out" } else { "" }
                ))
                .with_output(out.stdout, out.stderr));
            }
            output.stdout = out.stdout;
            output.stderr = out.stderr;
        }
        must(
            &t,
            &host,
            &format!("rm -f {CLAIM_FILE}"),
            "removing the claim",
        )
        .await?;
        output
            .stdout
            .push_str(&format!("pool host {} released by node {node}\n", host.id));
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(config: Value) -> Task {
        let raw = json!({"taskId": "1-1-1", "clusterId": "1", "taskName": "DELETE", "nodeId": "n1",
            "config": config});
        Task::from_json(raw, Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn the_host_comes_from_the_task() {
        let t = task(json!({"hostpool": {"provider": "pool", "host": "h1"},
            "ipaddresses": {"access_v4": "10.0.0.5"},
            "ssh-auth": {"user": "weft", "key": "K", "port": 2222}}));
        let h = host_of(&t).unwrap().unwrap();
        assert_eq!(
            (
                h.id.as_str(),
                h.address.as_str(),
                h.port,
                h.user.as_str(),
                h.key.as_str()
            ),
            ("h1", "10.0.0.5", 2222, "weft", "K")
        );
        assert!(host_of(&task(json!({}))).unwrap().is_none());
        for broken in [
            json!({"hostpool": {"host": "h1"}, "ssh-auth": {"key": "K"}}),
            json!({"hostpool": {"host": "h1"}, "ipaddresses": {"access_v4": "a"}}),
            json!({"hostpool": {"host": "h1"}, "ipaddresses": {"access_v4": "a"}, "ssh-auth": {"user": "u"}}),
            json!({"hostpool": {"host": "h1"}, "ipaddresses": {"access_v4": "a"}, "ssh-auth": {"key": "K", "port": 70000}}),
        ] {
            let e = host_of(&task(broken.clone()))
                .err()
                .unwrap_or_else(|| panic!("{broken}"));
            assert!(!e.retryable && e.message.contains("h1"), "{e}");
        }
    }

    #[tokio::test]
    async fn delete_without_a_host_is_success_and_create_without_one_fails_for_good() {
        let p = HostPoolProvider::new();
        let out = p.delete(&task(json!({}))).await.unwrap();
        assert!(out.stdout.contains("nothing to do"));
        let e = p.create(&task(json!({}))).await.unwrap_err();
        assert!(!e.retryable, "{e}");
        let e = p.confirm(&task(json!({}))).await.unwrap_err();
        assert!(!e.retryable, "{e}");
    }
}
