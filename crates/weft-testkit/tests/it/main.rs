//! weft-testkit's integration tests: the throwaway PostgreSQL server, for real.

mod postgres;
