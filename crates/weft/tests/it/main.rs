//! End-to-end tests of the `weft` binary: real processes, real ports, a real SQLite file.
// The tests start servers, containers and tools by design (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]
// A test reads as one scenario from start to end; the rule of short functions (docs/dev/style.md,
// checked with `-W clippy::too_many_lines`) is for the crates' code, not for their tests.
#![allow(clippy::too_many_lines)]

mod bench;
mod cli;
mod cli_hostpool;
mod cli_sweep; // weft provider sweep
mod crash;
mod crash_up;
mod declared; // templates as versions, clusters in files (issue 42)
mod failover; // several servers on one PostgreSQL (issue 21)
mod follow; // an event stream follower (issue 38)
mod guide;
mod hostpool_ssh;
mod lost_provisioner;
mod offline;
mod openapi_fuzz;
mod pcap; // reading tcpdump captures (several_servers_containers)
mod plan_output;
mod ready; // weft up and provisioners under load (issue 35)
mod sealed; // secrets sealed at rest (issue 36)
mod server;
mod several_servers_containers; // the several-servers deployment in containers, TLS (issue 36)
mod support;
mod template_test; // weft template test (issue 42)
mod tenant_users;
mod tls; // TLS on the wire (issue 36)
mod up_down;
mod worker;
