//! The subcommands of the `weft` binary, one module each.

pub mod plan;
pub mod solve;
