//! `weft cluster logs`: what a cluster's tasks printed, filtered by node, service and job, the
//! last N of them, and followed while the cluster's job runs; with `--service-log`, a service's
//! own log on one node (the files its `logs` field names), read through the transport of
//! `cluster ssh`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use weft_client::api::Kind;
use weft_model::{ClusterDetails, JobStatus, Node, NodeAction, NodeActionStatus, Service};

use super::{print_json, time, Ctx, UsageError};

/// The arguments of `weft cluster logs`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct LogsArgs {
    /// The cluster id.
    pub id: String,
    /// Only this node's tasks: its id, hostname or node number.
    #[arg(long)]
    pub node: Option<String>,
    /// Only this service's tasks.
    #[arg(long)]
    pub service: Option<String>,
    /// Only this job's tasks (a job id such as 00000001-003).
    #[arg(long)]
    pub job: Option<String>,
    /// Only failed tasks.
    #[arg(long)]
    pub failed: bool,
    /// Only the last N tasks (with --service-log: the last N lines of the file).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Keep printing tasks as they end, until the cluster's job ends (with --service-log: follow
    /// the file until interrupted).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The service's own log on the node (the files the service's `logs` field names) instead of
    /// task output; needs --service and --node.
    #[arg(long, requires_all = ["service", "node"], conflicts_with_all = ["job", "failed"])]
    pub service_log: bool,
    /// With --service-log, as for `cluster ssh`: the private key for ssh.
    #[arg(long, requires = "service_log")]
    pub identity: Option<std::path::PathBuf>,
    /// With --service-log, as for `cluster ssh`: the data dir of the `weft up` that made Docker
    /// nodes [default: the one serving --server, else ./.weft].
    #[arg(long, requires = "service_log")]
    pub data_dir: Option<std::path::PathBuf>,
}

/// How often `--follow` looks for tasks that ended.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// Runs `weft cluster logs`.
pub(super) fn run(ctx: &Ctx, a: &LogsArgs) -> anyhow::Result<()> {
    let d = ctx.block(ctx.client.cluster(&a.id))?;
    if a.service_log {
        return service_log(ctx, &d, a);
    }
    let picked = pick(&d, a)?;
    let start = picked.len().saturating_sub(a.tail.unwrap_or(usize::MAX));
    let shown = &picked[start..];
    if ctx.json() && !a.follow {
        return print_json(&shown.iter().map(to_json).collect::<Vec<_>>());
    }
    if shown.is_empty() && !a.follow {
        eprintln!("{}", nothing_to_show(&d, a));
    }
    for entry in shown {
        print_entry(ctx, entry)?;
    }
    if a.follow {
        follow(ctx, a, picked.iter().map(key).collect())?;
    }
    Ok(())
}

/// The output of the cluster's failed tasks (what `--wait` shows when a job fails).
pub(super) fn print_failed(ctx: &Ctx, d: &ClusterDetails) -> anyhow::Result<()> {
    let a = LogsArgs {
        id: d.id.clone(),
        node: None,
        service: None,
        job: None,
        failed: true,
        tail: None,
        follow: false,
        service_log: false,
        identity: None,
        data_dir: None,
    };
    for entry in pick(d, &a)? {
        print_entry(ctx, &entry)?;
    }
    Ok(())
}

/// A task's output, with the node it ran on.
struct Entry {
    node: Node,
    action: NodeAction,
}

/// Who a task run is: its task and attempt.
fn key(e: &Entry) -> (String, u32) {
    (e.action.task_id.clone(), e.action.attempt)
}

/// The ended task runs that the filters keep, oldest first.
fn pick(d: &ClusterDetails, a: &LogsArgs) -> anyhow::Result<Vec<Entry>> {
    let node = match &a.node {
        Some(which) => Some(super::cluster::find_node(d, which)?.id.clone()),
        None => None,
    };
    let job = a
        .job
        .as_ref()
        .map(|j| format!("{}-", j.trim_end_matches('-')));
    let mut out = Vec::new();
    for n in &d.nodes {
        if node.as_ref().is_some_and(|id| *id != n.id) {
            continue;
        }
        for act in &n.actions {
            let keep = act.status != NodeActionStatus::InProgress
                && (!a.failed || act.status == NodeActionStatus::Failed)
                && a.service.as_ref().is_none_or(|s| *s == act.service)
                && job.as_ref().is_none_or(|j| act.task_id.starts_with(j));
            if keep {
                out.push(Entry {
                    node: n.clone(),
                    action: act.clone(),
                });
            }
        }
    }
    out.sort_by_key(|e| (e.action.status_time, e.action.task_id.clone()));
    Ok(out)
}

/// Why nothing was printed, in words.
fn nothing_to_show(d: &ClusterDetails, a: &LogsArgs) -> String {
    let filtered = a.node.is_some() || a.service.is_some() || a.job.is_some();
    match (a.failed, filtered) {
        (true, _) => format!("no task of cluster {} failed{}", d.id, filters(a)),
        (false, true) => format!("no task of cluster {} has ended{}", d.id, filters(a)),
        (false, false) => format!("no task of cluster {} has ended yet", d.id),
    }
}

/// ` (node 2, service web)`: the filters given.
fn filters(a: &LogsArgs) -> String {
    let given: Vec<String> = [("node", &a.node), ("service", &a.service), ("job", &a.job)]
        .into_iter()
        .filter_map(|(name, v)| v.as_ref().map(|v| format!("{name} {v}")))
        .collect();
    match given.is_empty() {
        true => String::new(),
        false => format!(" ({})", given.join(", ")),
    }
}

fn to_json(e: &Entry) -> Value {
    let mut v = serde_json::to_value(&e.action).unwrap_or_default();
    v["nodeId"] = Value::String(e.node.id.clone());
    v
}

/// `== host ACTION service status, attempt (task, time) ==` and the task's stdout and stderr;
/// one JSON object per line with `-o json`.
fn print_entry(ctx: &Ctx, e: &Entry) -> anyhow::Result<()> {
    if ctx.json() {
        return crate::cmd::print_out(&(serde_json::to_string(&to_json(e))? + "\n"));
    }
    let (n, a) = (&e.node, &e.action);
    let host = n.properties.hostname.as_deref().unwrap_or(&n.id);
    let status = serde_json::to_value(a.status).unwrap_or_default();
    let mut text = format!(
        "== {host} {} {} {}{} ({}, {}) ==\n",
        a.action,
        a.service,
        status.as_str().unwrap_or(""),
        attempt_text(a),
        a.task_id,
        time(a.status_time)
    );
    for (name, out) in [("stdout", &a.stdout), ("stderr", &a.stderr)] {
        if let Some(t) = out.as_deref().filter(|t| !t.trim().is_empty()) {
            text.push_str(&format!("-- {name}:\n{}\n", t.trim_end()));
        }
    }
    crate::cmd::print_out(&text)
}

/// `, attempt 2 of 3` for an action that is not its task's only try; nothing otherwise.
pub(super) fn attempt_text(a: &NodeAction) -> String {
    if a.attempt <= 1 && a.status != NodeActionStatus::Failed {
        return String::new();
    }
    match a.max_attempts {
        0 => format!(", attempt {}", a.attempt.max(1)),
        max => format!(", attempt {} of {max}", a.attempt.max(1)),
    }
}

/// Prints task runs as they end until the cluster's job is no longer running (one last look
/// after it ends, so that nothing of it is missed).
fn follow(ctx: &Ctx, a: &LogsArgs, mut seen: HashSet<(String, u32)>) -> anyhow::Result<()> {
    loop {
        let d = ctx.block(ctx.client.cluster(&a.id))?;
        for e in pick(&d, a)? {
            if seen.insert(key(&e)) {
                print_entry(ctx, &e)?;
            }
        }
        let status = d.progress.as_ref().map(|p| p.actionstatus);
        if !matches!(status, Some(JobStatus::Running | JobStatus::NotSubmitted)) {
            let said = status.map(|s| s.as_str()).unwrap_or("none");
            eprintln!("-- the cluster's job is {said}: no more output to follow");
            return Ok(());
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// `tail` of the service's log files on the node, through the node's transport.
fn service_log(ctx: &Ctx, d: &ClusterDetails, a: &LogsArgs) -> anyhow::Result<()> {
    let (name, which) = match (&a.service, &a.node) {
        (Some(s), Some(n)) => (s, n),
        _ => return Err(UsageError("--service-log needs --service and --node".into()).into()),
    };
    let node = super::cluster::find_node(d, which)?;
    let Some(on_node) = node.services.iter().find(|s| s.name == *name) else {
        return Err(UsageError(format!("service {name} does not run on node {which}")).into());
    };
    // The service as the node has it; a node made before the service said where it logs has
    // the catalog's word.
    let paths = match on_node.logs.is_empty() {
        false => on_node.logs.clone(),
        true => {
            let service: Service = ctx.block(ctx.client.entity(Kind::Service, name))?;
            service.logs
        }
    };
    // Paths are passed as arguments (quoted for the remote shell), never as shell text.
    let paths: Vec<String> = paths
        .into_iter()
        .filter(|p| !p.trim().is_empty() && !p.contains('\0'))
        .collect();
    if paths.is_empty() {
        return Err(UsageError(format!(
            "service {name} does not say where it logs: give it a `logs` field (file paths on \
             its nodes)"
        ))
        .into());
    }
    let mut command: Vec<String> = vec!["tail".into(), "-n".into()];
    command.push(a.tail.unwrap_or(100).to_string());
    if a.follow {
        command.push("-F".into());
    }
    command.push("--".into());
    command.extend(paths);
    let opts = super::ssh::SshOptions {
        identity: a.identity.clone(),
        data_dir: a
            .data_dir
            .clone()
            .or_else(|| super::config::up_data_dir(ctx.client.base()))
            .unwrap_or_else(|| ".weft".into()),
    };
    let code = super::ssh::run_on(node, &command, &opts)?;
    std::process::exit(code);
}
