//! `GET /metrics`: the server's health in the Prometheus text format (version 0.0.4), no auth.
//!
//! Series:
//! * `weft_queue_tasks{tenant,state}` (gauge): each tenant's tasks that are `queued` and
//!   `in_progress`, read from the store at scrape time (`Store::queue_counts`; `tenant` is the
//!   tenant's name). Tenants with neither are absent.
//! * `weft_tasks_in_flight` (gauge): in-progress tasks of every tenant, from the same read.
//! * `weft_provisioners_alive` (gauge): registered provisioners whose last heartbeat is younger than
//!   `provisioner_timeout`.
//! * `weft_task_duration_seconds{action}` (histogram): from take to finish of each finished task
//!   (success or failure), observed when the finish commits. The take time is the task's
//!   `lease_deadline - task_timeout`, because `take` sets the deadline to take time + timeout;
//!   that is exact as long as nothing extends a lease and `task_timeout` did not change across a
//!   restart while the task ran.
//! * `weft_jobs_total{action,result}` (counter): jobs that ended, `result` = `success` or
//!   `failure`, counted where the job's end is committed.
//! * `weft_ui_csp_reports_total` (counter): CSP violations browsers reported on UI pages.
//! * `weft_http_reads_abandoned_total` (counter): reads whose client went away before the
//!   answer; their work stopped with them.
//!
//! Counters and histograms live in this process (they restart from zero with the server, as
//! Prometheus expects of counters); the gauges read the store, so every server of a shared
//! database reports the same queue.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use weft_engine::metrics::{Histogram, BUCKETS};

use crate::error::ApiResult;
use crate::state::AppState;

/// Content-Security-Policy violations browsers reported on UI pages (the UI's `/ui/csp-report`
/// counts them here).
pub static CSP_REPORTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Reads whose client went away before the answer, their work dropped with them.
pub static ABANDONED_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a read in [`ABANDONED_READS`] if it is dropped before [`AbandonedRead::answered`].
pub struct AbandonedRead {
    answered: bool,
}

impl AbandonedRead {
    /// A read not yet answered: counted as abandoned if dropped before [`AbandonedRead::answered`].
    pub fn new() -> AbandonedRead {
        AbandonedRead { answered: false }
    }

    /// Marks the read answered, so dropping it counts nothing.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

impl Default for AbandonedRead {
    fn default() -> AbandonedRead {
        AbandonedRead::new()
    }
}

impl Drop for AbandonedRead {
    fn drop(&mut self) {
        if !self.answered {
            ABANDONED_READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!("a read's client went away before its answer: its work is dropped");
        }
    }
}

/// Escapes a label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text.
pub async fn render_text(st: &AppState) -> ApiResult<String> {
    let counts = st.store.queue_counts().await?;
    let names: BTreeMap<String, String> = st
        .store
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| (t.id, t.spec.name))
        .collect();
    let now = st.engine.now_ms();
    let alive = st
        .store
        .list_provisioners()
        .await?
        .iter()
        .filter(|p| now - p.last_heartbeat_ms < st.settings.provisioner_timeout_ms)
        .count();

    let mut out = String::new();
    write_store_gauges(&mut out, &counts, &names, alive);
    let r = weft_engine::metrics::snapshot();
    write_task_durations(&mut out, &r.durations);
    write_job_counts(&mut out, &r.jobs);
    write_process_counters(&mut out);
    Ok(out)
}

/// `weft_queue_tasks`, `weft_tasks_in_flight` and `weft_provisioners_alive`: what the store
/// holds now (`names`: tenant id -> name).
fn write_store_gauges(
    o: &mut String,
    counts: &BTreeMap<String, (u64, u64)>,
    names: &BTreeMap<String, String>,
    alive: usize,
) {
    let _ = writeln!(
        o,
        "# HELP weft_queue_tasks Tasks in each tenant's queue, by state."
    );
    let _ = writeln!(o, "# TYPE weft_queue_tasks gauge");
    let mut in_flight = 0u64;
    for (tenant_id, (queued, in_progress)) in counts {
        let name = label(names.get(tenant_id).unwrap_or(tenant_id));
        let _ = writeln!(
            o,
            "weft_queue_tasks{{tenant=\"{name}\",state=\"queued\"}} {queued}"
        );
        let _ = writeln!(
            o,
            "weft_queue_tasks{{tenant=\"{name}\",state=\"in_progress\"}} {in_progress}"
        );
        in_flight += in_progress;
    }
    let _ = writeln!(
        o,
        "# HELP weft_tasks_in_flight Tasks leased to workers and not finished, all tenants."
    );
    let _ = writeln!(o, "# TYPE weft_tasks_in_flight gauge");
    let _ = writeln!(o, "weft_tasks_in_flight {in_flight}");
    let _ = writeln!(
        o,
        "# HELP weft_provisioners_alive Registered provisioners with a recent heartbeat."
    );
    let _ = writeln!(o, "# TYPE weft_provisioners_alive gauge");
    let _ = writeln!(o, "weft_provisioners_alive {alive}");
}

/// The `weft_task_duration_seconds` histogram, by action.
fn write_task_durations(o: &mut String, durations: &BTreeMap<String, Histogram>) {
    let _ = writeln!(
        o,
        "# HELP weft_task_duration_seconds Time from take to finish of finished tasks, by action."
    );
    let _ = writeln!(o, "# TYPE weft_task_duration_seconds histogram");
    for (action, h) in durations {
        let action = label(action);
        let mut cumulative = 0u64;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += h.counts[i];
            let _ = writeln!(
                o,
                "weft_task_duration_seconds_bucket{{action=\"{action}\",le=\"{b}\"}} {cumulative}"
            );
        }
        cumulative += h.counts[BUCKETS.len()];
        let _ = writeln!(
            o,
            "weft_task_duration_seconds_bucket{{action=\"{action}\",le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            o,
            "weft_task_duration_seconds_sum{{action=\"{action}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            o,
            "weft_task_duration_seconds_count{{action=\"{action}\"}} {cumulative}"
        );
    }
}

/// The `weft_jobs_total` counter, by action and result.
fn write_job_counts(o: &mut String, jobs: &BTreeMap<(String, &'static str), u64>) {
    let _ = writeln!(
        o,
        "# HELP weft_jobs_total Jobs that ended, by action and result."
    );
    let _ = writeln!(o, "# TYPE weft_jobs_total counter");
    for ((action, result), n) in jobs {
        let _ = writeln!(
            o,
            "weft_jobs_total{{action=\"{}\",result=\"{result}\"}} {n}",
            label(action)
        );
    }
}

/// The counters this process keeps itself: CSP reports and abandoned reads.
fn write_process_counters(o: &mut String) {
    let _ = writeln!(
        o,
        "# HELP weft_ui_csp_reports_total Content-Security-Policy violations browsers reported on UI pages."
    );
    let _ = writeln!(o, "# TYPE weft_ui_csp_reports_total counter");
    let _ = writeln!(
        o,
        "weft_ui_csp_reports_total {}",
        CSP_REPORTS.load(std::sync::atomic::Ordering::Relaxed)
    );
    let _ = writeln!(
        o,
        "# HELP weft_http_reads_abandoned_total Reads whose client went away before the answer (their work stopped)."
    );
    let _ = writeln!(o, "# TYPE weft_http_reads_abandoned_total counter");
    let _ = writeln!(
        o,
        "weft_http_reads_abandoned_total {}",
        ABANDONED_READS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// `GET /metrics` on the external port: with `auth = apikey` only the superadmin reads it (it
/// names tenants); the internal port serves it to provisioner-token holders ([`metrics`]).
pub async fn external_metrics(
    State(st): State<AppState>,
    who: Result<crate::auth::Identity, crate::error::ApiError>,
) -> ApiResult<Response> {
    if st.settings.auth == crate::config::AuthMode::ApiKey {
        who?.require_superadmin()?;
    }
    metrics(State(st)).await
}

/// `GET /metrics` in the Prometheus text format (version 0.0.4): served as is on the internal port,
/// and behind [`external_metrics`] on the external one.
pub async fn metrics(State(st): State<AppState>) -> ApiResult<Response> {
    let text = render_text(&st).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("x\ny"), "x\\ny");
    }
}
