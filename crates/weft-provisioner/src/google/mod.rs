//! The `google` provider: a node is a Compute Engine instance (Compute API v1), reached over SSH.
//!
//! - **Credentials**: the sensitive admin field `json_key`, a service account's JSON key. Each
//!   call carries an access token got with an RS256-signed JWT at the key's `token_uri` and cached
//!   until shortly before it expires ([`auth`]). The project is the field `project`, else the
//!   key's `project_id`; the zone is the field `zone`.
//! - **Name**: the instance is named after the node (`weft-<node id>`, made a valid GCE name:
//!   lowercase, starting with a letter, at most 63 characters) and labelled `weft-node`,
//!   `weft-cluster` and `weft-tenant` (`-` without a tenant; each value made a valid label value:
//!   lowercase letters, digits, `-` and `_`, at most 63 characters). CREATE looks the name up first and takes over an instance of this node;
//!   otherwise it inserts one and follows the zone operation to `DONE` (an operation error fails
//!   with Google's code and message). A `409 alreadyExists` on insert means an earlier, killed try
//!   made it: it is taken over, so a retried CREATE never makes a second machine.
//! - **Instance**: machine type from the hardware type's `flavor` (else the field
//!   `machine_type`), boot image from the image type's `image` (else the field `image`), the
//!   field `network` (default `global/networks/default`) and the field `subnetwork` (a name in
//!   the zone's region, or a `regions/.../subnetworks/...` path or URL; required by the API on a
//!   custom-mode network), a one-to-one NAT unless the field `external_ip` is `false` (then the
//!   instance has no external address and SSH goes to its internal one), the network tags of the
//!   field `tags` (comma separated, for firewall rules), and the cluster's SSH key in the
//!   `ssh-keys` metadata for the image type's `sshuser` (default `weft`). The key
//!   is the docker provider's per-cluster ed25519 key, derived from the sensitive field
//!   `sshkeyseed`, else from a hash of the service-account key: every provisioner with the same
//!   credentials derives the same key without keeping state.
//! - **CONFIRM** waits through `PROVISIONING` and `STAGING` until `RUNNING`: the first
//!   interface's `networkIP` is `bind_v4`, its access config's `natIP` is `access_v4` (else the
//!   internal address). Any other state (`TERMINATED`, `STOPPING`...) fails.
//! - **DELETE** deletes the instance and waits for the operation; a missing instance is success.
//! - **Sweep** (`machines`): the zone's instances with a `weft-node` label (`labels.weft-node:*`,
//!   page by page).
//! - **Errors**: 5xx, 429 and Google's rate-limit reasons are retried with back-off (honouring
//!   `Retry-After`); auth, quota and bad parameters fail at once with Google's reason and message.
//!
//! The optional admin field `endpoint` replaces the Compute API's base URL (with the key's
//! `token_uri`, that is how tests point the provider at a fake on loopback).

pub mod auth;
pub mod compute;

use std::time::Duration;

use async_trait::async_trait;
use russh::keys::ssh_key::LineEnding;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use weft_model::{FieldSchema, ParamSpec, ParameterType, PluginType, SweptMachine};

use crate::cloud::{poll_until, with_retries, Backoff, CloudError, Poll};
use crate::plugin::Provider;
use crate::ssh;
use crate::task::{
    provider_field as field, providerid, PluginError, PluginResult, Task, TaskOutput,
};
use auth::{ServiceAccount, TokenCache};
use compute::{operation_error, Zone, CLOUD, DEFAULT_ENDPOINT};

/// The provider type name.
pub const NAME: &str = "google";
/// The label carrying the node id.
pub const LABEL_NODE: &str = "weft-node";
/// The label carrying the cluster id.
pub const LABEL_CLUSTER: &str = "weft-cluster";
/// The label carrying the tenant id (`-` without one).
pub const LABEL_TENANT: &str = "weft-tenant";
/// The user the cluster key logs in as unless the image type names an `sshuser`.
pub const DEFAULT_SSH_USER: &str = "weft";
const DEFAULT_NETWORK: &str = "global/networks/default";

/// How long the provider waits between tries and for how long in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The first pause between two tries or two polls (it doubles up to `max`).
    pub first: Duration,
    /// The longest pause between two tries or two polls.
    pub max: Duration,
    /// How long one call is retried at most.
    pub calls: Duration,
    /// How long an operation or instance is waited for at most (never past the task's time-out).
    pub wait: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            first: Duration::from_secs(1),
            max: Duration::from_secs(10),
            calls: Duration::from_secs(120),
            wait: Duration::from_secs(900),
        }
    }
}

impl Timing {
    fn calls(&self, task: &Task) -> Backoff {
        Backoff::new(self.first, self.max, self.calls.min(task.timeout))
    }

    fn wait(&self, task: &Task) -> Backoff {
        Backoff::new(self.first, self.max, self.wait.min(task.timeout))
    }
}

/// The `google` provider.
pub struct GoogleProvider {
    http: reqwest::Client,
    tokens: TokenCache,
    timing: Timing,
    /// Each project's request budget ([`crate::throttle`]), shared by every worker.
    buckets: crate::throttle::Buckets,
}

impl std::fmt::Debug for GoogleProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleProvider")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl Default for GoogleProvider {
    fn default() -> GoogleProvider {
        GoogleProvider::new()
    }
}

/// A valid GCE resource name (`[a-z]([-a-z0-9]{0,61}[a-z0-9])?`).
pub fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// The instance name of a node: `weft-<node id>`, lowercased, other characters as `-`; a name
/// that would pass 63 characters keeps its start and ends with a hash of the whole node id.
pub fn instance_name(node_id: &str) -> String {
    let clean: String = node_id
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let mut name = format!("weft-{clean}");
    if name.len() > 63 {
        let hash = format!("{:x}", Sha256::digest(node_id.as_bytes()));
        name.truncate(50);
        name = format!("{}-{}", name.trim_end_matches('-'), &hash[..12]);
    }
    name.trim_end_matches('-').to_string()
}

/// A label value: lowercase letters, digits, `-` and `_`, at most 63 characters.
pub fn label_value(s: &str) -> String {
    s.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '_') => c,
            _ => '-',
        })
        .take(63)
        .collect()
}

/// What every action needs: the account, the zone's API base and the provider's fields.
struct Target {
    account: ServiceAccount,
    base: String,
    zone: String,
    /// The project's request budget: its key and (rate, burst).
    budget: (String, (f64, f64)),
    fields: Map<String, Value>,
}

impl Target {
    fn read(task: &Task) -> Result<Target, PluginError> {
        Target::from_fields(task.provider_fields())
    }

    fn from_fields(fields: Map<String, Value>) -> Result<Target, PluginError> {
        let key = field(&fields, "json_key")
            .ok_or_else(|| PluginError::fatal("provider field json_key is missing"))?;
        let account = ServiceAccount::from_json(&key).map_err(PluginError::fatal)?;
        let project = field(&fields, "project")
            .or_else(|| account.project_id.clone())
            .ok_or_else(|| {
                PluginError::fatal(
                    "provider field project is missing (and json_key has no project_id)",
                )
            })?;
        let zone = field(&fields, "zone")
            .ok_or_else(|| PluginError::fatal("provider field zone is missing"))?;
        let endpoint = field(&fields, "endpoint").unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        let endpoint = endpoint.trim_end_matches('/');
        let budget = crate::throttle::budget(&fields).map_err(PluginError::fatal)?;
        Ok(Target {
            budget: (format!("{endpoint}/projects/{project}"), budget),
            base: format!("{endpoint}/projects/{project}/zones/{zone}"),
            account,
            zone,
            fields,
        })
    }
}

/// The region of a zone (`us-central1-a` -> `us-central1`).
fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(r, _)| r)
}

/// Whether a provider field says no (`false`, `no`, `off`, `0`, `none`); `Err` for what is
/// neither a yes nor a no.
fn says_no(fields: &Map<String, Value>, name: &str) -> Result<bool, PluginError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(!b),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "" | "true" | "yes" | "on" | "1" => Ok(false),
            "false" | "no" | "off" | "0" | "none" => Ok(true),
            _ => Err(PluginError::fatal(format!(
                "provider field {name} is neither true nor false: {s:?}"
            ))),
        },
        Some(other) => Err(PluginError::fatal(format!(
            "provider field {name} is neither true nor false: {other}"
        ))),
    }
}

/// The instance's network interface: network, subnetwork, and a one-to-one NAT unless the
/// field `external_ip` says no.
fn network_interface(t: &Target) -> Result<Value, PluginError> {
    let network = field(&t.fields, "network").unwrap_or_else(|| DEFAULT_NETWORK.into());
    let mut nic = json!({ "network": network });
    if let Some(sub) = field(&t.fields, "subnetwork") {
        let sub = if sub.contains('/') {
            sub
        } else if valid_name(&sub) {
            format!("regions/{}/subnetworks/{sub}", region_of(&t.zone))
        } else {
            return Err(PluginError::fatal(format!(
                "provider field subnetwork {sub:?} is not a subnetwork name or path"
            )));
        };
        nic["subnetwork"] = json!(sub);
    }
    if !says_no(&t.fields, "external_ip")? {
        nic["accessConfigs"] = json!([{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]);
    }
    Ok(nic)
}

/// The network tags of the field `tags` (comma separated), each a valid GCE tag.
fn network_tags(t: &Target) -> Result<Vec<String>, PluginError> {
    let Some(tags) = field(&t.fields, "tags") else {
        return Ok(Vec::new());
    };
    tags.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|tag| {
            if valid_name(tag) {
                Ok(tag.to_string())
            } else {
                Err(PluginError::fatal(format!(
                    "provider field tags: {tag:?} is not a network tag (lowercase letters, \
                     digits and -, starting with a letter, at most 63 characters)"
                )))
            }
        })
        .collect()
}

/// A CloudError for something the provider itself decided is wrong with an instance.
fn instance_problem(message: String) -> CloudError {
    CloudError::from_status(CLOUD, 400, "instanceState", message, None)
}

impl GoogleProvider {
    /// A provider with the default [`Timing`] and a 60 s time-out per HTTP request.
    pub fn new() -> GoogleProvider {
        GoogleProvider {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap_or_default(),
            tokens: TokenCache::default(),
            timing: Timing::default(),
            buckets: crate::throttle::Buckets::default(),
        }
    }

    /// How long to wait between tries (tests use milliseconds).
    pub fn with_timing(mut self, timing: Timing) -> GoogleProvider {
        self.timing = timing;
        self
    }

    fn zone<'a>(&'a self, t: &'a Target) -> Zone<'a> {
        let (key, (rate, burst)) = &t.budget;
        Zone {
            http: &self.http,
            tokens: &self.tokens,
            account: &t.account,
            base: t.base.clone(),
            bucket: self.buckets.of(key, *rate, *burst),
        }
    }

    /// Follows a zone operation until it is `DONE`; its error, if any, fails the wait.
    async fn wait_operation(
        &self,
        task: &Task,
        zone: &Zone<'_>,
        op: &Value,
    ) -> Result<(), PluginError> {
        let name = op
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| PluginError::retryable("gce: an operation without a name"))?
            .to_string();
        let mut current = op.clone();
        let what = format!("operation {name}");
        poll_until(&what, self.timing.wait(task), || {
            let seen = std::mem::take(&mut current);
            let name = name.clone();
            async move {
                let op = if seen.is_null() {
                    zone.get_operation(&name).await?
                } else {
                    seen
                };
                match op.get("status").and_then(Value::as_str) {
                    Some("DONE") => match operation_error(&op) {
                        Some(e) => Err(e),
                        None => Ok(Poll::Ready(())),
                    },
                    other => Ok(Poll::Pending(other.unwrap_or("unknown").to_string())),
                }
            }
        })
        .await
    }

    /// The instance `name` if it exists and belongs to `node`; an instance of another node (or
    /// not made by weft) is an error.
    async fn find_own(
        &self,
        task: &Task,
        zone: &Zone<'_>,
        name: &str,
    ) -> Result<Option<Value>, PluginError> {
        let found = with_retries(self.timing.calls(task), || zone.get_instance(name)).await?;
        let Some(inst) = found else { return Ok(None) };
        let label = inst
            .get("labels")
            .and_then(|l| l.get(LABEL_NODE))
            .and_then(Value::as_str);
        if label != Some(label_value(&task.node_id).as_str()) {
            return Err(PluginError::fatal(format!(
                "instance {name} exists and was not made by weft for node {}",
                task.node_id
            )));
        }
        Ok(Some(inst))
    }

    /// The instance resource CREATE inserts.
    fn instance_body(
        &self,
        task: &Task,
        t: &Target,
        name: &str,
        ssh_line: &str,
    ) -> Result<Value, PluginError> {
        let flavor = task
            .config_str("flavor")
            .map(str::to_string)
            .filter(|s| !s.trim().is_empty())
            .or_else(|| field(&t.fields, "machine_type"))
            .ok_or_else(|| {
                PluginError::fatal(
                    "no machine type: give the hardware type a google flavor (providermap) or \
                     the provider a machine_type",
                )
            })?;
        let machine_type = if flavor.contains('/') {
            flavor
        } else {
            format!("zones/{}/machineTypes/{flavor}", t.zone)
        };
        let image = task
            .config_str("image")
            .map(str::to_string)
            .filter(|s| !s.trim().is_empty())
            .or_else(|| field(&t.fields, "image"))
            .ok_or_else(|| {
                PluginError::fatal(
                    "no image: give the image type a google image (providermap) or the provider \
                     an image",
                )
            })?;
        let tenant = if task.tenant_id.is_empty() {
            "-"
        } else {
            &task.tenant_id
        };
        let mut body = json!({
            "name": name,
            "machineType": machine_type,
            "disks": [{"boot": true, "autoDelete": true, "initializeParams": {"sourceImage": image}}],
            "networkInterfaces": [network_interface(t)?],
            "metadata": {"items": [{"key": "ssh-keys", "value": ssh_line}]},
            "labels": {LABEL_NODE: label_value(&task.node_id),
                LABEL_CLUSTER: label_value(&task.cluster_id), LABEL_TENANT: label_value(tenant)},
        });
        let tags = network_tags(t)?;
        if !tags.is_empty() {
            body["tags"] = json!({ "items": tags });
        }
        Ok(body)
    }
}

/// An instance with weft's labels as a sweep shows it (`None` without a `weft-node` label).
fn swept(inst: &Value) -> Option<SweptMachine> {
    crate::sweep::marked(
        NAME,
        inst.get("name")
            .and_then(Value::as_str)
            .filter(|n| valid_name(n)),
        inst.get("labels"),
        [LABEL_NODE, LABEL_CLUSTER, LABEL_TENANT],
        inst.get("status").and_then(Value::as_str),
    )
}

/// The instance's addresses: `(access, bind)`, once it has an internal one.
fn addresses(inst: &Value) -> Option<(String, String)> {
    let nic = inst.get("networkInterfaces")?.get(0)?;
    let bind = nic.get("networkIP")?.as_str()?.to_string();
    let access = nic
        .get("accessConfigs")
        .and_then(|a| a.get(0))
        .and_then(|a| a.get("natIP"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| bind.clone());
    Some((access, bind))
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

#[async_trait]
impl Provider for GoogleProvider {
    fn plugin_type(&self) -> PluginType {
        let admin = ParamSpec {
            fields: [
                ("json_key", text_field("Service account key",
                    "the service account's JSON key (as downloaded); it needs the Compute Instance Admin role", true)),
                ("project", text_field("Project", "the project id (default: the key's project_id)", false)),
                ("zone", text_field("Zone", "the zone instances are made in, e.g. us-central1-a", false)),
                ("network", text_field("Network", "the VPC network (default: global/networks/default)", false)),
                ("subnetwork", text_field("Subnetwork",
                    "the subnetwork: a name in the zone's region or regions/<region>/subnetworks/<name> (required on custom-mode networks)", false)),
                ("tags", text_field("Network tags", "network tags for firewall rules, comma separated", false)),
                ("external_ip", text_field("External IP",
                    "false: no external address; weft then reaches the instance at its internal address (default: true)", false)),
                ("machine_type", text_field("Machine type",
                    "the machine type when the hardware type has no google flavor, e.g. e2-small", false)),
                ("image", text_field("Image",
                    "the boot image when the image type has none, e.g. projects/debian-cloud/global/images/family/debian-12", false)),
                ("sshkeyseed", text_field("SSH key seed",
                    "a secret from which each cluster's SSH key is derived (default: derived from json_key)", true)),
                ("endpoint", text_field("Compute API endpoint",
                    "the Compute Engine v1 base URL (default: https://compute.googleapis.com/compute/v1)", false)),
            ]
            .into_iter()
            .chain(crate::throttle::declared_fields())
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            required: vec![["json_key", "zone"].into_iter().map(str::to_string).collect()],
        };
        PluginType {
            name: NAME.into(),
            label: Some("Google Compute Engine".into()),
            description: Some(
                "nodes are Compute Engine instances, one per node, reached over SSH".into(),
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
        let name = instance_name(&task.node_id);
        let user = task
            .config_str("sshuser")
            .filter(|u| !u.trim().is_empty())
            .unwrap_or(DEFAULT_SSH_USER)
            .to_string();
        let seed = field(&t.fields, "sshkeyseed")
            .map(|s| format!("google:{s}"))
            .unwrap_or_else(|| format!("google-key:{}", t.account.key_digest()));
        let key = crate::keys::cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id);
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| PluginError::fatal(format!("encoding the private key: {e}")))?;
        let zone = self.zone(&t);

        let stdout = if self.find_own(task, &zone, &name).await?.is_some() {
            format!("instance {name} exists in {}: taking it over\n", t.zone)
        } else {
            let body = self.instance_body(task, &t, &name, &format!("{user}:{public}"))?;
            let op = with_retries(self.timing.calls(task), || zone.insert_instance(&body)).await?;
            match op {
                Some(op) => {
                    self.wait_operation(task, &zone, &op).await?;
                    tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                        instance = %name, zone = %t.zone, "instance inserted");
                    format!("instance {name} inserted in {}\n", t.zone)
                }
                None => {
                    // 409: an earlier try made it. Take it over if it is this node's.
                    self.find_own(task, &zone, &name).await?.ok_or_else(|| {
                        PluginError::retryable(format!(
                            "instance {name} exists (409) but cannot be read yet"
                        ))
                    })?;
                    format!(
                        "instance {name} already exists in {}: taking it over\n",
                        t.zone
                    )
                }
            }
        };
        let mut out = TaskOutput {
            result: ssh::results(&user, &private, None),
            stdout,
            ..Default::default()
        };
        out.result.insert("providerid".into(), json!(name));
        out.result.insert("zone".into(), json!(t.zone));
        Ok(out)
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let name = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        if !valid_name(&name) {
            return Err(PluginError::fatal(format!(
                "providerid {name} is not an instance name"
            )));
        }
        let t = Target::read(task)?;
        let zone = self.zone(&t);
        let what = format!("instance {name} running");
        let (zone, name) = (&zone, name.as_str());
        let (access, bind) = poll_until(&what, self.timing.wait(task), || async move {
            let inst = zone
                .get_instance(name)
                .await?
                .ok_or_else(|| instance_problem(format!("instance {name} does not exist")))?;
            let status = inst.get("status").and_then(Value::as_str).unwrap_or("");
            match status {
                "RUNNING" => match addresses(&inst) {
                    Some(a) => Ok(Poll::Ready(a)),
                    None => Ok(Poll::Pending("RUNNING without an address".into())),
                },
                "PROVISIONING" | "STAGING" | "" => Ok(Poll::Pending(status.to_string())),
                other => Err(instance_problem(format!(
                    "instance {name} is {other}, not RUNNING"
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
            stdout: format!("instance {name} is RUNNING at {access} (internal {bind})\n"),
            ..Default::default()
        })
    }

    async fn machines(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        let t = Target::from_fields(fields.clone())?;
        let zone = self.zone(&t);
        let calls = Backoff::new(self.timing.first, self.timing.max, self.timing.calls);
        let filter = format!("labels.{LABEL_NODE}:*");
        let (mut found, mut token) = (Vec::new(), None::<String>);
        loop {
            let (page, next) = with_retries(calls.clone(), || {
                zone.list_instances(&filter, token.as_deref())
            })
            .await?;
            found.extend(page.iter().filter_map(swept));
            match next {
                Some(n) if Some(&n) != token.as_ref() => token = Some(n),
                _ => return Ok(found),
            }
        }
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let t = Target::read(task)?;
        let zone = self.zone(&t);
        let name = match providerid(task) {
            Some(id) if valid_name(&id) => id,
            Some(id) => {
                return Ok(TaskOutput {
                    stdout: format!("providerid {id} is not an instance: nothing to delete\n"),
                    ..Default::default()
                })
            }
            None if task.node_id.is_empty() => {
                return Ok(TaskOutput {
                    stdout: "no providerid and no node: nothing was made\n".into(),
                    ..Default::default()
                })
            }
            // A CREATE that failed before answering: the name it uses, if that is this node's.
            None => {
                let name = instance_name(&task.node_id);
                if self.find_own(task, &zone, &name).await?.is_none() {
                    return Ok(TaskOutput {
                        stdout: format!("instance {name} does not exist\n"),
                        ..Default::default()
                    });
                }
                name
            }
        };
        let op = with_retries(self.timing.calls(task), || zone.delete_instance(&name)).await?;
        let stdout = match op {
            None => format!("instance {name} does not exist\n"),
            Some(op) => {
                self.wait_operation(task, &zone, &op).await?;
                tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                    instance = %name, "instance deleted");
                format!("instance {name} deleted\n")
            }
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
    fn instance_names_are_valid_gce_names() {
        assert_eq!(instance_name("6F1C-aa_01"), "weft-6f1c-aa-01");
        let uuid = "0b8e1f9e-8f39-4c1e-9a53-2b1a9d7c1e11";
        assert_eq!(instance_name(uuid), format!("weft-{uuid}"));
        let long = "x".repeat(100);
        let n = instance_name(&long);
        assert!(valid_name(&n) && n.len() <= 63, "{n}");
        assert_ne!(
            n,
            instance_name(&"x".repeat(101)),
            "the hash keeps long ids apart"
        );
        for id in ["node-a", "N.1", "a--", "--"] {
            assert!(
                valid_name(&instance_name(id)),
                "{id}: {}",
                instance_name(id)
            );
        }
        for bad in ["", "1abc", "Abc", "abc-", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn regions_yes_and_no_and_swept_instances() {
        assert_eq!(region_of("us-central1-a"), "us-central1");
        assert_eq!(region_of("europe-west4-b"), "europe-west4");
        let f = |v: Value| json!({ "external_ip": v }).as_object().cloned().unwrap();
        assert!(!says_no(&Map::new(), "external_ip").unwrap());
        assert!(says_no(&f(json!(false)), "external_ip").unwrap());
        assert!(says_no(&f(json!(" No ")), "external_ip").unwrap());
        assert!(!says_no(&f(json!("true")), "external_ip").unwrap());
        assert!(says_no(&f(json!("perhaps")), "external_ip").is_err());
        assert!(says_no(&f(json!(3)), "external_ip").is_err());
        let i = json!({"name": "weft-n1", "status": "RUNNING",
            "labels": {"weft-node": "n1", "weft-cluster": "4"}});
        let m = swept(&i).unwrap();
        assert_eq!((m.node.as_str(), m.tenant.as_str()), ("n1", "-"));
        assert!(swept(&json!({"name": "x", "labels": {}})).is_none());
    }

    #[test]
    fn addresses_prefer_the_nat_ip_for_access() {
        let i = json!({"networkInterfaces": [{"networkIP": "10.0.0.2",
            "accessConfigs": [{"natIP": "34.1.2.3"}]}]});
        assert_eq!(addresses(&i), Some(("34.1.2.3".into(), "10.0.0.2".into())));
        let i = json!({"networkInterfaces": [{"networkIP": "10.0.0.2", "accessConfigs": []}]});
        assert_eq!(addresses(&i), Some(("10.0.0.2".into(), "10.0.0.2".into())));
        assert_eq!(addresses(&json!({})), None);
    }
}
