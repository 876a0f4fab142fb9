//! The `aws` provider: a node is an EC2 instance, made and removed through the EC2 query API with
//! a client of our own (SigV4 in [`sigv4`], answers read with quick-xml in [`xml`], the calls in
//! [`ec2`]).
//!
//! - **Fields** (admin, credentials sensitive): `region`, `access_key_id`, `secret_access_key`,
//!   `session_token`, or `credential_source` = `instance_profile` (and `imds_endpoint`); to
//!   assume a role, `role_arn`, `external_id`, `role_session_name`, `sts_endpoint` (see
//!   [`credentials`]); `endpoint` (default `https://ec2.<region>.amazonaws.com/`), `subnet_id`,
//!   `security_group_ids` (comma-separated), `instance_type` and `ami` (defaults when the
//!   hardware or image type names none), and the key: `import_key` with `sshkeyseed`, or
//!   `key_name` with `ssh_private_key`. Per hardware type the providermap `flavor` is the
//!   instance type (`t3.small`); per image type `image` is the AMI (an id, or `<owner>/<name
//!   filter>`: the newest match, see [`launch`]) and `sshuser` the login. Optional launch
//!   fields ([`launch`]): `user_data`, `iam_instance_profile`, `root_volume_gb`, `imdsv2`,
//!   `availability_zone`, and `ssh_address` (`public` or `private`: what CONFIRM answers as
//!   `access_v4`).
//! - **Tags**: every instance carries `weft:node`, `weft:cluster`, `weft:tenant` (`-` when
//!   empty) and `Name` (the hostname). They are how weft finds what it made.
//! - **CREATE** never makes a second machine for a node: it first looks for a live instance
//!   (pending, running, stopping, stopped) with the node's tags and answers it (terminating any
//!   younger twins); only when there is none does it call RunInstances, with the tags in
//!   `TagSpecifications` (so an instance never exists untagged) and a `ClientToken` derived from
//!   the node, the AMI and the instance type, so a RunInstances whose answer was lost and is sent
//!   again makes nothing new. A token EC2 answers with an instance already terminated (an earlier
//!   life of the node, within the token's lifetime) is chained into the next token, still
//!   deterministically. A retryable failure looks again by tag before the next RunInstances.
//! - **Key**: with `import_key` = `true`, CREATE imports the cluster's key (ed25519, derived from
//!   `sshkeyseed`, the tenant and the cluster, so every worker and retry agrees without state) as
//!   the key pair `<name_prefix>-<tenant>-<cluster>`, and answers `ssh-auth` with its private half;
//!   DELETE removes that key pair with the cluster's last instance. With `key_name`, the existing
//!   key pair is used and `ssh_private_key` is answered as `ssh-auth`. With neither, no key.
//! - **CONFIRM** waits until the instance is `running` with a private address; the SSH host key
//!   is read from the console (cloud-init's `BEGIN SSH HOST KEY KEYS` block) when
//!   GetConsoleOutput has it; otherwise none is recorded and the first SSH contact is trusted (the
//!   SSH transport warns that it does not check).
//! - **DELETE** terminates the `providerid` and every live instance with the node's tags;
//!   `InvalidInstanceID.NotFound` is success; it waits until each is `shutting-down` or
//!   `terminated`.
//!
//! The lifecycle itself (look before launch, twins, waits, sweep) is the cloud layer's
//! ([`crate::cloud`]); this module is EC2's side of it.
//! - **Errors**: throttling and 5xx are retried with back-off (see [`client`]); auth, quota and
//!   bad parameters fail at once with AWS's code and message. Credentials never reach logs,
//!   errors or task output.

pub mod client;
pub mod credentials;
pub mod ec2;
pub mod launch;
pub mod sigv4;
pub mod xml;

use async_trait::async_trait;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::PrivateKey;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use self::client::{ec2_endpoint, QueryClient, EC2_VERSION};
use self::ec2::{Ec2, Instance, RunSpec, LIVE_STATES};
use self::launch::ImageRef;
use crate::cloud::fields::Fields;
use crate::cloud::{
    with_retries, Addresses, Cloud, CloudError, CloudProvider, Confirmed, Launched, Login, Machine,
    Marks, Prepare, Prepared, State, Waits,
};
use crate::task::{PluginError, Task};
use crate::throttle::Buckets;

pub use crate::cloud::Timing;

/// The provider type name.
pub const NAME: &str = "aws";
/// The tag holding the id of the node an instance is (`-` when the task named none).
pub const TAG_NODE: &str = "weft:node";
/// The tag holding the id of the cluster an instance belongs to (`-` when the task named none).
pub const TAG_CLUSTER: &str = "weft:cluster";
/// The tag holding the id of the tenant an instance belongs to (`-` when the task named none).
pub const TAG_TENANT: &str = "weft:tenant";

/// The `aws` provider.
pub type AwsProvider = CloudProvider<Aws>;

/// EC2, as the cloud layer drives it.
#[derive(Debug, Clone, Default)]
pub struct Aws {
    http: crate::cloud::http::Http,
    /// Each account's request budget ([`crate::throttle`]), shared by every worker.
    buckets: Buckets,
    /// Each account's temporary credentials ([`credentials`]), shared by every worker.
    credentials: credentials::Cache,
}

impl Default for AwsProvider {
    fn default() -> AwsProvider {
        CloudProvider::of(NAME, include_str!("plugin.json"), Aws::default())
    }
}

/// A key pair to import: its name and public key (OpenSSH).
type KeyPair = (String, String);

/// One region of one account, and the provider's fields.
pub struct Account {
    /// The region's EC2 API.
    pub ec2: Ec2,
    fields: Fields,
}

/// What CREATE launches: the RunInstances request, the node it is for (its client token is
/// derived from them) and the key pair to import again if EC2 lost it.
pub struct Launch {
    spec: RunSpec,
    marks: Marks,
    import: Option<KeyPair>,
}

/// The tags that name a node.
fn node_tags(marks: &Marks) -> Vec<(String, String)> {
    vec![
        (TAG_NODE.into(), marks.node.clone()),
        (TAG_CLUSTER.into(), marks.cluster.clone()),
        (TAG_TENANT.into(), marks.tenant.clone()),
    ]
}

/// The RunInstances client token of a node's launch: at most 64 characters, the same for every
/// retry of the same launch; `after` is the instance of the node's previous life (or empty).
pub fn client_token(marks: &Marks, ami: &str, instance_type: &str, after: &str) -> String {
    let marks = [&marks.tenant, &marks.cluster, &marks.node];
    let marks = marks.map(|m| if m == "-" { "" } else { m.as_str() });
    let parts = [
        &["weft aws provider token v1"][..],
        &marks,
        &[ami, instance_type, after],
    ];
    let hash = digest(b"", parts.concat().into_iter().map(str::as_bytes));
    format!("weft-{}", &hex::encode(hash)[..40])
}

/// SHA-256 over `prefix`, then each part after its length (8 bytes, big-endian).
fn digest<'a>(prefix: &[u8], parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prefix);
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// The cluster's SSH key: ed25519 from SHA-256 over the seed, the tenant and the cluster.
pub fn cluster_key(seed: &[u8], tenant: &str, cluster: &str) -> PrivateKey {
    let parts = [seed, tenant.as_bytes(), cluster.as_bytes()];
    let seed = digest(b"weft aws provider ssh key v1\0", parts);
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.set_comment(format!("weft-cluster-{cluster}"));
    key
}

/// The key pair a cluster's key is imported as: `<name_prefix>-<tenant>-<cluster>`, characters
/// other than letters, digits, `-`, `_` and `.` as `-`.
pub fn key_pair_name(fields: &Fields, task: &Task) -> String {
    let prefix = fields.text("name_prefix").unwrap_or_else(|| "weft".into());
    let tenant = Marks::of(task).tenant;
    let name = format!("{prefix}-{tenant}-{}", task.cluster_id);
    let keep = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    name.chars()
        .map(|c| if keep(c) { c } else { '-' })
        .collect()
}

fn valid_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|h| {
        !h.is_empty() && h.len() <= 32 && h.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// An instance as the cloud layer reads it.
fn machine(i: Instance) -> Machine {
    let state = match i.state.as_str() {
        "running" => State::Running,
        "pending" | "" => State::Pending,
        "shutting-down" | "terminated" => State::Gone,
        _ => State::Stopped,
    };
    Machine {
        marks: Marks::read(
            |k| i.tags.get(k).cloned(),
            [TAG_NODE, TAG_CLUSTER, TAG_TENANT],
        ),
        id: i.id,
        state,
        status: i.state,
        addresses: Addresses {
            public: i.public_ip,
            private: i.private_ip,
        },
    }
}

impl Account {
    /// What to launch for the node: the AMI and instance type (the image and hardware types',
    /// else the provider's defaults), the provider's subnet and security groups, the tags.
    fn run_spec(&self, task: &Task) -> Result<RunSpec, PluginError> {
        let f = &self.fields;
        let mut tags = node_tags(&Marks::of(task));
        if let Some(h) = task.config_str("hostname").filter(|h| !h.is_empty()) {
            tags.push(("Name".into(), h.to_string()));
        }
        Ok(RunSpec {
            ami: f.pick(task, "image", "ami")?,
            instance_type: f.pick(task, "flavor", "instance_type")?,
            subnet_id: f.text("subnet_id"),
            security_group_ids: f.list("security_group_ids"),
            tags,
            ..Default::default()
        })
    }

    /// How the node is reached over SSH: its login and the key pair to import, with the key
    /// pair's name set in `spec`. With `import_key`, the cluster's key derived from `sshkeyseed`
    /// (imported as [`key_pair_name`]); with `key_name`, that existing key pair and
    /// `ssh_private_key`; with neither, no key.
    fn launch_key(
        &self,
        task: &Task,
        spec: &mut RunSpec,
    ) -> Result<(Option<Login>, Option<KeyPair>), PluginError> {
        let f = &self.fields;
        if f.flag("import_key")? == Some(true) {
            let seed = f.text("sshkeyseed").ok_or_else(|| {
                PluginError::fatal("provider field sshkeyseed is missing (import_key needs it)")
            })?;
            let name = key_pair_name(f, task);
            let key = cluster_key(seed.as_bytes(), &task.tenant_id, &task.cluster_id);
            spec.key_name = Some(name.clone());
            let (login, public) = crate::keys::cluster_login(task, "root", &key)?;
            return Ok((Some(login), Some((name, public))));
        }
        spec.key_name = f.text("key_name");
        let user = crate::keys::ssh_user(task, "root");
        let login = f.text("ssh_private_key").map(|key| Login { user, key });
        Ok((login.filter(|_| spec.key_name.is_some()), None))
    }

    /// Imports the cluster's key pair (one already there is kept); answers what happened.
    async fn import(
        &self,
        (name, public): &(String, String),
        w: &Waits,
    ) -> Result<String, CloudError> {
        let made = with_retries(w.calls(), || self.ec2.import_key_pair(name, public)).await?;
        Ok(format!(
            "key pair {name} {}\n",
            if made { "imported" } else { "exists" }
        ))
    }

    /// The SSH host keys the instance's console shows, if any (best effort: one try).
    async fn host_keys(&self, id: &str) -> Option<Value> {
        let console = match self.ec2.console_output(id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(instance = id, error = %e, "no console output");
                None
            }
        }?;
        let keys = ec2::console_host_keys(&console);
        (!keys.is_empty()).then(|| json!(keys))
    }
}

#[async_trait]
impl Cloud for Aws {
    type Account = Account;
    type Request = Launch;

    fn account(&self, f: &Fields) -> Result<Account, PluginError> {
        let region = f.required("region")?;
        let region_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if !region.chars().all(region_char) {
            return Err(PluginError::fatal(format!(
                "provider field region {region:?} is not a region name"
            )));
        }
        let plan = credentials::Plan::from_fields(&f.0, &region)?;
        let endpoint = f.text("endpoint").unwrap_or_else(|| ec2_endpoint(&region));
        let (rate, burst) = crate::throttle::budget(&f.0).map_err(PluginError::fatal)?;
        let account = format!("{endpoint} {region} {}", plan.principal());
        let bucket = self.buckets.of(&account, rate, burst);
        let creds = self
            .credentials
            .signer(&self.http, &plan, bucket.clone())
            .map_err(|e| PluginError::fatal(format!("provider field sts_endpoint: {e}")))?;
        let http = self.http.0.clone();
        let q = QueryClient::new(http, &endpoint, &region, "ec2", EC2_VERSION, creds)
            .map_err(|e| PluginError::fatal(format!("provider field endpoint: {e}")))?
            .with_bucket(bucket);
        Ok(Account {
            ec2: Ec2 { q },
            fields: f.clone(),
        })
    }

    fn valid_id(&self, id: &str) -> bool {
        valid_instance_id(id)
    }

    async fn prepare(&self, a: &Account, task: &Task, w: &Waits) -> Prepare<Launch> {
        let mut spec = a.run_spec(task)?;
        let root_gb = launch::launch_options(&a.fields, &mut spec)?;
        let image = ImageRef::parse(&spec.ami)?;
        let (ami, root_device) =
            launch::resolve_image(&a.ec2, &image, root_gb.is_some(), w).await?;
        spec.ami = ami;
        launch::root_volume(&mut spec, root_gb, root_device)?;
        let (login, import) = a.launch_key(task, &mut spec)?;
        let mut stdout = match &import {
            Some(k) => a.import(k, w).await?,
            None => String::new(),
        };
        stdout.push_str(&format!("{} from {}\n", spec.instance_type, spec.ami));
        Ok(Prepared {
            request: Launch {
                spec,
                marks: Marks::of(task),
                import,
            },
            login,
            stdout,
            result: Default::default(),
        })
    }

    /// RunInstances with a client token derived from the node and the launch, so a launch whose
    /// answer was lost makes nothing new when sent again. A token EC2 answers with an instance
    /// already terminated (an earlier life of the node, within the token's lifetime) is chained
    /// into the next token, still deterministically.
    async fn launch(&self, a: &Account, req: &Launch, w: &Waits) -> Result<Launched, PluginError> {
        let mut spec = req.spec.clone();
        let mut after = String::new();
        let mut imported = false;
        for _ in 0..5 {
            spec.client_token = client_token(&req.marks, &spec.ami, &spec.instance_type, &after);
            let inst = match a.ec2.run_instance(&spec).await {
                Ok(i) => i,
                Err(e) if e.code == "InvalidKeyPair.NotFound" && !imported => {
                    let key = req.import.as_ref().ok_or(e)?;
                    a.import(key, w).await?;
                    imported = true;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match a.ec2.instance(&inst.id).await? {
                Some(now) if !now.is_live() => after = inst.id,
                _ => return Ok(Launched::Made(inst.id)),
            }
        }
        Err(PluginError::retryable(
            "RunInstances kept answering terminated instances",
        ))
    }

    async fn find(&self, a: &Account, task: &Task) -> Result<Vec<Machine>, CloudError> {
        let marks = &Marks::of(task);
        let found = a
            .ec2
            .instances_tagged(&node_tags(marks), LIVE_STATES)
            .await?;
        Ok(found.into_iter().map(machine).collect())
    }

    async fn get(&self, a: &Account, id: &str) -> Result<Option<Machine>, CloudError> {
        Ok(a.ec2.instance(id).await?.map(machine))
    }

    async fn terminate(&self, a: &Account, id: &str) -> Result<bool, CloudError> {
        a.ec2.terminate(id).await
    }

    async fn marked(&self, a: &Account) -> Result<Vec<Machine>, CloudError> {
        let all = a.ec2.instances_with_tag_key(TAG_NODE, LIVE_STATES).await?;
        Ok(all.into_iter().map(machine).collect())
    }

    async fn confirmed(
        &self,
        a: &Account,
        _task: &Task,
        m: &Machine,
        _w: &Waits,
    ) -> Result<Confirmed, PluginError> {
        Ok(match a.host_keys(&m.id).await {
            Some(keys) => Confirmed {
                result: [("ssh_host_keys".to_string(), keys)].into_iter().collect(),
                stdout: "ssh host keys read from the console\n".into(),
                public: None,
            },
            None => Confirmed {
                stdout: "no ssh host key on the console: the first ssh contact is trusted\n".into(),
                ..Default::default()
            },
        })
    }

    fn has_cluster_key(&self, a: &Account) -> bool {
        a.fields.flag("import_key").ok().flatten() == Some(true)
    }

    async fn drop_cluster_key(
        &self,
        a: &Account,
        task: &Task,
        w: &Waits,
    ) -> Result<String, PluginError> {
        let name = key_pair_name(&a.fields, task);
        with_retries(w.calls(), || a.ec2.delete_key_pair(&name)).await?;
        Ok(format!(
            "key pair {name} deleted (the cluster's last instance is gone)\n"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::Provider;
    use std::time::Duration;
    use weft_model::ParameterType;

    fn task(node: &str) -> Task {
        let raw = serde_json::json!({"taskId": "t", "taskName": "CREATE", "nodeId": node,
            "clusterId": "c1", "config": {}});
        let mut t = Task::from_json(raw, Duration::from_secs(60)).unwrap();
        t.tenant_id = "t1".into();
        t
    }

    #[test]
    fn tokens_are_per_node_and_launch_and_fit_ec2() {
        let m = |n: &str| Marks::of(&task(n));
        let a = client_token(&m("n1"), "ami-1", "t3.small", "");
        // Fixed across releases: a retried launch must send the token of the first try.
        assert_eq!(a, "weft-b55a462cd49768afb8df19d11376c562f9c532b4");
        assert!(a.len() <= 64 && a.is_ascii());
        assert_ne!(a, client_token(&m("n2"), "ami-1", "t3.small", ""));
        assert_ne!(a, client_token(&m("n1"), "ami-1", "t3.small", "i-0abc"));
        assert_ne!(a, client_token(&m("n1"), "ami-2", "t3.small", ""));
    }

    #[test]
    fn names_and_ids() {
        assert_eq!(key_pair_name(&Fields::default(), &task("n1")), "weft-t1-c1");
        assert!(valid_instance_id("i-0123abcd"));
        assert!(
            !valid_instance_id("i-") && !valid_instance_id("weft-x") && !valid_instance_id("i-a/b")
        );
        let public = |seed: &[u8], cluster| {
            let key = cluster_key(seed, "t1", cluster);
            key.public_key().to_openssh().unwrap()
        };
        // Fixed across releases: the key pair imported for a cluster stays the same.
        let k1 = public(b"seed", "c1");
        let want =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL+UgDFr+fDcueYS+9k0Pb/TjAQCIxEfFZJl5hZ/EOuj";
        assert!(k1.starts_with(want), "{k1}");
        assert_ne!(k1, public(b"seed", "c2"));
        assert_ne!(k1, public(b"other", "c1"));
    }

    #[test]
    fn the_plugin_type_declares_secrets_sensitive() {
        let t = AwsProvider::new().plugin_type();
        let admin = &t.parameters[&ParameterType::Admin];
        for f in [
            "access_key_id",
            "secret_access_key",
            "session_token",
            "sshkeyseed",
            "ssh_private_key",
        ] {
            assert!(admin.fields[f].sensitive, "{f}");
        }
        assert!(!admin.fields["region"].sensitive);
    }
}
