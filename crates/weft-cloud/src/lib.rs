//! weft-cloud: the provider contract and the cloud providers.
//!
//! Module map:
//! - `task`: the task JSON a worker takes (contract §5.11), what a plugin returns, plugin errors.
//! - `plugin`: the `Provider` trait every provider implements (contract §4.6), cloud or not.
//! - `descriptor`: plugin types written as JSON descriptors in Coopr's format.
//! - `keys`: per-cluster SSH keys derived from a seed, and the login a node is reached with.
//! - `throttle`: the per-account token bucket shared by every worker of a provisioner.
//! - `cloud`: the cloud layer: one lifecycle (idempotent CREATE, CONFIRM through eventual
//!   consistency, DELETE by id and by marks, STATUS, sweep) over the small `Cloud` trait,
//!   back-off with full jitter, one HTTP send path, one field reader.
//! - `aws`: EC2 instances found by their weft tags; our own EC2 query client (SigV4, a small XML
//!   reader), static, AssumeRole and instance-profile credentials.
//! - `openstack`: the `openstack` (Keystone v3) and `rackspace` (Rackspace Identity v2.0)
//!   providers: a node is a Nova server, found by name and `weft-node` metadata.
//! - `google`: Compute Engine v1 instances, service-account JWT auth.
//! - `joyent`: Triton CloudAPI machines, HTTP Signature auth.
//!
//! The provisioner (`weft-provisioner`) runs these providers beside its own (`docker`, `local`,
//! `hostpool`) and the automators; nothing here knows about the agent, transports or automators.
#![warn(missing_docs)]

pub mod aws;
pub mod cloud;
pub mod descriptor;
pub mod google;
pub mod joyent;
pub mod keys;
pub mod openstack;
pub mod plugin;
pub mod task;
pub mod throttle;

pub use plugin::Provider;
pub use task::{PluginError, Task, TaskOutput};
