//! weft-solver: decides which services go on which nodes. Pure and deterministic: no IO, no clock,
//! no randomness; the same input always gives the same layout.
//!
//! # Entry points
//!
//! - [`create`]: lay out a new cluster of `size` nodes.
//! - [`change`]: change an existing cluster ([`Change`]: add services, remove a service, expand,
//!   shrink, move to a new template version). Existing nodes keep their hardware, image and id;
//!   services that are not part of the change never move.
//!
//! The caller says what the provider offers with [`TypeOffer`] (build it from the tenant's machine
//! types with [`TypeOffer::hardware_for`] / [`TypeOffer::images_for`], which keep the types with a
//! `flavor` / `image` for the provider, or from plain names). The order of the offered names is the
//! hardware (image) preference: the first adequate one is used, so pass them smallest first.
//!
//! # Semantics (Coopr's solver, with its known faults fixed)
//!
//! - A node holds at least one service. A can't-coexist set forbids all of its members together on
//!   one node (pairs of it are fine); it only applies when all its members are on the cluster.
//!   Must-coexist sets, shrunk to the cluster's services, hold in both directions and transitively.
//! - A service constraint limits the hardware and image types of every node holding the service,
//!   and the number of nodes holding it (`min`..`max`). Every requested service lands on at least one
//!   node unless its `max` is 0. The template's compatibility lists limit every node's types.
//! - *Unconstrained* services (no type limits, no max below the cluster size, in no layout rule) go
//!   on every node, as in Coopr (`hosts`, `firewall`); a node holding only those is valid.
//! - Complete: if a layout exists, one is returned (the search is exhaustive, with pruning that
//!   never loses a solution; a step budget of [`STEP_LIMIT`] guards against pathological templates
//!   and yields [`SolveError::SearchLimit`], never a wrong "no layout").
//!
//! # Which layout, among valid ones
//!
//! Services that must coexist move together as one group. Groups are placed one at a time, the
//! most constrained first (smallest max, then largest min, then name). For each group the solver
//! prefers, in this order:
//! 1. as many nodes as the group may have (Coopr's "richest layout first");
//! 2. for a group that cannot hinder any later group (no rule or type limit involving them), nodes
//!    that have no service yet, so services spread over the cluster instead of piling up;
//! 3. otherwise nodes that already hold more constrained services, earlier shapes first, which keeps
//!    the number of distinct node shapes low (masters share a node unless a rule forbids it).
//!
//! A node's hardware (image) is the first offered type that every service on it allows. Output
//! nodes are existing nodes in the order given, then new nodes sorted by (hardware, image,
//! services); service names are sorted.
//!
//! # Explanations
//!
//! When no layout exists the error ([`SolveError::NoLayout`]) names an irreducible set of template
//! constraints in conflict (dropping any one of them makes the request solvable), e.g.
//! "cannot lay out 60 nodes: datanode is limited to 50 nodes; zookeeper is limited to 5 nodes; ...".
#![warn(missing_docs)]

mod change;
mod error;
mod explain;
mod input;
mod layout;
mod model;
mod search;

pub use change::{change, create};
pub use error::SolveError;
pub use input::{Catalog, Change, ExistingNode, TypeOffer};
pub use layout::{Layout, LayoutNode, NodeGroup};
pub use search::STEP_LIMIT;
