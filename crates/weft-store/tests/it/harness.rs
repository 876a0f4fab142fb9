//! A fresh store per test, and the macro that instantiates each contract test once per backend.
//!
//! PostgreSQL tests use [`weft_testkit::TempPostgres`]: without PostgreSQL they are skipped with a
//! message, except in CI (`CI=true`) where they fail.

use std::sync::Arc;

use weft_store::Store;
use weft_testkit::TempPostgres;

/// What a contract test gets: the store, the URL it was opened with (to open it again), and
/// whatever keeps the database alive.
pub(crate) struct Ctx {
    pub store: Arc<dyn Store>,
    pub url: String,
    _guard: Guard,
}

enum Guard {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] TempPostgres),
}

/// A store on a new SQLite file in a temp dir.
pub(crate) async fn sqlite() -> Ctx {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = weft_testkit::temp_sqlite_url(&dir);
    let store = weft_store::open(&url).await.expect("open sqlite store");
    Ctx {
        store,
        url,
        _guard: Guard::Sqlite(dir),
    }
}

/// A store on a new PostgreSQL database, or `None` (skip) when PostgreSQL is not available here.
pub(crate) async fn postgres() -> Option<Ctx> {
    if !weft_testkit::require("postgres") {
        return None;
    }
    let pg = TempPostgres::start().await.expect("start postgres");
    let url = pg.url();
    let store = weft_store::open(&url).await.expect("open postgres store");
    Some(Ctx {
        store,
        url,
        _guard: Guard::Postgres(pg),
    })
}

/// Instantiates each named `async fn(&Ctx) -> anyhow::Result<()>` of the calling module as a test
/// in `sqlite` and in `postgres`.
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    let ctx = crate::harness::sqlite().await;
                    super::$name(&ctx).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    let Some(ctx) = crate::harness::postgres().await else { return Ok(()) };
                    super::$name(&ctx).await
                }
            )*
        }
    };
}
pub(crate) use contract_tests;
