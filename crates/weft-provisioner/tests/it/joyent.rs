//! The `joyent` provider against a fake of Triton CloudAPI served by the test on 127.0.0.1 and
//! written from the published API reference and CloudAPI's source (`lib/machines.js`,
//! `lib/keys.js`, `lib/auth.js`): ListMachines by name and by tag, page by page; CreateMachine,
//! GetMachine, DeleteMachine; CreateKey, GetKey, DeleteKey for the account and a sub-user; HTTP
//! Signature authentication. The fake verifies every request's signature (RSA, ed25519, ECDSA
//! in ASN.1 DER) with the public half of a key it holds for the account or the sub-user named in
//! `keyId`, looked up by MD5 fingerprint: a wrong key or a `Date` more than five minutes off is
//! 401 `InvalidCredentials`. As CloudAPI does, CreateMachine ignores any `root_authorized_keys`
//! in the request and writes the account's keys (and those of sub-users who are default members
//! of the `administrator` role); CreateKey answers 409 `InvalidArgument` for a key it already
//! holds. Machines go `provisioning` then `running`; a deleted machine is 410. Switches inject
//! 5xx, 429 and 420 answers, quota errors, stale lists, a create that never answers or whose
//! answer is lost, and new machines that are 404 at first. Not tested against Triton.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::contract::{self, task};
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
use russh::keys::ssh_key::{Algorithm, EcdsaCurve, PrivateKey, PublicKey};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use weft_provisioner::joyent::{key_name, machine_name, JoyentProvider, Timing};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::faults::{Call, CloudBench, Loss};
use crate::google::keys;

const LOGIN: &str = "weft";
const ED_SEED: [u8; 32] = [42; 32];
const OLD_IMAGE: &str = "5a1b4bc8-0000-4a4b-8c59-b6a7c0d2f3e1";
const NEW_IMAGE: &str = "9e2c7d10-aaaa-4b5c-9d6e-0f1a2b3c4d5e";

/// A P-256 key made with `ssh-keygen -t ecdsa -b 256` for these tests only.
const P256_TEXT: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAaAAAABNlY2RzYS
1zaGEyLW5pc3RwMjU2AAAACG5pc3RwMjU2AAAAQQSZ9MqgxVeO0trVkZ4fTMUM9dP0iiq1
R9Loyex80pldMTuMukE9U/dqVLaNEatlzQdsbdx2uAiZwenvqObm009wAAAAoLOj5syzo+
bMAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBJn0yqDFV47S2tWR
nh9MxQz10/SKKrVH0ujJ7HzSmV0xO4y6QT1T92pUto0Rq2XNB2xt3Ha4CJnB6e+o5ubTT3
AAAAAgXtEqZG8Hl9mWnonJI6d5lPiv5Ao0Ov/HpLBQHQz77uIAAAAEdGVzdAECAwQ=
-----END OPENSSH PRIVATE KEY-----
";

/// A public key the fake knows, by kind.
#[derive(Clone)]
enum Public {
    Rsa(RsaPublicKey),
    Ed25519(ed25519_dalek::VerifyingKey),
    Ecdsa(PublicKey),
}

/// An SSH key record as CloudAPI keeps it (`name`, `fingerprint`, `key`).
#[derive(Clone)]
struct KeyRecord {
    name: String,
    fingerprint: String,
    openssh: String,
}

impl KeyRecord {
    fn json(&self) -> Value {
        json!({"name": self.name, "fingerprint": self.fingerprint, "key": self.openssh})
    }
}

/// The MD5 fingerprint of an OpenSSH public key line (over its base64 blob), if it is one.
fn line_fingerprint(line: &str) -> Option<String> {
    let blob = STANDARD.decode(line.split_whitespace().nth(1)?).ok()?;
    Some(md5_hex(&blob))
}

fn md5_hex(blob: &[u8]) -> String {
    Md5::digest(blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Reads a DER `SEQUENCE { INTEGER r, INTEGER s }` (short lengths) into an SSH ECDSA
/// signature blob (two mpints).
fn der_to_ssh(der: &[u8]) -> Option<Vec<u8>> {
    let (&[0x30, len], rest) = der.split_first_chunk::<2>()? else {
        return None;
    };
    if rest.len() != len as usize {
        return None;
    }
    let mut out = Vec::new();
    let mut rest = rest;
    for _ in 0..2 {
        let (&[0x02, n], tail) = rest.split_first_chunk::<2>()? else {
            return None;
        };
        let (int, tail) = tail.split_at_checked(n as usize)?;
        ssh_string(&mut out, int);
        rest = tail;
    }
    rest.is_empty().then_some(out)
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
        Public::Ecdsa(k) => blob = k.to_bytes().unwrap(),
    }
    md5_hex(&blob)
}

#[derive(Clone, Copy)]
enum Fault {
    Status(u16),
    Throttle,
    SlowDown,
}

#[derive(Default)]
pub(crate) struct Fake {
    /// Keys requests may be signed with, by (owner, fingerprint): owner "" is the account,
    /// otherwise a sub-user's login.
    keys: HashMap<(String, String), Public>,
    /// The account's SSH keys (CreateKey, ListKeys...).
    account_keys: Vec<KeyRecord>,
    /// Sub-users' SSH keys by login.
    user_keys: HashMap<String, Vec<KeyRecord>>,
    /// Sub-users who are default members of the account's `administrator` role.
    admin_members: HashSet<String>,
    /// This many GetKeys answer 404 whatever exists (a stale read).
    stale_key_reads: u32,
    /// Every CreateMachine body received.
    create_bodies: Vec<Value>,
    /// The next CreateMachine finds only the test's own keys on the account.
    forget_keys_at_create: bool,
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
    /// Every call that passed authentication, and whether it was throttled.
    calls: Vec<Call>,
    /// The next CreateMachine makes its machine and its answer is lost so.
    lose: Option<Loss>,
    /// Machines made from now on answer 404 to this many GetMachines.
    hide_new: usize,
    /// GetMachines each machine still answers 404 to, by id.
    hidden: HashMap<String, usize>,
    /// GetMachines answered 404 for a hidden machine.
    hidden_answers: usize,
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
    let key_id = params.get("keyId").ok_or("no keyId")?;
    let parts: Vec<&str> = key_id.split('/').collect();
    let (owner, fp) = match parts[..] {
        ["", l, "keys", fp] if l == login => ("", fp),
        ["", l, "users", u, "keys", fp] if l == login => (u, fp),
        _ => return Err("keyId is not this account's".into()),
    };
    let key = f
        .keys
        .get(&(owner.to_string(), fp.to_string()))
        .ok_or("unknown key")?;
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
        (Public::Ecdsa(k), Some(alg)) if ecdsa_alg(k) == Some(alg) => der_to_ssh(&sig)
            .and_then(|blob| russh::keys::ssh_key::Signature::new(k.algorithm(), blob).ok())
            .is_some_and(|s| {
                russh::keys::signature::Verifier::verify(k, text.as_bytes(), &s).is_ok()
            }),
        _ => return Err("algorithm does not match the key".into()),
    };
    if ok {
        Ok(())
    } else {
        Err("signature does not verify".into())
    }
}

/// The http-signature algorithm of an ECDSA key.
fn ecdsa_alg(k: &PublicKey) -> Option<&'static str> {
    match k.algorithm() {
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256,
        } => Some("ecdsa-sha256"),
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP384,
        } => Some("ecdsa-sha384"),
        _ => None,
    }
}

/// Authentication, then any injected fault.
fn gate(f: &mut Fake, login: &str, headers: &HeaderMap) -> Option<Response> {
    f.requests += 1;
    if let Err(why) = authenticate(f, login, headers) {
        f.unauthorized += 1;
        return Some(error(401, "InvalidCredentials", &why));
    }
    let fault = f.faults.pop_front();
    f.calls.push(Call::now(matches!(
        fault,
        Some(Fault::Throttle | Fault::SlowDown)
    )));
    match fault? {
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
    let mut list: Vec<Value> = f
        .machines
        .values()
        .map(|(m, _)| m.clone())
        .filter(|m| q.get("name").is_none_or(|n| m["name"] == n.as_str()))
        .filter(|m| {
            q.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("tag.")?, v)))
                .all(|(k, v)| m["tags"][k] == v.as_str())
        })
        .collect();
    list.sort_by_key(|m| m["n"].as_u64());
    let offset: usize = q.get("offset").map_or(0, |o| o.parse().unwrap());
    let limit: usize = q.get("limit").map_or(1000, |l| l.parse().unwrap());
    let page: Vec<Value> = list
        .into_iter()
        .skip(offset)
        .take(limit.min(1000))
        .collect();
    Json(page).into_response()
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
        "tag.weft-tenant",
    ] {
        body[k].as_str().ok_or(format!("{k} is missing"))?;
    }
    Ok(())
}

/// What `loadSSHKeys` writes into a new machine: the account's keys, then those of sub-users
/// who are default members of the `administrator` role; whatever the request said.
fn root_authorized_keys(f: &Fake) -> String {
    let mut members: Vec<&String> = f.admin_members.iter().collect();
    members.sort();
    let users = members
        .into_iter()
        .flat_map(|u| f.user_keys.get(u).into_iter().flatten());
    f.account_keys
        .iter()
        .chain(users)
        .map(|k| format!("{}\n", k.openssh))
        .collect()
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
        f.create_bodies.push(body.clone());
        if f.forget_keys_at_create {
            // Another node's DELETE took the cluster key away just before this create.
            f.forget_keys_at_create = false;
            f.account_keys.retain(|k| k.name.starts_with("admin-"));
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
            "metadata": {"root_authorized_keys": root_authorized_keys(&f)},
            "tags": tags, "n": f.creates});
        f.machines.insert(id.clone(), (m.clone(), 0));
        if f.hide_new > 0 {
            let n = f.hide_new;
            f.hidden.insert(id, n);
        }
        f.created.notify_one();
        match f.lose.take() {
            Some(Loss::ServerError) => return error(500, "InternalError", "internal error"),
            Some(Loss::Dropped) => {
                drop(f);
                crate::faults::hang_up()
            }
            None => {}
        }
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
    if let Some(left) = f.hidden.get_mut(&id).filter(|l| **l > 0) {
        *left -= 1;
        f.hidden_answers += 1;
        return error(404, "ResourceNotFound", "VM not found");
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

/// The key list of `user` (the account when `None`).
fn key_list<'a>(f: &'a mut Fake, user: Option<&str>) -> &'a mut Vec<KeyRecord> {
    match user {
        Some(u) => f.user_keys.entry(u.to_string()).or_default(),
        None => &mut f.account_keys,
    }
}

/// CreateKey / CreateUserKey, as `lib/keys.js` answers it.
fn create_key(f: &mut Fake, user: Option<&str>, body: &Value) -> Response {
    let Some(line) = body["key"].as_str() else {
        return error(409, "MissingParameter", "key is a required argument");
    };
    let Some(fp) = line_fingerprint(line) else {
        return error(409, "InvalidArgument", "key is invalid");
    };
    let list = key_list(f, user);
    if list.iter().any(|k| k.fingerprint == fp) {
        // UFDS refuses a second key of one fingerprint; CloudAPI says so this way.
        return error(409, "InvalidArgument", "key already exists or is invalid");
    }
    let rec = KeyRecord {
        name: body["name"].as_str().unwrap_or(&fp).to_string(),
        fingerprint: fp,
        openssh: line.to_string(),
    };
    list.push(rec.clone());
    (StatusCode::CREATED, Json(rec.json())).into_response()
}

/// GetKey or DeleteKey by name or fingerprint.
fn get_or_delete_key(f: &mut Fake, user: Option<&str>, id: &str, delete: bool) -> Response {
    if !delete && f.stale_key_reads > 0 {
        f.stale_key_reads -= 1;
        return error(404, "ResourceNotFound", &format!("{id} does not exist"));
    }
    let list = key_list(f, user);
    let Some(at) = list
        .iter()
        .position(|k| k.name == id || k.fingerprint == id)
    else {
        return error(404, "ResourceNotFound", &format!("{id} does not exist"));
    };
    if delete {
        list.remove(at);
        StatusCode::NO_CONTENT.into_response()
    } else {
        Json(list[at].json()).into_response()
    }
}

async fn list_keys(
    State(f): State<Shared>,
    Path(login): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    Json(
        f.account_keys
            .iter()
            .map(KeyRecord::json)
            .collect::<Vec<_>>(),
    )
    .into_response()
}

async fn list_user_keys(
    State(f): State<Shared>,
    Path((login, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    if let Some(r) = gate(&mut f, &login, &headers) {
        return r;
    }
    let list = key_list(&mut f, Some(&user));
    Json(list.iter().map(KeyRecord::json).collect::<Vec<_>>()).into_response()
}

async fn post_key(
    State(f): State<Shared>,
    Path(login): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut f = f.lock().unwrap();
    gate(&mut f, &login, &headers).unwrap_or_else(|| create_key(&mut f, None, &body))
}

async fn post_user_key(
    State(f): State<Shared>,
    Path((login, user)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut f = f.lock().unwrap();
    gate(&mut f, &login, &headers).unwrap_or_else(|| create_key(&mut f, Some(&user), &body))
}

async fn one_key(
    State(f): State<Shared>,
    method: axum::http::Method,
    Path((login, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    let delete = method == axum::http::Method::DELETE;
    gate(&mut f, &login, &headers).unwrap_or_else(|| get_or_delete_key(&mut f, None, &id, delete))
}

async fn one_user_key(
    State(f): State<Shared>,
    method: axum::http::Method,
    Path((login, user, id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut f = f.lock().unwrap();
    let delete = method == axum::http::Method::DELETE;
    gate(&mut f, &login, &headers)
        .unwrap_or_else(|| get_or_delete_key(&mut f, Some(&user), &id, delete))
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
    let ecdsa = russh::keys::decode_secret_key(P256_TEXT, None).unwrap();
    for (p, line) in [
        (
            Public::Rsa(RsaPublicKey::from(&keys().0)),
            "ssh-rsa AAAA-the-account-s-rsa-key",
        ),
        (
            Public::Ed25519(ed25519_dalek::SigningKey::from_bytes(&ED_SEED).verifying_key()),
            "ssh-ed25519 AAAA-the-account-s-ed25519-key",
        ),
        (
            Public::Ecdsa(ecdsa.public_key().clone()),
            "ecdsa-sha2-nistp256 AAAA-the-account-s-ecdsa-key",
        ),
    ] {
        let fp = fingerprint(&p);
        f.keys.insert((String::new(), fp.clone()), p);
        f.account_keys.push(KeyRecord {
            name: format!("admin-{}", f.account_keys.len()),
            fingerprint: fp,
            openssh: line.into(),
        });
    }
    let state: Shared = Arc::new(Mutex::new(f));
    let app = Router::new()
        .route("/{login}/machines", get(list_machines).post(create_machine))
        .route("/{login}/images", get(list_images))
        .route(
            "/{login}/machines/{id}",
            get(get_machine).delete(delete_machine),
        )
        .route("/{login}/keys", get(list_keys).post(post_key))
        .route("/{login}/keys/{id}", get(one_key).delete(one_key))
        .route(
            "/{login}/users/{user}/keys",
            get(list_user_keys).post(post_user_key),
        )
        .route(
            "/{login}/users/{user}/keys/{id}",
            get(one_user_key).delete(one_user_key),
        )
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, fields_for(&base, key_text))
}

/// The provider fields of the fake at `base`, signing with `key_text`.
fn fields_for(base: &str, key_text: &str) -> Map<String, Value> {
    let fields = json!({"endpoint": base, "login": LOGIN, "key": key_text,
        "package": "g4-highcpu-1G", "image": OLD_IMAGE});
    fields.as_object().cloned().unwrap()
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

/// A CREATE of `node` with the provider `fields`.
fn create_task(fields: &Map<String, Value>, node: &str) -> weft_provisioner::task::Task {
    task(
        Action::Create,
        node,
        config(fields),
        Duration::from_secs(30),
    )
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
    for (kind, text) in [
        ("rsa", rsa_text(&keys().0)),
        ("ed25519", ed25519_text()),
        ("ecdsa", P256_TEXT.to_string()),
    ] {
        let (f, fields) = fake(&text).await;
        contract::provider_contract(&provider(), fields, "node-j").await;
        let f = f.lock().unwrap();
        assert_eq!(f.creates, 1, "{kind}: one machine made");
        assert!(f.machines.is_empty(), "{kind}: nothing left");
        assert_eq!(
            f.account_keys.len(),
            3,
            "{kind}: the cluster key went with the cluster"
        );
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
/// The fault suite retries a CREATE whose answer was lost and finds the machine; here the retry
/// does not see it (a stale list) and meets the taken name, and still makes no second machine.
async fn joyent_create_killed_then_retried_past_a_stale_list_makes_one_machine() {
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
    let resume = || {
        let mut g = f.lock().unwrap();
        g.hold_create = false;
        g.stale_lists = 1;
    };
    let out = crate::faults::create_killed_after_the_launch(p, &t, created, resume).await;
    let g = f.lock().unwrap();
    assert_eq!((g.creates, g.machines.len()), (1, 1), "one machine");
    let id = g.machines.keys().next().unwrap();
    assert_eq!(out.result["providerid"], json!(id));
}

#[tokio::test]
/// 5xx answers are retried and quota errors are not (throttling is the fault suite's).
async fn joyent_retries_5xx_and_fails_a_quota_error_at_once() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    let p = provider();
    let t = |node: &str| create_task(&fields, node);
    f.lock().unwrap().faults = [Fault::Status(503), Fault::Status(500)].into();
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
        before + 4,
        "one image look-up, one key look-up, one list, one create: not retried"
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

/// The OpenSSH public line of the private key a CREATE answered in `ssh-auth`.
fn answered_public(out: &weft_provisioner::task::TaskOutput) -> String {
    let private = out.result["ssh-auth"]["key"].as_str().unwrap();
    russh::keys::decode_secret_key(private, None)
        .unwrap()
        .public_key()
        .to_openssh()
        .unwrap()
}

/// Whether `list` holds a key with the blob of `public`.
fn holds(list: &[KeyRecord], public: &str) -> bool {
    list.iter()
        .any(|k| line_fingerprint(&k.openssh) == line_fingerprint(public))
}

fn written_keys(m: &Value) -> Vec<Option<String>> {
    m["metadata"]["root_authorized_keys"]
        .as_str()
        .unwrap()
        .lines()
        .map(line_fingerprint)
        .collect()
}

#[tokio::test]
async fn joyent_machines_get_the_cluster_key_only_through_the_account_s_keys() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    let p = provider();
    let timeout = Duration::from_secs(30);
    let mut outs = Vec::new();
    for node in ["n1", "n2"] {
        let t = task(Action::Create, node, config(&fields), timeout);
        outs.push(p.create(&t).await.unwrap());
    }
    let public = answered_public(&outs[0]);
    assert_eq!(answered_public(&outs[1]), public, "one key per cluster");
    {
        let g = f.lock().unwrap();
        assert!(
            g.create_bodies
                .iter()
                .all(|b| b.get("metadata.root_authorized_keys").is_none()),
            "no key is sent where CloudAPI would overwrite it"
        );
        let weft: Vec<&KeyRecord> = g
            .account_keys
            .iter()
            .filter(|k| !k.name.starts_with("admin-"))
            .collect();
        assert_eq!(weft.len(), 1, "added once");
        assert_eq!(weft[0].name, key_name("", "contract"));
        assert!(holds(&g.account_keys, &public));
        assert_eq!(g.machines.len(), 2);
        for (m, _) in g.machines.values() {
            assert!(written_keys(m).contains(&line_fingerprint(&public)), "{m}");
        }
    }
    // The first delete leaves the key to the second node; the second takes it away.
    for (i, node) in ["n1", "n2"].into_iter().enumerate() {
        let mut c = config(&fields);
        c.extend(outs[i].result.clone());
        let out = p
            .delete(&task(Action::Delete, node, c, timeout))
            .await
            .unwrap();
        let held = holds(&f.lock().unwrap().account_keys, &public);
        assert_eq!(held, i == 0, "after deleting {node}: {}", out.stdout);
    }
    assert_eq!(
        f.lock().unwrap().account_keys.len(),
        3,
        "the test's own keys stay"
    );
}

#[tokio::test]
async fn joyent_a_key_already_held_is_kept_and_a_key_lost_meanwhile_is_retried() {
    let (f, fields) = fake(&ed25519_text()).await;
    let p = provider();
    let t = |node: &str| create_task(&fields, node);
    let first = p.create(&t("n1")).await.unwrap();
    // A stale GetKey: the POST meets "already exists" and the key is found on a second look.
    f.lock().unwrap().stale_key_reads = 1;
    p.create(&t("n2")).await.unwrap();
    let public = answered_public(&first);
    {
        let g = f.lock().unwrap();
        assert_eq!(g.account_keys.len(), 4, "one cluster key, not two");
        assert_eq!(g.stale_key_reads, 0);
    }
    // The key vanishes between its check and the machine: that machine is deleted, the
    // CREATE fails retryably, and its retry adds the key again.
    f.lock().unwrap().forget_keys_at_create = true;
    let e = p.create(&t("n3")).await.unwrap_err();
    assert!(e.retryable, "{e}");
    assert!(e.message.contains("off the account"), "{e}");
    assert_eq!(
        f.lock().unwrap().machines.len(),
        2,
        "the keyless machine was deleted"
    );
    p.create(&t("n3")).await.unwrap();
    let g = f.lock().unwrap();
    assert!(holds(&g.account_keys, &public));
    let n3 = g
        .machines
        .values()
        .find(|(m, _)| m["name"] == machine_name("n3"))
        .unwrap();
    assert!(written_keys(&n3.0).contains(&line_fingerprint(&public)));
}

#[tokio::test]
async fn joyent_a_sub_user_signs_as_itself_and_its_key_needs_the_administrator_role() {
    let (f, mut fields) = fake(&ed25519_text()).await;
    fields.insert("user".into(), json!("ops"));
    {
        // The sub-user holds the ed25519 key; the account's copy is removed.
        let mut g = f.lock().unwrap();
        let ed = Public::Ed25519(ed25519_dalek::SigningKey::from_bytes(&ED_SEED).verifying_key());
        let fp = fingerprint(&ed);
        g.keys.remove(&(String::new(), fp.clone()));
        g.keys.insert(("ops".into(), fp), ed);
    }
    let p = provider();
    let t = |node: &str| create_task(&fields, node);
    let e = p.create(&t("n1")).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("administrator role"), "{e}");
    {
        let g = f.lock().unwrap();
        assert_eq!(
            g.unauthorized, 0,
            "every request was signed as the sub-user"
        );
        assert!(g.machines.is_empty(), "the keyless machine was deleted");
        assert_eq!(g.user_keys["ops"].len(), 1, "the key went to the sub-user");
        assert_eq!(g.account_keys.len(), 3, "not to the account");
    }
    f.lock().unwrap().admin_members.insert("ops".into());
    let out = p.create(&t("n1")).await.unwrap();
    let public = answered_public(&out);
    {
        let g = f.lock().unwrap();
        let (m, _) = g.machines.values().next().unwrap();
        assert!(written_keys(m).contains(&line_fingerprint(&public)));
    }
    let mut c = config(&fields);
    c.extend(out.result);
    p.delete(&task(Action::Delete, "n1", c, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        f.lock().unwrap().user_keys["ops"].is_empty(),
        "the key is gone"
    );
}

#[tokio::test]
async fn joyent_sweep_finds_machines_with_weft_s_marks_over_several_pages() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    {
        let mut g = f.lock().unwrap();
        // 1,000 machines of others, then ours: the sweep has to read a second page.
        for n in 0..1002u64 {
            let tags = match n {
                1000 => json!({"weft-node": "rogue", "weft-cluster": "9", "weft-tenant": "t1"}),
                1001 => json!({"weft-node": "theirs", "weft-cluster": "8", "weft-tenant": "t2"}),
                _ => json!({"owner": "someone"}),
            };
            let id = uuid::Uuid::new_v4().to_string();
            let m = json!({"id": id, "name": format!("m{n}"), "state": "running",
                "tags": tags, "n": n + 1, "metadata": {}});
            g.machines.insert(id, (m, 0));
        }
    }
    let p: Arc<dyn Provider> = Arc::new(provider());
    let found = p.machines(&fields).await.unwrap();
    let mut nodes: Vec<&str> = found.iter().map(|m| m.node.as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["rogue", "theirs"]);
    let req: weft_provisioner::sweep::SweepRequest = serde_json::from_value(json!({
        "providertype": "joyent", "fields": fields, "tenant": "t1", "delete": true}))
    .unwrap();
    let report = weft_provisioner::sweep::sweep(p, &req).await.unwrap();
    assert_eq!(report.machines.len(), 1, "{report:?}");
    assert_eq!(report.machines[0].node, "rogue");
    assert_eq!(report.deleted, vec![report.machines[0].providerid.clone()]);
    let g = f.lock().unwrap();
    assert_eq!(g.machines.len(), 1001, "only the orphan of t1 went");
    assert!(g
        .machines
        .values()
        .all(|(m, _)| m["tags"]["weft-node"] != "rogue"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joyent_weft_provider_sweep_goes_through_the_server() {
    let (f, fields) = fake(&rsa_text(&keys().0)).await;
    let ids = Arc::new(Mutex::new(Vec::new()));
    let rogue = |tenant: &str| {
        let mut g = f.lock().unwrap();
        for (node, t) in [("rogue", tenant), ("foreign", "another-tenant")] {
            let id = uuid::Uuid::new_v4().to_string();
            let tags = json!({"weft-node": node, "weft-cluster": "5", "weft-tenant": t});
            let m = json!({"id": id, "name": format!("weft-{node}"), "state": "running",
                "tags": tags, "n": g.machines.len() + 1, "metadata": {}});
            g.machines.insert(id.clone(), (m, 0));
            ids.lock().unwrap().push(id);
        }
    };
    let (found, deleted) =
        crate::sweep::through_the_server(Arc::new(provider()), "joyent", fields, rogue).await;
    let ids = ids.lock().unwrap().clone();
    assert_eq!(found, [ids[0].as_str()], "only this tenant's orphan");
    assert_eq!(deleted, [ids[0].clone()], "{deleted:?}");
    let g = f.lock().unwrap();
    assert_eq!(
        g.machines.keys().collect::<Vec<_>>(),
        [&ids[1]],
        "the other tenant's stays"
    );
    assert_eq!(g.unauthorized, 0, "the server sent the key the fake knows");
}

#[tokio::test]
async fn joyent_a_cluster_key_made_before_the_account_key_changed_goes_with_the_cluster() {
    let (f, rsa_fields) = fake(&rsa_text(&keys().0)).await;
    let p = provider();
    let out = p.create(&create_task(&rsa_fields, "n1")).await.unwrap();
    let old = answered_public(&out);
    // The provider's account key is rotated: the cluster key now derives differently.
    let mut ed_fields = rsa_fields.clone();
    ed_fields.insert("key".into(), json!(ed25519_text()));
    let out2 = p.create(&create_task(&ed_fields, "n2")).await.unwrap();
    let new = answered_public(&out2);
    assert_ne!(old, new);
    assert_eq!(f.lock().unwrap().account_keys.len(), 5, "two cluster keys");
    for (node, out) in [("n1", out), ("n2", out2)] {
        let mut c = config(&ed_fields);
        c.extend(out.result);
        p.delete(&task(Action::Delete, node, c, Duration::from_secs(30)))
            .await
            .unwrap();
    }
    let g = f.lock().unwrap();
    assert!(!holds(&g.account_keys, &old) && !holds(&g.account_keys, &new));
    assert_eq!(g.account_keys.len(), 3, "only the test's own keys are left");
}

/// The fault suite's bench (`crate::faults`).
pub(crate) type Bench = crate::faults::RsaBench<Shared>;

impl CloudBench for Bench {
    const TYPE: &'static str = "joyent";

    async fn start() -> Option<Bench> {
        let (fake, fields) = fake(&rsa_text(&keys().0)).await;
        let base = fields["endpoint"].as_str().unwrap().to_string();
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
        fields_for(&self.base, &rsa_text(self.key(true)))
    }

    fn node_config(&self) -> Map<String, Value> {
        let mut c = config(&Map::new());
        c.remove("provider");
        c
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        fields_for(&self.base, &rsa_text(self.key(false)))
    }

    fn wrong_secret(&self) -> String {
        "PRIVATE KEY".into()
    }

    fn refusal(&self) -> &'static str {
        "InvalidCredentials"
    }

    fn auth_refusals(&self) -> usize {
        self.fake.lock().unwrap().unauthorized
    }

    /// The account's RSA key is deleted and another added (CloudAPI's DeleteKey, CreateKey):
    /// requests signed with the old one are refused from then on.
    async fn rotate(&mut self) {
        let old = fingerprint(&Public::Rsa(RsaPublicKey::from(self.key(true))));
        self.rotated = !self.rotated;
        let new = Public::Rsa(RsaPublicKey::from(self.key(true)));
        let mut f = self.fake.lock().unwrap();
        f.keys.remove(&(String::new(), old));
        f.keys.insert((String::new(), fingerprint(&new)), new);
    }

    // Throttling: 429 and 420 `RequestThrottled`, in turn.
    crate::faults::fake_knobs!(Fault::Throttle, Fault::SlowDown);

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        let mut f = self.fake.lock().unwrap();
        let id = uuid::Uuid::new_v4().to_string();
        let n = 100 + f.machines.len();
        let m = json!({"id": id, "name": format!("rogue-{node}"), "type": "virtualmachine",
            "brand": "bhyve", "state": "running", "image": OLD_IMAGE, "package": "g4-highcpu-1G",
            "memory": 1024, "disk": 25600, "ips": [format!("203.0.113.{n}")],
            "primaryIp": format!("203.0.113.{n}"), "metadata": {},
            "tags": {"weft-node": node, "weft-cluster": cluster, "weft-tenant": tenant}, "n": n});
        f.machines.insert(id.clone(), (m, 10));
        id
    }

    async fn count_machines(&self, node: &str) -> usize {
        self.fake
            .lock()
            .unwrap()
            .machines
            .values()
            .filter(|(m, _)| m["tags"]["weft-node"] == node && m["state"] != "stopping")
            .count()
    }
}
