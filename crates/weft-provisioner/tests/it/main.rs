//! The provisioner's integration tests: the agent against a real in-process weft server, the
//! plugin contract suite run for every plugin, and the example catalog end to end.
// The tests start servers, containers and tools by design (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]
// A test reads as one scenario from start to end; the rule of short functions (docs/dev/style.md,
// checked with `-W clippy::too_many_lines`) is for the crates' code, not for their tests.
#![allow(clippy::too_many_lines)]

mod agent;
mod automators;
mod automators_docker; // the docker automator on a node with the engine's socket
mod automators_docker_fields;
mod aws;
mod aws_credentials; // AssumeRole, instance profile, refresh (issue 39)
mod aws_launch; // AMIs by name, RunInstances options (issue 39)
mod aws_sigv4;
mod common;
mod contract; // the contract suite every plugin passes
mod docker;
mod drift; // drift checks and node replacement
mod e2e;
mod fatal; // fatal means once (issue 35)
mod faults; // one fault suite for every cloud (issue 39)
mod google;
mod hostpool;
mod joyent;
mod joyent_sign;
mod openstack;
mod openstack_identity;
mod plugins;
mod retry; // no orphans: killed CREATEs retried
mod rolling; // rolling changes on kv-web (issue 20)
mod rotation; // credentials read when used (issue 35)
mod ssh;
mod stateful; // etcd and Redis clusters that keep their data (issue 41)
mod sweep;
mod throttle;
