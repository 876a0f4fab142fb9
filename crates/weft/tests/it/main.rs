//! End-to-end tests of the `weft` binary: real processes, real ports, a real SQLite file.

mod server;
mod support;
