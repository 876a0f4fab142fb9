//! weft-store's one integration-test binary.
//!
//! `contract` (tenants, entities, resources, profiles, provisioners, keys) and `engine` (clusters,
//! nodes, jobs, tasks, the queue, leader election) hold the store contract suite, written once and
//! run against SQLite and PostgreSQL (`<module>::sqlite::*`, `<module>::postgres::*`); `harness`
//! gives each test a fresh store.

// A test reads as one scenario; short functions (docs/dev/style.md) are for the crates' code.
#![allow(clippy::too_many_lines)]

mod audit; // the audit trail (issue 38)
mod contract;
mod engine;
mod events; // the event backlog (issue 38)
mod harness;
mod hostpool;
mod open;
mod tenants; // checked tenant writes (issue 40)
