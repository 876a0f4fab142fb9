//! Integration tests of weft-solver, one binary: worked examples and no-layout explanations as
//! snapshots, agreement with a naive reference on random templates, changes, and bad input.

mod agreement;
mod changes;
mod common;
mod errors;
mod examples;
