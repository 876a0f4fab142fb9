//! weft-planner: turns a cluster operation into a DAG of node tasks, and expands macros.
//!
//! Pure and deterministic: no IO, no clock, no randomness; the same input gives the same plan.
//!
//! - [`plan`] takes an [`Operation`] and a [`PlanInput`] (old and new layout, service definitions,
//!   cluster config) and returns a [`Plan`]: tasks (node, action, service), gates and edges.
//! - The engine releases a task when all its predecessors are done ([`Tracker`], or the stateless
//!   [`Plan::ready`]). Each node's tasks are chained in the DAG itself, so at most one task per node is
//!   ever ready, without any global stage barrier.
//! - [`Plan::stages`] / [`Plan::stage_view`] give Coopr's plan format for the plans API.
//! - [`MacroContext`] expands `%...%` macros in strings and JSON values against a layout.
//!
//! Modules: `ops` (operations and their programs), `deps` (service dependency rules), `dag` (the
//! plan graph, ordering, stages, readiness), `macros`, `render` (text and JSON), `layout` (input
//! nodes), `rollout` (batches and health gates of rolling changes), `repair` (drift checks and node
//! replacement), `error`.
#![warn(missing_docs)]

mod dag;
mod deps;
mod error;
mod layout;
pub mod macros;
mod membership;
mod ops;
mod render;
mod repair;
mod rollout;

pub use dag::{Edge, EdgeKind, Plan, PlannedTask, Tracker, Vertex};
pub use error::PlanError;
pub use layout::{PlanNode, DEFAULT_IP_TYPE};
pub use macros::MacroContext;
pub use ops::{plan, Operation, PlanInput};
pub use rollout::RolloutPlan;
