//! `SshTransport` against a real sshd: a container of the node image (images/build-node-image.sh)
//! published on a free 127.0.0.1 port, with client keys generated inside it. The same transport
//! contract runs against the local transport. Needs docker and the `weft-node:bookworm` image:
//! skipped without them, failed in CI.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::{task, transport_contract};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::PrivateKey;
use serde_json::{json, Map, Value};
use weft_provisioner::plugin::run_automator;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::ssh::{scan_host_key, HostKey, SshAuth, SshTarget, SshTransport};
use weft_provisioner::task::Action;
use weft_provisioner::transport::{CommandSpec, LocalTransport, Transport, TransportError};

const IMAGE: &str = "weft-node:bookworm";

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A running node container; removed on drop (also when a test panics). Also used by the
/// `hostpool` tests (a pool made of such containers).
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) port: u16,
    /// An ed25519 key authorized for root.
    pub(crate) root_key: String,
    /// An RSA key authorized for `weft`, a user with password-less sudo.
    pub(crate) user_key: String,
    /// An ed25519 key nobody authorized.
    stranger_key: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", "-v", &self.id]);
    }
}

const SETUP: &str = r#"set -e
mkdir -p /root/.ssh
ssh-keygen -q -t ed25519 -N '' -C root -f /tmp/root_key
ssh-keygen -q -t rsa -b 2048 -N '' -C weft -f /tmp/user_key
ssh-keygen -q -t ed25519 -N '' -C stranger -f /tmp/stranger_key
cat /tmp/root_key.pub >> /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
useradd -m -p '*' -s /bin/bash weft
mkdir -p /home/weft/.ssh
cat /tmp/user_key.pub > /home/weft/.ssh/authorized_keys
chown -R weft /home/weft/.ssh && chmod 700 /home/weft/.ssh && chmod 600 /home/weft/.ssh/authorized_keys
echo 'weft ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/weft
"#;

impl Node {
    /// Starts a node and waits (bounded) until its sshd answers; `None` when docker or the image
    /// is missing outside CI.
    pub(crate) async fn start() -> Option<Node> {
        Node::start_image(IMAGE, "images/build-node-image.sh").await
    }

    /// [`Node::start`] for a container of `image`, which `build` makes.
    pub(crate) async fn start_image(image: &str, build: &str) -> Option<Node> {
        Node::start_with(image, build, &[]).await
    }

    /// [`Node::start_image`] with more `docker run` options (`-v` mounts).
    pub(crate) async fn start_with(image: &str, build: &str, options: &[&str]) -> Option<Node> {
        if !weft_testkit::require("docker") {
            return None;
        }
        if docker(&["image", "inspect", image]).is_err() {
            weft_testkit::skip_or_fail(
                image,
                &format!("the image is missing (build it with {build})"),
            );
            return None;
        }
        let mut args = vec!["run", "-d", "--rm", "-p", "127.0.0.1::22"];
        args.extend(options);
        args.push(image);
        let id = docker(&args)
            .expect("the node container starts")
            .trim()
            .to_string();
        let mut node = Node {
            id,
            port: 0,
            root_key: String::new(),
            user_key: String::new(),
            stranger_key: String::new(),
        };
        let addr = docker(&["port", &node.id, "22/tcp"]).expect("the port is published");
        node.port = addr
            .lines()
            .next()
            .and_then(|l| l.rsplit(':').next())
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("a port in {addr:?}"));
        node.exec(SETUP);
        node.root_key = node.exec("cat /tmp/root_key");
        node.user_key = node.exec("cat /tmp/user_key");
        node.stranger_key = node.exec("cat /tmp/stranger_key");
        node.wait_for_sshd().await;
        Some(node)
    }

    pub(crate) fn exec(&self, script: &str) -> String {
        docker(&["exec", &self.id, "sh", "-c", script]).expect("docker exec")
    }

    async fn wait_for_sshd(&self) {
        let start = Instant::now();
        loop {
            match scan_host_key("127.0.0.1", self.port, Duration::from_secs(2)).await {
                Ok(_) => return,
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    panic!("sshd did not answer within 30s: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn target(&self, user: &str, key: &str) -> SshTarget {
        SshTarget::new(
            "127.0.0.1",
            self.port,
            user,
            SshAuth::key_text(key).expect("a readable key"),
        )
    }

    fn root(&self) -> SshTransport {
        SshTransport::new(self.target("root", &self.root_key))
    }
}

/// A key nobody has: for tests that never get as far as logging in.
fn fixed_key() -> Arc<PrivateKey> {
    Arc::new(PrivateKey::from(Ed25519Keypair::from_seed(&[7; 32])))
}

fn sh(line: &str) -> CommandSpec {
    CommandSpec::new(vec!["sh".into(), "-c".into(), line.into()])
}

#[tokio::test]
async fn local_transport_passes_the_transport_contract() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTransport::new(dir.path(), "contract-node");
    transport_contract(&t, &dir.path().join("scratch").display().to_string()).await;
}

#[tokio::test]
async fn ssh_transport_passes_the_transport_contract_as_root_and_through_sudo() {
    let Some(node) = Node::start().await else {
        return;
    };
    transport_contract(&node.root(), "/tmp/contract-root").await;

    // An RSA key, a user who is not root: commands and files go through `sudo -E`.
    let user = SshTransport::new(node.target("weft", &node.user_key));
    let out = user.run(&sh("id -u; echo $SUDO_USER")).await.unwrap();
    assert_eq!(out.stdout, "0\nweft\n", "{out:?}");
    transport_contract(&user, "/opt/contract-user").await;
}

#[tokio::test]
async fn commands_report_status_and_output_and_hang_until_the_time_out() {
    let Some(node) = Node::start().await else {
        return;
    };
    let t = node.root();
    let out = t
        .run(&sh(
            "cat /etc/debian_version >/dev/null && echo ok; hostname -I >/dev/null; exit 0",
        ))
        .await
        .unwrap();
    assert_eq!(
        (out.exit, out.stdout.as_str()),
        (Some(0), "ok\n"),
        "{out:?}"
    );

    let out = t
        .run(&sh("echo to-out; echo 'no such thing' >&2; exit 42"))
        .await
        .unwrap();
    assert_eq!(out.exit, Some(42));
    assert_eq!(out.stdout, "to-out\n");
    assert_eq!(out.stderr, "no such thing\n");

    let mut hang = sh("echo begun; sleep 600");
    hang.timeout = Duration::from_secs(2);
    let start = Instant::now();
    let out = t.run(&hang).await.unwrap();
    assert!(out.timed_out && out.exit.is_none(), "{out:?}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.stdout, "begun\n");
    let ps = t
        .run(&sh("ps -eo args | grep -c '^sleep 600$' || true"))
        .await
        .unwrap();
    assert_eq!(ps.stdout.trim(), "0", "the hanging command was killed");

    // A second file copy through a fresh connection reads back byte for byte.
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    node.root()
        .write_file("/srv/data/blob.bin", &bytes, 0o600)
        .await
        .unwrap();
    let back =
        node.exec("od -An -v -tu1 /srv/data/blob.bin | wc -w; stat -c %a /srv/data/blob.bin");
    assert_eq!(back, "300000\n600\n");
    let sum = t.run(&sh("md5sum < /srv/data/blob.bin")).await.unwrap();
    let local = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b");
        std::fs::write(&p, &bytes).unwrap();
        let o = Command::new("sh")
            .args(["-c", &format!("md5sum < {}", p.display())])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(sum.stdout, local);
}

#[tokio::test]
async fn a_recorded_host_key_is_checked_and_a_changed_one_refused() {
    let Some(node) = Node::start().await else {
        return;
    };
    let key = scan_host_key("127.0.0.1", node.port, Duration::from_secs(5))
        .await
        .unwrap();
    let recorded = key.to_result();
    let server_pub = node.exec(&format!("cat /etc/ssh/ssh_host_{}_key.pub", key.kind()));
    assert!(
        server_pub.starts_with(&key.openssh()),
        "{server_pub} vs {}",
        key.openssh()
    );
    assert!(key.fingerprint().starts_with("SHA256:"));

    let checked = || {
        SshTransport::new(
            node.target("root", &node.root_key)
                .with_host_keys(&recorded),
        )
    };
    let out = checked().run(&sh("echo fine")).await.unwrap();
    assert_eq!(out.stdout, "fine\n");
    // A fingerprint recorded instead of the key is as good.
    let by_fp = SshTransport::new(
        node.target("root", &node.root_key)
            .with_host_keys(&json!({"ed25519": key.fingerprint()})),
    );
    assert!(by_fp.run(&sh("true")).await.unwrap().success());

    // The node gets new host keys: sshd re-reads them on SIGHUP.
    node.exec("rm -f /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null && kill -HUP 1");
    let start = Instant::now();
    let err: TransportError = loop {
        match checked().run(&sh("echo should-not-run")).await {
            Err(e) if !e.retryable => break e,
            // sshd restarting: try again, for a bounded time.
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("a changed host key must be refused, got {other:?}"),
        }
    };
    assert!(err.message.contains("host key changed"), "{err}");
    assert!(err.message.contains("SHA256:"), "{err}");
    let new_key = scan_host_key("127.0.0.1", node.port, Duration::from_secs(5))
        .await
        .unwrap();
    assert_ne!(new_key, key);
    assert!(err.message.contains(&new_key.fingerprint()), "{err}");
    // Nothing recorded: any key is accepted.
    assert!(node.root().run(&sh("true")).await.unwrap().success());
}

#[tokio::test]
async fn a_key_the_node_does_not_know_is_an_authentication_error() {
    let Some(node) = Node::start().await else {
        return;
    };
    let t = SshTransport::new(node.target("root", &node.stranger_key));
    let e = t.run(&sh("true")).await.unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("authentication failed"), "{e}");
    let e = t.write_file("/tmp/x", b"x", 0o644).await.unwrap_err();
    assert!(e.message.contains("authentication failed"), "{e}");
    // The user's RSA key is not root's.
    let e = SshTransport::new(node.target("root", &node.user_key))
        .run(&sh("true"))
        .await
        .unwrap_err();
    assert!(e.message.contains("authentication failed"), "{e}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_retryably() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and says nothing.
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut target = SshTarget::new("127.0.0.1", port, "root", SshAuth::Key(fixed_key()));
    target.connect_timeout = Duration::from_millis(500);
    let start = Instant::now();
    let e = SshTransport::new(target)
        .run(&sh("true"))
        .await
        .unwrap_err();
    assert!(e.retryable, "{e}");
    assert!(e.message.contains("could not connect within"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5));
    hold.abort();
}

#[tokio::test]
async fn the_shell_automator_bootstraps_and_installs_over_ssh() {
    let Some(node) = Node::start().await else {
        return;
    };
    let host_key = scan_host_key("127.0.0.1", node.port, Duration::from_secs(5))
        .await
        .unwrap();
    let scripts = tempfile::tempdir().unwrap();
    std::fs::write(
        scripts.path().join("hello.sh"),
        "#!/bin/bash\nset -e\necho \"action=$WEFT_ACTION args=$* user=$(id -un) dir=$(pwd)\"\n\
         test -s \"$WEFT_TASK_JSON\" && echo json-ok\nhelper.sh\n",
    )
    .unwrap();
    std::fs::write(
        scripts.path().join("helper.sh"),
        "#!/bin/sh\necho helper on $(hostname -s)\n",
    )
    .unwrap();
    let shell = ShellAutomator::new(vec![scripts.path().to_path_buf()]);

    let mut config: Map<String, Value> = Map::new();
    config.insert(
        "ipaddresses".into(),
        json!({"access_v4": "127.0.0.1", "bind_v4": "127.0.0.1"}),
    );
    config.insert(
        "ssh-auth".into(),
        json!({"user": "weft", "key": node.user_key, "port": node.port}),
    );
    config.insert("ssh_host_keys".into(), host_key.to_result());
    config.insert("automators".into(), json!(["shell"]));
    config.insert(
        "service".into(),
        json!({"name": "web", "action": {"type": "shell", "fields": {"script": "hello.sh", "args": "a b"}}}),
    );
    let timeout = Duration::from_secs(60);

    let out = run_automator(
        &shell,
        Action::Bootstrap,
        &task(Action::Bootstrap, "n1", config.clone(), timeout),
    )
    .await
    .unwrap();
    assert_eq!(
        out.stdout,
        "2 scripts copied to /var/lib/weft/.weft/scripts\n"
    );
    let listed = node
        .exec("ls /var/lib/weft/.weft/scripts; stat -c %a /var/lib/weft/.weft/scripts/hello.sh");
    assert_eq!(listed, "hello.sh\nhelper.sh\n755\n");

    let out = run_automator(
        &shell,
        Action::Install,
        &task(Action::Install, "n1", config.clone(), timeout),
    )
    .await
    .unwrap_or_else(|e| panic!("install failed: {e} {} {}", e.stdout, e.stderr));
    let hostname = node.exec("hostname -s");
    assert_eq!(
        out.stdout,
        format!(
            "action=install args=a b user=root dir=/var/lib/weft\njson-ok\nhelper on {hostname}"
        )
    );

    // The host key changes: the automator refuses, for good.
    config.insert(
        "ssh_host_keys".into(),
        HostKey(fixed_key().public_key().clone()).to_result(),
    );
    let e = run_automator(
        &shell,
        Action::Install,
        &task(Action::Install, "n1", config, timeout),
    )
    .await
    .unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(e.message.contains("host key changed"), "{e}");
}
