//! Job callbacks: at the start, success and failure of every job, POST
//! `{"event", "cluster": ClusterDetails, "job": {"id", "action", "status", "message"}}` to
//! `callback_url` and/or run `callback_command` (`sh -c`) with that JSON on its standard input and
//! `WEFT_EVENT`, `WEFT_CLUSTER_ID`, `WEFT_JOB_ID` in its environment.
//!
//! [`spawn`] subscribes to [`Engine::events`] and hands each notice to [`deliver`] in a task of its
//! own, bounded by `callback_timeout`. Callbacks are notifications: a failing, slow or hanging
//! callback is logged and abandoned, and never delays or fails the job (unlike Coopr's `onStart`,
//! which could fail a job). Like Coopr's, they may run more than once for one notice across a
//! failover, so receivers should be idempotent.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::broadcast::error::RecvError;

use super::body::{from_body, JobBody};
use super::{cluster_id_text, view, JobEvent, JobEventKind};
use crate::error::{EngineError, EngineResult};
use crate::Engine;

fn event_name(kind: JobEventKind) -> &'static str {
    match kind {
        JobEventKind::Start => "start",
        JobEventKind::Success => "success",
        JobEventKind::Failure => "failure",
    }
}

/// The JSON a callback gets for a notice: the cluster as `GET /v2/clusters/{id}` shows it and the
/// job's id, action, status and message.
pub async fn payload(st: &Engine, ev: &JobEvent) -> EngineResult<Value> {
    let cluster = st
        .store
        .get_cluster(&ev.tenant_id, ev.cluster_id)
        .await?
        .ok_or_else(|| EngineError::ClusterNotFound(ev.cluster_id.to_string()))?;
    let job = st
        .store
        .get_job(&ev.tenant_id, &ev.job_id)
        .await?
        .ok_or_else(|| EngineError::JobNotFound(ev.job_id.clone()))?;
    let jbody: JobBody = from_body(&job.body)?;
    let details = view::details(st, &cluster).await?;
    Ok(json!({
        "event": event_name(ev.kind),
        "cluster": details,
        "job": {
            "id": job.id,
            "action": job.action,
            "status": job.status,
            "message": jbody.message,
        },
    }))
}

/// Runs the configured callbacks for one notice and waits for them (each bounded by
/// `callback_timeout`). Failures are logged, never returned.
pub async fn deliver(st: &Engine, ev: &JobEvent) {
    let s = &st.settings;
    if s.callback_url.is_none() && s.callback_command.is_none() {
        return;
    }
    let body = match payload(st, ev).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(cluster_id = ev.cluster_id, job_id = %ev.job_id, error = %e,
                "callback skipped: cannot read the cluster or job");
            return;
        }
    };
    let limit = Duration::from_millis(s.callback_timeout_ms);
    let post = async {
        if let Some(url) = &s.callback_url {
            let r = tokio::time::timeout(limit, st.messenger.post_json(url, &body, limit)).await;
            report(ev, "url", r);
        }
    };
    let run = async {
        if let Some(cmd) = &s.callback_command {
            let r = tokio::time::timeout(limit, run_command(cmd, ev, &body)).await;
            report(ev, "command", r);
        }
    };
    tokio::join!(post, run);
}

fn report(ev: &JobEvent, what: &str, r: Result<Result<(), String>, tokio::time::error::Elapsed>) {
    let event = event_name(ev.kind);
    match r {
        Ok(Ok(())) => {
            tracing::debug!(cluster_id = ev.cluster_id, job_id = %ev.job_id, event, callback = what, "callback done")
        }
        Ok(Err(e)) => {
            tracing::warn!(cluster_id = ev.cluster_id, job_id = %ev.job_id, event, callback = what, error = %e, "callback failed")
        }
        Err(_) => {
            tracing::warn!(cluster_id = ev.cluster_id, job_id = %ev.job_id, event, callback = what, "callback timed out")
        }
    }
}

// A callback command is the admin's own program, run as configured (clippy.toml).
#[allow(clippy::disallowed_methods)]
async fn run_command(cmd: &str, ev: &JobEvent, body: &Value) -> Result<(), String> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("WEFT_EVENT", event_name(ev.kind))
        .env("WEFT_CLUSTER_ID", cluster_id_text(ev.cluster_id))
        .env("WEFT_JOB_ID", &ev.job_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        // A command that does not read its input is fine.
        let _ = stdin.write_all(&bytes).await;
    }
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exited with {status}"))
    }
}

/// Subscribes to the job notices now and delivers each in a task of its own, for as long as the
/// returned task lives. Does nothing (and returns a finished task) when no callback is configured.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    if st.settings.callback_url.is_none() && st.settings.callback_command.is_none() {
        return tokio::spawn(async {});
    }
    let mut rx = st.events.subscribe();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let st = st.clone();
                    tokio::spawn(async move { deliver(&st, &ev).await });
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "callbacks fell behind; notices skipped");
                }
                Err(RecvError::Closed) => break,
            }
        }
    })
}
