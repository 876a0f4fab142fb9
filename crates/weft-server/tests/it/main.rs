//! The integration tests of weft-server: both routers driven in-process (`tower::ServiceExt::oneshot`),
//! each test over its own temporary SQLite store. One binary, one module per route group.
// The tests start servers, containers and tools by design (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]
// A test reads as one scenario; short functions (docs/dev/style.md) are for the crates' code.
#![allow(clippy::too_many_lines)]

mod apikeys;
mod audit; // the audit trail (issue 38)
mod bad_input;
mod callbacks;
mod cancel;
mod catalog;
mod cluster_ops;
mod clusters;
mod common;
mod coopr_catalog; // Coopr's shipped catalog (issue 35)
mod delete_running;
mod drift;
mod entities;
mod events; // the event stream (issue 38)
mod health; // health runs (issue 20)
mod hostpools;
mod isolation;
mod janitor;
mod layers; // the layer order of ARCHITECTURE.md
mod metrics_profile;
mod nodes_map; // payloads without the nodes map (issue 24)
mod openapi;
mod outbound;
mod plugins;
mod prometheus;
mod provisioners;
mod quotas;
mod rollouts; // rolling changes (issue 20)
mod secrets;
mod slow_clients;
mod status_identity;
mod store_faults; // a full disk, a database restart (issue 37)
mod sweep; // provider sweep
mod tenants;
mod ui;
mod versions; // templates as versioned artifacts, declared clusters (issue 42)
mod webhooks; // tenants' webhooks (issue 38)
