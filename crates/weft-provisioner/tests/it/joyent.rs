//! The `joyent` provider against a fake of Triton CloudAPI served by the test on 127.0.0.1 and
//! written from the published API reference (ListMachines by name, CreateMachine, GetMachine,
//! DeleteMachine; HTTP Signature authentication). The fake verifies every request's signature
//! with the public half of the test's account key, looked up by the MD5 fingerprint in `keyId`: a
//! wrong key or a `Date` more than five minutes off is 401 `InvalidCredentials`. Machines go
//! `provisioning` then `running`; a deleted machine is 410. Switches inject 5xx, 429 and 420
//! answers, quota errors, stale lists and a create that never answers. Not tested against Triton.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::{Digest, Md5};
use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::signature::Verifier;
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, RsaPublicKey};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::PrivateKey;
use serde_json::{json, Map, Value};
use sha2::Sha256;
use weft_provisioner::contract::{self, task};
use weft_provisioner::joyent::{machine_name, JoyentProvider, Timing};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::google::keys;

const LOGIN: &str = "weft";
const ED_SEED: [u8; 32] = [42; 32];
const OLD_IMAGE: &str = "5a1b4bc8-0000-4a4b-8c59-b6a7c0d2f3e1";
const NEW_IMAGE: &str = "9e2c7d10-aaaa-4b5c-9d6e-0f1a2b3c4d5e";

/// A public key the fake knows, by kind.
#[derive(Clone)]
enum Public {
    Rsa(RsaPublicKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

fn ssh_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend(bytes);
}

fn ssh_mpint(out: &mut Vec<u8>, be: &[u8]) {
    let mut v = be.to_vec();
    if v.first().is_some_and(|b| b & 0x80 != 0) {
        v.insert(0, 0);
    }
    ssh_string(out, &v);
}

/// Triton's fingerprint of a public key: MD5 over its SSH wire form, colon-separated hex.
fn fingerprint(p: &Public) -> String {
    let mut blob = Vec::new();
    match p {
        Public::Rsa(k) => {
            ssh_string(&mut blob, b"ssh-rsa");
            ssh_mpint(&mut blob, &k.e().to_bytes_be());
            ssh_mpint(&mut blob, &k.n().to_bytes_be());
        }
        Public::Ed25519(k) => {
            ssh_string(&mut blob, b"ssh-ed25519");
            ssh_string(&mut blob, k.as_bytes());
        }
    }
    Md5::digest(&blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Clone, Copy)]
enum Fault {
    Status(u16),
    Throttle,
    SlowDown,
}

#[derive(Default)]
struct Fake {
    /// Registered account keys by fingerprint.
    keys: HashMap<String, Public>,
    /// Seconds the fake's clock is ahead of the real one.
    skew: i64,
    /// id -> (machine, GETs seen)
    machines: HashMap<String, (Value, u32)>,
    deleted: HashSet<String>,
    creates: usize,
    requests: usize,
    unauthorized: usize,
    faults: VecDeque<Fault>,
    quota: bool,
    /// This many ListMachines answer an empty list.
    stale_lists: u32,
    /// CreateMachine records the machine and then never answers.
    hold_create: bool,
    created: Arc<tokio::sync::Notify>,
}

type Shared = Arc<Mutex<Fake>>;

fn error(status: u16, code: &str, message: &str) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap(),
        Json(json!({"code": code, "message": message})),
    )
        .into_response();
    if status == 429 || status == 420 {
        r.headers_mut().insert("retry-after", "0".parse().unwrap());
    }
    r
}

/// The parameters of a `Signature` authorization header.
fn signature_params(value: &str) -> Option<HashMap<String, String>> {
    let rest = value.strip_prefix("Signature ")?;
    rest.split(',')
        .map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            Some((
                k.to_string(),
                v.strip_prefix('"')?.strip_suffix('"')?.to_string(),
            ))
        })
        .collect()
}

/// Checks a request's HTTP signature as CloudAPI does; `Err` is the reason for a 401.
fn authenticate(f: &Fake, login: &str, headers: &HeaderMap) -> Result<(), String> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let params = signature_params(h("authorization").ok_or("no authorization")?)
        .ok_or("not a Signature authorization")?;
    let key_id = &params["keyId"];
    let fp = key_id
        .strip_prefix(&format!("/{login}/keys/"))
        .ok_or("keyId is not this account's")?;
    let key = f.keys.get(fp).ok_or("unknown key")?;
    if params.get("headers").map(String::as_str).unwrap_or("date") != "date" {
        return Err("only the date header is signed here".into());
    }
    let date = h("date").ok_or("no date header")?;
    let when = httpdate::parse_http_date(date).map_err(|_| "bad date")?;
    let now = SystemTime::now() + Duration::from_secs(f.skew.max(0) as u64);
    let off = now
        .duration_since(when)
        .or_else(|_| when.duration_since(now))
        .unwrap();
    if off > Duration::from_secs(300) {
        return Err(format!("clock skew too great: {}s", off.as_secs()));
    }
    let sig = STANDARD
        .decode(params.get("signature").ok_or("no signature")?)
        .map_err(|_| "signature is not base64")?;
    let text = format!("date: {date}");
    let ok = match (key, params.get("algorithm").map(String::as_str)) {
        (Public::Rsa(k), Some("rsa-sha256")) => {
            Signature::try_from(sig.as_slice()).ok().is_some_and(|s| {
                VerifyingKey::<Sha256>::new(k.clone())
                    .verify(text.as_bytes(), &s)
                    .is_ok()
            })
        }
        (Public::Ed25519(k), Some("ed25519-sha512")) => ed25519_dalek::Signature::from_slice(&sig)
            .ok()
            .is_some_and(|s| k.verify_strict(text.as_bytes(), &s).is_ok()),
        _ => return Err("algorithm does not match the key".into()),
    };
    if ok {
        Ok(())
    } else {
        Err("signature does not verify".into())
    }
}

/// Authentication, then any injected fault.
fn gate(f: &mut Fake, login: &str, headers: &HeaderMap) -> Option<Response> {
    f.requests += 1;
    if let Err(why) = authenticate(f, login, headers) {
        f.unauthorized += 1;
        return Some(error(401, "InvalidCredentials", &why));
    }
    match f.faults.pop_front()? {
        Fault::Status(s) => Some(error(s, "InternalError", "internal error")),
        Fault::Throttle => Some(error(429, "RequestThrottled", "too many requests")),
        Fault::SlowDown => Some(error(420, "RequestThrottled", "slow down")),
    }
}

async fn list_machines(
    State(f): State<Shared>,
    Path(login): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    if f.stale_lists > 0 {
        f.stale_lists -= 1;
        return Json(json!([])).into_response();
    }
    let list: Vec<Value> = f
        .machines
        .values()
        .map(|(m, _)| m.clone())
        .filter(|m| q.get("name").is_none_or(|n| m["name"] == n.as_str()))
        .collect();
    Json(list).into_response()
}

/// ListImages by name and state: two versions of `debian-12` and another image.
async fn list_images(
    State(f): State<Shared>,
    Path(login): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    let images = [
        (OLD_IMAGE, "debian-12", "20240101", "2024-01-02T00:00:00Z"),
        (NEW_IMAGE, "debian-12", "20250101", "2025-01-02T00:00:00Z"),
        (
            "0c1e0f1d-1111-4a4b-8c59-b6a7c0d2f3e1",
            "base-64-lts",
            "24.4.0",
            "2025-03-01T00:00:00Z",
        ),
    ];
    let list: Vec<Value> = images
        .iter()
        .filter(|(_, name, _, _)| q.get("name").is_none_or(|n| n == name))
        .filter(|_| q.get("state").is_none_or(|s| s == "active"))
        .map(|(id, name, version, published)| {
            json!({"id": id, "name": name, "version": version, "state": "active",
                "type": "zvol", "published_at": published})
        })
        .collect();
    Json(list).into_response()
}

/// What CreateMachine requires and weft promises to send.
fn check_create(body: &Value) -> Result<(), String> {
    for k in [
        "name",
        "image",
        "package",
        "tag.weft-node",
        "tag.weft-cluster",
    ] {
        body[k].as_str().ok_or(format!("{k} is missing"))?;
    }
    let keys = body["metadata.root_authorized_keys"]
        .as_str()
        .ok_or("metadata.root_authorized_keys is missing")?;
    if !keys.starts_with("ssh-ed25519 ") {
        return Err(format!("root_authorized_keys {keys}"));
    }
    Ok(())
}

async fn create_machine(
    State(f): State<Shared>,
    Path(login): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let hold = {
        let mut f = f.lock().unwrap();
        if let Some(r) = gate(&mut f, &login, &headers) {
            return r;
        }
        if let Err(e) = check_create(&body) {
            return error(409, "InvalidArgument", &e);
        }
        if f.quota {
            return error(
                403,
                "QuotaExceeded",
                "You have exceeded your memory quota of 4096 MiB",
            );
        }
        let name = body["name"].as_str().unwrap();
        if f.machines.values().any(|(m, _)| m["name"] == name) {
            return error(
                409,
                "InvalidArgument",
                &format!("name: Machine name {name} is already in use"),
            );
        }
        f.creates += 1;
        let id = uuid::Uuid::new_v4().to_string();
        let tags: Map<String, Value> = body
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("tag.")?.to_string(), v.clone())))
            .collect();
        let m = json!({"id": id, "name": name, "type": "virtualmachine", "brand": "bhyve",
            "state": "provisioning", "image": body["image"], "package": body["package"],
            "memory": 1024, "disk": 25600, "ips": [], "primaryIp": null,
            "metadata": {"root_authorized_keys": body["metadata.root_authorized_keys"]},
            "tags": tags, "n": f.creates});
        f.machines.insert(id, (m.clone(), 0));
        f.created.notify_one();
        if !f.hold_create {
            return (StatusCode::CREATED, Json(m)).into_response();
        }
        true
    };
    if hold {
        std::future::pending::<()>().await;
    }
    unreachable!()
}

async fn get_machine(
    State(f): State<Shared>,
    Path((login, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    if f.deleted.contains(&id) {
        return error(410, "ResourceNotFound", "VM has been deleted");
    }
    let Some((m, gets)) = f.machines.get_mut(&id) else {
        return error(404, "ResourceNotFound", "VM not found");
    };
    *gets += 1;
    match m["state"].as_str().unwrap() {
        "provisioning" if *gets >= 3 => {
            let n = m["n"].as_u64().unwrap();
            m["state"] = json!("running");
            m["ips"] = json!([format!("203.0.113.{n}"), format!("10.88.0.{n}")]);
            m["primaryIp"] = json!(format!("203.0.113.{n}"));
        }
        "stopping" if *gets >= 2 => {
            f.machines.remove(&id);
            f.deleted.insert(id);
            return error(410, "ResourceNotFound", "VM has been deleted");
        }
        _ => {}
    }
    Json(m.clone()).into_response()
}

async fn delete_machine(
    State(f): State<Shared>,
    Path((login, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    if f.deleted.contains(&id) {
        return error(410, "ResourceNotFound", "VM has been deleted");
    }
    let Some((m, gets)) = f.machines.get_mut(&id) else {
        return error(404, "ResourceNotFound", "VM not found");
    };
    m["state"] = json!("stopping");
    *gets = 0;
    StatusCode::NO_CONTENT.into_response()
}

fn ed25519_text() -> String {
    PrivateKey::from(Ed25519Keypair::from_seed(&ED_SEED))
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .unwrap()
        .to_string()
}

/// A fake that knows the test's RSA and ed25519 account keys; answers its state and provider
/// fields that sign with `key_text`.
async fn fake(key_text: &str) -> (Shared, Map<String, Value>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut f = Fake::default();
    for p in [
        Public::Rsa(RsaPublicKey::from(&keys().0)),
        Public::Ed25519(ed25519_dalek::SigningKey::from_bytes(&ED_SEED).verifying_key()),
    ] {
        f.keys.insert(fingerprint(&p), p);
    }
    let state: Shared = Arc::new(Mutex::new(f));
    let app = Router::new()
        .route("/{login}/machines", get(list_machines).post(create_machine))
        .route("/{login}/images", get(list_images))
        .route(
            "/{login}/machines/{id}",
            get(get_machine).delete(delete_machine),
        )
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let fields = json!({"endpoint": base, "login": LOGIN, "key": key_text,
        "package": "g4-highcpu-1G", "image": OLD_IMAGE});
    (state, fields.as_object().cloned().unwrap())
}

fn rsa_text(k: &RsaPrivateKey) -> String {
    k.to_pkcs1_pem(LineEnding::LF).unwrap().to_string()
}

fn provider() -> JoyentProvider {
    JoyentProvider::new().with_timing(Timing {
        first: Duration::from_millis(1),
        max: Duration::from_millis(5),
        calls: Duration::from_secs(10),
        wait: Duration::from_secs(30),
    })
}

fn config(fields: &Map<String, Value>) -> Map<String, Value> {
    let mut c = Map::new();
    c.insert(
        "provider".into(),
        json!({"name": "triton", "providertype": "joyent", "provisioner": fields}),
    );
    c.insert("flavor".into(), json!("g4-highcpu-2G"));
    c.insert("image".into(), json!("debian-12"));
    c
}

#[tokio::test]
async fn joyent_against_a_fake_from_the_api_reference_passes_the_provider_contract() {
    for (kind, text) in [("rsa", rsa_text(&keys().0)), ("ed25519", ed25519_text())] {
        let (f, fields) = fake(&text).await;
        contract::provider_contract(&provider(), fields, "node-j").await;
        let f = f.lock().unwrap();
        assert_eq!(f.creates, 1, "{kind}: one machine made");
        assert!(f.machines.is_empty(), "{kind}: nothing left");
        assert_eq!(f.unauthorized, 0, "{kind}: every request was signed");
        assert!(f.requests > 8, "{kind}");
    }
}

#[tokio::test]
async fn joyent_confirm_waits_for_running_and_answers_both_addresses() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    let p = provider();
    let timeout = Duration::from_secs(30);
    let out = p
        .create(&task(Action::Create, "n1", config(&fields), timeout))
        .await
        .unwrap();
    let id = out.result["providerid"].as_str().unwrap().to_string();
    {
        let g = f.lock().unwrap();
        let m = &g.machines[&id].0;
        assert_eq!(m["name"], json!(machine_name("n1")));
        assert_eq!(
            m["package"], "g4-highcpu-2G",
            "the hardware type's flavor wins"
        );
        assert_eq!(m["tags"]["weft-node"], "n1");
    }
    let mut c = config(&fields);
    c.extend(out.result);
    let out = p
        .confirm(&task(Action::Confirm, "n1", c, timeout))
        .await
        .unwrap();
    let ips = out.ipaddresses.unwrap();
    assert_eq!(
        (ips["access_v4"].as_str(), ips["bind_v4"].as_str()),
        ("203.0.113.1", "10.88.0.1")
    );
    assert_eq!(
        f.lock().unwrap().machines[&id].1,
        3,
        "provisioning, provisioning, running"
    );
}

#[tokio::test]
async fn joyent_refuses_a_wrong_key_a_forged_key_id_and_a_stale_date() {
    let stranger = rsa_text(&keys().1);
    let (f, fields) = fake(&stranger).await;
    let registered = fingerprint(&Public::Rsa(RsaPublicKey::from(&keys().0)));
    let mut forged = fields.clone();
    forged.insert("key_id".into(), json!(registered));
    let (skewed, good) = fake(&rsa_text(&keys().0)).await;
    skewed.lock().unwrap().skew = 6 * 60;
    for (what, fields, fake) in [
        ("an unknown key", &fields, &f),
        ("a wrong key under a known keyId", &forged, &f),
        ("a date six minutes off", &good, &skewed),
    ] {
        let before = fake.lock().unwrap().unauthorized;
        let e = provider()
            .create(&task(
                Action::Create,
                "n1",
                config(fields),
                Duration::from_secs(30),
            ))
            .await
            .unwrap_err();
        assert!(!e.retryable, "{what}: {e}");
        assert!(e.message.contains("InvalidCredentials"), "{what}: {e}");
        assert!(!e.message.contains("PRIVATE KEY"), "{what}: {e}");
        let g = fake.lock().unwrap();
        assert_eq!(
            g.unauthorized,
            before + 1,
            "{what}: refused once, not retried"
        );
        assert_eq!(g.creates, 0, "{what}");
    }
}

#[tokio::test]
async fn joyent_create_killed_after_the_post_then_retried_makes_one_machine() {
    for stale in [0, 1] {
        let (f, fields) = fake(&rsa_text(&keys().0)).await;
        let p = Arc::new(provider());
        let created = {
            let mut g = f.lock().unwrap();
            g.hold_create = true;
            g.created.clone()
        };
        let t = task(
            Action::Create,
            "n1",
            config(&fields),
            Duration::from_secs(30),
        );
        let first = {
            let (p, t) = (p.clone(), t.clone());
            tokio::spawn(async move { p.create(&t).await })
        };
        created.notified().await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        {
            let mut g = f.lock().unwrap();
            g.hold_create = false;
            // A stale list hides the machine: the create meets the taken name instead.
            g.stale_lists = stale;
        }
        let out = p.create(&t).await.unwrap();
        let g = f.lock().unwrap();
        assert_eq!(
            (g.creates, g.machines.len()),
            (1, 1),
            "one machine (stale lists {stale})"
        );
        let id = g.machines.keys().next().unwrap();
        assert_eq!(out.result["providerid"], json!(id));
        assert!(out.stdout.contains("taking it over"), "{}", out.stdout);
    }
}

#[tokio::test]
async fn joyent_retries_5xx_429_and_420_and_fails_a_quota_error_at_once() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    let p = provider();
    let t = |node: &str| {
        task(
            Action::Create,
            node,
            config(&fields),
            Duration::from_secs(30),
        )
    };
    f.lock().unwrap().faults = [
        Fault::Status(503),
        Fault::Throttle,
        Fault::SlowDown,
        Fault::Status(500),
    ]
    .into();
    p.create(&t("n1")).await.unwrap();
    {
        let g = f.lock().unwrap();
        assert!(g.faults.is_empty());
        assert_eq!(g.creates, 1);
    }
    f.lock().unwrap().quota = true;
    let before = f.lock().unwrap().requests;
    let e = p.create(&t("n2")).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(
        e.message.contains("QuotaExceeded") && e.message.contains("memory quota"),
        "{e}"
    );
    let g = f.lock().unwrap();
    assert_eq!(
        g.requests,
        before + 3,
        "one list, one image look-up, one create: not retried"
    );
    assert_eq!(g.machines.len(), 1);
}

#[test]
fn joyent_credentials_are_sensitive_fields() {
    let t = JoyentProvider::new().plugin_type();
    let admin = &t.parameters[&weft_model::ParameterType::Admin];
    for (name, f) in &admin.fields {
        assert_eq!(
            f.sensitive,
            ["key", "sshkeyseed"].contains(&name.as_str()),
            "{name}"
        );
    }
}
