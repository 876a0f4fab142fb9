//! How plugins reach a node: the [`Transport`] trait (run a command with a time-out and bounded,
//! streamed output; write a file) and [`LocalTransport`], which runs on this machine. An SSH
//! transport implements the same trait; plugins never spawn processes or touch remote files
//! themselves.

// This module is a transport: it starts processes (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use weft_model::FailureReason;

use crate::task::PluginError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The environment variable that marks every process started for a local node with the node's id,
/// so that deleting the node finds them all.
pub const NODE_MARK: &str = "WEFT_LOCAL_NODE";
/// The file in a local node's directory listing the process groups started there, one per line.
pub const PGID_FILE: &str = ".weft-pgids";

/// A command to run on a node.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Program and arguments (an SSH transport quotes them into one line).
    pub argv: Vec<String>,
    /// Variables set for the command, on top of the environment it inherits.
    pub env: BTreeMap<String, String>,
    /// Working directory on the node.
    pub cwd: Option<String>,
    /// The command (and everything it started in its process group) is killed after this.
    pub timeout: Duration,
    /// Bytes kept of each of stdout and stderr: the last ones.
    pub max_output: usize,
}

impl CommandSpec {
    /// Runs `argv` with no extra environment, in the transport's default directory, with a
    /// 10-minute time-out and 64 KiB kept of each output.
    pub fn new(argv: Vec<String>) -> CommandSpec {
        CommandSpec {
            argv,
            env: BTreeMap::new(),
            cwd: None,
            timeout: Duration::from_secs(600),
            max_output: 64 * 1024,
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// The exit code; `None` when it was killed (time-out or signal).
    pub exit: Option<i32>,
    /// True when the command was killed because its time-out passed.
    pub timed_out: bool,
    /// Standard output: its last `max_output` bytes, after `[N bytes snipped]` when cut.
    pub stdout: String,
    /// Standard error: its last `max_output` bytes, after `[N bytes snipped]` when cut.
    pub stderr: String,
}

impl CommandOutput {
    /// True when the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit == Some(0)
    }
}

/// A transport failure: the command could not be started or the file not written. Most are
/// worth retrying (a network blip, a node still booting); some are not (a changed host key,
/// refused credentials), and say so.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// What failed, for people.
    pub message: String,
    /// Whether running the task again may help.
    pub retryable: bool,
    /// Why: `network` for what a retry may fix, `auth` for refused credentials or a changed
    /// host key, `invalid` for the rest.
    pub reason: FailureReason,
}

impl TransportError {
    /// A failure that running the task again may fix (`network`).
    pub fn retryable(message: impl Into<String>) -> TransportError {
        TransportError {
            message: message.into(),
            retryable: true,
            reason: FailureReason::Network,
        }
    }

    /// A failure that running the task again will not fix.
    pub fn fatal(message: impl Into<String>) -> TransportError {
        TransportError {
            message: message.into(),
            retryable: false,
            reason: FailureReason::Invalid,
        }
    }

    /// Refused credentials or a host key that changed: fatal.
    pub fn auth(message: impl Into<String>) -> TransportError {
        TransportError {
            reason: FailureReason::Auth,
            ..TransportError::fatal(message)
        }
    }
}

impl From<TransportError> for PluginError {
    fn from(e: TransportError) -> PluginError {
        PluginError::new(e.reason, e.message).retryable_if(e.retryable)
    }
}

/// Runs commands and writes files on one node.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Runs a command to its end or its time-out. A command that runs and fails is an `Ok` with
    /// its exit code; an `Err` means it could not be run at all.
    async fn run(&self, cmd: &CommandSpec) -> Result<CommandOutput, TransportError>;
    /// Writes `contents` to `path` on the node (parents created), with unix `mode`.
    async fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), TransportError>;
}

/// Keeps the last `max` bytes written to it.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    buf: Vec<u8>,
    dropped: usize,
    max: usize,
}

impl Tail {
    pub(crate) fn new(max: usize) -> Tail {
        Tail {
            max,
            ..Default::default()
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        if self.buf.len() > self.max {
            let cut = self.buf.len() - self.max;
            self.buf.drain(..cut);
            self.dropped += cut;
        }
    }

    pub(crate) fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.buf);
        if self.dropped > 0 {
            format!("[{} bytes snipped]{s}", self.dropped)
        } else {
            s.into_owned()
        }
    }
}

/// Keeps the last `max` characters of `s`, marking the cut.
pub fn tail_text(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let rest: String = s.chars().skip(n - max).collect();
    format!("[snipped]{rest}")
}

async fn pump(mut r: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail.lock().expect("tail lock").push(&chunk[..n]),
        }
    }
}

/// Sends SIGKILL to a process group and waits (at most 5 s) until its members are gone: kill(2)
/// only queues the signal, and what the group held (ports, files) must be free when this returns.
pub async fn kill_group(pgid: u32) {
    let _ = tokio::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while group_alive(pgid).await && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Whether a process of group `pgid` is still running (not a zombie). Always false where there
/// is no /proc.
async fn group_alive(pgid: u32) -> bool {
    let Ok(mut rd) = tokio::fs::read_dir("/proc").await else {
        return false;
    };
    while let Ok(Some(e)) = rd.next_entry().await {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if proc_stat(pid)
            .await
            .is_some_and(|(state, group)| group == pgid && !matches!(state, 'Z' | 'X'))
        {
            return true;
        }
    }
    false
}

/// A process's state and process group (fields 3 and 5 of /proc/PID/stat); `None` if it is gone.
pub(crate) async fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = tokio::fs::read_to_string(format!("/proc/{pid}/stat"))
        .await
        .ok()?;
    let mut fields = stat.rsplit(')').next()?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// Runs commands on this machine, for one local node: each command in its own process group,
/// marked with [`NODE_MARK`]=`node_id`, the group recorded in `<root>/.weft-pgids` so that the
/// node's deletion can kill whatever the command left running.
#[derive(Debug, Clone)]
pub struct LocalTransport {
    root: PathBuf,
    node_id: String,
    /// The uid (and gid) commands run as (tenant users, see `tenancy`); `None`: this process's.
    run_as: Option<u32>,
}

/// After a command exits, how long its output pipes may stay open (held by a daemon it started)
/// before the reading stops.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

impl LocalTransport {
    /// A transport for node `node_id` whose directory is `root`, running commands as this
    /// process's user.
    pub fn new(root: impl Into<PathBuf>, node_id: impl Into<String>) -> LocalTransport {
        LocalTransport {
            root: root.into(),
            node_id: node_id.into(),
            run_as: None,
        }
    }

    /// Commands run as `uid` (and gid `uid`), files are written by that user, and `HOME` is the
    /// node's directory.
    pub fn run_as(mut self, uid: Option<u32>) -> LocalTransport {
        self.run_as = uid;
        self
    }

    /// The node's directory: where commands run unless they say otherwise.
    pub fn root(&self) -> &Path {
        &self.root
    }

    async fn record_group(&self, pgid: u32) {
        let path = self.root.join(PGID_FILE);
        if let Ok(mut f) = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await
        {
            let _ = f.write_all(format!("{pgid}\n").as_bytes()).await;
        }
    }
}

#[async_trait]
impl Transport for LocalTransport {
    async fn run(&self, spec: &CommandSpec) -> Result<CommandOutput, TransportError> {
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| TransportError::fatal("empty command"))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .envs(&spec.env)
            .env(NODE_MARK, &self.node_id)
            .current_dir(spec.cwd.as_deref().map(Path::new).unwrap_or(&self.root))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(uid) = self.run_as {
            cmd.uid(uid).gid(uid).env("HOME", &self.root);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| TransportError::retryable(format!("cannot start {program}: {e}")))?;
        let pgid = child.id();
        if let Some(pgid) = pgid {
            self.record_group(pgid).await;
        }
        let out = Arc::new(Mutex::new(Tail {
            max: spec.max_output,
            ..Default::default()
        }));
        let err = Arc::new(Mutex::new(Tail {
            max: spec.max_output,
            ..Default::default()
        }));
        let mut readers = Vec::new();
        if let Some(s) = child.stdout.take() {
            readers.push(tokio::spawn(pump(s, out.clone())));
        }
        if let Some(s) = child.stderr.take() {
            readers.push(tokio::spawn(pump(s, err.clone())));
        }
        let (exit, timed_out) = match tokio::time::timeout(spec.timeout, child.wait()).await {
            Ok(Ok(status)) => (status.code(), false),
            Ok(Err(e)) => {
                return Err(TransportError::retryable(format!(
                    "waiting for {program}: {e}"
                )))
            }
            Err(_) => {
                if let Some(pgid) = pgid {
                    kill_group(pgid).await;
                }
                let _ = child.kill().await;
                (None, true)
            }
        };
        // A daemon the command started may hold the pipes open: read what is there, then stop.
        for r in readers {
            let abort = r.abort_handle();
            if tokio::time::timeout(DRAIN_GRACE, r).await.is_err() {
                abort.abort();
            }
        }
        let stdout = out.lock().expect("tail lock").text();
        let stderr = err.lock().expect("tail lock").text();
        Ok(CommandOutput {
            exit,
            timed_out,
            stdout,
            stderr,
        })
    }

    async fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), TransportError> {
        use std::os::unix::fs::PermissionsExt;
        if let Some(uid) = self.run_as {
            return write_as(uid, path, contents, mode).await;
        }
        let p = Path::new(path);
        let fail = |e: std::io::Error| TransportError::retryable(format!("writing {path}: {e}"));
        if let Some(dir) = p.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(fail)?;
        }
        tokio::fs::write(p, contents).await.map_err(fail)?;
        tokio::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .await
            .map_err(fail)
    }
}

/// Writes a file as user `uid`, so that a path through a link the user planted can never make
/// this (root) process write where the user may not.
async fn write_as(uid: u32, path: &str, contents: &[u8], mode: u32) -> Result<(), TransportError> {
    let fail = |e: String| TransportError::retryable(format!("writing {path}: {e}"));
    let script = r#"mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1""#;
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", script, "sh", path, &format!("{mode:o}")])
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(contents)
            .await
            .map_err(|e| fail(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_end() {
        let mut t = Tail {
            max: 4,
            ..Default::default()
        };
        t.push(b"abcdef");
        t.push(b"gh");
        assert_eq!(t.text(), "[4 bytes snipped]efgh");
        assert_eq!(tail_text("abcdef", 3), "[snipped]def");
        assert_eq!(tail_text("ab", 3), "ab");
    }
}
