//! The `aws` provider against moto's EC2 emulator (`moto_server`, from the venv `.ci/run` makes
//! in `~/.cache/weft/moto`, or `WEFT_MOTO_SERVER`), started per test on 127.0.0.1 with
//! `INITIAL_NO_AUTH_ACTION_COUNT` so that after the IAM set-up calls every request's SigV4
//! signature is checked, and with `MOTO_ENABLE_AMI_VALIDATION` so that, as on EC2, RunInstances
//! refuses an AMI id it does not know (the tests launch AMIs moto ships, found by DescribeImages). moto's addresses (10.x, 54.x) are invented and never dialled: only
//! CREATE, CONFIRM and DELETE run. moto answers `running` at once and ignores client tokens, so a
//! small proxy in front of it (served here, on loopback) stops an answer half-way, turns
//! `running` into `pending`, throttles, or answers a stale client token; one CREATE runs in a
//! child process of this test binary that is SIGKILLed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::contract;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;
use weft_provisioner::aws::client::{QueryClient, EC2_VERSION, IAM_VERSION};
use weft_provisioner::aws::ec2::{Ec2, Instance};
use weft_provisioner::aws::sigv4::Credentials;
use weft_provisioner::aws::Timing;
use weft_provisioner::aws::{AwsProvider, TAG_NODE};
use weft_provisioner::task::{Action, Task};
use weft_provisioner::Provider;

use crate::common::until;
use crate::faults::{Call, CloudBench, Loss};

const REGION: &str = "us-east-1";

/// `moto_server`: `WEFT_MOTO_SERVER`, else the venv `.ci/run` makes.
fn moto_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEFT_MOTO_SERVER") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/weft/moto/bin/moto_server");
    p.is_file().then_some(p)
}

/// A moto server of this test, stopped when dropped.
pub(crate) struct Moto {
    child: Child,
    pub(crate) endpoint: String,
    pub(crate) creds: Credentials,
    pub(crate) ami: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn timing() -> Timing {
    Timing {
        first: Duration::from_millis(10),
        max: Duration::from_millis(100),
        calls: Duration::from_secs(5),
        wait: Duration::from_secs(5),
    }
}

pub(crate) fn ec2_at(endpoint: &str, creds: Credentials) -> Ec2 {
    Ec2 {
        q: QueryClient::new(
            reqwest::Client::new(),
            endpoint,
            REGION,
            "ec2",
            EC2_VERSION,
            creds,
        )
        .unwrap(),
    }
}

/// Starts moto (or skips: `None`), makes an IAM user allowed everything with an access key in
/// the three unauthenticated calls, and picks an AMI with that key (signature checked).
pub(crate) async fn moto() -> Option<Moto> {
    let Some(bin) = moto_server() else {
        weft_testkit::skip_or_fail(
            "moto",
            "no moto_server (python3 -m venv ~/.cache/weft/moto && \
             ~/.cache/weft/moto/bin/pip install 'moto[server,ec2]', or set WEFT_MOTO_SERVER)",
        );
        return None;
    };
    let port = free_port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
        // As EC2 does, RunInstances refuses an AMI it does not know (InvalidAMIID.NotFound):
        // moto's `run_instances` checks the id through `describe_images` with this set.
        .env("MOTO_ENABLE_AMI_VALIDATION", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let endpoint = format!("http://127.0.0.1:{port}/");
    let mut m = Moto {
        child,
        endpoint: endpoint.clone(),
        creds: Credentials {
            access_key_id: "AKIDSETUP".into(),
            secret_access_key: "setup".into(),
            session_token: None,
        },
        ami: String::new(),
    };
    until(Duration::from_secs(60), "moto to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
    })
    .await;
    let iam = QueryClient::new(
        reqwest::Client::new(),
        &endpoint,
        REGION,
        "iam",
        IAM_VERSION,
        m.creds.clone(),
    )
    .unwrap();
    let p = |k: &str, v: &str| (k.to_string(), v.to_string());
    iam.call("CreateUser", &[p("UserName", "weft")])
        .await
        .expect("CreateUser");
    let policy = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
    iam.call(
        "PutUserPolicy",
        &[
            p("UserName", "weft"),
            p("PolicyName", "all"),
            p("PolicyDocument", &policy.to_string()),
        ],
    )
    .await
    .expect("PutUserPolicy");
    let key = iam
        .call("CreateAccessKey", &[p("UserName", "weft")])
        .await
        .expect("CreateAccessKey");
    let text = |name: &str| {
        let mut found = Vec::new();
        key.find_all(name, &mut found);
        found[0].text.trim().to_string()
    };
    m.creds = Credentials {
        access_key_id: text("AccessKeyId"),
        secret_access_key: text("SecretAccessKey"),
        session_token: None,
    };
    let images = ec2_at(&endpoint, m.creds.clone())
        .call("DescribeImages", &[])
        .await
        .expect("DescribeImages with the new key");
    let mut ids = Vec::new();
    images.find_all("imageId", &mut ids);
    m.ami = ids.first().expect("moto has AMIs").text.trim().to_string();
    Some(m)
}

impl Moto {
    pub(crate) fn ec2(&self) -> Ec2 {
        ec2_at(&self.endpoint, self.creds.clone())
    }

    /// moto's IAM API, signed with the current key.
    pub(crate) fn iam(&self) -> QueryClient {
        QueryClient::new(
            reqwest::Client::new(),
            &self.endpoint,
            REGION,
            "iam",
            IAM_VERSION,
            self.creds.clone(),
        )
        .unwrap()
    }

    /// The provider's fields, talking to `endpoint` (moto, or a proxy in front of it).
    pub(crate) fn fields(&self, endpoint: &str) -> Map<String, Value> {
        json!({"region": REGION, "access_key_id": self.creds.access_key_id,
            "secret_access_key": self.creds.secret_access_key, "endpoint": endpoint,
            "instance_type": "t3.micro", "ami": self.ami, "import_key": "true",
            "sshkeyseed": "a test seed"})
        .as_object()
        .unwrap()
        .clone()
    }

    /// Every instance (any state) tagged for `node`.
    pub(crate) async fn instances_of(&self, node: &str) -> Vec<Instance> {
        self.ec2()
            .instances_tagged(&[(TAG_NODE.to_string(), node.to_string())], &[])
            .await
            .unwrap()
    }
}

pub(crate) fn provider() -> AwsProvider {
    AwsProvider::new().with_timing(timing())
}

/// A task of the `aws` provider with `fields` (and `extra` config) on `node` of cluster `c1`.
pub(crate) fn task(
    action: Action,
    node: &str,
    fields: &Map<String, Value>,
    extra: &Map<String, Value>,
) -> Task {
    let mut config = extra.clone();
    config.insert(
        "provider".into(),
        json!({"name": "aws", "providertype": "aws", "provisioner": fields}),
    );
    config.insert("hostname".into(), json!(format!("{node}.example")));
    let mut t = contract::task(action, node, config, Duration::from_secs(30));
    t.cluster_id = "c1".into();
    t.tenant_id = "t1".into();
    t
}

#[tokio::test]
async fn the_provider_contract_holds_against_moto() {
    let Some(m) = moto().await else { return };
    let p = provider();
    contract::provider_contract(&p, m.fields(&m.endpoint), "contract-node").await;
    let left = m.instances_of("contract-node").await;
    assert_eq!(left.len(), 1, "one instance was made: {left:?}");
    assert!(!left[0].is_live(), "and it is gone: {left:?}");
}

#[tokio::test]
async fn create_answers_key_and_delete_by_tag_removes_instance_and_key_pair() {
    let Some(m) = moto().await else { return };
    let p = provider();
    let fields = m.fields(&m.endpoint);
    let out = p
        .create(&task(
            Action::Create,
            "n-tag",
            &fields,
            &json!({"sshuser": "admin"}).as_object().unwrap().clone(),
        ))
        .await
        .expect("create");
    let auth = &out.result["ssh-auth"];
    assert_eq!(auth["user"], "admin");
    assert!(auth["key"]
        .as_str()
        .unwrap()
        .contains("OPENSSH PRIVATE KEY"));
    let made = m.instances_of("n-tag").await;
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0].tags.get("Name").map(String::as_str),
        Some("n-tag.example")
    );
    assert_eq!(
        made[0].tags.get("weft:cluster").map(String::as_str),
        Some("c1")
    );
    let keys = m.ec2().call("DescribeKeyPairs", &[]).await.unwrap();
    let mut names = Vec::new();
    keys.find_all("keyName", &mut names);
    assert!(
        names.iter().any(|n| n.text.trim() == "weft-t1-c1"),
        "{keys:?}"
    );

    // No providerid: the instance is found by its tags.
    let out = p
        .delete(&task(Action::Delete, "n-tag", &fields, &Map::new()))
        .await
        .expect("delete");
    assert!(out.stdout.contains("terminating"), "{}", out.stdout);
    assert!(
        out.stdout.contains("key pair weft-t1-c1 deleted"),
        "{}",
        out.stdout
    );
    assert!(!m.instances_of("n-tag").await[0].is_live());
}

/// What the proxy does.
#[derive(Clone)]
enum Mode {
    /// Forwards RunInstances, then never answers (and says so).
    HangAfterRun(Arc<Notify>),
    /// Shows the first N DescribeInstances answers' instances as `pending`.
    Pending(u32),
    /// Answers the first RunInstances, unforwarded, with this (terminated) instance, as EC2
    /// answers a client token it saw for an instance since terminated.
    StaleToken(String),
}

struct Proxy {
    upstream: String,
    mode: Mode,
    calls: AtomicU32,
    describes: AtomicU32,
    /// The ClientToken of every RunInstances seen.
    tokens: std::sync::Mutex<Vec<String>>,
}

async fn proxied(proxy: Arc<Proxy>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    proxy.calls.fetch_add(1, Ordering::SeqCst);
    let form = String::from_utf8_lossy(&body).into_owned();
    let action = form
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or_default()
        .to_string();
    if action == "RunInstances" {
        let token = form
            .split('&')
            .find_map(|kv| kv.strip_prefix("ClientToken="))
            .unwrap_or_default()
            .to_string();
        let mut tokens = proxy.tokens.lock().unwrap();
        tokens.push(token);
        if let (Mode::StaleToken(id), 1) = (&proxy.mode, tokens.len()) {
            let xml = format!(
                "<RunInstancesResponse><instancesSet><item><instanceId>{id}</instanceId>\
                 <instanceState><code>0</code><name>pending</name></instanceState>\
                 </item></instancesSet></RunInstancesResponse>"
            );
            return (StatusCode::OK, xml).into_response();
        }
    }
    let mut req = reqwest::Client::new().request(method, &proxy.upstream);
    for (k, v) in &headers {
        if k != "content-length" {
            req = req.header(k, v);
        }
    }
    let resp = req.body(body).send().await.expect("moto answers");
    let status = resp.status().as_u16();
    let mut text = resp.text().await.unwrap();
    match &proxy.mode {
        Mode::HangAfterRun(told) if action == "RunInstances" => {
            told.notify_one();
            std::future::pending::<()>().await;
        }
        Mode::Pending(k)
            if action == "DescribeInstances"
                && proxy.describes.fetch_add(1, Ordering::SeqCst) < *k =>
        {
            text = text
                .replace("<name>running</name>", "<name>pending</name>")
                .replace("<privateIpAddress>", "<privateIpAddressHidden>")
                .replace("</privateIpAddress>", "</privateIpAddressHidden>");
        }
        _ => {}
    }
    (StatusCode::from_u16(status).unwrap(), text).into_response()
}

/// Serves a proxy to moto on loopback; answers its endpoint.
async fn serve_proxy(m: &Moto, mode: Mode) -> (String, Arc<Proxy>) {
    let state = Arc::new(Proxy {
        upstream: m.endpoint.clone(),
        mode,
        calls: AtomicU32::new(0),
        describes: AtomicU32::new(0),
        tokens: Default::default(),
    });
    let s = state.clone();
    let app =
        axum::Router::new().fallback(move |method: Method, headers: HeaderMap, body: Bytes| {
            proxied(s.clone(), method, headers, body)
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/"), state)
}

#[tokio::test]
async fn confirm_waits_while_the_instance_is_pending() {
    let Some(m) = moto().await else { return };
    let (endpoint, proxy) = serve_proxy(&m, Mode::Pending(3)).await;
    let p = provider();
    let fields = m.fields(&endpoint);
    let out = p
        .create(&task(Action::Create, "n-wait", &fields, &Map::new()))
        .await
        .expect("create");
    let mut made = Map::new();
    made.extend(out.result.clone());
    proxy.describes.store(0, Ordering::SeqCst);
    let ok = p
        .confirm(&task(Action::Confirm, "n-wait", &fields, &made))
        .await
        .expect("confirm");
    assert!(
        proxy.describes.load(Ordering::SeqCst) >= 4,
        "three pending answers, then running"
    );
    let ips = ok.ipaddresses.unwrap();
    let inst = &m.instances_of("n-wait").await[0];
    assert_eq!(Some(&ips["bind_v4"]), inst.private_ip.as_ref());
    assert_eq!(
        &ips["access_v4"],
        inst.public_ip
            .as_ref()
            .or(inst.private_ip.as_ref())
            .unwrap()
    );

    // Pending for longer than CONFIRM waits: a retryable failure naming the state.
    let (endpoint, _proxy) = serve_proxy(&m, Mode::Pending(u32::MAX)).await;
    let slow = AwsProvider::new().with_timing(Timing {
        wait: Duration::from_millis(300),
        ..timing()
    });
    let e = slow
        .confirm(&task(
            Action::Confirm,
            "n-wait",
            &m.fields(&endpoint),
            &made,
        ))
        .await
        .expect_err("never running");
    assert!(e.retryable, "{e}");
    assert!(e.message.contains("last seen: pending"), "{e}");
}

#[tokio::test]
async fn sweep_finds_an_instance_made_behind_weft_s_back_and_deletes_it() {
    use std::collections::BTreeSet;
    use weft_provisioner::aws::ec2::RunSpec;
    use weft_provisioner::sweep;

    let Some(m) = moto().await else { return };
    let p = provider();
    let fields = m.fields(&m.endpoint);
    let live = p
        .create(&task(Action::Create, "n-live", &fields, &Map::new()))
        .await
        .expect("create");
    let tag = |k: &str, v: &str| (k.to_string(), v.to_string());
    let rogue = m
        .ec2()
        .run_instance(&RunSpec {
            ami: m.ami.clone(),
            instance_type: "t3.micro".into(),
            client_token: "rogue".into(),
            tags: vec![
                tag(TAG_NODE, "n-rogue"),
                tag("weft:cluster", "c1"),
                tag("weft:tenant", "t1"),
            ],
            ..Default::default()
        })
        .await
        .expect("an instance made behind weft's back");
    m.ec2()
        .run_instance(&RunSpec {
            ami: m.ami.clone(),
            instance_type: "t3.micro".into(),
            client_token: "not-weft".into(),
            tags: vec![tag("Name", "someone else's")],
            ..Default::default()
        })
        .await
        .expect("an instance that is not weft's");

    let found = p.machines(&fields).await.expect("listing");
    let nodes: BTreeSet<&str> = found.iter().map(|t| t.node.as_str()).collect();
    assert_eq!(nodes, BTreeSet::from(["n-live", "n-rogue"]), "{found:?}");
    let orphans = sweep::orphans(found, &BTreeSet::from(["n-live".to_string()]));
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].providerid, rogue.id);
    assert_eq!(
        (orphans[0].cluster.as_str(), orphans[0].tenant.as_str()),
        ("c1", "t1")
    );

    let del = sweep::delete_task(&orphans[0], &fields, Duration::from_secs(30));
    p.delete(&del).await.expect("the sweep's delete");
    let left = p.machines(&fields).await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left[0].providerid,
        live.result["providerid"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_token_answered_with_a_terminated_instance_launches_a_new_one() {
    let Some(m) = moto().await else { return };
    let p = provider();
    let fields = m.fields(&m.endpoint);
    let first = p
        .create(&task(Action::Create, "n-again", &fields, &Map::new()))
        .await
        .expect("create");
    let old = first.result["providerid"].as_str().unwrap().to_string();
    let mut made = Map::new();
    made.extend(first.result.clone());
    p.delete(&task(Action::Delete, "n-again", &fields, &made))
        .await
        .expect("delete");

    // The node is made again (a retried job) while EC2 still remembers the first token.
    let (endpoint, proxy) = serve_proxy(&m, Mode::StaleToken(old.clone())).await;
    let again = p
        .create(&task(
            Action::Create,
            "n-again",
            &m.fields(&endpoint),
            &Map::new(),
        ))
        .await
        .expect("create again");
    let new = again.result["providerid"].as_str().unwrap();
    assert_ne!(new, old, "not the terminated instance");
    let tokens = proxy.tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert_ne!(
        tokens[0], tokens[1],
        "the second launch has a token of its own"
    );
    let live: Vec<_> = m
        .instances_of("n-again")
        .await
        .into_iter()
        .filter(Instance::is_live)
        .collect();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].id, new);
}

/// Run by `a_create_sigkilled_after_run_instances_and_retried_leaves_one_instance` in a child
/// process of this test binary: a CREATE with the task in `WEFT_AWS_CHILD_TASK`. Does nothing
/// when that is not set (the normal run).
#[tokio::test]
async fn child_create() {
    let Ok(raw) = std::env::var("WEFT_AWS_CHILD_TASK") else {
        return;
    };
    let v: Value = serde_json::from_str(&raw).unwrap();
    let fields = v["fields"].as_object().unwrap().clone();
    let node = v["node"].as_str().unwrap();
    let r = provider()
        .create(&task(Action::Create, node, &fields, &Map::new()))
        .await;
    panic!("the child's create was to be killed, but it ended: {r:?}");
}

#[tokio::test]
async fn a_create_sigkilled_after_run_instances_and_retried_leaves_one_instance() {
    let Some(m) = moto().await else { return };
    let told = Arc::new(Notify::new());
    let (endpoint, _proxy) = serve_proxy(&m, Mode::HangAfterRun(told.clone())).await;
    let job = json!({"fields": m.fields(&endpoint), "node": "n-kill"});
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "aws::child_create", "--nocapture"])
        .env("WEFT_AWS_CHILD_TASK", job.to_string())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the child runs");
    tokio::select! {
        status = child.wait() => panic!("the child ended before RunInstances was answered: {status:?}"),
        _ = told.notified() => {}
    }
    child.kill().await.expect("SIGKILL");
    let made = m.instances_of("n-kill").await;
    assert_eq!(made.len(), 1, "RunInstances ran once: {made:?}");

    let p = provider();
    let out = p
        .create(&task(
            Action::Create,
            "n-kill",
            &m.fields(&m.endpoint),
            &Map::new(),
        ))
        .await
        .expect("the retried create");
    assert_eq!(out.result["providerid"], made[0].id.as_str());
    assert_eq!(
        m.instances_of("n-kill").await.len(),
        1,
        "still one instance"
    );
}

// ------------------------------------------------------------------------------------------------
// The fault suite's bench (`crate::faults`): moto behind a forwarder that injects EC2's faults

/// What the forwarder does to the calls it passes on.
#[derive(Default)]
struct Knobs {
    /// The next calls are answered with `RequestLimitExceeded`.
    throttle: usize,
    /// The next RunInstances launches, and its answer is lost so.
    lose: Option<Loss>,
    /// Instances launched from now on are `InvalidInstanceID.NotFound` for this many
    /// DescribeInstances by id.
    hide_new: usize,
    /// DescribeInstances by id each instance still answers NotFound to.
    hidden: std::collections::HashMap<String, usize>,
    hidden_answers: usize,
    calls: Vec<Call>,
    /// Answers with `AuthFailure`.
    refused: usize,
}

struct Forwarder {
    upstream: String,
    http: reqwest::Client,
    knobs: std::sync::Mutex<Knobs>,
}

/// An EC2 error answer, in EC2's error format.
fn ec2_error(status: u16, code: &str, message: &str) -> Response {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors>\
         <RequestID>8f7724cf-496f-496e-8fe3-example</RequestID></Response>"
    );
    (StatusCode::from_u16(status).unwrap(), xml).into_response()
}

/// A query parameter of a form body (ids and action names need no decoding).
fn form_param(form: &str, key: &str) -> Option<String> {
    form.split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// The `instanceId`s of a RunInstances answer.
fn launched(xml: &str) -> Vec<String> {
    xml.split("<instanceId>")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once("</instanceId>")?.0.to_string()))
        .collect()
}

/// The answer the knobs give before the call reaches moto, if any.
fn before_moto(k: &mut Knobs, action: &str, form: &str) -> Option<Response> {
    let throttled = k.throttle > 0;
    k.calls.push(Call::now(throttled));
    if throttled {
        k.throttle -= 1;
        return Some(ec2_error(
            503,
            "RequestLimitExceeded",
            "Request limit exceeded.",
        ));
    }
    let id = form_param(form, "InstanceId.1").filter(|_| action == "DescribeInstances")?;
    let left = k.hidden.get_mut(&id).filter(|l| **l > 0)?;
    *left -= 1;
    k.hidden_answers += 1;
    Some(ec2_error(
        400,
        "InvalidInstanceID.NotFound",
        &format!("The instance ID '{id}' does not exist"),
    ))
}

async fn faulty(
    axum::extract::State(fw): axum::extract::State<Arc<Forwarder>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = String::from_utf8_lossy(&body).into_owned();
    let action = form_param(&form, "Action").unwrap_or_default();
    if let Some(r) = before_moto(&mut fw.knobs.lock().unwrap(), &action, &form) {
        return r;
    }
    let (status, headers, body) =
        crate::faults::forward(&fw.http, &fw.upstream, method, &uri, &headers, body).await;
    let text = String::from_utf8_lossy(&body);
    let mut k = fw.knobs.lock().unwrap();
    // EC2 refuses a key with AuthFailure; STS refuses an AssumeRole with AccessDenied.
    if text.contains("AuthFailure") || text.contains("<Code>AccessDenied</Code>") {
        k.refused += 1;
    }
    if action == "RunInstances" && status.is_success() {
        if k.hide_new > 0 {
            let n = k.hide_new;
            for id in launched(&text) {
                k.hidden.insert(id, n);
            }
        }
        match k.lose.take() {
            Some(Loss::ServerError) => {
                return ec2_error(500, "InternalError", "An internal error has occurred.")
            }
            Some(Loss::Dropped) => {
                drop(k);
                crate::faults::hang_up()
            }
            None => {}
        }
    }
    crate::faults::answer(status, headers, body)
}

/// moto, and the forwarder the provider talks to.
pub(crate) struct Bench {
    moto: Moto,
    fw: Arc<Forwarder>,
    endpoint: String,
}

impl Bench {
    fn knobs(&self) -> std::sync::MutexGuard<'_, Knobs> {
        self.fw.knobs.lock().unwrap()
    }
}

impl CloudBench for Bench {
    const TYPE: &'static str = "aws";

    async fn start() -> Option<Bench> {
        let moto = moto().await?;
        let fw = Arc::new(Forwarder {
            upstream: moto.endpoint.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
            knobs: Default::default(),
        });
        let app = axum::Router::new().fallback(faulty).with_state(fw.clone());
        let endpoint = format!("{}/", crate::faults::serve(app).await);
        Some(Bench { moto, fw, endpoint })
    }

    fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(provider())
    }

    fn fields(&self) -> Map<String, Value> {
        self.moto.fields(&self.endpoint)
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        let mut f = self.fields();
        f.insert("secret_access_key".into(), json!("not-the-secret"));
        f
    }

    fn wrong_secret(&self) -> String {
        "not-the-secret".into()
    }

    fn refusal(&self) -> &'static str {
        "AuthFailure"
    }

    fn auth_refusals(&self) -> usize {
        self.knobs().refused
    }

    /// A new access key; the old one deactivated and deleted (`rotation::rotate_aws_key`).
    async fn rotate(&mut self) {
        crate::rotation::rotate_aws_key(&mut self.moto).await;
    }

    fn throttle_next(&self, n: usize) {
        self.knobs().throttle = n;
    }

    fn retry_after(&self) -> Duration {
        Duration::ZERO
    }

    fn calls(&self) -> Vec<Call> {
        self.knobs().calls.clone()
    }

    fn lose_next_create_answer(&self, how: Loss) {
        self.knobs().lose = Some(how);
    }

    fn hide_new_machines_for(&self, reads: usize) {
        self.knobs().hide_new = reads;
    }

    fn hidden_answers(&self) -> usize {
        self.knobs().hidden_answers
    }

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        let tag = |k: &str, v: &str| (k.to_string(), v.to_string());
        let spec = weft_provisioner::aws::ec2::RunSpec {
            ami: self.moto.ami.clone(),
            instance_type: "t3.micro".into(),
            client_token: format!("rogue-{node}"),
            tags: vec![
                tag(TAG_NODE, node),
                tag("weft:cluster", cluster),
                tag("weft:tenant", tenant),
            ],
            ..Default::default()
        };
        let made = self.moto.ec2().run_instance(&spec).await;
        made.expect("an instance made behind weft's back").id
    }

    async fn count_machines(&self, node: &str) -> usize {
        let all = self.moto.instances_of(node).await;
        all.iter().filter(|i| i.is_live()).count()
    }
}

/// The aws bench with every EC2 call signed as a role assumed through moto's STS (with an
/// external id the role's trust policy requires): the fault suite's `aws_role` cloud. A wrong
/// credential is a wrong external id, which STS refuses with AccessDenied.
pub(crate) struct RoleBench {
    inner: Bench,
    role: String,
}

/// The external id the suite's role requires.
const ROLE_EXTERNAL_ID: &str = "the-external-id-of-the-fault-suite";

impl CloudBench for RoleBench {
    const TYPE: &'static str = "aws";

    async fn start() -> Option<RoleBench> {
        let inner = Bench::start().await?;
        let role = crate::aws_credentials::make_role(
            &inner.moto,
            "weft-faults",
            Some(ROLE_EXTERNAL_ID),
            None,
        )
        .await;
        Some(RoleBench { inner, role })
    }

    fn provider(&self) -> Arc<dyn Provider> {
        self.inner.provider()
    }

    fn fields(&self) -> Map<String, Value> {
        let mut f = self.inner.fields();
        f.insert("role_arn".into(), json!(self.role));
        f.insert("external_id".into(), json!(ROLE_EXTERNAL_ID));
        f
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        let mut f = self.fields();
        f.insert("external_id".into(), json!(self.wrong_secret()));
        f
    }

    fn wrong_secret(&self) -> String {
        "a-wrong-external-id-kept-secret".into()
    }

    fn refusal(&self) -> &'static str {
        "AccessDenied"
    }

    fn auth_refusals(&self) -> usize {
        self.inner.auth_refusals()
    }

    /// The base access key is replaced: the role is assumed with the new one.
    async fn rotate(&mut self) {
        self.inner.rotate().await;
    }

    fn throttle_next(&self, n: usize) {
        self.inner.throttle_next(n);
    }

    fn retry_after(&self) -> Duration {
        self.inner.retry_after()
    }

    fn calls(&self) -> Vec<Call> {
        self.inner.calls()
    }

    fn lose_next_create_answer(&self, how: Loss) {
        self.inner.lose_next_create_answer(how);
    }

    fn hide_new_machines_for(&self, reads: usize) {
        self.inner.hide_new_machines_for(reads);
    }

    fn hidden_answers(&self) -> usize {
        self.inner.hidden_answers()
    }

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        self.inner.make_behind_back(node, cluster, tenant).await
    }

    async fn count_machines(&self, node: &str) -> usize {
        self.inner.count_machines(node).await
    }
}
