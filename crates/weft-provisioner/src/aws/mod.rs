//! The `aws` provider: a node is an EC2 instance, made and removed through the EC2 query API with
//! a client of our own (SigV4 in [`sigv4`], a small XML reader in [`xml`], the calls in [`ec2`]).
//!
//! - **Fields** (admin, credentials sensitive): `region`, `access_key_id`, `secret_access_key`,
//!   `session_token`, `endpoint` (default `https://ec2.<region>.amazonaws.com/`), `subnet_id`,
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
//! - **CONFIRM** polls DescribeInstances with a bounded back-off until the instance is `running`
//!   with a private address; it answers the private address as `bind_v4` and, as `access_v4`, the
//!   one `ssh_address` names (default: the public one, else the private). The SSH host key is read from the console (cloud-init's `BEGIN
//!   SSH HOST KEY KEYS` block) when GetConsoleOutput has it; otherwise none is recorded and the
//!   first SSH contact is trusted (the SSH transport warns that it does not check).
//! - **DELETE** terminates the `providerid` and every live instance with the node's tags;
//!   `InvalidInstanceID.NotFound` is success; it waits until each is `shutting-down` or
//!   `terminated`.
//! - **Errors**: throttling and 5xx are retried with back-off (see [`client`]); auth, quota and
//!   bad parameters fail at once with AWS's code and message. Credentials never reach logs,
//!   errors or task output.

pub mod client;
pub mod ec2;
pub mod launch;
pub mod sigv4;
pub mod xml;

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::LineEnding;
use russh::keys::PrivateKey;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use weft_model::{FieldSchema, MachineState, ParamSpec, ParameterType, PluginType, SweptMachine};

use self::client::{ec2_endpoint, QueryClient, EC2_VERSION};
use self::ec2::{Ec2, Instance, RunSpec, Timing, LIVE_STATES};
use self::launch::{ImageRef, SshAddress};
use self::sigv4::Credentials;
use crate::cloud::{poll_until, CloudError, Poll};
use crate::plugin::{status_output, Provider};
use crate::ssh;
use crate::task::{PluginError, PluginResult, Task, TaskOutput};

/// The provider type name.
pub const NAME: &str = "aws";
/// The tag holding the id of the node an instance is (`-` when the task named none).
pub const TAG_NODE: &str = "weft:node";
/// The tag holding the id of the cluster an instance belongs to (`-` when the task named none).
pub const TAG_CLUSTER: &str = "weft:cluster";
/// The tag holding the id of the tenant an instance belongs to (`-` when the task named none).
pub const TAG_TENANT: &str = "weft:tenant";
/// How long CONFIRM waits for `running` at most (and never longer than the task's time-out).
pub const CONFIRM_LIMIT: Duration = Duration::from_secs(600);
/// How long DELETE waits for `shutting-down` at most.
pub const DELETE_LIMIT: Duration = Duration::from_secs(300);

/// The `aws` provider.
#[derive(Debug, Clone)]
pub struct AwsProvider {
    http: reqwest::Client,
    timing: Timing,
    confirm_limit: Duration,
    delete_limit: Duration,
    /// Each account's request budget ([`crate::throttle`]), shared by every worker.
    buckets: crate::throttle::Buckets,
}

impl Default for AwsProvider {
    fn default() -> Self {
        AwsProvider::new()
    }
}

/// How a node's machine is reached over SSH.
enum KeyPlan {
    None,
    /// Import the cluster's derived key as the key pair `name`.
    Import {
        name: String,
        key: Box<PrivateKey>,
    },
    /// Use the existing key pair `name`, whose private key is `private` (when given).
    Existing {
        name: String,
        private: Option<String>,
    },
}

/// A field of the task's provider, trimmed; `None` when missing or empty.
fn field(fields: &Map<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn required(fields: &Map<String, Value>, name: &str) -> Result<String, PluginError> {
    field(fields, name)
        .ok_or_else(|| PluginError::fatal(format!("provider field {name} is missing")))
}

/// The tags that name a task's node.
pub fn node_tags(task: &Task) -> Vec<(String, String)> {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        (TAG_NODE.into(), or_dash(&task.node_id)),
        (TAG_CLUSTER.into(), or_dash(&task.cluster_id)),
        (TAG_TENANT.into(), or_dash(&task.tenant_id)),
    ]
}

/// The RunInstances client token of a node's launch: at most 64 characters, the same for every
/// retry of the same launch; `after` is the instance of the node's previous life (or empty).
pub fn client_token(task: &Task, ami: &str, instance_type: &str, after: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        "weft aws provider token v1",
        &task.tenant_id,
        &task.cluster_id,
        &task.node_id,
        ami,
        instance_type,
        after,
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    format!("weft-{}", &hex::encode(h.finalize())[..40])
}

/// The cluster's SSH key: ed25519 from SHA-256 over the seed, the tenant and the cluster.
pub fn cluster_key(seed: &[u8], tenant: &str, cluster: &str) -> PrivateKey {
    let mut h = Sha256::new();
    h.update(b"weft aws provider ssh key v1\0");
    for part in [seed, tenant.as_bytes(), cluster.as_bytes()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&h.finalize().into()));
    key.set_comment(format!("weft-cluster-{cluster}"));
    key
}

/// Keeps letters, digits, `-`, `_` and `.`; the rest becomes `-`.
fn name_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The key pair a cluster's key is imported as.
pub fn key_pair_name(task: &Task) -> String {
    let prefix = field(&task.provider_fields(), "name_prefix").unwrap_or_else(|| "weft".into());
    let tenant = if task.tenant_id.is_empty() {
        "-"
    } else {
        &task.tenant_id
    };
    name_part(&format!("{prefix}-{tenant}-{}", task.cluster_id))
}

fn providerid(task: &Task) -> Option<String> {
    task.config_str("providerid")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn valid_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|h| {
        !h.is_empty() && h.len() <= 32 && h.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "1"))
}

impl AwsProvider {
    /// A provider with the default limits ([`CONFIRM_LIMIT`], [`DELETE_LIMIT`]) and call retries
    /// (1 s doubling up to 20 s, for at most 2 minutes per call).
    pub fn new() -> AwsProvider {
        AwsProvider {
            http: reqwest::Client::new(),
            timing: Timing {
                first: Duration::from_secs(1),
                max: Duration::from_secs(20),
                call_budget: Duration::from_secs(120),
            },
            confirm_limit: CONFIRM_LIMIT,
            delete_limit: DELETE_LIMIT,
            buckets: crate::throttle::Buckets::default(),
        }
    }

    /// How calls are retried (tests shorten it).
    pub fn with_timing(mut self, timing: Timing) -> AwsProvider {
        self.timing = timing;
        self
    }

    /// How long CONFIRM and DELETE wait at most.
    pub fn with_limits(mut self, confirm: Duration, delete: Duration) -> AwsProvider {
        self.confirm_limit = confirm;
        self.delete_limit = delete;
        self
    }

    /// The EC2 client of a task's provider fields.
    pub fn ec2(&self, task: &Task) -> Result<Ec2, PluginError> {
        self.ec2_for(&task.provider_fields(), task.timeout)
    }

    /// The EC2 client of provider fields; calls are retried for at most `limit`.
    pub fn ec2_for(&self, f: &Map<String, Value>, limit: Duration) -> Result<Ec2, PluginError> {
        let region = required(f, "region")?;
        if !region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(PluginError::fatal(format!(
                "provider field region {region:?} is not a region name"
            )));
        }
        let creds = Credentials {
            access_key_id: required(f, "access_key_id")?,
            secret_access_key: required(f, "secret_access_key")?,
            session_token: field(f, "session_token"),
        };
        let endpoint = field(f, "endpoint").unwrap_or_else(|| ec2_endpoint(&region));
        let (rate, burst) = crate::throttle::budget(f).map_err(PluginError::fatal)?;
        let account = format!("{endpoint} {region} {}", creds.access_key_id);
        let bucket = self.buckets.of(&account, rate, burst);
        let q = QueryClient::new(
            self.http.clone(),
            &endpoint,
            &region,
            "ec2",
            EC2_VERSION,
            creds,
        )
        .map_err(|e| PluginError::fatal(format!("provider field endpoint: {e}")))?
        .with_bucket(bucket);
        Ok(Ec2 {
            q,
            timing: Timing {
                call_budget: self.timing.call_budget.min(limit),
                ..self.timing
            },
        })
    }

    /// Every live instance carrying a `weft:node` tag (whatever its value), oldest first: what
    /// `weft provider sweep` compares with the live nodes.
    pub async fn tagged_instances(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<Vec<Instance>, PluginError> {
        let ec2 = self.ec2_for(fields, self.timing.call_budget)?;
        Ok(ec2.instances_with_tag_key(TAG_NODE, LIVE_STATES).await?)
    }

    fn key_plan(&self, task: &Task) -> Result<KeyPlan, PluginError> {
        let f = task.provider_fields();
        if truthy(field(&f, "import_key")) {
            let seed = field(&f, "sshkeyseed").ok_or_else(|| {
                PluginError::fatal("provider field sshkeyseed is missing (import_key needs it)")
            })?;
            return Ok(KeyPlan::Import {
                name: key_pair_name(task),
                key: Box::new(cluster_key(
                    seed.as_bytes(),
                    &task.tenant_id,
                    &task.cluster_id,
                )),
            });
        }
        Ok(match field(&f, "key_name") {
            Some(name) => KeyPlan::Existing {
                name,
                private: field(&f, "ssh_private_key"),
            },
            None => KeyPlan::None,
        })
    }

    /// The instance of a node: found by tag, else launched (see the module doc).
    async fn find_or_launch(
        &self,
        ec2: &Ec2,
        task: &Task,
        mut spec: RunSpec,
        import: Option<(&str, &str)>,
        stdout: &mut String,
    ) -> Result<Instance, PluginError> {
        let tags = node_tags(task);
        let mut backoff = self
            .timing
            .backoff(self.timing.call_budget.min(task.timeout));
        let mut after = String::new();
        let mut need_key = import.is_some();
        for _ in 0..10 {
            let found = ec2.instances_tagged(&tags, LIVE_STATES).await?;
            if let Some((first, twins)) = found.split_first() {
                for twin in twins {
                    tracing::warn!(node_id = %task.node_id, instance = %twin.id, "terminating a twin instance");
                    ec2.terminate(&twin.id).await?;
                    stdout.push_str(&format!("twin instance {} terminated\n", twin.id));
                }
                stdout.push_str(&format!("instance {} exists ({})\n", first.id, first.state));
                return Ok(first.clone());
            }
            if let (Some((name, public)), true) = (import, need_key) {
                let made = ec2.import_key_pair(name, public).await?;
                stdout.push_str(&format!(
                    "key pair {name} {}\n",
                    if made { "imported" } else { "exists" }
                ));
                need_key = false;
            }
            spec.client_token = client_token(task, &spec.ami, &spec.instance_type, &after);
            let err = match ec2.run_instance(&spec).await {
                Ok(inst) => match ec2.instance(&inst.id).await? {
                    Some(now) if !now.is_live() => {
                        // The token's instance is an earlier life of this node: chain a new token.
                        after = inst.id;
                        continue;
                    }
                    now => {
                        tracing::info!(node_id = %task.node_id, instance = %inst.id, "instance launched");
                        stdout.push_str(&format!(
                            "instance {} launched ({} from {})\n",
                            inst.id, spec.instance_type, spec.ami
                        ));
                        return Ok(now.unwrap_or(inst));
                    }
                },
                Err(e) if e.code == "InvalidKeyPair.NotFound" && import.is_some() => {
                    need_key = true;
                    e.retryable(true)
                }
                Err(e) => e,
            };
            if !err.retryable || !backoff.wait(err.retry_after).await {
                return Err(err.into());
            }
        }
        Err(PluginError::retryable(format!(
            "could not launch an instance for node {} (too many tries)",
            task.node_id
        )))
    }

    /// Waits until every instance of `ids` is shutting down, terminated or unknown.
    async fn wait_gone(&self, ec2: &Ec2, task: &Task, ids: &[String]) -> Result<(), PluginError> {
        let budget = self.delete_limit.min(task.timeout);
        poll_until(
            "instances shutting down",
            self.timing.backoff(budget),
            || async {
                for id in ids {
                    if let Some(i) = ec2.instance(id).await? {
                        if i.is_live() {
                            return Ok(Poll::Pending(format!("{id} is {}", i.state)));
                        }
                    }
                }
                Ok(Poll::Ready(()))
            },
        )
        .await
    }

    /// Deletes the cluster's imported key pair when no live instance of the cluster is left.
    async fn drop_key_if_unused(&self, ec2: &Ec2, task: &Task) -> Result<String, PluginError> {
        if !matches!(self.key_plan(task)?, KeyPlan::Import { .. }) {
            return Ok(String::new());
        }
        let cluster = node_tags(task).split_off(1);
        if !ec2
            .instances_tagged(&cluster, LIVE_STATES)
            .await?
            .is_empty()
        {
            return Ok(String::new());
        }
        let name = key_pair_name(task);
        ec2.delete_key_pair(&name).await?;
        Ok(format!(
            "key pair {name} deleted (the cluster's last instance is gone)\n"
        ))
    }

    /// The SSH host keys the instance's console shows, if any (best effort: one try).
    async fn host_keys(&self, ec2: &Ec2, id: &str) -> Option<Value> {
        let console = match ec2
            .q
            .call("GetConsoleOutput", &[("InstanceId".into(), id.into())])
            .await
        {
            Ok(root) => root.text_at(&["output"]).map(str::to_string),
            Err(e) => {
                tracing::debug!(instance = id, error = %e, "no console output");
                None
            }
        }?;
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(console.split_whitespace().collect::<String>())
            .ok()?;
        let keys = ec2::console_host_keys(&String::from_utf8_lossy(&bytes));
        (!keys.is_empty()).then(|| json!(keys))
    }
}

/// What to launch for the node: the AMI and instance type (the image and hardware types', else
/// the provider's defaults), the provider's subnet and security groups, the node's tags.
fn run_spec(task: &Task) -> Result<RunSpec, PluginError> {
    let f = task.provider_fields();
    let pick = |config: &str, admin: &str| {
        task.config_str(config)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| field(&f, admin))
    };
    let instance_type = pick("flavor", "instance_type").ok_or_else(|| {
        PluginError::fatal(
            "no instance type: give the hardware type an aws flavor or the provider an instance_type",
        )
    })?;
    let ami = pick("image", "ami").ok_or_else(|| {
        PluginError::fatal("no AMI: give the image type an aws image or the provider an ami")
    })?;
    let mut tags = node_tags(task);
    if let Some(h) = task.config_str("hostname").filter(|h| !h.is_empty()) {
        tags.push(("Name".into(), h.to_string()));
    }
    Ok(RunSpec {
        ami,
        instance_type,
        subnet_id: field(&f, "subnet_id"),
        security_group_ids: field(&f, "security_group_ids")
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        tags,
        ..Default::default()
    })
}

/// The address the provisioner reaches a running instance at (`access_v4`), as field
/// `ssh_address` asks.
fn access_address(inst: &Instance, how: SshAddress) -> Result<String, PluginError> {
    let private = inst.private_ip.clone().unwrap_or_default();
    match (how, &inst.public_ip) {
        (SshAddress::Private, _) => Ok(private),
        (_, Some(public)) => Ok(public.clone()),
        (SshAddress::PublicElsePrivate, None) => Ok(private),
        (SshAddress::Public, None) => Err(PluginError::fatal(format!(
            "provider field ssh_address is public but instance {} has no public address \
             (launch it in a subnet that assigns one, or set ssh_address to private)",
            inst.id
        ))),
    }
}

/// The key pair an instance launches with.
struct LaunchKey {
    /// A key pair to import first: its name and public key.
    import: Option<(String, String)>,
    /// The private key the provisioner reaches the node with.
    private: Option<String>,
}

/// The key pair the instance launches with (its name set in `spec`).
fn launch_key(plan: &KeyPlan, spec: &mut RunSpec) -> Result<LaunchKey, PluginError> {
    let (import, private) = match plan {
        KeyPlan::None => (None, None),
        KeyPlan::Import { name, key } => {
            spec.key_name = Some(name.clone());
            let public = key
                .public_key()
                .to_openssh()
                .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
            let private = key
                .to_openssh(LineEnding::LF)
                .map_err(|e| PluginError::fatal(format!("encoding the private key: {e}")))?
                .to_string();
            (Some((name.clone(), public)), Some(private))
        }
        KeyPlan::Existing { name, private } => {
            spec.key_name = Some(name.clone());
            (None, private.clone())
        }
    };
    Ok(LaunchKey { import, private })
}

/// The provider's admin fields: name, label, tip, and whether the value is secret.
#[rustfmt::skip]
const ADMIN_FIELDS: [(&str, &str, &str, bool); 20] = [
    ("region", "Region", "the EC2 region, e.g. us-east-1", false),
    ("access_key_id", "Access key id", "the IAM access key id", true),
    ("secret_access_key", "Secret access key", "the IAM secret access key", true),
    ("session_token", "Session token", "for temporary credentials only", true),
    ("endpoint", "Endpoint", "default https://ec2.<region>.amazonaws.com/", false),
    ("subnet_id", "Subnet", "the subnet instances are launched in (default: the default VPC's)", false),
    ("security_group_ids", "Security groups", "comma-separated security group ids", false),
    ("instance_type", "Default instance type", "when the hardware type names none (its flavor)", false),
    ("ami", "Default AMI", "when the image type names none (its image)", false),
    ("import_key", "Import the cluster key", "true: import each cluster's SSH key as a key pair", false),
    ("sshkeyseed", "SSH key seed", "a long random secret each cluster's SSH key is derived from (import_key)", true),
    ("key_name", "Key pair", "an existing key pair to launch with (without import_key)", false),
    ("ssh_private_key", "SSH private key", "the private key of key_name (OpenSSH format)", true),
    ("name_prefix", "Name prefix", "prefix of imported key pair names (default weft)", false),
    ("user_data", "User data", "text handed to the instance at launch (cloud-init), at most 16 KB; not secret: EC2 shows it to whoever may describe the instance", false),
    ("iam_instance_profile", "IAM instance profile", "the instance profile the instances launch with, by name or ARN", false),
    ("root_volume_gb", "Root volume (GiB)", "the size of the root volume (default: the AMI's)", false),
    ("imdsv2", "Require IMDSv2", "true: the metadata service answers IMDSv2 sessions only (HttpTokens required)", false),
    ("availability_zone", "Availability zone", "e.g. us-east-1b (default: EC2 chooses; it must be the subnet's)", false),
    ("ssh_address", "SSH address", "public or private: the address weft reaches nodes at (default: public, else private)", false),
];

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
        label: label.into(),
        field_type: "password".into(),
        tip: Some(tip.into()),
        sensitive: true,
        ..Default::default()
    }
}

#[async_trait]
impl Provider for AwsProvider {
    fn plugin_type(&self) -> PluginType {
        let admin = ParamSpec {
            fields: ADMIN_FIELDS
                .into_iter()
                .map(|(name, label, tip, secret)| {
                    let field = if secret {
                        secret_field(label, tip)
                    } else {
                        text_field(label, tip)
                    };
                    (name.to_string(), field)
                })
                .chain(
                    crate::throttle::declared_fields()
                        .into_iter()
                        .map(|(k, f)| (k.to_string(), f)),
                )
                .collect(),
            required: vec![["region", "access_key_id", "secret_access_key"]
                .into_iter()
                .map(str::to_string)
                .collect()],
        };
        PluginType {
            name: NAME.into(),
            label: Some("AWS EC2".into()),
            description: Some(
                "nodes are EC2 instances, found by their weft tags, reached over SSH".into(),
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
        let mut spec = run_spec(task)?;
        let options = launch::launch_options(&task.provider_fields())?;
        let image = ImageRef::parse(&spec.ami)?;
        let ec2 = self.ec2(task)?;
        let (ami, root_device) =
            launch::resolve_image(&ec2, &image, options.root_volume_gb.is_some()).await?;
        spec.ami = ami;
        options.apply(&mut spec, root_device)?;
        let plan = self.key_plan(task)?;
        let LaunchKey { import, private } = launch_key(&plan, &mut spec)?;
        let mut stdout = String::new();
        let inst = self
            .find_or_launch(
                &ec2,
                task,
                spec,
                import.as_ref().map(|(n, p)| (n.as_str(), p.as_str())),
                &mut stdout,
            )
            .await?;
        let user = task
            .config_str("sshuser")
            .filter(|u| !u.is_empty())
            .unwrap_or("root");
        let mut out = TaskOutput {
            result: match &private {
                Some(key) => ssh::results(user, key, None),
                None => Map::new(),
            },
            stdout,
            ..Default::default()
        };
        out.result.insert("providerid".into(), json!(inst.id));
        Ok(out)
    }

    /// One DescribeInstances of the node's instance: unknown to EC2, shutting down or terminated
    /// is missing; running is running; pending, stopping or stopped is stopped.
    async fn status(&self, task: &Task) -> PluginResult {
        let Some(id) = providerid(task).filter(|id| valid_instance_id(id)) else {
            return Ok(status_output(
                MachineState::Missing,
                Some("no instance id: CREATE never answered".into()),
            ));
        };
        let ec2 = self.ec2(task)?;
        let (state, message) = match ec2.instance(&id).await? {
            None => (
                MachineState::Missing,
                format!("instance {id} is not known to EC2"),
            ),
            Some(i) => {
                let state = match i.state.as_str() {
                    "running" => MachineState::Running,
                    "shutting-down" | "terminated" => MachineState::Missing,
                    _ => MachineState::Stopped,
                };
                (state, format!("instance {id} is {}", i.state))
            }
        };
        Ok(status_output(state, Some(message)))
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let id = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        if !valid_instance_id(&id) {
            return Err(PluginError::fatal(format!(
                "providerid {id:?} is not an instance id"
            )));
        }
        let how = launch::ssh_address(&task.provider_fields())?;
        let ec2 = self.ec2(task)?;
        let budget = self.confirm_limit.min(task.timeout);
        let inst = poll_until(
            &format!("instance {id} running"),
            self.timing.backoff(budget),
            || async {
                let Some(i) = ec2.instance(&id).await? else {
                    return Ok(Poll::Pending("not known to EC2 yet".into()));
                };
                match (i.state.as_str(), &i.private_ip) {
                    ("running", Some(_)) => Ok(Poll::Ready(i)),
                    ("pending" | "running", _) => Ok(Poll::Pending(i.state)),
                    (other, _) => Err(CloudError::from_status(
                        "ec2",
                        409,
                        "IncorrectInstanceState",
                        format!("instance {id} is {other}"),
                        None,
                    )),
                }
            },
        )
        .await?;
        let private = inst.private_ip.clone().unwrap_or_default();
        let access = access_address(&inst, how)?;
        let mut out = TaskOutput {
            hostname: task
                .config_str("hostname")
                .filter(|h| !h.is_empty())
                .map(str::to_string),
            ipaddresses: Some(
                [
                    ("access_v4".to_string(), access.clone()),
                    ("bind_v4".to_string(), private.clone()),
                ]
                .into(),
            ),
            stdout: format!("instance {id} running at {access} (private {private})\n"),
            ..Default::default()
        };
        match self.host_keys(&ec2, &id).await {
            Some(keys) => {
                out.stdout.push_str("ssh host keys read from the console\n");
                out.result.insert("ssh_host_keys".into(), keys);
            }
            None => out
                .stdout
                .push_str("no ssh host key on the console: the first ssh contact is trusted\n"),
        }
        Ok(out)
    }

    async fn machines(
        &self,
        fields: &serde_json::Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        tagged_machines(self, fields).await
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let ec2 = self.ec2(task)?;
        let mut ids = BTreeSet::new();
        if let Some(id) = providerid(task) {
            if valid_instance_id(&id) {
                ids.insert(id);
            } else {
                tracing::warn!(task_id = %task.id, providerid = %id, "not an instance id; deleting by tag");
            }
        }
        for i in ec2.instances_tagged(&node_tags(task), LIVE_STATES).await? {
            ids.insert(i.id);
        }
        let mut stdout = String::new();
        let mut gone = Vec::new();
        for id in &ids {
            if ec2.terminate(id).await? {
                stdout.push_str(&format!("instance {id} terminating\n"));
                gone.push(id.clone());
            } else {
                stdout.push_str(&format!("instance {id} does not exist\n"));
            }
        }
        self.wait_gone(&ec2, task, &gone).await?;
        if ids.is_empty() {
            stdout.push_str("no instance to delete\n");
        }
        stdout.push_str(&self.drop_key_if_unused(&ec2, task).await?);
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }
}

/// The live EC2 instances with a `weft:node` tag, for the provider fields `fields`.
async fn tagged_machines(
    p: &AwsProvider,
    fields: &Map<String, Value>,
) -> Result<Vec<SweptMachine>, PluginError> {
    let tag = |i: &ec2::Instance, k: &str| i.tags.get(k).cloned().unwrap_or_default();
    Ok(p.tagged_instances(fields)
        .await?
        .into_iter()
        .map(|i| SweptMachine {
            providertype: NAME.into(),
            node: tag(&i, TAG_NODE),
            cluster: tag(&i, TAG_CLUSTER),
            tenant: tag(&i, TAG_TENANT),
            providerid: i.id,
            state: i.state,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Action;

    fn task(node: &str) -> Task {
        let mut t =
            crate::contract::task(Action::Create, node, Map::new(), Duration::from_secs(60));
        t.cluster_id = "c1".into();
        t.tenant_id = "t1".into();
        t
    }

    #[test]
    fn tokens_are_per_node_and_launch_and_fit_ec2() {
        let a = client_token(&task("n1"), "ami-1", "t3.small", "");
        assert_eq!(a, client_token(&task("n1"), "ami-1", "t3.small", ""));
        assert!(a.len() <= 64 && a.is_ascii());
        assert_ne!(a, client_token(&task("n2"), "ami-1", "t3.small", ""));
        assert_ne!(a, client_token(&task("n1"), "ami-1", "t3.small", "i-0abc"));
        assert_ne!(a, client_token(&task("n1"), "ami-2", "t3.small", ""));
    }

    #[test]
    fn names_and_ids() {
        assert_eq!(key_pair_name(&task("n1")), "weft-t1-c1");
        assert!(valid_instance_id("i-0123abcd"));
        assert!(
            !valid_instance_id("i-") && !valid_instance_id("weft-x") && !valid_instance_id("i-a/b")
        );
        let k1 = cluster_key(b"seed", "t1", "c1");
        assert_eq!(
            k1.public_key(),
            cluster_key(b"seed", "t1", "c1").public_key()
        );
        assert_ne!(
            k1.public_key(),
            cluster_key(b"seed", "t1", "c2").public_key()
        );
        assert_ne!(
            k1.public_key(),
            cluster_key(b"other", "t1", "c1").public_key()
        );
    }

    #[test]
    fn the_plugin_type_declares_secrets_sensitive() {
        let t = AwsProvider::new().plugin_type();
        crate::contract::check_plugin_type(&t);
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
