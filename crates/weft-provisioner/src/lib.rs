//! weft-provisioner: the agent that runs cluster tasks for the weft server.
//!
//! Module map:
//! - `task`, `keys`, `throttle`, and the `aws`, `openstack`, `google` and `joyent` providers on the
//!   shared cloud layer (`cloud`) come from `weft-cloud` and are re-exported here.
//! - `plugin`: the `Automator` trait (the `Provider` trait is `weft-cloud`'s) and `Plugins`, which
//!   dispatches a task to the right plugin (contract §4.5).
//! - `transport`: the `Transport` trait (run a command with a time-out and bounded output, write a
//!   file) and `LocalTransport`, which runs on this machine in a process group per command.
//! - `docker`: the `docker` provider: a node is a container on a Docker Engine (bollard), on a
//!   bridge network per cluster, with a per-cluster SSH key; reached over SSH.
//! - `hostpool`: the `hostpool` provider: machines that already exist, lent from a pool by the
//!   server; claimed over SSH at CREATE, wiped (`wipe_command`) at DELETE.
//! - `local`: the `local` provider: a node is a directory plus its own loopback address.
//! - `ssh`: `SshTransport`, the `Transport` over SSH (russh): key auth, host keys recorded at
//!   CONFIRM and checked on every connection, `sudo -E` for non-root users.
//! - `shell`: the `shell` automator: runs admin scripts with the task as environment and JSON.
//! - `tenancy`: tenant users: each tenant's local commands run as a uid of its own (opt-in).
//! - `automators`: the `ansible`, `puppet`, `chef-solo` and `docker` automators, run on the node.
//! - `health`: HEALTHCHECK tries, interval and time-out around an automator's check.
//! - `agent`: registration, heartbeat, the worker pool per tenant and the take/run/finish loop.
//! - `resources`: plugin resources downloaded from the server and activated per tenant.
//! - `api`: the provisioner's own HTTP API, which the server calls (contract §4.13).
//! - `sweep`: machines carrying weft's marks that belong to no live node, and the DELETE task
//!   that removes one.
//!
//! The contract test suite every provider and automator passes is `tests/it/contract.rs`.
#![warn(missing_docs)]

use weft_cloud::descriptor;
pub use weft_cloud::{aws, cloud, google, joyent, keys, openstack, task, throttle};

pub mod agent;
pub mod api;
pub mod automators;
pub mod docker;
pub mod health;
pub mod hostpool;
pub mod local;
pub mod plugin;
pub mod resources;
pub mod shell;
pub mod ssh;
pub mod sweep;
pub mod tenancy;
pub mod transport;

pub use agent::{Agent, AgentConfig, AgentError};
pub use plugin::{Automator, Plugins, Provider};
pub use task::{PluginError, Task, TaskOutput};
