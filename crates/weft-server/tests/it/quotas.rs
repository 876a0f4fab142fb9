//! Quotas hold under concurrency (issue 14): 200 concurrent creates, spread over two servers on
//! one database, in a tenant with `maxClusters` 50 leave exactly 50 clusters; the others get a
//! 409 naming the quota. The count is checked in the create's own commit (`Expect::Quota`), on
//! SQLite and on PostgreSQL. Budgets hold the same way (issue 43): with clusters priced at 0.25
//! per hour and `maxCostPerHour` 12.50, 200 concurrent creates leave exactly 50.

use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinSet;

use crate::clusters::{setup, T};
use crate::common::{admin, Harness, SA};

const CREATES: usize = 200;
const MAX_CLUSTERS: u64 = 50;

/// Which limit stops the creates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// `maxClusters` 50.
    Clusters,
    /// `maxCostPerHour` 12.50, each cluster 0.25 per hour.
    Budget,
}

async fn creates_stop_at_the_quota(url: &str, limit: Limit) {
    let one = Arc::new(Harness::over(url).await);
    let two = Arc::new(Harness::over(url).await);
    setup(&one).await;
    let (quota, names) = match limit {
        Limit::Clusters => (
            json!({"tenant": {"name": T, "workers": 0, "maxClusters": MAX_CLUSTERS}}),
            "maxClusters",
        ),
        Limit::Budget => {
            crate::clusters::price_small_machines(&one).await;
            (
                json!({"tenant": {"name": T, "workers": 0, "maxCostPerHour": "12.50"}}),
                "maxCostPerHour (12.50)",
            )
        }
    };
    one.put(SA, &format!("/v2/tenants/{T}"), quota.to_string())
        .await
        .expect(200);

    let mut creates = JoinSet::new();
    for i in 0..CREATES {
        let h = Arc::clone(if i % 2 == 0 { &one } else { &two });
        creates.spawn(async move {
            let body = json!({"name": format!("c{i}"), "clusterTemplate": "t",
                "numMachines": 1, "providerFields": {"token": "x"}});
            let r = h.post(admin(T), "/v2/clusters", body.to_string()).await;
            (r.status.as_u16(), r.text())
        });
    }
    let (mut accepted, mut refused) = (0, 0);
    while let Some(done) = creates.join_next().await {
        let (status, text) = done.expect("create task");
        match status {
            200 => accepted += 1,
            409 => {
                assert!(text.contains(names), "{text}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {text}"),
        }
    }
    assert_eq!(
        (accepted, refused),
        (MAX_CLUSTERS, CREATES as u64 - MAX_CLUSTERS)
    );
    let tenant = one.tenant_id(T).await;
    let (clusters, _) = one.app.state.store.count_clusters(&tenant).await.unwrap();
    assert_eq!(clusters, MAX_CLUSTERS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_on_one_sqlite_file_stop_at_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    creates_stop_at_the_quota(&weft_testkit::temp_sqlite_url(&dir), Limit::Clusters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_on_one_postgres_database_stop_at_the_quota() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.unwrap();
    creates_stop_at_the_quota(&pg.url(), Limit::Clusters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_on_one_sqlite_file_stop_at_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    creates_stop_at_the_quota(&weft_testkit::temp_sqlite_url(&dir), Limit::Budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_on_one_postgres_database_stop_at_the_budget() {
    if !weft_testkit::require("postgres") {
        return;
    }
    let pg = weft_testkit::TempPostgres::start().await.unwrap();
    creates_stop_at_the_quota(&pg.url(), Limit::Budget).await;
}
