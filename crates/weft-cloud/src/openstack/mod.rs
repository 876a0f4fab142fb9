//! The `openstack` and `rackspace` providers: a node is a Nova server. Both share the compute
//! code ([`nova`], [`neutron`]) and differ in how they get a token ([`identity`]): Keystone v3 (a
//! password or an application credential) for `openstack`, Rackspace Identity v2.0 (an API key)
//! for `rackspace`. The client is our own, over the workspace's reqwest: the `openstack` crate
//! cannot do Rackspace's v2.0 authentication, and the provider needs only a handful of calls.
//!
//! A server is named for the node (its hostname, else `weft-<node id>`) and carries weft's marks
//! as metadata. Its image and flavor are an id or a name, found as openstacksdk's `find` does
//! (the one with that id, else the one with exactly that name; none or several is a fatal error
//! naming them). With `floating_network` (openstack only), CONFIRM attaches a floating IP
//! described as weft's (one try: a CONFIRM retried after a lost answer finds it on the port) and
//! DELETE releases it. The lifecycle itself (look before launch, twins, waits, sweep) is the
//! cloud layer's ([`crate::cloud`]); this module is Nova's side of it. docs/providers.md
//! ("OpenStack and Rackspace") describes the behaviour and the fields in full.

pub mod identity;
pub mod neutron;
pub mod nova;

use std::sync::Arc;

use async_trait::async_trait;
use russh::keys::PrivateKey;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::cloud::fields::Fields;
use crate::cloud::token::Keyed;
use crate::cloud::{
    with_retries, Addresses, Cloud, CloudError, CloudProvider, Confirmed, Launched, Login, Machine,
    Marks, Prepare, Prepared, State, Waits, MARK_KEYS,
};
use crate::task::{PluginError, Task};
use identity::{Credentials, Ref};
use nova::{Nova, Server};

pub use crate::cloud::Timing;

/// Which identity API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Keystone v3: the `openstack` provider.
    OpenStack,
    /// Rackspace Identity v2.0: the `rackspace` provider.
    Rackspace,
}

impl Kind {
    /// The provider type's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::OpenStack => "openstack",
            Kind::Rackspace => "rackspace",
        }
    }
}

/// How the description of a floating IP weft allocated begins (then the node and its cluster).
const FLOATING_MARK: &str = "weft: node ";

/// The most bytes of `user_data`, base64-encoded, the compute API takes (API reference, Create
/// Server: "The user_data ... must be Base64 encoded. Restricted to 65535 bytes").
pub const USER_DATA_MAX: usize = 65535;

/// The `openstack` or `rackspace` provider.
pub type NovaProvider = CloudProvider<NovaCloud>;

impl NovaProvider {
    /// A provider of `kind` with the default waits.
    pub fn with_kind(kind: Kind) -> NovaProvider {
        let descriptor = match kind {
            Kind::OpenStack => include_str!("openstack.json"),
            Kind::Rackspace => include_str!("rackspace.json"),
        };
        CloudProvider::of(
            kind.name(),
            descriptor,
            NovaCloud {
                kind,
                http: crate::cloud::http::client(),
                sessions: Keyed::default(),
            },
        )
    }

    /// The `openstack` provider (Keystone v3).
    pub fn openstack() -> NovaProvider {
        NovaProvider::with_kind(Kind::OpenStack)
    }

    /// The `rackspace` provider (Rackspace Identity v2.0).
    pub fn rackspace() -> NovaProvider {
        NovaProvider::with_kind(Kind::Rackspace)
    }
}

/// Nova behind Keystone or Rackspace Identity, as the cloud layer drives it.
pub struct NovaCloud {
    kind: Kind,
    http: reqwest::Client,
    /// Nova by credentials (with the endpoint and budget), each holding its token.
    sessions: Keyed<Nova>,
}

impl std::fmt::Debug for NovaCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NovaCloud")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The admin's fields, read and checked, and Nova with their credentials.
pub struct Settings {
    nova: Arc<Nova>,
    fields: Fields,
    ssh_user: String,
    ssh_key: Option<String>,
    /// The external network floating IPs are allocated on (`openstack` only).
    floating_network: Option<String>,
}

/// What CREATE sends: the server, without its name and marks (the task's).
pub struct Request {
    server: Value,
}

/// The server name of a task's node: its hostname, else `weft-<node id>`.
pub fn server_name(task: &Task) -> String {
    task.config_str("hostname")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("weft-{}", task.node_id))
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

/// The one id a look-up found for the task's `key` (`image` or `flavor`), or a fatal error
/// naming the field: nothing has that id or name, or several have that name.
fn chosen(kind: Kind, key: &str, value: &str, mut ids: Vec<String>) -> Result<String, PluginError> {
    let name = kind.name();
    match ids.len() {
        1 => Ok(ids.remove(0)),
        0 => Err(PluginError::fatal(format!(
            "{name}: {key} {value:?}: no {key} has that id or name"
        ))),
        n => Err(PluginError::fatal(format!(
            "{name}: {key} {value:?}: {n} {key}s have that name ({}); give the id of one",
            ids.join(", ")
        ))),
    }
}

fn openstack_credentials(f: &Fields) -> Credentials {
    let field = |name: &str| f.text(name);
    let user = Ref {
        id: field("user_id"),
        name: field("user_name"),
        domain_id: field("user_domain_id"),
        domain_name: field("user_domain_name"),
    };
    if let Some(secret) = field("application_credential_secret") {
        return Credentials::ApplicationCredential {
            id: field("application_credential_id"),
            name: field("application_credential_name"),
            user,
            secret,
        };
    }
    // A project named without a domain is looked up in the user's.
    let domain = match (field("project_domain_id"), field("project_domain_name")) {
        (None, None) => (user.domain_id.clone(), user.domain_name.clone()),
        given => given,
    };
    let project = Ref {
        id: field("project_id"),
        name: field("project_name"),
        domain_id: domain.0,
        domain_name: domain.1,
    };
    Credentials::Password {
        password: field("password").unwrap_or_default(),
        user,
        project,
    }
}

/// A server as the cloud layer reads it (its addresses: [`Server::addresses`]).
fn machine(s: Server) -> Machine {
    let status = s.status.clone().unwrap_or_else(|| "UNKNOWN".into());
    let state = match status.as_str() {
        "ACTIVE" => State::Running,
        "BUILD" | "REBUILD" | "REBOOT" | "HARD_REBOOT" | "PASSWORD" | "MIGRATING" | "RESIZE"
        | "UNKNOWN" => State::Pending,
        "ERROR" => State::Failed,
        "DELETED" | "SOFT_DELETED" => State::Gone,
        _ => State::Stopped,
    };
    let (public, private) = match s.addresses() {
        Some((access, bind)) => ((access != bind).then_some(access), Some(bind)),
        None => (None, None),
    };
    let status = match (&s.fault, state) {
        (Some(f), State::Failed) => format!(
            "ERROR ({})",
            f.message.as_deref().unwrap_or("no fault message")
        ),
        (_, State::Pending) if s.progress.is_some() => {
            format!("{status} ({}%)", s.progress.unwrap_or_default())
        }
        _ => status,
    };
    Machine {
        marks: Marks::read(|k| s.meta(k), MARK_KEYS),
        id: s.id,
        state,
        status,
        addresses: Addresses { public, private },
    }
}

/// Releases the floating IPs weft allocated (their description starts with [`FLOATING_MARK`])
/// on the ports of the server `id`.
async fn release_floating_ips(nova: &Nova, id: &str) -> Result<(), CloudError> {
    for port in nova.ports(id).await? {
        for f in nova.floating_ips(&port.id).await? {
            if f.description.unwrap_or_default().starts_with(FLOATING_MARK) {
                let released = nova.release_floating_ip(&f.id).await?;
                tracing::info!(server = %id, floating_ip = %f.floating_ip_address, released,
                    "floating IP released");
            }
        }
    }
    Ok(())
}

impl NovaCloud {
    /// The floating address of the server `m` and what was done: the floating IP on one of its
    /// ports, else one allocated on `network` and attached to the port of its fixed address.
    async fn floating_address(
        &self,
        s: &Settings,
        network: &str,
        task: &Task,
        m: &Machine,
        w: &Waits,
    ) -> Result<(String, String), PluginError> {
        let nova = &s.nova;
        let found = with_retries(w.calls(), || nova.find_network(network)).await?;
        let network_id = chosen(self.kind, "floating_network", network, found)?;
        let ports = with_retries(w.calls(), || nova.ports(&m.id)).await?;
        for port in &ports {
            let held = with_retries(w.calls(), || nova.floating_ips(&port.id)).await?;
            if let Some(f) = held.into_iter().next() {
                let (ip, port) = (f.floating_ip_address, &port.id);
                let said = format!("floating IP {ip} on port {port}\n");
                return Ok((ip, said));
            }
        }
        let bind = m.addresses.private.as_deref();
        let holds_bind = |p: &&neutron::Port| {
            p.fixed_ips
                .iter()
                .any(|f| Some(f.ip_address.as_str()) == bind)
        };
        let Some(port) = ports.iter().find(holds_bind).or(ports.first()) else {
            let m = format!("server {} has no port yet to attach a floating IP to", m.id);
            return Err(PluginError::retryable(m));
        };
        let fixed = bind.filter(|_| holds_bind(&port));
        let (node, cluster) = (&task.node_id, &task.cluster_id);
        let description = format!("{FLOATING_MARK}{node} of cluster {cluster}");
        let f = nova
            .allocate_floating_ip(&network_id, &port.id, fixed, &description)
            .await?;
        tracing::info!(server = %m.id, floating_ip = %f.floating_ip_address, "floating IP allocated");
        let said = format!(
            "floating IP {} allocated on port {}\n",
            f.floating_ip_address, port.id
        );
        Ok((f.floating_ip_address, said))
    }

    /// Nova with these credentials (made once, then shared by every task using them).
    fn nova(&self, f: &Fields, creds: Credentials) -> Result<Arc<Nova>, PluginError> {
        let bad = |m: String| PluginError::fatal(format!("{}: {m}", self.kind.name()));
        let auth_url = f.text("auth_url").unwrap_or_default();
        if auth_url.is_empty() && self.kind == Kind::OpenStack {
            return Err(bad("auth_url is required".into()));
        }
        if !auth_url.is_empty() && !auth_url.starts_with("http") {
            return Err(bad(format!("auth_url {auth_url:?} is not an http(s) URL")));
        }
        let interface = f.text("interface").unwrap_or_else(|| "public".into());
        if !["public", "internal", "admin"].contains(&interface.as_str()) {
            return Err(bad(format!(
                "interface {interface:?} is not public, internal or admin"
            )));
        }
        let region = f.text("region");
        let budget = crate::throttle::budget(&f.0).map_err(PluginError::fatal)?;
        let (kind, body) = (self.kind.name(), creds.body());
        let r = region.as_deref().unwrap_or("");
        let key = format!("{kind}\0{auth_url}\0{interface}\0{r}\0{body}\0{budget:?}\0");
        Ok(self.sessions.of(&hex::encode(Sha256::digest(key)), || {
            let http = self.http.clone();
            Nova::new(http, creds, &auth_url, (interface, region), budget)
        }))
    }

    /// The key pair a new server gets: the admin's `key_name`, else `ssh_key`'s public half
    /// imported under a name derived from it.
    async fn key_pair(&self, s: &Settings, w: &Waits) -> Result<Option<String>, PluginError> {
        if let Some(k) = s.fields.text("key_name") {
            return Ok(Some(k));
        }
        let Some(key) = &s.ssh_key else {
            return Ok(None);
        };
        let key = PrivateKey::from_openssh(key.trim())
            .map_err(|_| PluginError::fatal("ssh_key is not an OpenSSH private key"))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| PluginError::fatal(format!("ssh_key: encoding its public key: {e}")))?;
        let name = hex::encode(&Sha256::digest(public.as_bytes())[..8]);
        let name = format!("weft-{name}");
        with_retries(w.calls(), || s.nova.ensure_keypair(&name, &public)).await?;
        Ok(Some(name))
    }

    /// The server a CREATE makes: the image type's `image` and the hardware type's `flavor`, the
    /// admin's `networks`, `security_groups`, `availability_zone`, `user_data` and key pair.
    async fn server(&self, s: &Settings, task: &Task, w: &Waits) -> Result<Value, PluginError> {
        let kind = self.kind.name();
        let need = |key: &str, what: &str| {
            task.config_str(key)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    PluginError::fatal(format!(
                        "no {key}: give the {what} a {kind} {key} id or name (providermap {key})"
                    ))
                })
        };
        let image = need("image", "image type")?;
        let flavor = need("flavor", "hardware type")?;
        let user_data = encoded_user_data(self.kind, s.fields.raw("user_data"))?;
        let nova = &s.nova;
        let found = with_retries(w.calls(), || nova.find_image(&image)).await?;
        let image_id = chosen(self.kind, "image", &image, found)?;
        let found = with_retries(w.calls(), || nova.find_flavor(&flavor)).await?;
        let flavor_id = chosen(self.kind, "flavor", &flavor, found)?;
        let marks = Marks::of(task);
        let mut server = json!({
            "name": server_name(task), "imageRef": image_id, "flavorRef": flavor_id,
            "metadata": {MARK_KEYS[0]: task.node_id, MARK_KEYS[1]: task.cluster_id,
                MARK_KEYS[2]: marks.tenant},
        });
        for (field, key) in [("networks", "uuid"), ("security_groups", "name")] {
            let items: Vec<Value> = s
                .fields
                .list(field)
                .iter()
                .map(|v| json!({ key: v }))
                .collect();
            if !items.is_empty() {
                server[field] = json!(items);
            }
        }
        let az = s.fields.text("availability_zone");
        let key_name = self.key_pair(s, w).await?;
        for (attr, v) in [
            ("key_name", key_name),
            ("availability_zone", az),
            ("user_data", user_data),
        ] {
            if let Some(v) = v {
                server[attr] = json!(v);
            }
        }
        Ok(server)
    }
}

#[async_trait]
impl Cloud for NovaCloud {
    type Account = Settings;
    type Request = Request;

    fn account(&self, f: &Fields) -> Result<Settings, PluginError> {
        let creds = match self.kind {
            Kind::OpenStack => openstack_credentials(f),
            Kind::Rackspace => Credentials::ApiKey {
                username: f.text("username").unwrap_or_default(),
                api_key: f.text("api_key").unwrap_or_default(),
            },
        };
        creds
            .check()
            .map_err(|m| PluginError::fatal(format!("{}: {m}", self.kind.name())))?;
        if f.0
            .get("user_data")
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(PluginError::fatal(format!(
                "{}: user_data must be text",
                self.kind.name()
            )));
        }
        Ok(Settings {
            nova: self.nova(f, creds)?,
            ssh_user: f.text("ssh_user").unwrap_or_else(|| "root".into()),
            ssh_key: f.raw("ssh_key").map(str::to_string),
            floating_network: f
                .text("floating_network")
                .filter(|_| self.kind == Kind::OpenStack),
            fields: f.clone(),
        })
    }

    fn valid_id(&self, id: &str) -> bool {
        !id.is_empty() && id.len() <= 64 && !id.contains('/')
    }

    async fn prepare(&self, s: &Settings, task: &Task, w: &Waits) -> Prepare<Request> {
        let server = self.server(s, task, w).await?;
        let user = crate::keys::ssh_user(task, &s.ssh_user);
        Ok(Prepared {
            login: s.ssh_key.clone().map(|key| Login { user, key }),
            stdout: format!(
                "server {} from image {} and flavor {}\n",
                server["name"].as_str().unwrap_or_default(),
                server["imageRef"].as_str().unwrap_or_default(),
                server["flavorRef"].as_str().unwrap_or_default()
            ),
            request: Request { server },
            result: Default::default(),
        })
    }

    /// One POST: a retried one could make a second server; the layer looks again first.
    async fn launch(
        &self,
        s: &Settings,
        req: &Request,
        _w: &Waits,
    ) -> Result<Launched, PluginError> {
        Ok(Launched::Made(s.nova.create(&req.server).await?))
    }

    async fn find(&self, s: &Settings, task: &Task) -> Result<Vec<Machine>, CloudError> {
        let found = s.nova.find(&server_name(task), &task.node_id).await?;
        Ok(found.into_iter().map(machine).collect())
    }

    async fn get(&self, s: &Settings, id: &str) -> Result<Option<Machine>, CloudError> {
        Ok(s.nova.show(id).await?.map(machine))
    }

    async fn terminate(&self, s: &Settings, id: &str) -> Result<bool, CloudError> {
        if s.floating_network.is_some() {
            release_floating_ips(&s.nova, id).await?;
        }
        s.nova.delete(id).await
    }

    async fn confirmed(
        &self,
        s: &Settings,
        task: &Task,
        m: &Machine,
        w: &Waits,
    ) -> Result<Confirmed, PluginError> {
        let Some(network) = &s.floating_network else {
            return Ok(Confirmed::default());
        };
        let (address, stdout) = self.floating_address(s, network, task, m, w).await?;
        Ok(Confirmed {
            public: Some(address),
            stdout,
            ..Default::default()
        })
    }

    async fn marked(&self, s: &Settings) -> Result<Vec<Machine>, CloudError> {
        let all = s.nova.all_servers().await?;
        Ok(all
            .into_iter()
            .map(machine)
            .filter(|m| m.marks.is_some())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(v: Value) -> Server {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn addresses_prefer_fixed_for_bind_and_access_ip_or_floating_for_access() {
        let both = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        let s = server(json!({"id": "s", "accessIPv4": "", "addresses": {"net": [
            {"addr": "fd00::5", "version": 6, "OS-EXT-IPS:type": "fixed"},
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"},
            {"addr": "203.0.113.9", "version": 4, "OS-EXT-IPS:type": "floating"}]}}));
        assert_eq!(s.addresses(), both("203.0.113.9", "10.0.0.5"));
        let s = server(
            json!({"id": "s", "accessIPv4": "198.51.100.1", "addresses": {"net": [
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"}]}}),
        );
        assert_eq!(s.addresses(), both("198.51.100.1", "10.0.0.5"));
        let rax = server(json!({"id": "s", "addresses": {
            "public": [{"addr": "198.51.100.7", "version": 4}],
            "private": [{"addr": "10.176.0.7", "version": 4}]}}));
        assert_eq!(rax.addresses(), both("198.51.100.7", "10.176.0.7"));
        assert_eq!(
            server(json!({"id": "s", "addresses": {}})).addresses(),
            None
        );
        let m = machine(server(
            json!({"id": "s", "status": "ACTIVE", "addresses": {"net": [
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"}]}}),
        ));
        let a = m.addresses;
        assert_eq!((a.public, a.private.as_deref()), (None, Some("10.0.0.5")));
    }

    #[test]
    fn states_and_faults_are_read() {
        let m = machine(server(
            json!({"id": "s", "status": "BUILD", "progress": 40}),
        ));
        assert_eq!(
            (m.state, m.status.as_str()),
            (State::Pending, "BUILD (40%)")
        );
        let m = machine(server(json!({"id": "s", "status": "ERROR",
            "fault": {"code": 500, "message": "No valid host was found."}})));
        assert_eq!(m.state, State::Failed);
        assert!(m.status.contains("No valid host"), "{}", m.status);
        let off = machine(server(json!({"id": "s", "status": "SHUTOFF"})));
        assert_eq!(off.state, State::Stopped);
        let m = machine(server(json!({"id": "s", "status": "ACTIVE",
            "metadata": {"weft-node": "n1", "weft-cluster": "4"}})));
        let s = m.swept("openstack").unwrap();
        assert_eq!((s.node.as_str(), s.tenant.as_str()), ("n1", "-"));
    }

    #[test]
    fn credentials_come_from_the_fields() {
        let creds = |v: Value| openstack_credentials(&Fields(serde_json::from_value(v).unwrap()));
        let password = json!({"user_name": "u", "user_domain_name": "D", "password": "pw",
            "project_name": "p"});
        let Credentials::Password { project, .. } = creds(password) else {
            panic!("a password");
        };
        assert_eq!(project.domain_name.as_deref(), Some("D"));
        let app = json!({"application_credential_id": "a", "application_credential_secret": "s",
            "password": "x"});
        assert!(matches!(
            creds(app),
            Credentials::ApplicationCredential { .. }
        ));
    }
}
