//! The `google` provider against a fake of Compute Engine v1 and Google's OAuth token endpoint,
//! served by the test on 127.0.0.1 and written from the published API reference (instances.get,
//! instances.list with a label filter and pages, instances.insert, instances.delete,
//! zoneOperations.get, the JWT bearer grant). As the compute v1 reference says, an insert on a
//! custom-mode network (`autoCreateSubnetworks: false`; the test names such networks) without a
//! `subnetwork` is refused with 400 `invalid` ("Subnetwork should be specified for custom
//! subnetmode network"), and a subnetwork must be in the zone's region. The fake checks
//! authentication for real: the token endpoint verifies the assertion's RS256 signature with the
//! test key's public half (a wrong key gets `invalid_grant`), and compute calls need a token it
//! issued. Operations go PENDING, RUNNING, DONE and instances PROVISIONING, STAGING, RUNNING over
//! several polls; a duplicate name is `409 alreadyExists`; a deleted instance is 404. Switches
//! inject 5xx answers, 429 and 403 `rateLimitExceeded`, quota errors, stale reads, an insert
//! whose answer is lost and new instances that are 404 at first. Not tested against Google itself.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::contract::{self, task};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::{EncodePrivateKey, LineEnding};
use rsa::signature::Verifier;
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use weft_provisioner::google::{instance_name, GoogleProvider, Timing};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::faults::{Call, CloudBench, Loss};

const EMAIL: &str = "weft-test@weft-test.iam.gserviceaccount.com";
const ZONE: &str = "us-central1-a";

/// Test-only RSA keys, made once per test binary: the account's key and a stranger's.
pub(crate) fn keys() -> &'static (RsaPrivateKey, RsaPrivateKey) {
    static KEYS: OnceLock<(RsaPrivateKey, RsaPrivateKey)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut rng = rand::thread_rng();
        (
            RsaPrivateKey::new(&mut rng, 2048).expect("rsa key"),
            RsaPrivateKey::new(&mut rng, 2048).expect("rsa key"),
        )
    })
}

/// What a compute call gets instead of its answer (consumed one per call).
#[derive(Clone, Copy)]
enum Fault {
    Status(u16),
    Throttle,
    /// The other throttling answer the reference documents: 403 `rateLimitExceeded`.
    Throttle403,
}

#[derive(Default)]
pub(crate) struct Fake {
    public: Option<RsaPublicKey>,
    token_uri: String,
    tokens: Vec<String>,
    token_requests: usize,
    /// name -> (instance, GETs seen)
    instances: HashMap<String, (Value, u32)>,
    /// name -> (operation, polls seen, instance it deletes when DONE)
    operations: HashMap<String, (Value, u32, Option<String>)>,
    next: u32,
    inserts: usize,
    faults: VecDeque<Fault>,
    /// Inserts fail with 403 quotaExceeded.
    quota: bool,
    /// Insert operations end DONE with this error.
    op_error: Option<(String, String)>,
    /// Operations stay RUNNING.
    hold_ops: bool,
    /// This many instance GETs answer 404 whatever exists (a stale read).
    stale_reads: u32,
    /// Compute calls answer 401 to every token issued so far.
    revoke: bool,
    /// Wakes the test when an insert was accepted.
    inserted: Arc<tokio::sync::Notify>,
    /// Networks in custom subnet mode (`autoCreateSubnetworks: false`), by name.
    custom_networks: HashSet<String>,
    /// The most instances one instances.list page holds (the API's own limit is 500).
    page_size: usize,
    /// Token requests refused (`invalid_grant`).
    refusals: usize,
    /// Every compute call answered, and whether it was throttled.
    calls: Vec<Call>,
    /// The next insert makes its instance and its answer is lost so.
    lose: Option<Loss>,
    /// Instances inserted from now on answer 404 to this many GETs.
    hide_new: usize,
    /// GETs each instance still answers 404 to, by name.
    hidden: HashMap<String, usize>,
    /// GETs answered 404 for a hidden instance.
    hidden_answers: usize,
}

type Shared = Arc<Mutex<Fake>>;

fn google_error(status: u16, reason: &str, message: &str) -> Response {
    let body = json!({"error": {"code": status, "message": message,
        "errors": [{"domain": "global", "reason": reason, "message": message}]}});
    let mut r = (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
    if status == 429 {
        r.headers_mut().insert("retry-after", "0".parse().unwrap());
    }
    r
}

/// Verifies an RS256 JWT assertion with `key`; answers its claims.
fn verify_assertion(jwt: &str, key: &RsaPublicKey) -> Result<Value, &'static str> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [h, c, s] = parts[..] else {
        return Err("not a JWT");
    };
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).map_err(|_| "header")?)
        .map_err(|_| "header")?;
    if header["alg"] != "RS256" {
        return Err("alg is not RS256");
    }
    let sig = Signature::try_from(URL_SAFE_NO_PAD.decode(s).map_err(|_| "sig")?.as_slice())
        .map_err(|_| "sig")?;
    VerifyingKey::<Sha256>::new(key.clone())
        .verify(format!("{h}.{c}").as_bytes(), &sig)
        .map_err(|_| "Invalid JWT Signature.")?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(c).map_err(|_| "claims")?).map_err(|_| "claims")
}

async fn token(State(f): State<Shared>, Form(form): Form<HashMap<String, String>>) -> Response {
    let mut f = f.lock().unwrap();
    f.token_requests += 1;
    if form.get("grant_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
    {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "unsupported_grant_type"})),
        )
            .into_response();
    }
    let claims = match verify_assertion(
        form.get("assertion").map(String::as_str).unwrap_or(""),
        f.public.as_ref().unwrap(),
    ) {
        Ok(c) => c,
        Err(why) => {
            f.refusals += 1;
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": "invalid_grant", "error_description": why})),
            )
                .into_response();
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let good = claims["iss"] == EMAIL
        && claims["aud"] == f.token_uri.as_str()
        && claims["scope"]
            .as_str()
            .is_some_and(|s| s.contains("auth/compute"))
        && claims["exp"]
            .as_u64()
            .is_some_and(|e| e > now && e <= now + 3700)
        && claims["iat"].as_u64().is_some_and(|i| i <= now + 60);
    if !good {
        f.refusals += 1;
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant", "error_description": "Invalid JWT claims."})),
        )
            .into_response();
    }
    let t = format!("ya29.test-{}", f.tokens.len() + 1);
    f.tokens.push(t.clone());
    Json(json!({"access_token": t, "expires_in": 3599, "token_type": "Bearer"})).into_response()
}

/// The fault or auth failure a compute call gets, if any.
fn gate(f: &mut Fake, headers: &HeaderMap) -> Option<Response> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !f.tokens.iter().any(|t| t == token) || f.revoke {
        f.revoke = false;
        f.tokens.clear();
        return Some(google_error(
            401,
            "authError",
            "Request had invalid authentication credentials.",
        ));
    }
    let fault = f.faults.pop_front();
    f.calls.push(Call::now(matches!(
        fault,
        Some(Fault::Throttle | Fault::Throttle403)
    )));
    match fault? {
        Fault::Status(s) => Some(google_error(s, "backendError", "Internal error.")),
        Fault::Throttle => Some(google_error(
            429,
            "rateLimitExceeded",
            "Rate Limit Exceeded",
        )),
        Fault::Throttle403 => Some(google_error(
            403,
            "rateLimitExceeded",
            "Rate Limit Exceeded",
        )),
    }
}

fn new_operation(f: &mut Fake, kind: &str, target: &str, deletes: Option<String>) -> Value {
    f.next += 1;
    let name = format!("operation-{}-{kind}", f.next);
    let op = json!({"kind": "compute#operation", "id": f.next.to_string(), "name": name,
        "zone": ZONE, "operationType": kind, "targetLink": target, "status": "PENDING",
        "progress": 0});
    f.operations
        .insert(name, (op.clone(), 0, deletes.map(|d| d.to_string())));
    op
}

async fn get_instance(
    State(f): State<Shared>,
    Path((_p, _z, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &headers) {
        return r;
    }
    let mut stale = f.stale_reads > 0;
    f.stale_reads = f.stale_reads.saturating_sub(1);
    if let Some(left) = f.hidden.get_mut(&name).filter(|l| **l > 0) {
        *left -= 1;
        f.hidden_answers += 1;
        stale = true;
    }
    // A deleted instance goes after a few reads whether or not anyone follows the operation,
    // as the real service's does.
    if let Some((inst, gets)) = f.instances.get(&name) {
        if inst["status"] == "STOPPING" && *gets >= 2 && !stale {
            f.instances.remove(&name);
        }
    }
    match f.instances.get_mut(&name) {
        Some((inst, gets)) if !stale => {
            *gets += 1;
            if inst["status"] != "STOPPING" {
                inst["status"] = json!(match *gets {
                    0..=1 => "PROVISIONING",
                    2..=3 => "STAGING",
                    _ => "RUNNING",
                });
            }
            Json(inst.clone()).into_response()
        }
        _ => google_error(
            404,
            "notFound",
            &format!(
                "The resource 'projects/weft-test/zones/{ZONE}/instances/{name}' was not found"
            ),
        ),
    }
}

/// Checks what instances.insert requires and what weft promises to send.
fn check_insert(body: &Value) -> Result<(), String> {
    let name = body["name"].as_str().ok_or("no name")?;
    if !weft_provisioner::google::valid_name(name) {
        return Err(format!("invalid name {name}"));
    }
    let mt = body["machineType"].as_str().ok_or("no machineType")?;
    if !mt.starts_with(&format!("zones/{ZONE}/machineTypes/")) {
        return Err(format!("machineType {mt}"));
    }
    body["disks"][0]["initializeParams"]["sourceImage"]
        .as_str()
        .ok_or("no sourceImage")?;
    body["networkInterfaces"][0]["network"]
        .as_str()
        .ok_or("no network")?;
    for (k, v) in body["labels"].as_object().ok_or("no labels")? {
        let v = v.as_str().ok_or("a label value is not a string")?;
        let ok = v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !ok {
            return Err(format!("label {k}: {v:?} is not a valid label value"));
        }
    }
    if let Some(items) = body.get("tags").map(|t| &t["items"]) {
        for tag in items.as_array().ok_or("tags.items is not a list")? {
            let tag = tag.as_str().ok_or("a tag is not a string")?;
            if !weft_provisioner::google::valid_name(tag) {
                return Err(format!("tag {tag:?} is not RFC 1035"));
            }
        }
    }
    let ssh = body["metadata"]["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["key"] == "ssh-keys"))
        .and_then(|i| i["value"].as_str())
        .ok_or("no ssh-keys metadata")?;
    if !ssh.contains(":ssh-ed25519 ") {
        return Err(format!("ssh-keys {ssh}"));
    }
    body["labels"]["weft-node"]
        .as_str()
        .ok_or("no weft-node label")?;
    body["labels"]["weft-cluster"]
        .as_str()
        .ok_or("no weft-cluster label")?;
    Ok(())
}

async fn insert_instance(
    State(f): State<Shared>,
    Path((_p, _z)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &headers) {
        return r;
    }
    if let Err(e) = check_insert(&body) {
        return google_error(
            400,
            "invalid",
            &format!("Invalid value for field 'resource': {e}"),
        );
    }
    if let Err(message) = check_subnetwork(&f, &body["networkInterfaces"][0]) {
        return google_error(400, "invalid", &message);
    }
    if f.quota {
        return google_error(
            403,
            "quotaExceeded",
            "Quota 'CPUS' exceeded.  Limit: 8.0 in region us-central1.",
        );
    }
    let name = body["name"].as_str().unwrap().to_string();
    if f.instances.contains_key(&name) {
        return google_error(
            409,
            "alreadyExists",
            &format!(
                "The resource 'projects/weft-test/zones/{ZONE}/instances/{name}' already exists"
            ),
        );
    }
    f.inserts += 1;
    let n = f.inserts;
    let mut inst = body.clone();
    inst["kind"] = json!("compute#instance");
    inst["status"] = json!("PROVISIONING");
    inst["networkInterfaces"][0]["networkIP"] = json!(format!("10.128.0.{n}"));
    let nic = &mut inst["networkInterfaces"][0];
    if let Some(ac) = nic.get_mut("accessConfigs").and_then(|a| a.get_mut(0)) {
        ac["natIP"] = json!(format!("203.0.113.{n}"));
    }
    let failing = f.op_error.is_some();
    if !failing {
        f.instances.insert(name.clone(), (inst, 0));
    }
    if f.hide_new > 0 {
        let n = f.hide_new;
        f.hidden.insert(name.clone(), n);
    }
    let op = new_operation(&mut f, "insert", &name, None);
    f.inserted.notify_one();
    match f.lose.take() {
        None => Json(op).into_response(),
        Some(Loss::ServerError) => google_error(503, "backendError", "Internal error."),
        Some(Loss::Dropped) => {
            drop(f);
            crate::faults::hang_up()
        }
    }
}

/// What the API says of a network interface's subnetwork: required on a custom-mode network,
/// and in the zone's region when given.
fn check_subnetwork(f: &Fake, nic: &Value) -> Result<(), String> {
    let network = nic["network"].as_str().unwrap_or("");
    let network = network.rsplit('/').next().unwrap_or(network);
    match nic.get("subnetwork").and_then(Value::as_str) {
        None if f.custom_networks.contains(network) => Err(
            "Invalid value for field 'resource.networkInterfaces[0]': ''. Subnetwork should be \
             specified for custom subnetmode network"
                .into(),
        ),
        None => Ok(()),
        Some(sub) => {
            let region = sub
                .split("/regions/")
                .nth(1)
                .or_else(|| sub.strip_prefix("regions/"));
            match region.and_then(|r| r.split('/').next()) {
                Some("us-central1") => Ok(()),
                _ => Err(format!(
                    "Invalid value for field 'resource.networkInterfaces[0].subnetwork': '{sub}'. \
                     The referenced subnetwork resource cannot be found."
                )),
            }
        }
    }
}

/// instances.list: the instances matching a `labels.<key>:*` filter, `maxResults` (at most the
/// fake's page size) at a time, the next page's token in `nextPageToken`.
async fn list_instances(
    State(f): State<Shared>,
    Path((_p, _z)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &headers) {
        return r;
    }
    let has = q
        .get("filter")
        .and_then(|s| s.strip_prefix("labels.")?.strip_suffix(":*"));
    if q.contains_key("filter") && has.is_none() {
        return google_error(400, "invalid", "Invalid list filter expression.");
    }
    let sorted: BTreeMap<&String, &Value> = f
        .instances
        .iter()
        .map(|(k, (v, _))| (k, v))
        .filter(|(_, v)| has.is_none_or(|key| v["labels"].get(key).is_some()))
        .collect();
    let max: usize = q.get("maxResults").map_or(500, |m| m.parse().unwrap());
    let size = max.min(f.page_size.max(1)).min(500);
    let start: usize = q.get("pageToken").map_or(0, |t| t.parse().unwrap());
    let items: Vec<Value> = sorted
        .values()
        .skip(start)
        .take(size)
        .map(|v| (*v).clone())
        .collect();
    let mut body = json!({"kind": "compute#instanceList", "items": items});
    if start + size < sorted.len() {
        body["nextPageToken"] = json!((start + size).to_string());
    }
    Json(body).into_response()
}

async fn delete_instance(
    State(f): State<Shared>,
    Path((_p, _z, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &headers) {
        return r;
    }
    let Some((inst, gets)) = f.instances.get_mut(&name) else {
        return google_error(
            404,
            "notFound",
            &format!("The resource '{name}' was not found"),
        );
    };
    inst["status"] = json!("STOPPING");
    *gets = 0;
    Json(new_operation(&mut f, "delete", &name, Some(name.clone()))).into_response()
}

async fn get_operation(
    State(f): State<Shared>,
    Path((_p, _z, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &headers) {
        return r;
    }
    let (hold, op_error) = (f.hold_ops, f.op_error.clone());
    let Some((op, polls, deletes)) = f.operations.get_mut(&name) else {
        return google_error(
            404,
            "notFound",
            &format!("The resource '{name}' was not found"),
        );
    };
    *polls += 1;
    let status = match (*polls, hold) {
        (_, true) => "RUNNING",
        (1, _) => "PENDING",
        (2..=3, _) => "RUNNING",
        _ => "DONE",
    };
    op["status"] = json!(status);
    let mut gone = None;
    if status == "DONE" {
        op["progress"] = json!(100);
        if op["operationType"] == "insert" {
            if let Some((code, message)) = op_error {
                op["httpErrorStatusCode"] = json!(403);
                op["error"] = json!({"errors": [{"code": code, "message": message}]});
            }
        }
        gone = deletes.take();
    }
    let answer = op.clone();
    if let Some(g) = gone {
        f.instances.remove(&g);
    }
    Json(answer).into_response()
}

/// A fake on a free loopback port; answers its state and the provider fields that point at it.
async fn fake(account_key: &RsaPrivateKey) -> (Shared, Map<String, Value>) {
    let (state, base) = serve_fake().await;
    (state, fields_for(&base, account_key))
}

/// Serves a fake that trusts the account's key on a free loopback port; answers its state and
/// its base URL.
async fn serve_fake() -> (Shared, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state: Shared = Arc::new(Mutex::new(Fake {
        public: Some(RsaPublicKey::from(&keys().0)),
        token_uri: format!("{base}/token"),
        page_size: 500,
        ..Default::default()
    }));
    let zone = "/compute/v1/projects/{project}/zones/{zone}";
    let app = Router::new()
        .route("/token", post(token))
        .route(
            &format!("{zone}/instances"),
            post(insert_instance).get(list_instances),
        )
        .route(
            &format!("{zone}/instances/{{name}}"),
            get(get_instance).delete(delete_instance),
        )
        .route(&format!("{zone}/operations/{{name}}"), get(get_operation))
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, base)
}

/// The provider fields of the fake at `base`, signing with `account_key`.
fn fields_for(base: &str, account_key: &RsaPrivateKey) -> Map<String, Value> {
    let pem = account_key.to_pkcs8_pem(LineEnding::LF).unwrap();
    let json_key = json!({"type": "service_account", "project_id": "weft-test",
        "private_key_id": "0123abcd", "private_key": pem.as_str(), "client_email": EMAIL,
        "client_id": "1", "token_uri": format!("{base}/token")});
    let fields = json!({"json_key": json_key.to_string(), "zone": ZONE,
        "endpoint": format!("{base}/compute/v1"), "machine_type": "e2-small",
        "image": "projects/debian-cloud/global/images/family/debian-12"});
    fields.as_object().cloned().unwrap()
}

fn provider() -> GoogleProvider {
    GoogleProvider::new().with_timing(Timing {
        first: Duration::from_millis(1),
        max: Duration::from_millis(5),
        calls: Duration::from_secs(10),
        wait: Duration::from_secs(30),
    })
}

/// CONFIRM of node `n1` after its CREATE answered `created`: the addresses it answers.
async fn confirm_n1(
    p: &GoogleProvider,
    fields: &Map<String, Value>,
    created: weft_provisioner::task::TaskOutput,
) -> std::collections::BTreeMap<String, String> {
    let mut c = config(fields);
    c.extend(created.result);
    p.confirm(&task(Action::Confirm, "n1", c, Duration::from_secs(30)))
        .await
        .unwrap()
        .ipaddresses
        .unwrap()
}

fn config(fields: &Map<String, Value>) -> Map<String, Value> {
    let mut c = Map::new();
    c.insert(
        "provider".into(),
        json!({"name": "gce", "providertype": "google", "provisioner": fields}),
    );
    c.insert("flavor".into(), json!("e2-medium"));
    c
}

#[tokio::test]
async fn google_against_a_fake_from_the_api_reference_passes_the_provider_contract() {
    let (f, fields) = fake(&keys().0).await;
    contract::provider_contract(&provider(), fields, "node-g").await;
    let f = f.lock().unwrap();
    assert_eq!(f.inserts, 1, "one instance inserted");
    assert!(f.instances.is_empty(), "nothing left");
    assert_eq!(f.token_requests, 1, "the token is cached");
}

#[tokio::test]
async fn google_confirm_waits_for_running_and_answers_the_nat_ip() {
    let (f, fields) = fake(&keys().0).await;
    let p = provider();
    let timeout = Duration::from_secs(30);
    let out = p
        .create(&task(Action::Create, "n1", config(&fields), timeout))
        .await
        .unwrap();
    assert_eq!(out.result["providerid"], json!(instance_name("n1")));
    let inst = f.lock().unwrap().instances[&instance_name("n1")].0.clone();
    assert_eq!(
        inst["machineType"],
        json!(format!("zones/{ZONE}/machineTypes/e2-medium"))
    );
    assert_eq!(inst["labels"]["weft-node"], "n1");
    let ips = confirm_n1(&p, &fields, out).await;
    assert_eq!(ips["access_v4"], "203.0.113.1");
    assert_eq!(ips["bind_v4"], "10.128.0.1");
    assert!(
        f.lock().unwrap().instances[&instance_name("n1")].1 == 4,
        "confirm polled through PROVISIONING, STAGING, STAGING to RUNNING"
    );
}

#[tokio::test]
async fn google_renews_a_revoked_token_once() {
    let (f, fields) = fake(&keys().0).await;
    let p = provider();
    let t = task(
        Action::Delete,
        "n1",
        config(&fields),
        Duration::from_secs(30),
    );
    p.delete(&t).await.unwrap();
    f.lock().unwrap().revoke = true;
    p.delete(&t).await.unwrap();
    assert_eq!(f.lock().unwrap().token_requests, 2);
}

#[tokio::test]
/// The fault suite retries a CREATE whose answer was lost and finds the machine; here the retry
/// does not see it (a stale read) and meets 409 on insert, and still makes no second instance.
async fn google_create_killed_then_retried_past_a_stale_read_makes_one_instance() {
    let (f, fields) = fake(&keys().0).await;
    let p = Arc::new(provider());
    let inserted = {
        let mut g = f.lock().unwrap();
        g.hold_ops = true;
        g.inserted.clone()
    };
    let t = task(
        Action::Create,
        "n1",
        config(&fields),
        Duration::from_secs(30),
    );
    let resume = || {
        let mut g = f.lock().unwrap();
        g.hold_ops = false;
        g.stale_reads = 1;
    };
    let out = crate::faults::create_killed_after_the_launch(p, &t, inserted, resume).await;
    assert_eq!(out.result["providerid"], json!(instance_name("n1")));
    let g = f.lock().unwrap();
    assert_eq!((g.inserts, g.instances.len()), (1, 1), "one machine");
}

#[tokio::test]
/// 5xx answers are retried and quota errors are not (throttling is the fault suite's).
async fn google_retries_5xx_and_fails_a_quota_error_at_once() {
    let (f, fields) = fake(&keys().0).await;
    let p = provider();
    let t = |node: &str| {
        task(
            Action::Create,
            node,
            config(&fields),
            Duration::from_secs(30),
        )
    };
    f.lock().unwrap().faults = [Fault::Status(503), Fault::Status(500)].into();
    p.create(&t("n1")).await.unwrap();
    {
        let g = f.lock().unwrap();
        assert!(g.faults.is_empty());
        assert_eq!(g.inserts, 1);
    }

    f.lock().unwrap().quota = true;
    let e = p.create(&t("n2")).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(
        e.message.contains("quotaExceeded") && e.message.contains("CPUS"),
        "{e}"
    );

    {
        let mut g = f.lock().unwrap();
        g.quota = false;
        g.op_error = Some((
            "QUOTA_EXCEEDED".into(),
            "Quota 'SSD_TOTAL_GB' exceeded.".into(),
        ));
    }
    let e = p.create(&t("n3")).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(
        e.message.contains("QUOTA_EXCEEDED: Quota 'SSD_TOTAL_GB'"),
        "{e}"
    );
    assert_eq!(f.lock().unwrap().instances.len(), 1, "only n1 exists");
}

#[tokio::test]
async fn google_gives_up_on_endless_5xx_with_a_retryable_error() {
    let (f, fields) = fake(&keys().0).await;
    let p = GoogleProvider::new().with_timing(Timing {
        first: Duration::from_millis(1),
        max: Duration::from_millis(2),
        calls: Duration::from_millis(50),
        wait: Duration::from_millis(50),
    });
    f.lock().unwrap().faults = std::iter::repeat_n(Fault::Status(503), 10_000).collect();
    let e = p
        .delete(&task(
            Action::Delete,
            "n1",
            config(&fields),
            Duration::from_secs(30),
        ))
        .await
        .unwrap_err();
    assert!(e.retryable, "{e}");
    assert!(e.message.contains("backendError"), "{e}");
}

#[test]
fn google_credentials_are_sensitive_fields() {
    let t = GoogleProvider::new().plugin_type();
    let admin = &t.parameters[&weft_model::ParameterType::Admin];
    for (name, f) in &admin.fields {
        assert_eq!(
            f.sensitive,
            ["json_key", "sshkeyseed"].contains(&name.as_str()),
            "{name}"
        );
    }
}

#[tokio::test]
async fn google_a_custom_mode_network_needs_the_subnetwork_weft_now_sends() {
    let (f, mut fields) = fake(&keys().0).await;
    f.lock().unwrap().custom_networks.insert("prod-vpc".into());
    fields.insert("network".into(), json!("global/networks/prod-vpc"));
    let p = provider();
    let t = |fields: &Map<String, Value>| {
        task(
            Action::Create,
            "n1",
            config(fields),
            Duration::from_secs(30),
        )
    };
    let e = p.create(&t(&fields)).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(
        e.message.contains("invalid") && e.message.contains("Subnetwork should be specified"),
        "{e}"
    );
    assert_eq!(f.lock().unwrap().inserts, 0);
    // A subnetwork of another region is refused as well.
    fields.insert(
        "subnetwork".into(),
        json!("regions/europe-west1/subnetworks/apps"),
    );
    assert!(p.create(&t(&fields)).await.is_err());
    fields.insert("subnetwork".into(), json!("apps"));
    p.create(&t(&fields)).await.unwrap();
    let g = f.lock().unwrap();
    let nic = &g.instances[&instance_name("n1")].0["networkInterfaces"][0];
    assert_eq!(nic["subnetwork"], "regions/us-central1/subnetworks/apps");
    assert_eq!(nic["network"], "global/networks/prod-vpc");
}

#[tokio::test]
async fn google_network_tags_no_external_ip_and_the_tenant_label() {
    let (f, mut fields) = fake(&keys().0).await;
    fields.insert("tags".into(), json!("weft-ssh, weft-web"));
    fields.insert("external_ip".into(), json!("false"));
    let p = provider();
    let timeout = Duration::from_secs(30);
    let mut t = task(Action::Create, "n1", config(&fields), timeout);
    t.tenant_id = "Acme.Tenant_1".into();
    let out = p.create(&t).await.unwrap();
    {
        let g = f.lock().unwrap();
        let inst = &g.instances[&instance_name("n1")].0;
        assert_eq!(inst["tags"]["items"], json!(["weft-ssh", "weft-web"]));
        assert!(
            inst["networkInterfaces"][0].get("accessConfigs").is_none(),
            "no external address: {inst}"
        );
        assert_eq!(inst["labels"]["weft-tenant"], "acme-tenant_1");
    }
    let ips = confirm_n1(&p, &fields, out).await;
    assert_eq!(
        (ips["access_v4"].as_str(), ips["bind_v4"].as_str()),
        ("10.128.0.1", "10.128.0.1"),
        "SSH goes to the internal address"
    );
    for (field, value) in [("tags", "Web_Servers"), ("external_ip", "maybe")] {
        let mut bad = fields.clone();
        bad.insert(field.into(), json!(value));
        let e = p
            .create(&task(Action::Create, "n2", config(&bad), timeout))
            .await
            .unwrap_err();
        assert!(!e.retryable && e.message.contains(field), "{field}: {e}");
    }
    assert_eq!(
        f.lock().unwrap().inserts,
        1,
        "bad fields never reach the API"
    );
}

#[tokio::test]
async fn google_sweep_lists_labelled_instances_page_by_page() {
    let (f, fields) = fake(&keys().0).await;
    {
        let mut g = f.lock().unwrap();
        g.page_size = 2;
        for (name, labels) in [
            ("other-a", json!({"team": "x"})),
            ("other-b", json!({})),
            (
                "weft-rogue",
                json!({"weft-node": "rogue", "weft-cluster": "9", "weft-tenant": "t1"}),
            ),
            (
                "weft-live",
                json!({"weft-node": "live", "weft-cluster": "9", "weft-tenant": "t1"}),
            ),
            (
                "weft-theirs",
                json!({"weft-node": "theirs", "weft-cluster": "8", "weft-tenant": "t2"}),
            ),
        ] {
            let inst = json!({"name": name, "status": "RUNNING", "labels": labels});
            g.instances.insert(name.to_string(), (inst, 0));
        }
    }
    let p: Arc<dyn Provider> = Arc::new(provider());
    let mut nodes: Vec<String> = p
        .machines(&fields)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.node)
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["live", "rogue", "theirs"]);
    let req: weft_provisioner::sweep::SweepRequest = serde_json::from_value(json!({
        "providertype": "google", "fields": fields, "tenant": "t1", "live": ["live"],
        "delete": true}))
    .unwrap();
    let report = weft_provisioner::sweep::sweep(p, &req).await.unwrap();
    assert_eq!(report.machines.len(), 1, "{report:?}");
    assert_eq!(report.deleted, ["weft-rogue"]);
    let g = f.lock().unwrap();
    let mut left: Vec<&String> = g.instances.keys().collect();
    left.sort();
    assert_eq!(left, ["other-a", "other-b", "weft-live", "weft-theirs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_weft_provider_sweep_goes_through_the_server() {
    let (f, fields) = fake(&keys().0).await;
    let rogue = |tenant: &str| {
        let mut g = f.lock().unwrap();
        for (name, t) in [("weft-rogue", tenant), ("weft-foreign", "another-tenant")] {
            let labels = json!({"weft-node": name, "weft-cluster": "5", "weft-tenant": t});
            let inst = json!({"name": name, "status": "RUNNING", "labels": labels});
            g.instances.insert(name.to_string(), (inst, 0));
        }
    };
    let (found, deleted) =
        crate::sweep::through_the_server(Arc::new(provider()), "google", fields, rogue).await;
    assert_eq!(found, ["weft-rogue"], "only this tenant's orphan");
    assert_eq!(deleted, ["weft-rogue"], "{deleted:?}");
    let g = f.lock().unwrap();
    assert_eq!(g.instances.keys().collect::<Vec<_>>(), ["weft-foreign"]);
}

/// The fault suite's bench (`crate::faults`).
pub(crate) type Bench = crate::faults::RsaBench<Shared>;

impl CloudBench for Bench {
    const TYPE: &'static str = "google";

    async fn start() -> Option<Bench> {
        let (fake, base) = serve_fake().await;
        Some(Bench {
            fake,
            base,
            rotated: false,
        })
    }

    fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(provider())
    }

    fn fields(&self) -> Map<String, Value> {
        fields_for(&self.base, self.key(true))
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        fields_for(&self.base, self.key(false))
    }

    fn wrong_secret(&self) -> String {
        "PRIVATE KEY".into()
    }

    fn refusal(&self) -> &'static str {
        "invalid_grant"
    }

    fn auth_refusals(&self) -> usize {
        self.fake.lock().unwrap().refusals
    }

    /// The account's key is deleted and another added: the token endpoint trusts only the new
    /// one. Tokens already issued stay valid until they expire, as Google's do.
    async fn rotate(&mut self) {
        self.rotated = !self.rotated;
        self.fake.lock().unwrap().public = Some(RsaPublicKey::from(self.key(true)));
    }

    // Throttling: 429 and 403 `rateLimitExceeded`, in turn.
    crate::faults::fake_knobs!(Fault::Throttle, Fault::Throttle403);

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        let name = format!("rogue-{node}");
        let labels = json!({"weft-node": node, "weft-cluster": cluster, "weft-tenant": tenant});
        let inst = json!({"kind": "compute#instance", "name": name, "status": "RUNNING",
            "labels": labels});
        self.fake
            .lock()
            .unwrap()
            .instances
            .insert(name.clone(), (inst, 10));
        name
    }

    async fn count_machines(&self, node: &str) -> usize {
        self.fake
            .lock()
            .unwrap()
            .instances
            .values()
            .filter(|(i, _)| i["labels"]["weft-node"] == node && i["status"] != "STOPPING")
            .count()
    }
}
