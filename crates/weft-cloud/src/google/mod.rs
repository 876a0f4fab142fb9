//! The `google` provider: a node is a Compute Engine instance (Compute API v1), reached over SSH.
//!
//! Calls are made as a service account (the sensitive field `json_key`) with an access token
//! ([`auth`]) in the field `project` (else the key's `project_id`) and `zone`. The instance is
//! named after the node ([`instance_name`]) and labelled with weft's marks: CREATE looks the name
//! up first and takes over an instance of this node, and an insert refused with `409
//! alreadyExists` (an earlier, killed try made it) is taken over too, so a retried CREATE never
//! makes a second machine. The SSH key is the per-cluster key of [`crate::keys`], derived from
//! the sensitive field `sshkeyseed`, else from a hash of the service-account key. The optional
//! field `endpoint` replaces the Compute API's base URL (with the key's `token_uri`, that is how
//! tests point the provider at a fake on loopback). The lifecycle itself is the cloud layer's
//! ([`crate::cloud`]); docs/providers.md ("Google Compute Engine") describes the behaviour and
//! the fields in full.

pub mod auth;
pub mod compute;

use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::cloud::fields::{bad, Fields};
use crate::cloud::token::{Keyed, Token};
use crate::cloud::{
    poll_until, with_retries, Addresses, Cloud, CloudError, CloudProvider, Launched, Machine,
    Marks, Poll, Prepare, Prepared, State, Waits, MARK_KEYS, MARK_NODE,
};
use crate::task::{PluginError, Task};
use crate::throttle::Buckets;
use auth::ServiceAccount;
use compute::{Instance, Operation, Zone, CLOUD, DEFAULT_ENDPOINT};

pub use crate::cloud::Timing;

/// The provider type name.
pub const NAME: &str = "google";
/// The user the cluster key logs in as unless the image type names an `sshuser`.
pub const DEFAULT_SSH_USER: &str = "weft";
const DEFAULT_NETWORK: &str = "global/networks/default";

/// The `google` provider.
pub type GoogleProvider = CloudProvider<Google>;

/// Compute Engine, as the cloud layer drives it.
#[derive(Default)]
pub struct Google {
    http: crate::cloud::http::Http,
    /// Each service account's access token.
    tokens: Keyed<Token<String>>,
    /// Each project's request budget ([`crate::throttle`]), shared by every worker.
    buckets: Buckets,
}

impl Default for GoogleProvider {
    fn default() -> GoogleProvider {
        CloudProvider::of(NAME, include_str!("plugin.json"), Google::default())
    }
}

impl std::fmt::Debug for Google {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Google").finish_non_exhaustive()
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

/// One project and zone, as one service account, and the fields CREATE reads.
pub struct Account {
    api: Zone,
    zone: String,
    fields: Fields,
}

/// The region of a zone (`us-central1-a` -> `us-central1`).
fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(r, _)| r)
}

/// The instance's network interface: network, subnetwork, and a one-to-one NAT unless the
/// field `external_ip` says no.
fn network_interface(a: &Account) -> Result<Value, PluginError> {
    let network = a
        .fields
        .text("network")
        .unwrap_or_else(|| DEFAULT_NETWORK.into());
    let mut nic = json!({ "network": network });
    if let Some(sub) = a.fields.text("subnetwork") {
        let sub = if sub.contains('/') {
            sub
        } else if valid_name(&sub) {
            format!("regions/{}/subnetworks/{sub}", region_of(&a.zone))
        } else {
            return Err(bad(
                "subnetwork",
                format!("{sub:?} is not a subnetwork name or path"),
            ));
        };
        nic["subnetwork"] = json!(sub);
    }
    if a.fields.flag("external_ip")? != Some(false) {
        nic["accessConfigs"] = json!([{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]);
    }
    Ok(nic)
}

/// The network tags of the field `tags` (comma separated), each a valid GCE tag.
fn network_tags(a: &Account) -> Result<Vec<String>, PluginError> {
    let tags = a.fields.list("tags");
    if let Some(tag) = tags.iter().find(|t| !valid_name(t)) {
        return Err(bad(
            "tags",
            format!(
                "{tag:?} is not a network tag (lowercase letters, digits and -, starting with a \
                 letter, at most 63 characters)"
            ),
        ));
    }
    Ok(tags)
}

/// An instance as the cloud layer reads it.
fn machine(i: Instance) -> Machine {
    let state = match i.status.as_str() {
        "RUNNING" => State::Running,
        "PROVISIONING" | "STAGING" | "" => State::Pending,
        _ => State::Stopped,
    };
    let marks = Marks::read(|k| i.labels.get(k).cloned(), MARK_KEYS);
    let nic = i.network_interfaces.into_iter().next().unwrap_or_default();
    let public = nic
        .access_configs
        .into_iter()
        .find_map(|c| c.nat_ip)
        .filter(|ip| !ip.is_empty());
    Machine {
        id: i.name,
        state,
        status: i.status,
        marks,
        addresses: Addresses {
            public,
            private: nic.network_ip.filter(|ip| !ip.is_empty()),
        },
    }
}

/// Follows a zone operation until it is `DONE`; its error, if any, fails the wait.
async fn wait_operation(zone: &Zone, op: Operation, w: &Waits) -> Result<(), PluginError> {
    let mut seen = Some(op);
    let name = seen.as_ref().map(|o| o.name.clone()).unwrap_or_default();
    poll_until(&format!("operation {name}"), w.wait(), || {
        let (first, name) = (seen.take(), name.clone());
        async move {
            let op = match first {
                Some(op) => op,
                None => zone.get_operation(&name).await?,
            };
            match (op.status.as_str(), op.failure()) {
                ("DONE", Some(e)) => Err(e),
                ("DONE", None) => Ok(Poll::Ready(())),
                (other, _) => Ok(Poll::Pending(other.to_string())),
            }
        }
    })
    .await
}

impl Google {
    /// The instance resource CREATE inserts.
    fn instance_body(
        &self,
        task: &Task,
        a: &Account,
        ssh_line: &str,
    ) -> Result<Value, PluginError> {
        let flavor = a.fields.pick(task, "flavor", "machine_type")?;
        let machine_type = if flavor.contains('/') {
            flavor
        } else {
            format!("zones/{}/machineTypes/{flavor}", a.zone)
        };
        let marks = Marks::of(task);
        let mut body = json!({
            "name": instance_name(&task.node_id),
            "machineType": machine_type,
            "disks": [{"boot": true, "autoDelete": true,
                "initializeParams": {"sourceImage": a.fields.pick(task, "image", "image")?}}],
            "networkInterfaces": [network_interface(a)?],
            "metadata": {"items": [{"key": "ssh-keys", "value": ssh_line}]},
            "labels": {MARK_KEYS[0]: label_value(&task.node_id),
                MARK_KEYS[1]: label_value(&task.cluster_id), MARK_KEYS[2]: label_value(&marks.tenant)},
        });
        let tags = network_tags(a)?;
        if !tags.is_empty() {
            body["tags"] = json!({ "items": tags });
        }
        Ok(body)
    }
}

#[async_trait]
impl Cloud for Google {
    type Account = Account;
    type Request = Value;

    fn account(&self, fields: &Fields) -> Result<Account, PluginError> {
        let account =
            ServiceAccount::from_json(&fields.required("json_key")?).map_err(PluginError::fatal)?;
        let project = fields
            .text("project")
            .or_else(|| account.project_id.clone())
            .ok_or_else(|| {
                PluginError::fatal(
                    "provider field project is missing (and json_key has no project_id)",
                )
            })?;
        let zone = fields.required("zone")?;
        let endpoint = fields
            .url("endpoint")?
            .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        let (rate, burst) = crate::throttle::budget(&fields.0).map_err(PluginError::fatal)?;
        let project_url = format!("{endpoint}/projects/{project}");
        let api = Zone {
            http: self.http.0.clone(),
            token: self.tokens.of(account.key_digest(), Token::default),
            bucket: self.buckets.of(&project_url, rate, burst),
            base: format!("{project_url}/zones/{zone}"),
            account,
        };
        Ok(Account {
            api,
            zone,
            fields: fields.clone(),
        })
    }

    fn valid_id(&self, id: &str) -> bool {
        valid_name(id)
    }

    async fn prepare(&self, a: &Account, task: &Task, _w: &Waits) -> Prepare<Value> {
        let seed = a
            .fields
            .text("sshkeyseed")
            .map(|s| format!("google:{s}"))
            .unwrap_or_else(|| format!("google-key:{}", a.api.account.key_digest()));
        let key = crate::keys::cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id);
        let (login, public) = crate::keys::cluster_login(task, DEFAULT_SSH_USER, &key)?;
        Ok(Prepared {
            request: self.instance_body(task, a, &format!("{}:{public}", login.user))?,
            login: Some(login),
            stdout: String::new(),
            result: [("zone".to_string(), json!(a.zone))].into_iter().collect(),
        })
    }

    async fn launch(&self, a: &Account, body: &Value, w: &Waits) -> Result<Launched, PluginError> {
        let zone = &a.api;
        match with_retries(w.calls(), || zone.insert_instance(body)).await? {
            // 409: an earlier try made it.
            None => Ok(Launched::Taken),
            Some(op) => {
                wait_operation(zone, op, w).await?;
                let name = body["name"].as_str().unwrap_or_default();
                Ok(Launched::Made(name.to_string()))
            }
        }
    }

    async fn find(&self, a: &Account, task: &Task) -> Result<Vec<Machine>, CloudError> {
        let marks = &Marks::of(task);
        let name = instance_name(&marks.node);
        let Some(inst) = a.api.get_instance(&name).await? else {
            return Ok(Vec::new());
        };
        if inst.labels.get(MARK_NODE) != Some(&label_value(&marks.node)) {
            let node = &marks.node;
            let m = format!("instance {name} exists and was not made by weft for node {node}");
            let e = CloudError::from_status(CLOUD, 409, "alreadyExists", m, None);
            return Err(e);
        }
        Ok(vec![machine(inst)])
    }

    async fn get(&self, a: &Account, id: &str) -> Result<Option<Machine>, CloudError> {
        Ok(a.api.get_instance(id).await?.map(machine))
    }

    async fn terminate(&self, a: &Account, id: &str) -> Result<bool, CloudError> {
        a.api.delete_instance(id).await
    }

    async fn marked(&self, a: &Account) -> Result<Vec<Machine>, CloudError> {
        let filter = format!("labels.{MARK_NODE}:*");
        let all = a.api.list_instances(&filter).await?;
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

    #[test]
    fn instance_names_are_valid_gce_names() {
        assert_eq!(instance_name("6F1C-aa_01"), "weft-6f1c-aa-01");
        let uuid = "0b8e1f9e-8f39-4c1e-9a53-2b1a9d7c1e11";
        assert_eq!(instance_name(uuid), format!("weft-{uuid}"));
        let long = instance_name(&"x".repeat(100));
        assert!(valid_name(&long) && long.len() <= 63, "{long}");
        let longer = instance_name(&"x".repeat(101));
        assert_ne!(long, longer, "the hash keeps long ids apart");
        for id in ["node-a", "N.1", "a--", "--"] {
            let n = instance_name(id);
            assert!(valid_name(&n), "{id}: {n}");
        }
        for bad in ["", "1abc", "Abc", "abc-", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn instances_are_read_as_machines() {
        assert_eq!(region_of("us-central1-a"), "us-central1");
        assert_eq!(region_of("europe-west4-b"), "europe-west4");
        let instance = |v: Value| machine(serde_json::from_value(v).unwrap());
        let m = instance(json!({"name": "weft-n1", "status": "RUNNING",
            "labels": {"weft-node": "n1", "weft-cluster": "4"}, "networkInterfaces": [
            {"networkIP": "10.0.0.2", "accessConfigs": [{"natIP": "34.1.2.3"}]}]}));
        assert_eq!(m.state, State::Running);
        assert_eq!(m.addresses.public.as_deref(), Some("34.1.2.3"));
        assert_eq!(m.addresses.private.as_deref(), Some("10.0.0.2"));
        let s = m.swept(NAME).unwrap();
        assert_eq!((s.node.as_str(), s.tenant.as_str()), ("n1", "-"));
        let m = instance(json!({"name": "x", "status": "TERMINATED"}));
        assert!(m.marks.is_none() && m.state == State::Stopped && m.addresses.private.is_none());
    }
}
