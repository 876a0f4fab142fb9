//! The `docker` provider: a node is a container on a Docker Engine (bollard, the Engine API), on a
//! bridge network of its own cluster, reached over SSH like any remote machine.
//!
//! - **Engine**: the admin field `endpoint` (`unix:///path`, `tcp://host:port`, `http://...`), else
//!   `DOCKER_HOST`, else the local socket. The API version is negotiated once per endpoint.
//! - **Network**: one user-defined bridge network per cluster, `<network_prefix>-<tenant>-<cluster>`
//!   (`network_prefix` defaults to `weft`), labelled `weft.cluster`, `weft.tenant`. CREATE makes it
//!   when missing (one at a time per provisioner). Old engines (API < 1.44) allow two networks of
//!   one name, so two provisioners racing to make it could each make one: every CREATE uses the
//!   oldest and removes the younger twins, so all nodes end on the same network (a container start
//!   that meets a twin, "ambiguous", is tried again until it is gone). DELETE removes the network
//!   with the cluster's last container.
//! - **Container**: named `<network_prefix>-<node id>` (the provider id), from the image type's
//!   `image` (providermap `image`, else the admin field `image`), never pulled (there may be no
//!   registry): a missing image is a clear, non-retryable error. Hostname and network aliases are
//!   the node's hostname; labels `weft.cluster`, `weft.tenant`, `weft.node`, `weft.network` and
//!   `weft.ssh-key` (the authorized key's fingerprint). It runs with an init process as PID 1.
//! - **Hardware**: the hardware type's providermap `flavor`: `tiny` (0.5 CPU, 256 MiB), `small`
//!   (1 CPU, 512 MiB), `medium` (2 CPUs, 1 GiB), `large` (4 CPUs, 4 GiB), or explicit
//!   `cpus=1.5,memory=768m`; CPUs are capped at what the engine has. No flavor: no limits.
//! - **SSH**: the image's command (`images/build-node-image.sh`: `weft-sshd`) authorizes the key in
//!   `$AUTHORIZED_KEY` for root and starts sshd. The key is one ed25519 key per cluster, derived
//!   from a seed, the tenant and the cluster id: every worker and every retry of any node of the
//!   cluster gets the same key without the provisioner keeping state. The seed is the sensitive
//!   admin field `sshkeyseed` (the same on every provisioner), else a random seed the provisioner
//!   makes once in `<data dir>/docker/ssh-key-seed`. A container found with another key (made by a
//!   provisioner with another seed) is replaced at CREATE. CREATE answers `ssh-auth`; CONFIRM waits
//!   for sshd on the container's address, records its host key (`ssh_host_keys`) and answers the
//!   address as `access_v4` and `bind_v4` (the host reaches bridge networks directly).
//! - **Cleanup**: a CREATE that fails removes what it made; DELETE removes the container (with its
//!   anonymous volumes) and, when no container of the cluster is left, the network. Missing things
//!   are success.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, EndpointSettings, HostConfig,
    NetworkCreateRequest, NetworkingConfig,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectNetworkOptions, ListContainersOptions, ListNetworksOptions,
    RemoveContainerOptions,
};
use bollard::Docker;
use russh::keys::HashAlg;
use serde_json::{json, Value};
use weft_model::{FieldSchema, MachineState, PluginType, SweptMachine};

use crate::cloud::fields::Fields;
use crate::plugin::{status_output, Provider};
use crate::ssh;
use crate::task::{providerid, PluginError, PluginResult, Task, TaskOutput};

/// The provider type name.
pub const NAME: &str = "docker";
/// The user the provider's key logs in as (the node image authorizes it for root).
pub const SSH_USER: &str = "root";
/// How long CONFIRM waits for sshd at most (and never longer than the task's time-out).
pub const CONFIRM_LIMIT: Duration = Duration::from_secs(120);

/// The label holding the id of the cluster a node's container (or a network) belongs to.
pub const LABEL_CLUSTER: &str = "weft.cluster";
/// The label holding the id of the tenant a node's container (or a network) belongs to.
pub const LABEL_TENANT: &str = "weft.tenant";
/// The label holding the node id of a node's container; sweeps find nodes by it.
pub const LABEL_NODE: &str = "weft.node";
/// The label holding the name of the cluster's bridge network the container is on (on a network:
/// its own name).
pub const LABEL_NETWORK: &str = "weft.network";
/// The label holding the fingerprint of the SSH key the container authorizes.
pub const LABEL_KEY: &str = "weft.ssh-key";

const DEFAULT_PREFIX: &str = "weft";
const SEED_FILE: &str = "ssh-key-seed";

/// CPUs and memory (bytes) of a container.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// CPUs the container may use (fractions allowed); `None` is no limit.
    pub cpus: Option<f64>,
    /// Memory in bytes; `None` is no limit.
    pub memory: Option<i64>,
}

const MIB: i64 = 1024 * 1024;

/// Reads a flavor (see the module doc). `None` is no limits.
pub fn flavor_limits(flavor: Option<&str>) -> Result<Limits, String> {
    let Some(f) = flavor.map(str::trim).filter(|f| !f.is_empty()) else {
        return Ok(Limits {
            cpus: None,
            memory: None,
        });
    };
    let named = |cpus: f64, mib: i64| Limits {
        cpus: Some(cpus),
        memory: Some(mib * MIB),
    };
    match f {
        "tiny" => return Ok(named(0.5, 256)),
        "small" => return Ok(named(1.0, 512)),
        "medium" => return Ok(named(2.0, 1024)),
        "large" => return Ok(named(4.0, 4096)),
        _ => {}
    }
    let bad = || {
        format!(
            "unknown docker flavor {f:?}: use tiny, small, medium, large or cpus=N,memory=SIZE \
             (e.g. cpus=1.5,memory=768m)"
        )
    };
    let mut limits = Limits {
        cpus: None,
        memory: None,
    };
    for part in f.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(bad)?;
        match k.trim() {
            "cpus" => {
                let c: f64 = v.trim().parse().map_err(|_| bad())?;
                if !(0.01..=1024.0).contains(&c) {
                    return Err(bad());
                }
                limits.cpus = Some(c);
            }
            "memory" => limits.memory = Some(parse_size(v.trim()).ok_or_else(bad)?),
            _ => return Err(bad()),
        }
    }
    if limits.memory.is_some_and(|m| m < 6 * MIB) {
        return Err(format!(
            "docker flavor {f:?}: the Docker Engine needs at least 6m of memory"
        ));
    }
    Ok(limits)
}

/// `512m`, `1g`, `1.5g`, `100000k`, `1048576` (bytes).
fn parse_size(s: &str) -> Option<i64> {
    let s = s.to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (num, unit) = match s.char_indices().last()? {
        (i, 'k') => (&s[..i], 1024f64),
        (i, 'm') => (&s[..i], (1024 * 1024) as f64),
        (i, 'g') => (&s[..i], (1024 * 1024 * 1024) as f64),
        _ => (s, 1f64),
    };
    let n: f64 = num.parse().ok()?;
    (n > 0.0 && n * unit < 1e15).then_some((n * unit) as i64)
}

/// Keeps letters, digits, `_`, `.` and `-` of a name part; the rest becomes `-`.
pub(crate) fn name_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A valid container name made by this provider.
fn valid_container_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

/// The admin field `network_prefix`, or `weft`.
fn prefix(task: &Task) -> String {
    Fields::of(task)
        .text("network_prefix")
        .map(|p| name_part(&p))
        .unwrap_or_else(|| DEFAULT_PREFIX.into())
}

/// The container (and provider id) of a task's node.
pub fn container_name(task: &Task) -> String {
    let node = if task.node_id.is_empty() {
        format!("task-{}", task.id)
    } else {
        task.node_id.clone()
    };
    format!("{}-{}", prefix(task), name_part(&node))
}

/// The network of a task's cluster.
pub fn network_name(task: &Task) -> String {
    let cluster = if task.cluster_id.is_empty() {
        "nocluster".to_string()
    } else {
        name_part(&task.cluster_id)
    };
    if task.tenant_id.is_empty() {
        format!("{}-{cluster}", prefix(task))
    } else {
        format!("{}-{}-{cluster}", prefix(task), name_part(&task.tenant_id))
    }
}

/// A Docker `Created` time (RFC 3339, UTC, up to nine fraction digits) as a sortable string.
fn created_key(created: &str) -> String {
    let t = created.trim_end_matches('Z');
    let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
    format!("{secs}.{frac:0<9}")
}

/// Whether `e` says the thing asked for does not exist.
fn not_found(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// What a CREATE whose image is missing says: images are never pulled (there may be no registry).
fn missing_image(image: &str) -> String {
    format!(
        "image {image} not found on the Docker Engine; build it with images/build-node-image.sh"
    )
}

/// Whether `e` says a network name matches two networks (twins, see `ensure_network`).
fn ambiguous(e: &DockerError) -> bool {
    matches!(e, DockerError::DockerResponseServerError { message, .. } if message.contains("ambiguous"))
}

fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A Docker error as a plugin error: bad requests are for good, the rest may pass on a retry.
fn engine_error(what: &str, e: DockerError) -> PluginError {
    let msg = match &e {
        DockerError::DockerResponseServerError { message, .. } => format!("{what}: {message}"),
        other => format!("{what}: {other}"),
    };
    match status_of(&e) {
        Some(400) => PluginError::fatal(msg),
        Some(401 | 403) => PluginError::auth(msg),
        Some(_) => PluginError::retryable(msg),
        // No answer from the engine.
        None => PluginError::network(msg),
    }
}

/// The container `name`, or `None` when the engine does not know it.
async fn inspect(
    docker: &Docker,
    name: &str,
) -> Result<Option<ContainerInspectResponse>, PluginError> {
    match docker.inspect_container(name, None).await {
        Ok(c) => Ok(Some(c)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(engine_error(&format!("inspecting container {name}"), e)),
    }
}

/// One Docker Engine, with the API version agreed and how many CPUs it has.
#[derive(Clone)]
struct Engine {
    docker: Docker,
    ncpu: Option<f64>,
}

/// The `docker` provider.
pub struct DockerProvider {
    data_dir: PathBuf,
    engines: tokio::sync::Mutex<HashMap<String, Engine>>,
    /// Held while a network is made or found and its container is made, and while DELETE decides
    /// whether the network is still used: workers of this provisioner never remove a network
    /// another one is about to use.
    networks: tokio::sync::Mutex<()>,
    seed: tokio::sync::OnceCell<Vec<u8>>,
}

impl std::fmt::Debug for DockerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerProvider")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl DockerProvider {
    /// The fallback key seed lives under `<data_dir>/docker`.
    pub fn new(data_dir: &Path) -> DockerProvider {
        DockerProvider {
            data_dir: data_dir.join("docker"),
            engines: Default::default(),
            networks: Default::default(),
            seed: Default::default(),
        }
    }

    /// The engine of a task's provider (`endpoint`), connected once.
    async fn engine(&self, task: &Task) -> Result<Engine, PluginError> {
        let endpoint = Fields::of(task).text("endpoint").unwrap_or_default();
        let mut engines = self.engines.lock().await;
        if let Some(e) = engines.get(&endpoint) {
            return Ok(e.clone());
        }
        let shown = if endpoint.is_empty() {
            std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
        } else {
            endpoint.clone()
        };
        let docker = if endpoint.is_empty() {
            Docker::connect_with_defaults()
        } else {
            Docker::connect_with_host(&endpoint)
        };
        let unreachable = |e: DockerError| {
            PluginError::network(format!("cannot reach the Docker Engine at {shown}: {e}"))
        };
        let docker = match docker {
            Ok(d) => d,
            Err(e @ DockerError::UnsupportedURISchemeError { .. }) => {
                return Err(PluginError::fatal(format!(
                    "provider field endpoint {endpoint:?}: {e} (use unix://, tcp:// or http://)"
                )))
            }
            Err(e) => return Err(unreachable(e)),
        };
        let docker = docker.negotiate_version().await.map_err(unreachable)?;
        let ncpu = docker
            .info()
            .await
            .map_err(unreachable)?
            .ncpu
            .filter(|n| *n > 0)
            .map(|n| n as f64);
        let e = Engine { docker, ncpu };
        engines.insert(endpoint, e.clone());
        Ok(e)
    }

    /// The key seed: the provider's `sshkeyseed`, else this provisioner's own.
    async fn key_seed(&self, task: &Task) -> Result<Vec<u8>, PluginError> {
        if let Some(s) = task
            .provider_fields()
            .get("sshkeyseed")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            return Ok(s.as_bytes().to_vec());
        }
        self.seed
            .get_or_try_init(|| own_seed(&self.data_dir))
            .await
            .cloned()
    }

    /// Finds the cluster's network, or makes it; answers its id (see the module doc on duplicates).
    async fn ensure_network(
        &self,
        docker: &Docker,
        task: &Task,
        name: &str,
    ) -> Result<String, PluginError> {
        let mut made: Option<String> = None;
        for _ in 0..2 {
            let nets = networks_named(docker, name).await?;
            if let Some(foreign) = nets.iter().find(|n| !n.1) {
                return Err(PluginError::fatal(format!(
                    "network {name} ({}) exists and was not made by weft",
                    foreign.0
                )));
            }
            if let Some(keep) = network_to_keep(docker, &nets).await {
                // Every other twin is empty (a container starts only while its network's name
                // is unique): remove it, so the containers made on it fail their start with
                // "not found" and are made again on the one that stays.
                for (id, _, _) in nets.iter().filter(|n| n.0 != keep) {
                    tracing::info!(network = name, id, "removing a twin network");
                    let _ = docker.remove_network(id).await;
                }
                return Ok(keep);
            }
            if made.is_some() {
                break;
            }
            let labels = HashMap::from([
                (LABEL_CLUSTER.to_string(), task.cluster_id.clone()),
                (LABEL_TENANT.to_string(), task.tenant_id.clone()),
            ]);
            let resp = docker
                .create_network(NetworkCreateRequest {
                    name: name.to_string(),
                    driver: Some("bridge".into()),
                    labels: Some(labels),
                    ..Default::default()
                })
                .await
                .map_err(|e| engine_error(&format!("creating network {name}"), e))?;
            tracing::info!(cluster_id = %task.cluster_id, network = name, "network created");
            made = Some(resp.id);
        }
        Err(PluginError::retryable(format!(
            "network {name} vanished while it was being made"
        )))
    }

    /// Removes the cluster's network(s) named `name` when no container of it is left. A network
    /// still in use is left to the DELETE of its last container.
    async fn remove_network_if_unused(
        &self,
        docker: &Docker,
        name: &str,
    ) -> Result<String, PluginError> {
        let _guard = self.networks.lock().await;
        let users = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_string(),
                    vec![format!("{LABEL_NETWORK}={name}")],
                )])),
                ..Default::default()
            }))
            .await
            .map_err(|e| engine_error("listing containers", e))?;
        if !users.is_empty() {
            return Ok(format!(
                "network {name} kept: {} container(s) still on it\n",
                users.len()
            ));
        }
        let mut removed = 0;
        for (id, ours, _) in networks_named(docker, name).await? {
            if !ours {
                continue;
            }
            match docker.remove_network(&id).await {
                Ok(()) => removed += 1,
                Err(e) if not_found(&e) => {}
                // Active endpoints: a container of another provisioner joined meanwhile.
                Err(e) if matches!(status_of(&e), Some(403) | Some(409)) => {
                    return Ok(format!("network {name} kept: still in use\n"));
                }
                Err(e) => return Err(engine_error(&format!("removing network {name}"), e)),
            }
        }
        Ok(if removed > 0 {
            format!("network {name} removed\n")
        } else {
            String::new()
        })
    }

    /// Removes a container and its anonymous volumes; a missing one is fine. Answers whether it
    /// existed.
    async fn remove_container(&self, docker: &Docker, name: &str) -> Result<bool, PluginError> {
        match docker
            .remove_container(
                name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if not_found(&e) => Ok(false),
            Err(e) => Err(engine_error(&format!("removing container {name}"), e)),
        }
    }

    /// Makes and starts the container; on failure removes what it made.
    async fn make_container(
        &self,
        engine: &Engine,
        task: &Task,
        spec: &ContainerSpec,
    ) -> Result<String, PluginError> {
        let docker = &engine.docker;
        let (name, network) = (spec.name.as_str(), spec.network.as_str());
        let guard = self.networks.lock().await;
        let net_id = self.ensure_network(docker, task, network).await?;
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.to_string()),
                    ..Default::default()
                }),
                container_body(task, spec, engine.ncpu, net_id),
            )
            .await;
        drop(guard);
        let id = match created {
            Ok(r) => r.id,
            Err(e) => {
                let err = create_error(spec, e);
                let _ = self.remove_network_if_unused(docker, network).await;
                return Err(err);
            }
        };
        if let Err(err) = self.start_container(docker, task, spec).await {
            let _ = self.remove_container(docker, name).await;
            let _ = self.remove_network_if_unused(docker, network).await;
            return Err(err);
        }
        Ok(id)
    }

    /// Starts the container made. While a twin network exists (see `ensure_network`) the engine
    /// cannot resolve the container's network by name: settle the twins (ours may be the one
    /// removed, and the start then fails with "not found") and try again.
    async fn start_container(
        &self,
        docker: &Docker,
        task: &Task,
        spec: &ContainerSpec,
    ) -> Result<(), PluginError> {
        let name = spec.name.as_str();
        let mut tries = 0;
        loop {
            match docker.start_container(name, None).await {
                Ok(()) => return Ok(()),
                Err(e) if ambiguous(&e) && tries < 50 => {
                    tries += 1;
                    let guard = self.networks.lock().await;
                    let settled = self.ensure_network(docker, task, &spec.network).await;
                    drop(guard);
                    if settled.is_err() || tries > 1 {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                Err(e) if ambiguous(&e) => {
                    return Err(PluginError::retryable(format!(
                        "starting container {name}: {}",
                        e
                    )))
                }
                Err(e) => return Err(engine_error(&format!("starting container {name}"), e)),
            }
        }
    }

    /// The container of a retried CREATE's first attempt, when it can stay (running, with this
    /// cluster's key, on this cluster's network); anything else under the name is removed. Fails
    /// on a container under the name that weft did not make for this node.
    async fn reusable_container(
        &self,
        docker: &Docker,
        task: &Task,
        spec: &ContainerSpec,
        stdout: &mut String,
    ) -> Result<Option<String>, PluginError> {
        let name = spec.name.as_str();
        let Some(c) = inspect(docker, name).await? else {
            return Ok(None);
        };
        let labels = c
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        if labels.get(LABEL_NODE).map(String::as_str) != Some(task.node_id.as_str()) {
            return Err(PluginError::fatal(format!(
                "container {name} exists and was not made by weft for node {}",
                task.node_id
            )));
        }
        let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let same_key = labels.get(LABEL_KEY) == Some(&spec.fingerprint);
        let same_net = labels.get(LABEL_NETWORK) == Some(&spec.network);
        if running && same_key && same_net {
            stdout.push_str(&format!("container {name} exists\n"));
            return Ok(c.id);
        }
        stdout.push_str(&format!(
            "container {name} exists but is {}: replacing it\n",
            if running {
                "another cluster key's"
            } else {
                "not running"
            }
        ));
        self.remove_container(docker, name).await?;
        Ok(None)
    }

    /// Makes the container. One that joined a twin network its maker then removed (two workers
    /// made the cluster's network at once) is made again on the network that stays.
    async fn make_on_the_network_that_stays(
        &self,
        engine: &Engine,
        task: &Task,
        spec: &ContainerSpec,
        stdout: &mut String,
    ) -> Result<String, PluginError> {
        let mut tries = 0;
        let id = loop {
            match self.make_container(engine, task, spec).await {
                Err(e) if tries < 3 && lost_its_network(&e) => tries += 1,
                other => break other?,
            }
        };
        let (name, image, network) = (&spec.name, &spec.image, &spec.network);
        tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
            container = %name, %image, "container started");
        stdout.push_str(&format!(
            "container {name} started from {image} on network {network}\n"
        ));
        Ok(id)
    }
}

/// What a node's container is made of.
struct ContainerSpec {
    name: String,
    network: String,
    image: String,
    limits: Limits,
    /// The cluster key's public half (OpenSSH) and its SHA-256 fingerprint.
    public_key: String,
    fingerprint: String,
}

/// The body of a node's container: its image, host name (the node's hostname cut at the first
/// dot, and the domain), the cluster key, weft's labels, the CPU (at most the engine's `ncpu`)
/// and memory limits, and the cluster's network (`net_id`) with the host names as aliases.
fn container_body(
    task: &Task,
    spec: &ContainerSpec,
    ncpu: Option<f64>,
    net_id: String,
) -> ContainerCreateBody {
    let hostname = task.config_str("hostname").unwrap_or_default();
    let (short, domain) = match hostname.split_once('.') {
        Some((s, d)) => (s, d),
        None => (hostname, ""),
    };
    let short: String = short.chars().take(63).collect();
    let mut aliases = Vec::new();
    if !short.is_empty() {
        aliases.push(short.clone());
    }
    if !hostname.is_empty() && hostname != short {
        aliases.push(hostname.to_string());
    }
    let labels = HashMap::from([
        (LABEL_CLUSTER.to_string(), task.cluster_id.clone()),
        (LABEL_TENANT.to_string(), task.tenant_id.clone()),
        (LABEL_NODE.to_string(), task.node_id.clone()),
        (LABEL_NETWORK.to_string(), spec.network.clone()),
        (LABEL_KEY.to_string(), spec.fingerprint.clone()),
    ]);
    let cpus = match (spec.limits.cpus, ncpu) {
        (Some(c), Some(n)) => Some(c.min(n)),
        (c, _) => c,
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        hostname: (!short.is_empty()).then(|| short.clone()),
        domainname: (!domain.is_empty()).then(|| domain.to_string()),
        env: Some(vec![format!("AUTHORIZED_KEY={}", spec.public_key)]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            init: Some(true),
            nano_cpus: cpus.map(|c| (c * 1e9) as i64),
            memory: spec.limits.memory,
            network_mode: Some(net_id.clone()),
            ..Default::default()
        }),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                net_id,
                EndpointSettings {
                    aliases: (!aliases.is_empty()).then_some(aliases),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// A failed container create in the plugin's terms.
fn create_error(spec: &ContainerSpec, e: DockerError) -> PluginError {
    let name = &spec.name;
    match status_of(&e) {
        Some(404) if e.to_string().contains("No such image") => {
            PluginError::not_found(missing_image(&spec.image))
        }
        Some(409) => PluginError::retryable(format!(
            "container {name} is being made by another worker: {e}"
        )),
        Some(404) => PluginError::retryable(format!(
            "creating container {name}: {e} (the network was removed meanwhile?)"
        )),
        _ => engine_error(&format!("creating container {name}"), e),
    }
}

/// Whether a container could not start because its network was removed under it.
fn lost_its_network(e: &PluginError) -> bool {
    e.retryable && e.message.contains("network") && e.message.contains("not found")
}

/// The node's image: the image type's docker image, else the provider's.
fn image_of(task: &Task) -> Result<String, PluginError> {
    let config = task.config_str("image").map(str::trim);
    config
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .or_else(|| Fields::of(task).text("image"))
        .ok_or_else(|| {
            PluginError::fatal(
                "no image: give the image type a docker image (providermap image) or the \
                 provider an image",
            )
        })
}

/// Of the twins named alike, the one to keep: the one a container runs on (there is at most one:
/// a start fails while the name is ambiguous), else the oldest. Seen from two provisioners at once
/// "oldest" can differ (a network's creation time is set before it becomes visible), "in use" not.
async fn network_to_keep(docker: &Docker, nets: &[(String, bool, String)]) -> Option<String> {
    if nets.len() > 1 {
        for (id, _, _) in nets {
            let used = docker
                .inspect_network(id, None::<InspectNetworkOptions>)
                .await
                .ok()
                .and_then(|n| n.containers)
                .is_some_and(|c| !c.is_empty());
            if used {
                return Some(id.clone());
            }
        }
    }
    let oldest = nets.iter().min_by(|a, b| (&a.2, &a.0).cmp(&(&b.2, &b.0)))?;
    Some(oldest.0.clone())
}

/// The networks named exactly `name`: (id, made by weft, created).
async fn networks_named(
    docker: &Docker,
    name: &str,
) -> Result<Vec<(String, bool, String)>, PluginError> {
    let nets = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([(
                "name".to_string(),
                vec![name.to_string()],
            )])),
        }))
        .await
        .map_err(|e| engine_error("listing networks", e))?;
    Ok(nets
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .filter_map(|n| {
            let ours = n
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL_CLUSTER));
            Some((n.id?, ours, created_key(&n.created.unwrap_or_default())))
        })
        .collect())
}

/// This provisioner's key seed: 32 random bytes in `<dir>/ssh-key-seed` (hex, mode 0600), made
/// once; a file made by a concurrent first use wins.
async fn own_seed(dir: &Path) -> Result<Vec<u8>, PluginError> {
    let path = dir.join(SEED_FILE);
    let io = |what: &str, e: std::io::Error| {
        PluginError::retryable(format!("{what} {}: {e}", path.display()))
    };
    let read = |text: String| -> Result<Vec<u8>, PluginError> {
        let t = text.trim();
        if t.len() < 32 {
            return Err(PluginError::fatal(format!(
                "{} is not a key seed (remove it to make a new one)",
                path.display()
            )));
        }
        Ok(t.as_bytes().to_vec())
    };
    match tokio::fs::read_to_string(&path).await {
        Ok(t) => return read(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading", e)),
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io("creating the directory of", e))?;
    let seed: [u8; 32] = rand::random();
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{SEED_FILE}.{}", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true).mode(0o600);
        let mut f = opts.open(&tmp).map_err(|e| io("writing", e))?;
        std::io::Write::write_all(&mut f, format!("{hex}\n").as_bytes())
            .map_err(|e| io("writing", e))?;
        f.sync_all().map_err(|e| io("writing", e))?;
    }
    // A hard link never replaces: the first seed made stays.
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("writing", e)),
    }
    read(
        tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| io("reading", e))?,
    )
}

/// The node's address on its cluster network (`weft.network` label), or on any network.
fn container_ip(c: &ContainerInspectResponse) -> Option<String> {
    let network = c
        .config
        .as_ref()
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(LABEL_NETWORK))
        .cloned();
    let nets = c.network_settings.as_ref()?.networks.as_ref()?;
    let ip_of = |e: &EndpointSettings| e.ip_address.clone().filter(|ip| !ip.is_empty());
    network
        .and_then(|n| nets.get(&n).and_then(ip_of))
        .or_else(|| nets.values().find_map(ip_of))
}

#[async_trait]
impl Provider for DockerProvider {
    fn plugin_type(&self) -> PluginType {
        let text = crate::descriptor::field;
        let seed = FieldSchema {
            field_type: "password".into(),
            sensitive: true,
            ..text(
                "SSH key seed",
                "a long random secret from which each cluster's SSH key is derived; \
                 the same on every provisioner (default: a seed of each provisioner's own)",
            )
        };
        let fields = [
            (
                "endpoint",
                text(
                    "Docker Engine",
                    "unix:///var/run/docker.sock, tcp://host:2375 or http://...; \
                     default: DOCKER_HOST, else the local socket",
                ),
            ),
            (
                "network_prefix",
                text(
                    "Name prefix",
                    "prefix of container and network names (default weft)",
                ),
            ),
            (
                "image",
                text(
                    "Default image",
                    "the image when the image type names none for this provider",
                ),
            ),
            ("sshkeyseed", seed),
        ];
        crate::descriptor::provider_type(
            NAME,
            "Docker",
            "nodes are containers on a Docker Engine, one bridge network per cluster, reached over SSH",
            &fields,
        )
    }

    async fn create(&self, task: &Task) -> PluginResult {
        let name = container_name(task);
        if !valid_container_name(&name) {
            return Err(PluginError::fatal(format!(
                "{name} cannot name a container"
            )));
        }
        let network = network_name(task);
        let image = image_of(task)?;
        let limits = flavor_limits(task.config_str("flavor")).map_err(PluginError::fatal)?;
        let engine = self.engine(task).await?;
        let docker = &engine.docker;
        match docker.inspect_image(&image).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Err(PluginError::not_found(missing_image(&image))),
            Err(e) => return Err(engine_error(&format!("inspecting image {image}"), e)),
        }
        let seed = self.key_seed(task).await?;
        let key = crate::keys::cluster_key(&seed, &task.tenant_id, &task.cluster_id);
        let (public_key, private) = crate::keys::key_halves(&key)?;
        let spec = ContainerSpec {
            name,
            network,
            image,
            limits,
            public_key,
            fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
        };
        // A retried CREATE finds what the first one made.
        let mut stdout = String::new();
        let id = match self
            .reusable_container(docker, task, &spec, &mut stdout)
            .await?
        {
            Some(id) => id,
            None => {
                self.make_on_the_network_that_stays(&engine, task, &spec, &mut stdout)
                    .await?
            }
        };
        let mut out = TaskOutput {
            result: crate::keys::login_result(SSH_USER, &private),
            stdout,
            ..Default::default()
        };
        out.result.insert("providerid".into(), json!(spec.name));
        out.result.insert("containerid".into(), json!(id));
        out.result.insert("network".into(), json!(spec.network));
        Ok(out)
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let name = providerid(task)
            .ok_or_else(|| PluginError::fatal("confirm: no providerid (was CREATE run?)"))?;
        if !valid_container_name(&name) {
            return Err(PluginError::fatal(format!(
                "providerid {name} is not a container"
            )));
        }
        let engine = self.engine(task).await?;
        let limit = CONFIRM_LIMIT.min(task.timeout);
        let start = Instant::now();
        let mut last_err;
        loop {
            let c = inspect(&engine.docker, &name).await?.ok_or_else(|| {
                PluginError::not_found(format!("container {name} does not exist"))
            })?;
            let state = c.state.clone().unwrap_or_default();
            if !state.running.unwrap_or(false) {
                return Err(PluginError::fatal(format!(
                    "container {name} is not running (status {}, exit code {}{})",
                    state.status.map(|s| s.to_string()).unwrap_or_default(),
                    state.exit_code.unwrap_or_default(),
                    state
                        .error
                        .filter(|e| !e.is_empty())
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )));
            }
            match container_ip(&c) {
                None => last_err = format!("container {name} has no address yet"),
                Some(ip) => match ssh::scan_host_key(&ip, 22, Duration::from_secs(3)).await {
                    Ok(key) => {
                        let hostname = task
                            .config_str("hostname")
                            .filter(|h| !h.is_empty())
                            .map(str::to_string);
                        let mut out = TaskOutput {
                            hostname,
                            ipaddresses: Some(
                                [
                                    ("access_v4".to_string(), ip.clone()),
                                    ("bind_v4".to_string(), ip.clone()),
                                ]
                                .into(),
                            ),
                            stdout: format!(
                                "container {name} at {ip}: sshd answers with {} {}\n",
                                key.kind(),
                                key.fingerprint()
                            ),
                            ..Default::default()
                        };
                        out.result.insert("ssh_host_keys".into(), key.to_result());
                        return Ok(out);
                    }
                    Err(e) => last_err = format!("sshd at {ip}: {}", e.message),
                },
            }
            if start.elapsed() >= limit {
                return Err(PluginError::timeout(format!(
                    "container {name} did not answer over SSH within {}s: {last_err}",
                    limit.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One inspection of the node's container: missing, running, or stopped (any other state).
    async fn status(&self, task: &Task) -> PluginResult {
        let name = providerid(task).unwrap_or_else(|| container_name(task));
        if !valid_container_name(&name) {
            return Ok(status_output(
                MachineState::Missing,
                Some(format!("providerid {name} is not a container")),
            ));
        }
        let engine = self.engine(task).await?;
        let Some(c) = inspect(&engine.docker, &name).await? else {
            let missing = format!("container {name} does not exist");
            return Ok(status_output(MachineState::Missing, Some(missing)));
        };
        let state = c.state.unwrap_or_default();
        let status = state.status.map(|s| s.to_string()).unwrap_or_default();
        Ok(if state.running.unwrap_or(false) {
            status_output(
                MachineState::Running,
                Some(format!("container {name} {status}")),
            )
        } else {
            status_output(
                MachineState::Stopped,
                Some(format!(
                    "container {name} is {status} (exit code {})",
                    state.exit_code.unwrap_or_default()
                )),
            )
        })
    }

    async fn machines(
        &self,
        fields: &serde_json::Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        let endpoint = fields.get("endpoint").and_then(Value::as_str);
        labelled_containers(endpoint).await
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        // Without a provider id (a CREATE that failed before answering), the name CREATE uses.
        let name = match providerid(task) {
            Some(id) => id,
            None if task.node_id.is_empty() => {
                return Ok(TaskOutput {
                    stdout: "no providerid and no node: nothing was made\n".into(),
                    ..Default::default()
                })
            }
            None => container_name(task),
        };
        if !valid_container_name(&name) {
            return Ok(TaskOutput {
                stdout: format!("providerid {name} is not a container: nothing to delete\n"),
                ..Default::default()
            });
        }
        let engine = self.engine(task).await?;
        let docker = &engine.docker;
        // The network named in the container's labels, else the task's.
        let network = match docker.inspect_container(&name, None).await {
            Ok(c) => c
                .config
                .and_then(|c| c.labels)
                .and_then(|mut l| l.remove(LABEL_NETWORK)),
            Err(_) => None,
        }
        .unwrap_or_else(|| network_name(task));
        let existed = self.remove_container(docker, &name).await?;
        let mut stdout = if existed {
            tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                container = %name, "container removed");
            format!("container {name} removed\n")
        } else {
            format!("container {name} does not exist\n")
        };
        stdout.push_str(&self.remove_network_if_unused(docker, &network).await?);
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }
}

/// The containers (any state) with a `weft.node` label on the Docker Engine at `endpoint`
/// (`None`: `DOCKER_HOST`, else the local socket).
async fn labelled_containers(endpoint: Option<&str>) -> Result<Vec<SweptMachine>, PluginError> {
    let docker = match endpoint.filter(|e| !e.is_empty()) {
        Some(e) => Docker::connect_with_host(e),
        None => Docker::connect_with_defaults(),
    }
    .map_err(|e| PluginError::fatal(format!("docker endpoint: {e}")))?;
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![LABEL_NODE.to_string()],
            )])),
            ..Default::default()
        }))
        .await
        .map_err(|e| PluginError::network(format!("listing containers: {e}")))?;
    Ok(list
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let name = c.names?.first()?.trim_start_matches('/').to_string();
            Some(SweptMachine {
                providertype: NAME.into(),
                providerid: name,
                node: label(LABEL_NODE),
                cluster: label(LABEL_CLUSTER),
                tenant: label(LABEL_TENANT),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavors_map_to_limits() {
        assert_eq!(
            flavor_limits(Some("small")).unwrap(),
            Limits {
                cpus: Some(1.0),
                memory: Some(512 * MIB)
            }
        );
        assert_eq!(
            flavor_limits(Some("medium")).unwrap(),
            Limits {
                cpus: Some(2.0),
                memory: Some(1024 * MIB)
            }
        );
        assert_eq!(
            flavor_limits(Some("cpus=1.5,memory=768m")).unwrap(),
            Limits {
                cpus: Some(1.5),
                memory: Some(768 * MIB)
            }
        );
        assert_eq!(
            flavor_limits(Some("memory=1g")).unwrap().memory,
            Some(1024 * MIB)
        );
        assert_eq!(
            flavor_limits(None).unwrap(),
            Limits {
                cpus: None,
                memory: None
            }
        );
        for bad in ["huge", "cpus=0", "cpus=x", "memory=1k", "disk=1g", "cpus"] {
            let e = flavor_limits(Some(bad)).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512m"), Some(512 * MIB));
        assert_eq!(parse_size("1.5G"), Some(1536 * MIB));
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("10kb"), Some(10240));
        assert_eq!(parse_size("-1m"), None);
        assert_eq!(parse_size("m"), None);
    }

    fn task(tenant: &str, cluster: &str, node: &str, fields: Value) -> Task {
        let raw = json!({"taskId": "1-1-1", "clusterId": cluster, "taskName": "CREATE",
            "nodeId": node, "config": {"provider": {"providertype": "docker", "provisioner": fields}}});
        let mut t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        t.tenant_id = tenant.into();
        t
    }

    #[test]
    fn names_come_from_the_prefix_tenant_cluster_and_node() {
        let t = task("t1", "00000007", "6f1c-aa", json!({}));
        assert_eq!(container_name(&t), "weft-6f1c-aa");
        assert_eq!(network_name(&t), "weft-t1-00000007");
        let t = task("", "c/1", "n 1", json!({"network_prefix": "lab"}));
        assert_eq!(container_name(&t), "lab-n-1");
        assert_eq!(network_name(&t), "lab-c-1");
        assert!(valid_container_name("weft-6f1c-aa"));
        for bad in ["", "-x", "a/b", "a b"] {
            assert!(!valid_container_name(bad), "{bad}");
        }
    }

    #[test]
    fn creation_times_sort_with_any_number_of_fraction_digits() {
        let a = created_key("2024-05-01T10:00:00.1Z");
        let b = created_key("2024-05-01T10:00:00.12Z");
        let c = created_key("2024-05-01T10:00:01Z");
        assert!(a < b && b < c, "{a} {b} {c}");
    }
}
