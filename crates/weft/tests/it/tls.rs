//! TLS on the wire (issue 36), through the real binary and a real TLS client (curl): `weft up
//! --tls` serves HTTPS on both ports with a CA of its own and its provisioner verifies it; `weft
//! server` refuses plain HTTP beyond loopback; with `client_ca` the provisioner port refuses a
//! provisioner without a client certificate; a provisioner that does not trust the server's CA
//! refuses it at once; certificate files replaced on disk are served without a restart.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};

use crate::crash::free_ports;
use crate::support::weft;

/// curl, or `None` (the test then skips, or fails under CI=true).
fn curl_present() -> bool {
    Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `curl -s` with `args`; returns its exit code and body.
fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .args(args)
        .output()
        .expect("run curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A child killed when dropped, with the lines it printed until its banner.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and reads stdout until a line starting with `until`; returns the lines read.
fn start_until(mut cmd: Command, until: &str) -> (Proc, Vec<String>) {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn weft");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("read stdout");
        let done = line.trim().starts_with(until);
        seen.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(
        seen.last().is_some_and(|l| l.trim().starts_with(until)),
        "exited before printing {until}: {seen:?}"
    );
    (Proc(child), seen)
}

/// `weft up` with `flags` on `data` and `ports`, once its banner is printed.
fn weft_up(data: &Path, ports: (u16, u16), flags: &[&str]) -> (Proc, Vec<String>) {
    let mut cmd = weft();
    cmd.arg("up")
        .args(flags)
        .args(["--port", &ports.0.to_string()])
        .args(["--internal-port", &ports.1.to_string(), "--data-dir"])
        .arg(data);
    start_until(cmd, "stop:")
}

/// The URL printed after `label` in `lines`.
fn url_after(lines: &[String], label: &str) -> String {
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {label} in {lines:?}"))
        .trim_end_matches("/v2")
        .to_string()
}

#[test]
fn weft_up_tls_serves_https_on_both_ports_and_its_provisioner_verifies_it() {
    if !curl_present() {
        weft_testkit::skip_or_fail("curl", "not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The banner comes once the embedded provisioner has registered over mutual TLS.
    let (_up, lines) = weft_up(&data, free_ports(), &["--tls"]);
    let api = url_after(&lines, "REST API");
    let int = url_after(&lines, "provisioners");
    assert!(
        api.starts_with("https://") && int.starts_with("https://"),
        "{lines:?}"
    );
    let tls = data.join("tls");
    let ca = tls.join("ca.pem");
    let ca = ca.to_str().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("SHA-256") && l.contains(ca)),
        "the CA and its fingerprint are printed: {lines:?}"
    );
    assert_eq!(
        curl(&["--cacert", ca, &format!("{api}/status")]),
        (0, "OK\n".into())
    );
    // An unknown certificate is refused (curl 60: the peer certificate cannot be verified).
    assert_eq!(curl(&[&format!("{api}/status")]).0, 60);
    // TLS 1.1 and below are not offered.
    let (code, _) = curl(&[
        "--cacert",
        ca,
        "--tlsv1.1",
        "--tls-max",
        "1.1",
        &format!("{api}/status"),
    ]);
    assert_ne!(code, 0, "TLS 1.1 must be refused");
    // The provisioner port wants a client certificate.
    assert_ne!(curl(&["--cacert", ca, &format!("{int}/status")]).0, 0);
    let (cert, key) = (tls.join("provisioner.pem"), tls.join("provisioner-key.pem"));
    let with_cert = curl(&[
        "--cacert",
        ca,
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        &format!("{int}/status"),
    ]);
    assert_eq!(with_cert, (0, "OK\n".into()));
    provisioner_api_is_https(&lines, &api, ca);
    assert_private(&data, &tls);
    cli_trusts_the_ca_when_told(&api, ca, dir.path());
}

/// The embedded provisioner serves its own API over HTTPS (with its certificate from the local CA),
/// registered so: the server calls it at https://.
fn provisioner_api_is_https(lines: &[String], api: &str, ca: &str) {
    let agent = url_after(lines, "provisioner ");
    assert!(agent.starts_with("https://127.0.0.1:"), "{lines:?}");
    assert_eq!(
        curl(&["--cacert", ca, &format!("{agent}/status")]),
        (0, "OK\n".into())
    );
    let plain = agent.replacen("https://", "http://", 1);
    assert_ne!(curl(&[&format!("{plain}/status")]), (0, "OK\n".into()));
    let (code, body) = curl(&[
        "--cacert",
        ca,
        "-H",
        "Coopr-TenantID: superadmin",
        "-H",
        "Coopr-UserID: admin",
        &format!("{api}/v2/provisioners"),
    ]);
    assert_eq!(code, 0, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect(&body);
    assert_eq!(list[0]["scheme"], "https", "{body}");
}

#[test]
fn weft_up_on_a_network_address_serves_https_and_requires_api_keys() {
    if !curl_present() {
        weft_testkit::skip_or_fail("curl", "not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ports = free_ports();
    let (up, lines) = weft_up(&data, ports, &["--bind", "0.0.0.0"]);
    let api = url_after(&lines, "REST API");
    assert_eq!(api, format!("https://127.0.0.1:{}", ports.0), "{lines:?}");
    let ca = data.join("tls/ca.pem");
    let ca = ca.to_str().unwrap();
    let key_file = data.join("admin.key");
    assert!(
        lines.iter().any(|l| l.contains(key_file.to_str().unwrap())),
        "the key file is named: {lines:?}"
    );
    let key = std::fs::read_to_string(&key_file).unwrap();
    let key = format!("Coopr-ApiKey: {}", key.trim());
    let templates = format!("{api}/v2/clustertemplates");
    // Plain HTTP is not served, header identity is not believed, the key is.
    let plain = templates.replacen("https://", "http://", 1);
    assert_ne!(curl(&[&plain]).0, 0);
    let as_admin = ["-H", "Coopr-TenantID: default", "-H", "Coopr-UserID: admin"];
    let mut args = vec!["-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca];
    args.extend(as_admin);
    args.push(&templates);
    assert_eq!(curl(&args), (0, "401".into()));
    let (code, body) = curl(&["--cacert", ca, "-H", &key, &templates]);
    assert_eq!(code, 0);
    assert!(body.contains("kv-web"), "{body}");
    let provisioner = url_after(&lines, "provisioner ");
    assert_eq!(
        curl(&["--cacert", ca, &format!("{provisioner}/status")]),
        (0, "OK\n".into())
    );
    // A cluster made and deleted through the CLI with the key: the server reached the
    // provisioner's own API over HTTPS with the token (a provisioner it cannot call is dropped
    // and runs nothing).
    let secret = std::fs::read_to_string(&key_file).unwrap();
    let cli = |args: &[&str]| {
        let out = weft()
            .env("WEFT_CLI_CONFIG", dir.path().join("cli.toml"))
            .args(args)
            .args([
                "--server",
                &api,
                "--ca-cert",
                ca,
                "--api-key",
                secret.trim(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (_, id) = crate::up_down::create_kv_web(&cli);
    cli(&["cluster", "delete", &id, "--wait"]);
    let private = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(private, 0o600);
    // weft down does not start a second server on the store of a weft up it cannot talk to.
    let down = weft()
        .args(["down", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&down.stderr);
    assert_eq!(down.status.code(), Some(1), "{said}");
    assert!(said.contains("stop it"), "{said}");
    // The same key file serves a second start: one admin key, made once.
    drop(up);
    let (_up, _) = weft_up(&data, ports, &["--bind", "0.0.0.0"]);
    let (code, body) = curl(&["--cacert", ca, "-H", &key, &templates]);
    assert_eq!((code, body.contains("kv-web")), (0, true), "{body}");
}

/// The CLI refuses the unknown certificate, saying what to do, and works with `--ca-cert` or a
/// profile saved with it.
fn cli_trusts_the_ca_when_told(api: &str, ca: &str, dir: &Path) {
    let config = dir.join("cli.toml");
    let cli = |args: &[&str]| {
        weft()
            .env("WEFT_CLI_CONFIG", &config)
            .args(args)
            .output()
            .unwrap()
    };
    let out = cli(&["template", "list", "--server", api]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("not trusted") && err.contains("--ca-cert"),
        "{err}"
    );
    let out = cli(&["template", "list", "--server", api, "--ca-cert", ca]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("kv-web"));
    let out = cli(&["login", "--server", api, "--ca-cert", ca]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["template", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The data dir and the TLS dir are 0700; the store and every key and certificate 0600.
fn assert_private(data: &Path, tls: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(data), 0o700, "{}", data.display());
    assert_eq!(mode(tls), 0o700);
    for f in std::fs::read_dir(tls).unwrap() {
        let p = f.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    for f in ["weft.db", "weft.db-wal"] {
        let p = data.join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
}

#[test]
fn weft_server_refuses_plain_http_beyond_loopback_and_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out: Output = weft()
        .args([
            "server",
            "--bind",
            "0.0.0.0",
            "--port",
            "0",
            "--internal-port",
            "0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("d"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tls-cert")
            && err.contains("weft up --tls")
            && err.contains("--insecure-http"),
        "{err}"
    );
    assert!(
        !dir.path().join("d").exists(),
        "nothing made before refusing"
    );
}

/// A CA and certificates it signed, written as PEM files.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    key: KeyPair,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Pki {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = p.self_signed(&key).unwrap();
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, key }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server (`client` false) or client certificate; returns (cert file, key file).
    fn issue(&self, name: &str, client: bool) -> (PathBuf, PathBuf) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        if client {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        } else {
            p.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca, &self.key).unwrap();
        let (c, k) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// `weft provisioner` against `server` with `args`; returns whether it exited (and its stderr)
/// within 30 s, or None when it is still running (then it is killed).
fn provisioner(server: &str, data: &Path, args: &[&Path]) -> Option<(bool, String)> {
    let mut cmd = weft();
    // A port of its own: `weft up` in tests running beside this one binds the default.
    let bind = format!("127.0.0.1:{}", crate::crash::free_ports().0);
    cmd.args([
        "provisioner",
        "--server",
        server,
        "--bind",
        &bind,
        "--data-dir",
    ])
    .arg(data)
    .env("WEFT_LOG", "warn");
    for pair in args.chunks(2) {
        cmd.arg(pair[0]).arg(pair[1]);
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((status.success(), err));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn certificates_rotate_on_disk_and_provisioners_must_match_the_server() {
    if !curl_present() {
        weft_testkit::skip_or_fail("curl", "not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let one = Pki::new(dir.path(), "one");
    let other = Pki::new(dir.path(), "other");
    let (cert, key) = one.issue("server", false);
    let served = (
        dir.path().join("served.pem"),
        dir.path().join("served-key.pem"),
    );
    std::fs::copy(&cert, &served.0).unwrap();
    std::fs::copy(&key, &served.1).unwrap();
    let (port, internal) = free_ports();
    let mut cmd = weft();
    cmd.args([
        "server",
        "--port",
        &port.to_string(),
        "--internal-port",
        &internal.to_string(),
    ])
    .arg("--tls-cert")
    .arg(&served.0)
    .arg("--tls-key")
    .arg(&served.1)
    .arg("--client-ca")
    .arg(one.ca_file())
    .arg("--data-dir")
    .arg(dir.path().join("data"));
    let (_server, lines) = start_until(cmd, "provisioners");
    let api = url_after(&lines, "REST API");
    let int = url_after(&lines, "provisioners");
    let ca = one.ca_file();
    assert_eq!(
        curl(&["--cacert", ca.to_str().unwrap(), &format!("{api}/status")]).0,
        0
    );

    // A provisioner that trusts another CA refuses the server at once, naming the cause.
    let (ccert, ckey) = one.issue("prov", true);
    let flags = |ca: &Path| -> Vec<PathBuf> {
        vec![
            "--ca-cert".into(),
            ca.to_path_buf(),
            "--tls-cert".into(),
            ccert.clone(),
            "--tls-key".into(),
            ckey.clone(),
        ]
    };
    let wrong = flags(&other.ca_file());
    let wrong: Vec<&Path> = wrong.iter().map(PathBuf::as_path).collect();
    let (ok, err) = provisioner(&int, &dir.path().join("p1"), &wrong).expect("exits at once");
    assert!(!ok && err.contains("TLS refused the connection"), "{err}");

    // Without a client certificate, the provisioner port refuses it.
    let no_cert = [Path::new("--ca-cert"), ca.as_path()];
    let (ok, err) = provisioner(&int, &dir.path().join("p2"), &no_cert).expect("exits at once");
    assert!(!ok && err.contains("TLS refused the connection"), "{err}");

    // A certificate of another CA written over the served files is served within seconds.
    let (cert2, key2) = other.issue("server2", false);
    std::fs::copy(&key2, &served.1).unwrap();
    std::fs::copy(&cert2, &served.0).unwrap();
    let other_ca = other.ca_file();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, _) = curl(&[
            "--cacert",
            other_ca.to_str().unwrap(),
            &format!("{api}/status"),
        ]);
        if code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served (curl {code})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        curl(&["--cacert", ca.to_str().unwrap(), &format!("{api}/status")]).0,
        60
    );
}

/// sslyze from `~/.cache/weft/sslyze` (`.ci/setup` installs it) or `WEFT_SSLYZE`.
fn sslyze() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEFT_SSLYZE") {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from(std::env::var_os("HOME")?).join(".cache/weft/sslyze/bin/sslyze");
    p.is_file().then_some(p)
}

/// The accepted cipher suites of each protocol in sslyze's JSON answer, and whether the chain
/// validated against the CA file given.
fn scan_summary(json: &serde_json::Value) -> (Vec<(String, usize)>, bool) {
    let r = &json["server_scan_results"][0]["scan_result"];
    let suites = [
        "ssl_2_0_cipher_suites",
        "ssl_3_0_cipher_suites",
        "tls_1_0_cipher_suites",
        "tls_1_1_cipher_suites",
        "tls_1_2_cipher_suites",
        "tls_1_3_cipher_suites",
    ]
    .iter()
    .map(|k| {
        let n = r[k]["result"]["accepted_cipher_suites"]
            .as_array()
            .map_or(usize::MAX, Vec::len);
        (k.to_string(), n)
    })
    .collect();
    let valid = r["certificate_info"]["result"]["certificate_deployments"][0]
        ["path_validation_results"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| {
            p["trust_store"]["name"]
                .as_str()
                .is_some_and(|n| n.contains("CA file"))
                && p["validation_error"].is_null()
        });
    (suites, valid)
}

#[test]
fn an_sslyze_scan_of_both_ports_finds_tls_1_2_and_up_only_and_a_valid_chain() {
    let Some(bin) = sslyze() else {
        weft_testkit::skip_or_fail("sslyze", "not in ~/.cache/weft/sslyze");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (port, internal) = free_ports();
    let mut cmd = weft();
    cmd.args(["up", "--tls", "--port", &port.to_string()])
        .args(["--internal-port", &internal.to_string(), "--data-dir"])
        .arg(&data);
    let (_up, _) = start_until(cmd, "stop:");
    let tls = data.join("tls");
    for (port, client) in [(port, false), (internal, true)] {
        let out = dir.path().join(format!("scan-{port}.json"));
        let mut c = Command::new(&bin);
        c.arg("--mozilla_config=intermediate")
            .arg("--certinfo_ca_file")
            .arg(tls.join("ca.pem"))
            .arg("--json_out")
            .arg(&out);
        if client {
            c.arg("--cert")
                .arg(tls.join("provisioner.pem"))
                .arg("--key")
                .arg(tls.join("provisioner-key.pem"));
        }
        let run = c.arg(format!("127.0.0.1:{port}")).output().unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && text.contains("OK - Compliant"),
            "port {port} is not compliant with Mozilla's intermediate configuration:\n{text}"
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let (suites, valid) = scan_summary(&json);
        for (protocol, n) in &suites[..4] {
            assert_eq!(*n, 0, "port {port}: {protocol} accepted");
        }
        assert!(suites[4].1 > 0 && suites[5].1 > 0, "{suites:?}");
        assert!(
            valid,
            "port {port}: the chain does not validate against the CA"
        );
    }
}
