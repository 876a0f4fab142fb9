//! The `joyent` provider: a node is a Triton machine (CloudAPI), reached over SSH.
//!
//! Every request is signed with the account's key ([`sign`]). The machine is named after the
//! node ([`machine_name`]) and tagged with weft's marks; a create refused because the name is
//! taken is followed by another look-up, so a retried CREATE never makes a second machine.
//! CloudAPI writes the account's own keys into a new machine's `root_authorized_keys` and drops
//! any the request gives (`loadSSHKeys` in `lib/machines.js`), so CREATE first adds the
//! per-cluster key ([`crate::keys`]) to the account (or to the sub-user `user` weft signs as),
//! and a machine made without it is deleted. The key is one per cluster: it goes once no machine
//! of the cluster is left. The lifecycle itself (look before launch, twins, waits, sweep,
//! dropping the key with the cluster's last machine) is the cloud layer's ([`crate::cloud`]);
//! docs/providers.md ("Joyent Triton") describes the behaviour and the fields in full.

pub mod cloudapi;
pub mod sign;

use std::net::Ipv4Addr;

use async_trait::async_trait;
use russh::keys::ssh_key::PrivateKey;
use serde_json::{json, Value};

use crate::cloud::fields::Fields;
use crate::cloud::{
    poll_until, with_retries, Addresses, Cloud, CloudError, CloudProvider, Launched, Machine,
    Marks, Poll, Prepare, Prepared, State, Waits, MARK_KEYS, MARK_NODE,
};
use crate::task::{PluginError, Task};
use crate::throttle::Buckets;
use cloudapi::{Account, CLOUD};
use sign::{md5_fingerprint, AccountKey};

pub use crate::cloud::Timing;

/// The provider type name.
pub const NAME: &str = "joyent";
/// The user the cluster key logs in as unless the image type names an `sshuser`.
pub const DEFAULT_SSH_USER: &str = "root";

/// The `joyent` provider.
pub type JoyentProvider = CloudProvider<Joyent>;

/// Triton CloudAPI, as the cloud layer drives it.
#[derive(Debug, Default)]
pub struct Joyent {
    http: crate::cloud::http::Http,
    /// Each account's request budget ([`crate::throttle`]), shared by every worker.
    buckets: Buckets,
}

impl Default for JoyentProvider {
    fn default() -> JoyentProvider {
        CloudProvider::of(NAME, include_str!("plugin.json"), Joyent::default())
    }
}

/// An account and what CREATE needs of the fields.
pub struct Target {
    api: Account,
    fields: Fields,
}

/// What CREATE sends: the machine and the cluster key it must find in it.
pub struct Request {
    body: Value,
    public: String,
    fingerprint: String,
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

/// A machine as the cloud layer reads it: `primaryIp` (else the first address) is public, the
/// first private (RFC 1918) address is private (else `primaryIp`).
fn machine(m: cloudapi::Machine) -> Machine {
    let state = match m.state.as_str() {
        "running" => State::Running,
        "provisioning" | "" => State::Pending,
        "failed" => State::Failed,
        "deleted" => State::Gone,
        _ => State::Stopped,
    };
    let primary = m
        .primary_ip
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| m.ips.first().cloned());
    let private = m
        .ips
        .iter()
        .find(|ip| ip.parse::<Ipv4Addr>().is_ok_and(|a| a.is_private()))
        .cloned()
        .or_else(|| primary.clone());
    Machine {
        marks: Marks::read(|k| m.tag(k), MARK_KEYS),
        id: m.id,
        state,
        status: m.state,
        addresses: Addresses {
            public: primary,
            private,
        },
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

/// The name the cluster key gets on the account: `weft-<tenant>-<cluster>`. Names need not be
/// unique on CloudAPI; weft reads and deletes the key by its fingerprint.
pub fn key_name(tenant: &str, cluster: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(60)
            .collect()
    };
    let tenant = if tenant.is_empty() { "-" } else { tenant };
    format!("weft-{}-{}", clean(tenant), clean(cluster))
}

/// The public key's MD5 fingerprint (how CloudAPI names keys).
fn fingerprint(key: &PrivateKey) -> Result<String, PluginError> {
    let blob = key
        .public_key()
        .to_bytes()
        .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
    Ok(md5_fingerprint(&blob))
}

/// Whether the machine's `root_authorized_keys` (as CloudAPI wrote them) hold `public`;
/// `None` when the machine shows none (an image with passwords instead of keys).
fn holds_key(m: &cloudapi::Machine, public: &str) -> Option<bool> {
    let written = m.metadata.get("root_authorized_keys")?.as_str()?;
    let blob = public.split_whitespace().nth(1)?;
    Some(
        written
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(blob)),
    )
}

impl Target {
    /// The cluster's SSH key (the same for every node and provisioner).
    fn cluster_key(&self, task: &Task) -> PrivateKey {
        let (login, fp) = (&self.api.login, self.api.key.fingerprint());
        let seed = match self.fields.text("sshkeyseed") {
            Some(s) => format!("joyent:{s}"),
            None => format!("joyent-key:{login}:{fp}"),
        };
        crate::keys::cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id)
    }

    /// The CreateMachine body; an image given by name is resolved to its newest active UUID.
    async fn machine_body(&self, task: &Task, w: &Waits) -> Result<Value, PluginError> {
        let mut image = self.fields.pick(task, "image", "image")?;
        if !is_uuid(&image) {
            let named = with_retries(w.calls(), || self.api.image_named(&image)).await?;
            let at = &self.api.endpoint;
            let m = format!("no active image named {image} in {at}");
            image = named.ok_or_else(|| PluginError::not_found(m))?;
        }
        let marks = Marks::of(task);
        let mut body = json!({
            "name": machine_name(&task.node_id),
            "image": image,
            "package": self.fields.pick(task, "flavor", "package")?,
            format!("tag.{}", MARK_KEYS[0]): marks.node,
            format!("tag.{}", MARK_KEYS[1]): marks.cluster,
            format!("tag.{}", MARK_KEYS[2]): marks.tenant,
        });
        let nets = self.fields.list("networks");
        if !nets.is_empty() {
            body["networks"] = json!(nets);
        }
        Ok(body)
    }

    /// Puts the cluster key on the account (or the sub-user) unless CloudAPI holds it already;
    /// answers what happened.
    async fn ensure_key(
        &self,
        task: &Task,
        public: &str,
        fp: &str,
        w: &Waits,
    ) -> Result<String, PluginError> {
        let api = &self.api;
        if with_retries(w.calls(), || api.get_key(fp)).await?.is_some() {
            return Ok(String::new());
        }
        let name = key_name(&task.tenant_id, &task.cluster_id);
        match with_retries(w.calls(), || api.create_key(&name, public)).await {
            Ok(k) => {
                tracing::info!(cluster_id = %task.cluster_id, key = %name,
                    fingerprint = %k.fingerprint, "cluster key added to the account");
                Ok(format!("cluster key {name} ({fp}) added\n"))
            }
            // "key already exists or is invalid": another node of the cluster added it, or not.
            Err(e) if e.status == 409 => match with_retries(w.calls(), || api.get_key(fp)).await? {
                Some(_) => Ok(String::new()),
                None => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Fails (after deleting it) a machine CloudAPI made without the cluster key.
    async fn check_machine_key(
        &self,
        m: &cloudapi::Machine,
        req: &Request,
        w: &Waits,
    ) -> Result<(), PluginError> {
        if holds_key(m, &req.public) != Some(false) {
            return Ok(());
        }
        let api = &self.api;
        with_retries(w.calls(), || api.delete_machine(&m.id)).await?;
        poll_until(&format!("machine {} gone", m.id), w.wait(), || async {
            Ok(match api.get_machine(&m.id).await? {
                None => Poll::Ready(()),
                Some(m) => Poll::Pending(m.state),
            })
        })
        .await?;
        let fp = &req.fingerprint;
        if with_retries(w.calls(), || api.get_key(fp)).await?.is_none() {
            return Err(PluginError::retryable(format!(
                "machine {} was made while the cluster key {fp} was off the account \
                 (removed meanwhile, as the DELETE of the cluster's last other machine does); \
                 it was deleted",
                m.id
            )));
        }
        Err(PluginError::fatal(format!(
            "machine {} was made without the cluster key {fp}, although {} holds it; it was \
             deleted. CloudAPI writes a sub-user's keys into machines only when the sub-user is \
             a default member of the account's administrator role",
            m.id,
            api.user.as_deref().unwrap_or(&api.login)
        )))
    }
}

#[async_trait]
impl Cloud for Joyent {
    type Account = Target;
    type Request = Request;

    fn account(&self, fields: &Fields) -> Result<Target, PluginError> {
        let endpoint = fields
            .url("endpoint")?
            .ok_or_else(|| PluginError::fatal("provider field endpoint is missing"))?;
        let login = fields.required("login")?;
        let key = AccountKey::from_text(&fields.required("key")?).map_err(PluginError::fatal)?;
        let user = fields.text("user");
        for (what, v) in [("login", Some(&login)), ("user", user.as_ref())] {
            if v.is_some_and(|v| !valid_login(v)) {
                let m = format!("provider field {what} is not a Triton login name");
                return Err(PluginError::fatal(m));
            }
        }
        let (rate, burst) = crate::throttle::budget(&fields.0).map_err(PluginError::fatal)?;
        Ok(Target {
            api: Account {
                http: self.http.0.clone(),
                bucket: self.buckets.of(&format!("{endpoint}/{login}"), rate, burst),
                key,
                endpoint,
                login,
                user,
                key_id: fields.text("key_id"),
            },
            fields: fields.clone(),
        })
    }

    fn valid_id(&self, id: &str) -> bool {
        valid_id(id)
    }

    async fn prepare(&self, t: &Target, task: &Task, w: &Waits) -> Prepare<Request> {
        let key = t.cluster_key(task);
        let (login, public) = crate::keys::cluster_login(task, DEFAULT_SSH_USER, &key)?;
        let fingerprint = fingerprint(&key)?;
        let body = t.machine_body(task, w).await?;
        let stdout = t.ensure_key(task, &public, &fingerprint, w).await?;
        let name = json!(machine_name(&task.node_id));
        Ok(Prepared {
            request: Request {
                body,
                public,
                fingerprint,
            },
            login: Some(login),
            stdout,
            result: [("machinename".to_string(), name)].into_iter().collect(),
        })
    }

    async fn launch(&self, t: &Target, req: &Request, w: &Waits) -> Result<Launched, PluginError> {
        let Some(m) = with_retries(w.calls(), || t.api.create_machine(&req.body)).await? else {
            // The name is taken: an earlier try made it (or is making it).
            return Ok(Launched::Taken);
        };
        if !valid_id(&m.id) {
            let m = "CloudAPI answered a machine without an id";
            return Err(PluginError::retryable(m));
        }
        t.check_machine_key(&m, req, w).await?;
        Ok(Launched::Made(m.id))
    }

    async fn find(&self, t: &Target, task: &Task) -> Result<Vec<Machine>, CloudError> {
        let marks = &Marks::of(task);
        let name = machine_name(&marks.node);
        let found = t.api.machines_named(&name).await?;
        let node = Some(&marks.node);
        if let Some(other) = found.iter().find(|m| m.tag(MARK_NODE).as_ref() != node) {
            let (id, node) = (&other.id, &marks.node);
            let m =
                format!("machine {name} ({id}) exists and was not made by weft for node {node}");
            let e = CloudError::from_status(CLOUD, 409, "MachineExists", m, None);
            return Err(e);
        }
        let live = found.into_iter().map(machine).filter(Machine::is_live);
        Ok(live.collect())
    }

    async fn get(&self, t: &Target, id: &str) -> Result<Option<Machine>, CloudError> {
        Ok(t.api.get_machine(id).await?.map(machine))
    }

    async fn terminate(&self, t: &Target, id: &str) -> Result<bool, CloudError> {
        t.api.delete_machine(id).await
    }

    async fn marked(&self, t: &Target) -> Result<Vec<Machine>, CloudError> {
        let all = t.api.all_machines().await?;
        Ok(all
            .into_iter()
            .map(machine)
            .filter(|m| m.marks.is_some())
            .collect())
    }

    fn has_cluster_key(&self, _t: &Target) -> bool {
        true
    }

    /// The key of the current credentials goes, and any of this cluster's name: a key added
    /// before the account key or `sshkeyseed` was changed derives differently.
    async fn drop_cluster_key(
        &self,
        t: &Target,
        task: &Task,
        w: &Waits,
    ) -> Result<String, PluginError> {
        let fp = fingerprint(&t.cluster_key(task))?;
        let name = key_name(&task.tenant_id, &task.cluster_id);
        let keys = with_retries(w.calls(), || t.api.list_keys()).await?;
        let ours = keys
            .into_iter()
            .filter(|k| k.fingerprint == fp || k.name == name);
        let mut gone: Vec<String> = ours.map(|k| k.fingerprint).collect();
        gone.dedup();
        let mut out = String::new();
        for fp in gone {
            if with_retries(w.calls(), || t.api.delete_key(&fp)).await? {
                tracing::info!(cluster_id = %task.cluster_id, fingerprint = %fp,
                    "cluster key removed from the account");
                let said =
                    format!("cluster key {fp} removed (the cluster's last machine is gone)\n");
                out.push_str(&said);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn triton(v: Value) -> cloudapi::Machine {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn names_and_addresses() {
        assert_eq!(machine_name("n 1/x"), "weft-n-1-x");
        assert!(valid_id("55a366ce-6c30-4f88-a36b-53638bd0cb62"));
        assert!(!valid_id("../x") && !valid_id(""));
        assert!(is_uuid("1b4bc8a4-5cb6-4a4b-8c59-b6a7c0d2f3e1"));
        assert!(!is_uuid("debian-12") && !is_uuid("1b4bc8a4-5cb6-4a4b-8c59"));
        let addresses = |v: Value| machine(triton(v)).addresses;
        let a = addresses(json!({"id": "a", "state": "running",
            "primaryIp": "203.0.113.5", "ips": ["203.0.113.5", "10.88.0.5"]}));
        assert_eq!(a.public.as_deref(), Some("203.0.113.5"));
        assert_eq!(a.private.as_deref(), Some("10.88.0.5"));
        let a = addresses(json!({"id": "a", "primaryIp": "203.0.113.5", "ips": ["203.0.113.5"]}));
        assert_eq!(a.private.as_deref(), Some("203.0.113.5"));
        assert_eq!(
            addresses(json!({"id": "a", "ips": []})),
            Addresses::default()
        );
    }

    #[test]
    fn key_names_marks_and_written_keys() {
        assert_eq!(key_name("", "17"), "weft---17");
        assert_eq!(key_name("acme corp", "17"), "weft-acme-corp-17");
        assert!(valid_login("weft.ops@x") && !valid_login("a/b") && !valid_login(""));
        let public = "ssh-ed25519 AAAAC3Nza weft-cluster-17";
        let holds =
            |written: Value| holds_key(&triton(json!({"id": "a", "metadata": written})), public);
        let two = "ssh-rsa BBBB admin\nssh-ed25519 AAAAC3Nza other\n";
        assert_eq!(holds(json!({"root_authorized_keys": two})), Some(true));
        let one = "ssh-rsa BBBB admin\n";
        assert_eq!(holds(json!({"root_authorized_keys": one})), Some(false));
        assert_eq!(holds(json!({})), None);
        let m = machine(triton(json!({"id": "55a366ce-6c30-4f88-a36b-53638bd0cb62",
            "state": "running", "tags": {"weft-node": "n1", "weft-cluster": "17"}})));
        let s = m.swept(NAME).unwrap();
        let marks = (s.node.as_str(), s.cluster.as_str(), s.tenant.as_str());
        assert_eq!(marks, ("n1", "17", "-"));
        let bare = machine(triton(json!({"id": "55a366ce", "tags": {}})));
        assert!(bare.swept(NAME).is_none());
    }
}
