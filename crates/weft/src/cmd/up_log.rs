//! What `weft up` says, and where: its log goes to `<data dir>/weft.log` (0600), and the terminal
//! gets the banner and one line per job that starts or ends. `-v` copies the log to stderr as
//! well; `--log-level` (or `WEFT_LOG`, which wins) sets how much is logged.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;
use weft_engine::events::{JobEvent, JobEventKind};

/// The log file in a data dir.
pub(crate) const LOG_FILE: &str = "weft.log";

/// The default filter of the log.
pub(crate) const DEFAULT_LEVEL: &str = "info,sqlx=warn";

/// Sends the log to `<data_dir>/weft.log` (and to stderr with `verbose`); returns the file's path.
pub(crate) fn init(data_dir: &Path, verbose: bool, level: Option<&str>) -> anyhow::Result<PathBuf> {
    let path = data_dir.join(LOG_FILE);
    let file = open_private_append(&path)?;
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::try_new(level.unwrap_or(DEFAULT_LEVEL))
                .unwrap_or_else(|_| DEFAULT_LEVEL.into())
        })
    };
    let to_file = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .with_filter(filter());
    let to_stderr = verbose.then(|| {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(filter())
    });
    let _ = tracing_subscriber::registry()
        .with(to_file)
        .with(to_stderr)
        .try_init();
    Ok(path)
}

/// Checks a `--log-level` value (a level or a filter such as `debug,sqlx=warn`).
pub(crate) fn level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("not a log level or filter: {e}"))
}

fn open_private_append(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("opening the log {}: {e}", path.display()))
}

/// Prints a line for every job that starts or ends, until the engine's notices stop.
pub(crate) fn print_jobs(
    events: &tokio::sync::broadcast::Sender<JobEvent>,
    store: Arc<dyn weft_store::Store>,
) -> tokio::task::JoinHandle<()> {
    let mut rx = events.subscribe();
    tokio::spawn(async move {
        loop {
            let event = match rx.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    say(&format!("({n} job notices skipped: see the log)"));
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            say(&job_line(store.as_ref(), &event).await);
        }
    })
}

/// `12:00:01  cluster web (00000003)  CLUSTER_CREATE  started`, with the failure's cause when it failed.
async fn job_line(store: &dyn weft_store::Store, e: &JobEvent) -> String {
    let cluster = store
        .get_cluster(&e.tenant_id, e.cluster_id)
        .await
        .ok()
        .flatten()
        .map(|c| format!("cluster {} ({:08})", c.name, c.id))
        .unwrap_or_else(|| format!("cluster {:08}", e.cluster_id));
    let job = store.get_job(&e.tenant_id, &e.job_id).await.ok().flatten();
    let action = job.as_ref().map(|j| j.action.as_str()).unwrap_or("job");
    let what = match e.kind {
        JobEventKind::Start => "started".to_string(),
        JobEventKind::Success => "done".to_string(),
        JobEventKind::Failure => {
            let why = job
                .as_ref()
                .and_then(|j| j.body.get("message").and_then(|m| m.as_str()))
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!(
                "FAILED{why} (weft cluster logs {:08} --failed)",
                e.cluster_id
            )
        }
    };
    format!("{}  {cluster}  {action}  {what}", clock())
}

/// The time of day, UTC, as `HH:MM:SS`.
fn clock() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!("{:02}:{:02}:{:02}", now.hour(), now.minute(), now.second())
}

/// One line on stdout; a closed stdout is not an error worth stopping for.
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
