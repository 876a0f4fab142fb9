//! Provisioners (§4.11): register (400 cases), heartbeat, unregister, the superadmin's listing with
//! tenant names and free capacity, and worker assignment.

use axum::http::Method;
use serde_json::json;

use crate::common::{admin, user, Harness, SA};

#[tokio::test]
async fn register_validates_its_body() {
    let h = Harness::new().await;
    let hh = &h;
    let put =
        |body: String| async move { hh.internal(Method::PUT, "/v2/provisioners/p1", body).await };
    let ok = json!({"id": "p1", "host": "h", "port": 58025, "capacityTotal": 4});
    for (field, value) in [
        ("id", json!("p2")),
        ("host", json!("")),
        ("port", json!(0)),
        ("port", json!(70000)),
        ("capacityTotal", json!(0)),
        ("capacityTotal", json!(-3)),
        ("capacityTotal", json!("x")),
    ] {
        let mut body = ok.clone();
        body[field] = value.clone();
        let r = put(body.to_string()).await;
        assert_eq!(r.status.as_u16(), 400, "{field}={value}: {}", r.text());
    }
    for missing in ["host", "port", "capacityTotal"] {
        let mut body = ok.clone();
        body.as_object_mut().unwrap().remove(missing);
        let r = put(body.to_string()).await.expect(400);
        assert!(r.text().contains(missing), "{}", r.text());
    }
    put("not json".into()).await.expect(400);
    put(String::new()).await.expect(400);
    assert!(h
        .app
        .state
        .store
        .list_provisioners()
        .await
        .unwrap()
        .is_empty());
    // Lenient numbers, and a body without id.
    put(r#"{'host':'h','port':'58025','capacityTotal':'4'}"#.into())
        .await
        .expect_text(200, "");
    assert_eq!(
        h.app
            .state
            .store
            .get_provisioner("p1")
            .await
            .unwrap()
            .unwrap()
            .capacity_total,
        4
    );
}

#[tokio::test]
async fn listing_shows_tenant_names_and_free_capacity() {
    let h = Harness::new().await;
    h.provisioner("p1", 10).await;
    let body = json!({"tenant": {"name": "acme", "workers": 3}});
    h.post(SA, "/v2/tenants", body.to_string())
        .await
        .expect(200);
    let id = h.tenant_id("acme").await;
    let hb = json!({"usage": {id.clone(): 2}});
    h.internal(
        Method::POST,
        "/v2/provisioners/p1/heartbeat",
        hb.to_string(),
    )
    .await
    .expect_text(200, "");
    let list = h.get(SA, "/v2/provisioners").await.expect(200).json();
    assert_eq!(
        list,
        json!([{"id": "p1", "host": "127.0.0.1", "port": 58025, "capacityTotal": 10,
                             "assignments": {"acme": 3}, "usage": {"acme": 2}, "capacityFree": 7,
                "scheme": "http"}])
    );
    let one = h.get(SA, "/v2/provisioners/p1").await.expect(200).json();
    assert_eq!(one, list[0]);
    h.get(SA, "/v2/provisioners/nope")
        .await
        .expect_text(404, "Provisioner nope not found.");
    for who in [admin("acme"), user("bob", "superadmin")] {
        assert!(h
            .get(who, "/v2/provisioners")
            .await
            .expect(403)
            .body
            .is_empty());
        assert!(h
            .get(who, "/v2/provisioners/p1")
            .await
            .expect(403)
            .body
            .is_empty());
    }
    // Registering is internal only.
    let reg = json!({"host": "h", "port": 1, "capacityTotal": 1}).to_string();
    h.put(SA, "/v2/provisioners/p9", reg).await.expect(405);
}

#[tokio::test]
async fn workers_are_assigned_after_register_and_rebalanced_on_unregister() {
    let h = Harness::new().await;
    h.provisioner("p1", 2).await;
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "acme", "workers": 2}}).to_string(),
    )
    .await
    .expect(200);
    // A second provisioner arrives; a tenant that needs it can now be made.
    h.provisioner("p2", 3).await;
    h.post(
        SA,
        "/v2/tenants",
        json!({"tenant": {"name": "beta", "workers": 3}}).to_string(),
    )
    .await
    .expect(200);
    let list = h.get(SA, "/v2/provisioners").await.expect(200).json();
    let total = |t: &str| -> u64 {
        list.as_array()
            .unwrap()
            .iter()
            .map(|p| p["assignments"][t].as_u64().unwrap_or(0))
            .sum()
    };
    assert_eq!((total("acme"), total("beta")), (2, 3), "{list}");
    for p in list.as_array().unwrap() {
        assert_eq!(p["capacityFree"], 0, "{p}");
    }
    // Unregister (idempotent): workers that no longer fit are dropped from assignments.
    h.internal(Method::DELETE, "/v2/provisioners/p2", "")
        .await
        .expect(200);
    h.internal(Method::DELETE, "/v2/provisioners/p2", "")
        .await
        .expect(200);
    let list = h.get(SA, "/v2/provisioners").await.expect(200).json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let assigned: u64 = list[0]["assignments"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(assigned, 2, "{list}");
    // Heartbeat of an unknown provisioner is a 404 (it then registers again).
    h.internal(
        Method::POST,
        "/v2/provisioners/p2/heartbeat",
        r#"{"usage":{}}"#,
    )
    .await
    .expect(404);
    h.internal(
        Method::POST,
        "/v2/provisioners/p1/heartbeat",
        "{usage: 'x'}",
    )
    .await
    .expect(400);
}
