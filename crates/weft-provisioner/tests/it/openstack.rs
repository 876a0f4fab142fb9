//! The `openstack` and `rackspace` providers against a real Keystone v3 and a Nova served here.
//!
//! - **Keystone** is Debian bookworm's `python3-keystone` in the image `images/keystone/build.sh`
//!   builds (tagged by the script's hash, as the script does), one container per test on the
//!   host's network, on a free loopback port. Each test bootstraps a project, a user, an
//!   application credential and a compute service whose endpoints point at this test's Nova (the
//!   public endpoint of `RegionOne`) or nowhere (`internal`, `RegionTwo`), so a wrong choice shows.
//! - **Nova** (no emulator exists here) is a small axum server written from the compute API
//!   reference: servers (create, list with the `name` regular expression, show, delete), key
//!   pairs, Nova's error bodies and `Retry-After`. Every request's token is checked against the
//!   real Keystone (`GET /v3/auth/tokens` with `X-Subject-Token`), or against the tokens the fake
//!   Rackspace Identity issued. Switches inject faults: a server that goes to ERROR, 409, 413
//!   and 429 with `Retry-After`, 503, a token refused once, a CREATE whose answer never comes
//!   or is lost, new servers that are 404 at first. Neutron is served at the same address (the
//!   catalog's `network` service): ports by `device_id`, floating IPs (list, create, delete) and
//!   networks by id and name, from the networking API v2.0 reference.
//! - **Rackspace Identity v2.0** (`POST /v2.0/tokens`, `RAX-KSKEY:apiKeyCredentials`) is served
//!   here too, from Rackspace's documentation.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contract::{provider_contract_on, task};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::LineEnding;
use russh::keys::PrivateKey;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use weft_provisioner::openstack::{Kind, NovaProvider, Timing};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::faults::{Call, CloudBench, Loss};

const BUILD_SCRIPT: &[u8] = include_bytes!("../../../../images/keystone/build.sh");
pub(crate) const ADMIN_PASSWORD: &str = "weft-admin";
pub(crate) const USER: &str = "weft";
pub(crate) const PASSWORD: &str = "weft-user-secret";
pub(crate) const PROJECT: &str = "weft-test";
pub(crate) const IMAGE: &str = "9f1c7ab2-0b39-4f35-9d0f-debian12";
pub(crate) const FLAVOR: &str = "2";
/// The name of the image `IMAGE` in the fake Glance.
const IMAGE_NAME: &str = "debian-12-genericcloud";
/// Two images share this name (Glance allows it).
const TWIN_IMAGES: &str = "ubuntu-24.04";
/// The name of the flavor `FLAVOR`.
const FLAVOR_NAME: &str = "m1.small";
/// An address nothing listens on: endpoints the provider must not choose point here.
const NOWHERE: &str = "http://127.0.0.1:9";

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("an object")
}

pub(crate) fn fast() -> Timing {
    Timing {
        first: Duration::from_millis(100),
        max: Duration::from_millis(500),
        calls: Duration::from_secs(20),
        wait: Duration::from_secs(30),
    }
}

// ------------------------------------------------------------------------------------------------
// Keystone in a container

/// The tag `images/keystone/build.sh` gives its image (the script's sha256, 12 hex digits).
fn keystone_image() -> String {
    let hash: String = Sha256::digest(BUILD_SCRIPT)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("weft-keystone:{}", &hash[..12])
}

fn docker(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A Keystone container of this test; removed when dropped.
pub(crate) struct Keystone {
    name: String,
    pub(crate) url: String,
    http: reqwest::Client,
}

impl Drop for Keystone {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
    }
}

/// What a test's Keystone holds for the provider.
pub(crate) struct Account {
    project_id: String,
    pub(crate) user_id: String,
    app_id: String,
    app_secret: String,
}

impl Keystone {
    /// Starts Keystone (tokens lasting `expiration` seconds), or `None` when docker or the image
    /// is missing outside CI.
    async fn start(expiration: u64) -> Option<Keystone> {
        if !weft_testkit::require("docker") {
            return None;
        }
        let image = keystone_image();
        if docker(&["image", "inspect", &image]).is_err() {
            weft_testkit::skip_or_fail(
                "keystone image",
                &format!("{image} is missing: run images/keystone/build.sh"),
            );
            return None;
        }
        let port = free_port();
        let name = format!("weft-test-keystone-{}-{port}", std::process::id());
        docker(&[
            "run",
            "-d",
            "--rm",
            "--network",
            "host",
            "--name",
            &name,
            "-e",
            &format!("KEYSTONE_PORT={port}"),
            "-e",
            &format!("KEYSTONE_TOKEN_EXPIRATION={expiration}"),
            &image,
        ])
        .expect("keystone starts");
        let ks = Keystone {
            name,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        let start = Instant::now();
        loop {
            let up = ks.http.get(format!("{}/v3", ks.url)).send().await;
            if up.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "keystone did not answer: {}",
                docker(&["logs", "--tail", "30", &ks.name]).unwrap_or_else(|e| e)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Some(ks)
    }

    /// A project-scoped token for `user` (by name, default domain).
    pub(crate) async fn token(&self, user: &str, password: &str, project: &str) -> String {
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
            {"name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}});
        let r = self
            .http
            .post(format!("{}/v3/auth/tokens", self.url))
            .json(&body)
            .send()
            .await
            .expect("keystone answers");
        assert_eq!(r.status().as_u16(), 201, "token for {user}");
        r.headers()["x-subject-token"]
            .to_str()
            .expect("a token")
            .to_string()
    }

    pub(crate) async fn admin(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Value {
        let mut req = self
            .http
            .request(method, format!("{}/v3{path}", self.url))
            .header("X-Auth-Token", token);
        if !body.is_null() {
            req = req.json(&body);
        }
        let r = req.send().await.expect("keystone answers");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// A project, a member user, an application credential of that user, the compute service
    /// (public `RegionOne` at `nova`, the rest nowhere) and the image and network services
    /// (public `RegionOne` at `root`, `RegionTwo` nowhere).
    async fn bootstrap(&self, nova: &str, root: &str) -> Account {
        use reqwest::Method;
        let admin = self.token("admin", ADMIN_PASSWORD, "admin").await;
        let project = self
            .admin(
                &admin,
                Method::POST,
                "/projects",
                json!({"project": {"name": PROJECT, "domain_id": "default"}}),
            )
            .await["project"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let user = self
            .admin(
                &admin,
                Method::POST,
                "/users",
                json!({"user": {"name": USER, "password": PASSWORD, "domain_id": "default",
                    "default_project_id": project}}),
            )
            .await["user"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let roles = self
            .admin(&admin, Method::GET, "/roles?name=member", Value::Null)
            .await;
        let role = roles["roles"][0]["id"].as_str().expect("a member role");
        self.admin(
            &admin,
            Method::PUT,
            &format!("/projects/{project}/users/{user}/roles/{role}"),
            Value::Null,
        )
        .await;
        let service = self
            .admin(
                &admin,
                Method::POST,
                "/services",
                json!({"service": {"type": "compute", "name": "nova"}}),
            )
            .await["service"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        self.admin(
            &admin,
            Method::POST,
            "/regions",
            json!({"region": {"id": "RegionTwo"}}),
        )
        .await;
        let glance = self
            .admin(
                &admin,
                Method::POST,
                "/services",
                json!({"service": {"type": "image", "name": "glance"}}),
            )
            .await["service"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let neutron = self
            .admin(
                &admin,
                Method::POST,
                "/services",
                json!({"service": {"type": "network", "name": "neutron"}}),
            )
            .await["service"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        for (service, interface, region, url) in [
            (&service, "public", "RegionOne", nova.to_string()),
            (&service, "internal", "RegionOne", format!("{NOWHERE}/v2.1")),
            (&service, "public", "RegionTwo", format!("{NOWHERE}/v2.1")),
            (&glance, "public", "RegionOne", root.to_string()),
            (&glance, "public", "RegionTwo", NOWHERE.to_string()),
            (&neutron, "public", "RegionOne", root.to_string()),
            (&neutron, "public", "RegionTwo", NOWHERE.to_string()),
        ] {
            self.admin(
                &admin,
                Method::POST,
                "/endpoints",
                json!({"endpoint": {"service_id": service, "interface": interface,
                    "region_id": region, "url": url}}),
            )
            .await;
        }
        let mine = self.token(USER, PASSWORD, PROJECT).await;
        let app = self
            .admin(
                &mine,
                Method::POST,
                &format!("/users/{user}/application_credentials"),
                json!({"application_credential": {"name": "weft-provisioner"}}),
            )
            .await;
        Account {
            project_id: project,
            user_id: user,
            app_id: app["application_credential"]["id"].as_str().unwrap().into(),
            app_secret: app["application_credential"]["secret"]
                .as_str()
                .unwrap()
                .into(),
        }
    }

    /// Whether Keystone still accepts `token` (asked with a fresh admin token).
    async fn valid(&self, token: &str) -> bool {
        let admin = self.token("admin", ADMIN_PASSWORD, "admin").await;
        let r = self
            .http
            .get(format!("{}/v3/auth/tokens", self.url))
            .header("X-Auth-Token", admin)
            .header("X-Subject-Token", token)
            .send()
            .await
            .expect("keystone answers");
        r.status().is_success()
    }
}

// ------------------------------------------------------------------------------------------------
// Nova, from the compute API reference

/// How the fake checks tokens.
#[derive(Clone)]
enum Auth {
    /// Against a real Keystone, with an admin token renewed when Keystone refuses it.
    Keystone {
        url: String,
        admin: Arc<tokio::sync::Mutex<Option<String>>>,
    },
    /// Against the tokens the fake Rackspace Identity issued (token -> tenant).
    Issued(Arc<Mutex<BTreeMap<String, String>>>),
}

/// Fault switches: each counts how many requests (or servers) it still applies to.
#[derive(Default)]
struct Faults {
    /// The next servers made go to ERROR instead of ACTIVE.
    error: usize,
    /// The next `POST /servers` answer 409.
    conflict: usize,
    /// The next requests answer 413 with `Retry-After: 1`.
    over_limit: usize,
    /// The next requests answer 503.
    unavailable: usize,
    /// The next requests are refused with 401 though their token is valid.
    refuse_token: usize,
    /// `POST /servers` makes the server, then never answers.
    hang_after_post: bool,
    /// The next requests answer 429 `overLimit` with `Retry-After: 1`.
    throttle: usize,
    /// The next `POST /servers` makes its server and its answer is lost so.
    lose: Option<Loss>,
    /// Servers made from now on answer 404 to this many shows.
    hide_new: usize,
}

struct FakeServer {
    id: String,
    project: String,
    body: Value,
    /// Shows left in BUILD.
    building: usize,
    error: bool,
    /// Shows left while being deleted (then gone).
    deleting: Option<usize>,
}

#[derive(Default)]
pub(crate) struct Counters {
    requests: AtomicUsize,
    pub(crate) posts: AtomicUsize,
    pub(crate) refused: AtomicUsize,
    faults_answered: AtomicUsize,
    /// Pages of `GET /servers/detail` answered.
    pages: AtomicUsize,
    /// Pages of `GET /flavors/detail` answered.
    flavor_pages: AtomicUsize,
    /// Requests to the image service (Glance).
    glance: AtomicUsize,
}

struct NovaState {
    auth: Auth,
    http: reqwest::Client,
    /// Rackspace's servers have untyped `public` and `private` addresses.
    rackspace: bool,
    base: String,
    servers: Mutex<Vec<FakeServer>>,
    keypairs: Mutex<BTreeMap<String, Value>>,
    faults: Mutex<Faults>,
    tokens: Mutex<HashSet<String>>,
    counters: Counters,
    posted: Notify,
    seq: AtomicUsize,
    /// Nova's `max_limit`: the most servers one page of a list holds (1000 by default).
    max_limit: AtomicUsize,
    /// The user data each server was made with, decoded (server id -> text).
    user_data: Mutex<BTreeMap<String, String>>,
    /// The flavors (id, name), in Nova's order.
    flavors: Vec<(String, String)>,
    /// Glance's images (id, name).
    images: Vec<(String, String)>,
    /// Every request that passed authentication, and whether it was throttled (429 or 413).
    calls: Mutex<Vec<Call>>,
    /// Shows each server still answers 404 to, by id.
    hidden: Mutex<BTreeMap<String, usize>>,
    /// Shows answered 404 for a hidden server.
    hidden_answers: AtomicUsize,
    /// Neutron: floating IPs (ports and networks are derived and fixed).
    neutron: Mutex<NeutronState>,
}

type Shared = Arc<NovaState>;

fn nova_fault(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ kind: {"code": status.as_u16(), "message": message} })),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": {"code": 401, "title": "Unauthorized",
            "message": "The request you have made requires authentication."}})),
    )
        .into_response()
}

impl NovaState {
    /// The project of a request's token, or the answer to give instead (auth first, then the
    /// fault switches, as keystonemiddleware runs before Nova's API).
    async fn gate(&self, headers: &HeaderMap) -> Result<String, Response> {
        self.counters.requests.fetch_add(1, Ordering::SeqCst);
        let token = headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(unauthorized)?;
        let project = match self.check(&token).await {
            Some(p) => p,
            None => {
                self.counters.refused.fetch_add(1, Ordering::SeqCst);
                return Err(unauthorized());
            }
        };
        self.tokens.lock().unwrap().insert(token);
        let mut f = self.faults.lock().unwrap();
        let throttled = f.throttle > 0 || (f.refuse_token == 0 && f.over_limit > 0);
        self.calls.lock().unwrap().push(Call::now(throttled));
        if f.throttle > 0 {
            f.throttle -= 1;
            self.counters.faults_answered.fetch_add(1, Ordering::SeqCst);
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({"overLimit": {"code": 429,
                    "message": "This request was rate-limited.", "retryAfter": "1"}})),
            )
                .into_response();
            r.headers_mut()
                .insert("retry-after", "1".parse().expect("a header"));
            return Err(r);
        }
        if f.refuse_token > 0 {
            f.refuse_token -= 1;
            self.counters.faults_answered.fetch_add(1, Ordering::SeqCst);
            return Err(unauthorized());
        }
        if f.over_limit > 0 {
            f.over_limit -= 1;
            self.counters.faults_answered.fetch_add(1, Ordering::SeqCst);
            let mut r = (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(json!({"overLimit": {"code": 413,
                    "message": "This request was rate-limited.", "retryAfter": "1"}})),
            )
                .into_response();
            r.headers_mut()
                .insert("retry-after", "1".parse().expect("a header"));
            return Err(r);
        }
        if f.unavailable > 0 {
            f.unavailable -= 1;
            self.counters.faults_answered.fetch_add(1, Ordering::SeqCst);
            return Err(nova_fault(
                StatusCode::SERVICE_UNAVAILABLE,
                "computeFault",
                "The server is currently unavailable. Please try again at a later time.",
            ));
        }
        Ok(project)
    }

    /// The project of a valid token.
    async fn check(&self, token: &str) -> Option<String> {
        match &self.auth {
            Auth::Issued(tokens) => tokens.lock().unwrap().get(token).cloned(),
            Auth::Keystone { url, admin } => {
                let mut admin = admin.lock().await;
                for _ in 0..2 {
                    let a = match admin.clone() {
                        Some(a) => a,
                        None => {
                            let t = self.admin_token(url).await;
                            *admin = Some(t.clone());
                            t
                        }
                    };
                    let r = self
                        .http
                        .get(format!("{url}/v3/auth/tokens"))
                        .header("X-Auth-Token", &a)
                        .header("X-Subject-Token", token)
                        .send()
                        .await
                        .expect("keystone answers");
                    match r.status().as_u16() {
                        200 => {
                            let body: Value = r.json().await.expect("a token");
                            return body["token"]["project"]["id"].as_str().map(str::to_string);
                        }
                        // Our own admin token expired: get another and ask again.
                        401 => *admin = None,
                        _ => return None,
                    }
                }
                None
            }
        }
    }

    async fn admin_token(&self, url: &str) -> String {
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
            {"name": "admin", "domain": {"id": "default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
        let r = self
            .http
            .post(format!("{url}/v3/auth/tokens"))
            .json(&body)
            .send()
            .await
            .expect("keystone answers");
        r.headers()["x-subject-token"].to_str().unwrap().to_string()
    }

    fn next(&self) -> usize {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The server as `GET /servers/{id}` shows it.
    fn detail(&self, s: &FakeServer) -> Value {
        let mut b = s.body.clone();
        let n = b["n"].as_u64().unwrap_or(0);
        b.as_object_mut().unwrap().remove("n");
        if s.building > 0 {
            b["status"] = json!("BUILD");
            b["progress"] = json!(50);
            b["OS-EXT-STS:task_state"] = json!("spawning");
        } else if s.error {
            b["status"] = json!("ERROR");
            b["fault"] = json!({"code": 500, "created": b["created"],
                "message": "No valid host was found. There are not enough hosts available."});
        } else {
            b["status"] = json!("ACTIVE");
            b["progress"] = json!(100);
            b["addresses"] = if self.rackspace {
                json!({"public": [{"addr": format!("198.51.100.{n}"), "version": 4}],
                       "private": [{"addr": format!("10.176.0.{n}"), "version": 4}]})
            } else {
                let neutron = self.neutron.lock().unwrap();
                let port = format!("port-{}", s.id);
                let floating: Vec<String> = if neutron.on {
                    let mine = neutron.floating.iter().filter(|f| f.port == port);
                    mine.map(|f| f.address.clone()).collect()
                } else {
                    vec![format!("203.0.113.{n}")]
                };
                let mut list = vec![json!({"addr": format!("192.0.2.{n}"), "version": 4,
                    "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"})];
                list.extend(floating.iter().map(|a| {
                    json!({"addr": a, "version": 4,
                    "OS-EXT-IPS:type": "floating", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"})
                }));
                json!({ "weft-net": list })
            };
            if self.rackspace {
                b["accessIPv4"] = json!(format!("198.51.100.{n}"));
            }
        }
        if s.deleting.is_some() {
            b["OS-EXT-STS:task_state"] = json!("deleting");
        }
        b
    }
}

/// Nova's `name` filter is a regular expression; this supports what names need: literals,
/// backslash escapes, `.`, and the anchors `^` and `$`.
fn name_matches(pattern: &str, name: &str) -> bool {
    let (start, rest) = match pattern.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, pattern),
    };
    let mut tokens: Vec<Option<char>> = Vec::new();
    let mut end = false;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => tokens.push(chars.next()),
            '.' => tokens.push(None),
            '$' if chars.peek().is_none() => end = true,
            c => tokens.push(Some(c)),
        }
    }
    let name: Vec<char> = name.chars().collect();
    let at = |i: usize| {
        i + tokens.len() <= name.len()
            && tokens
                .iter()
                .enumerate()
                .all(|(k, t)| t.is_none_or(|c| c == name[i + k]))
            && (!end || i + tokens.len() == name.len())
    };
    if start {
        at(0)
    } else {
        (0..=name.len()).any(at)
    }
}

/// `GET /servers/detail`, paged as the compute API reference ("Paginated collections") and
/// Nova's `_get_collection_links` say: newest first; at most `limit` servers, capped by the
/// cloud's `max_limit`; a page that holds that many has a `servers_links` rel `next` whose
/// `marker` is its last server's id; a marker Nova does not know is a 400.
async fn list_servers(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let max = st.max_limit.load(Ordering::SeqCst);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .map_or(max, |l| l.min(max));
    let servers = st.servers.lock().unwrap();
    let matching: Vec<&FakeServer> = servers
        .iter()
        .rev()
        .filter(|s| s.project == project)
        .filter(|s| {
            q.get("name")
                .is_none_or(|p| name_matches(p, s.body["name"].as_str().unwrap_or("")))
        })
        .collect();
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match matching.iter().position(|s| &s.id == m) {
            Some(i) => i + 1,
            None => {
                return nova_fault(
                    StatusCode::BAD_REQUEST,
                    "badRequest",
                    &format!("marker [{m}] not found"),
                )
            }
        },
    };
    let page: Vec<&FakeServer> = matching.into_iter().skip(start).take(limit).collect();
    st.counters.pages.fetch_add(1, Ordering::SeqCst);
    let mut answer = json!({ "servers": page.iter().map(|s| st.detail(s)).collect::<Vec<_>>() });
    if !page.is_empty() && page.len() == limit {
        let last = &page[page.len() - 1].id;
        answer["servers_links"] = json!([{"rel": "next",
            "href": format!("{}/servers/detail?limit={limit}&marker={last}", st.base)}]);
    }
    Json(answer).into_response()
}

async fn show_server(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Some(left) = st.hidden.lock().unwrap().get_mut(&id).filter(|l| **l > 0) {
        *left -= 1;
        st.hidden_answers.fetch_add(1, Ordering::SeqCst);
        return nova_fault(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            "Instance could not be found.",
        );
    }
    let mut servers = st.servers.lock().unwrap();
    let Some(i) = servers
        .iter()
        .position(|s| s.id == id && s.project == project)
    else {
        return nova_fault(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            "Instance could not be found.",
        );
    };
    let s = &mut servers[i];
    if s.building > 0 {
        s.building -= 1;
    }
    match s.deleting {
        Some(0) => {
            servers.remove(i);
            return nova_fault(
                StatusCode::NOT_FOUND,
                "itemNotFound",
                "Instance could not be found.",
            );
        }
        Some(n) => s.deleting = Some(n - 1),
        None => {}
    }
    let shown = st.detail(&servers[i]);
    Json(json!({ "server": shown })).into_response()
}

async fn create_server(
    State(st): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let bad = |m: &str| nova_fault(StatusCode::BAD_REQUEST, "badRequest", m);
    let Some(s) = body.get("server").and_then(Value::as_object) else {
        return bad("Invalid input for field/attribute server.");
    };
    let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let name = text("name");
    if name.is_empty() || name.len() > 255 {
        return bad("Invalid input for field/attribute name.");
    }
    if text("imageRef") != IMAGE {
        return bad(&format!("Image {} could not be found.", text("imageRef")));
    }
    if text("flavorRef") != FLAVOR {
        return bad(&format!("Flavor {} could not be found.", text("flavorRef")));
    }
    let metadata = s.get("metadata").cloned().unwrap_or(json!({}));
    if !metadata.as_object().is_some_and(|m| {
        m.values()
            .all(|v| v.as_str().is_some_and(|v| v.len() <= 255))
    }) {
        return bad("Invalid input for field/attribute metadata.");
    }
    // The create schema: `user_data` is a string in base64 format of at most 65535 characters
    // (nova/api/openstack/compute/schemas/servers.py; API reference: "Must be Base64 encoded.
    // Restricted to 65535 bytes").
    let user_data = match s.get("user_data") {
        None => None,
        Some(Value::String(u)) if u.len() <= 65535 => {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD.decode(u) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(_) => return bad("Invalid input for field/attribute user_data."),
            }
        }
        Some(_) => return bad("Invalid input for field/attribute user_data."),
    };
    let key_name = s.get("key_name").and_then(Value::as_str);
    if let Some(k) = key_name {
        if !st.keypairs.lock().unwrap().contains_key(k) {
            return bad("Invalid key_name provided.");
        }
    }
    {
        let mut f = st.faults.lock().unwrap();
        if f.conflict > 0 {
            f.conflict -= 1;
            st.counters.faults_answered.fetch_add(1, Ordering::SeqCst);
            return nova_fault(
                StatusCode::CONFLICT,
                "conflictingRequest",
                "Cannot create server: the project is being modified; try again later.",
            );
        }
    }
    let n = st.next();
    let id = format!("5f0c{n:04}-7a1b-4c2d-9e3f-00000000{n:04}");
    let error = {
        let mut f = st.faults.lock().unwrap();
        let e = f.error > 0;
        f.error = f.error.saturating_sub(1);
        e
    };
    let server = FakeServer {
        id: id.clone(),
        project: project.clone(),
        body: json!({"id": id, "name": name, "n": n, "metadata": metadata,
            "tenant_id": project, "user_id": "fake-user", "key_name": key_name,
            "image": {"id": IMAGE}, "flavor": {"id": FLAVOR},
            "created": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "updated": format!("2026-01-01T00:{:02}:{:02}Z", n / 60, n % 60),
            "accessIPv4": "", "accessIPv6": "", "addresses": {},
            "OS-EXT-STS:task_state": null, "OS-EXT-STS:vm_state": "active",
            "links": [{"rel": "self", "href": format!("{}/servers/{id}", st.base)}]}),
        building: 2,
        error,
        deleting: None,
    };
    if let Some(u) = user_data {
        st.user_data.lock().unwrap().insert(id.clone(), u);
    }
    st.servers.lock().unwrap().push(server);
    st.counters.posts.fetch_add(1, Ordering::SeqCst);
    let (hide, lose) = {
        let mut f = st.faults.lock().unwrap();
        (f.hide_new, f.lose.take())
    };
    if hide > 0 {
        st.hidden.lock().unwrap().insert(id.clone(), hide);
    }
    match lose {
        Some(Loss::ServerError) => {
            return nova_fault(
                StatusCode::INTERNAL_SERVER_ERROR,
                "computeFault",
                "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ \
                 and attach the Nova API log if possible.",
            )
        }
        Some(Loss::Dropped) => crate::faults::hang_up(),
        None => {}
    }
    let hang = st.faults.lock().unwrap().hang_after_post;
    if hang {
        st.posted.notify_one();
        std::future::pending::<()>().await;
    }
    let mut r = (
        StatusCode::ACCEPTED,
        Json(json!({"server": {"id": id, "OS-DCF:diskConfig": "MANUAL",
            "adminPass": "kJ4sPq9wZ2mT", "security_groups": [{"name": "default"}],
            "links": [{"rel": "self", "href": format!("{}/servers/{id}", st.base)}]}})),
    )
        .into_response();
    r.headers_mut().insert(
        "location",
        format!("{}/servers/{id}", st.base).parse().unwrap(),
    );
    r
}

async fn delete_server(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut servers = st.servers.lock().unwrap();
    match servers
        .iter_mut()
        .find(|s| s.id == id && s.project == project)
    {
        Some(s) => {
            s.deleting.get_or_insert(1);
            StatusCode::NO_CONTENT.into_response()
        }
        None => nova_fault(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            "Instance could not be found.",
        ),
    }
}

async fn show_keypair(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    match st.keypairs.lock().unwrap().get(&name) {
        Some(k) => Json(json!({ "keypair": k })).into_response(),
        None => nova_fault(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Keypair {name} not found for user fake-user"),
        ),
    }
}

async fn import_keypair(
    State(st): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    let name = body["keypair"]["name"].as_str().unwrap_or("").to_string();
    let public = body["keypair"]["public_key"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if name.is_empty() || !public.starts_with("ssh-") {
        return nova_fault(
            StatusCode::BAD_REQUEST,
            "badRequest",
            "Keypair data is invalid: failed to generate fingerprint",
        );
    }
    let mut keys = st.keypairs.lock().unwrap();
    if keys.contains_key(&name) {
        return nova_fault(
            StatusCode::CONFLICT,
            "conflictingRequest",
            &format!("Key pair '{name}' already exists."),
        );
    }
    let k = json!({"name": name, "public_key": public, "fingerprint": "fake", "user_id": "fake-user",
        "type": "ssh"});
    keys.insert(name, k.clone());
    Json(json!({ "keypair": k })).into_response()
}

fn flavor_detail(id: &str, name: &str) -> Value {
    json!({"id": id, "name": name, "ram": 2048, "vcpus": 1, "disk": 20, "swap": "",
        "OS-FLV-EXT-DATA:ephemeral": 0, "rxtx_factor": 1.0, "os-flavor-access:is_public": true,
        "links": []})
}

/// `GET /flavors/{id}`: the flavor with that id (never by name), else 404 itemNotFound.
async fn show_flavor(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    match st.flavors.iter().find(|(i, _)| *i == id) {
        Some((i, n)) => Json(json!({ "flavor": flavor_detail(i, n) })).into_response(),
        None => nova_fault(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Flavor {id} could not be found."),
        ),
    }
}

/// `GET /flavors/detail`: paged as the server list is (`limit`, `marker`, `flavors_links` rel
/// `next` on a full page; Nova has no `name` filter for flavors).
async fn list_flavors(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    st.counters.flavor_pages.fetch_add(1, Ordering::SeqCst);
    let max = st.max_limit.load(Ordering::SeqCst);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .map_or(max, |l| l.min(max));
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match st.flavors.iter().position(|(i, _)| i == m) {
            Some(i) => i + 1,
            None => {
                return nova_fault(
                    StatusCode::BAD_REQUEST,
                    "badRequest",
                    &format!("marker [{m}] not found"),
                )
            }
        },
    };
    let page: Vec<&(String, String)> = st.flavors.iter().skip(start).take(limit).collect();
    let mut answer =
        json!({"flavors": page.iter().map(|(i, n)| flavor_detail(i, n)).collect::<Vec<_>>()});
    if !page.is_empty() && page.len() == limit {
        let last = &page[page.len() - 1].0;
        answer["flavors_links"] = json!([{"rel": "next",
            "href": format!("{}/flavors/detail?limit={limit}&marker={last}", st.base)}]);
    }
    Json(answer).into_response()
}

fn image_detail(id: &str, name: &str) -> Value {
    json!({"id": id, "name": name, "status": "active", "visibility": "public",
        "disk_format": "qcow2", "container_format": "bare", "self": format!("/v2/images/{id}"),
        "schema": "/v2/schemas/image"})
}

/// Glance `GET /v2/images/{image_id}`: the image, else 404 (Glance answers a plain-text body).
async fn show_image(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    st.counters.glance.fetch_add(1, Ordering::SeqCst);
    match st.images.iter().find(|(i, _)| *i == id) {
        Some((i, n)) => Json(image_detail(i, n)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("404 Not Found\n\nNo image found with ID {id}\n\n   "),
        )
            .into_response(),
    }
}

/// Glance `GET /v2/images`: filtered by exact `name`, at most `limit` (default 25, Glance's
/// `limit_param_default`) a page, with `next` (a path with the `marker`) on a full page.
async fn list_images(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    st.counters.glance.fetch_add(1, Ordering::SeqCst);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(25)
        .min(st.max_limit.load(Ordering::SeqCst));
    let named: Vec<&(String, String)> = st
        .images
        .iter()
        .filter(|(_, n)| q.get("name").is_none_or(|want| want == n))
        .collect();
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match named.iter().position(|(i, _)| i == m) {
            Some(i) => i + 1,
            None => return (StatusCode::BAD_REQUEST, "Invalid marker").into_response(),
        },
    };
    let page: Vec<&&(String, String)> = named.iter().skip(start).take(limit).collect();
    let mut answer = json!({"images": page.iter().map(|(i, n)| image_detail(i, n)).collect::<Vec<_>>(),
        "schema": "/v2/schemas/images", "first": "/v2/images"});
    if !page.is_empty() && page.len() == limit {
        let last = &page[page.len() - 1].0;
        let name = q
            .get("name")
            .map(|n| format!("&name={n}"))
            .unwrap_or_default();
        answer["next"] = json!(format!("/v2/images?limit={limit}&marker={last}{name}"));
    }
    Json(answer).into_response()
}

/// The external network floating IPs come from (its name is `EXTERNAL_NAME`).
const EXTERNAL: &str = "5e0e3a44-6c1b-4f0e-9d36-0b1c2e7a9f11";
const EXTERNAL_NAME: &str = "public";
/// Two external networks share this name (Neutron allows it).
const TWIN_NETWORKS: &str = "ext-twin";

/// Neutron's networks: (id, name, `router:external`).
const NETWORKS: [(&str, &str, bool); 4] = [
    (EXTERNAL, EXTERNAL_NAME, true),
    ("5e0e3a44-6c1b-4f0e-9d36-0b1c2e7a9f12", TWIN_NETWORKS, true),
    ("5e0e3a44-6c1b-4f0e-9d36-0b1c2e7a9f13", TWIN_NETWORKS, true),
    ("5e0e3a44-6c1b-4f0e-9d36-0b1c2e7a9f14", "weft-net", false),
];

/// A floating IP of the fake Neutron.
#[derive(Clone)]
struct Fip {
    id: String,
    address: String,
    network: String,
    port: String,
    fixed: String,
    description: String,
}

/// The fake Neutron's state.
#[derive(Default)]
struct NeutronState {
    /// Nova shows floating addresses from here (else every server has one, as before).
    on: bool,
    floating: Vec<Fip>,
    /// `POST /v2.0/floatingips` answered (or lost).
    posts: usize,
    /// The next `POST /v2.0/floatingips` allocates, then answers 503 (the answer is lost).
    lose_post: bool,
    /// The next `DELETE /v2.0/floatingips/{id}` finds it released meanwhile: gone, and 404.
    released_meanwhile: bool,
}

fn neutron_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"NeutronError": {"type": kind, "message": message, "detail": ""}})),
    )
        .into_response()
}

/// The port of a server: one on `weft-net`, at the server's fixed address.
fn port_of(s: &FakeServer) -> Value {
    let n = s.body["n"].as_u64().unwrap_or(0);
    json!({"id": format!("port-{}", s.id), "device_id": s.id, "device_owner": "compute:nova",
        "network_id": NETWORKS[3].0, "status": "ACTIVE",
        "fixed_ips": [{"subnet_id": "9a1b", "ip_address": format!("192.0.2.{n}")}]})
}

fn fip_detail(f: &Fip) -> Value {
    json!({"id": f.id, "floating_ip_address": f.address, "floating_network_id": f.network,
        "port_id": f.port, "fixed_ip_address": f.fixed, "description": f.description,
        "status": "ACTIVE", "router_id": "r1"})
}

/// Neutron `GET /v2.0/ports`, filtered by `device_id`.
async fn list_ports(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let servers = st.servers.lock().unwrap();
    let ports: Vec<Value> = servers
        .iter()
        .filter(|s| s.project == project)
        .filter(|s| q.get("device_id").is_none_or(|d| *d == s.id))
        .map(port_of)
        .collect();
    Json(json!({ "ports": ports })).into_response()
}

/// Neutron `GET /v2.0/floatingips`, filtered by `port_id`.
async fn list_floatingips(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    let n = st.neutron.lock().unwrap();
    let fips: Vec<Value> = n
        .floating
        .iter()
        .filter(|f| q.get("port_id").is_none_or(|p| *p == f.port))
        .map(fip_detail)
        .collect();
    Json(json!({ "floatingips": fips })).into_response()
}

/// Neutron `POST /v2.0/floatingips`: on an external network, attached to a port that has no
/// floating IP yet (409 `FloatingIPPortAlreadyAssociated` otherwise).
async fn create_floatingip(
    State(st): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let project = match st.gate(&headers).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let f = &body["floatingip"];
    let text = |k: &str| f[k].as_str().unwrap_or("").to_string();
    let (network, port) = (text("floating_network_id"), text("port_id"));
    if !NETWORKS.iter().any(|(i, _, ext)| *i == network && *ext) {
        let m = format!("External network {network} is not reachable from subnet 9a1b.");
        return neutron_error(
            StatusCode::NOT_FOUND,
            "ExternalGatewayForFloatingIPNotFound",
            &m,
        );
    }
    let fixed = {
        let servers = st.servers.lock().unwrap();
        let Some(p) = servers
            .iter()
            .filter(|s| s.project == project)
            .map(port_of)
            .find(|p| p["id"] == port.as_str())
        else {
            let m = format!("Port {port} could not be found.");
            return neutron_error(StatusCode::NOT_FOUND, "PortNotFound", &m);
        };
        p["fixed_ips"][0]["ip_address"]
            .as_str()
            .unwrap()
            .to_string()
    };
    if !text("fixed_ip_address").is_empty() && text("fixed_ip_address") != fixed {
        return neutron_error(StatusCode::BAD_REQUEST, "BadRequest", "Invalid fixed IP.");
    }
    let mut n = st.neutron.lock().unwrap();
    n.posts += 1;
    if n.floating.iter().any(|x| x.port == port) {
        let m = format!("Cannot associate floating IP with port {port}: it already has one.");
        return neutron_error(StatusCode::CONFLICT, "FloatingIPPortAlreadyAssociated", &m);
    }
    let k = n.posts + 10;
    let fip = Fip {
        id: format!("f1a7{k:04}-0000-4000-8000-00000000{k:04}"),
        address: format!("198.51.100.{k}"),
        network,
        port,
        fixed,
        description: text("description"),
    };
    n.floating.push(fip.clone());
    if std::mem::take(&mut n.lose_post) {
        return neutron_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "lost",
        );
    }
    (
        StatusCode::CREATED,
        Json(json!({"floatingip": fip_detail(&fip)})),
    )
        .into_response()
}

/// Neutron `DELETE /v2.0/floatingips/{id}`: 204, or 404 `FloatingIPNotFound`.
async fn delete_floatingip(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    let mut n = st.neutron.lock().unwrap();
    let before = n.floating.len();
    n.floating.retain(|f| f.id != id);
    if n.floating.len() == before || std::mem::take(&mut n.released_meanwhile) {
        let m = format!("Floating IP {id} could not be found");
        return neutron_error(StatusCode::NOT_FOUND, "FloatingIPNotFound", &m);
    }
    StatusCode::NO_CONTENT.into_response()
}

fn network_detail((id, name, external): &(&str, &str, bool)) -> Value {
    json!({"id": id, "name": name, "router:external": external, "status": "ACTIVE",
        "admin_state_up": true, "shared": false})
}

/// Neutron `GET /v2.0/networks/{id}`: the network, else 404 `NetworkNotFound`.
async fn show_network(
    State(st): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    match NETWORKS.iter().find(|(i, _, _)| *i == id) {
        Some(n) => Json(json!({"network": network_detail(n)})).into_response(),
        None => neutron_error(
            StatusCode::NOT_FOUND,
            "NetworkNotFound",
            &format!("Network {id} could not be found."),
        ),
    }
}

/// Neutron `GET /v2.0/networks`, filtered by exact `name`.
async fn list_networks(
    State(st): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = st.gate(&headers).await {
        return r;
    }
    let found: Vec<Value> = NETWORKS
        .iter()
        .filter(|(_, n, _)| q.get("name").is_none_or(|want| want == n))
        .map(network_detail)
        .collect();
    Json(json!({ "networks": found })).into_response()
}

/// A running fake Nova.
pub(crate) struct Nova {
    state: Shared,
    /// The compute endpoint (what the catalog lists).
    url: String,
    addr: SocketAddr,
}

impl Nova {
    async fn start(auth: Auth, rackspace: bool, prefix: &str) -> Nova {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().unwrap();
        let url = format!("http://{addr}{prefix}");
        let state = Arc::new(NovaState {
            auth,
            http: reqwest::Client::new(),
            rackspace,
            base: url.clone(),
            servers: Mutex::new(Vec::new()),
            keypairs: Mutex::new(BTreeMap::new()),
            faults: Mutex::new(Faults::default()),
            tokens: Mutex::new(HashSet::new()),
            counters: Counters::default(),
            posted: Notify::new(),
            seq: AtomicUsize::new(0),
            max_limit: AtomicUsize::new(1000),
            user_data: Mutex::new(BTreeMap::new()),
            flavors: [
                ("1", "m1.tiny"),
                (FLAVOR, FLAVOR_NAME),
                ("3", "m1.medium"),
                // Flavor names are unique in Nova, but a name may be another flavor's id.
                ("4", FLAVOR),
                ("5", "m1.large"),
            ]
            .map(|(i, n)| (i.to_string(), n.to_string()))
            .to_vec(),
            images: [
                (IMAGE, IMAGE_NAME),
                ("3c5b70d2-8a7e-4c57-a1d9-7f0e5b1c2a01", TWIN_IMAGES),
                ("3c5b70d2-8a7e-4c57-a1d9-7f0e5b1c2a02", TWIN_IMAGES),
                ("3c5b70d2-8a7e-4c57-a1d9-7f0e5b1c2a03", "debian-12"),
            ]
            .map(|(i, n)| (i.to_string(), n.to_string()))
            .to_vec(),
            calls: Mutex::new(Vec::new()),
            hidden: Mutex::new(BTreeMap::new()),
            hidden_answers: AtomicUsize::new(0),
            neutron: Mutex::new(NeutronState::default()),
        });
        let api = Router::new()
            .route("/servers", post(create_server))
            .route("/servers/detail", get(list_servers))
            .route("/servers/{id}", get(show_server).delete(delete_server))
            .route("/os-keypairs", post(import_keypair))
            .route("/os-keypairs/{name}", get(show_keypair))
            .route("/flavors/detail", get(list_flavors))
            .route("/flavors/{id}", get(show_flavor))
            .with_state(state.clone());
        // Glance at the root of the same address (its catalog URL, unversioned as Glance's is).
        let glance = Router::new()
            .route("/v2/images", get(list_images))
            .route("/v2/images/{id}", get(show_image))
            // Neutron at the root too (its catalog URL, unversioned as Neutron's is).
            .route("/v2.0/ports", get(list_ports))
            .route(
                "/v2.0/floatingips",
                get(list_floatingips).post(create_floatingip),
            )
            .route(
                "/v2.0/floatingips/{id}",
                axum::routing::delete(delete_floatingip),
            )
            .route("/v2.0/networks", get(list_networks))
            .route("/v2.0/networks/{id}", get(show_network))
            .with_state(state.clone());
        let app = Router::new().nest(prefix, api).merge(glance);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Nova { state, url, addr }
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.state.faults.lock().unwrap()
    }

    pub(crate) fn count(&self, c: fn(&Counters) -> &AtomicUsize) -> usize {
        c(&self.state.counters).load(Ordering::SeqCst)
    }

    pub(crate) fn servers(&self) -> usize {
        self.state.servers.lock().unwrap().len()
    }

    /// Makes a server in `project` behind weft's back, with `metadata`; answers its id.
    fn plant(&self, project: &str, name: &str, metadata: Value) -> String {
        let n = self.state.next();
        let id = format!("70a5{n:04}-7a1b-4c2d-9e3f-00000000{n:04}");
        let body = json!({"id": id, "name": name, "n": n, "metadata": metadata,
            "tenant_id": project, "user_id": "someone", "image": {"id": IMAGE},
            "flavor": {"id": FLAVOR}, "accessIPv4": "", "accessIPv6": "", "addresses": {},
            "created": format!("2026-01-01T01:{:02}:{:02}Z", n / 60, n % 60)});
        self.state.servers.lock().unwrap().push(FakeServer {
            id: id.clone(),
            project: project.into(),
            body,
            building: 0,
            error: false,
            deleting: None,
        });
        id
    }

    /// The ids of the servers the fake holds (of every project).
    fn server_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .state
            .servers
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.id.clone())
            .collect();
        ids.sort();
        ids
    }

    fn page_size(&self, n: usize) {
        self.state.max_limit.store(n, Ordering::SeqCst);
    }

    fn tokens(&self) -> HashSet<String> {
        self.state.tokens.lock().unwrap().clone()
    }
}

/// Keystone with a bootstrapped account and a Nova behind its catalog.
pub(crate) async fn cloud(expiration: u64) -> Option<(Keystone, Nova, Account)> {
    let ks = Keystone::start(expiration).await?;
    let nova = Nova::start(
        Auth::Keystone {
            url: ks.url.clone(),
            admin: Arc::new(tokio::sync::Mutex::new(None)),
        },
        false,
        "/v2.1",
    )
    .await;
    let account = ks
        .bootstrap(&nova.url, &format!("http://{}", nova.addr))
        .await;
    Some((ks, nova, account))
}

pub(crate) fn password_fields(ks: &Keystone) -> Map<String, Value> {
    obj(
        json!({"auth_url": ks.url, "user_name": USER, "password": PASSWORD,
        "project_name": PROJECT, "region": "RegionOne"}),
    )
}

fn node() -> Map<String, Value> {
    obj(json!({"image": IMAGE, "flavor": FLAVOR}))
}

fn config(fields: &Map<String, Value>, provider: &str, node_id: &str) -> Map<String, Value> {
    let mut c = node();
    c.insert(
        "provider".into(),
        json!({"name": "test", "providertype": provider, "provisioner": fields}),
    );
    c.insert("hostname".into(), json!(format!("{node_id}.test.example")));
    c
}

fn a_task(action: Action, node_id: &str, config: &Map<String, Value>) -> weft_provisioner::Task {
    task(action, node_id, config.clone(), Duration::from_secs(60))
}

fn test_key() -> String {
    PrivateKey::from(Ed25519Keypair::from_seed(&[7u8; 32]))
        .to_openssh(LineEnding::LF)
        .expect("a key")
        .to_string()
}

// ------------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn openstack_with_a_password_passes_the_provider_contract() {
    let Some((ks, nova, account)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    provider_contract_on(&p, password_fields(&ks), node(), "os-pw-1").await;
    assert_eq!(nova.count(|c| &c.posts), 1, "one server was made");
    assert_eq!(nova.servers(), 0, "and it is gone");
    assert_eq!(nova.count(|c| &c.refused), 0);
    assert!(!account.project_id.is_empty());
}

#[tokio::test]
async fn openstack_with_an_application_credential_passes_the_provider_contract() {
    let Some((ks, nova, account)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = obj(json!({"auth_url": format!("{}/v3/", ks.url),
        "application_credential_id": account.app_id,
        "application_credential_secret": account.app_secret,
        "region": "RegionOne", "ssh_key": test_key(), "ssh_user": "debian"}));
    provider_contract_on(&p, fields.clone(), node(), "os-app-1").await;
    assert_eq!(nova.count(|c| &c.posts), 1);
    let keys = nova.state.keypairs.lock().unwrap().clone();
    assert_eq!(keys.len(), 1, "the key's public half was imported once");
    assert!(keys.keys().all(|k| k.starts_with("weft-")));

    // CREATE answers how to log in; the server is the user's project's.
    let c = config(&fields, "openstack", "os-app-2");
    let out = p
        .create(&a_task(Action::Create, "os-app-2", &c))
        .await
        .expect("create");
    assert_eq!(out.result["ssh-auth"]["user"], "debian");
    assert!(out.result["ssh-auth"]["key"]
        .as_str()
        .unwrap()
        .contains("OPENSSH PRIVATE KEY"));
    let servers = nova.state.servers.lock().unwrap();
    assert_eq!(servers[0].project, account.project_id);
    assert_eq!(servers[0].body["metadata"]["weft-node"], "os-app-2");
    assert_eq!(servers[0].body["name"], "os-app-2.test.example");
    assert!(servers[0].body["key_name"]
        .as_str()
        .unwrap()
        .starts_with("weft-"));
    assert!(!account.user_id.is_empty());
}

#[tokio::test]
async fn a_wrong_password_fails_create_at_once_with_keystones_message() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let mut fields = password_fields(&ks);
    fields.insert("password".into(), json!("not-the-password"));
    let start = Instant::now();
    let e = p
        .create(&a_task(
            Action::Create,
            "os-bad-1",
            &config(&fields, "openstack", "os-bad-1"),
        ))
        .await
        .expect_err("a wrong password fails");
    assert!(!e.retryable, "{e}");
    assert!(
        e.message
            .contains("The request you have made requires authentication"),
        "{e}"
    );
    assert!(e.message.starts_with("keystone: "), "{e}");
    assert!(!e.message.contains("not-the-password"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10), "at once");
    assert_eq!(nova.count(|c| &c.requests), 0, "nova was never asked");

    // A region the catalog lacks fails at once too, naming the regions it has.
    let mut fields = password_fields(&ks);
    fields.insert("region".into(), json!("RegionNine"));
    let e = p
        .create(&a_task(
            Action::Create,
            "os-bad-2",
            &config(&fields, "openstack", "os-bad-2"),
        ))
        .await
        .expect_err("no such region");
    assert!(!e.retryable && e.message.contains("RegionOne"), "{e}");
}

#[tokio::test]
async fn faults_are_retried_or_fail_at_once_with_novas_message() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = password_fields(&ks);

    // 409: fails at once with Nova's message; nothing made.
    nova.faults().conflict = 1;
    let c = config(&fields, "openstack", "os-f-1");
    let e = p
        .create(&a_task(Action::Create, "os-f-1", &c))
        .await
        .expect_err("409 fails");
    assert!(!e.retryable, "{e}");
    assert!(
        e.message.contains("conflictingRequest") && e.message.contains("being modified"),
        "{e}"
    );
    assert_eq!(nova.servers(), 0);

    // 413 with Retry-After and 503: retried, then the server is made once.
    nova.faults().over_limit = 2;
    nova.faults().unavailable = 2;
    let start = Instant::now();
    let out = p
        .create(&a_task(Action::Create, "os-f-1", &c))
        .await
        .expect("create passes after the faults");
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "Retry-After was honoured"
    );
    assert_eq!(nova.count(|c| &c.faults_answered), 5);
    assert_eq!(nova.servers(), 1);
    let mut made = c.clone();
    made.extend(out.result);
    let ok = p
        .confirm(&a_task(Action::Confirm, "os-f-1", &made))
        .await
        .expect("confirm");
    let ips = ok.ipaddresses.unwrap();
    assert_eq!(ips["bind_v4"], "192.0.2.1");
    assert_eq!(ips["access_v4"], "203.0.113.1", "the floating address");

    // A server that goes to ERROR: CONFIRM fails for good with Nova's fault message.
    nova.faults().error = 1;
    let c = config(&fields, "openstack", "os-f-2");
    let out = p
        .create(&a_task(Action::Create, "os-f-2", &c))
        .await
        .expect("create");
    let mut made = c.clone();
    made.extend(out.result);
    let e = p
        .confirm(&a_task(Action::Confirm, "os-f-2", &made))
        .await
        .expect_err("ERROR fails");
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("No valid host was found"), "{e}");
    p.delete(&a_task(Action::Delete, "os-f-2", &made))
        .await
        .expect("an ERROR server is deleted");

    // DELETE without a providerid finds the server by name and metadata.
    p.delete(&a_task(Action::Delete, "os-f-1", &c_for(&fields, "os-f-1")))
        .await
        .expect("delete");
    assert_eq!(nova.servers(), 0);
}

fn c_for(fields: &Map<String, Value>, node_id: &str) -> Map<String, Value> {
    config(fields, "openstack", node_id)
}

#[tokio::test]
async fn a_token_is_renewed_before_it_expires_and_once_when_refused() {
    // Keystone issues tokens that last 15 seconds: CREATE (four calls, each token checked
    // against Keystone by the fake) ends well before the token is renewed at 11 s, even on a
    // loaded machine.
    let Some((ks, nova, _)) = cloud(15).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = password_fields(&ks);
    let c = config(&fields, "openstack", "os-t-1");
    let out = p
        .create(&a_task(Action::Create, "os-t-1", &c))
        .await
        .expect("create");
    let first = nova.tokens();
    assert_eq!(first.len(), 1);
    let first = first.into_iter().next().unwrap();
    // Wait (polling Keystone itself) until that token has expired.
    let start = Instant::now();
    while ks.valid(&first).await {
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "token never expired"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut made = c.clone();
    made.extend(out.result);
    p.confirm(&a_task(Action::Confirm, "os-t-1", &made))
        .await
        .expect("confirm with a renewed token");
    assert_eq!(
        nova.count(|c| &c.refused),
        0,
        "the expired token was never sent"
    );
    assert!(nova.tokens().len() >= 2, "a new token was used");

    // A token Nova refuses once (401) is replaced and the call passes.
    let before = nova.tokens().len();
    nova.faults().refuse_token = 1;
    p.confirm(&a_task(Action::Confirm, "os-t-1", &made))
        .await
        .expect("confirm after a 401");
    assert_eq!(nova.count(|c| &c.faults_answered), 1);
    assert_eq!(
        nova.tokens().len(),
        before + 1,
        "one new token after the 401"
    );
    p.delete(&a_task(Action::Delete, "os-t-1", &made))
        .await
        .expect("delete");
}

// ------------------------------------------------------------------------------------------------
// Rackspace Identity v2.0

const RAX_TENANT: &str = "123456";
const RAX_USER: &str = "weftrax";
const RAX_KEY: &str = "0123456789abcdef0123456789abcdef";

struct RaxState {
    tokens: Arc<Mutex<BTreeMap<String, String>>>,
    nova: String,
    issued: AtomicUsize,
    /// The API key the user has now.
    key: Mutex<String>,
    /// Token requests refused.
    refused: AtomicUsize,
}

async fn rax_tokens(State(st): State<Arc<RaxState>>, Json(body): Json<Value>) -> Response {
    let creds = &body["auth"]["RAX-KSKEY:apiKeyCredentials"];
    if creds["username"] != RAX_USER || creds["apiKey"] != st.key.lock().unwrap().as_str() {
        st.refused.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"unauthorized": {"code": 401,
                "message": "Username or api key is invalid."}})),
        )
            .into_response();
    }
    let n = st.issued.fetch_add(1, Ordering::SeqCst);
    let token = format!("rax-token-{n}-{:x}", rand_u64());
    st.tokens
        .lock()
        .unwrap()
        .insert(token.clone(), RAX_TENANT.into());
    Json(json!({"access": {
        "token": {"id": token, "expires": "2099-01-01T00:00:00.000-06:00",
            "tenant": {"id": RAX_TENANT, "name": RAX_TENANT},
            "RAX-AUTH:authenticatedBy": ["APIKEY"]},
        "serviceCatalog": [
            {"name": "cloudFiles", "type": "object-store", "endpoints": [
                {"region": "DFW", "tenantId": "MossoCloudFS_x", "publicURL": format!("{NOWHERE}/v1")}]},
            {"name": "cloudServersOpenStack", "type": "compute", "endpoints": [
                {"region": "ORD", "tenantId": RAX_TENANT, "publicURL": format!("{NOWHERE}/v2/{RAX_TENANT}")},
                {"region": "DFW", "tenantId": RAX_TENANT, "publicURL": st.nova,
                 "versionInfo": format!("{}/", st.nova), "versionList": st.nova, "versionId": "2"}]}],
        "user": {"id": "172157", "name": RAX_USER, "RAX-AUTH:defaultRegion": "DFW",
            "roles": [{"id": "10000150", "name": "compute:default"}]}}}))
    .into_response()
}

fn rand_u64() -> u64 {
    let mut h = Sha256::new();
    h.update(format!(
        "{:?}{:?}",
        Instant::now(),
        std::thread::current().id()
    ));
    u64::from_le_bytes(h.finalize()[..8].try_into().unwrap())
}

async fn rackspace() -> (String, Nova) {
    let (identity, nova, _) = rackspace_identity().await;
    (identity, nova)
}

/// The fake Rackspace Identity and Nova; answers Identity's URL and state too.
async fn rackspace_identity() -> (String, Nova, Arc<RaxState>) {
    let tokens = Arc::new(Mutex::new(BTreeMap::new()));
    let nova = Nova::start(
        Auth::Issued(tokens.clone()),
        true,
        &format!("/v2/{RAX_TENANT}"),
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let identity = format!("http://{}/v2.0", listener.local_addr().unwrap());
    let st = Arc::new(RaxState {
        tokens,
        nova: nova.url.clone(),
        issued: AtomicUsize::new(0),
        key: Mutex::new(RAX_KEY.into()),
        refused: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/v2.0/tokens", post(rax_tokens))
        .with_state(st.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (identity, nova, st)
}

#[tokio::test]
async fn rackspace_passes_the_provider_contract() {
    let (identity, nova) = rackspace().await;
    let p = NovaProvider::with_kind(Kind::Rackspace).with_timing(fast());
    let fields = obj(
        json!({"auth_url": identity, "username": RAX_USER, "api_key": RAX_KEY,
        "region": "DFW", "ssh_key": test_key()}),
    );
    provider_contract_on(&p, fields.clone(), node(), "rax-1").await;
    assert_eq!(nova.count(|c| &c.posts), 1);
    assert_eq!(nova.servers(), 0);

    let c = config(&fields, "rackspace", "rax-2");
    let out = p
        .create(&a_task(Action::Create, "rax-2", &c))
        .await
        .expect("create");
    let mut made = c.clone();
    made.extend(out.result);
    let ips = p
        .confirm(&a_task(Action::Confirm, "rax-2", &made))
        .await
        .expect("confirm")
        .ipaddresses
        .unwrap();
    assert!(ips["access_v4"].starts_with("198.51.100."), "{ips:?}");
    assert!(ips["bind_v4"].starts_with("10.176.0."), "{ips:?}");
}

#[test]
fn openstack_and_rackspace_credentials_are_sensitive_fields() {
    let secret = [
        "password",
        "application_credential_secret",
        "api_key",
        "ssh_key",
        "user_data",
    ];
    for kind in [Kind::OpenStack, Kind::Rackspace] {
        let t = NovaProvider::with_kind(kind).plugin_type();
        let admin = &t.parameters[&weft_model::ParameterType::Admin];
        for (name, f) in &admin.fields {
            assert_eq!(f.sensitive, secret.contains(&name.as_str()), "{name}");
        }
    }
}

#[test]
fn the_fake_reads_names_as_nova_does_as_regular_expressions() {
    assert!(name_matches("web", "web10"));
    assert!(name_matches("^web\\-1$", "web-1"));
    assert!(!name_matches("^web\\-1$", "web-10"));
    assert!(name_matches("^w.b$", "wxb"));
    assert!(!name_matches("^a\\.b$", "axb"));
}

#[tokio::test]
async fn the_example_catalog_holds_valid_openstack_and_rackspace_templates() {
    use weft_model::EntityKind;
    use weft_store::SUPERADMIN;
    let dir = tempfile::tempdir().unwrap();
    let store = weft_store::open(&weft_testkit::temp_sqlite_url(&dir))
        .await
        .expect("store");
    weft_server::seed_catalog(&*store, SUPERADMIN, crate::common::CATALOG)
        .await
        .expect("the example catalog validates");
    let names = |v: Vec<Value>| -> Vec<String> {
        v.iter()
            .filter_map(|e| e["name"].as_str().map(str::to_string))
            .collect()
    };
    let providers = names(
        store
            .list_entities(SUPERADMIN, EntityKind::Provider)
            .await
            .unwrap(),
    );
    let templates = store
        .list_entities(SUPERADMIN, EntityKind::ClusterTemplate)
        .await
        .unwrap();
    let hardware = store
        .list_entities(SUPERADMIN, EntityKind::HardwareType)
        .await
        .unwrap();
    let images = store
        .list_entities(SUPERADMIN, EntityKind::ImageType)
        .await
        .unwrap();
    for kind in ["openstack", "rackspace"] {
        let t = templates
            .iter()
            .find(|t| t["name"] == format!("kv-web-{kind}"))
            .unwrap_or_else(|| panic!("kv-web-{kind} is in the catalog"));
        assert_eq!(t["defaults"]["provider"], kind);
        assert!(providers.contains(&kind.to_string()), "{providers:?}");
        let hw = t["defaults"]["hardwaretype"].as_str().unwrap();
        let h = hardware.iter().find(|h| h["name"] == hw).unwrap();
        assert!(h["providermap"][kind]["flavor"].is_string(), "{h}");
        let im = t["defaults"]["imagetype"].as_str().unwrap();
        let i = images.iter().find(|i| i["name"] == im).unwrap();
        assert!(i["providermap"][kind]["image"].is_string(), "{i}");
    }
}

#[tokio::test]
async fn when_two_servers_were_made_for_a_node_create_keeps_the_oldest_and_deletes_the_other() {
    let (identity, nova) = rackspace().await;
    let p = NovaProvider::with_kind(Kind::Rackspace).with_timing(fast());
    let fields = obj(
        json!({"auth_url": identity, "username": RAX_USER, "api_key": RAX_KEY,
        "region": "DFW"}),
    );
    let c = config(&fields, "rackspace", "rax-twin");
    // Two workers raced: both POSTs went through (each answer lost).
    nova.faults().hang_after_post = true;
    let t = a_task(Action::Create, "rax-twin", &c);
    for _ in 0..2 {
        tokio::select! {
            r = p.create(&t) => panic!("create cannot finish while its answer hangs: {r:?}"),
            _ = nova.state.posted.notified() => {}
        }
        // The second worker did not find the first's server: make it look again from scratch.
        if nova.servers() == 1 {
            let mut s = nova.state.servers.lock().unwrap();
            s[0].body["name"] = json!("hidden-for-a-moment");
        }
    }
    {
        let mut s = nova.state.servers.lock().unwrap();
        s[0].body["name"] = json!("rax-twin.test.example");
    }
    nova.faults().hang_after_post = false;
    assert_eq!(nova.servers(), 2);
    let oldest = nova.state.servers.lock().unwrap()[0].id.clone();
    let out = p.create(&t).await.expect("create");
    assert_eq!(
        out.result["providerid"],
        json!(oldest),
        "the oldest is kept"
    );
    assert!(
        out.stdout.contains("twin machine") && out.stdout.contains("terminated"),
        "{}",
        out.stdout
    );
    let left: Vec<(String, bool)> = nova
        .state
        .servers
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.id.clone(), s.deleting.is_some()))
        .collect();
    assert_eq!(
        left.iter().filter(|(_, deleting)| !deleting).count(),
        1,
        "{left:?}"
    );
}

// ------------------------------------------------------------------------------------------------
// Sweep

/// Marks as weft's CREATE writes them.
fn marks(node: &str, tenant: &str) -> Value {
    json!({"weft-node": node, "weft-cluster": "5", "weft-tenant": tenant})
}

#[tokio::test]
async fn openstack_sweep_pages_through_servers_and_deletes_only_this_tenant_s_orphans() {
    let Some((ks, nova, account)) = cloud(3600).await else {
        return;
    };
    nova.page_size(2);
    let p = Arc::new(NovaProvider::with_kind(Kind::OpenStack).with_timing(fast()));
    let fields = password_fields(&ks);
    let mut made = BTreeMap::new();
    for node in ["live", "rogue"] {
        let mut t = a_task(Action::Create, node, &config(&fields, "openstack", node));
        t.tenant_id = "t1".into();
        let out = p.create(&t).await.expect("create");
        made.insert(node, out.result["providerid"].as_str().unwrap().to_string());
    }
    let theirs = nova.plant(&account.project_id, "theirs", marks("theirs", "t2"));
    let unmarked = nova.plant(&account.project_id, "by-hand", json!({"owner": "ops"}));
    let elsewhere = nova.plant("another-project", "x", marks("x", "t1"));
    let pages = nova.count(|c| &c.pages);
    let listed = p.machines(&fields).await.expect("machines");
    let mut tenants: Vec<(&str, &str)> = listed
        .iter()
        .map(|m| (m.node.as_str(), m.tenant.as_str()))
        .collect();
    tenants.sort();
    assert_eq!(
        tenants,
        [("live", "t1"), ("rogue", "t1"), ("theirs", "t2")],
        "CREATE marks the tenant; unmarked and other projects' servers are not listed"
    );
    assert_eq!(
        nova.count(|c| &c.pages) - pages,
        3,
        "4 servers in pages of 2, the last one empty"
    );
    let req: weft_provisioner::sweep::SweepRequest = serde_json::from_value(json!({
        "providertype": "openstack", "fields": fields, "tenant": "t1", "live": ["live"],
        "delete": true}))
    .unwrap();
    let report = weft_provisioner::sweep::sweep(p.clone(), &req)
        .await
        .expect("sweep");
    let found: Vec<&str> = report.machines.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(found, ["rogue"], "{report:?}");
    assert_eq!(report.deleted, [made["rogue"].clone()], "{report:?}");
    let mut left = vec![made["live"].clone(), theirs, unmarked, elsewhere];
    left.sort();
    assert_eq!(nova.server_ids(), left, "only the orphan went");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_weft_provider_sweep_goes_through_the_server() {
    let Some((ks, nova, account)) = cloud(3600).await else {
        return;
    };
    nova.page_size(1);
    let ids = Arc::new(Mutex::new(Vec::new()));
    let rogue = |tenant: &str| {
        for (node, t) in [("rogue", tenant), ("foreign", "another-tenant")] {
            let id = nova.plant(&account.project_id, &format!("weft-{node}"), marks(node, t));
            ids.lock().unwrap().push(id);
        }
    };
    let p = Arc::new(NovaProvider::with_kind(Kind::OpenStack).with_timing(fast()));
    let (found, deleted) =
        crate::sweep::through_the_server(p, "openstack", password_fields(&ks), rogue).await;
    let ids = ids.lock().unwrap().clone();
    assert_eq!(found, [ids[0].as_str()], "only this tenant's orphan");
    assert_eq!(deleted, [ids[0].clone()], "{deleted:?}");
    assert_eq!(
        nova.server_ids(),
        [ids[1].clone()],
        "the other tenant's stays"
    );
}

#[tokio::test]
async fn rackspace_lists_its_marked_servers_page_by_page() {
    let (identity, nova) = rackspace().await;
    nova.page_size(2);
    let p = NovaProvider::with_kind(Kind::Rackspace).with_timing(fast());
    let fields = obj(
        json!({"auth_url": identity, "username": RAX_USER, "api_key": RAX_KEY,
        "region": "DFW"}),
    );
    let mut want = Vec::new();
    for i in 0..5 {
        let node = format!("n{i}");
        let id = nova.plant(RAX_TENANT, &node, marks(&node, "t1"));
        want.push((id, node));
    }
    nova.plant(RAX_TENANT, "by-hand", json!({}));
    let mut got: Vec<(String, String)> = p
        .machines(&fields)
        .await
        .expect("machines")
        .into_iter()
        .map(|m| {
            assert_eq!(
                (m.providertype.as_str(), m.tenant.as_str()),
                ("rackspace", "t1")
            );
            (m.providerid, m.node)
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // The third page is full, so Nova links a fourth, empty one.
    assert_eq!(nova.count(|c| &c.pages), 4, "6 servers in pages of 2");
}

// ------------------------------------------------------------------------------------------------
// Image and flavor by name; user data

/// CREATE for `node` with the image type's `image` and the hardware type's `flavor`.
async fn create_with(
    p: &NovaProvider,
    fields: &Map<String, Value>,
    node: &str,
    [image, flavor]: [&str; 2],
) -> Result<String, weft_provisioner::task::PluginError> {
    let mut c = config(fields, "openstack", node);
    c.insert("image".into(), json!(image));
    c.insert("flavor".into(), json!(flavor));
    let out = p.create(&a_task(Action::Create, node, &c)).await?;
    Ok(out.result["providerid"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn openstack_image_and_flavor_are_found_by_id_then_by_exact_unique_name() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    nova.page_size(2);
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = password_fields(&ks);
    // The fake Nova takes only IMAGE and FLAVOR: a server made proves both were resolved.
    create_with(&p, &fields, "by-name", [IMAGE_NAME, FLAVOR_NAME])
        .await
        .expect("image and flavor by name");
    assert_eq!(
        nova.count(|c| &c.flavor_pages),
        3,
        "5 flavors in pages of 2, all read"
    );
    assert!(nova.count(|c| &c.glance) >= 2, "Glance was asked");
    // Flavor "4" is named "2": the flavor whose id is "2" wins, as openstacksdk's find does.
    create_with(&p, &fields, "by-id", [IMAGE, FLAVOR])
        .await
        .expect("image and flavor by id");
    assert_eq!(nova.count(|c| &c.posts), 2);

    let e = create_with(&p, &fields, "twins", [TWIN_IMAGES, FLAVOR])
        .await
        .expect_err("an ambiguous image name");
    assert!(!e.retryable, "{e}");
    assert!(
        e.message
            .contains("image \"ubuntu-24.04\": 2 images have that name")
            && e.message.contains("3c5b70d2-8a7e-4c57-a1d9-7f0e5b1c2a01")
            && e.message.contains("3c5b70d2-8a7e-4c57-a1d9-7f0e5b1c2a02"),
        "{e}"
    );
    for (image, flavor, field) in [
        ("centos-stream-9", FLAVOR_NAME, "image"),
        (IMAGE_NAME, "m9.huge", "flavor"),
        // Names are exact: Glance's and Nova's, not prefixes or case-folded.
        ("Debian-12-genericcloud", FLAVOR, "image"),
        (IMAGE, "m1", "flavor"),
    ] {
        let e = create_with(&p, &fields, "missing", [image, flavor])
            .await
            .expect_err("a name nothing has");
        let value = if field == "image" { image } else { flavor };
        assert!(!e.retryable, "{e}");
        assert!(
            e.message.contains(&format!(
                "{field} {value:?}: no {field} has that id or name"
            )),
            "{e}"
        );
    }
    assert_eq!(nova.count(|c| &c.posts), 2, "no server for a bad name");
}

#[tokio::test]
async fn openstack_user_data_goes_base64_encoded_and_is_refused_over_the_limit() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let mut fields = password_fields(&ks);
    let script = "#cloud-config\nruncmd:\n  - [touch, /etc/weft-was-here]\n";
    fields.insert("user_data".into(), json!(script));
    let id = create_with(&p, &fields, "ud", [IMAGE, FLAVOR])
        .await
        .expect("create with user data");
    assert_eq!(nova.state.user_data.lock().unwrap()[&id], script);
    // 49149 bytes encode to 65532, the most under the limit; 49150 encode to 65536.
    fields.insert("user_data".into(), json!("x".repeat(49149)));
    let id = create_with(&p, &fields, "ud-max", [IMAGE, FLAVOR])
        .await
        .expect("user data at the limit");
    assert_eq!(nova.state.user_data.lock().unwrap()[&id].len(), 49149);
    fields.insert("user_data".into(), json!("x".repeat(49150)));
    let e = create_with(&p, &fields, "ud-big", [IMAGE, FLAVOR])
        .await
        .expect_err("user data over the limit");
    assert!(!e.retryable, "{e}");
    assert!(
        e.message
            .contains("user_data is 65536 bytes base64-encoded"),
        "{e}"
    );
    fields.insert("user_data".into(), json!(["not", "text"]));
    let e = create_with(&p, &fields, "ud-bad", [IMAGE, FLAVOR])
        .await
        .expect_err("user data that is not text");
    assert!(e.message.contains("user_data must be text"), "{e}");
    assert_eq!(
        nova.count(|c| &c.posts),
        2,
        "nothing sent for bad user data"
    );
}

// ------------------------------------------------------------------------------------------------
// The fault suite's benches (`crate::faults`)

impl Nova {
    fn throttle_next(&self, n: usize) {
        self.faults().throttle = n;
    }

    fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    fn hidden_answers(&self) -> usize {
        self.state.hidden_answers.load(Ordering::SeqCst)
    }

    /// The servers marked for `node`, of any project, not being deleted.
    fn count_marked(&self, node: &str) -> usize {
        self.state
            .servers
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.body["metadata"]["weft-node"] == node && s.deleting.is_none())
            .count()
    }
}

/// Keystone behind a forwarder that counts the token requests Keystone refuses.
struct Counted {
    upstream: String,
    http: reqwest::Client,
    refused: AtomicUsize,
}

async fn count_refusals(
    State(c): State<Arc<Counted>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let token_request = method == axum::http::Method::POST && uri.path() == "/v3/auth/tokens";
    let (status, headers, body) =
        crate::faults::forward(&c.http, &c.upstream, method, &uri, &headers, body).await;
    if token_request && status == StatusCode::UNAUTHORIZED {
        c.refused.fetch_add(1, Ordering::SeqCst);
    }
    crate::faults::answer(status, headers, body)
}

/// The knobs the openstack and rackspace benches share: the Nova stand-in's.
macro_rules! nova_knobs {
    () => {
        fn throttle_next(&self, n: usize) {
            self.nova.throttle_next(n);
        }

        fn retry_after(&self) -> Duration {
            Duration::from_secs(1)
        }

        fn calls(&self) -> Vec<Call> {
            self.nova.calls()
        }

        fn lose_next_create_answer(&self, how: Loss) {
            self.nova.faults().lose = Some(how);
        }

        fn hide_new_machines_for(&self, reads: usize) {
            self.nova.faults().hide_new = reads;
        }

        fn hidden_answers(&self) -> usize {
            self.nova.hidden_answers()
        }

        async fn count_machines(&self, node: &str) -> usize {
            self.nova.count_marked(node)
        }
    };
}

/// The openstack bench: the real Keystone (seen through a counting forwarder) and the Nova fake.
pub(crate) struct Bench {
    ks: Keystone,
    nova: Nova,
    account: Account,
    identity: String,
    counted: Arc<Counted>,
    password: &'static str,
}

impl CloudBench for Bench {
    const TYPE: &'static str = "openstack";

    async fn start() -> Option<Bench> {
        let (ks, nova, account) = cloud(3600).await?;
        let counted = Arc::new(Counted {
            upstream: ks.url.clone(),
            http: reqwest::Client::new(),
            refused: AtomicUsize::new(0),
        });
        let app = Router::new()
            .fallback(count_refusals)
            .with_state(counted.clone());
        let identity = crate::faults::serve(app).await;
        Some(Bench {
            ks,
            nova,
            account,
            identity,
            counted,
            password: PASSWORD,
        })
    }

    fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(NovaProvider::with_kind(Kind::OpenStack).with_timing(fast()))
    }

    fn fields(&self) -> Map<String, Value> {
        obj(
            json!({"auth_url": self.identity, "user_name": USER, "password": self.password,
            "project_name": PROJECT, "region": "RegionOne"}),
        )
    }

    fn node_config(&self) -> Map<String, Value> {
        node()
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        let mut f = self.fields();
        f.insert("password".into(), json!("not-the-password"));
        f
    }

    fn wrong_secret(&self) -> String {
        "not-the-password".into()
    }

    fn refusal(&self) -> &'static str {
        "The request you have made requires authentication"
    }

    fn auth_refusals(&self) -> usize {
        self.counted.refused.load(Ordering::SeqCst)
    }

    /// The user's password is changed by Keystone's admin (`PATCH /v3/users/{id}`).
    async fn rotate(&mut self) {
        crate::rotation::change_password(&self.ks, &self.account.user_id).await;
        self.password = crate::rotation::NEW_PASSWORD;
    }

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        let marks = json!({"weft-node": node, "weft-cluster": cluster, "weft-tenant": tenant});
        self.nova
            .plant(&self.account.project_id, &format!("rogue-{node}"), marks)
    }

    nova_knobs!();
}

/// The rackspace bench: the Identity v2.0 and Nova fakes.
pub(crate) struct RackspaceBench {
    identity: String,
    nova: Nova,
    rax: Arc<RaxState>,
}

impl CloudBench for RackspaceBench {
    const TYPE: &'static str = "rackspace";

    async fn start() -> Option<RackspaceBench> {
        let (identity, nova, rax) = rackspace_identity().await;
        Some(RackspaceBench {
            identity,
            nova,
            rax,
        })
    }

    fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(NovaProvider::with_kind(Kind::Rackspace).with_timing(fast()))
    }

    fn fields(&self) -> Map<String, Value> {
        let key = self.rax.key.lock().unwrap().clone();
        obj(
            json!({"auth_url": self.identity, "username": RAX_USER, "api_key": key,
            "region": "DFW"}),
        )
    }

    fn node_config(&self) -> Map<String, Value> {
        node()
    }

    fn wrong_fields(&self) -> Map<String, Value> {
        let mut f = self.fields();
        f.insert("api_key".into(), json!("wrong-key-0000"));
        f
    }

    fn wrong_secret(&self) -> String {
        "wrong-key-0000".into()
    }

    fn refusal(&self) -> &'static str {
        "Username or api key is invalid"
    }

    fn auth_refusals(&self) -> usize {
        self.rax.refused.load(Ordering::SeqCst)
    }

    /// The user's API key is reset: Identity accepts only the new one.
    async fn rotate(&mut self) {
        *self.rax.key.lock().unwrap() = "fedcba9876543210fedcba9876543210".into();
    }

    async fn make_behind_back(&self, node: &str, cluster: &str, tenant: &str) -> String {
        let marks = json!({"weft-node": node, "weft-cluster": cluster, "weft-tenant": tenant});
        self.nova.plant(RAX_TENANT, &format!("rogue-{node}"), marks)
    }

    nova_knobs!();
}

/// The floating IPs the fake Neutron holds.
fn floating_ips(nova: &Nova) -> Vec<Fip> {
    nova.state.neutron.lock().unwrap().floating.clone()
}

/// `password_fields` with the admin's `floating_network`; Nova shows Neutron's floating IPs.
fn with_floating(ks: &Keystone, nova: &Nova, network: &str) -> Map<String, Value> {
    nova.state.neutron.lock().unwrap().on = true;
    let mut f = password_fields(ks);
    f.insert("floating_network".into(), json!(network));
    f
}

#[tokio::test]
async fn openstack_confirm_allocates_one_floating_ip_and_delete_releases_it() {
    let Some((ks, nova, account)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = with_floating(&ks, &nova, EXTERNAL_NAME);
    let c = config(&fields, "openstack", "os-fip-1");
    let out = p
        .create(&a_task(Action::Create, "os-fip-1", &c))
        .await
        .expect("create");
    let mut made = c.clone();
    made.extend(out.result);
    let ok = p
        .confirm(&a_task(Action::Confirm, "os-fip-1", &made))
        .await
        .expect("confirm");
    let fips = floating_ips(&nova);
    assert_eq!(fips.len(), 1, "one floating IP");
    let f = &fips[0];
    let ips = ok.ipaddresses.unwrap();
    assert_eq!(ips["access_v4"], f.address, "the floating address");
    assert_eq!(ips["bind_v4"], "192.0.2.1", "the fixed address");
    assert_eq!(
        (f.network.as_str(), f.fixed.as_str()),
        (EXTERNAL, "192.0.2.1")
    );
    let server = nova.server_ids().remove(0);
    assert_eq!(f.port, format!("port-{server}"));
    assert!(f.description.contains("os-fip-1"), "{}", f.description);

    // A floating IP someone else attached to another server's port is not weft's to release.
    let other = nova.plant(&account.project_id, "other", json!({}));
    nova.state.neutron.lock().unwrap().floating.push(Fip {
        id: "f0000000-0000-4000-8000-000000000001".into(),
        address: "198.51.100.200".into(),
        network: EXTERNAL.into(),
        port: format!("port-{other}"),
        fixed: "192.0.2.99".into(),
        description: "the admin's".into(),
    });
    // Released by someone else between the list and the DELETE: 404 is success.
    nova.state.neutron.lock().unwrap().released_meanwhile = true;
    p.delete(&a_task(Action::Delete, "os-fip-1", &made))
        .await
        .expect("delete");
    assert!(!nova.state.neutron.lock().unwrap().released_meanwhile);
    let left: Vec<String> = floating_ips(&nova).into_iter().map(|f| f.address).collect();
    assert_eq!(left, ["198.51.100.200"], "weft's floating IP was released");
    // Released already: a second DELETE passes.
    p.delete(&a_task(Action::Delete, "os-fip-1", &made))
        .await
        .expect("delete again");
}

#[tokio::test]
async fn openstack_confirm_retried_after_a_lost_allocation_reuses_the_floating_ip() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    let fields = with_floating(&ks, &nova, EXTERNAL);
    let c = config(&fields, "openstack", "os-fip-2");
    let out = p
        .create(&a_task(Action::Create, "os-fip-2", &c))
        .await
        .expect("create");
    let mut made = c.clone();
    made.extend(out.result);
    nova.state.neutron.lock().unwrap().lose_post = true;
    let e = p
        .confirm(&a_task(Action::Confirm, "os-fip-2", &made))
        .await
        .expect_err("the allocation's answer is lost");
    assert!(e.retryable, "{e}");
    assert_eq!(floating_ips(&nova).len(), 1, "allocated all the same");
    let ok = p
        .confirm(&a_task(Action::Confirm, "os-fip-2", &made))
        .await
        .expect("the retried confirm");
    let fips = floating_ips(&nova);
    assert_eq!(fips.len(), 1, "no second floating IP");
    assert_eq!(
        nova.state.neutron.lock().unwrap().posts,
        1,
        "no second POST"
    );
    let ips = ok.ipaddresses.unwrap();
    assert_eq!(ips["access_v4"], fips[0].address);
    assert_eq!(ips["bind_v4"], "192.0.2.1");
}

#[tokio::test]
async fn openstack_floating_network_names_nothing_or_two_networks_fatally() {
    let Some((ks, nova, _)) = cloud(3600).await else {
        return;
    };
    let p = NovaProvider::with_kind(Kind::OpenStack).with_timing(fast());
    for (network, says) in [
        ("no-such-net", "no floating_network has that id or name"),
        (TWIN_NETWORKS, "2 floating_networks have that name"),
    ] {
        let fields = with_floating(&ks, &nova, network);
        let node = format!("os-fip-{network}");
        let c = config(&fields, "openstack", &node);
        let out = p
            .create(&a_task(Action::Create, &node, &c))
            .await
            .expect("create");
        let mut made = c.clone();
        made.extend(out.result);
        let e = p
            .confirm(&a_task(Action::Confirm, &node, &made))
            .await
            .expect_err("a bad floating_network");
        assert!(!e.retryable, "{e}");
        assert!(
            e.message
                .contains(&format!("floating_network \"{network}\""))
                && e.message.contains(says),
            "{e}"
        );
    }
    assert!(floating_ips(&nova).is_empty());
}
