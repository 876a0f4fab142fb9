//! Tenants' webhooks (issue 38) against a real HTTP receiver (a small Python server this test
//! starts, `fixtures/webhook_receiver.py`) that verifies signatures and fails on purpose: every
//! event arrives, in order, signed; a receiver that is down for a while gets the backlog when it
//! comes back; redelivery; the delivery log; loopback URLs refused unless allowed; secrets never
//! answered; each tenant sees only its own webhooks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::clusters::{create, drain, setup, T};
use crate::common::{admin, user, Harness};

const SECRET: &str = "a-secret-of-some-length";

/// The receiver process, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn receiver(port: u16, fail_first: u32, out: &Path) -> Receiver {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/webhook_receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args([port.to_string(), SECRET.into(), fail_first.to_string()])
        .arg(out)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the receiver");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the receiver prints its port");
    Receiver {
        port: line.trim().parse().expect("a port"),
        child,
    }
}

/// What the receiver accepted, in order.
fn received(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The tenant's events after `after` of the kinds a webhook without filters delivers.
async fn backlog_after(h: &Harness, after: u64) -> Vec<u64> {
    let r = h
        .get(
            admin(T),
            &format!("/v2/events?format=ndjson&follow=false&since={after}"),
        )
        .await
        .expect(200);
    r.text()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// Waits until the receiver has accepted `n` deliveries.
async fn wait_for(out: &Path, n: usize, within: Duration) -> Vec<Value> {
    let t0 = Instant::now();
    loop {
        let got = received(out);
        if got.len() >= n {
            return got;
        }
        assert!(
            t0.elapsed() < within,
            "{} of {n} deliveries arrived",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn fast_server() -> Harness {
    Harness::with(|raw| {
        raw.webhooks_allow_loopback = Some(true);
        raw.webhook_retry_base_ms = Some(100);
    })
    .await
}

fn event_ids(got: &[Value]) -> Vec<u64> {
    got.iter()
        .map(|d| d["event"]["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_signed_in_order_through_failures_and_a_receiver_outage() {
    let h = fast_server().await;
    let tid = setup(&h).await;
    let pump = weft_engine::feed::spawn(h.app.state.engine.clone());
    let deliver = weft_engine::webhooks::spawn(h.app.state.engine.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("received.jsonl");
    let rx = receiver(0, 3, &out);
    let url = format!("http://127.0.0.1:{}/hook?token=t0ps3cret", rx.port);
    let created = h
        .post(
            admin(T),
            "/v2/webhooks",
            json!({"url": url, "secret": SECRET}).to_string(),
        )
        .await
        .expect(200)
        .json();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["secret"], SECRET);
    let start = created["cursor"].as_u64().unwrap();

    // A cluster's whole life: the first three attempts answer 500 and are retried.
    create(&h, admin(T), 2).await;
    drain(&h, &tid, |_| false).await;
    let want = backlog_after(&h, start).await;
    let got = wait_for(&out, want.len(), Duration::from_secs(60)).await;
    assert!(
        got.iter().all(|d| d["valid"] == true),
        "every signature verifies"
    );
    assert_eq!(event_ids(&got), want, "every event once, in order");
    let log = h
        .get(
            admin(T),
            &format!("/v2/webhooks/{id}/deliveries?limit=1000"),
        )
        .await
        .expect(200)
        .json();
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), want.len());
    assert!(log.iter().all(|d| d["status"] == "delivered"));
    let first = log.last().unwrap();
    assert_eq!(
        (first["attempts"].as_u64(), first["lastCode"].as_u64()),
        (Some(4), Some(200)),
        "{first}"
    );

    // The receiver goes away: deliveries wait and are retried; when it is back on its port it
    // gets the backlog, still in order.
    let port = rx.port;
    drop(rx);
    let before = got.len();
    create(&h, user("bob", T), 1).await;
    drain(&h, &tid, |_| false).await;
    let t0 = Instant::now();
    loop {
        let log = h
            .get(
                admin(T),
                &format!("/v2/webhooks/{id}/deliveries?limit=1000"),
            )
            .await
            .json();
        let retried = log.as_array().unwrap().iter().any(|d| {
            d["status"] == "pending"
                && d["attempts"].as_u64() >= Some(2)
                && d["lastError"].is_string()
        });
        if retried {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "a delivery to the absent receiver is retried: {log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _back = receiver(port, 0, &out);
    let want = backlog_after(&h, start).await;
    let got = wait_for(&out, want.len(), Duration::from_secs(60)).await;
    assert!(got.len() > before);
    assert_eq!(
        event_ids(&got),
        want,
        "the backlog after the outage, in order"
    );
    assert!(got.iter().all(|d| d["valid"] == true));

    // A redelivery sends one event again (beside the audit record of asking for it, which is
    // an event too).
    let one = want[0];
    h.post(
        admin(T),
        &format!("/v2/webhooks/{id}/deliveries/{one}/redeliver"),
        "",
    )
    .await
    .expect(200);
    let again = wait_for(&out, want.len() + 2, Duration::from_secs(30)).await;
    assert!(
        event_ids(&again)[want.len()..].contains(&one),
        "{:?}",
        event_ids(&again)
    );
    pump.abort();
    deliver.abort();
}

#[tokio::test]
async fn webhooks_are_checked_and_their_secrets_never_answered() {
    let h = Harness::new().await;
    h.tenant(T).await;
    h.tenant("other").await;
    let a = admin(T);
    // Loopback, link-local and names of this machine are refused (the server does not allow
    // them); so are bad schemes, credentials in the URL and short secrets.
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://localhost/hook",
        "ftp://hooks.example.com/",
        "https://user:pw@hooks.example.com/",
    ] {
        let r = h
            .post(a, "/v2/webhooks", json!({"url": url}).to_string())
            .await;
        assert_eq!(r.status.as_u16(), 400, "{url}: {}", r.text());
        assert!(r.text().starts_with("url:"), "{}", r.text());
    }
    let short = json!({"url": "https://hooks.example.com/x", "secret": "short"});
    assert!(h
        .post(a, "/v2/webhooks", short.to_string())
        .await
        .expect(400)
        .text()
        .contains("secret"));
    let bad_kind = json!({"url": "https://hooks.example.com/x", "kinds": ["bogus"]});
    h.post(a, "/v2/webhooks", bad_kind.to_string())
        .await
        .expect(400);
    for template in ["a b", ".hidden", "..", "<script>"] {
        let body = json!({"url": "https://hooks.example.com/x", "template": template});
        let r = h.post(a, "/v2/webhooks", body.to_string()).await;
        assert_eq!(r.status.as_u16(), 400, "{template}: {}", r.text());
        assert!(r.text().starts_with("template"), "{}", r.text());
    }
    // null is absent, as everywhere in the API.
    let nulls = json!({"url": "https://hooks.example.com/n", "kinds": null, "cluster": null,
        "template": null, "secret": null, "format": null, "enabled": null});
    let made = h
        .post(a, "/v2/webhooks", nulls.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(
        (&made["format"], &made["enabled"]),
        (&json!("json"), &json!(true))
    );
    h.delete(a, &format!("/v2/webhooks/{}", made["id"].as_str().unwrap()))
        .await
        .expect(200);

    let body = json!({"url": "https://hooks.example.com/services/T0/B0/XYZ", "kinds": ["cluster"], "format": "slack"});
    let made = h
        .post(a, "/v2/webhooks", body.to_string())
        .await
        .expect(200)
        .json();
    let id = made["id"].as_str().unwrap();
    let secret = made["secret"].as_str().unwrap().to_string();
    assert!(secret.len() >= 32, "a secret is made: {secret}");
    let listed = h.get(a, "/v2/webhooks").await.expect(200).text();
    assert!(
        !listed.contains(&secret) && !listed.contains("XYZ"),
        "{listed}"
    );
    assert!(listed.contains("https://hooks.example.com/…"), "{listed}");
    let shown = h
        .get(a, &format!("/v2/webhooks/{id}"))
        .await
        .expect(200)
        .json();
    assert_eq!(shown["format"], "slack");
    assert_eq!(shown["kinds"], json!(["cluster"]));
    // The store holds URL and secret sealed.
    let db = std::fs::read(h.data_dir().join("weft.db")).unwrap();
    let clear = |s: &str| db.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(
        !clear(&secret) && !clear("/services/T0/B0/XYZ"),
        "sealed at rest"
    );

    // Other tenants and plain users do not see it.
    h.get(admin("other"), &format!("/v2/webhooks/{id}"))
        .await
        .expect(404);
    assert_eq!(
        h.get(admin("other"), "/v2/webhooks").await.json(),
        json!([])
    );
    h.get(user("bob", T), "/v2/webhooks").await.expect(403);

    // An update keeps the secret unless a new one is given; delete removes it.
    let upd = json!({"url": "https://hooks.example.com/new", "enabled": false});
    let u = h
        .put(a, &format!("/v2/webhooks/{id}"), upd.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(u["enabled"], false);
    h.post(a, &format!("/v2/webhooks/{id}/deliveries/1/redeliver"), "")
        .await
        .expect(404);
    h.delete(a, &format!("/v2/webhooks/{id}")).await.expect(200);
    h.get(a, &format!("/v2/webhooks/{id}")).await.expect(404);
}
