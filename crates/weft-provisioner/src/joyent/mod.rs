//! The `joyent` provider: a node is a Triton machine (CloudAPI), reached over SSH.
//!
//! - **Credentials**: the admin fields `endpoint` (the data center's CloudAPI URL), `login` (the
//!   account) and the sensitive `key` (the private half of an SSH key of the account, OpenSSH or
//!   PEM, RSA or ed25519). Every request is signed over its `Date` header ([`sign`]); the key is
//!   named by its MD5 fingerprint unless the field `key_id` names it otherwise.
//! - **Name**: the machine is named after the node (`weft-<node id>`) and tagged `weft-node` and
//!   `weft-cluster`. CREATE lists machines of that name first (`GET /:login/machines?name=`) and
//!   takes over this node's; otherwise it creates one (`POST /:login/machines` with image,
//!   package, name, tags and metadata). A create refused because the name is taken (an earlier,
//!   killed try made it) is followed by another look-up, so a retried CREATE never makes a second
//!   machine. A machine of that name found `failed` is deleted and the CREATE fails retryably.
//! - **Machine**: package from the hardware type's `flavor` (else the field `package`), image
//!   from the image type's `image` (else the field `image`): a UUID, or a name that stands for the
//!   newest active image of that name (`GET /:login/images?name=`); optional `networks` (comma
//!   separated UUIDs). The cluster's SSH key goes into the `root_authorized_keys` metadata; the
//!   login user is the image type's `sshuser` (default `root`). The key is the per-cluster
//!   ed25519 key of the docker provider, derived from the sensitive field `sshkeyseed`, else from
//!   the account key's fingerprint and login, so every provisioner derives the same key.
//! - **CONFIRM** waits while the machine is `provisioning` until it is `running`: `primaryIp` is
//!   `access_v4`, the first private address in `ips` is `bind_v4` (else `primaryIp`).
//! - **DELETE** deletes the machine and waits until it is gone; 404 and 410 are success.
//! - **Errors**: 5xx, 429, 420 (CloudAPI's "Slow Down") and `RequestThrottled` are retried with
//!   back-off; auth, quota and bad parameters fail at once with CloudAPI's code and message.

pub mod cloudapi;
pub mod sign;

use std::net::Ipv4Addr;
use std::time::Duration;

use async_trait::async_trait;
use russh::keys::ssh_key::LineEnding;
use serde_json::{json, Map, Value};
use weft_model::{FieldSchema, ParamSpec, ParameterType, PluginType};

use crate::cloud::{poll_until, with_retries, CloudError, Poll};
pub use crate::google::Timing;
use crate::plugin::Provider;
use crate::ssh;
use crate::task::{PluginError, PluginResult, Task, TaskOutput};
use cloudapi::{Account, CLOUD};
use sign::AccountKey;

/// The provider type name.
pub const NAME: &str = "joyent";
/// The tag carrying the node id.
pub const TAG_NODE: &str = "weft-node";
/// The tag carrying the cluster id.
pub const TAG_CLUSTER: &str = "weft-cluster";
/// The user the cluster key logs in as unless the image type names an `sshuser`.
pub const DEFAULT_SSH_USER: &str = "root";

/// The `joyent` provider.
pub struct JoyentProvider {
    http: reqwest::Client,
    timing: Timing,
}

impl std::fmt::Debug for JoyentProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoyentProvider")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl Default for JoyentProvider {
    fn default() -> JoyentProvider {
        JoyentProvider::new()
    }
}

fn field(fields: &Map<String, Value>, name: &str) -> Option<String> {
    fields
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The machine name of a node: `weft-<node id>`, characters Triton does not allow as `-`.
pub fn machine_name(node_id: &str) -> String {
    let clean: String = node_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(180)
        .collect();
    format!("weft-{clean}")
}

/// A machine id as CloudAPI gives them (a UUID).
fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// A UUID (`8-4-4-4-12` hex digits), as image ids are.
fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The first private (RFC 1918) IPv4 address of a list.
fn private_ip(ips: &[String]) -> Option<String> {
    ips.iter()
        .find(|ip| ip.parse::<Ipv4Addr>().is_ok_and(|a| a.is_private()))
        .cloned()
}

/// `(access, bind)` of a running machine.
fn addresses(m: &Value) -> Option<(String, String)> {
    let ips: Vec<String> = m
        .get("ips")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let primary = m
        .get("primaryIp")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| ips.first().cloned())?;
    let bind = private_ip(&ips).unwrap_or_else(|| primary.clone());
    Some((primary, bind))
}

fn providerid(task: &Task) -> Option<String> {
    task.config_str("providerid")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The fields every action needs, read and checked.
struct Target {
    key: AccountKey,
    endpoint: String,
    login: String,
    fields: Map<String, Value>,
}

impl Target {
    fn read(task: &Task) -> Result<Target, PluginError> {
        let fields = task.provider_fields();
        let need = |name: &str| {
            field(&fields, name)
                .ok_or_else(|| PluginError::fatal(format!("provider field {name} is missing")))
        };
        let endpoint = need("endpoint")?;
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err(PluginError::fatal(format!(
                "provider field endpoint {endpoint:?} is not an http(s) URL"
            )));
        }
        let login = need("login")?;
        let key = AccountKey::from_text(&need("key")?).map_err(PluginError::fatal)?;
        Ok(Target {
            key,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            login,
            fields,
        })
    }
}

fn machine_problem(message: String) -> CloudError {
    CloudError::from_status(CLOUD, 400, "MachineState", message, None)
}

fn text_field(label: &str, tip: &str, sensitive: bool) -> FieldSchema {
    FieldSchema {
        label: label.into(),
        field_type: if sensitive { "password" } else { "text" }.into(),
        tip: Some(tip.into()),
        sensitive,
        ..Default::default()
    }
}

impl JoyentProvider {
    pub fn new() -> JoyentProvider {
        JoyentProvider {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap_or_default(),
            timing: Timing::default(),
        }
    }

    /// How long to wait between tries (tests use milliseconds).
    pub fn with_timing(mut self, timing: Timing) -> JoyentProvider {
        self.timing = timing;
        self
    }

    fn account<'a>(&'a self, t: &'a Target) -> Account<'a> {
        Account {
            http: &self.http,
            key: &t.key,
            endpoint: t.endpoint.clone(),
            login: t.login.clone(),
            key_id: field(&t.fields, "key_id"),
        }
    }

    fn calls(&self, task: &Task) -> crate::cloud::Backoff {
        crate::cloud::Backoff::new(
            self.timing.first,
            self.timing.max,
            self.timing.calls.min(task.timeout),
        )
    }

    fn wait(&self, task: &Task) -> crate::cloud::Backoff {
        crate::cloud::Backoff::new(
            self.timing.first,
            self.timing.max,
            self.timing.wait.min(task.timeout),
        )
    }

    /// This node's machine named `name`, if there is one; a machine of that name that is not
    /// this node's is an error.
    async fn find_own(
        &self,
        task: &Task,
        api: &Account<'_>,
        name: &str,
    ) -> Result<Option<Value>, PluginError> {
        let list = with_retries(self.calls(task), || api.machines_named(name)).await?;
        let Some(m) = list
            .into_iter()
            .find(|m| m.get("name").and_then(Value::as_str) == Some(name))
        else {
            return Ok(None);
        };
        let tag = m
            .get("tags")
            .and_then(|t| t.get(TAG_NODE))
            .and_then(Value::as_str);
        if tag != Some(task.node_id.as_str()) {
            return Err(PluginError::fatal(format!(
                "machine {name} exists and was not made by weft for node {}",
                task.node_id
            )));
        }
        Ok(Some(m))
    }

    /// The CreateMachine body.
    fn machine_body(
        &self,
        task: &Task,
        t: &Target,
        name: &str,
        public_key: &str,
    ) -> Result<Value, PluginError> {
        let pick = |config: &str, fallback: &str, what: &str| {
            task.config_str(config)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .or_else(|| field(&t.fields, fallback))
                .ok_or_else(|| {
                    PluginError::fatal(format!(
                        "no {what}: give the {} type a joyent {config} (providermap) or the \
                         provider a {fallback}",
                        if config == "flavor" {
                            "hardware"
                        } else {
                            "image"
                        }
                    ))
                })
        };
        let mut body = json!({
            "name": name,
            "image": pick("image", "image", "image")?,
            "package": pick("flavor", "package", "package")?,
            "metadata.root_authorized_keys": public_key,
            format!("tag.{TAG_NODE}"): task.node_id,
            format!("tag.{TAG_CLUSTER}"): task.cluster_id,
        });
        if let Some(nets) = field(&t.fields, "networks") {
            let nets: Vec<&str> = nets
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            body["networks"] = json!(nets);
        }
        Ok(body)
    }

    /// Makes the machine or finds the one an earlier try made; answers it and what happened.
    async fn make_or_take(
        &self,
        task: &Task,
        api: &Account<'_>,
        name: &str,
        body: &Value,
    ) -> Result<(Value, String), PluginError> {
        if let Some(m) = self.find_own(task, api, name).await? {
            return Ok((m, format!("machine {name} exists: taking it over\n")));
        }
        match with_retries(self.calls(task), || api.create_machine(body)).await {
            Ok(m) => {
                tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                    machine = %name, "machine created");
                Ok((m, format!("machine {name} created\n")))
            }
            // The name is taken: an earlier try made it (or is making it).
            Err(e) if e.status == 409 => match self.find_own(task, api, name).await? {
                Some(m) => Ok((
                    m,
                    format!("machine {name} already exists: taking it over\n"),
                )),
                None => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes machine `id` and waits until it is gone; answers whether it existed.
    async fn delete_and_wait(
        &self,
        task: &Task,
        api: &Account<'_>,
        id: &str,
    ) -> Result<bool, PluginError> {
        let existed = with_retries(self.calls(task), || api.delete_machine(id)).await?;
        if existed {
            poll_until(
                &format!("machine {id} gone"),
                self.wait(task),
                || async move {
                    Ok(match api.get_machine(id).await? {
                        None => Poll::Ready(()),
                        Some(m) => Poll::Pending(
                            m.get("state")
                                .and_then(Value::as_str)
                                .unwrap_or("unknown")
                                .to_string(),
                        ),
                    })
                },
            )
            .await?;
        }
        Ok(existed)
    }
}

#[async_trait]
impl Provider for JoyentProvider {
    fn plugin_type(&self) -> PluginType {
        let admin = ParamSpec {
            fields: [
                ("endpoint", text_field("CloudAPI endpoint",
                    "the data center's CloudAPI URL, e.g. https://us-central-1.api.mnx.io", false)),
                ("login", text_field("Account", "the account's login name", false)),
                ("key", text_field("Account SSH key",
                    "the private half of an SSH key of the account (OpenSSH or PEM, RSA or ed25519, not encrypted)", true)),
                ("key_id", text_field("Key id",
                    "how CloudAPI names the key (default: its MD5 fingerprint)", false)),
                ("package", text_field("Package",
                    "the package when the hardware type has no joyent flavor", false)),
                ("image", text_field("Image",
                    "the image (UUID, or name for the newest active image of that name) when the image type has none", false)),
                ("networks", text_field("Networks", "network UUIDs, comma separated (default: the package's)", false)),
                ("sshkeyseed", text_field("SSH key seed",
                    "a secret from which each cluster's SSH key is derived (default: derived from the account key)", true)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            required: vec![["endpoint", "login", "key"]
                .into_iter()
                .map(str::to_string)
                .collect()],
        };
        PluginType {
            name: NAME.into(),
            label: Some("Joyent Triton".into()),
            description: Some(
                "nodes are Triton machines (CloudAPI), one per node, reached over SSH".into(),
            ),
            icon: None,
            version: 1,
            classname: None,
            parameters: [
                (ParameterType::Admin, admin),
                (ParameterType::User, ParamSpec::default()),
            ]
            .into(),
            resource_types: Default::default(),
        }
    }

    async fn create(&self, task: &Task) -> PluginResult {
        if task.node_id.is_empty() {
            return Err(PluginError::fatal("create: the task names no node"));
        }
        let t = Target::read(task)?;
        let api = self.account(&t);
        let name = machine_name(&task.node_id);
        let user = task
            .config_str("sshuser")
            .filter(|u| !u.trim().is_empty())
            .unwrap_or(DEFAULT_SSH_USER)
            .to_string();
        let seed = field(&t.fields, "sshkeyseed")
            .map(|s| format!("joyent:{s}"))
            .unwrap_or_else(|| format!("joyent-key:{}:{}", t.login, t.key.fingerprint()));
        let key = crate::docker::cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id);
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| PluginError::fatal(format!("encoding the private key: {e}")))?;
        let mut body = self.machine_body(task, &t, &name, &public)?;
        let image = body["image"].as_str().unwrap_or_default().to_string();
        if !is_uuid(&image) {
            let id = with_retries(self.calls(task), || api.image_named(&image))
                .await?
                .ok_or_else(|| {
                    PluginError::not_found(format!(
                        "no active image named {image} in {}",
                        t.endpoint
                    ))
                })?;
            body["image"] = json!(id);
        }
        let (machine, stdout) = self.make_or_take(task, &api, &name, &body).await?;
        let id = machine
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| valid_id(id))
            .ok_or_else(|| {
                PluginError::retryable(format!("machine {name}: CloudAPI answered no id"))
            })?
            .to_string();
        if machine.get("state").and_then(Value::as_str) == Some("failed") {
            self.delete_and_wait(task, &api, &id).await?;
            return Err(PluginError::retryable(format!(
                "machine {name} ({id}) failed to provision; it was deleted"
            )));
        }
        let mut out = TaskOutput {
            result: ssh::results(&user, &private, None),
            stdout,
            ..Default::default()
        };
        out.result.insert("providerid".into(), json!(id));
        out.result.insert("machinename".into(), json!(name));
        Ok(out)
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let id = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        if !valid_id(&id) {
            return Err(PluginError::fatal(format!(
                "providerid {id} is not a machine id"
            )));
        }
        let t = Target::read(task)?;
        let api = self.account(&t);
        let (api, id) = (&api, id.as_str());
        let what = format!("machine {id} running");
        let (access, bind) = poll_until(&what, self.wait(task), || async move {
            let m = api
                .get_machine(id)
                .await?
                .ok_or_else(|| machine_problem(format!("machine {id} does not exist")))?;
            match m.get("state").and_then(Value::as_str).unwrap_or("") {
                "running" => match addresses(&m) {
                    Some(a) => Ok(Poll::Ready(a)),
                    None => Ok(Poll::Pending("running without an address".into())),
                },
                s @ ("provisioning" | "") => Ok(Poll::Pending(s.to_string())),
                other => Err(machine_problem(format!(
                    "machine {id} is {other}, not running"
                ))),
            }
        })
        .await?;
        Ok(TaskOutput {
            ipaddresses: Some(
                [
                    ("access_v4".to_string(), access.clone()),
                    ("bind_v4".to_string(), bind.clone()),
                ]
                .into(),
            ),
            stdout: format!("machine {id} is running at {access} (bind {bind})\n"),
            ..Default::default()
        })
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let t = Target::read(task)?;
        let api = self.account(&t);
        let id = match providerid(task) {
            Some(id) if valid_id(&id) => id,
            Some(id) => {
                return Ok(TaskOutput {
                    stdout: format!("providerid {id} is not a machine id: nothing to delete\n"),
                    ..Default::default()
                })
            }
            None if task.node_id.is_empty() => {
                return Ok(TaskOutput {
                    stdout: "no providerid and no node: nothing was made\n".into(),
                    ..Default::default()
                })
            }
            // A CREATE that failed before answering: the machine of the name it uses.
            None => {
                let name = machine_name(&task.node_id);
                match self.find_own(task, &api, &name).await? {
                    Some(m) => m
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| valid_id(id))
                        .map(str::to_string)
                        .ok_or_else(|| {
                            PluginError::retryable(format!("machine {name} has no id"))
                        })?,
                    None => {
                        return Ok(TaskOutput {
                            stdout: format!("machine {name} does not exist\n"),
                            ..Default::default()
                        })
                    }
                }
            }
        };
        let stdout = if self.delete_and_wait(task, &api, &id).await? {
            tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                machine = %id, "machine deleted");
            format!("machine {id} deleted\n")
        } else {
            format!("machine {id} does not exist\n")
        };
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert_eq!(machine_name("n 1/x"), "weft-n-1-x");
        assert!(valid_id("55a366ce-6c30-4f88-a36b-53638bd0cb62"));
        assert!(!valid_id("../x") && !valid_id(""));
        assert!(is_uuid("1b4bc8a4-5cb6-4a4b-8c59-b6a7c0d2f3e1"));
        assert!(!is_uuid("debian-12") && !is_uuid("1b4bc8a4-5cb6-4a4b-8c59"));
        let m = json!({"primaryIp": "203.0.113.5", "ips": ["203.0.113.5", "10.88.0.5"]});
        assert_eq!(
            addresses(&m),
            Some(("203.0.113.5".into(), "10.88.0.5".into()))
        );
        let m = json!({"primaryIp": "203.0.113.5", "ips": ["203.0.113.5"]});
        assert_eq!(
            addresses(&m),
            Some(("203.0.113.5".into(), "203.0.113.5".into()))
        );
        assert_eq!(addresses(&json!({"ips": []})), None);
    }
}
