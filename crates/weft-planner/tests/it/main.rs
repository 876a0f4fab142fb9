//! Integration tests of weft-planner: snapshots of every operation, dependency rules, macros, and
//! a property test against Coopr's stage-by-stage execution.

mod fixtures;
mod macros;
mod property;
mod repair;
mod rollouts;
mod rules;
mod snapshots;
