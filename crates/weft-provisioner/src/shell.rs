//! The `shell` automator: runs admin-provided scripts on a node.
//!
//! Fields: `script` (required) is either a script's text (it has a line break) or the name of a
//! file: a live `scripts` plugin resource of the task's tenant, else a file in one of the
//! provisioner's script directories (a plain file name, no path); `args` (split on white space) are its arguments;
//! `timeout` (seconds) shortens the task time-out. For every action the automator writes the task
//! JSON to `<node dir>/.weft/tasks/<taskId>.json` and the script to `<node dir>/.weft/scripts/`, and
//! runs it with `bash` in the node directory, with this environment:
//!
//! - `WEFT_TASK_JSON` (the file above), `WEFT_TASK_ID`, `WEFT_ACTION` (lower case), `WEFT_CLUSTER_ID`,
//!   `WEFT_NODE_ID`, `WEFT_SERVICE`, `WEFT_HOSTNAME`, `WEFT_IP` (`bind_v4`), `WEFT_ACCESS_IP`,
//!   `WEFT_NODE_DIR`, `WEFT_SCRIPTS` (also put first on `PATH`);
//! - `WEFT_CONFIG_<PATH>` for every scalar of the expanded cluster config (`kv.port` is
//!   `WEFT_CONFIG_KV_PORT`; names upper-cased, other characters turned into `_`);
//! - `WEFT_SERVICE_IPS_<SERVICE>` and `WEFT_SERVICE_HOSTS_<SERVICE>`: the bind addresses and hostnames
//!   of the nodes running each service, comma-separated, in node number order;
//! - for JOIN and LEAVE (`config.membership` of the task), `WEFT_MEMBERS_BEFORE_IPS`,
//!   `WEFT_MEMBERS_BEFORE_HOSTS`, `WEFT_MEMBERS_AFTER_IPS` and `WEFT_MEMBERS_AFTER_HOSTS`: the
//!   service's members before and after this one change, comma-separated, in node number order.
//!
//! A `healthcheck` action is the same script run as one try of [`crate::health::check`]: exit 0
//! means healthy (the action's `timeout` bounds each try, as well as the `timeout` field).
//!
//! A non-zero exit fails the task with its output; a script still running at the time-out is killed
//! with its whole process group and reported. BOOTSTRAP copies every script of the script
//! directories to the node. The node is reached through the transport the provider named in its
//! results (`transport: local`), or over SSH (`transport: ssh`, or none and `ssh-auth`: see
//! [`crate::ssh`]), where the node directory is `nodedir` or `/var/lib/weft` and commands run
//! with `sudo -E` unless the user is root.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use weft_model::{
    FieldSchema, ParamSpec, ParameterType, PluginType, ResourceFormat, ResourceTypeSpec,
};

use crate::plugin::Automator;
use crate::ssh::{self, SshTransport};
use crate::task::{Action, PluginError, PluginResult, Task, TaskOutput};
use crate::tenancy::TenantUsers;
use crate::transport::{CommandSpec, LocalTransport, Transport, TransportError};

/// The automator type name.
pub const NAME: &str = "shell";

/// Picks the transport for a task's node from what its provider answered.
pub trait TransportFactory: Send + Sync {
    /// The transport to the task's node and the node's directory there (`nodedir`, or
    /// [`ssh::NODE_DIR`] on an SSH node that names none); a node that cannot be reached is fatal.
    fn transport(&self, task: &Task) -> Result<(Arc<dyn Transport>, String), PluginError>;
}

/// Reaches nodes of the `local` provider (result keys `transport: local`, `nodedir`, `providerid`)
/// with a [`LocalTransport`], and nodes with `ssh-auth` (and `transport: ssh` or none) with an
/// [`SshTransport`] to `ipaddresses.access_v4`, checking the host key recorded in `ssh_host_keys`.
/// With tenant users, a local node's commands run as its tenant's user.
#[derive(Debug, Clone, Default)]
pub struct DefaultTransports {
    /// The tenant users that local nodes' commands run as; `None` runs them as this process's
    /// user.
    pub users: Option<Arc<TenantUsers>>,
}

impl TransportFactory for DefaultTransports {
    fn transport(&self, task: &Task) -> Result<(Arc<dyn Transport>, String), PluginError> {
        match task.config_str("transport") {
            Some("local") => {
                let dir = task
                    .config_str("nodedir")
                    .ok_or_else(|| PluginError::fatal("local node without nodedir"))?;
                let id = task.config_str("providerid").unwrap_or_default();
                let uid = match &self.users {
                    Some(u) => Some(u.uid(&task.tenant_id)?),
                    None => None,
                };
                let t = LocalTransport::new(dir, id).run_as(uid);
                Ok((Arc::new(t), dir.to_string()))
            }
            // Coopr's providers name no transport: a node with `ssh-auth` is reached over SSH.
            Some("ssh") | None if task.config.contains_key("ssh-auth") => {
                let t = SshTransport::from_task(task).map_err(transport_error)?;
                let dir = task.config_str("nodedir").unwrap_or(ssh::NODE_DIR);
                Ok((Arc::new(t), dir.to_string()))
            }
            Some("ssh") => Err(PluginError::fatal("ssh node without ssh-auth")),
            Some(other) => Err(PluginError::fatal(format!(
                "transport {other} is not supported"
            ))),
            None => Err(PluginError::fatal(
                "the node names no transport and has no ssh-auth",
            )),
        }
    }
}

/// A transport failure as a plugin error, keeping whether it is worth retrying.
fn transport_error(e: TransportError) -> PluginError {
    e.into()
}

/// The `shell` automator.
pub struct ShellAutomator {
    script_dirs: Vec<PathBuf>,
    resources: Option<PathBuf>,
    transports: Arc<dyn TransportFactory>,
    max_output: usize,
}

impl ShellAutomator {
    /// Scripts named by file name are looked up in `script_dirs`, in order.
    pub fn new(script_dirs: Vec<PathBuf>) -> ShellAutomator {
        ShellAutomator {
            script_dirs,
            resources: None,
            transports: Arc::new(DefaultTransports::default()),
            max_output: 64 * 1024,
        }
    }

    /// Scripts are looked up first among the tenant's live `scripts` resources under `root` (the
    /// agent's resources directory).
    pub fn with_resources(mut self, root: PathBuf) -> ShellAutomator {
        self.resources = Some(root);
        self
    }

    /// The directories searched for scripts for a tenant, in order.
    fn dirs(&self, tenant: &str) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(root) = &self.resources {
            if !tenant.is_empty() && !tenant.contains('/') && tenant != ".." {
                dirs.push(
                    root.join(tenant)
                        .join("automatortypes")
                        .join(NAME)
                        .join("scripts"),
                );
            }
        }
        dirs.extend(self.script_dirs.iter().cloned());
        dirs
    }

    /// Local nodes' commands run as their tenant's user (see `tenancy`).
    pub fn with_tenant_users(mut self, users: Arc<TenantUsers>) -> ShellAutomator {
        self.transports = Arc::new(DefaultTransports { users: Some(users) });
        self
    }

    /// Reaches nodes through `t` instead of [`DefaultTransports`] (tests, other transports).
    pub fn with_transports(mut self, t: Arc<dyn TransportFactory>) -> ShellAutomator {
        self.transports = t;
        self
    }

    async fn script_text(
        &self,
        tenant: &str,
        script: &str,
    ) -> Result<(String, String), PluginError> {
        if script.contains('\n') {
            return Ok(("inline.sh".into(), script.to_string()));
        }
        let name = script.trim();
        if name.is_empty()
            || name.contains('/')
            || name.starts_with('.')
            || name.chars().any(char::is_whitespace)
        {
            return Err(PluginError::fatal(format!(
                "script {name:?} must be a file name or a script's text"
            )));
        }
        for dir in self.dirs(tenant) {
            if let Ok(text) = tokio::fs::read_to_string(dir.join(name)).await {
                return Ok((name.to_string(), text));
            }
        }
        Err(PluginError::not_found(format!(
            "script {name} is in none of the script directories"
        )))
    }
}

/// `kv-primary` -> `KV_PRIMARY`.
pub fn env_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                flatten(&format!("{prefix}_{}", env_name(k)), v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        Value::Number(n) => {
            out.insert(prefix.to_string(), n.to_string());
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), b.to_string());
        }
        Value::Array(_) => {
            out.insert(prefix.to_string(), v.to_string());
        }
        Value::Null => {}
    }
}

/// The environment a script sees (see the module doc).
pub fn script_env(
    task: &Task,
    node_dir: &str,
    scripts: &str,
    task_json: &str,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        env.insert(k.to_string(), v.to_string());
    };
    put("WEFT_TASK_JSON", task_json);
    put("WEFT_TASK_ID", &task.id);
    put("WEFT_ACTION", task.action.lower());
    put("WEFT_CLUSTER_ID", &task.cluster_id);
    put("WEFT_NODE_ID", &task.node_id);
    put("WEFT_SERVICE", task.service_name().unwrap_or_default());
    put(
        "WEFT_HOSTNAME",
        task.config_str("hostname").unwrap_or_default(),
    );
    put("WEFT_IP", task.ip("bind_v4").unwrap_or_default());
    put("WEFT_ACCESS_IP", task.ip("access_v4").unwrap_or_default());
    put("WEFT_NODE_DIR", node_dir);
    put("WEFT_SCRIPTS", scripts);
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    put("PATH", &format!("{scripts}:{path}"));
    if let Some(c) = task.config.get("cluster") {
        flatten("WEFT_CONFIG", c, &mut env);
    }
    membership_env(task.config.get("membership"), &mut env);
    // The layout: which nodes run which service.
    let mut by_service: BTreeMap<String, Vec<(u64, String, String)>> = BTreeMap::new();
    if let Some(nodes) = task.config.get("nodes").and_then(Value::as_object) {
        for props in nodes.values() {
            let num = props.get("nodenum").and_then(Value::as_u64).unwrap_or(0);
            let ip = props
                .get("ipaddresses")
                .and_then(|i| i.get("bind_v4"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let host = props
                .get("hostname")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            for s in props
                .get("services")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                by_service
                    .entry(s.to_string())
                    .or_default()
                    .push((num, ip.clone(), host.clone()));
            }
        }
    }
    for (svc, mut nodes) in by_service {
        nodes.sort();
        let ips: Vec<&str> = nodes.iter().map(|n| n.1.as_str()).collect();
        let hosts: Vec<&str> = nodes.iter().map(|n| n.2.as_str()).collect();
        env.insert(
            format!("WEFT_SERVICE_IPS_{}", env_name(&svc)),
            ips.join(","),
        );
        env.insert(
            format!("WEFT_SERVICE_HOSTS_{}", env_name(&svc)),
            hosts.join(","),
        );
    }
    env
}

/// `WEFT_MEMBERS_{BEFORE,AFTER}_{IPS,HOSTS}` from a JOIN or LEAVE task's `membership`.
fn membership_env(m: Option<&Value>, env: &mut BTreeMap<String, String>) {
    let Some(m) = m else { return };
    for (side, list) in [("BEFORE", "before"), ("AFTER", "after")] {
        let members = m.get(list).and_then(Value::as_array);
        let column = |key: &str| -> String {
            members
                .into_iter()
                .flatten()
                .filter_map(|n| n.get(key).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(",")
        };
        env.insert(format!("WEFT_MEMBERS_{side}_IPS"), column("ip"));
        env.insert(format!("WEFT_MEMBERS_{side}_HOSTS"), column("hostname"));
    }
}

fn field(label: &str, tip: &str) -> FieldSchema {
    FieldSchema {
        label: label.into(),
        field_type: "text".into(),
        tip: Some(tip.into()),
        ..Default::default()
    }
}

#[async_trait]
impl Automator for ShellAutomator {
    fn plugin_type(&self) -> PluginType {
        let admin = ParamSpec {
            fields: [
                (
                    "script".to_string(),
                    field("script", "a script's text, or the name of a script file"),
                ),
                (
                    "args".to_string(),
                    field("arguments", "arguments, space-separated"),
                ),
                (
                    "timeout".to_string(),
                    field("time-out", "seconds before the script is killed"),
                ),
            ]
            .into(),
            required: vec![["script".to_string()].into()],
        };
        PluginType {
            name: NAME.into(),
            label: Some("Shell".into()),
            description: Some("runs admin scripts on the node".into()),
            icon: None,
            version: 1,
            classname: None,
            parameters: [(ParameterType::Admin, admin)].into(),
            resource_types: [
                (
                    "scripts".to_string(),
                    ResourceTypeSpec {
                        format: ResourceFormat::File,
                        permissions: Some("0755".into()),
                    },
                ),
                (
                    "archives".to_string(),
                    ResourceTypeSpec {
                        format: ResourceFormat::Archive,
                        permissions: None,
                    },
                ),
            ]
            .into(),
        }
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (transport, node_dir) = self.transports.transport(task)?;
        let scripts = format!("{node_dir}/.weft/scripts");
        let mut copied = 0;
        let mut seen = std::collections::BTreeSet::new();
        for dir in self.dirs(&task.tenant_id) {
            let Ok(mut rd) = tokio::fs::read_dir(&dir).await else {
                continue;
            };
            while let Ok(Some(e)) = rd.next_entry().await {
                let name = e.file_name().to_string_lossy().into_owned();
                // The first directory with a name wins, as in the lookup of a single script.
                if name.starts_with('.') || !e.path().is_file() || !seen.insert(name.clone()) {
                    continue;
                }
                let bytes = tokio::fs::read(e.path())
                    .await
                    .map_err(|err| PluginError::retryable(format!("reading {name}: {err}")))?;
                transport
                    .write_file(&format!("{scripts}/{name}"), &bytes, 0o755)
                    .await
                    .map_err(transport_error)?;
                copied += 1;
            }
        }
        Ok(TaskOutput {
            stdout: format!("{copied} scripts copied to {scripts}\n"),
            ..Default::default()
        })
    }

    async fn service_action(&self, _action: Action, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        let script = fields
            .get("script")
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| PluginError::fatal("shell: the script field is required"))?;
        let (name, text) = self.script_text(&task.tenant_id, script).await?;
        let (transport, node_dir) = self.transports.transport(task)?;
        let weft = format!("{node_dir}/.weft");
        let scripts = format!("{weft}/scripts");
        let script_path = format!("{scripts}/{name}");
        let task_json = format!("{weft}/tasks/{}.json", task.id);
        let io = transport_error;
        transport
            .write_file(&script_path, text.as_bytes(), 0o755)
            .await
            .map_err(io)?;
        let json = serde_json::to_vec_pretty(&task.raw).unwrap_or_default();
        transport
            .write_file(&task_json, &json, 0o600)
            .await
            .map_err(io)?;
        let mut timeout = task.timeout;
        if let Some(t) = fields
            .get("timeout")
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            timeout = timeout.min(Duration::from_secs(t));
        }
        let mut argv = vec!["bash".to_string(), script_path];
        argv.extend(
            fields
                .get("args")
                .map(|a| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default(),
        );
        let cmd = CommandSpec {
            argv,
            env: script_env(task, &node_dir, &scripts, &task_json),
            cwd: Some(node_dir.clone()),
            timeout,
            max_output: self.max_output,
        };
        let out = transport.run(&cmd).await.map_err(io)?;
        if out.timed_out {
            return Err(PluginError::timeout(format!(
                "script {name} timed out after {}s and was killed",
                timeout.as_secs_f64()
            ))
            .with_output(out.stdout, out.stderr));
        }
        if !out.success() {
            let code = out
                .exit
                .map_or_else(|| "a signal".to_string(), |c| c.to_string());
            return Err(
                PluginError::retryable(format!("script {name} exited with {code}"))
                    .with_output(out.stdout, out.stderr),
            );
        }
        Ok(TaskOutput {
            stdout: out.stdout,
            stderr: out.stderr,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scripts_see_config_and_layout_as_variables() {
        let raw = json!({"taskId": "1-1-1", "clusterId": "1", "taskName": "START", "nodeId": "n1",
            "config": {"cluster": {"kv": {"port": "7000"}, "lb": {"backends": "a,b"}, "n": 3},
            "service": {"name": "web", "action": {"type": "shell", "fields": {}}},
            "hostname": "h1", "ipaddresses": {"bind_v4": "127.77.0.1", "access_v4": "127.77.0.1"},
            "nodes": {"n1": {"nodenum": 1001, "hostname": "h1", "ipaddresses": {"bind_v4": "127.77.0.1"}, "services": ["web", "kv-primary"]},
                      "n2": {"nodenum": 1000, "hostname": "h2", "ipaddresses": {"bind_v4": "127.77.0.2"}, "services": ["web"]}}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        let env = script_env(&t, "/n", "/n/.weft/scripts", "/n/t.json");
        assert_eq!(env["WEFT_CONFIG_KV_PORT"], "7000");
        assert_eq!(env["WEFT_CONFIG_LB_BACKENDS"], "a,b");
        assert_eq!(env["WEFT_CONFIG_N"], "3");
        assert_eq!(env["WEFT_SERVICE_IPS_WEB"], "127.77.0.2,127.77.0.1");
        assert_eq!(env["WEFT_SERVICE_HOSTS_KV_PRIMARY"], "h1");
        assert_eq!(env["WEFT_IP"], "127.77.0.1");
        assert_eq!(env["WEFT_ACTION"], "start");
        assert_eq!(env["WEFT_SERVICE"], "web");
        assert!(env["PATH"].starts_with("/n/.weft/scripts:"));
        assert!(!env.contains_key("WEFT_MEMBERS_BEFORE_IPS"));
    }

    #[test]
    fn a_join_sees_the_members_before_and_after_it() {
        let raw = json!({"taskId": "1-1-2", "clusterId": "1", "taskName": "JOIN", "nodeId": "n3",
            "config": {"service": {"name": "etcd", "action": {"type": "shell", "fields": {}}},
            "membership": {"service": "etcd", "change": "join", "node": "n3",
                "before": [{"id": "n1", "hostname": "h1", "ip": "10.0.0.1"}, {"id": "n2", "hostname": "h2", "ip": "10.0.0.2"}],
                "after": [{"id": "n1", "hostname": "h1", "ip": "10.0.0.1"}, {"id": "n2", "hostname": "h2", "ip": "10.0.0.2"},
                          {"id": "n3", "hostname": "h3", "ip": "10.0.0.3"}]}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        let env = script_env(&t, "/n", "/n/.weft/scripts", "/n/t.json");
        assert_eq!(env["WEFT_ACTION"], "join");
        assert_eq!(env["WEFT_MEMBERS_BEFORE_IPS"], "10.0.0.1,10.0.0.2");
        assert_eq!(env["WEFT_MEMBERS_BEFORE_HOSTS"], "h1,h2");
        assert_eq!(env["WEFT_MEMBERS_AFTER_IPS"], "10.0.0.1,10.0.0.2,10.0.0.3");
        assert_eq!(env["WEFT_MEMBERS_AFTER_HOSTS"], "h1,h2,h3");
    }
}
