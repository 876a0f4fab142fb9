//! Stateful clusters (issue 41) on the docker provider, through a real server and agent: the
//! example templates `etcd-docker` and `redis-docker` keep their data and their quorum while
//! members join, restart, leave and are replaced. A client writes a new key every 100 ms through
//! the whole test and reads it back; the clusters are judged by the stores themselves (etcd's
//! member list and health through its JSON gateway; Redis' roles and what every Sentinel knows).
//! Needs docker and the `weft-node:bookworm` image (images/build-node-image.sh), and the
//! containers reach Debian's mirror (the scripts apt-get install etcd and Redis): skipped without
//! docker or the image, failed in CI.
//!
//! The steps and what they need of weft:
//! - create, delete: the shell automator's actions as they were (install, configure,
//!   initialize, start, stop, remove, healthcheck);
//! - expand: JOIN, run on each new member in turn (one membership change at a time), with
//!   `WEFT_MEMBERS_BEFORE_IPS`;
//! - rolling restart: `POST .../services/{svc}/restart` with a rollout, gated by the health check
//!   (and `availability.quorum`: never more than one member of a quorum down at once);
//! - shrink: LEAVE on each leaving member in turn, before its STOP, with `WEFT_MEMBERS_AFTER_IPS`;
//! - replace of a killed member: JOIN on the new machine, which removes the dead member's stale
//!   entry first.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use weft_provisioner::docker::{LABEL_CLUSTER, LABEL_TENANT};

use crate::common::{until, Server};
use crate::docker::{
    agent_with, check, docker, labelled, ready, run_job, wait_status, Cleanup, FAILED, T,
};

// ---- the cluster under test ----

/// A cluster made from `template` with `size` nodes, active, and what removes its containers and
/// network whatever happens.
struct Made {
    id: String,
    labels: Vec<String>,
    _cleanup: Cleanup,
}

async fn create(s: &Server, tenant_id: &str, template: &str, size: usize) -> (Made, Value) {
    let body = json!({"name": template, "clusterTemplate": template, "numMachines": size});
    let (code, c) = s.ext(Method::POST, T, "/v2/clusters", Some(body)).await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let labels = vec![
        format!("{LABEL_CLUSTER}={id}"),
        format!("{LABEL_TENANT}={tenant_id}"),
    ];
    let made = Made {
        _cleanup: Cleanup::labels(&labels),
        id,
        labels,
    };
    let c = wait_status(s, &made.id, "active", &FAILED).await;
    assert_eq!(c["nodes"].as_array().unwrap().len(), size, "{c}");
    (made, c)
}

/// Deletes the cluster: no container and no network is left.
async fn delete(s: &Server, made: &Made) {
    let path = format!("/v2/clusters/{}", made.id);
    let (code, body) = s.ext(Method::DELETE, T, &path, None).await;
    assert_eq!(code, 200, "{body}");
    wait_status(s, &made.id, "terminated", &["incomplete", "inconsistent"]).await;
    assert!(labelled("container", &made.labels).is_empty());
    assert!(labelled("network", &made.labels).is_empty());
}

/// The agent for these tests: a task may run longer than the default minute (an apt-get install,
/// a start that waits for its member to be in sync, a leave that waits for a failover).
async fn stateful_agent(s: &Server, id: &str, tenant_id: &str) -> weft_provisioner::Agent {
    let mut config = s.config(id);
    config.task_timeout = Duration::from_secs(180);
    agent_with(s, tenant_id, config).await
}

/// Node id, hostname and address of the nodes running `service`, in node number order.
fn members(c: &Value, service: &str) -> Vec<(String, String, String)> {
    let mut nodes: Vec<(u64, String, String, String)> = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| {
            n["properties"]["services"]
                .as_array()
                .unwrap()
                .contains(&json!(service))
        })
        .map(|n| {
            let p = &n["properties"];
            (
                p["nodenum"].as_u64().unwrap_or_default(),
                n["id"].as_str().unwrap().to_string(),
                p["hostname"].as_str().unwrap().to_string(),
                p["ipaddresses"]["bind_v4"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, i, h, a)| (i, h, a)).collect()
}

fn ips(members: &[(String, String, String)]) -> Vec<String> {
    members.iter().map(|m| m.2.clone()).collect()
}

/// The container of node `node`.
fn container(node: &str) -> String {
    let found = labelled("container", &[format!("weft.node={node}")]);
    assert_eq!(found.len(), 1, "one container for {node}: {found:?}");
    found[0].clone()
}

/// The latest job's plan of cluster `id`.
async fn latest_plan(s: &Server, id: &str) -> Value {
    let path = format!("/v2/clusters/{id}/plans");
    s.ext(Method::GET, T, &path, None).await.1[0].clone()
}

/// A rolling restart of `service`, one node at a time behind its health check; returns the plan.
/// A restart of every node at once is refused first (the service's quorum rule).
async fn rolling_restart(s: &Server, id: &str, service: &str) -> Value {
    let path = format!("/v2/clusters/{id}/services/{service}/restart");
    let (code, answer) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 409, "a restart of all at once: {answer}");
    let body = json!({"rollout": {"canaries": 1, "maxInFlight": 1}});
    run_job(
        s,
        id,
        Method::POST,
        &format!("services/{service}/restart"),
        Some(body),
    )
    .await;
    let plan = latest_plan(s, id).await;
    assert_eq!(plan["action"], "RESTART_SERVICES", "{plan}");
    plan
}

/// Replaces node `node`, whose machine was killed: a drift check finds it lost first (so the
/// replacement runs no LEAVE on it), then the replacement starts.
async fn replace_lost(s: &Server, id: &str, node: &str) {
    let r = check(s, id).await;
    let lost = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == node)
        .map(|n| n["machine"].clone());
    assert_eq!(lost, Some(json!("stopped")), "{r}");
    // The replacement reads the check's findings from its STATUS task: the lost machine runs no
    // LEAVE.
    let path = format!("/v2/clusters/{id}/nodes/{node}/replace");
    let (code, plan) = s
        .ext(Method::POST, T, &format!("{path}?dryrun=true"), None)
        .await;
    assert_eq!(code, 200, "{plan}");
    assert!(!plan.to_string().contains("\"LEAVE\""), "{plan}");
    let (code, answer) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 200, "{answer}");
}

// ---- the client: a new key every 100 ms, written and read back ----

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Etcd,
    Redis,
}

/// What the client saw in one phase of the test (from one [`Writer::phase`] to the next).
#[derive(Debug, Default, Clone)]
struct Phase {
    ok: usize,
    failed: usize,
    /// The most writes that failed in a row.
    longest_run: usize,
    /// The longest time between two writes that succeeded one after the other (a tenth of a
    /// second when all is well): failed writes and slow ones both count.
    longest_gap: Duration,
    /// What each member answered to the first failed write of the longest run.
    errors: Vec<String>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Every key written and read back (and, for Redis, acknowledged by a replica).
    acked: Vec<String>,
    phase: Phase,
    run: usize,
    run_errors: Vec<String>,
    last_ok: Option<Instant>,
}

impl Seen {
    fn record(&mut self, key: String, result: Result<(), Vec<String>>) {
        match result {
            Ok(()) => {
                self.acked.push(key);
                self.phase.ok += 1;
                if let Some(t) = self.last_ok.replace(Instant::now()) {
                    self.phase.longest_gap = self.phase.longest_gap.max(t.elapsed());
                }
                self.run = 0;
            }
            Err(errors) => {
                self.phase.failed += 1;
                self.run += 1;
                if self.run == 1 {
                    self.run_errors = errors;
                }
                if self.run > self.phase.longest_run {
                    self.phase.longest_run = self.run;
                    self.phase.errors.clone_from(&self.run_errors);
                }
            }
        }
    }
}

/// Writes `<prefix><n>` = `<n>` every 100 ms to the first member (of `endpoints`, tried in turn
/// from the last that worked) that takes it, and reads it back from that member.
struct Writer {
    endpoints: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

const PREFIX: &str = "weft-test/";

impl Writer {
    fn start(kind: Kind, endpoints: Vec<String>) -> Writer {
        let endpoints = Arc::new(Mutex::new(endpoints));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(300))
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let (eps, sn, st) = (endpoints.clone(), seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut n, mut first) = (0u64, 0usize);
            while !st.load(Ordering::SeqCst) {
                tick.tick().await;
                n += 1;
                let key = format!("{PREFIX}{n:06}");
                let members = eps.lock().unwrap().clone();
                let mut errors = Vec::new();
                let mut done = false;
                for i in 0..members.len() {
                    let at = (first + i) % members.len();
                    match write_read(kind, &http, &members[at], &key).await {
                        Ok(()) => {
                            first = at;
                            done = true;
                            break;
                        }
                        Err(e) => errors.push(format!("{}: {e}", members[at])),
                    }
                }
                let result = if done { Ok(()) } else { Err(errors) };
                sn.lock().unwrap().record(key, result);
            }
        });
        Writer {
            endpoints,
            seen,
            stop,
            task,
        }
    }

    /// The members to write to from now on.
    fn members(&self, ips: Vec<String>) {
        *self.endpoints.lock().unwrap() = ips;
    }

    /// What the client saw since the last call (`what`, shown on the test's output), after at
    /// least `min_ok` more writes succeeded (waiting for them up to a minute).
    async fn phase(&self, what: &str, min_ok: usize) -> Phase {
        until(Duration::from_secs(60), "writes that succeed", || async {
            let s = self.seen.lock().unwrap();
            (s.phase.ok >= min_ok).then_some(())
        })
        .await;
        let mut s = self.seen.lock().unwrap();
        if let Some(t) = s.last_ok {
            s.phase.longest_gap = s.phase.longest_gap.max(t.elapsed());
        }
        let p = std::mem::take(&mut s.phase);
        eprintln!(
            "{what}: {} writes ok, {} failed (at most {} in a row), longest gap {:?}",
            p.ok, p.failed, p.longest_run, p.longest_gap
        );
        p
    }

    fn acked(&self) -> Vec<String> {
        self.seen.lock().unwrap().acked.clone()
    }

    async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the writer");
        let s = self.seen.lock().unwrap();
        s.acked.clone()
    }
}

async fn write_read(kind: Kind, http: &reqwest::Client, ip: &str, key: &str) -> Result<(), String> {
    let value = key.rsplit('/').next().unwrap_or_default();
    match kind {
        Kind::Etcd => etcd_write_read(http, ip, key, value).await,
        Kind::Redis => {
            tokio::time::timeout(Duration::from_secs(3), redis_write_read(ip, key, value))
                .await
                .map_err(|_| "timed out".to_string())?
        }
    }
}

// ---- etcd, through its JSON gateway (keys and values in base64) ----

async fn etcd_call(
    http: &reqwest::Client,
    ip: &str,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    let r = http
        .post(format!("http://{ip}:2379/v3/{path}"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("{e}"))?;
    let code = r.status();
    let v: Value = r.json().await.map_err(|e| format!("{code}: {e}"))?;
    if !code.is_success() || v.get("error").is_some() {
        return Err(format!("{code}: {v}"));
    }
    Ok(v)
}

async fn etcd_write_read(
    http: &reqwest::Client,
    ip: &str,
    key: &str,
    value: &str,
) -> Result<(), String> {
    let (k, v) = (B64.encode(key), B64.encode(value));
    etcd_call(http, ip, "kv/put", json!({"key": k, "value": v})).await?;
    let got = etcd_call(http, ip, "kv/range", json!({"key": k})).await?;
    if got["kvs"][0]["value"] == v.as_str() {
        Ok(())
    } else {
        Err(format!("read back {got}"))
    }
}

/// Every key under [`PREFIX`] that the etcd member at `ip` holds.
async fn etcd_keys(http: &reqwest::Client, ip: &str) -> BTreeSet<String> {
    let end = format!("{}0", PREFIX.trim_end_matches('/'));
    let body = json!({"key": B64.encode(PREFIX), "range_end": B64.encode(end), "keys_only": true});
    let got = etcd_call(http, ip, "kv/range", body)
        .await
        .expect("a range read");
    got["kvs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|kv| {
            let raw = B64.decode(kv["key"].as_str().unwrap()).unwrap();
            String::from_utf8(raw).unwrap()
        })
        .collect()
}

/// The names of the members the etcd member at `ip` lists, or why it cannot say.
async fn etcd_member_names(http: &reqwest::Client, ip: &str) -> Result<BTreeSet<String>, String> {
    let v = etcd_call(http, ip, "cluster/member/list", json!({})).await?;
    Ok(v["members"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_string())
        .collect())
}

async fn etcd_healthy(http: &reqwest::Client, ip: &str) -> bool {
    let r = http.get(format!("http://{ip}:2379/health")).send().await;
    match r {
        Ok(r) => r.json::<Value>().await.is_ok_and(|v| v["health"] == "true"),
        Err(_) => false,
    }
}

/// Waits (up to 90 s) until every member of `members` lists exactly their hostnames and answers
/// healthy; `etcdctl endpoint health --cluster` in a member's container agrees. Fails showing
/// what each member said.
async fn etcd_settled(http: &reqwest::Client, members: &[(String, String, String)]) {
    let want: BTreeSet<String> = members.iter().map(|m| m.1.clone()).collect();
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let mut said = Vec::new();
        let mut good = true;
        for (_, _, ip) in members {
            let names = etcd_member_names(http, ip).await;
            let healthy = etcd_healthy(http, ip).await;
            good &= healthy && names.as_ref().is_ok_and(|n| *n == want);
            said.push(format!("{ip}: healthy {healthy}, members {names:?}"));
        }
        if good {
            break;
        }
        assert!(
            Instant::now() < end,
            "etcd members not {want:?} and healthy: {said:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let inside = container(&members[0].0);
    // etcdctl reports health on its standard error.
    let line = format!(
        "etcdctl --endpoints http://{}:2379 endpoint health --cluster 2>&1",
        members[0].2
    );
    let out = docker(&["exec", &inside, "sh", "-c", &line]).expect("etcdctl endpoint health");
    assert_eq!(
        out.lines().filter(|l| l.contains("is healthy")).count(),
        members.len(),
        "{out}"
    );
}

/// The member (node id, hostname, address) of `members` that leads, as the members say.
async fn etcd_leader(
    http: &reqwest::Client,
    members: &[(String, String, String)],
) -> (String, String, String) {
    until(Duration::from_secs(30), "the etcd leader", || async {
        for m in members {
            let Ok(st) = etcd_call(http, &m.2, "maintenance/status", json!({})).await else {
                continue;
            };
            if st["leader"].as_str().is_some() && st["leader"] == st["header"]["member_id"] {
                return Some(m.clone());
            }
        }
        None
    })
    .await
}

// ---- Redis, over its protocol (RESP) ----

#[derive(Debug, Clone, PartialEq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Resp>),
}

impl Resp {
    fn text(&self) -> String {
        match self {
            Resp::Simple(s) | Resp::Error(s) | Resp::Bulk(Some(s)) => s.clone(),
            Resp::Int(i) => i.to_string(),
            Resp::Bulk(None) => String::new(),
            Resp::Array(a) => a.iter().map(Resp::text).collect::<Vec<_>>().join(" "),
        }
    }

    fn items(&self) -> Vec<String> {
        match self {
            Resp::Array(a) => a.iter().map(Resp::text).collect(),
            other => vec![other.text()],
        }
    }
}

struct Conn(BufReader<TcpStream>);

impl Conn {
    async fn open(ip: &str, port: u16) -> Result<Conn, String> {
        let c = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect((ip, port)))
            .await
            .map_err(|_| format!("{ip}:{port}: connect timed out"))?
            .map_err(|e| format!("{ip}:{port}: {e}"))?;
        Ok(Conn(BufReader::new(c)))
    }

    async fn call(&mut self, args: &[&str]) -> Result<Resp, String> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.0
            .get_mut()
            .write_all(out.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        Box::pin(self.read()).await
    }

    async fn read(&mut self) -> Result<Resp, String> {
        let mut line = String::new();
        let n = self
            .0
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        let line = line.trim_end_matches("\r\n");
        let (tag, rest) = line.split_at(1);
        let num = || rest.parse::<i64>().map_err(|e| format!("{line}: {e}"));
        Ok(match tag {
            "+" => Resp::Simple(rest.into()),
            "-" => Resp::Error(rest.into()),
            ":" => Resp::Int(num()?),
            "$" if num()? < 0 => Resp::Bulk(None),
            "$" => {
                let mut buf = vec![0; usize::try_from(num()?).unwrap() + 2];
                self.0
                    .read_exact(&mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                buf.truncate(buf.len() - 2);
                Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
            "*" if num()? < 0 => Resp::Array(Vec::new()),
            "*" => {
                let mut items = Vec::new();
                for _ in 0..num()? {
                    items.push(Box::pin(self.read()).await?);
                }
                Resp::Array(items)
            }
            _ => return Err(format!("unexpected answer {line:?}")),
        })
    }
}

/// One command to `ip:port` on a connection of its own.
async fn redis(ip: &str, port: u16, args: &[&str]) -> Result<Resp, String> {
    let mut c = Conn::open(ip, port).await?;
    tokio::time::timeout(Duration::from_secs(3), c.call(args))
        .await
        .map_err(|_| format!("{ip}:{port} {args:?}: timed out"))?
}

/// SET on the node at `ip`, acknowledged by a replica (`WAIT 1`), then read back.
async fn redis_write_read(ip: &str, key: &str, value: &str) -> Result<(), String> {
    let mut c = Conn::open(ip, 6379).await?;
    match c.call(&["SET", key, value]).await? {
        Resp::Simple(s) if s == "OK" => {}
        other => return Err(other.text()),
    }
    match c.call(&["WAIT", "1", "1000"]).await? {
        Resp::Int(n) if n >= 1 => {}
        other => return Err(format!("no replica acknowledged: {}", other.text())),
    }
    match c.call(&["GET", key]).await? {
        Resp::Bulk(Some(v)) if v == value => Ok(()),
        other => Err(format!("read back {other:?}")),
    }
}

/// The keys of `keys` that the Redis node at `ip` does not hold.
async fn redis_missing(ip: &str, keys: &[String]) -> Vec<String> {
    let mut c = Conn::open(ip, 6379).await.expect("a connection");
    let mut missing = Vec::new();
    for k in keys {
        let got = c.call(&["GET", k]).await.expect("GET");
        if got == Resp::Bulk(None) {
            missing.push(k.clone());
        }
    }
    missing
}

/// Waits (up to 90 s) until exactly one of `members` is the primary, every other one its
/// replica with the link up, and every Sentinel names that primary and knows exactly the other
/// members as replicas and Sentinels (no stale entry of a member that left or died). Returns
/// the primary's address.
async fn redis_settled(members: &[(String, String, String)]) -> String {
    let n = members.len();
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let (primary, said) = redis_view(members).await;
        if let Some(p) = primary {
            return p;
        }
        assert!(
            Instant::now() < end,
            "redis not settled on {n} members: {said:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn redis_view(members: &[(String, String, String)]) -> (Option<String>, Vec<String>) {
    let n = members.len();
    let mut said = Vec::new();
    let mut roles = Vec::new();
    for (_, _, ip) in members {
        let role = redis(ip, 6379, &["ROLE"]).await.map(|r| r.items());
        said.push(format!("{ip} role: {role:?}"));
        roles.push((ip.clone(), role.unwrap_or_default()));
    }
    let primaries: Vec<&String> = roles
        .iter()
        .filter(|(_, r)| r.first().is_some_and(|r| r == "master"))
        .map(|(ip, _)| ip)
        .collect();
    let [primary] = primaries[..] else {
        return (None, said);
    };
    let mut good = roles.iter().all(|(ip, r)| {
        ip == primary
            || (r.len() >= 4 && r[0] == "slave" && r[1] == *primary && r[3] == "connected")
    });
    let want = (n - 1).to_string();
    for (_, _, ip) in members {
        let named = redis(ip, 26379, &["SENTINEL", "get-master-addr-by-name", "weft"])
            .await
            .map(|r| r.items());
        let master = redis(ip, 26379, &["SENTINEL", "master", "weft"])
            .await
            .map(|r| r.items());
        let field = |m: &Vec<String>, k: &str| {
            m.iter()
                .position(|x| x == k)
                .and_then(|i| m.get(i + 1))
                .cloned()
                .unwrap_or_default()
        };
        let ok = named.as_ref().is_ok_and(|a| a.first() == Some(primary))
            && master.as_ref().is_ok_and(|m| {
                field(m, "flags") == "master"
                    && field(m, "num-slaves") == want
                    && field(m, "num-other-sentinels") == want
            });
        good &= ok;
        said.push(format!("{ip} sentinel: {named:?} {master:?}"));
    }
    (good.then(|| primary.clone()), said)
}

/// Makes the replica at `to` the primary in place of `primary`, losing no acknowledged write: the
/// other replicas may not be chosen for the moment, and the primary pauses writes until every
/// replica has all it wrote and the Sentinel failover is over (as a leaving primary does).
async fn move_primary(members: &[(String, String, String)], primary: &str, to: &str) {
    let priority = |p: &'static str| async move {
        for (_, _, ip) in members.iter().filter(|m| m.2 != to) {
            let r = redis(ip, 6379, &["CONFIG", "SET", "replica-priority", p]).await;
            assert_eq!(r, Ok(Resp::Simple("OK".into())), "{ip}");
        }
    };
    priority("0").await;
    let r = redis(primary, 6379, &["CLIENT", "PAUSE", "20000", "WRITE"]).await;
    assert_eq!(r, Ok(Resp::Simple("OK".into())));
    until(
        Duration::from_secs(10),
        "the replicas caught up",
        || async {
            let info = redis(primary, 6379, &["INFO", "replication"])
                .await
                .ok()?
                .text();
            let at = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("master_repl_offset:"))?
                .to_string();
            let replicas: Vec<&str> = info.lines().filter(|l| l.starts_with("slave")).collect();
            let all = replicas.len() == members.len() - 1
                && replicas
                    .iter()
                    .all(|l| l.contains(&format!("offset={at},")));
            all.then_some(())
        },
    )
    .await;
    let r = redis(to, 26379, &["SENTINEL", "FAILOVER", "weft"]).await;
    assert_eq!(r, Ok(Resp::Simple("OK".into())));
    until(Duration::from_secs(60), "the new primary", || async {
        (redis_view(members).await.0.as_deref() == Some(to)).then_some(())
    })
    .await;
    let _ = redis(primary, 6379, &["CLIENT", "UNPAUSE"]).await;
    priority("100").await;
}

// ---- the tests ----

/// The longest etcd may go without taking a write while one member at a time restarts, joins or
/// leaves, or its leader dies: about one leader election (etcd's election timeout is 1 s here)
/// and the client's own time-outs, with room for a machine that runs the test's containers on
/// two cores.
const ETCD_MAX_GAP: Duration = Duration::from_secs(6);

/// The longest etcd may go without taking a write during a rolling restart, where a leader that
/// stops hands its leadership over first: one election at most.
const ETCD_RESTART_GAP: Duration = Duration::from_secs(3);

/// The same for Redis, whose primary restarts in place (writes fail until it is back) and whose
/// Sentinels fail over a dead primary after 3 s (`down-after-milliseconds`).
const REDIS_MAX_GAP: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_cluster_keeps_its_quorum_and_its_data_while_members_join_restart_leave_and_are_replaced(
) {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let (s, tenant_id) = Server::start(T).await;
    let agent = stateful_agent(&s, "p-etcd", &tenant_id).await;
    let http = s.http.clone();

    // Create 3: one cluster of three members, named by their hostnames.
    let (made, c) = create(&s, &tenant_id, "etcd-docker", 3).await;
    let id = made.id.clone();
    let three = members(&c, "etcd");
    etcd_settled(&http, &three).await;
    let writer = Writer::start(Kind::Etcd, ips(&three));
    let p = writer.phase("etcd create", 20).await;
    assert_eq!(p.failed, 0, "writes failed on a healthy cluster: {p:?}");

    // Expand to 5 (JOIN, one member at a time): five members, all healthy.
    let c = run_job(&s, &id, Method::POST, "nodes", Some(json!({"count": 2}))).await;
    let five = members(&c, "etcd");
    assert_eq!(five.len(), 5, "{c}");
    etcd_settled(&http, &five).await;
    writer.members(ips(&five));
    let p = writer.phase("etcd expand", 10).await;
    assert!(p.longest_gap < ETCD_MAX_GAP, "expand: {p:?}");

    // A rolling restart (quorum rule: one member down at a time, behind the health check): the
    // longest time without a write stays within about one election.
    let plan = rolling_restart(&s, &id, "etcd").await;
    let changed = plan["rollout"]["changedNodes"].as_array().unwrap().len();
    assert_eq!(changed, 5, "every member restarted: {plan}");
    etcd_settled(&http, &five).await;
    let p = writer.phase("etcd rolling restart", 10).await;
    assert!(
        p.longest_gap < ETCD_RESTART_GAP,
        "no write for {:?} ({} failed in a row) during the rolling restart: {p:?}",
        p.longest_gap,
        p.longest_run
    );

    // Shrink to 3 (LEAVE, newest first): three members, every key written is readable.
    let c = run_job(&s, &id, Method::DELETE, "nodes", Some(json!({"count": 2}))).await;
    let three = members(&c, "etcd");
    assert_eq!(three.len(), 3, "{c}");
    writer.members(ips(&three));
    etcd_settled(&http, &three).await;
    let p = writer.phase("etcd shrink", 10).await;
    assert!(p.longest_gap < ETCD_MAX_GAP, "shrink: {p:?}");
    let acked = writer.acked();
    let held = etcd_keys(&http, &three[0].2).await;
    let lost: Vec<&String> = acked.iter().filter(|k| !held.contains(*k)).collect();
    assert!(
        lost.is_empty(),
        "{} keys lost at shrink: {lost:?}",
        lost.len()
    );

    // The leader is killed: the others elect another within about one election, and the node
    // is replaced (JOIN on the new machine removes the dead member first): three members again,
    // all healthy, the same names.
    let (victim, victim_host, _) = etcd_leader(&http, &three).await;
    docker(&["kill", &container(&victim)]).unwrap();
    replace_lost(&s, &id, &victim).await;
    let c = wait_status(&s, &id, "active", &FAILED).await;
    let again = members(&c, "etcd");
    assert_eq!(again.len(), 3, "{c}");
    assert!(again.iter().any(|m| m.0 == victim && m.1 == victim_host));
    writer.members(ips(&again));
    etcd_settled(&http, &again).await;
    let p = writer.phase("etcd replace", 10).await;
    assert!(p.longest_gap < ETCD_MAX_GAP, "the leader killed: {p:?}");

    let acked = writer.stop().await;
    for (_, _, ip) in &again {
        let held = etcd_keys(&http, ip).await;
        let lost: Vec<&String> = acked.iter().filter(|k| !held.contains(*k)).collect();
        assert!(lost.is_empty(), "{ip} lacks {} keys: {lost:?}", lost.len());
    }
    assert!(acked.len() > 100, "too few writes to tell: {}", acked.len());

    delete(&s, &made).await;
    agent.shutdown().await;
    eprintln!("etcd: {} keys written in {:?}", acked.len(), t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_cluster_under_sentinel_keeps_its_data_while_members_join_restart_leave_and_are_replaced(
) {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let (s, tenant_id) = Server::start(T).await;
    let agent = stateful_agent(&s, "p-redis", &tenant_id).await;

    // Create 3: the first node is the primary, the others its replicas, three Sentinels.
    let (made, c) = create(&s, &tenant_id, "redis-docker", 3).await;
    let id = made.id.clone();
    let three = members(&c, "redis");
    let primary = redis_settled(&three).await;
    assert_eq!(primary, three[0].2, "the first node is the primary");
    let writer = Writer::start(Kind::Redis, ips(&three));
    let p = writer.phase("redis create", 20).await;
    assert_eq!(p.failed, 0, "writes failed on a healthy cluster: {p:?}");

    // Expand to 5 (JOIN: replicas of the primary Sentinel names, each with a Sentinel).
    let c = run_job(&s, &id, Method::POST, "nodes", Some(json!({"count": 2}))).await;
    let five = members(&c, "redis");
    assert_eq!(five.len(), 5, "{c}");
    assert_eq!(redis_settled(&five).await, primary);
    writer.members(ips(&five));
    let p = writer.phase("redis expand", 10).await;
    assert!(p.longest_gap < REDIS_MAX_GAP, "expand: {p:?}");

    // A rolling restart, one node at a time behind the health check.
    let plan = rolling_restart(&s, &id, "redis").await;
    let changed = plan["rollout"]["changedNodes"].as_array().unwrap().len();
    assert_eq!(changed, 5, "every node restarted: {plan}");
    let primary = redis_settled(&five).await;
    let p = writer.phase("redis rolling restart", 10).await;
    assert!(
        p.longest_gap < REDIS_MAX_GAP,
        "no write for {:?} during the rolling restart: {p:?}",
        p.longest_gap
    );

    // The newest node becomes the primary, so that the shrink takes the primary away: LEAVE
    // hands over with a Sentinel failover first.
    let newest = five[4].2.clone();
    move_primary(&five, &primary, &newest).await;

    // Shrink to 3 (LEAVE, newest first): the primary leaves, every key written is readable on
    // every remaining node.
    let c = run_job(&s, &id, Method::DELETE, "nodes", Some(json!({"count": 2}))).await;
    let three = members(&c, "redis");
    assert_eq!(three.len(), 3, "{c}");
    writer.members(ips(&three));
    let primary = redis_settled(&three).await;
    assert_ne!(primary, newest);
    let p = writer.phase("redis shrink", 10).await;
    assert!(p.longest_gap < REDIS_MAX_GAP, "shrink: {p:?}");
    let acked = writer.acked();
    for (_, _, ip) in &three {
        let lost = redis_missing(ip, &acked).await;
        assert!(
            lost.is_empty(),
            "{ip} lacks {} keys at shrink: {lost:?}",
            lost.len()
        );
    }

    // The primary is killed: Sentinel fails over; the node is replaced, and its new machine
    // joins as a replica (the dead member forgotten by every Sentinel).
    let (victim, victim_host, _) = three.iter().find(|m| m.2 == primary).cloned().unwrap();
    docker(&["kill", &container(&victim)]).unwrap();
    replace_lost(&s, &id, &victim).await;
    let c = wait_status(&s, &id, "active", &FAILED).await;
    let again = members(&c, "redis");
    assert_eq!(again.len(), 3, "{c}");
    assert!(again.iter().any(|m| m.1 == victim_host));
    writer.members(ips(&again));
    let now = redis_settled(&again).await;
    let replaced = again.iter().find(|m| m.0 == victim).unwrap();
    assert_ne!(now, replaced.2, "the new machine joins as a replica");
    let p = writer.phase("redis replace", 10).await;
    assert!(p.longest_gap < REDIS_MAX_GAP, "the primary killed: {p:?}");

    let acked = writer.stop().await;
    for (_, _, ip) in &again {
        let lost = redis_missing(ip, &acked).await;
        assert!(lost.is_empty(), "{ip} lacks {} keys: {lost:?}", lost.len());
    }
    assert!(acked.len() > 100, "too few writes to tell: {}", acked.len());

    delete(&s, &made).await;
    agent.shutdown().await;
    eprintln!("redis: {} keys written in {:?}", acked.len(), t0.elapsed());
}
