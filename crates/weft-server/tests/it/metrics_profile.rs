//! `/v2/metrics/*` (§4.9) and `/v2/profile` (§4.10).

use serde_json::json;

use crate::common::{admin, user, Harness, SA};

#[tokio::test]
async fn queue_metrics_by_role() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.tenant("beta").await;
    let zero = json!({"queued": 0, "inProgress": 0, "total": 0});
    let all = h.get(SA, "/v2/metrics/queues").await.expect(200).json();
    assert_eq!(all, json!({"acme": zero, "beta": zero, "superadmin": zero}));
    let own = h
        .get(admin("acme"), "/v2/metrics/queues")
        .await
        .expect(200)
        .json();
    assert_eq!(own, json!({"acme": zero}));
    h.get(user("bob", "acme"), "/v2/metrics/queues")
        .await
        .expect(403);
    h.get(user("bob", "superadmin"), "/v2/metrics/queues")
        .await
        .expect(403);
}

#[tokio::test]
async fn node_usage_checks_parameters() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.tenant("beta").await;
    let acme_id = h.tenant_id("acme").await;
    let beta_id = h.tenant_id("beta").await;
    let u = user("bob", "acme");
    let r = h
        .get(
            u,
            "/v2/metrics/nodes/usage?start=100&end=200&groupby=day&timeunit=HOURS",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(r, json!({"start": 100, "end": 200, "data": []}));
    let r = h.get(u, "/v2/metrics/nodes/usage").await.expect(200).json();
    assert!(r["end"].as_i64().unwrap() > 1_600_000_000, "{r}");
    h.get(u, &format!("/v2/metrics/nodes/usage?tenant={acme_id}"))
        .await
        .expect(200);
    h.get(u, &format!("/v2/metrics/nodes/usage?tenant={beta_id}"))
        .await
        .expect(405);
    h.get(
        admin("acme"),
        &format!("/v2/metrics/nodes/usage?tenant={beta_id}"),
    )
    .await
    .expect(405);
    h.get(SA, &format!("/v2/metrics/nodes/usage?tenant={beta_id}"))
        .await
        .expect(200);
    for q in [
        "start=abc",
        "end=-5",
        "start=300&end=200",
        "groupby=Day",
        "groupby=fortnight",
        "timeunit=parsecs",
    ] {
        let r = h.get(u, &format!("/v2/metrics/nodes/usage?{q}")).await;
        assert_eq!(r.status.as_u16(), 400, "{q}: {}", r.text());
    }
}

#[tokio::test]
async fn profile_is_per_user_and_tenant() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let (bob, alice) = (user("bob", "acme"), user("alice", "acme"));
    h.get(bob, "/v2/profile").await.expect(404);
    h.put(bob, "/v2/profile", "{'theme':'dark','size':3}")
        .await
        .expect_text(200, "");
    assert_eq!(
        h.get(bob, "/v2/profile").await.expect(200).json(),
        json!({"theme": "dark", "size": 3})
    );
    h.get(alice, "/v2/profile").await.expect(404);
    h.get(user("bob", "superadmin"), "/v2/profile")
        .await
        .expect(404);
    h.put(bob, "/v2/profile", "{broken").await.expect(400);
    h.put(bob, "/v2/profile", "[1]").await.expect(400);
    h.put(bob, "/v2/profile", "").await.expect(400);
    assert_eq!(
        h.get(bob, "/v2/profile").await.expect(200).json()["theme"],
        "dark"
    );
    h.put(bob, "/v2/profile", r#"{"theme":"light"}"#)
        .await
        .expect(200);
    assert_eq!(
        h.get(bob, "/v2/profile").await.expect(200).json(),
        json!({"theme": "light"})
    );
    h.delete(bob, "/v2/profile").await.expect_text(200, "");
    h.get(bob, "/v2/profile").await.expect(404);
    h.delete(bob, "/v2/profile").await.expect(200);
}
