//! `weft events`: the tenant's event stream (`GET /v2/events`): the backlog, or with `--follow`
//! every event as it is committed, resuming after the last one seen when the connection breaks
//! (a server restart, a failover to another server of the same database).

use std::time::Duration;

use serde_json::Value;

use super::{time, Conn, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    /// Keep printing events as they come (from now on, unless --since says otherwise); reconnects
    /// after the last event seen if the connection breaks.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only this cluster's events.
    #[arg(long)]
    cluster: Option<String>,
    /// Only these kinds, comma-separated: cluster, job, task, node, audit.
    #[arg(long)]
    kind: Option<String>,
    /// Start after this event id [default: 0 (the whole backlog), or now with --follow].
    #[arg(long)]
    since: Option<u64>,
}

/// How long a broken follow waits before it reconnects.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let mut params: Vec<(&str, String)> = Vec::new();
    params.extend(a.cluster.clone().map(|c| ("cluster", c)));
    params.extend(a.kind.clone().map(|k| ("kind", k)));
    if !a.follow {
        params.push(("follow", "false".into()));
    }
    let mut last = a.since.or((!a.follow).then_some(0));
    loop {
        let from = last;
        let printed = |v: Value| {
            if let Some(id) = v["id"].as_u64() {
                last = Some(id);
            }
            print_line(&ctx, &v)
        };
        let ended = ctx.block(ctx.client.events(&params, from, printed));
        match ended {
            Ok(()) if !a.follow => return Ok(()),
            Ok(()) => {}
            // A refusal (bad filter, no such cluster) is final; a broken connection is not.
            Err(e @ weft_client::ClientError::Status { .. }) => return Err(e.into()),
            Err(e) if !a.follow => return Err(e.into()),
            Err(e) => eprintln!("weft events: {}; reconnecting", e.server_message()),
        }
        std::thread::sleep(RECONNECT_AFTER);
    }
}

/// Prints one line of the stream; `false` once stdout is gone.
fn print_line(ctx: &Ctx, v: &Value) -> bool {
    use std::io::Write as _;
    let line = if ctx.json() { v.to_string() } else { human(v) };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// `ID TIME KIND CLUSTER WHAT PREVIOUS -> STATUS`, or the lost notice.
fn human(v: &Value) -> String {
    if let Some(l) = v.get("lost") {
        return format!(
            "events {} to {} are no longer kept (retention)",
            l["from"], l["to"]
        );
    }
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let what = match s("kind").as_str() {
        "cluster" => s("clusterName"),
        "job" => format!("{} {}", s("jobId"), s("action")),
        "task" => format!(
            "{} {} {} on {}",
            s("taskId"),
            s("action"),
            s("service"),
            s("nodeId")
        ),
        "node" => s("nodeId"),
        "audit" => {
            let a = &v["audit"];
            let t = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            format!(
                "{} {} {} {} -> {}",
                t("user"),
                t("method"),
                t("route"),
                t("entityId"),
                a["status"]
            )
        }
        _ => String::new(),
    };
    let change = match (v["previous"].as_str(), v["status"].as_str()) {
        (Some(p), Some(n)) => format!("{p} -> {n}"),
        (None, Some(n)) => n.to_string(),
        _ => String::new(),
    };
    format!(
        "{:>6} {} {:<7} {:>5} {what} {change}",
        v["id"],
        time(v["time"].as_i64().unwrap_or_default()),
        s("kind"),
        s("clusterId"),
    )
    .trim_end()
    .to_string()
}
