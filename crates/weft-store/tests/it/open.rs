//! Opening stores: URLs, and SQLite specifics (WAL mode, writers in separate handles).

use serde_json::json;
use weft_model::EntityKind;
use weft_store::{Store, StoreError};

#[tokio::test]
async fn unsupported_urls_are_refused() {
    for url in [
        "mysql://u@h/db",
        "/var/lib/weft.db",
        "",
        "http://localhost/",
        // A store in memory would forget every cluster, and leave its machines behind, on exit.
        "sqlite::memory:",
        "sqlite://:memory:",
        "sqlite://weft.db?mode=memory",
    ] {
        match weft_store::open(url).await {
            Err(StoreError::BadUrl(u)) => assert_eq!(u, url),
            Err(e) => panic!("{url:?}: expected BadUrl, got {e}"),
            Ok(_) => panic!("{url:?}: expected BadUrl, got a store"),
        }
    }
}

#[tokio::test]
async fn a_missing_sqlite_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let url = weft_testkit::temp_sqlite_url(&dir);
    assert!(!dir.path().join("weft.db").exists());
    let store = weft_store::open(&url).await.unwrap();
    assert!(dir.path().join("weft.db").exists());
    assert_eq!(store.backend(), weft_store::Backend::Sqlite);
}

#[tokio::test]
async fn sqlite_runs_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = weft_store::open(&weft_testkit::temp_sqlite_url(&dir))
        .await
        .unwrap();
    store
        .put_entity("t", EntityKind::Service, "s", &json!({}))
        .await
        .unwrap();
    assert!(
        dir.path().join("weft.db-wal").exists(),
        "a write-ahead log next to the database"
    );
}

/// Two handles on one file stand for two processes: their writers take the write lock with
/// `BEGIN IMMEDIATE` and wait on the busy timeout instead of failing with SQLITE_BUSY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writers_in_two_handles_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let url = weft_testkit::temp_sqlite_url(&dir);
    let (a, b) = tokio::join!(weft_store::open(&url), weft_store::open(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    let write = |s: std::sync::Arc<dyn Store>| {
        tokio::spawn(async move {
            let mut versions = Vec::new();
            for _ in 0..20 {
                versions.push(
                    s.put_entity("t", EntityKind::Service, "s", &json!({}))
                        .await
                        .unwrap(),
                );
            }
            versions
        })
    };
    let (va, vb) = (write(a.clone()), write(b.clone()));
    let mut all: Vec<u64> = va
        .await
        .unwrap()
        .into_iter()
        .chain(vb.await.unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (1..=40).collect::<Vec<u64>>());
    assert_eq!(
        a.applied_migrations().await.unwrap().len(),
        weft_store::MIGRATIONS.len()
    );
}
