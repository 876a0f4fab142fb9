//! Integration tests of weft-planner: snapshots of every operation, dependency rules, macros, and
//! a property test against Coopr's stage-by-stage execution.

// A test reads as one scenario from start to end; the rule of short functions (docs/dev/style.md,
// checked with `-W clippy::too_many_lines`) is for the crates' code, not for their tests.
#![allow(clippy::too_many_lines)]

mod fixtures;
mod macros;
mod membership;
mod property;
mod repair;
mod rollouts;
mod rules;
mod snapshots;
