//! The `joyent` provider: a node is a Triton machine (CloudAPI), reached over SSH.
//!
//! - **Credentials**: the admin fields `endpoint` (the data center's CloudAPI URL), `login` (the
//!   account), optionally `user` (a sub-user to sign as) and the sensitive `key` (the private half
//!   of an SSH key of the account or sub-user, OpenSSH or PEM, RSA, ed25519 or ECDSA). Every
//!   request is signed over its `Date` header ([`sign`]); the key is named by its MD5 fingerprint
//!   unless the field `key_id` names it otherwise.
//! - **Name**: the machine is named after the node (`weft-<node id>`) and tagged `weft-node` and
//!   `weft-cluster`. CREATE lists machines of that name first (`GET /:login/machines?name=`) and
//!   takes over this node's; otherwise it creates one (`POST /:login/machines` with image,
//!   package, name, tags and metadata). A create refused because the name is taken (an earlier,
//!   killed try made it) is followed by another look-up, so a retried CREATE never makes a second
//!   machine. A machine of that name found `failed` is deleted and the CREATE fails retryably.
//! - **Machine**: package from the hardware type's `flavor` (else the field `package`), image
//!   from the image type's `image` (else the field `image`): a UUID, or a name that stands for the
//!   newest active image of that name (`GET /:login/images?name=`); optional `networks` (comma
//!   separated UUIDs). The machine is also tagged `weft-tenant` (`-` without a tenant). The login
//!   user is the image type's `sshuser` (default `root`).
//! - **SSH key**: the per-cluster ed25519 key of the docker provider, derived from the sensitive
//!   field `sshkeyseed`, else from the account key's fingerprint and login, so every provisioner
//!   derives the same key. CloudAPI writes the account's own keys into a new machine's
//!   `root_authorized_keys` and overwrites any given in the request (`lib/machines.js`,
//!   `loadSSHKeys`), so CREATE first adds the cluster key to the account (`POST /:login/keys`,
//!   named `weft-<tenant>-<cluster>`; a key CloudAPI already holds is looked up by fingerprint and
//!   kept). With the field `user` weft signs as that sub-user and adds the key to the sub-user
//!   (`POST /:login/users/:user/keys`); CloudAPI writes a sub-user's keys into machines only when
//!   the sub-user is a default member of the account's `administrator` role. A new machine whose
//!   `root_authorized_keys` lacks the cluster key is deleted: retryably when the key was removed
//!   meanwhile, for good when the key is there but was not written (that role is missing).
//!   The key is one per cluster: DELETE removes it (by fingerprint) once no machine tagged with
//!   the cluster is left, so a cluster's nodes never lose a key another node still needs; keys of
//!   the cluster's name go too (added before the account key or `sshkeyseed` changed).
//! - **CONFIRM** waits while the machine is `provisioning` until it is `running`: `primaryIp` is
//!   `access_v4`, the first private address in `ips` is `bind_v4` (else `primaryIp`).
//! - **DELETE** deletes the machine and waits until it is gone; 404 and 410 are success. Then the
//!   cluster key goes when the cluster has no machine left.
//! - **Sweep** (`machines`): every machine of the account (page by page) with a `weft-node` tag.
//! - **Errors**: 5xx, 429, 420 (CloudAPI's "Slow Down") and `RequestThrottled` are retried with
//!   back-off; auth, quota and bad parameters fail at once with CloudAPI's code and message.

pub mod cloudapi;
pub mod sign;

use std::net::Ipv4Addr;
use std::time::Duration;

use async_trait::async_trait;
use russh::keys::ssh_key::{LineEnding, PrivateKey};
use serde_json::{json, Map, Value};
use weft_model::{FieldSchema, ParamSpec, ParameterType, PluginType, SweptMachine};

use crate::cloud::{poll_until, with_retries, CloudError, Poll};
pub use crate::google::Timing;
use crate::plugin::Provider;
use crate::ssh;
use crate::task::{
    provider_field as field, providerid, PluginError, PluginResult, Task, TaskOutput,
};
use cloudapi::{Account, CLOUD};
use sign::{md5_fingerprint, AccountKey};

/// The provider type name.
pub const NAME: &str = "joyent";
/// The tag carrying the node id.
pub const TAG_NODE: &str = "weft-node";
/// The tag carrying the cluster id.
pub const TAG_CLUSTER: &str = "weft-cluster";
/// The tag carrying the tenant id (`-` without one).
pub const TAG_TENANT: &str = "weft-tenant";
/// The user the cluster key logs in as unless the image type names an `sshuser`.
pub const DEFAULT_SSH_USER: &str = "root";

/// The `joyent` provider.
pub struct JoyentProvider {
    http: reqwest::Client,
    timing: Timing,
    /// Each account's request budget ([`crate::throttle`]), shared by every worker.
    buckets: crate::throttle::Buckets,
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

/// The fields every action needs, read and checked.
struct Target {
    key: AccountKey,
    endpoint: String,
    login: String,
    /// The sub-user weft signs as (the field `user`).
    user: Option<String>,
    /// The account's request budget (rate, burst).
    budget: (f64, f64),
    fields: Map<String, Value>,
}

impl Target {
    fn read(task: &Task) -> Result<Target, PluginError> {
        Target::from_fields(task.provider_fields())
    }

    fn from_fields(fields: Map<String, Value>) -> Result<Target, PluginError> {
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
        let user = field(&fields, "user");
        for (what, v) in [("login", Some(&login)), ("user", user.as_ref())] {
            if v.is_some_and(|v| !valid_login(v)) {
                return Err(PluginError::fatal(format!(
                    "provider field {what} is not a Triton login name"
                )));
            }
        }
        Ok(Target {
            key,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            login,
            user,
            budget: crate::throttle::budget(&fields).map_err(PluginError::fatal)?,
            fields,
        })
    }

    /// The cluster's SSH key (the same for every node and provisioner).
    fn cluster_key(&self, task: &Task) -> PrivateKey {
        let seed = field(&self.fields, "sshkeyseed")
            .map(|s| format!("joyent:{s}"))
            .unwrap_or_else(|| format!("joyent-key:{}:{}", self.login, self.key.fingerprint()));
        crate::keys::cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id)
    }
}

/// A login name as it may stand in a URL path (Triton logins are letters, digits, `_`, `-`,
/// `.` and `@`).
fn valid_login(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'))
}

/// The tenant as marks show it: `-` when there is none.
fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// The name the cluster key gets on the account: `weft-<tenant>-<cluster>`. Names need not be
/// unique on CloudAPI; weft reads and deletes the key by its fingerprint.
pub fn key_name(tenant: &str, cluster: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(60)
            .collect()
    };
    format!("weft-{}-{}", clean(or_dash(tenant)), clean(cluster))
}

/// The public key's OpenSSH line and its MD5 fingerprint (how CloudAPI names keys).
fn public_parts(key: &PrivateKey) -> Result<(String, String), PluginError> {
    let public = key.public_key();
    let line = public
        .to_openssh()
        .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
    let blob = public
        .to_bytes()
        .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
    Ok((line, md5_fingerprint(&blob)))
}

/// Whether the machine's `root_authorized_keys` (as CloudAPI wrote them) hold `public`;
/// `None` when the machine shows none (an image with passwords instead of keys).
fn holds_key(machine: &Value, public: &str) -> Option<bool> {
    let written = machine
        .get("metadata")?
        .get("root_authorized_keys")?
        .as_str()?;
    let blob = public.split_whitespace().nth(1)?;
    Some(
        written
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(blob)),
    )
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
    /// A provider with the default timing and a 60 s time-out per HTTP request.
    pub fn new() -> JoyentProvider {
        JoyentProvider {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap_or_default(),
            timing: Timing::default(),
            buckets: crate::throttle::Buckets::default(),
        }
    }

    /// How long to wait between tries (tests use milliseconds).
    pub fn with_timing(mut self, timing: Timing) -> JoyentProvider {
        self.timing = timing;
        self
    }

    fn account<'a>(&'a self, t: &'a Target) -> Account<'a> {
        let (rate, burst) = t.budget;
        Account {
            http: &self.http,
            key: &t.key,
            endpoint: t.endpoint.clone(),
            login: t.login.clone(),
            user: t.user.clone(),
            key_id: field(&t.fields, "key_id"),
            bucket: self
                .buckets
                .of(&format!("{}/{}", t.endpoint, t.login), rate, burst),
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
    fn machine_body(&self, task: &Task, t: &Target, name: &str) -> Result<Value, PluginError> {
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
            format!("tag.{TAG_NODE}"): task.node_id,
            format!("tag.{TAG_CLUSTER}"): task.cluster_id,
            format!("tag.{TAG_TENANT}"): or_dash(&task.tenant_id),
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

    /// Puts the cluster key on the account (or the sub-user) unless CloudAPI holds it already;
    /// answers what happened.
    async fn ensure_key(
        &self,
        task: &Task,
        api: &Account<'_>,
        public: &str,
        fp: &str,
    ) -> Result<String, PluginError> {
        if with_retries(self.calls(task), || api.get_key(fp))
            .await?
            .is_some()
        {
            return Ok(String::new());
        }
        let name = key_name(&task.tenant_id, &task.cluster_id);
        match with_retries(self.calls(task), || api.create_key(&name, public)).await {
            Ok(k) => {
                tracing::info!(cluster_id = %task.cluster_id, key = %name,
                    fingerprint = %k.fingerprint, "cluster key added to the account");
                Ok(format!("cluster key {name} ({fp}) added\n"))
            }
            // "key already exists or is invalid": another node of the cluster added it, or not.
            Err(e) if e.status == 409 => {
                match with_retries(self.calls(task), || api.get_key(fp)).await? {
                    Some(_) => Ok(String::new()),
                    None => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Fails (after deleting it) a machine CloudAPI made without the cluster key.
    async fn check_machine_key(
        &self,
        task: &Task,
        api: &Account<'_>,
        machine: &Value,
        (public, fp): (&str, &str),
    ) -> Result<(), PluginError> {
        if holds_key(machine, public) != Some(false) {
            return Ok(());
        }
        let id = machine.get("id").and_then(Value::as_str).unwrap_or("");
        if valid_id(id) {
            self.delete_and_wait(task, api, id).await?;
        }
        if with_retries(self.calls(task), || api.get_key(fp))
            .await?
            .is_none()
        {
            return Err(PluginError::retryable(format!(
                "machine {id} was made while the cluster key {fp} was off the account \
                 (removed meanwhile, as the DELETE of the cluster's last other machine does); \
                 it was deleted"
            )));
        }
        Err(PluginError::fatal(format!(
            "machine {id} was made without the cluster key {fp}, although {} holds it; it was \
             deleted. CloudAPI writes a sub-user's keys into machines only when the sub-user is \
             a default member of the account's administrator role",
            api.user.as_deref().unwrap_or(&api.login)
        )))
    }

    /// Removes the cluster key once no machine of the cluster is left; answers what happened.
    async fn drop_key_if_unused(
        &self,
        task: &Task,
        t: &Target,
        api: &Account<'_>,
    ) -> Result<String, PluginError> {
        if task.cluster_id.is_empty() {
            return Ok(String::new());
        }
        let tenant = or_dash(&task.tenant_id);
        let left = with_retries(self.calls(task), || {
            api.machines_tagged(TAG_CLUSTER, &task.cluster_id)
        })
        .await?
        .into_iter()
        .filter(|m| m.get("state").and_then(Value::as_str) != Some("deleted"))
        .filter(|m| {
            // Machines made before weft tagged tenants count as the cluster's.
            let tag = m.get("tags").and_then(|t| t.get(TAG_TENANT));
            tag.is_none_or(|v| v.as_str() == Some(tenant))
        })
        .count();
        if left > 0 {
            return Ok(String::new());
        }
        // The key of the current credentials, and any of this cluster's name: a key added
        // before the account key or `sshkeyseed` was changed derives differently.
        let (_, fp) = public_parts(&t.cluster_key(task))?;
        let name = key_name(&task.tenant_id, &task.cluster_id);
        let mut gone: Vec<String> = with_retries(self.calls(task), || api.list_keys())
            .await?
            .into_iter()
            .filter(|k| k.fingerprint == fp || k.name == name)
            .map(|k| k.fingerprint)
            .collect();
        gone.dedup();
        let mut out = String::new();
        for fp in gone {
            if with_retries(self.calls(task), || api.delete_key(&fp)).await? {
                tracing::info!(cluster_id = %task.cluster_id, fingerprint = %fp,
                    "cluster key removed from the account");
                out.push_str(&format!(
                    "cluster key {fp} removed (the cluster's last machine is gone)\n"
                ));
            }
        }
        Ok(out)
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
                ("user", text_field("Sub-user",
                    "a sub-user of the account to sign as (its key then signs, and cluster keys go to it; it must be a default member of the account's administrator role)", false)),
                ("key", text_field("Account SSH key",
                    "the private half of an SSH key of the account or sub-user (OpenSSH or PEM, RSA, ed25519 or ECDSA, not encrypted)", true)),
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
            .chain(crate::throttle::declared_fields())
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
        let key = t.cluster_key(task);
        let (public, fp) = public_parts(&key)?;
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| PluginError::fatal(format!("encoding the private key: {e}")))?;
        let mut body = self.machine_body(task, &t, &name)?;
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
        let mut stdout = self.ensure_key(task, &api, &public, &fp).await?;
        let (machine, made) = self.make_or_take(task, &api, &name, &body).await?;
        stdout.push_str(&made);
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
        self.check_machine_key(task, &api, &machine, (&public, &fp))
            .await?;
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
        let mut out = self.delete_machine_of(task, &api).await?;
        out.stdout
            .push_str(&self.drop_key_if_unused(task, &t, &api).await?);
        Ok(out)
    }

    async fn machines(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        let t = Target::from_fields(fields.clone())?;
        let api = self.account(&t);
        let calls =
            crate::cloud::Backoff::new(self.timing.first, self.timing.max, self.timing.calls);
        let all = with_retries(calls, || api.all_machines()).await?;
        Ok(all.iter().filter_map(swept).collect())
    }
}

/// A machine with weft's marks as a sweep shows it (`None` without a `weft-node` tag or an id).
fn swept(m: &Value) -> Option<SweptMachine> {
    crate::sweep::marked(
        NAME,
        m.get("id")
            .and_then(Value::as_str)
            .filter(|id| valid_id(id)),
        m.get("tags"),
        [TAG_NODE, TAG_CLUSTER, TAG_TENANT],
        m.get("state").and_then(Value::as_str),
    )
}

impl JoyentProvider {
    /// DELETE's machine part: the machine of `providerid`, else of the node's name.
    async fn delete_machine_of(&self, task: &Task, api: &Account<'_>) -> PluginResult {
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
                match self.find_own(task, api, &name).await? {
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
        let stdout = if self.delete_and_wait(task, api, &id).await? {
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

    #[test]
    fn key_names_marks_and_written_keys() {
        assert_eq!(key_name("", "17"), "weft---17");
        assert_eq!(key_name("acme corp", "17"), "weft-acme-corp-17");
        assert!(valid_login("weft.ops@x") && !valid_login("a/b") && !valid_login(""));
        let public = "ssh-ed25519 AAAAC3Nza weft-cluster-17";
        let m = json!({"metadata": {"root_authorized_keys": "ssh-rsa BBBB admin\nssh-ed25519 AAAAC3Nza other\n"}});
        assert_eq!(holds_key(&m, public), Some(true));
        let m = json!({"metadata": {"root_authorized_keys": "ssh-rsa BBBB admin\n"}});
        assert_eq!(holds_key(&m, public), Some(false));
        assert_eq!(holds_key(&json!({"metadata": {}}), public), None);
        let m = json!({"id": "55a366ce-6c30-4f88-a36b-53638bd0cb62", "state": "running",
            "tags": {"weft-node": "n1", "weft-cluster": "17"}});
        let s = swept(&m).unwrap();
        assert_eq!(
            (s.node.as_str(), s.cluster.as_str(), s.tenant.as_str()),
            ("n1", "17", "-")
        );
        assert!(swept(&json!({"id": "55a366ce", "tags": {}})).is_none());
    }
}
