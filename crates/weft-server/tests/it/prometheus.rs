//! `GET /metrics` (Prometheus text): queue depth per tenant, tasks in flight, task durations, job
//! outcomes and live provisioners, before, during and after a small job.

use axum::body::Body;
use axum::http::Method;
use serde_json::{json, Value};

use crate::common::{admin, Harness};

const T: &str = "acme";

async fn setup(h: &Harness) -> String {
    h.tenant(T).await;
    h.provisioner("p1", 10).await;
    h.workers(T, 1).await;
    let local = json!({"name": "local"});
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/local",
        local.to_string(),
    )
    .await
    .expect(200);
    let shell = json!({"name": "shell"});
    h.internal(
        Method::PUT,
        "/v2/plugins/automatortypes/shell",
        shell.to_string(),
    )
    .await
    .expect(200);
    let posts = [
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "host", "providermap": {"local": {"image": "img", "sshuser": "weft"}}}),
        ),
        (
            "services",
            json!({"name": "a", "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": "i.sh"}}}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["a"], "provider": "local"},
                   "constraints": {"size": {"min": 1, "max": 10}}}),
        ),
    ];
    for (kind, body) in posts {
        h.post(admin(T), &format!("/v2/{kind}"), body.to_string())
            .await
            .expect(200);
    }
    h.tenant_id(T).await
}

async fn scrape(h: &Harness) -> String {
    let r = h
        .call(None, Method::GET, "/metrics", Body::empty())
        .await
        .expect(200);
    assert!(
        r.content_type().starts_with("text/plain; version=0.0.4"),
        "{}",
        r.content_type()
    );
    r.text()
}

/// The value of the series written exactly as `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn take(h: &Harness, tid: &str) -> Option<Value> {
    let body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid});
    let r = h
        .internal(Method::POST, "/v2/tasks/take", body.to_string())
        .await;
    match r.status.as_u16() {
        204 => None,
        200 => Some(r.json()),
        other => panic!("take answered {other}: {}", r.text()),
    }
}

async fn finish(h: &Harness, tid: &str, task: &Value) {
    let mut body = json!({"workerId": "w1", "provisionerId": "p1", "tenantId": tid,
        "taskId": task["taskId"], "status": 0});
    if task["taskName"] == "CONFIRM" {
        body["ipaddresses"] = json!({"access_v4": "10.0.0.1"});
    }
    h.internal(Method::POST, "/v2/tasks/finish", body.to_string())
        .await
        .expect(200);
}

#[tokio::test]
async fn metrics_follow_a_job() {
    let h = Harness::new().await;
    let tid = setup(&h).await;

    let idle = scrape(&h).await;
    assert_eq!(value(&idle, "weft_tasks_in_flight"), Some(0.0), "{idle}");
    assert_eq!(value(&idle, "weft_provisioners_alive"), Some(1.0), "{idle}");
    assert!(idle.contains("# TYPE weft_task_duration_seconds histogram"));
    assert!(idle.contains("# TYPE weft_jobs_total counter"));

    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": 2});
    h.post(admin(T), "/v2/clusters", body.to_string())
        .await
        .expect(200);
    // Both nodes' CREATE tasks are queued.
    let queued = scrape(&h).await;
    assert_eq!(
        value(&queued, r#"weft_queue_tasks{tenant="acme",state="queued"}"#),
        Some(2.0),
        "{queued}"
    );
    assert_eq!(
        value(
            &queued,
            r#"weft_queue_tasks{tenant="acme",state="in_progress"}"#
        ),
        Some(0.0)
    );

    let first = take(&h, &tid).await.expect("a task");
    let running = scrape(&h).await;
    assert_eq!(
        value(&running, "weft_tasks_in_flight"),
        Some(1.0),
        "{running}"
    );
    assert_eq!(
        value(
            &running,
            r#"weft_queue_tasks{tenant="acme",state="queued"}"#
        ),
        Some(1.0)
    );
    finish(&h, &tid, &first).await;

    let mut n = 1;
    while let Some(t) = take(&h, &tid).await {
        finish(&h, &tid, &t).await;
        n += 1;
        assert!(n < 100, "the job does not end");
    }
    let done = scrape(&h).await;
    assert_eq!(value(&done, "weft_tasks_in_flight"), Some(0.0), "{done}");
    assert!(
        !done.contains(r#"tenant="acme""#),
        "an empty queue has no series: {done}"
    );
    assert_eq!(
        value(
            &done,
            r#"weft_jobs_total{action="CLUSTER_CREATE",result="success"}"#
        ),
        Some(1.0),
        "{done}"
    );
    // Every finished task was observed once, under its action.
    for action in ["CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL"] {
        let c = value(
            &done,
            &format!(r#"weft_task_duration_seconds_count{{action="{action}"}}"#),
        )
        .unwrap_or_else(|| panic!("no {action} durations: {done}"));
        assert!(c >= 2.0, "{action}: {c}");
        let inf = value(
            &done,
            &format!(r#"weft_task_duration_seconds_bucket{{action="{action}",le="+Inf"}}"#),
        );
        assert_eq!(inf, Some(c));
        let sum = value(
            &done,
            &format!(r#"weft_task_duration_seconds_sum{{action="{action}"}}"#),
        )
        .unwrap();
        // Instant in-process tasks: well under the timeout, never negative.
        assert!((0.0..60.0).contains(&sum), "{action} sum {sum}");
    }
    let total: f64 = done
        .lines()
        .filter(|l| l.starts_with("weft_task_duration_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, n as f64, "{done}");
}
