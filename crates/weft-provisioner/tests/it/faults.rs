//! One fault suite, run on every cloud against its most real endpoint (issue 39): aws on moto
//! behind a fault-injecting forwarder, openstack on a real Keystone and the Nova fake, rackspace
//! on the Identity and Nova fakes, google and joyent on their fakes. Each cloud's harness
//! implements [`CloudBench`] (start the endpoint, the provider fields, the knobs that make the
//! endpoint misbehave as that cloud documents it), and [`fault_suite!`] instantiates one generic
//! test body per fault for each cloud, so that a test's name says the cloud:
//! `faults::google::throttling_is_retried_and_the_budget_honoured`.
//!
//! Everything goes through `weft_provisioner::Provider` (CREATE, CONFIRM, DELETE, `machines`):
//! the suite knows nothing of a provider's internals.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use weft_model::FailureReason;
use weft_provisioner::task::{Action, Task, TaskOutput};
use weft_provisioner::Provider;

/// The tenant and cluster of every task of the suite.
const TENANT: &str = "t1";
const CLUSTER: &str = "c1";
/// The budget the throttling test gives the provider: calls a second, and at once.
const RATE: f64 = 10.0;
const BURST: usize = 2;
/// How far apart the endpoint may see two calls the provider spaced (scheduling, loopback).
const SLACK: Duration = Duration::from_millis(25);

/// One call the endpoint answered, when, and whether it answered it with a throttling error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) at: Instant,
    pub(crate) throttled: bool,
}

impl Call {
    pub(crate) fn now(throttled: bool) -> Call {
        Call {
            at: Instant::now(),
            throttled,
        }
    }
}

/// How the answer to a CREATE that the cloud carried out is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The connection is closed before any answer.
    Dropped,
    /// The cloud made the machine, then answered with its 5xx.
    ServerError,
}

/// A cloud's endpoint for the suite, and the knobs that make it misbehave. Every knob answers
/// as that cloud's API reference says the cloud does.
#[allow(async_fn_in_trait)]
pub(crate) trait CloudBench: Sized {
    /// The provider type (`config.provider.providertype`).
    const TYPE: &'static str;
    /// Starts the endpoint; `None` when what it needs (docker, moto) is missing outside CI.
    async fn start() -> Option<Self>;
    /// A provider with short timings, as a freshly started provisioner has it.
    fn provider(&self) -> Arc<dyn Provider>;
    /// The provider fields with the credentials the cloud accepts now.
    fn fields(&self) -> Map<String, Value>;
    /// What a node's config holds besides the provider (image and flavor, where needed).
    fn node_config(&self) -> Map<String, Value> {
        Map::new()
    }
    /// The fields with a credential the cloud refuses.
    fn wrong_fields(&self) -> Map<String, Value>;
    /// A piece of the wrong credential's secret, which no error may show.
    fn wrong_secret(&self) -> String;
    /// What the cloud's refusal of a credential says, which the error must carry.
    fn refusal(&self) -> &'static str;
    /// How many times the endpoint has refused a credential so far.
    fn auth_refusals(&self) -> usize;
    /// Replaces the credential: the cloud accepts the new one and refuses the old one from now
    /// on. [`CloudBench::fields`] answers the new one afterwards.
    async fn rotate(&mut self);
    /// The endpoint answers its next `n` calls with the cloud's throttling answer.
    fn throttle_next(&self, n: usize);
    /// The least pause a throttling answer asks for (its `Retry-After`; zero when it has none).
    fn retry_after(&self) -> Duration;
    /// The calls the endpoint answered (the cloud's API, not its identity service).
    fn calls(&self) -> Vec<Call>;
    /// The endpoint makes the next CREATE's machine, and the answer is lost as `how` says.
    fn lose_next_create_answer(&self, how: Loss);
    /// Machines made from now on answer NotFound to their first `reads` reads by id.
    fn hide_new_machines_for(&self, reads: usize);
    /// How many reads were answered NotFound by [`CloudBench::hide_new_machines_for`].
    fn hidden_answers(&self) -> usize;
    /// Makes a machine behind weft's back with weft's marks of `node`, `cluster` and `tenant`;
    /// answers its provider id.
    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String;
    /// The machines marked for `node` that exist and are not being deleted.
    async fn count_machines(&self, node: &str) -> usize;
}

/// The bench of a fake cloud whose account holds one of the two test RSA keys
/// ([`crate::google::keys`]): the account's first key, or after a rotation the other.
pub(crate) struct RsaBench<S> {
    pub(crate) fake: S,
    pub(crate) base: String,
    pub(crate) rotated: bool,
}

impl<S> RsaBench<S> {
    /// The key the account holds now (`current`), or the one it does not.
    pub(crate) fn key(&self, current: bool) -> &'static rsa::RsaPrivateKey {
        let (first, second) = crate::google::keys();
        if current != self.rotated {
            first
        } else {
            second
        }
    }
}

/// The knobs every HTTP fake of the suite implements alike, for a bench whose `fake` is a
/// mutex over a state with `faults`, `calls`, `lose`, `hide_new` and `hidden_answers`:
/// throttling answers alternate between the cloud's two (`$first`, `$second`), without a
/// `Retry-After`.
macro_rules! fake_knobs {
    ($first:expr, $second:expr) => {
        fn throttle_next(&self, n: usize) {
            self.fake.lock().unwrap().faults = (0..n)
                .map(|i| if i % 2 == 0 { $first } else { $second })
                .collect();
        }

        fn retry_after(&self) -> Duration {
            Duration::ZERO
        }

        fn calls(&self) -> Vec<crate::faults::Call> {
            self.fake.lock().unwrap().calls.clone()
        }

        fn lose_next_create_answer(&self, how: crate::faults::Loss) {
            self.fake.lock().unwrap().lose = Some(how);
        }

        fn hide_new_machines_for(&self, reads: usize) {
            self.fake.lock().unwrap().hide_new = reads;
        }

        fn hidden_answers(&self) -> usize {
            self.fake.lock().unwrap().hidden_answers
        }
    };
}
pub(crate) use fake_knobs;

/// Runs `t`'s CREATE on `p`, kills it once the cloud has made the machine (`made` is notified;
/// the fake holds its answer until then), lets the fake go on with `resume`, and answers the
/// output of the CREATE run again, as after a provisioner's crash.
pub(crate) async fn create_killed_after_the_launch(
    p: Arc<dyn Provider>,
    t: &Task,
    made: Arc<tokio::sync::Notify>,
    resume: impl FnOnce(),
) -> TaskOutput {
    let first = {
        let (p, t) = (p.clone(), t.clone());
        tokio::spawn(async move { p.create(&t).await })
    };
    made.notified().await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    resume();
    let out = p.create(t).await.unwrap();
    assert!(out.stdout.contains("exists"), "{}", out.stdout);
    out
}

/// A task of the suite's cluster and tenant.
fn task<B: CloudBench>(b: &B, action: Action, node: &str, fields: &Map<String, Value>) -> Task {
    task_with(b, action, node, fields, Map::new())
}

/// [`task`] with `made` (what CREATE answered) in its config.
fn task_with<B: CloudBench>(
    b: &B,
    action: Action,
    node: &str,
    fields: &Map<String, Value>,
    made: Map<String, Value>,
) -> Task {
    let mut config = b.node_config();
    config.insert(
        "provider".into(),
        json!({"name": "faults", "providertype": B::TYPE, "provisioner": fields}),
    );
    config.insert("hostname".into(), json!(format!("{node}.faults.example")));
    config.extend(made);
    let mut t = contract::task(action, node, config, Duration::from_secs(60));
    t.cluster_id = CLUSTER.into();
    t.tenant_id = TENANT.into();
    t
}

fn providerid(out: &TaskOutput) -> String {
    out.result["providerid"]
        .as_str()
        .expect("CREATE answers a providerid")
        .to_string()
}

/// Wrong credentials: CREATE fails for good with reason `auth`, after one refusal, showing no
/// secret, and nothing is made.
pub(crate) async fn wrong_credentials_fail_at_once_as_auth<B: CloudBench>() {
    let Some(b) = B::start().await else { return };
    let before = b.auth_refusals();
    let e = b
        .provider()
        .create(&task(&b, Action::Create, "f-auth", &b.wrong_fields()))
        .await
        .expect_err("a wrong credential is refused");
    assert!(!e.retryable, "{e}");
    assert_eq!(e.reason, FailureReason::Auth, "{e}");
    assert!(!e.message.contains(&b.wrong_secret()), "{e}");
    assert!(e.message.contains(b.refusal()), "{e}");
    assert_eq!(b.auth_refusals() - before, 1, "refused once, not retried");
    assert_eq!(b.count_machines("f-auth").await, 0);
}

/// Throttling: CREATE passes once the throttling stops, after waiting at least what each
/// throttling answer asked and never calling faster than the account's budget.
pub(crate) async fn throttling_is_retried_and_the_budget_honoured<B: CloudBench>() {
    let Some(b) = B::start().await else { return };
    let mut fields = b.fields();
    fields.insert("requests_per_second".into(), json!(RATE.to_string()));
    fields.insert("request_burst".into(), json!(BURST.to_string()));
    let p = b.provider();
    b.throttle_next(3);
    let before = b.calls().len();
    p.create(&task(&b, Action::Create, "f-slow", &fields))
        .await
        .expect("CREATE passes once the throttling stops");
    let calls = b.calls().split_off(before);
    assert_eq!(calls.iter().filter(|c| c.throttled).count(), 3, "{calls:?}");
    let least = b.retry_after().max(Duration::from_secs_f64(1.0 / RATE));
    for pair in calls.windows(2).filter(|w| w[0].throttled) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap + SLACK >= least,
            "a call {gap:?} after a throttling answer (at least {least:?}): {calls:?}"
        );
    }
    for (i, first) in calls.iter().enumerate() {
        for (k, last) in calls[i..].iter().enumerate() {
            let window = (last.at - first.at + SLACK).as_secs_f64();
            let allowed = BURST as f64 + RATE * window;
            assert!(
                (k + 1) as f64 <= allowed,
                "{} calls in {window:.3}s, over the budget: {calls:?}",
                k + 1
            );
        }
    }
    assert_eq!(b.count_machines("f-slow").await, 1);
}

/// A CREATE whose answer is lost after the cloud made the machine, then run again by a freshly
/// started provisioner: one machine, the same one.
pub(crate) async fn lost_create_answer_then_retry_makes_one_machine<B: CloudBench>(how: Loss) {
    let Some(b) = B::start().await else { return };
    let fields = b.fields();
    let t = task(&b, Action::Create, "f-lost", &fields);
    b.lose_next_create_answer(how);
    let first = b.provider().create(&t).await;
    if let Err(e) = &first {
        assert!(e.retryable, "a lost answer is worth another try: {e}");
    }
    let again = b
        .provider()
        .create(&t)
        .await
        .expect("the retried CREATE passes");
    if let Ok(first) = &first {
        assert_eq!(providerid(first), providerid(&again));
    }
    assert_eq!(b.count_machines("f-lost").await, 1, "exactly one machine");
    let p = b.provider();
    p.delete(&task_with(
        &b,
        Action::Delete,
        "f-lost",
        &fields,
        again.result,
    ))
    .await
    .expect("DELETE");
    assert_eq!(b.count_machines("f-lost").await, 0);
}

/// Eventual consistency: a new machine answers NotFound to its first reads; CONFIRM waits for
/// it and answers its addresses.
pub(crate) async fn a_new_machine_not_found_at_first_is_waited_for<B: CloudBench>() {
    let Some(b) = B::start().await else { return };
    let fields = b.fields();
    let p = b.provider();
    b.hide_new_machines_for(3);
    let made = p
        .create(&task(&b, Action::Create, "f-late", &fields))
        .await
        .expect("CREATE");
    let out = p
        .confirm(&task_with(
            &b,
            Action::Confirm,
            "f-late",
            &fields,
            made.result,
        ))
        .await
        .expect("CONFIRM waits for the machine to show");
    let ips = out.ipaddresses.expect("CONFIRM answers addresses");
    assert!(ips.contains_key("access_v4") && ips.contains_key("bind_v4"));
    assert_eq!(b.hidden_answers(), 3, "the machine was hidden three times");
    assert_eq!(b.count_machines("f-late").await, 1);
}

/// DELETE of a machine already gone succeeds, by id and by marks.
pub(crate) async fn deleting_a_machine_already_gone_succeeds<B: CloudBench>() {
    let Some(b) = B::start().await else { return };
    let fields = b.fields();
    let p = b.provider();
    let made = p
        .create(&task(&b, Action::Create, "f-gone", &fields))
        .await
        .expect("CREATE");
    let del = task_with(&b, Action::Delete, "f-gone", &fields, made.result);
    p.delete(&del).await.expect("DELETE");
    assert_eq!(b.count_machines("f-gone").await, 0);
    p.delete(&del)
        .await
        .expect("DELETE of a machine already gone");
    b.provider()
        .delete(&task(&b, Action::Delete, "f-gone", &fields))
        .await
        .expect("DELETE without a providerid of a machine already gone");
}

/// A machine made behind weft's back with weft's marks: `machines` lists it with its marks and
/// a sweep of its tenant deletes it, leaving the live node's machine and another tenant's.
pub(crate) async fn a_machine_made_behind_weft_s_back_is_swept<B: CloudBench>() {
    let Some(b) = B::start().await else { return };
    let fields = b.fields();
    let p = b.provider();
    let live = p
        .create(&task(&b, Action::Create, "f-live", &fields))
        .await
        .expect("CREATE");
    let rogue = b.make_behind_back("f-rogue", "c9", TENANT).await;
    let theirs = b.make_behind_back("f-theirs", "c8", "t2").await;
    let found = p.machines(&fields).await.expect("machines");
    let nodes: BTreeSet<&str> = found.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["f-live", "f-rogue", "f-theirs"]),
        "{found:?}"
    );
    let t = found.iter().find(|m| m.node == "f-theirs").unwrap();
    assert_eq!(
        (t.providerid.as_str(), t.tenant.as_str()),
        (theirs.as_str(), "t2")
    );
    let r = found.iter().find(|m| m.node == "f-rogue").unwrap();
    assert_eq!(
        (r.providerid.as_str(), r.cluster.as_str(), r.tenant.as_str()),
        (rogue.as_str(), "c9", TENANT)
    );
    let l = found.iter().find(|m| m.node == "f-live").unwrap();
    assert_eq!(l.providerid, providerid(&live));
    let req: weft_provisioner::sweep::SweepRequest = serde_json::from_value(json!({
        "providertype": B::TYPE, "fields": fields, "tenant": TENANT, "live": ["f-live"],
        "delete": true}))
    .unwrap();
    let report = weft_provisioner::sweep::sweep(p, &req)
        .await
        .expect("sweep");
    assert_eq!(report.deleted, [rogue], "{report:?}");
    assert_eq!(b.count_machines("f-rogue").await, 0);
    assert_eq!(b.count_machines("f-live").await, 1);
    assert_eq!(
        b.count_machines("f-theirs").await,
        1,
        "another tenant's stays"
    );
}

/// A rotated credential: the next task with the new credential works on the provider that
/// used the old one; a task with the old one fails for good with reason `auth`.
pub(crate) async fn a_rotated_credential_works_and_the_old_one_fails_as_auth<B: CloudBench>() {
    let Some(mut b) = B::start().await else {
        return;
    };
    let old = b.fields();
    let p = b.provider();
    let made = p
        .create(&task(&b, Action::Create, "f-rot", &old))
        .await
        .expect("CREATE with the first credential");
    b.rotate().await;
    let new = b.fields();
    p.delete(&task_with(&b, Action::Delete, "f-rot", &new, made.result))
        .await
        .expect("DELETE with the new credential");
    assert_eq!(b.count_machines("f-rot").await, 0);
    let e = b
        .provider()
        .create(&task(&b, Action::Create, "f-rot-2", &old))
        .await
        .expect_err("the old credential is refused");
    assert!(!e.retryable, "{e}");
    assert_eq!(e.reason, FailureReason::Auth, "{e}");
    assert_eq!(b.count_machines("f-rot-2").await, 0);
}

/// The suite for each `cloud => bench`: a module per cloud with one test per fault.
macro_rules! fault_suite {
    ($($cloud:ident => $bench:ty),* $(,)?) => {$(
        mod $cloud {
            use super::*;

            #[tokio::test]
            async fn wrong_credentials_fail_at_once_as_auth() {
                super::wrong_credentials_fail_at_once_as_auth::<$bench>().await;
            }

            #[tokio::test]
            async fn throttling_is_retried_and_the_budget_honoured() {
                super::throttling_is_retried_and_the_budget_honoured::<$bench>().await;
            }

            #[tokio::test]
            async fn a_create_cut_off_after_the_cloud_made_it_then_retried_makes_one_machine() {
                super::lost_create_answer_then_retry_makes_one_machine::<$bench>(Loss::Dropped)
                    .await;
            }

            #[tokio::test]
            async fn a_create_answered_5xx_after_the_cloud_made_it_then_retried_makes_one_machine(
            ) {
                super::lost_create_answer_then_retry_makes_one_machine::<$bench>(
                    Loss::ServerError,
                )
                .await;
            }

            #[tokio::test]
            async fn a_new_machine_not_found_at_first_is_waited_for_by_confirm() {
                super::a_new_machine_not_found_at_first_is_waited_for::<$bench>().await;
            }

            #[tokio::test]
            async fn deleting_a_machine_already_gone_succeeds() {
                super::deleting_a_machine_already_gone_succeeds::<$bench>().await;
            }

            #[tokio::test]
            async fn a_machine_made_behind_weft_s_back_is_found_and_swept() {
                super::a_machine_made_behind_weft_s_back_is_swept::<$bench>().await;
            }

            #[tokio::test]
            async fn a_rotated_credential_works_and_the_old_one_fails_as_auth() {
                super::a_rotated_credential_works_and_the_old_one_fails_as_auth::<$bench>()
                    .await;
            }
        }
    )*};
}

fault_suite! {
    aws => crate::aws::Bench,
    aws_role => crate::aws::RoleBench,
    google => crate::google::Bench,
    joyent => crate::joyent::Bench,
    openstack => crate::openstack::Bench,
    rackspace => crate::openstack::RackspaceBench,
}

// ------------------------------------------------------------------------------------------------
// What the benches share

/// Closes the connection of the request being served, without an answer: the handler's task
/// unwinds (quietly: no panic message), and the server drops the connection with it. Hold no
/// lock when calling it.
pub(crate) fn hang_up() -> ! {
    std::panic::resume_unwind(Box::new("the endpoint hangs up"))
}

/// Sends a request on to `upstream` (a base URL without a trailing slash) as it came, `Host`
/// included (a signature may cover it), and answers the upstream's status, headers and body.
pub(crate) async fn forward(
    http: &reqwest::Client,
    upstream: &str,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = http.request(method, format!("{upstream}{path}"));
    for (k, v) in headers {
        if k != "content-length" {
            req = req.header(k, v);
        }
    }
    let resp = req.body(body).send().await.expect("the upstream answers");
    let status = resp.status();
    let mut headers = resp.headers().clone();
    headers.remove("content-length");
    headers.remove("transfer-encoding");
    let body = resp.bytes().await.expect("the upstream's body");
    (status, headers, body)
}

/// An answer made of a forwarded status, headers and body.
pub(crate) fn answer(status: StatusCode, headers: HeaderMap, body: Bytes) -> Response {
    (status, headers, body).into_response()
}

/// Serves `app` on a free loopback port; answers its address as `http://127.0.0.1:port`.
pub(crate) async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn hang_up_closes_the_connection_without_an_answer() {
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(|| async { hang_up() as &'static str }),
    );
    let url = serve(app).await;
    let e = reqwest::Client::new()
        .post(&url)
        .body("x")
        .send()
        .await
        .expect_err("no answer comes");
    assert!(e.status().is_none(), "{e}");
    assert!(!e.is_timeout(), "{e}");
}
