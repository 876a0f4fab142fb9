//! The `docker` automator: runs a service as a container on the node, with the node's own
//! `docker` CLI, through the node's [`crate::transport::Transport`] (with `sudo` unless the SSH
//! user is root, as every command).
//!
//! Fields (admin, on the service action; Coopr's): `image_name` (required), `publish_ports`,
//! `environment_variables`, `volumes`, `links` (comma-separated lists) and `command`. Every field
//! is checked before anything runs ([`ContainerSpec::from_fields`]); a bad one is a fatal error
//! naming it. Commands are argument vectors, never shell text made from fields.
//!
//! - BOOTSTRAP checks that `docker` is on the node (fatal when it is not).
//! - INSTALL pulls the image, unless the engine has it already (`docker image inspect`). A pull
//!   refused for a missing image or repository is fatal; any other failure (the network) retries.
//! - CONFIGURE and INITIALIZE only check the fields.
//! - START runs `docker run -d --name weft-<service>-<node id> ...`. It is idempotent: a running
//!   container of that name made from the same fields (label `weft.container.spec`, a hash of the
//!   run arguments) is success; any other container of that name (stopped, half made by a start
//!   that failed, or made from other fields) is removed first. Host directories of `volumes` are
//!   made on the node. It answers `result.docker_containers.<service>` (`name`, `id`).
//! - STOP stops the container, REMOVE removes it; a container that is not there is success, and
//!   neither reads the fields, so a delete always completes.
//! - HEALTHCHECK: the container runs (and, when its image declares a health check, is healthy).
//!
//! Containers carry the labels `weft.container.{cluster,node,service,spec}`: not the docker
//! provider's `weft.node`, so a sweep never takes a service's container for a node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weft_model::{FailureReason, PluginType};

use super::{action_timeout, check_required, field, plugin_type, run_tool, Base, Verdict};
use crate::plugin::Automator;
use crate::shell::TransportFactory;
use crate::task::{Action, PluginError, PluginResult, Task, TaskOutput};
use crate::transport::{CommandOutput, CommandSpec, Transport};

/// The automator type name.
pub const NAME: &str = "docker";
/// The result key under which START records each service's container.
pub const RESULT_KEY: &str = "docker_containers";
/// The label holding the id of the cluster a service's container belongs to.
pub const LABEL_CLUSTER: &str = "weft.container.cluster";
/// The label holding the id of the node a service's container runs on.
pub const LABEL_NODE: &str = "weft.container.node";
/// The label holding the name of the service a container runs.
pub const LABEL_SERVICE: &str = "weft.container.service";
/// The label holding a hash of the container's run arguments: START keeps a running container
/// only when it matches.
pub const LABEL_SPEC: &str = "weft.container.spec";
const REQUIRED: &[&[&str]] = &[&["image_name"]];

/// A field an admin lets users override (Coopr's `override`).
fn overridable(mut f: weft_model::FieldSchema) -> weft_model::FieldSchema {
    f.r#override = true;
    f
}

/// Exits 3 when there is no `docker` on the node.
const BOOTSTRAP: &str = r#"if ! command -v docker >/dev/null 2>&1; then
  echo "docker is not on the node: use an image with the docker CLI and a running engine" >&2; exit 3
fi
echo "docker is on the node: $(command -v docker)"
docker --version
"#;

/// The `docker` automator.
pub struct DockerAutomator {
    base: Base,
}

impl Default for DockerAutomator {
    fn default() -> Self {
        DockerAutomator::new()
    }
}

impl DockerAutomator {
    /// The automator, reaching nodes through [`crate::shell::DefaultTransports`].
    pub fn new() -> DockerAutomator {
        DockerAutomator {
            base: Base::new(NAME, Vec::new()),
        }
    }

    /// Reaches nodes through `t` instead of [`crate::shell::DefaultTransports`].
    pub fn with_transports(mut self, t: Arc<dyn TransportFactory>) -> DockerAutomator {
        self.base.transports = t;
        self
    }

    /// Runs `docker <args>` on the node with the task's time-out and bounded output.
    async fn docker(
        &self,
        t: &dyn Transport,
        args: &[&str],
        timeout: Duration,
    ) -> Result<CommandOutput, PluginError> {
        let mut argv = vec!["docker".to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let mut cmd = CommandSpec::new(argv);
        cmd.timeout = timeout;
        cmd.max_output = self.base.max_output;
        cmd.env.insert("PATH".into(), super::SYSTEM_PATH.into());
        let out = t.run(&cmd).await.map_err(super::transport_error)?;
        if out.timed_out {
            return Err(PluginError::timeout(format!(
                "docker {} timed out after {}s and was killed",
                args.first().unwrap_or(&""),
                timeout.as_secs_f64()
            ))
            .with_output(out.stdout, out.stderr));
        }
        Ok(out)
    }

    /// What the engine has under `name`: nothing, or whether it runs and its spec label.
    async fn find(
        &self,
        t: &dyn Transport,
        name: &str,
        timeout: Duration,
    ) -> Result<Found, PluginError> {
        let format =
            format!("{{{{.State.Running}}}} {{{{index .Config.Labels \"{LABEL_SPEC}\"}}}}");
        let out = self
            .docker(
                t,
                &["container", "inspect", "--format", &format, name],
                timeout,
            )
            .await?;
        if out.success() {
            let text = out.stdout.trim();
            let (running, spec) = text.split_once(' ').unwrap_or((text, ""));
            return Ok(Found::Container {
                running: running == "true",
                spec: spec.trim().to_string(),
            });
        }
        if absent(&out) {
            return Ok(Found::Nothing);
        }
        Err(failed("docker container inspect", out))
    }

    /// Removes the container `name`; one that is not there is success.
    async fn remove_container(
        &self,
        t: &dyn Transport,
        name: &str,
        timeout: Duration,
    ) -> Result<bool, PluginError> {
        let out = self.docker(t, &["rm", "-f", name], timeout).await?;
        // `docker rm -f` of nothing exits 0 on some versions, 1 on others; both say so.
        match (out.success(), absent(&out)) {
            (_, true) => Ok(false),
            (true, false) => Ok(true),
            (false, false) => Err(failed("docker rm", out)),
        }
    }

    async fn install(&self, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        let spec = ContainerSpec::from_fields(&fields)?;
        let timeout = action_timeout(task, &fields);
        let (t, _) = self.base.node(task)?;
        let t = t.as_ref();
        let have = self
            .docker(
                t,
                &["image", "inspect", "--format", "{{.Id}}", &spec.image],
                timeout,
            )
            .await?;
        if have.success() {
            return Ok(TaskOutput {
                stdout: format!(
                    "image {} is on the node ({}): not pulled\n",
                    spec.image,
                    have.stdout.trim()
                ),
                ..Default::default()
            });
        }
        let out = self.docker(t, &["pull", &spec.image], timeout).await?;
        if out.success() {
            return Ok(TaskOutput {
                stdout: out.stdout,
                stderr: out.stderr,
                ..Default::default()
            });
        }
        let reason = pull_failure(&out.stderr);
        let retryable = reason.retryable_by_default();
        Err(PluginError::new(
            reason,
            format!("docker pull {} failed{}", spec.image, hint(reason)),
        )
        .retryable_if(retryable)
        .with_output(out.stdout, out.stderr))
    }

    async fn start(&self, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        let spec = ContainerSpec::from_fields(&fields)?;
        let name = container_name(task)?;
        let timeout = action_timeout(task, &fields);
        let (t, _) = self.base.node(task)?;
        let t = t.as_ref();
        let hash = spec.hash();
        let mut log = String::new();
        match self.find(t, &name, timeout).await? {
            Found::Container {
                running: true,
                spec: label,
            } if label == hash => {
                log.push_str(&format!("container {name} runs already\n"));
                return self.started(t, task, &name, log, timeout).await;
            }
            Found::Container { running, .. } => {
                tracing::info!(task_id = %task.id, cluster_id = %task.cluster_id, container = %name,
                    running, "replacing a container made from other fields or left by a failed start");
                self.remove_container(t, &name, timeout).await?;
                let was = if running { "running" } else { "stopped" };
                log.push_str(&format!(
                    "removed the {was} container {name} made from other fields or left by a failed start\n"
                ));
            }
            Found::Nothing => {}
        }
        let dirs = spec.host_dirs();
        if !dirs.is_empty() {
            let mut argv = vec!["mkdir".to_string(), "-p".into(), "--".into()];
            argv.extend(dirs);
            let cmd = CommandSpec {
                timeout,
                ..CommandSpec::new(argv)
            };
            run_tool(t, cmd, "mkdir (volumes)", |c| match c {
                0 => Verdict::Success,
                _ => Verdict::Retry,
            })
            .await?;
        }
        let labels = [
            (LABEL_CLUSTER, task.cluster_id.as_str()),
            (LABEL_NODE, task.node_id.as_str()),
            (LABEL_SERVICE, task.service_name().unwrap_or_default()),
            (LABEL_SPEC, hash.as_str()),
        ];
        let argv = spec.run_args(&name, &labels);
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self.docker(t, &args, timeout).await?;
        if !out.success() {
            // A container made but not started (a port in use, a command not found) goes now.
            let _ = self.remove_container(t, &name, timeout).await;
            return Err(run_failure(out));
        }
        log.push_str(&format!("started container {name}: {}", out.stdout));
        self.started(t, task, &name, log, timeout).await
    }

    /// START's answer: the log, and the container's name and id under `result`.
    async fn started(
        &self,
        t: &dyn Transport,
        task: &Task,
        name: &str,
        stdout: String,
        timeout: Duration,
    ) -> PluginResult {
        let out = self
            .docker(
                t,
                &["container", "inspect", "--format", "{{.Id}}", name],
                timeout,
            )
            .await?;
        if !out.success() {
            return Err(failed("docker container inspect", out));
        }
        let mut all = task
            .config
            .get(RESULT_KEY)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        all.insert(
            task.service_name().unwrap_or_default().to_string(),
            json!({"name": name, "id": out.stdout.trim()}),
        );
        let mut done = TaskOutput {
            stdout,
            ..Default::default()
        };
        done.result.insert(RESULT_KEY.into(), Value::Object(all));
        Ok(done)
    }

    /// STOP (`remove` false) or REMOVE: a container that is not there is success.
    async fn stop_or_remove(&self, task: &Task, remove: bool) -> PluginResult {
        let name = container_name(task)?;
        let timeout = action_timeout(task, &task.action_fields());
        let (t, _) = self.base.node(task)?;
        let stdout = if remove {
            match self.remove_container(t.as_ref(), &name, timeout).await? {
                true => format!("removed container {name}\n"),
                false => format!("no container {name}: nothing to remove\n"),
            }
        } else {
            let out = self.docker(t.as_ref(), &["stop", &name], timeout).await?;
            match (out.success(), absent(&out)) {
                (true, _) => format!("stopped container {name}\n"),
                (false, true) => format!("no container {name}: nothing to stop\n"),
                (false, false) => return Err(failed("docker stop", out)),
            }
        };
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }

    /// One try of the health check: the container runs and is not unhealthy.
    async fn check(&self, task: &Task) -> PluginResult {
        let name = container_name(task)?;
        let (t, _) = self.base.node(task)?;
        let format = "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}";
        let out = self
            .docker(
                t.as_ref(),
                &["container", "inspect", "--format", format, &name],
                task.timeout,
            )
            .await?;
        if !out.success() {
            let why = if absent(&out) {
                "is not there"
            } else {
                "cannot be inspected"
            };
            return Err(PluginError::retryable(format!("container {name} {why}"))
                .with_output(out.stdout, out.stderr));
        }
        let state = out.stdout.trim().to_string();
        match state.split_once(' ').unwrap_or((state.as_str(), "")) {
            ("running", "" | "healthy") => Ok(TaskOutput {
                stdout: format!("container {name}: {state}\n"),
                ..Default::default()
            }),
            _ => Err(PluginError::retryable(format!("container {name}: {state}"))),
        }
    }
}

/// What the engine holds under a container name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    Nothing,
    Container { running: bool, spec: String },
}

/// Whether a failed docker command said the container is not there.
fn absent(out: &CommandOutput) -> bool {
    let e = out.stderr.to_ascii_lowercase();
    e.contains("no such container") || e.contains("no such object")
}

/// A docker command that failed in a way a retry may fix (the engine down, a busy daemon).
fn failed(what: &str, out: CommandOutput) -> PluginError {
    let code = out
        .exit
        .map_or_else(|| "a signal".to_string(), |c| c.to_string());
    PluginError::retryable(format!("{what} exited with {code}")).with_output(out.stdout, out.stderr)
}

/// Why `docker pull` failed, from what it said: an image or repository that is not there (or
/// refused without credentials) will not be there on a retry; anything else is taken for the
/// network.
pub fn pull_failure(stderr: &str) -> FailureReason {
    let e = stderr.to_ascii_lowercase();
    let missing = [
        "manifest unknown",
        "not found",
        "repository does not exist",
        "pull access denied",
        "invalid reference format",
    ];
    if missing.iter().any(|m| e.contains(m)) {
        FailureReason::NotFound
    } else if e.contains("unauthorized") || e.contains("authentication required") {
        FailureReason::Auth
    } else {
        FailureReason::Network
    }
}

fn hint(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::NotFound => ": the image or its repository does not exist",
        FailureReason::Auth => ": the registry refused the credentials",
        _ => "",
    }
}

/// A failed `docker run`: 126 and 127 are a command the image cannot run (the `command` field);
/// an image that cannot be found is fatal as for a pull; a port in use (reason `capacity`) and the
/// rest (a name taken by a start running at the same time, the engine) may pass on a retry.
fn run_failure(out: CommandOutput) -> PluginError {
    let code = out
        .exit
        .map_or_else(|| "a signal".to_string(), |c| c.to_string());
    let message = format!("docker run exited with {code}");
    let busy = ["port is already allocated", "address already in use"];
    let e = match out.exit {
        Some(126 | 127) => PluginError::fatal(format!(
            "{message}: the image cannot run the command (fields.command)"
        )),
        _ if busy.iter().any(|b| out.stderr.contains(b)) => PluginError::new(
            FailureReason::Capacity,
            format!("{message}: a published port is in use on the node"),
        ),
        _ => match pull_failure(&out.stderr) {
            FailureReason::Network => PluginError::retryable(message),
            reason => {
                PluginError::new(reason, format!("{message}{}", hint(reason))).retryable_if(false)
            }
        },
    };
    e.with_output(out.stdout, out.stderr)
}

/// The container of the task's service on its node: `weft-<service>-<node id>`, each part
/// reduced to the characters docker allows in names.
pub fn container_name(task: &Task) -> Result<String, PluginError> {
    let service = task
        .service_name()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| PluginError::fatal("docker: the task names no service"))?;
    let clean = crate::docker::name_part;
    let mut name = format!("weft-{}", clean(service));
    if !task.node_id.is_empty() {
        name.push('-');
        name.push_str(&clean(&task.node_id));
    }
    Ok(name)
}

/// One published port: `port` (the same port on the node) or `host:container`, with an optional
/// `/tcp` or `/udp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The port on the node.
    pub host: u16,
    /// The port in the container.
    pub container: u16,
    /// UDP (`/udp`) rather than TCP.
    pub udp: bool,
}

/// A bind mount: absolute paths on the node and in the container, read-only or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The absolute path on the node (made by START if missing).
    pub host: String,
    /// The absolute path in the container.
    pub container: String,
    /// `ro` or `rw`; `None` leaves docker's default (read-write).
    pub mode: Option<String>,
}

/// The container the fields describe, every part checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The image to run (`image_name`).
    pub image: String,
    /// The published ports (`publish_ports`).
    pub ports: Vec<Port>,
    /// The container's environment, name and value (`environment_variables`).
    pub env: Vec<(String, String)>,
    /// The bind mounts (`volumes`).
    pub volumes: Vec<Volume>,
    /// Other containers to link, `container[:alias]` (`links`).
    pub links: Vec<String>,
    /// The command and its arguments, split as a shell would without running one (`command`);
    /// empty runs the image's own.
    pub command: Vec<String>,
}

/// A fatal error naming the field: `fields.publish_ports: 70000 is not a port`.
fn bad(field: &str, what: impl std::fmt::Display) -> PluginError {
    PluginError::fatal(format!("fields.{field}: {what}"))
}

/// The items of a comma-separated field, trimmed, empty ones dropped.
fn items(fields: &BTreeMap<String, String>, name: &str) -> Vec<String> {
    fields
        .get(name)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// No control characters (a newline, a NUL, an escape) anywhere in a field.
fn no_controls(field: &str, v: &str) -> Result<(), PluginError> {
    match v.chars().find(|c| c.is_control()) {
        Some(c) => Err(bad(field, format!("{c:?} is not allowed"))),
        None => Ok(()),
    }
}

impl ContainerSpec {
    /// Reads and checks the action's fields (see the module doc and docs/automators.md).
    pub fn from_fields(fields: &BTreeMap<String, String>) -> Result<ContainerSpec, PluginError> {
        check_required(NAME, fields, REQUIRED)?;
        for (k, v) in fields {
            no_controls(k, v)?;
        }
        let image = fields
            .get("image_name")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        check_image(&image)?;
        let ports = items(fields, "publish_ports")
            .iter()
            .map(|p| parse_port(p))
            .collect::<Result<_, _>>()?;
        let env = items(fields, "environment_variables")
            .iter()
            .map(|e| parse_env(e))
            .collect::<Result<_, _>>()?;
        let volumes = items(fields, "volumes")
            .iter()
            .map(|v| parse_volume(v))
            .collect::<Result<_, _>>()?;
        let links = items(fields, "links");
        for l in &links {
            check_link(l)?;
        }
        let command = split_words(fields.get("command").map(String::as_str).unwrap_or(""))
            .map_err(|e| bad("command", e))?;
        Ok(ContainerSpec {
            image,
            ports,
            env,
            volumes,
            links,
            command,
        })
    }

    /// `docker run -d --name <name> --label k=v... -p -e -v --link... <image> <command...>`.
    pub fn run_args(&self, name: &str, labels: &[(&str, &str)]) -> Vec<String> {
        let mut a: Vec<String> = ["run", "-d", "--name", name].map(String::from).into();
        for (k, v) in labels {
            a.extend(["--label".into(), format!("{k}={v}")]);
        }
        for p in &self.ports {
            let proto = if p.udp { "/udp" } else { "" };
            a.extend(["-p".into(), format!("{}:{}{proto}", p.host, p.container)]);
        }
        for (k, v) in &self.env {
            a.extend(["-e".into(), format!("{k}={v}")]);
        }
        for v in &self.volumes {
            let mode = v.mode.as_ref().map(|m| format!(":{m}")).unwrap_or_default();
            a.extend(["-v".into(), format!("{}:{}{mode}", v.host, v.container)]);
        }
        for l in &self.links {
            a.extend(["--link".into(), l.clone()]);
        }
        a.push(self.image.clone());
        a.extend(self.command.iter().cloned());
        a
    }

    /// A short hash of what the container is made from (not its name or labels).
    pub fn hash(&self) -> String {
        let args = self.run_args("", &[]);
        let mut h = Sha256::new();
        for a in &args {
            h.update((a.len() as u64).to_be_bytes());
            h.update(a.as_bytes());
        }
        h.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The host directories of the volumes, made on the node before the container starts.
    pub fn host_dirs(&self) -> Vec<String> {
        self.volumes.iter().map(|v| v.host.clone()).collect()
    }
}

/// A docker image reference: `[registry[:port]/]path[:tag][@algorithm:hex]`, the path in lower
/// case (components of `[a-z0-9]` joined by `.`, `_`, `__` or dashes), no more than 255
/// characters; nothing that could read as an option or a shell word.
pub fn check_image(image: &str) -> Result<(), PluginError> {
    let err = |why: &str| bad("image_name", format!("{image:?} {why}"));
    if image.is_empty() {
        return Err(err("is empty"));
    }
    if image.len() > 255 {
        return Err(err("is longer than 255 characters"));
    }
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let (alg, hex) = d.split_once(':').ok_or_else(|| err("has a bad digest"))?;
        let alg_ok = alg.split(['+', '.', '_', '-']).all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
        if !alg_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(err("has a bad digest"));
        }
    }
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let ok = t.len() <= 128
            && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !ok {
            return Err(err("has a bad tag"));
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 {
        let first = parts[0];
        if first.contains(['.', ':']) || first == "localhost" {
            if !valid_registry(first) {
                return Err(err("has a bad registry"));
            }
            parts.remove(0);
        }
    }
    if !parts.iter().all(|p| valid_path_component(p)) {
        return Err(err(
            "is not an image name ([registry/]name[:tag][@digest], lower case)",
        ));
    }
    Ok(())
}

/// `host[:port]`: DNS labels (letters, digits, inner dashes) joined by dots.
fn valid_registry(s: &str) -> bool {
    let (host, port) = match s.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    let host_ok = host.split('.').all(|l| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    host_ok && port_ok
}

/// `[a-z0-9]+` runs joined by one `.`, one or two `_`, or any number of `-`.
fn valid_path_component(p: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = p.as_bytes();
    if b.is_empty() || !alnum(b[0] as char) || !alnum(b[b.len() - 1] as char) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if alnum(c) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i] as char) {
            i += 1;
        }
        let sep = &p[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.chars().all(|c| c == '-');
        if !ok {
            return false;
        }
    }
    true
}

fn port_number(s: &str) -> Option<u16> {
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) || s.len() > 5 {
        return None;
    }
    s.parse::<u16>().ok().filter(|&n| n > 0)
}

/// `port`, `host:container`, each optionally with `/tcp` or `/udp`.
pub fn parse_port(s: &str) -> Result<Port, PluginError> {
    let (ports, udp) = match s.rsplit_once('/') {
        Some((p, "tcp")) => (p, false),
        Some((p, "udp")) => (p, true),
        Some((_, proto)) => {
            return Err(bad(
                "publish_ports",
                format!("{s}: protocol {proto} is not tcp or udp"),
            ))
        }
        None => (s, false),
    };
    let num =
        |p: &str| port_number(p).ok_or_else(|| bad("publish_ports", format!("{p} is not a port")));
    match ports.split(':').collect::<Vec<_>>()[..] {
        [one] => {
            let n = num(one)?;
            Ok(Port {
                host: n,
                container: n,
                udp,
            })
        }
        [host, container] => Ok(Port {
            host: num(host)?,
            container: num(container)?,
            udp,
        }),
        _ => Err(bad(
            "publish_ports",
            format!("{s} is not port or host:container"),
        )),
    }
}

/// `NAME=value`, NAME a shell identifier.
pub fn parse_env(s: &str) -> Result<(String, String), PluginError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| bad("environment_variables", format!("{s:?} is not NAME=value")))?;
    let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(bad(
            "environment_variables",
            format!("{k:?} is not a variable name"),
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// An absolute path of letters, digits and `/._-+@%=~`, without `..`.
fn valid_abs_path(p: &str) -> bool {
    p.starts_with('/')
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@%=~".contains(c))
        && p.split('/').all(|c| c != "..")
}

/// `/host:/container` or `/host:/container:ro|rw`.
pub fn parse_volume(s: &str) -> Result<Volume, PluginError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (host, container, mode) = match parts[..] {
        [h, c] => (h, c, None),
        [h, c, m @ ("ro" | "rw")] => (h, c, Some(m.to_string())),
        _ => {
            return Err(bad(
                "volumes",
                format!("{s:?} is not /host:/container[:ro|rw]"),
            ))
        }
    };
    for p in [host, container] {
        if !valid_abs_path(p) {
            return Err(bad(
                "volumes",
                format!("{p:?} is not an absolute path (letters, digits, /._-+@%=~; no ..)"),
            ));
        }
    }
    Ok(Volume {
        host: host.to_string(),
        container: container.to_string(),
        mode,
    })
}

/// `container[:alias]`: container names as docker allows them.
fn check_link(s: &str) -> Result<(), PluginError> {
    let name = |n: &str| {
        n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    };
    let ok = match s.split_once(':') {
        Some((c, alias)) => name(c) && name(alias),
        None => name(s),
    };
    if ok {
        Ok(())
    } else {
        Err(bad("links", format!("{s:?} is not container[:alias]")))
    }
}

/// Splits `command` into words as a shell would, without expanding anything: white space
/// separates words, `'...'` keeps everything, `"..."` keeps everything but `\"` and `\\`, and `\`
/// outside quotes keeps the next character.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("a ' is not closed".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err("a \" is not closed".into()),
                        },
                        Some(c) => w.push(c),
                        None => return Err("a \" is not closed".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err("it ends with a \\".into()),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

#[async_trait]
impl Automator for DockerAutomator {
    fn plugin_type(&self) -> PluginType {
        plugin_type(
            NAME,
            "Docker",
            "runs the service as a Docker container on the node",
            &[
                ("image_name", field("image name", "the image name")),
                (
                    "publish_ports",
                    overridable(field(
                        "ports to publish",
                        "comma-separated: port (the same on the node) or host:container, /udp for UDP",
                    )),
                ),
                (
                    "environment_variables",
                    field("environment", "comma-separated NAME=value"),
                ),
                (
                    "volumes",
                    field(
                        "volumes",
                        "comma-separated /host/dir:/container/dir[:ro] (host directories are made)",
                    ),
                ),
                (
                    "links",
                    field("links", "comma-separated container[:alias]"),
                ),
                (
                    "command",
                    overridable(field(
                        "command",
                        "the command the container runs (after the image)",
                    )),
                ),
                (
                    "timeout",
                    field("time-out", "seconds before a docker command is killed"),
                ),
            ],
            REQUIRED,
            &[],
        )
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (t, _) = self.base.node(task)?;
        let cmd = super::script(BOOTSTRAP, &[], "/usr/local/bin", task.timeout);
        match run_tool(t.as_ref(), cmd, "looking for docker", |c| match c {
            0 => Verdict::Success,
            3 => Verdict::Fatal,
            _ => Verdict::Retry,
        })
        .await
        {
            Err(e) if !e.retryable => Err(PluginError::not_found(
                "docker is not on the node: the node's image needs the docker CLI and an engine",
            )
            .with_output(e.stdout, e.stderr)),
            other => other,
        }
    }

    async fn service_action(&self, action: Action, task: &Task) -> PluginResult {
        match action {
            Action::Install => self.install(task).await,
            Action::Start => self.start(task).await,
            Action::Stop => self.stop_or_remove(task, false).await,
            Action::Remove => self.stop_or_remove(task, true).await,
            Action::Healthcheck => self.check(task).await,
            _ => {
                let spec = ContainerSpec::from_fields(&task.action_fields())?;
                Ok(TaskOutput {
                    stdout: format!(
                        "{}: nothing to do for image {}\n",
                        action.lower(),
                        spec.image
                    ),
                    ..Default::default()
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_is_judged_by_its_exit_and_what_docker_said() {
        let out = |exit, stderr: &str| CommandOutput {
            exit: Some(exit),
            stderr: stderr.into(),
            ..Default::default()
        };
        let e = run_failure(out(
            127,
            "exec: \"nosuch\": executable file not found in $PATH",
        ));
        assert!(
            !e.retryable && e.message.contains("fields.command"),
            "{e:?}"
        );
        let e = run_failure(out(
            125,
            "Bind for 0.0.0.0:8080 failed: port is already allocated",
        ));
        assert!(e.retryable && e.reason == FailureReason::Capacity, "{e:?}");
        let e = run_failure(out(
            125,
            "pull access denied for nosuch, repository does not exist",
        ));
        assert!(!e.retryable && e.reason == FailureReason::NotFound, "{e:?}");
        let e = run_failure(out(125, "Cannot connect to the Docker daemon"));
        assert!(e.retryable, "{e:?}");
    }
}
