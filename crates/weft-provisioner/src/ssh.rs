//! [`SshTransport`]: the [`Transport`] to a remote node over SSH (russh, pure Rust).
//!
//! - **Target and credentials** come from the task (contract §4.3, §4.8): the node's
//!   `ipaddresses.access_v4`, and `ssh-auth` `{user, identityfile | key | password, port?}` (`key`
//!   is a private key's text, `identityfile` a path on the provisioner; ed25519, ECDSA or RSA).
//! - **Host keys**: a provider records the node's key at CONFIRM with [`scan_host_key`] and answers
//!   [`HostKey::to_result`] as `result.ssh_host_keys` (`{"ed25519": "ssh-ed25519 AAAA..."}`).
//!   Every later connection checks the presented key against the recorded ones (an OpenSSH public
//!   key line, a bare base64 key or a `SHA256:` fingerprint each match); a different key is refused
//!   with a non-retryable error. With nothing recorded any key is accepted, with a warning (Coopr).
//! - **Commands** are quoted into one line, run with `sudo -n -E` when the user is not root, and
//!   killed with everything they started at the time-out (the remote shell writes its pid to a
//!   file under /tmp first; a second channel kills that process tree and the groups in it). Output is read as it comes and
//!   only the last `max_output` bytes of each stream are kept.
//! - **Files** are written with `cat` over an exec channel into a temporary name, then renamed.
//!
//! One connection per transport, opened on first use (with a time-out) and reopened if it drops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh::ChannelMsg;
use serde_json::{json, Value};

use crate::task::Task;
use crate::transport::{CommandOutput, CommandSpec, Tail, Transport, TransportError};

/// Where the shell automator keeps its files on an SSH node unless the node names a `nodedir`.
pub const NODE_DIR: &str = "/var/lib/weft";
/// How long connecting (TCP, key exchange, authentication) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long writing one file may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(300);
/// After a command exits, how long a daemon it started may hold the channel open before reading
/// stops (as for the local transport).
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// How to log in.
#[derive(Clone)]
pub enum SshAuth {
    /// Public-key authentication with this private key.
    Key(Arc<PrivateKey>),
    /// Password authentication.
    Password(String),
}

impl std::fmt::Debug for SshAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SshAuth::Key(k) => write!(f, "Key({})", k.algorithm()),
            SshAuth::Password(_) => f.write_str("Password(..)"),
        }
    }
}

impl SshAuth {
    /// A private key in OpenSSH (or PEM/PKCS#8) text form.
    pub fn key_text(text: &str) -> Result<SshAuth, TransportError> {
        russh::keys::decode_secret_key(text, None)
            .map(|k| SshAuth::Key(Arc::new(k)))
            .map_err(|e| {
                TransportError::fatal(format!("ssh-auth: cannot read the private key: {e}"))
            })
    }

    /// A private key file on this machine.
    pub fn key_file(path: &str) -> Result<SshAuth, TransportError> {
        russh::keys::load_secret_key(path, None)
            .map(|k| SshAuth::Key(Arc::new(k)))
            .map_err(|e| {
                TransportError::fatal(format!("ssh-auth: cannot read identityfile {path}: {e}"))
            })
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct SshTarget {
    /// The node's address or hostname (a task's `ipaddresses.access_v4`).
    pub host: String,
    /// The SSH port (22 unless `ssh-auth` says otherwise).
    pub port: u16,
    /// The user to log in as; commands of a user other than root run with `sudo -n -E`.
    pub user: String,
    /// How the user logs in.
    pub auth: SshAuth,
    /// The recorded host keys (see [`known_host_keys`]); empty accepts any key, with a warning.
    pub host_keys: Vec<String>,
    /// How long connecting (TCP, key exchange, authentication) may take; [`CONNECT_TIMEOUT`]
    /// by default.
    pub connect_timeout: Duration,
}

impl SshTarget {
    /// A target with no recorded host keys (any key is accepted, with a warning) and the default
    /// connect time-out.
    pub fn new(host: impl Into<String>, port: u16, user: impl Into<String>, auth: SshAuth) -> Self {
        SshTarget {
            host: host.into(),
            port,
            user: user.into(),
            auth,
            host_keys: Vec::new(),
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// Checks the host key against `ssh_host_keys` (a result value as [`HostKey::to_result`]).
    pub fn with_host_keys(mut self, ssh_host_keys: &Value) -> Self {
        self.host_keys = known_host_keys(ssh_host_keys);
        self
    }

    fn addr(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }
}

/// A server's host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey(pub PublicKey);

impl HostKey {
    /// `ed25519`, `rsa`, `ecdsa`, ...: the key under which [`HostKey::to_result`] records it.
    pub fn kind(&self) -> String {
        let alg = self.0.algorithm().to_string();
        let alg = alg.strip_prefix("ssh-").unwrap_or(&alg);
        if alg.starts_with("ecdsa") {
            "ecdsa".into()
        } else {
            alg.to_string()
        }
    }

    /// The OpenSSH public key line, without a comment: `ssh-ed25519 AAAA...`.
    pub fn openssh(&self) -> String {
        let mut k = self.0.clone();
        k.set_comment("");
        k.to_openssh().unwrap_or_default().trim().to_string()
    }

    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        self.0.fingerprint(HashAlg::Sha256).to_string()
    }

    /// What a provider answers as `result.ssh_host_keys` at CONFIRM.
    pub fn to_result(&self) -> Value {
        json!({ self.kind(): self.openssh() })
    }

    fn matches(&self, known: &[String]) -> bool {
        let line = self.openssh();
        let blob = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let fp = self.fingerprint();
        known.iter().any(|k| *k == blob || *k == fp)
    }
}

/// The keys (base64 blobs and `SHA256:` fingerprints) in an `ssh_host_keys` value: an object of
/// strings (`{"rsa": "ssh-rsa AAAA..."}`; a key-scan line with a host name in front is fine), a
/// list of them, or one string.
pub fn known_host_keys(v: &Value) -> Vec<String> {
    fn collect(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => {
                for tok in s.split_whitespace() {
                    if tok.starts_with("AAAA") || tok.starts_with("SHA256:") {
                        out.push(tok.to_string());
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            Value::Object(m) => m.values().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    collect(v, &mut out);
    out
}

/// The russh client callbacks: checks (and remembers) the server's key.
struct Client {
    known: Arc<Vec<String>>,
    seen: Arc<Mutex<Option<(HostKey, bool)>>>,
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            PublicKeyOrCertificate::Certificate(c) => PublicKey::from(c.public_key().clone()),
        };
        let key = HostKey(key);
        let ok = self.known.is_empty() || key.matches(&self.known);
        *self.seen.lock().expect("seen lock") = Some((key, ok));
        Ok(ok)
    }
}

/// Connects once and answers the server's host key, to record at CONFIRM. Nothing is checked and
/// nobody logs in.
pub async fn scan_host_key(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<HostKey, TransportError> {
    let seen = Arc::new(Mutex::new(None));
    let handler = Client {
        known: Arc::new(Vec::new()),
        seen: seen.clone(),
    };
    let work = async {
        let mut h = client::connect(ssh_config(), (host, port), handler).await?;
        // Waits for the key exchange (and so for the key check) to be over.
        let _ = h.authenticate_none("weft-keyscan").await?;
        let _ = h
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
        Ok::<_, russh::Error>(())
    };
    let res = tokio::time::timeout(timeout, work).await;
    let key = seen.lock().expect("seen lock").take().map(|(k, _)| k);
    match (key, res) {
        (Some(k), _) => Ok(k),
        (None, Err(_)) => Err(TransportError::retryable(format!(
            "ssh {host}:{port}: no host key within {}s",
            timeout.as_secs_f64()
        ))),
        (None, Ok(Err(e))) => Err(TransportError::retryable(format!("ssh {host}:{port}: {e}"))),
        (None, Ok(Ok(()))) => Err(TransportError::retryable(format!(
            "ssh {host}:{port}: the server showed no host key"
        ))),
    }
}

fn ssh_config() -> Arc<client::Config> {
    Arc::new(client::Config {
        inactivity_timeout: None,
        keepalive_interval: Some(Duration::from_secs(15)),
        keepalive_max: 4,
        ..Default::default()
    })
}

/// Quotes `s` for a POSIX shell.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs commands and writes files on a node over SSH.
pub struct SshTransport {
    target: SshTarget,
    conn: tokio::sync::Mutex<Option<Arc<Handle<Client>>>>,
}

impl std::fmt::Debug for SshTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshTransport")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl SshTransport {
    /// A transport to `target`; it connects at its first use and keeps the connection.
    pub fn new(target: SshTarget) -> SshTransport {
        SshTransport {
            target,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The transport to a task's node: `ipaddresses.access_v4`, `ssh-auth` and `ssh_host_keys`
    /// (see the module doc). A missing or unreadable credential is a non-retryable error.
    pub fn from_task(task: &Task) -> Result<SshTransport, TransportError> {
        let auth = task
            .config
            .get("ssh-auth")
            .and_then(Value::as_object)
            .ok_or_else(|| TransportError::fatal("the node has no ssh-auth"))?;
        let host = task
            .ip("access_v4")
            .ok_or_else(|| TransportError::fatal("the ssh node has no ipaddresses.access_v4"))?;
        let s = |k: &str| {
            auth.get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let user = s("user").unwrap_or("root");
        let port = match auth.get("port") {
            None | Some(Value::Null) => 22,
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str().and_then(|p| p.parse().ok()))
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| TransportError::fatal(format!("ssh-auth: bad port {v}")))?,
        };
        let cred = if let Some(k) = s("key") {
            SshAuth::key_text(k)?
        } else if let Some(f) = s("identityfile") {
            SshAuth::key_file(f)?
        } else if let Some(p) = s("password") {
            SshAuth::Password(p.to_string())
        } else {
            return Err(TransportError::fatal(
                "ssh-auth has none of key, identityfile, password",
            ));
        };
        let mut target = SshTarget::new(host, port, user, cred);
        match task.config.get("ssh_host_keys") {
            Some(keys) if !known_host_keys(keys).is_empty() => {
                target = target.with_host_keys(keys);
            }
            _ => {
                tracing::warn!(task_id = %task.id, host, "no ssh_host_keys recorded: not checking the host key")
            }
        }
        Ok(SshTransport::new(target))
    }

    /// Where and how the transport connects.
    pub fn target(&self) -> &SshTarget {
        &self.target
    }

    fn root(&self) -> bool {
        self.target.user == "root"
    }

    /// Wraps a shell line so that it runs as root (`sudo -n -E`) when the user is not root.
    fn privileged(&self, line: &str) -> String {
        if self.root() {
            line.to_string()
        } else {
            format!("sudo -n -E sh -c {}", quote(line))
        }
    }

    /// The connection, opened (and authenticated) if there is none.
    async fn handle(&self) -> Result<Arc<Handle<Client>>, TransportError> {
        let mut conn = self.conn.lock().await;
        if let Some(h) = conn.as_ref().filter(|h| !h.is_closed()) {
            return Ok(h.clone());
        }
        let t = self.target.connect_timeout;
        let h = tokio::time::timeout(t, self.open()).await.map_err(|_| {
            TransportError::retryable(format!(
                "ssh {}: could not connect within {}s",
                self.target.addr(),
                t.as_secs_f64()
            ))
        })??;
        let h = Arc::new(h);
        *conn = Some(h.clone());
        Ok(h)
    }

    async fn open(&self) -> Result<Handle<Client>, TransportError> {
        let t = &self.target;
        let seen = Arc::new(Mutex::new(None));
        let handler = Client {
            known: Arc::new(t.host_keys.clone()),
            seen: seen.clone(),
        };
        let refused = || -> Option<TransportError> {
            let seen = seen.lock().expect("seen lock");
            match seen.as_ref() {
                Some((key, false)) => Some(TransportError::auth(format!(
                    "ssh {}: the host key changed: the server presents {} {}, which is not the \
                     recorded key; refusing to connect (a different machine, or someone in between)",
                    t.addr(),
                    key.kind(),
                    key.fingerprint()
                ))),
                _ => None,
            }
        };
        let fail = |e: russh::Error| {
            refused().unwrap_or_else(|| TransportError::retryable(format!("ssh {}: {e}", t.addr())))
        };
        let mut h = client::connect(ssh_config(), (t.host.as_str(), t.port), handler)
            .await
            .map_err(fail)?;
        let res = match &t.auth {
            SshAuth::Key(key) => {
                let hash = if key.algorithm().is_rsa() {
                    h.best_supported_rsa_hash().await.map_err(fail)?.flatten()
                } else {
                    None
                };
                h.authenticate_publickey(&t.user, PrivateKeyWithHashAlg::new(key.clone(), hash))
                    .await
            }
            SshAuth::Password(p) => h.authenticate_password(&t.user, p).await,
        }
        .map_err(fail)?;
        if let Some(e) = refused() {
            return Err(e);
        }
        if !res.success() {
            return Err(TransportError::auth(format!(
                "ssh {}: authentication failed: the server refused the {}",
                t.addr(),
                match t.auth {
                    SshAuth::Key(_) => "key",
                    SshAuth::Password(_) => "password",
                }
            )));
        }
        Ok(h)
    }

    /// A session channel, reconnecting once if the connection went away.
    async fn channel(&self) -> Result<russh::Channel<client::Msg>, TransportError> {
        let h = self.handle().await?;
        match h.channel_open_session().await {
            Ok(c) => Ok(c),
            Err(_) => {
                self.conn.lock().await.take();
                let h = self.handle().await?;
                h.channel_open_session().await.map_err(|e| {
                    TransportError::retryable(format!("ssh {}: {e}", self.target.addr()))
                })
            }
        }
    }

    /// Runs one shell line, feeding `input` to its stdin; kills it (through `pidfile`) at `timeout`.
    async fn exec(
        &self,
        line: &str,
        input: Option<&[u8]>,
        timeout: Duration,
        max_output: usize,
        pidfile: Option<&str>,
    ) -> Result<CommandOutput, TransportError> {
        let err =
            |e: russh::Error| TransportError::retryable(format!("ssh {}: {e}", self.target.addr()));
        let mut ch = self.channel().await?;
        ch.exec(true, line).await.map_err(err)?;
        let deadline = Instant::now() + timeout;
        let mut out = Tail::new(max_output);
        let mut errs = Tail::new(max_output);
        if let Some(data) = input {
            let send = async {
                ch.data_bytes(bytes::Bytes::copy_from_slice(data)).await?;
                ch.eof().await
            };
            match tokio::time::timeout_at(deadline.into(), send).await {
                Ok(r) => r.map_err(err)?,
                Err(_) => {
                    return Ok(CommandOutput {
                        timed_out: true,
                        ..Default::default()
                    })
                }
            }
        }
        let mut exit = None;
        let mut exited = false;
        let mut until = deadline;
        let mut timed_out = false;
        loop {
            match tokio::time::timeout_at(until.into(), ch.wait()).await {
                Err(_) if exited => break,
                Err(_) => {
                    timed_out = true;
                    break;
                }
                Ok(None) | Ok(Some(ChannelMsg::Close)) => break,
                Ok(Some(ChannelMsg::Data { data })) => out.push(&data),
                Ok(Some(ChannelMsg::ExtendedData { data, ext: 1 })) => errs.push(&data),
                Ok(Some(ChannelMsg::ExitStatus { exit_status })) => {
                    exit = i32::try_from(exit_status).ok();
                    exited = true;
                    until = until.min(Instant::now() + DRAIN_GRACE);
                }
                Ok(Some(ChannelMsg::ExitSignal { .. })) => {
                    exited = true;
                    until = until.min(Instant::now() + DRAIN_GRACE);
                }
                Ok(Some(_)) => {}
            }
        }
        if timed_out {
            if let Some(pidfile) = pidfile {
                self.kill(pidfile).await;
            }
        }
        let _ = ch.close().await;
        Ok(CommandOutput {
            exit: if timed_out { None } else { exit },
            timed_out,
            stdout: out.text(),
            stderr: errs.text(),
        })
    }

    /// Kills the process tree whose root wrote its pid to `pidfile`: every descendant, and every
    /// process group one of them leads (sudo runs its command in a group of its own).
    async fn kill(&self, pidfile: &str) {
        let script = format!(
            "root=$(cat {p} 2>/dev/null) || exit 0; rm -f {p}; all=$root; cur=$root; \
             while [ -n \"$cur\" ]; do \
               cur=$(ps -o pid= --ppid \"$cur\" | tr -s ' \\n' ',' | sed 's/^,//; s/,$//'); \
               [ -n \"$cur\" ] && all=\"$all,$cur\"; \
             done; \
             groups=$(ps -o pgid= -p \"$all\" | sort -u); \
             kill -KILL $(echo \"$all\" | tr ',' ' ') 2>/dev/null; \
             for g in $groups; do kill -KILL -- -$g 2>/dev/null; done; exit 0",
            p = quote(pidfile)
        );
        let line = self.privileged(&script);
        if let Err(e) = Box::pin(self.exec(&line, None, Duration::from_secs(10), 4096, None)).await
        {
            tracing::warn!(target = %self.target.addr(), "killing a timed-out command: {e}");
        }
    }
}

#[async_trait::async_trait]
impl Transport for SshTransport {
    async fn run(&self, spec: &CommandSpec) -> Result<CommandOutput, TransportError> {
        if spec.argv.is_empty() {
            return Err(TransportError::fatal("empty command"));
        }
        let mut inner = String::new();
        if let Some(dir) = &spec.cwd {
            inner.push_str(&format!("cd {} && ", quote(dir)));
        }
        inner.push_str("exec env");
        for (k, v) in &spec.env {
            inner.push(' ');
            inner.push_str(&quote(&format!("{k}={v}")));
        }
        for a in &spec.argv {
            inner.push(' ');
            inner.push_str(&quote(a));
        }
        // The login shell is the leader of the process group everything runs in: it records its
        // pid so that a time-out can kill the group, and stays to remove the file.
        let pidfile = format!("/tmp/.weft-cmd-{}.pid", unique());
        let line = format!(
            "echo $$ > {p}; {cmd}; rc=$?; rm -f {p}; exit $rc",
            p = quote(&pidfile),
            cmd = self.privileged(&format!("sh -c {}", quote(&inner)))
        );
        self.exec(&line, None, spec.timeout, spec.max_output, Some(&pidfile))
            .await
    }

    async fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), TransportError> {
        let tmp = format!("{path}.weft-tmp-{}", unique());
        let dir = match path.rfind('/') {
            Some(0) => "/".to_string(),
            Some(i) => path[..i].to_string(),
            None => ".".to_string(),
        };
        let line = self.privileged(&format!(
            "mkdir -p {d} && cat > {t} && chmod {mode:o} {t} && mv -f {t} {p} || {{ rc=$?; rm -f {t}; exit $rc; }}",
            d = quote(&dir),
            t = quote(&tmp),
            p = quote(path),
        ));
        let out = self
            .exec(&line, Some(contents), WRITE_TIMEOUT, 4096, None)
            .await?;
        if out.success() {
            Ok(())
        } else if out.timed_out {
            Err(TransportError::retryable(format!(
                "ssh {}: writing {path} timed out",
                self.target.addr()
            )))
        } else {
            Err(TransportError::retryable(format!(
                "ssh {}: writing {path} failed ({:?}): {}",
                self.target.addr(),
                out.exit,
                out.stderr.trim()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(quote("abc/d.sh"), "abc/d.sh");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("a b;$x"), "'a b;$x'");
    }

    #[test]
    fn recorded_host_keys_are_read_leniently() {
        let v = json!({"rsa": "node1 ssh-rsa AAAAB3Nza1 comment", "ed25519": "SHA256:abc"});
        assert_eq!(known_host_keys(&v), vec!["AAAAB3Nza1", "SHA256:abc"]);
        assert_eq!(
            known_host_keys(&json!("ssh-ed25519 AAAAC3")),
            vec!["AAAAC3"]
        );
        assert!(known_host_keys(&json!({})).is_empty());
    }

    #[test]
    fn a_task_without_credentials_is_refused_for_good() {
        let raw = json!({"taskId": "1-1-1", "clusterId": "1", "taskName": "INSTALL", "nodeId": "n",
            "config": {"ssh-auth": {"user": "root"}, "ipaddresses": {"access_v4": "10.0.0.1"}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        let e = SshTransport::from_task(&t).unwrap_err();
        assert!(!e.retryable);
        assert!(e.message.contains("ssh-auth"), "{e}");
    }
}
