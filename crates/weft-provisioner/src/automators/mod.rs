//! The automators that run a tool on the node, `ansible`, `puppet`, `chef-solo` and `docker`,
//! and what they share. Each runs its tool **on the node** (pull style: `ansible-playbook -c
//! local`, `puppet apply`, `chef-solo`, `docker run`) through the node's [`Transport`], so the
//! host key recorded at CONFIRM protects every connection and the provisioner needs none of the
//! tools installed.
//!
//! `docker` needs no code bundle and no variables (see its module); the others share:
//!
//! - **Code** comes in bundles: a live plugin resource of the task's tenant
//!   (`<resources>/<tenant>/automatortypes/<plugin>/<rtype>/<name>`, a synced tar.gz unpacked into a
//!   directory, or a file), else `<dir>/<rtype>/<name>` in one of the automator's own directories.
//!   `ship` copies a bundle to the node under a directory named by a hash of its content, so an
//!   unchanged bundle is copied once and a new version never mixes with an old one.
//! - **Variables**: [`weft_vars`] is what every tool sees of the task under one `weft` namespace:
//!   the action and its fields, the cluster config, this node, every node, and the addresses and
//!   hostnames of each service's nodes.
//! - **Running**: `run_tool` runs the tool with the task's time-out (the action's `timeout`
//!   field may shorten it) and bounded output, and turns its exit code into success, a retryable
//!   failure or a fatal one, with the output attached.

/// An automator that runs its tool on bundles: the struct, `new(dirs)`, `with_resources` and
/// `with_transports`, each with the doc given.
macro_rules! bundle_automator {
    ($(#[$doc:meta])* $name:ident, $new_doc:literal, $resources_doc:literal) => {
        $(#[$doc])*
        pub struct $name {
            base: Base,
        }

        impl $name {
            #[doc = $new_doc]
            pub fn new(dirs: Vec<PathBuf>) -> $name {
                $name {
                    base: Base::new(NAME, dirs),
                }
            }

            #[doc = $resources_doc]
            pub fn with_resources(mut self, root: PathBuf) -> $name {
                self.base.resources = Some(root);
                self
            }

            /// Reaches nodes through `t` instead of [`crate::shell::DefaultTransports`].
            pub fn with_transports(mut self, t: Arc<dyn TransportFactory>) -> $name {
                self.base.transports = t;
                self
            }
        }
    };
}

pub mod ansible;
pub mod chef;
pub mod docker;
pub mod puppet;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::shell::{DefaultTransports, TransportFactory};
use crate::task::{PluginError, PluginResult, Task, TaskOutput};
use crate::transport::{CommandSpec, Transport, TransportError};

pub(crate) use crate::descriptor::{field, plugin_type};
pub use ansible::AnsibleAutomator;
pub use chef::ChefSoloAutomator;
pub use docker::DockerAutomator;
pub use puppet::PuppetAutomator;

/// The most a bundle may hold (bytes, files): code, not data.
const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;
const MAX_BUNDLE_FILES: usize = 20_000;
/// The file that marks a bundle copied completely.
const COMPLETE: &str = ".weft-complete";
/// The `PATH` tools run with (their own directories are put first).
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where an automator finds code and how it reaches nodes.
#[derive(Clone)]
pub(crate) struct Base {
    plugin: &'static str,
    dirs: Vec<PathBuf>,
    resources: Option<PathBuf>,
    transports: Arc<dyn TransportFactory>,
    max_output: usize,
}

impl Base {
    fn new(plugin: &'static str, dirs: Vec<PathBuf>) -> Base {
        Base {
            plugin,
            dirs,
            resources: None,
            transports: Arc::new(DefaultTransports::default()),
            max_output: 64 * 1024,
        }
    }

    /// The directories holding bundles of `rtype` for `tenant`, in lookup order.
    fn roots(&self, tenant: &str, rtype: &str) -> Vec<PathBuf> {
        let mut roots = Vec::new();
        if let Some(r) = &self.resources {
            if valid_name(tenant) {
                roots.push(
                    r.join(tenant)
                        .join("automatortypes")
                        .join(self.plugin)
                        .join(rtype),
                );
            }
        }
        roots.extend(self.dirs.iter().map(|d| d.join(rtype)));
        roots
    }

    /// The bundle `name` of type `rtype` (a directory or a file).
    fn bundle(&self, tenant: &str, rtype: &str, name: &str) -> Result<PathBuf, PluginError> {
        if !valid_name(name) {
            return Err(PluginError::fatal(format!(
                "{}: {rtype} name {name:?} must be a plain name",
                self.plugin
            )));
        }
        self.roots(tenant, rtype)
            .into_iter()
            .map(|r| r.join(name))
            .find(|p| p.exists())
            .ok_or_else(|| {
                PluginError::not_found(format!(
                    "{}: no live {rtype} resource named {name}",
                    self.plugin
                ))
            })
    }

    /// Every bundle of type `rtype`, by name (the first root with a name wins).
    fn bundles(&self, tenant: &str, rtype: &str) -> BTreeMap<String, PathBuf> {
        let mut out = BTreeMap::new();
        for root in self.roots(tenant, rtype) {
            let Ok(rd) = std::fs::read_dir(&root) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if valid_name(&name) && e.path().exists() {
                    out.entry(name).or_insert_with(|| e.path());
                }
            }
        }
        out
    }

    /// The node's transport and this automator's directory on it.
    fn node(&self, task: &Task) -> Result<(Arc<dyn Transport>, String), PluginError> {
        let (t, node_dir) = self.transports.transport(task)?;
        Ok((t, format!("{node_dir}/.weft/{}", self.plugin)))
    }
}

/// A name from a task or a directory: no path, nothing hidden.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && !s.contains('/')
        && !s.contains('\0')
        && !s.chars().any(char::is_whitespace)
}

/// A path inside a bundle: relative, no `..`, nothing odd.
pub(crate) fn valid_relative(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('/')
        && !s.contains('\0')
        && !s.contains('\n')
        && s.split('/').all(|c| c != ".." && !c.is_empty())
}

/// A transport failure as a plugin error, keeping whether it is worth retrying.
pub(crate) fn transport_error(e: TransportError) -> PluginError {
    e.into()
}

/// One file of a bundle: its path under the bundle's directory, mode and bytes.
struct BundleFile {
    path: String,
    mode: u32,
    bytes: Vec<u8>,
}

/// Reads `parts` (a target path prefix and a local file or directory each) into files.
fn read_parts(parts: &[(String, PathBuf)]) -> Result<Vec<BundleFile>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut stack: Vec<(String, PathBuf)> = parts.to_vec();
    while let Some((rel, path)) = stack.pop() {
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            let rd = std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let sub = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                stack.push((sub, e.path()));
            }
        } else if meta.is_file() {
            total += meta.len();
            if total > MAX_BUNDLE_BYTES || files.len() >= MAX_BUNDLE_FILES {
                return Err(format!(
                    "the code is larger than {MAX_BUNDLE_BYTES} bytes or {MAX_BUNDLE_FILES} files"
                ));
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mode = meta.permissions().mode() & 0o755 | 0o600;
            files.push(BundleFile {
                path: rel,
                mode,
                bytes,
            });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// A short hash over every file's path, mode and content.
fn bundle_hash(files: &[BundleFile]) -> String {
    let mut h = Sha256::new();
    for f in files {
        h.update(f.path.as_bytes());
        h.update([0]);
        h.update(f.mode.to_be_bytes());
        h.update((f.bytes.len() as u64).to_be_bytes());
        h.update(&f.bytes);
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Copies `parts` to the node under `<remote>/<hash of the content>` unless a complete copy is
/// there already, and answers that directory and whether it copied anything.
pub(crate) async fn ship(
    t: &dyn Transport,
    parts: Vec<(String, PathBuf)>,
    remote: &str,
) -> Result<(String, bool), PluginError> {
    let files = tokio::task::spawn_blocking(move || read_parts(&parts))
        .await
        .map_err(|e| PluginError::retryable(format!("reading the code: {e}")))?
        .map_err(|e| PluginError::fatal(format!("reading the code: {e}")))?;
    let dir = format!("{remote}/{}", bundle_hash(&files));
    let check = CommandSpec {
        timeout: Duration::from_secs(60),
        ..CommandSpec::new(vec![
            "test".into(),
            "-f".into(),
            format!("{dir}/{COMPLETE}"),
        ])
    };
    if t.run(&check).await.map_err(transport_error)?.success() {
        return Ok((dir, false));
    }
    for f in &files {
        t.write_file(&format!("{dir}/{}", f.path), &f.bytes, f.mode)
            .await
            .map_err(transport_error)?;
    }
    t.write_file(&format!("{dir}/{COMPLETE}"), b"", 0o644)
        .await
        .map_err(transport_error)?;
    Ok((dir, true))
}

/// What every tool sees of a task, under `weft` (see the module doc and docs/automators.md).
pub fn weft_vars(task: &Task) -> Value {
    let fields: Map<String, Value> = task
        .action_fields()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let mut nodes: Vec<(u64, Value)> = Vec::new();
    let mut ips: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    let mut hosts: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (id, p) in task
        .config
        .get("nodes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let num = p.get("nodenum").and_then(Value::as_u64).unwrap_or(0);
        let ip = p
            .pointer("/ipaddresses/bind_v4")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let host = p
            .get("hostname")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let services = p.get("services").cloned().unwrap_or_else(|| json!([]));
        for s in services
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            ips.entry(s.into()).or_default().push((num, ip.clone()));
            hosts.entry(s.into()).or_default().push((num, host.clone()));
        }
        nodes.push((
            num,
            json!({"id": id, "nodenum": num, "hostname": host, "ip": ip, "services": services}),
        ));
    }
    nodes.sort_by(|a, b| (a.0, a.1["id"].as_str()).cmp(&(b.0, b.1["id"].as_str())));
    let ordered = |m: BTreeMap<String, Vec<(u64, String)>>| -> Map<String, Value> {
        m.into_iter()
            .map(|(k, mut v)| {
                v.sort();
                (k, json!(v.into_iter().map(|x| x.1).collect::<Vec<_>>()))
            })
            .collect()
    };
    json!({
        "action": task.action.lower(),
        "task_id": task.id,
        "cluster_id": task.cluster_id,
        "service": task.service_name().unwrap_or_default(),
        "fields": fields,
        "cluster": task.config.get("cluster").cloned().unwrap_or_else(|| json!({})),
        "node": {
            "id": task.node_id,
            "hostname": task.config_str("hostname").unwrap_or_default(),
            "ip": task.ip("bind_v4").unwrap_or_default(),
            "access_ip": task.ip("access_v4").unwrap_or_default(),
        },
        "nodes": nodes.into_iter().map(|n| n.1).collect::<Vec<_>>(),
        "service_ips": ordered(ips),
        "service_hosts": ordered(hosts),
    })
}

/// The task's time-out, shortened by the action's `timeout` field (seconds).
pub(crate) fn action_timeout(task: &Task, fields: &BTreeMap<String, String>) -> Duration {
    let mut timeout = task.timeout;
    if let Some(t) = fields.get("timeout").and_then(|t| t.trim().parse().ok()) {
        timeout = timeout.min(Duration::from_secs(t));
    }
    timeout
}

/// How a tool's exit code reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    /// Failed; running it again may help (a failed resource, a flaky download).
    Retry,
    /// Failed for good (the code does not parse, bad options).
    Fatal,
    /// Failed for good, for the reason given (what the exit code means, and what to do).
    Refused(&'static str),
}

/// Runs `cmd` for `tool` and judges its exit code with `judge`.
pub(crate) async fn run_tool(
    t: &dyn Transport,
    cmd: CommandSpec,
    tool: &str,
    judge: fn(i32) -> Verdict,
) -> PluginResult {
    let timeout = cmd.timeout;
    let out = t.run(&cmd).await.map_err(transport_error)?;
    let fail = |e: PluginError| Err(e.with_output(out.stdout.clone(), out.stderr.clone()));
    if out.timed_out {
        return fail(PluginError::timeout(format!(
            "{tool} timed out after {}s and was killed",
            timeout.as_secs_f64()
        )));
    }
    let Some(code) = out.exit else {
        return fail(PluginError::retryable(format!(
            "{tool} was killed by a signal"
        )));
    };
    match judge(code) {
        Verdict::Success => Ok(TaskOutput {
            stdout: out.stdout,
            stderr: out.stderr,
            ..Default::default()
        }),
        Verdict::Retry => fail(PluginError::retryable(format!("{tool} exited with {code}"))),
        Verdict::Fatal => fail(PluginError::fatal(format!(
            "{tool} exited with {code}: fix the code or the fields"
        ))),
        Verdict::Refused(why) => fail(PluginError::fatal(format!(
            "{tool} exited with {code}: {why}"
        ))),
    }
}

/// A shell script run on the node with `sh -c` and the task's time-out, e.g. to bootstrap.
pub(crate) fn script(text: &str, args: &[&str], path: &str, timeout: Duration) -> CommandSpec {
    let mut argv = vec!["sh".to_string(), "-c".into(), text.into(), "sh".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut cmd = CommandSpec::new(argv);
    cmd.env
        .insert("PATH".into(), format!("{path}:{SYSTEM_PATH}"));
    cmd.timeout = timeout;
    cmd
}

/// The first required set that `fields` covers (non-empty values), or a fatal error naming the
/// missing fields.
pub(crate) fn check_required(
    plugin: &str,
    fields: &BTreeMap<String, String>,
    required: &[&[&str]],
) -> Result<(), PluginError> {
    let have = |f: &&str| fields.get(*f).is_some_and(|v| !v.trim().is_empty());
    if required.iter().any(|set| set.iter().all(have)) {
        return Ok(());
    }
    let wanted: Vec<String> = required.iter().map(|set| set.join(" and ")).collect();
    Err(PluginError::fatal(format!(
        "{plugin}: the action needs the field(s) {}",
        wanted.join(", or ")
    )))
}

/// Reads an optional field holding a JSON object (`extra_vars`, `json_attributes`).
pub(crate) fn json_object_field(
    plugin: &str,
    fields: &BTreeMap<String, String>,
    name: &str,
) -> Result<Map<String, Value>, PluginError> {
    match fields.get(name).map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(Map::new()),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(PluginError::fatal(format!(
                "{plugin}: {name} must be a JSON object"
            ))),
        },
    }
}

/// `b` merged into `a`: objects key by key, anything else replaced.
pub(crate) fn deep_merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                deep_merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_paths_and_names_cannot_escape() {
        for ok in ["site.yml", "roles/kv/tasks/main.yml", "a.b/c"] {
            assert!(valid_relative(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "a\nb"] {
            assert!(!valid_relative(bad), "{bad:?}");
        }
        for bad in ["", ".hidden", "a/b", "a b", ".."] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn deep_merge_lets_the_second_win_key_by_key() {
        let mut a = json!({"kv": {"port": "7000", "mode": "a"}, "x": 1});
        deep_merge(&mut a, json!({"kv": {"port": "7001"}, "y": [1]}));
        assert_eq!(
            a,
            json!({"kv": {"port": "7001", "mode": "a"}, "x": 1, "y": [1]})
        );
    }

    #[test]
    fn the_weft_namespace_holds_fields_config_and_layout() {
        let raw = json!({"taskId": "1-1-1", "clusterId": "1", "taskName": "CONFIGURE", "nodeId": "n1",
            "config": {"cluster": {"kv": {"port": "7000"}},
            "service": {"name": "web", "action": {"type": "ansible", "fields": {"playbook": "web.yml"}}},
            "hostname": "h1", "ipaddresses": {"bind_v4": "10.0.0.1", "access_v4": "10.0.0.1"},
            "nodes": {"n1": {"nodenum": 1001, "hostname": "h1", "ipaddresses": {"bind_v4": "10.0.0.1"}, "services": ["web"]},
                      "n2": {"nodenum": 1000, "hostname": "h2", "ipaddresses": {"bind_v4": "10.0.0.2"}, "services": ["web", "kv"]}}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        let v = weft_vars(&t);
        assert_eq!(v["action"], "configure");
        assert_eq!(v["service"], "web");
        assert_eq!(v["fields"]["playbook"], "web.yml");
        assert_eq!(v["cluster"]["kv"]["port"], "7000");
        assert_eq!(v["node"]["ip"], "10.0.0.1");
        assert_eq!(
            v["nodes"][0]["hostname"], "h2",
            "nodes in node number order"
        );
        assert_eq!(v["service_ips"]["web"], json!(["10.0.0.2", "10.0.0.1"]));
        assert_eq!(v["service_hosts"]["kv"], json!(["h2"]));
    }

    #[test]
    fn a_required_set_is_covered_or_the_error_names_the_fields() {
        let f: BTreeMap<String, String> = [("resource".into(), "kv".into())].into();
        let req: &[&[&str]] = &[&["resource", "playbook"], &["resource", "role"]];
        let e = check_required("ansible", &f, req).unwrap_err();
        assert!(!e.retryable);
        assert_eq!(
            e.message,
            "ansible: the action needs the field(s) resource and playbook, or resource and role"
        );
        let mut g = f.clone();
        g.insert("role".into(), "kv".into());
        assert!(check_required("ansible", &g, req).is_ok());
    }
}
