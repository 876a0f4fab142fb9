//! The subcommands of the `weft` binary, one module each.

pub mod admin;
pub mod plan;
pub mod server;
pub mod solve;
