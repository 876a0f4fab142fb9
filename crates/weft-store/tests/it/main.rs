//! weft-store's one integration-test binary.
//!
//! `contract` holds the store contract suite, written once and run against SQLite and PostgreSQL
//! (`contract::sqlite::*`, `contract::postgres::*`); `harness` gives each test a fresh store.

mod contract;
mod harness;
mod open;
