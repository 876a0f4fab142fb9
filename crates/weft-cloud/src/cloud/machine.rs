//! The typed answers of the cloud layer: a machine as any cloud shows it, the marks weft puts on
//! it, and what a cloud's CREATE and CONFIRM steps hand back.

use serde_json::{Map, Value};
use weft_model::{MachineState, SweptMachine};

use super::fields::{bad, Fields};
use crate::task::{PluginError, Task};

/// The keys of weft's marks (node, cluster, tenant) as tags, labels or metadata on every cloud
/// whose keys may hold `-` (all but EC2, whose tags are `weft:node`...).
pub const MARK_KEYS: [&str; 3] = ["weft-node", "weft-cluster", "weft-tenant"];
/// The key of the node mark.
pub const MARK_NODE: &str = MARK_KEYS[0];

/// The marks weft puts on every machine it makes (tags, labels or metadata): the node, the
/// cluster and the tenant, each `-` when the task names none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marks {
    /// The node's id.
    pub node: String,
    /// The cluster's id.
    pub cluster: String,
    /// The tenant's id.
    pub tenant: String,
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

impl Marks {
    /// The marks of a task's node.
    pub fn of(task: &Task) -> Marks {
        Marks {
            node: or_dash(&task.node_id),
            cluster: or_dash(&task.cluster_id),
            tenant: or_dash(&task.tenant_id),
        }
    }

    /// Marks read from a machine's tags: `None` without a node mark (not weft's); a missing
    /// tenant mark is `-` (a machine made before tenant marks).
    pub fn read(mut get: impl FnMut(&str) -> Option<String>, keys: [&str; 3]) -> Option<Marks> {
        let node = get(keys[0]).filter(|n| !n.is_empty())?;
        Some(Marks {
            node,
            cluster: get(keys[1]).unwrap_or_default(),
            tenant: get(keys[2]).unwrap_or_else(|| "-".into()),
        })
    }
}

/// Where a machine is in its life, as weft reads the cloud's own word for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Being made or started (EC2 `pending`, GCE `STAGING`, Nova `BUILD`...).
    Pending,
    /// Running.
    Running,
    /// Stopped or stopping: it exists but does not run.
    Stopped,
    /// Being deleted.
    Deleting,
    /// Terminated or deleted, still listed for a while.
    Gone,
    /// Failed for good (Nova `ERROR`, Triton `failed`).
    Failed,
}

/// A machine's addresses as the cloud shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    /// The address reachable from outside its network (a NAT or floating address), if any.
    pub public: Option<String>,
    /// The address on its own network.
    pub private: Option<String>,
}

/// One machine, as any cloud shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The cloud's id of it (what CREATE answers as `providerid`).
    pub id: String,
    /// Where it is in its life.
    pub state: State,
    /// The cloud's own word for its state (for messages and sweeps).
    pub status: String,
    /// weft's marks on it; `None` when it carries none.
    pub marks: Option<Marks>,
    /// Its addresses.
    pub addresses: Addresses,
}

impl Machine {
    /// Whether it still exists as a machine (neither gone nor being deleted).
    pub fn is_live(&self) -> bool {
        !matches!(self.state, State::Gone | State::Deleting)
    }

    /// The machine state STATUS answers.
    pub fn machine_state(&self) -> MachineState {
        match self.state {
            State::Running => MachineState::Running,
            State::Gone | State::Deleting => MachineState::Missing,
            State::Pending | State::Stopped | State::Failed => MachineState::Stopped,
        }
    }

    /// The machine as a sweep shows it; `None` when it carries no marks.
    pub fn swept(&self, providertype: &str) -> Option<SweptMachine> {
        let m = self.marks.as_ref()?;
        Some(SweptMachine {
            providertype: providertype.into(),
            providerid: self.id.clone(),
            node: m.node.clone(),
            cluster: m.cluster.clone(),
            tenant: m.tenant.clone(),
            state: self.status.clone(),
        })
    }
}

/// How CONFIRM answers `access_v4`: the shared field `ssh_address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SshAddress {
    /// The public address, else the private one (no field).
    #[default]
    PublicElsePrivate,
    /// The public address; a machine without one is a fatal error.
    Public,
    /// The private address (a provisioner inside the machines' network).
    Private,
}

impl SshAddress {
    /// Field `ssh_address`: `public`, `private`, or absent.
    pub fn read(f: &Fields) -> Result<SshAddress, PluginError> {
        match f
            .text("ssh_address")
            .map(|s| s.to_ascii_lowercase())
            .as_deref()
        {
            None => Ok(SshAddress::PublicElsePrivate),
            Some("public") => Ok(SshAddress::Public),
            Some("private") => Ok(SshAddress::Private),
            Some(other) => Err(bad(
                "ssh_address",
                format!("{other:?} is neither public nor private"),
            )),
        }
    }

    /// `(access, bind)` of a running machine: `None` until it has a private address.
    pub fn choose(self, m: &Machine) -> Result<Option<(String, String)>, PluginError> {
        let Some(private) = m.addresses.private.clone() else {
            return Ok(None);
        };
        let access = match (self, &m.addresses.public) {
            (SshAddress::Private, _) => private.clone(),
            (_, Some(public)) => public.clone(),
            (SshAddress::PublicElsePrivate, None) => private.clone(),
            (SshAddress::Public, None) => {
                return Err(PluginError::fatal(format!(
                    "provider field ssh_address is public but machine {} has no public \
                     address (give it one, or set ssh_address to private)",
                    m.id
                )))
            }
        };
        Ok(Some((access, private)))
    }
}

/// How weft logs in to a cloud's machines: a user and the private key (OpenSSH text).
#[derive(Clone)]
pub struct Login {
    /// The login user.
    pub user: String,
    /// The private key.
    pub key: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What a cloud prepared for a CREATE: its launch request, how weft logs in, what it did
/// (keys imported, images resolved) and results to answer besides `providerid`.
#[derive(Debug)]
pub struct Prepared<R> {
    /// The launch request, typed by the cloud.
    pub request: R,
    /// The login of the machine, when weft has its key.
    pub login: Option<Login>,
    /// What preparing did, for the task's output.
    pub stdout: String,
    /// More results of CREATE (a zone, a region).
    pub result: Map<String, Value>,
}

/// What a launch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launched {
    /// A machine was made (or the cloud's idempotency key named one already made): its id.
    Made(String),
    /// The cloud refused because the machine exists (its name is taken): look it up again.
    Taken,
}

/// What a cloud adds to CONFIRM's answer once the machine runs.
#[derive(Debug, Default)]
pub struct Confirmed {
    /// Results to answer (`ssh_host_keys`).
    pub result: Map<String, Value>,
    /// What it did.
    pub stdout: String,
    /// An address that replaces the public one (a floating address attached now).
    pub public: Option<String>,
}
