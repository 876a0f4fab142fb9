//! weft-provisioner: the agent that runs cluster tasks for the weft server.
//!
//! Module map:
//! - `task`: the task JSON a worker takes (contract §5.11), what a plugin returns, plugin errors.
//! - `plugin`: the `Provider` and `Automator` traits and `Plugins`, which dispatches a task to the
//!   right plugin (contract §4.5).
//! - `transport`: the `Transport` trait (run a command with a time-out and bounded output, write a
//!   file) and `LocalTransport`, which runs on this machine in a process group per command.
//! - `docker`: the `docker` provider: a node is a container on a Docker Engine (bollard), on a
//!   bridge network per cluster, with a per-cluster SSH key; reached over SSH.
//! - `hostpool`: the `hostpool` provider: machines that already exist, lent from a pool by the
//!   server; claimed over SSH at CREATE, wiped (`wipe_command`) at DELETE.
//! - `google`: the `google` provider: Compute Engine v1 instances, service-account JWT auth.
//! - `joyent`: the `joyent` provider: Triton CloudAPI machines, HTTP Signature auth.
//! - `openstack`: the `openstack` (Keystone v3) and `rackspace` (Rackspace Identity v2.0)
//!   providers: a node is a Nova server, found by name and `weft-node` metadata before one is made.
//! - `local`: the `local` provider: a node is a directory plus its own loopback address.
//! - `ssh`: `SshTransport`, the `Transport` over SSH (russh): key auth, host keys recorded at
//!   CONFIRM and checked on every connection, `sudo -E` for non-root users.
//! - `shell`: the `shell` automator: runs admin scripts with the task as environment and JSON.
//! - `tenancy`: tenant users: each tenant's local commands run as a uid of its own (opt-in).
//! - `automators`: the `ansible`, `puppet`, `chef-solo` and `docker` automators, run on the node.
//! - `agent`: registration, heartbeat, the worker pool per tenant and the take/run/finish loop.
//! - `resources`: plugin resources downloaded from the server and activated per tenant.
//! - `api`: the provisioner's own HTTP API, which the server calls (contract §4.13).
//! - `aws`: the `aws` provider: a node is an EC2 instance, found by its weft tags; our own
//!   EC2 query client (SigV4, a small XML reader).
//! - `cloud`: what the cloud providers share: classifying a cloud's errors as retryable or
//!   fatal, bounded back-off that honours `Retry-After`, polling a machine until it is ready.
//! - `sweep`: machines carrying weft's marks (aws tags, docker labels) that belong to no live
//!   node, and the DELETE task that removes one.
//!
//! The contract test suite every provider and automator passes is `tests/it/contract.rs`.
#![warn(missing_docs)]

pub mod agent;
pub mod api;
pub mod automators;
pub mod aws;
pub mod cloud;
mod descriptor;
pub mod docker;
pub mod google;
pub mod health;
pub mod hostpool;
pub mod joyent;
pub mod keys;
pub mod local;
pub mod openstack;
pub mod plugin;
pub mod resources;
pub mod shell;
pub mod ssh;
pub mod sweep;
pub mod task;
pub mod tenancy;
pub mod throttle;
pub mod transport;

pub use agent::{Agent, AgentConfig, AgentError};
pub use plugin::{Automator, Plugins, Provider};
pub use task::{PluginError, Task, TaskOutput};
