//! Fatal means once (issue 35), through a real server and provisioner on loopback: a CREATE
//! with a wrong AWS secret against moto runs once and its job fails within seconds (its clean-up
//! DELETE runs and is shown as clean-up); an endpoint whose host does not resolve (`.invalid`,
//! RFC 2606) fails once with the host named; a shell action naming a missing script runs once;
//! a script that fails once is still retried and the cluster becomes active.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use weft_model::FailureReason;
use weft_provisioner::cloud::CloudError;
use weft_provisioner::local::LocalProvider;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::{Agent, Plugins};

use crate::aws::{moto, provider as aws_provider};
use crate::common::{scripts_dir, until, Server};

const T: &str = "fatal";

/// A server and a provisioner with the aws and local providers and the shell automator, the
/// tenant given 4 workers on it.
async fn start() -> (Server, Agent) {
    let (s, tenant_id) = Server::start(T).await;
    let plugins = Plugins::new()
        .provider(Arc::new(aws_provider()))
        .provider(Arc::new(LocalProvider::new(&s.provisioner_data())))
        .automator(Arc::new(
            ShellAutomator::new(vec![scripts_dir()])
                .with_resources(s.provisioner_data().join("resources")),
        ));
    let agent = Agent::start(s.config("p-fatal"), plugins)
        .await
        .expect("agent starts");
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    (s, agent)
}

async fn put(s: &Server, path: &str, body: Value) {
    let (code, answer) = s.ext(Method::PUT, T, path, Some(body)).await;
    assert!(code == 200 || code == 201, "PUT {path}: {code} {answer}");
}

/// A one-node template `name` on `provider` with `services` (each placed once).
async fn template(s: &Server, name: &str, provider: &str, image: &str, services: &[&str]) {
    put(
        s,
        &format!("/v2/clustertemplates/{name}"),
        json!({"name": name,
               "compatibility": {"hardwaretypes": ["small"], "imagetypes": [image],
                                 "services": services},
               "defaults": {"services": services, "provider": provider,
                            "hardwaretype": "small", "imagetype": image, "dnsSuffix": "local"},
               "constraints": {"size": {"min": 1, "max": 1}}}),
    )
    .await;
}

/// A service whose install runs `script` (a file name, or a script's text).
async fn service(s: &Server, name: &str, script: &str) {
    put(
        s,
        &format!("/v2/services/{name}"),
        json!({"name": name, "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": script}}}}}),
    )
    .await;
}

async fn create(s: &Server, template: &str) -> (String, Instant) {
    let started = Instant::now();
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": template, "clusterTemplate": template, "numMachines": 1})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    (c["id"].as_str().unwrap().to_string(), started)
}

async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

/// Waits for the cluster's latest job to fail; answers how long it took from `started`, then
/// waits for the cluster to settle (its clean-up done) and answers it.
async fn failed_job(s: &Server, id: &str, started: Instant) -> (Duration, Value) {
    let took = until(Duration::from_secs(60), "the job to fail", || async {
        let c = cluster(s, id).await;
        match c["progress"]["actionstatus"].as_str() {
            Some("failed") => Some(started.elapsed()),
            Some("complete") => panic!("the job succeeded: {c}"),
            _ => None,
        }
    })
    .await;
    let c = until(Duration::from_secs(60), "the cluster to settle", || async {
        let c = cluster(s, id).await;
        (c["status"] != "pending").then_some(c)
    })
    .await;
    (took, c)
}

/// The node's action entries for `action`.
pub(crate) fn entries<'a>(c: &'a Value, action: &str) -> Vec<&'a Value> {
    c["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["actions"].as_array().into_iter().flatten())
        .filter(|a| a["action"] == action)
        .collect()
}

#[tokio::test]
async fn a_wrong_aws_secret_fails_the_create_once_within_seconds() {
    let Some(m) = moto().await else { return };
    let (s, _agent) = start().await;
    let mut fields = m.fields(&m.endpoint);
    fields.insert("secret_access_key".into(), json!("not-the-secret"));
    put(
        &s,
        "/v2/providers/aws",
        json!({"name": "aws", "providertype": "aws", "provisioner": fields}),
    )
    .await;
    service(&s, "noop", "true\n").await;
    template(&s, "one-aws", "aws", "bookworm", &["noop"]).await;
    let (id, started) = create(&s, "one-aws").await;
    let (took, c) = failed_job(&s, &id, started).await;
    eprintln!("wrong AWS secret: POST to failed job in {took:?}");

    let creates = entries(&c, "CREATE");
    assert_eq!(creates.len(), 1, "the CREATE ran once: {c}");
    assert_eq!(
        creates[0]["failure"],
        json!({"retryable": false, "reason": "auth"})
    );
    let deletes = entries(&c, "DELETE");
    assert_eq!(deletes.len(), 1, "one clean-up DELETE: {c}");
    assert_eq!(deletes[0]["cleanup"], true, "{c}");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with("CREATE on "), "{msg}");
    assert!(msg.contains("AuthFailure"), "{msg}");
    assert!(msg.contains("; not retried: auth"), "{msg}");
    assert!(!msg.contains("not-the-secret"), "{msg}");
    assert_eq!(c["status"], "incomplete", "{c}");
    let node = c["nodes"][0]["id"].as_str().unwrap();
    assert!(
        m.instances_of(node).await.is_empty(),
        "no instance was made"
    );
}

#[tokio::test]
async fn an_endpoint_that_does_not_resolve_fails_once_and_is_named() {
    let (s, _agent) = start().await;
    // RFC 2606: `.invalid` never resolves.
    put(
        &s,
        "/v2/providers/aws",
        json!({"name": "aws", "providertype": "aws", "provisioner": {
            "region": "eu-west-1", "access_key_id": "AKIDEXAMPLE", "secret_access_key": "s",
            "endpoint": "https://ec2.eu-wset-1.amazonaws.invalid/", "instance_type": "t3.micro",
            "ami": "ami-12345678"}}),
    )
    .await;
    service(&s, "noop", "true\n").await;
    template(&s, "one-dns", "aws", "bookworm", &["noop"]).await;
    let (id, started) = create(&s, "one-dns").await;
    let (took, c) = failed_job(&s, &id, started).await;
    eprintln!("endpoint that does not resolve: POST to failed job in {took:?}");
    let creates = entries(&c, "CREATE");
    assert_eq!(creates.len(), 1, "the CREATE ran once: {c}");
    assert_eq!(creates[0]["failure"]["reason"], "invalid", "{c}");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(
            "ec2.eu-wset-1.amazonaws.invalid does not resolve: check the provider's region"
        ),
        "{msg}"
    );
    assert!(msg.ends_with("; not retried: invalid"), "{msg}");
}

#[tokio::test]
async fn a_refused_connection_stays_retryable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap_err();
    let c = CloudError::sending("ec2", "DescribeInstances", &e);
    assert!(c.retryable, "{c}");
    assert_eq!(c.reason, FailureReason::Network);
    assert!(c.message.starts_with("DescribeInstances: "), "{c}");
    assert!(
        c.message.contains("Connection refused"),
        "the cause is named: {c}"
    );
}

#[tokio::test]
async fn a_missing_script_runs_once() {
    let (s, _agent) = start().await;
    service(&s, "ghost", "no-such-script.sh").await;
    template(&s, "one-ghost", "local", "host", &["ghost"]).await;
    let (id, started) = create(&s, "one-ghost").await;
    let (took, c) = failed_job(&s, &id, started).await;
    eprintln!("missing script: POST to failed job in {took:?}");
    let installs = entries(&c, "INSTALL");
    assert_eq!(installs.len(), 1, "the INSTALL ran once: {c}");
    assert_eq!(
        installs[0]["failure"],
        json!({"retryable": false, "reason": "not_found"})
    );
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with("INSTALL of ghost on "), "{msg}");
    assert!(
        msg.contains("script no-such-script.sh is in none of the script directories"),
        "{msg}"
    );
    assert!(msg.ends_with("; not retried: not_found"), "{msg}");
    assert!(
        entries(&c, "DELETE").is_empty(),
        "only a CREATE gets a clean-up: {c}"
    );
}

#[tokio::test]
async fn a_script_that_fails_once_is_retried_and_succeeds() {
    let (s, _agent) = start().await;
    let marker = s.dir.path().join("flaky-ran-once");
    let script = format!(
        "#!/bin/sh\nif [ -e '{m}' ]; then exit 0; fi\ntouch '{m}'\necho 'first try fails' >&2\nexit 1\n",
        m = marker.display()
    );
    service(&s, "flaky", &script).await;
    template(&s, "one-flaky", "local", "host", &["flaky"]).await;
    let (id, _) = create(&s, "one-flaky").await;
    let c = until(
        Duration::from_secs(120),
        "the cluster to be active",
        || async {
            let c = cluster(&s, &id).await;
            match c["status"].as_str() {
                Some("active") => Some(c),
                Some("pending") => None,
                _ => panic!("the cluster did not become active: {c}"),
            }
        },
    )
    .await;
    let installs = entries(&c, "INSTALL");
    assert_eq!(installs.len(), 2, "failed once, then passed: {c}");
    assert_eq!(installs[0]["status"], "failed");
    assert_eq!(
        installs[0]["failure"],
        json!({"retryable": true, "reason": "crash"})
    );
    assert_eq!(installs[1]["status"], "complete");
    // Delete it, so that no process is left behind.
    let (code, _) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200);
    until(
        Duration::from_secs(60),
        "the cluster to be deleted",
        || async { (cluster(&s, &id).await["status"] == "terminated").then_some(()) },
    )
    .await;
}
