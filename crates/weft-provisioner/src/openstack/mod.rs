//! The `openstack` and `rackspace` providers: a node is a Nova server. Both share the compute
//! code ([`nova`]) and differ in how they get a token ([`identity`]): Keystone v3 (a password or
//! an application credential) for `openstack`, Rackspace Identity v2.0 (an API key) for
//! `rackspace`. The client is our own, over the workspace's reqwest: the `openstack` crate cannot
//! do Rackspace's v2.0 authentication, and the provider needs only a handful of calls.
//!
//! - **Token**: one per set of credentials, shared by every task that uses them, renewed ahead of
//!   its expiry and once more when the compute API answers 401. The compute endpoint is the
//!   catalog's `compute` service with the admin's `interface` (default `public`) in `region`.
//! - **CREATE**: the server is named for the node (its hostname, else `weft-<node id>`) and carries
//!   the metadata `weft-node` (the node id), `weft-cluster` and `weft-tenant` (`-` without a
//!   tenant). A server with that name and that
//!   metadata is looked for first, so a retried or killed CREATE never makes a second; when two
//!   exist (two workers raced), the oldest is kept and the others deleted. Otherwise the server
//!   is made from the image type's `image` and the hardware type's `flavor`, each an id or a name
//!   (found as openstacksdk's `find` does: the one with that id, else the one with exactly that
//!   name; none or several is a fatal error naming them; images in the catalog's `image` service,
//!   Glance, and taken as ids when the catalog has none), the admin's `networks`,
//!   `security_groups`, `availability_zone` and `user_data` (text, sent base64-encoded: at most
//!   65535 bytes encoded), and a key pair: the
//!   admin's `key_name`, else the public half of `ssh_key` imported as `weft-<fingerprint>`.
//!   With `ssh_key`, CREATE answers `ssh-auth` (user: the image type's `sshuser`, else the
//!   admin's `ssh_user`, default `root`).
//! - **CONFIRM**: polls the server with a bounded back-off while it is `BUILD` (or another
//!   transitional state) until it is `ACTIVE` with an IPv4 address; `ERROR` fails with Nova's
//!   fault message. `bind_v4` is the first fixed address (or, untyped as on Rackspace, the one on
//!   network `private`); `access_v4` is `accessIPv4`, else a floating address, else the address
//!   on network `public`, else `bind_v4`. No floating IP is allocated: give servers an address
//!   the provisioner reaches, or let the cloud set `accessIPv4`.
//! - **DELETE**: deletes the server (404 is success; without a `providerid`, the server found by
//!   name and metadata) and waits until Nova no longer shows it.
//! - **Sweep** (`machines`): every server of the project, listed page by page (`GET
//!   /servers/detail`, following `servers_links` rel `next`), that carries a `weft-node` mark.
//! - **Errors**: over-limit (413 with `Retry-After`, 429) and 5xx are retried with back-off; every
//!   other answer fails at once with the API's own code and message. Secrets never appear in
//!   messages or logs.

pub mod identity;
pub mod nova;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use russh::keys::PrivateKey;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use weft_model::{FieldSchema, ParamSpec, ParameterType, PluginType, SweptMachine};

use crate::cloud::{poll_until, Backoff, CloudError, Poll};
use crate::plugin::Provider;
use crate::ssh;
use crate::task::{PluginError, PluginResult, Task, TaskOutput};
use identity::{Credentials, Ref};
use nova::{Found, Nova, Session};

/// The metadata key that names the node a server was made for.
pub const META_NODE: &str = "weft-node";
/// The metadata key that names the server's cluster.
pub const META_CLUSTER: &str = "weft-cluster";
/// The metadata key that names the server's tenant (`-` without a tenant): a sweep answers only
/// the servers of the tenant that asks.
pub const META_TENANT: &str = "weft-tenant";

/// Which identity API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Keystone v3.
    OpenStack,
    /// Rackspace Identity v2.0.
    Rackspace,
}

impl Kind {
    /// The provider type name: `openstack` or `rackspace`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::OpenStack => "openstack",
            Kind::Rackspace => "rackspace",
        }
    }
}

/// How long the provider waits and retries.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Retried calls (over-limit, 5xx): first pause, longest pause, total budget.
    pub retry: (Duration, Duration, Duration),
    /// CONFIRM's and DELETE's polling: first pause, longest pause, total budget.
    pub poll: (Duration, Duration, Duration),
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            retry: (
                Duration::from_secs(1),
                Duration::from_secs(30),
                Duration::from_secs(300),
            ),
            poll: (
                Duration::from_secs(2),
                Duration::from_secs(15),
                Duration::from_secs(900),
            ),
        }
    }
}

/// The `openstack` or `rackspace` provider.
pub struct NovaProvider {
    kind: Kind,
    http: reqwest::Client,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    timing: Timing,
}

/// A CREATE's own inputs: the image type's `image` and the hardware type's `flavor` (ids or
/// names), the parsed `ssh_key`, and `user_data` base64-encoded.
struct CreateInput {
    image: String,
    flavor: String,
    key: Option<PrivateKey>,
    user_data: Option<String>,
}

/// The admin's fields, read and checked.
struct Settings {
    creds: Credentials,
    auth_url: String,
    interface: String,
    region: Option<String>,
    networks: Vec<String>,
    security_groups: Vec<String>,
    availability_zone: Option<String>,
    key_name: Option<String>,
    ssh_user: String,
    ssh_key: Option<String>,
    /// `user_data` as the admin wrote it (base64-encoded when the server is made).
    user_data: Option<String>,
    /// The account's request budget (rate, burst; [`crate::throttle`]).
    budget: (f64, f64),
}

/// The most bytes of `user_data`, base64-encoded, the compute API takes (API reference, Create
/// Server: "The user_data ... must be Base64 encoded. Restricted to 65535 bytes").
pub const USER_DATA_MAX: usize = 65535;

/// A field's value as trimmed text (numbers too); `None` when missing or empty.
fn field(fields: &Map<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A comma- or space-separated list field.
fn list(fields: &Map<String, Value>, name: &str) -> Vec<String> {
    field(fields, name)
        .map(|v| {
            v.split([',', ' '])
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn providerid(task: &Task) -> Option<String> {
    task.config_str("providerid")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The server name of a task's node: its hostname, else `weft-<node id>`.
pub fn server_name(task: &Task) -> String {
    task.config_str("hostname")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("weft-{}", task.node_id))
}

impl NovaProvider {
    /// A provider of `kind` with the default waits.
    pub fn new(kind: Kind) -> NovaProvider {
        NovaProvider::with_timing(kind, Timing::default())
    }

    /// A provider with its own waits (tests poll faster).
    pub fn with_timing(kind: Kind, timing: Timing) -> NovaProvider {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client with default TLS");
        NovaProvider {
            kind,
            http,
            sessions: Mutex::new(HashMap::new()),
            timing,
        }
    }

    /// The `openstack` provider (Keystone v3).
    pub fn openstack() -> NovaProvider {
        NovaProvider::new(Kind::OpenStack)
    }

    /// The `rackspace` provider (Rackspace Identity v2.0).
    pub fn rackspace() -> NovaProvider {
        NovaProvider::new(Kind::Rackspace)
    }

    fn settings(&self, task: &Task) -> Result<Settings, PluginError> {
        self.settings_of(&task.provider_fields())
    }

    /// The admin's fields `f`, read and checked.
    fn settings_of(&self, f: &Map<String, Value>) -> Result<Settings, PluginError> {
        let name = self.kind.name();
        let bad = |m: String| PluginError::fatal(format!("{name}: {m}"));
        let creds = match self.kind {
            Kind::OpenStack => openstack_credentials(f),
            Kind::Rackspace => Credentials::ApiKey {
                username: field(f, "username").unwrap_or_default(),
                api_key: field(f, "api_key").unwrap_or_default(),
            },
        };
        creds.check().map_err(bad)?;
        let auth_url = field(f, "auth_url").unwrap_or_default();
        if auth_url.is_empty() && self.kind == Kind::OpenStack {
            return Err(bad("auth_url is required".into()));
        }
        if !auth_url.is_empty() && !auth_url.starts_with("http") {
            return Err(bad(format!("auth_url {auth_url:?} is not an http(s) URL")));
        }
        let interface = field(f, "interface").unwrap_or_else(|| "public".into());
        if !["public", "internal", "admin"].contains(&interface.as_str()) {
            return Err(bad(format!(
                "interface {interface:?} is not public, internal or admin"
            )));
        }
        if f.get("user_data")
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(bad("user_data must be text".into()));
        }
        Ok(Settings {
            creds,
            auth_url,
            interface,
            region: field(f, "region"),
            networks: list(f, "networks"),
            security_groups: list(f, "security_groups"),
            availability_zone: field(f, "availability_zone"),
            key_name: field(f, "key_name"),
            ssh_user: field(f, "ssh_user").unwrap_or_else(|| "root".into()),
            ssh_key: f
                .get("ssh_key")
                .and_then(Value::as_str)
                .filter(|k| !k.trim().is_empty())
                .map(str::to_string),
            user_data: f
                .get("user_data")
                .and_then(Value::as_str)
                .filter(|u| !u.trim().is_empty())
                .map(str::to_string),
            budget: crate::throttle::budget(f).map_err(PluginError::fatal)?,
        })
    }

    /// The session of these settings' credentials (made once, then shared).
    fn session(&self, s: &Settings) -> Arc<Session> {
        let mut h = Sha256::new();
        for part in [
            self.kind.name(),
            &s.auth_url,
            &s.interface,
            s.region.as_deref().unwrap_or(""),
            &s.creds.body().to_string(),
            &format!("{:?}", s.budget),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .entry(key)
            .or_insert_with(|| {
                let (rate, burst) = s.budget;
                Arc::new(
                    Session::new(
                        self.http.clone(),
                        s.creds.clone(),
                        &s.auth_url,
                        s.interface.clone(),
                        s.region.clone(),
                    )
                    .with_budget(rate, burst),
                )
            })
            .clone()
    }

    fn budget(&self, t: (Duration, Duration, Duration), task: &Task) -> Backoff {
        Backoff::new(t.0, t.1, t.2.min(task.timeout))
    }

    fn nova<'a>(&self, session: &'a Session, task: &Task) -> Nova<'a> {
        let (first, max, budget) = self.timing.retry;
        Nova {
            session,
            retry: (first, max, budget.min(task.timeout)),
        }
    }

    /// The key pair a new server gets: the admin's `key_name`, else `ssh_key`'s public half
    /// imported under a name derived from it.
    async fn key_pair(
        &self,
        nova: &Nova<'_>,
        s: &Settings,
        key: Option<&PrivateKey>,
    ) -> Result<Option<String>, PluginError> {
        if let Some(k) = &s.key_name {
            return Ok(Some(k.clone()));
        }
        let Some(key) = key else { return Ok(None) };
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| PluginError::fatal(format!("ssh_key: encoding its public key: {e}")))?;
        let digest = Sha256::digest(public.as_bytes());
        let name = format!(
            "weft-{}",
            digest[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        nova.ensure_keypair(&name, &public).await?;
        Ok(Some(name))
    }

    /// What CREATE needs besides the settings, read and checked before any call.
    fn create_input(&self, task: &Task, s: &Settings) -> Result<CreateInput, PluginError> {
        let need = |key: &str, what: &str| {
            task.config_str(key)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    PluginError::fatal(format!(
                        "no {key}: give the {what} a {} {key} id or name (providermap {key})",
                        self.kind.name()
                    ))
                })
        };
        let key = match &s.ssh_key {
            Some(k) => Some(
                PrivateKey::from_openssh(k.trim())
                    .map_err(|_| PluginError::fatal("ssh_key is not an OpenSSH private key"))?,
            ),
            None => None,
        };
        Ok(CreateInput {
            image: need("image", "image type")?,
            flavor: need("flavor", "hardware type")?,
            key,
            user_data: encoded_user_data(self.kind, s.user_data.as_deref())?,
        })
    }

    /// What a new server is made from: its key pair, and the ids of its image and flavor (each
    /// given by id or by name).
    async fn prepare(
        &self,
        nova: &Nova<'_>,
        s: &Settings,
        input: &CreateInput,
    ) -> Result<(Option<String>, String, String), PluginError> {
        let found = nova.find_image(&input.image).await?;
        let image = chosen(self.kind, "image", &input.image, found)?;
        let found = nova.find_flavor(&input.flavor).await?;
        let flavor = chosen(self.kind, "flavor", &input.flavor, found)?;
        let key_name = self.key_pair(nova, s, input.key.as_ref()).await?;
        Ok((key_name, image, flavor))
    }

    /// What CREATE answers for the server `id`. The SSH user is the image type's `sshuser`, else
    /// the admin's `ssh_user`.
    fn created(&self, task: &Task, s: &Settings, id: &str, stdout: String) -> TaskOutput {
        let user = task
            .config_str("sshuser")
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .unwrap_or(&s.ssh_user);
        let mut result = match &s.ssh_key {
            Some(k) => ssh::results(user, k, None),
            None => Map::new(),
        };
        result.insert("providerid".into(), json!(id));
        TaskOutput {
            result,
            stdout,
            ..Default::default()
        }
    }
}

/// `user_data` base64-encoded as the compute API takes it; a fatal error naming the field when
/// the encoding is longer than [`USER_DATA_MAX`].
fn encoded_user_data(kind: Kind, text: Option<&str>) -> Result<Option<String>, PluginError> {
    use base64::Engine as _;
    let Some(text) = text else { return Ok(None) };
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    if encoded.len() > USER_DATA_MAX {
        return Err(PluginError::fatal(format!(
            "{}: user_data is {} bytes base64-encoded ({} as text); the compute API takes at most {USER_DATA_MAX}",
            kind.name(),
            encoded.len(),
            text.len()
        )));
    }
    Ok(Some(encoded))
}

/// The id a look-up found for the task's `key` (`image` or `flavor`), or a fatal error naming
/// the field: nothing has that id or name, or several have that name.
fn chosen(kind: Kind, key: &str, value: &str, found: Found) -> Result<String, PluginError> {
    let name = kind.name();
    match found {
        Found::One(id) => Ok(id),
        Found::Nothing => Err(PluginError::fatal(format!(
            "{name}: {key} {value:?}: no {key} has that id or name"
        ))),
        Found::Several(ids) => Err(PluginError::fatal(format!(
            "{name}: {key} {value:?}: {} {key}s have that name ({}); give the id of one",
            ids.len(),
            ids.join(", ")
        ))),
    }
}

fn openstack_credentials(f: &Map<String, Value>) -> Credentials {
    let user = Ref {
        id: field(f, "user_id"),
        name: field(f, "user_name"),
        domain_id: field(f, "user_domain_id"),
        domain_name: field(f, "user_domain_name"),
    };
    if let Some(secret) = field(f, "application_credential_secret") {
        return Credentials::ApplicationCredential {
            id: field(f, "application_credential_id"),
            name: field(f, "application_credential_name"),
            user,
            secret,
        };
    }
    let project = Ref {
        id: field(f, "project_id"),
        name: field(f, "project_name"),
        // A project named without a domain is looked up in the user's.
        domain_id: field(f, "project_domain_id").or_else(|| {
            field(f, "project_domain_name")
                .is_none()
                .then(|| user.domain_id.clone())
                .flatten()
        }),
        domain_name: field(f, "project_domain_name").or_else(|| {
            field(f, "project_domain_id")
                .is_none()
                .then(|| user.domain_name.clone())
                .flatten()
        }),
    };
    Credentials::Password {
        password: field(f, "password").unwrap_or_default(),
        user,
        project,
    }
}

/// The server's (access, bind) IPv4 addresses, when it has one (see the module doc).
pub fn server_addresses(server: &Value) -> Option<(String, String)> {
    let mut fixed = Vec::new();
    let mut floating = Vec::new();
    let mut untyped: Vec<(String, String)> = Vec::new();
    if let Some(nets) = server.get("addresses").and_then(Value::as_object) {
        for (net, addrs) in nets {
            for a in addrs.as_array().into_iter().flatten() {
                let v4 = a.get("version").and_then(Value::as_u64) == Some(4);
                let Some(addr) = a.get("addr").and_then(Value::as_str).filter(|_| v4) else {
                    continue;
                };
                match a.get("OS-EXT-IPS:type").and_then(Value::as_str) {
                    Some("fixed") => fixed.push(addr.to_string()),
                    Some("floating") => floating.push(addr.to_string()),
                    _ => untyped.push((net.clone(), addr.to_string())),
                }
            }
        }
    }
    let on = |name: &str| {
        untyped
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
    };
    let bind = fixed
        .first()
        .cloned()
        .or_else(|| on("private"))
        .or_else(|| untyped.first().map(|(_, a)| a.clone()))?;
    let access = server
        .get("accessIPv4")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .or_else(|| floating.first().cloned())
        .or_else(|| on("public"))
        .unwrap_or_else(|| bind.clone());
    Some((access, bind))
}

/// One look at a server CONFIRM waits for.
fn confirm_poll(id: &str, server: Option<Value>) -> Result<Poll<(String, String)>, CloudError> {
    let Some(s) = server else {
        return Err(CloudError::from_status(
            "nova",
            404,
            "itemNotFound",
            format!("server {id} does not exist"),
            None,
        ));
    };
    let status = s.get("status").and_then(Value::as_str).unwrap_or("UNKNOWN");
    match status {
        "ACTIVE" => Ok(match server_addresses(&s) {
            Some(a) => Poll::Ready(a),
            None => Poll::Pending("ACTIVE without an IPv4 address".into()),
        }),
        "ERROR" => {
            let fault = s.get("fault").cloned().unwrap_or_default();
            let message = fault
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no fault message");
            let code = fault
                .get("code")
                .map(|c| c.to_string())
                .unwrap_or_else(|| "ERROR".into());
            Err(CloudError::from_status(
                "nova",
                500,
                format!("fault {code}"),
                format!("server {id} is in ERROR: {message}"),
                None,
            )
            .retryable(false))
        }
        "BUILD" | "REBUILD" | "REBOOT" | "HARD_REBOOT" | "PASSWORD" | "MIGRATING" | "RESIZE"
        | "UNKNOWN" => Ok(Poll::Pending(match s.get("progress") {
            Some(p) => format!("{status} ({p}%)"),
            None => status.to_string(),
        })),
        other => Err(CloudError::from_status(
            "nova",
            409,
            "ServerState",
            format!("server {id} is {other}, not ACTIVE"),
            None,
        )),
    }
}

fn text_field(label: &str, tip: &str) -> FieldSchema {
    FieldSchema {
        label: label.into(),
        field_type: "text".into(),
        tip: Some(tip.into()),
        ..Default::default()
    }
}

fn secret_field(label: &str, tip: &str) -> FieldSchema {
    FieldSchema {
        field_type: "password".into(),
        sensitive: true,
        ..text_field(label, tip)
    }
}

/// The fields both providers share: where servers go and how they are reached.
fn server_fields() -> Vec<(&'static str, FieldSchema)> {
    vec![
        (
            "region",
            text_field("Region", "the catalog region of the compute endpoint"),
        ),
        (
            "interface",
            text_field("Interface", "public (default), internal or admin"),
        ),
        (
            "networks",
            text_field("Networks", "network ids the servers join, comma-separated"),
        ),
        (
            "security_groups",
            text_field("Security groups", "security group names, comma-separated"),
        ),
        (
            "availability_zone",
            text_field("Availability zone", "where servers are placed"),
        ),
        (
            "key_name",
            text_field(
                "Key pair",
                "an existing key pair (default: ssh_key's public key, imported)",
            ),
        ),
        (
            "ssh_user",
            text_field("SSH user", "the user the key logs in as (default root)"),
        ),
        (
            "ssh_key",
            secret_field(
                "SSH private key",
                "OpenSSH private key the provisioner reaches servers with",
            ),
        ),
        (
            "user_data",
            secret_field(
                "User data",
                "text given to the server at boot (cloud-init); at most 65535 bytes once base64-encoded",
            ),
        ),
    ]
}

/// The fields of the credentials each kind of cloud takes.
fn credential_fields(kind: Kind) -> Vec<(&'static str, FieldSchema)> {
    match kind {
        Kind::OpenStack => vec![
            (
                "auth_url",
                text_field("Keystone URL", "e.g. https://keystone.example:5000/v3"),
            ),
            (
                "user_name",
                text_field("User", "user name (with user_domain_*)"),
            ),
            ("user_id", text_field("User id", "instead of user_name")),
            (
                "user_domain_name",
                text_field("User domain", "default: the default domain"),
            ),
            (
                "user_domain_id",
                text_field("User domain id", "instead of user_domain_name"),
            ),
            ("password", secret_field("Password", "the user's password")),
            (
                "project_name",
                text_field("Project", "project name (with project_domain_*)"),
            ),
            (
                "project_id",
                text_field("Project id", "instead of project_name"),
            ),
            (
                "project_domain_name",
                text_field("Project domain", "default: the user's domain"),
            ),
            (
                "project_domain_id",
                text_field("Project domain id", "instead of project_domain_name"),
            ),
            (
                "application_credential_id",
                text_field("Application credential id", "instead of a password"),
            ),
            (
                "application_credential_name",
                text_field("Application credential name", "with user_name or user_id"),
            ),
            (
                "application_credential_secret",
                secret_field("Application credential secret", "the credential's secret"),
            ),
        ],
        Kind::Rackspace => vec![
            (
                "auth_url",
                text_field(
                    "Identity URL",
                    "default https://identity.api.rackspacecloud.com/v2.0",
                ),
            ),
            (
                "username",
                text_field("User name", "the Rackspace cloud user"),
            ),
            ("api_key", secret_field("API key", "the user's API key")),
        ],
    }
}

fn plugin_type(kind: Kind) -> PluginType {
    let mut fields = credential_fields(kind);
    fields.extend(server_fields());
    fields.extend(crate::throttle::declared_fields());
    let required = match kind {
        Kind::OpenStack => vec!["auth_url"],
        Kind::Rackspace => vec!["username", "api_key", "region"],
    };
    let required = vec![required.into_iter().map(str::to_string).collect()];
    let admin = ParamSpec {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        required,
    };
    let (label, description) = match kind {
        Kind::OpenStack => (
            "OpenStack",
            "nodes are Nova servers; Keystone v3 password or application credential",
        ),
        Kind::Rackspace => (
            "Rackspace",
            "nodes are Rackspace Cloud Servers; Rackspace Identity v2.0 API key",
        ),
    };
    PluginType {
        name: kind.name().into(),
        label: Some(label.into()),
        description: Some(description.into()),
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

/// The body of a server create: `name`, image and flavor ids as `[name, image, flavor]`,
/// weft's metadata, the key pair, the provider's networks, security groups and availability
/// zone, and the user data (base64).
fn server_request(
    task: &Task,
    s: &Settings,
    [name, image, flavor]: [&str; 3],
    key_name: Option<&String>,
    user_data: Option<&str>,
) -> Value {
    let mut server = json!({
        "name": name, "imageRef": image, "flavorRef": flavor,
        "metadata": {META_NODE: task.node_id, META_CLUSTER: task.cluster_id,
            META_TENANT: if task.tenant_id.is_empty() { "-" } else { &task.tenant_id }},
    });
    if let Some(k) = key_name {
        server["key_name"] = json!(k);
    }
    if !s.networks.is_empty() {
        server["networks"] = json!(s
            .networks
            .iter()
            .map(|n| json!({"uuid": n}))
            .collect::<Vec<_>>());
    }
    if !s.security_groups.is_empty() {
        server["security_groups"] = json!(s
            .security_groups
            .iter()
            .map(|n| json!({"name": n}))
            .collect::<Vec<_>>());
    }
    if let Some(az) = &s.availability_zone {
        server["availability_zone"] = json!(az);
    }
    if let Some(u) = user_data {
        server["user_data"] = json!(u);
    }
    server
}

#[async_trait]
impl Provider for NovaProvider {
    fn plugin_type(&self) -> PluginType {
        plugin_type(self.kind)
    }

    async fn create(&self, task: &Task) -> PluginResult {
        let s = self.settings(task)?;
        let input = self.create_input(task, &s)?;
        let session = self.session(&s);
        let nova = self.nova(&session, task);
        let name = server_name(task);
        let mut backoff = self.budget(self.timing.retry, task);
        let mut prepared = None;
        loop {
            let found = nova.find(&name, &task.node_id).await?;
            if let Some(first) = found.first() {
                let id = first.get("id").and_then(Value::as_str).unwrap_or_default();
                let mut stdout = format!("server {name} exists: {id}\n");
                for extra in &found[1..] {
                    if let Some(x) = extra.get("id").and_then(Value::as_str) {
                        nova.delete(x).await?;
                        stdout.push_str(&format!("deleted a second server {x} of this node\n"));
                    }
                }
                return Ok(self.created(task, &s, id, stdout));
            }
            if prepared.is_none() {
                prepared = Some(self.prepare(&nova, &s, &input).await?);
            }
            let (key_name, image, flavor) = prepared.as_ref().expect("prepared above");
            let server = server_request(
                task,
                &s,
                [&name, image, flavor],
                key_name.as_ref(),
                input.user_data.as_deref(),
            );
            match nova.create(&server).await {
                Ok(id) => {
                    tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                        server = %id, %name, "server requested");
                    let stdout = format!("server {name} requested: {id} ({image}, {flavor})\n");
                    return Ok(self.created(task, &s, &id, stdout));
                }
                // The server may have been made before the failure: look again first.
                Err(e) if e.retryable => {
                    tracing::debug!(error = %e, "creating a server failed; looking again");
                    if !backoff.wait(e.retry_after).await {
                        return Err(e.into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let id = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        let s = self.settings(task)?;
        let session = self.session(&s);
        let nova = self.nova(&session, task);
        let (access, bind) = poll_until(
            &format!("server {id} ACTIVE"),
            self.budget(self.timing.poll, task),
            || async { confirm_poll(&id, nova.show(&id).await?) },
        )
        .await?;
        let hostname = task
            .config_str("hostname")
            .filter(|h| !h.is_empty())
            .map(str::to_string);
        Ok(TaskOutput {
            hostname,
            ipaddresses: Some(
                [
                    ("access_v4".to_string(), access.clone()),
                    ("bind_v4".to_string(), bind.clone()),
                ]
                .into(),
            ),
            stdout: format!("server {id} is ACTIVE: access {access}, bind {bind}\n"),
            ..Default::default()
        })
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let s = self.settings(task)?;
        let session = self.session(&s);
        let nova = self.nova(&session, task);
        let ids: Vec<String> = match providerid(task) {
            Some(id) => vec![id],
            None if task.node_id.is_empty() => Vec::new(),
            None => nova
                .find(&server_name(task), &task.node_id)
                .await?
                .iter()
                .filter_map(|s| s.get("id").and_then(Value::as_str).map(str::to_string))
                .collect(),
        };
        if ids.is_empty() {
            return Ok(TaskOutput {
                stdout: "no server was made for this node\n".into(),
                ..Default::default()
            });
        }
        let mut stdout = String::new();
        for id in ids {
            if !nova.delete(&id).await? {
                stdout.push_str(&format!("server {id} does not exist\n"));
                continue;
            }
            poll_until(
                &format!("server {id} deleted"),
                self.budget(self.timing.poll, task),
                || async {
                    Ok(match nova.show(&id).await? {
                        None => Poll::Ready(()),
                        Some(s) if s.get("status").and_then(Value::as_str) == Some("DELETED") => {
                            Poll::Ready(())
                        }
                        Some(s) => Poll::Pending(
                            s.get("status")
                                .and_then(Value::as_str)
                                .unwrap_or("UNKNOWN")
                                .to_string(),
                        ),
                    })
                },
            )
            .await?;
            tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                server = %id, "server deleted");
            stdout.push_str(&format!("server {id} deleted\n"));
        }
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }

    async fn machines(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        let s = self.settings_of(fields)?;
        let session = self.session(&s);
        let nova = Nova {
            session: &session,
            retry: self.timing.retry,
        };
        let all = nova.all_servers().await?;
        Ok(all.iter().filter_map(|m| swept(self.kind, m)).collect())
    }
}

/// A server with weft's marks as a sweep shows it (`None` without a `weft-node` mark).
fn swept(kind: Kind, s: &nova::Listed) -> Option<SweptMachine> {
    crate::sweep::marked(
        kind.name(),
        Some(&s.id),
        s.metadata.as_ref(),
        [META_NODE, META_CLUSTER, META_TENANT],
        s.status.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_prefer_fixed_for_bind_and_access_ip_or_floating_for_access() {
        let s = json!({"accessIPv4": "", "addresses": {"net": [
            {"addr": "fd00::5", "version": 6, "OS-EXT-IPS:type": "fixed"},
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"},
            {"addr": "203.0.113.9", "version": 4, "OS-EXT-IPS:type": "floating"}]}});
        assert_eq!(
            server_addresses(&s),
            Some(("203.0.113.9".into(), "10.0.0.5".into()))
        );
        let s = json!({"accessIPv4": "198.51.100.1", "addresses": {"net": [
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"}]}});
        assert_eq!(
            server_addresses(&s),
            Some(("198.51.100.1".into(), "10.0.0.5".into()))
        );
        let rax = json!({"addresses": {
            "public": [{"addr": "198.51.100.7", "version": 4}],
            "private": [{"addr": "10.176.0.7", "version": 4}]}});
        assert_eq!(
            server_addresses(&rax),
            Some(("198.51.100.7".into(), "10.176.0.7".into()))
        );
        assert_eq!(server_addresses(&json!({"addresses": {}})), None);
    }

    #[test]
    fn confirm_reads_states_and_faults() {
        let building = json!({"status": "BUILD", "progress": 40});
        assert!(matches!(
            confirm_poll("s", Some(building)),
            Ok(Poll::Pending(p)) if p == "BUILD (40%)"
        ));
        let failed = json!({"status": "ERROR", "fault": {"code": 500, "message": "No valid host was found."}});
        let e = confirm_poll("s", Some(failed)).unwrap_err();
        assert!(!e.retryable && e.message.contains("No valid host"), "{e}");
        let e = confirm_poll("s", None).unwrap_err();
        assert!(!e.retryable);
        assert!(confirm_poll("s", Some(json!({"status": "SHUTOFF"}))).is_err());
    }

    #[test]
    fn plugin_types_mark_credentials_sensitive() {
        for kind in [Kind::OpenStack, Kind::Rackspace] {
            let t = plugin_type(kind);
            crate::contract::check_plugin_type(&t);
            let admin = &t.parameters[&ParameterType::Admin];
            for (name, f) in &admin.fields {
                let secret = [
                    "password",
                    "application_credential_secret",
                    "api_key",
                    "ssh_key",
                    "user_data",
                ]
                .contains(&name.as_str());
                assert_eq!(f.sensitive, secret, "{name}");
            }
        }
    }

    #[test]
    fn credentials_come_from_the_fields() {
        let f: Map<String, Value> = serde_json::from_value(json!({
            "user_name": "u", "user_domain_name": "D", "password": "pw", "project_name": "p"}))
        .unwrap();
        let Credentials::Password { project, .. } = openstack_credentials(&f) else {
            panic!("a password");
        };
        assert_eq!(project.domain_name.as_deref(), Some("D"));
        let f: Map<String, Value> = serde_json::from_value(json!({
            "application_credential_id": "a", "application_credential_secret": "s", "password": "x"}))
        .unwrap();
        assert!(matches!(
            openstack_credentials(&f),
            Credentials::ApplicationCredential { .. }
        ));
    }
}
