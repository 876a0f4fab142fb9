//! Integration tests of weft-solver, one binary: worked examples and no-layout explanations as
//! snapshots, agreement with a naive reference on random templates, changes, and bad input.

// A test reads as one scenario from start to end; the rule of short functions (docs/dev/style.md,
// checked with `-W clippy::too_many_lines`) is for the crates' code, not for their tests.
#![allow(clippy::too_many_lines)]

mod agreement;
mod changes;
mod common;
mod errors;
mod examples;
