//! The several-servers deployment of `examples/several-servers`, run for real (issue 36): PostgreSQL,
//! two `weft server` and two `weft provisioner` processes, each in a container of the images
//! `images/build-deploy-images.sh` builds from Debian packages (the weft binary is this build's,
//! mounted read-only), with TLS on every connection.
//!
//! * A Docker network of the test's own; PostgreSQL on it serves TLS only and the servers connect
//!   with `sslmode=verify-full`; both servers serve TLS on both ports and ask provisioners for
//!   client certificates (`client_ca`); `auth = "apikey"` with a provisioner token file.
//! * The provisioners make nodes with the docker provider, so they run in the host's network
//!   namespace (where the nodes' bridge networks are reachable, as on a Docker host) with the
//!   Docker socket mounted; they reach each server's published internal port by its name.
//! * With server B killed, a cluster of two docker nodes is created through server A and becomes
//!   active; with B back and A killed, it is deleted through B and its containers go.
//! * tcpdump captures the network's bridge for the whole run (every connection of the deployment
//!   crosses it). The capture must hold the deployment's traffic and none of: the API keys, the
//!   provider's sensitive `sshkeyseed`, the cluster's SSH private key, the database password, the
//!   secrets' master key (one file, mounted into both servers), the provisioner token; no plain
//!   HTTP or SQL on any port: the servers call the provisioners' own API over HTTPS too, checking
//!   the provisioners' certificates against the client CA.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::{json, Value};

use crate::pcap;

const NODE_IMAGE: &str = "weft-node:bookworm";
const POSTGRES_IMAGE: &str = "weft-postgres:bookworm";
const RUNTIME_IMAGE: &str = "weft-runtime:bookworm";
/// The ports inside the server containers (examples/several-servers/server.toml).
const API_PORT: u16 = 55054;
const INTERNAL_PORT: u16 = 55055;
const PG_PORT: u16 = 5432;
const TENANT: &str = "acme";

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs")
}

/// Runs docker and returns its trimmed stdout; panics with its stderr when it fails.
fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Random hex of `bytes` bytes.
fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// Writes `line` to a new file only its owner reads (mode 0600), as a key or token file is.
fn write_private(path: &Path, line: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// A free TCP port on `ip` (for a port published or bound later).
fn free_port(ip: Ipv4Addr) -> u16 {
    let l = TcpListener::bind((ip, 0)).expect("bind a free port");
    l.local_addr().unwrap().port()
}

/// Docker and the images (built when missing or when their script changed: a hash check when
/// not); `false` when the test must be skipped (never in CI).
fn images_ready() -> bool {
    if !weft_testkit::require("docker") {
        return false;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../images/build-deploy-images.sh");
    match Command::new(&script).output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => weft_testkit::skip_or_fail(
            "the deployment images",
            &format!(
                "images/build-deploy-images.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => weft_testkit::skip_or_fail("the deployment images", &e.to_string()),
    }
}

/// Removes, when dropped (the test passed or not), every container and network whose name holds
/// the run's prefix: the deployment's, the capture's, and the nodes and networks the docker
/// provider made (its `network_prefix` starts with the prefix).
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let filter = format!("name={}", self.0);
        let ids = docker(&["ps", "-aq", "--filter", &filter]);
        let ids = String::from_utf8_lossy(&ids.stdout).to_string();
        for id in ids.split_whitespace() {
            let _ = docker(&["rm", "-f", "-v", id]);
        }
        let nets = docker(&["network", "ls", "-q", "--filter", &filter]);
        let nets = String::from_utf8_lossy(&nets.stdout).to_string();
        for id in nets.split_whitespace() {
            let _ = docker(&["network", "rm", id]);
        }
    }
}

/// A CA that signs the deployment's certificates.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::CommonName, "weft deployment test CA");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// Writes into `dir` the CA (`ca.pem`) and a certificate for `name` with its key: a server's
    /// (`name` its DNS name) as `server.pem` and `server-key.pem`, a provisioner's as `client.pem`
    /// and `client-key.pem`, for client use and for its own API, named `provisioners` as the
    /// servers call it (the layout examples/several-servers/make-certs.sh writes).
    fn issue(&self, dir: &Path, name: &str, client: bool) {
        let sans = if client {
            vec!["provisioners".to_string()]
        } else {
            vec![name.to_string()]
        };
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = if client {
            vec![
                ExtendedKeyUsagePurpose::ClientAuth,
                ExtendedKeyUsagePurpose::ServerAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        };
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let stem = if client { "client" } else { "server" };
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("ca.pem"), self.cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}-key.pem")), key.serialize_pem()).unwrap();
    }
}

/// One server container: its name on the network and the host ports its two ports are
/// published on (loopback only).
struct Server {
    name: &'static str,
    api: u16,
    internal: u16,
}

/// The deployment: names, files and the HTTPS client of the test.
struct Deployment {
    /// First, so that the containers go before the directory their files are mounted from.
    _leftovers: Leftovers,
    prefix: String,
    network: String,
    /// The bridge interface of the network, and the host's address on it.
    bridge: String,
    gateway: Ipv4Addr,
    dir: tempfile::TempDir,
    servers: [Server; 2],
    /// The provisioners' ids and the ports of their own API (on `gateway`).
    provisioners: [(&'static str, u16); 2],
    db_password: String,
    token: String,
    /// The master key of the secrets sealed in the store, one file for both servers.
    secrets_key: String,
    http: reqwest::Client,
}

/// The test's HTTPS client: trusts only the deployment's CA and reaches each server's name at its
/// published external port on loopback.
fn https_client(ca_pem: &str, servers: &[Server; 2]) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap();
    let mut b = reqwest::Client::builder()
        .add_root_certificate(ca)
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(20));
    for s in servers {
        b = b.resolve(s.name, SocketAddr::from((Ipv4Addr::LOCALHOST, s.api)));
    }
    b.build().unwrap()
}

impl Deployment {
    /// The network, the certificates (server certificates name the containers' network names;
    /// provisioners get client certificates), the token file, and free ports.
    fn new() -> Deployment {
        let prefix = format!("weft-it-{}", random_hex(4));
        let leftovers = Leftovers(prefix.clone());
        let network = format!("{prefix}-net");
        let id = docker_ok(&["network", "create", &network]);
        let gateway = docker_ok(&[
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
            &network,
        ]);
        let gateway: Ipv4Addr = gateway.parse().expect("the network's gateway");
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        for name in ["postgres", "weft-a", "weft-b"] {
            ca.issue(&dir.path().join("tls").join(name), name, false);
        }
        for id in ["p1", "p2"] {
            ca.issue(&dir.path().join("tls").join(id), id, true);
        }
        // Another CA, which PostgreSQL's certificate does not chain to.
        Ca::new().issue(&dir.path().join("tls/stranger"), "stranger", true);
        let token = random_hex(32);
        write_private(&dir.path().join("provisioner.token"), &token);
        let secrets_key = random_hex(32);
        write_private(&dir.path().join("secrets.key"), &secrets_key);
        for sub in ["shared", "capture"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let servers = ["weft-a", "weft-b"].map(|name| Server {
            name,
            api: free_port(Ipv4Addr::LOCALHOST),
            internal: free_port(Ipv4Addr::LOCALHOST),
        });
        let http = https_client(&ca.cert.pem(), &servers);
        Deployment {
            _leftovers: leftovers,
            bridge: format!("br-{}", &id[..12]),
            provisioners: ["p1", "p2"].map(|id| (id, free_port(gateway))),
            prefix,
            network,
            gateway,
            dir,
            servers,
            db_password: random_hex(16),
            token,
            secrets_key,
            http,
        }
    }

    /// A container's name: the run's prefix and `role`.
    fn name(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// A `-v` value mounting `rel` (under the test's directory) at `target`, read-only.
    fn mount(&self, rel: &str, target: &str) -> String {
        format!("{}:{target}:ro", self.dir.path().join(rel).display())
    }

    /// The weft binary of this build, mounted where the runtime image expects it.
    fn binary() -> String {
        format!("{}:/usr/local/bin/weft:ro", env!("CARGO_BIN_EXE_weft"))
    }

    /// The servers' database URL: TLS with the CA checked and the name verified.
    fn database_url(&self) -> String {
        format!(
            "postgres://weft:{}@postgres:{PG_PORT}/weft?sslmode=verify-full&sslrootcert=/etc/weft/tls/ca.pem",
            self.db_password
        )
    }

    /// The last lines of every deployment container's log, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for role in ["postgres", "weft-a", "weft-b", "p1", "p2"] {
            let o = docker(&["logs", "--tail", "40", &self.name(role)]);
            out.push_str(&format!(
                "\n---- {role}\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        out
    }

    /// Polls `check` every 200 ms until it answers `Some`, for at most `within`; on time-out,
    /// fails naming `what`, with the containers' logs.
    async fn until<T, F, Fut>(&self, what: &str, within: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let t0 = Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if t0.elapsed() > within {
                panic!("{what}: not within {within:?}{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `docker run` with `options` (flag and value; a flag alone when the value is empty), then
/// `image` and the words of `command`; returns what it printed (the id with `-d`).
fn docker_run(options: &[(&str, &str)], image: &str, command: &str) -> String {
    let mut args = vec!["run"];
    for (flag, value) in options {
        args.push(flag);
        if !value.is_empty() {
            args.push(value);
        }
    }
    args.push(image);
    args.extend(command.split_whitespace());
    docker_ok(&args)
}

/// Starting and stopping the containers.
impl Deployment {
    /// tcpdump on the network's bridge, from the host's network namespace, for the whole run.
    async fn start_capture(&self) {
        let name = self.name("capture");
        let out = format!("{}:/capture", self.dir.path().join("capture").display());
        let options = [
            ("-d", ""),
            ("--name", name.as_str()),
            ("--network", "host"),
            ("--cap-add", "NET_ADMIN"),
            ("--cap-add", "NET_RAW"),
            ("-v", &out),
        ];
        let command = format!(
            "tcpdump -i {} -U -Z root -w /capture/bridge.pcap",
            self.bridge
        );
        docker_run(&options, RUNTIME_IMAGE, &command);
        self.until("tcpdump listens", Duration::from_secs(30), || {
            let o = docker(&["logs", &name]);
            let listening = String::from_utf8_lossy(&o.stderr).contains("listening on");
            async move { listening.then_some(()) }
        })
        .await;
    }

    /// Stops tcpdump and returns what it captured.
    fn stop_capture(&self) -> Vec<u8> {
        docker_ok(&["stop", "-t", "10", &self.name("capture")]);
        std::fs::read(self.dir.path().join("capture/bridge.pcap")).expect("the capture file")
    }

    /// PostgreSQL, known on the network as `postgres`, serving TLS only.
    async fn start_postgres(&self) {
        let name = self.name("postgres");
        let password = format!("POSTGRES_PASSWORD={}", self.db_password);
        let options = [
            ("-d", ""),
            ("--name", name.as_str()),
            ("--network", &self.network),
            ("--network-alias", "postgres"),
            ("-e", &password),
            ("-v", &self.mount("tls/postgres", "/etc/weft/tls")),
        ];
        docker_run(&options, POSTGRES_IMAGE, "");
        self.until("PostgreSQL is ready", Duration::from_secs(60), || {
            let ready = docker(&["exec", &name, "pg_isready", "-q", "-h", "/run/postgresql"])
                .status
                .success();
            async move { ready.then_some(()) }
        })
        .await;
    }

    /// Server `i` with the example's `server.toml` and its own certificate; the database URL
    /// (with this run's password) comes from the environment, which overrides the file. Its two
    /// ports are published on loopback.
    fn start_server(&self, i: usize) {
        let s = &self.servers[i];
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/several-servers");
        let config = format!("{}/server.toml:/etc/weft/server.toml:ro", example.display());
        let tls = self.mount(&format!("tls/{}", s.name), "/etc/weft/tls");
        let token = self.mount("provisioner.token", "/etc/weft/provisioner.token");
        let key = self.mount("secrets.key", "/etc/weft/secrets.key");
        let shared = format!("{}:/var/lib/weft", self.dir.path().join("shared").display());
        let options = [
            ("-d", ""),
            ("--name", &self.name(s.name)),
            ("--network", &self.network),
            ("--network-alias", s.name),
            ("--add-host", &format!("provisioners:{}", self.gateway)),
            ("-p", &format!("127.0.0.1:{}:{API_PORT}", s.api)),
            ("-p", &format!("127.0.0.1:{}:{INTERNAL_PORT}", s.internal)),
            ("-e", &format!("WEFT_DATABASE={}", self.database_url())),
            ("-e", "WEFT_LOG=info"),
            ("-v", &Self::binary()),
            ("-v", &config),
            ("-v", &tls),
            ("-v", &token),
            ("-v", &key),
            ("-v", &shared),
        ];
        let command = "weft server --config /etc/weft/server.toml";
        docker_run(&options, RUNTIME_IMAGE, command);
    }

    /// Waits until server `i` answers `/status` over TLS on its external port.
    async fn wait_server(&self, i: usize) {
        let s = &self.servers[i];
        let url = format!("https://{}:{}/status", s.name, s.api);
        let what = format!("{} answers", s.name);
        self.until(&what, Duration::from_secs(60), || async {
            let r = self.http.get(&url).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
    }

    /// Provisioner `i`, trying the servers from `first` on: in the host's network namespace
    /// (where the docker provider reaches its nodes' networks), with the Docker socket, reaching
    /// the servers' published internal ports by their names; its own API on the network's
    /// gateway, known to the servers as `provisioners`.
    fn start_provisioner(&self, i: usize, first: usize) {
        let (id, port) = self.provisioners[i];
        let servers: Vec<String> = [first, 1 - first]
            .iter()
            .map(|&k| {
                format!(
                    "https://{}:{}",
                    self.servers[k].name, self.servers[k].internal
                )
            })
            .collect();
        let options = [
            ("-d", ""),
            ("--name", &self.name(id)),
            ("--network", "host"),
            ("--add-host", "weft-a:127.0.0.1"),
            ("--add-host", "weft-b:127.0.0.1"),
            ("-e", "WEFT_LOG=info"),
            ("-v", &Self::binary()),
            ("-v", "/var/run/docker.sock:/var/run/docker.sock"),
            ("-v", &self.mount(&format!("tls/{id}"), "/etc/weft/tls")),
            (
                "-v",
                &self.mount("provisioner.token", "/etc/weft/provisioner.token"),
            ),
        ];
        let command = format!(
            "weft provisioner --server {} --id {id} --capacity 4 --bind {}:{port} \
             --advertise-host provisioners --data-dir /var/lib/weft-provisioner \
             --token-file /etc/weft/provisioner.token --ca-cert /etc/weft/tls/ca.pem \
             --tls-cert /etc/weft/tls/client.pem --tls-key /etc/weft/tls/client-key.pem",
            servers.join(","),
            self.gateway
        );
        docker_run(&options, RUNTIME_IMAGE, &command);
    }

    /// `weft admin apikey create` for the superadmin, in a container `role` on the network,
    /// connecting to `database` with the CA of `tls/<ca_dir>` at /etc/weft/tls/ca.pem.
    fn admin_apikey(&self, role: &str, database: &str, ca_dir: &str) -> Output {
        let name = self.name(role);
        let env = format!("WEFT_DATABASE={database}");
        let binary = Self::binary();
        let ca = self.mount(&format!("tls/{ca_dir}"), "/etc/weft/tls");
        let mut args = vec!["run", "--rm", "--name", &name, "--network", &self.network];
        args.extend(["-e", &env, "-v", &binary, "-v", &ca, RUNTIME_IMAGE]);
        args.extend("weft admin apikey create --tenant superadmin --user admin --admin".split(' '));
        docker(&args)
    }

    /// The superadmin's API key, made in the database the way an operator bootstraps one
    /// (`weft admin apikey create`, over TLS to PostgreSQL).
    fn superadmin_key(&self) -> String {
        let out = self.admin_apikey("admin", &self.database_url(), "weft-a");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let created: Value = serde_json::from_str(&text).expect("the key as JSON");
        created["key"].as_str().expect("a key").to_string()
    }

    /// Both ends insist on TLS: PostgreSQL refuses a client that does not encrypt, and weft
    /// refuses a PostgreSQL whose certificate another CA signed.
    fn postgres_needs_tls_both_ways(&self) {
        let plain = self.database_url().replace("verify-full", "disable");
        let out = self.admin_apikey("admin-plain", &plain, "weft-a");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("no encryption"),
            "{err}"
        );
        let out = self.admin_apikey("admin-stranger", &self.database_url(), "stranger");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("invalid peer certificate"),
            "{err}"
        );
    }

    fn kill(&self, i: usize) {
        docker_ok(&["kill", &self.name(self.servers[i].name)]);
    }

    async fn restart(&self, i: usize) {
        docker_ok(&["start", &self.name(self.servers[i].name)]);
        self.wait_server(i).await;
    }
}

/// The REST API, over TLS, with an API key.
impl Deployment {
    /// `method path` on server `i`'s external port; fails unless the answer is 2xx.
    async fn call(&self, method: &str, i: usize, path: &str, key: &str, body: Value) -> Value {
        let s = &self.servers[i];
        let url = format!("https://{}:{}{path}", s.name, s.api);
        let method: reqwest::Method = method.parse().unwrap();
        let mut req = self
            .http
            .request(method.clone(), &url)
            .header("Coopr-ApiKey", key);
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => panic!("{method} {url}: {e}{}", self.logs()),
        };
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "{method} {url}: {status} {text}{}",
            self.logs()
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// `GET path` on server `i`, as text.
    async fn get(&self, i: usize, path: &str, key: &str) -> String {
        self.call("GET", i, path, key, Value::Null)
            .await
            .to_string()
    }

    /// Waits until both provisioners are registered and the docker provider type with them
    /// (listed through server `i`): the catalog's provider is usable from then on.
    async fn wait_provisioners(&self, i: usize, superadmin: &str) {
        let what = "both provisioners register";
        self.until(what, Duration::from_secs(60), || async {
            let listed = self.get(i, "/v2/provisioners", superadmin).await;
            let types = self.get(i, "/v2/plugins/providertypes", superadmin).await;
            let mut ids = self.provisioners.iter().map(|p| format!("\"{}\"", p.0));
            let all = ids.all(|id| listed.contains(&id));
            (all && types.contains("\"docker\"")).then_some(())
        })
        .await;
    }

    /// Tenant `acme` with workers on the provisioners, its admin's API key (answered), and its
    /// catalog: a docker provider whose sensitive `sshkeyseed` is `seed`, nodes of the node image
    /// named after this run, and a service that says where it was installed.
    async fn tenant(&self, i: usize, superadmin: &str, seed: &str) -> String {
        let tenant = json!({"tenant": {"name": TENANT, "workers": 4}});
        self.call("POST", i, "/v2/tenants", superadmin, tenant)
            .await;
        let request = json!({"tenant": TENANT, "user": "admin", "admin": true});
        let created = self
            .call("POST", i, "/v2/apikeys", superadmin, request)
            .await;
        let key = created["key"].as_str().expect("a key").to_string();
        let provider = json!({"name": "dock", "providertype": "docker", "provisioner": {
            "network_prefix": format!("{}-node", self.prefix), "sshkeyseed": seed}});
        let script = "#!/bin/sh\necho installed on $(hostname)\n";
        let install = json!({"type": "shell", "fields": {"script": script}});
        let catalog = [
            ("providers", provider),
            (
                "hardwaretypes",
                json!({"name": "small", "providermap": {"dock": {"flavor": "small"}}}),
            ),
            (
                "imagetypes",
                json!({"name": "os", "providermap": {"dock": {"image": NODE_IMAGE}}}),
            ),
            (
                "services",
                json!({"name": "hello", "provisioner": {"actions": {"install": install}}}),
            ),
            (
                "clustertemplates",
                json!({"name": "t", "defaults": {"services": ["hello"], "provider": "dock",
                    "hardwaretype": "small", "imagetype": "os"},
                    "compatibility": {"services": ["hello"]},
                    "constraints": {"size": {"min": 1, "max": 5}}}),
            ),
        ];
        for (kind, body) in catalog {
            self.call("POST", i, &format!("/v2/{kind}"), &key, body)
                .await;
        }
        key
    }

    /// Waits until cluster `id`'s latest job is complete with the cluster `status` (asking
    /// server `i`); fails at once when it failed.
    async fn wait_cluster(&self, i: usize, key: &str, id: &str, status: &str) {
        let path = format!("/v2/clusters/{id}/status");
        let what = format!("cluster {id} becomes {status}");
        self.until(&what, Duration::from_secs(180), || async {
            let s = self.call("GET", i, &path, key, Value::Null).await;
            assert!(
                s["status"] != "incomplete" && s["actionstatus"] != "failed",
                "cluster {id}: {s}{}",
                self.logs()
            );
            (s["status"] == status && s["actionstatus"] == "complete").then_some(())
        })
        .await;
    }

    /// The node containers the docker provider made for this run.
    fn nodes(&self) -> Vec<String> {
        let filter = format!("name={}-node", self.prefix);
        let names = docker_ok(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]);
        names.lines().map(str::to_string).collect()
    }
}

/// Sends `marker` in clear to server A's external port (TLS refuses it): proof that the capture
/// sees the bytes connections carry across the bridge.
fn send_in_clear(port: u16, marker: &str) {
    use std::io::Read;
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
    s.write_all(marker.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read(&mut [0; 256]);
}

/// The lines of the cluster's SSH private key as the docker provider makes it (OpenSSH text,
/// which travels inside JSON with its line breaks escaped), less the first: it is the same for
/// every ed25519 key.
fn private_key_lines(seed: &str, tenant: &str, cluster: &str) -> Vec<String> {
    let key = weft_provisioner::keys::cluster_key(seed.as_bytes(), tenant, cluster);
    let text = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 20)
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Checks what tcpdump saw on the bridge: the deployment's traffic on every TLS port (the
/// database, both servers' ports, the provisioners' own API), none of it plain HTTP or SQL, and no
/// secret anywhere.
fn check_capture(
    capture: &[u8],
    secrets: &[(&str, String)],
    marker: &str,
    provisioner_ports: &[u16],
) {
    let (flows, packets) = pcap::tcp_flows(capture).expect("a pcap capture");
    assert!(
        !flows.is_empty(),
        "no TCP in the capture ({packets} packets)"
    );
    assert!(
        flows.iter().any(|f| f.contains(marker.as_bytes())),
        "the text sent in clear to server A is not in the capture: it does not see payloads"
    );
    // The servers' calls to a provisioner are few and short: fewer bytes than on the other ports.
    let least = [(PG_PORT, 2_000), (API_PORT, 2_000), (INTERNAL_PORT, 2_000)];
    let least = least
        .into_iter()
        .chain(provisioner_ports.iter().map(|&p| (p, 500)));
    for (port, least) in least {
        let on_port: Vec<&pcap::Flow> = flows.iter().filter(|f| f.touches(port)).collect();
        let bytes: usize = on_port.iter().map(|f| f.bytes.len()).sum();
        assert!(bytes > least, "{bytes} bytes captured on port {port}");
        for f in on_port {
            // Every connection to the port that sends anything opens with a TLS handshake
            // record (PostgreSQL's first asks for TLS in its own 8-byte SSLRequest); the text
            // the test itself sends in clear is the one exception.
            let opening = f.bytes.first().copied();
            let marked = f.contains(marker.as_bytes());
            if f.dst.port() == port && port != PG_PORT && !marked && opening.is_some() {
                assert_eq!(
                    opening,
                    Some(0x16),
                    "not TLS to port {port}: {} -> {}",
                    f.src,
                    f.dst
                );
            }
            for plain in ["HTTP/", "INSERT INTO", "SELECT "] {
                assert!(
                    !f.contains(plain.as_bytes()),
                    "{plain:?} in clear on port {port}: {} -> {}",
                    f.src,
                    f.dst
                );
            }
        }
    }
    for (what, secret) in secrets {
        let in_flow = flows.iter().find(|f| f.contains(secret.as_bytes()));
        let flow = in_flow.map(|f| format!("{} -> {}", f.src, f.dst));
        assert!(
            !pcap::contains(capture, secret.as_bytes()) && in_flow.is_none(),
            "{what} crossed the network in clear ({})",
            flow.as_deref().unwrap_or("outside TCP")
        );
    }
    eprintln!(
        "capture: {packets} packets, {} TCP flows; no secret and no plain HTTP or SQL",
        flows.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_in_containers_over_tls_survive_a_killed_server_and_leak_no_secret() {
    if !images_ready() {
        return;
    }
    let d = Deployment::new();
    d.start_capture().await;
    d.start_postgres().await;
    d.start_server(0);
    d.start_server(1);
    d.wait_server(0).await;
    d.wait_server(1).await;
    let marker = format!("weft-capture-marker-{}", random_hex(8));
    send_in_clear(d.servers[0].api, &marker);
    d.postgres_needs_tls_both_ways();
    let superadmin = d.superadmin_key();
    // p1 tries B first and p2 A first: whichever server is killed, a provisioner moves.
    d.start_provisioner(0, 1);
    d.start_provisioner(1, 0);
    d.wait_provisioners(0, &superadmin).await;
    let seed = random_hex(24);
    let key = d.tenant(0, &superadmin, &seed).await;

    // B is down: the cluster is created through A, and p1 moves from B to A.
    d.kill(1);
    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": 2});
    let created = d.call("POST", 0, "/v2/clusters", &key, body).await;
    let cluster = created["id"].as_str().expect("a cluster id").to_string();
    d.wait_cluster(0, &key, &cluster, "active").await;
    let nodes = d.nodes();
    assert_eq!(nodes.len(), 2, "two node containers: {nodes:?}");
    let label = "{{index .Config.Labels \"weft.tenant\"}}";
    let tenant_id = docker_ok(&["inspect", "-f", label, &nodes[0]]);

    // B is back and A down: the cluster is deleted through B, and p2 moves from A to B.
    d.restart(1).await;
    d.kill(0);
    let path = format!("/v2/clusters/{cluster}");
    d.call("DELETE", 1, &path, &key, Value::Null).await;
    d.wait_cluster(1, &key, &cluster, "terminated").await;
    d.until("the node containers go", Duration::from_secs(60), || {
        let left = d.nodes();
        async move { left.is_empty().then_some(()) }
    })
    .await;

    let capture = d.stop_capture();
    let mut secrets = vec![
        ("the superadmin's API key", superadmin),
        ("the tenant admin's API key", key),
        ("the provider's sshkeyseed", seed),
        ("the database password", d.db_password.clone()),
        ("the secrets' master key", d.secrets_key.clone()),
        ("the provisioner token", d.token.clone()),
    ];
    let key_lines = private_key_lines(&secrets[2].1, &tenant_id, &cluster);
    assert!(key_lines.len() >= 3, "{key_lines:?}");
    for line in key_lines {
        secrets.push(("a line of the cluster's SSH private key", line));
    }
    let ports = d.provisioners.map(|p| p.1);
    check_capture(&capture, &secrets, &marker, &ports);
}
