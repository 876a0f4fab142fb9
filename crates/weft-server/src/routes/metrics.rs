//! `/v2/metrics/queues` and `/v2/metrics/nodes/usage`.
//!
//! Queue metrics count each tenant's tasks that are queued and in progress. Node usage reports node
//! time per period: its parameters are checked and its shape is the contract's, but it reports no
//! data yet (usage history is not recorded).

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::{op, Api, Body, Param};
use crate::auth::{Identity, Role};
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};

/// Task counts of one tenant's queue.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct QueueMetrics {
    /// Tasks waiting in the queue (state `queued`).
    pub queued: u64,
    /// Tasks leased to a worker and not yet finished (JSON `inProgress`).
    #[serde(rename = "inProgress")]
    pub in_progress: u64,
    /// `queued` plus `inProgress`.
    pub total: u64,
}

/// `{"start":s,"end":s,"data":[{"time":s,"value":n}]}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    /// Start of the reported period, in seconds since the epoch.
    pub start: i64,
    /// End of the reported period, in seconds since the epoch.
    pub end: i64,
    /// One point per `groupby` period; empty, as no usage history is recorded yet.
    pub data: Vec<UsagePoint>,
}

/// One period of a [`UsageReport`].
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UsagePoint {
    /// Start of the period, in seconds since the epoch.
    pub time: i64,
    /// Node time used in the period, in the request's `timeunit` (seconds by default).
    pub value: i64,
}

/// Registers `/v2/metrics/queues` and `/v2/metrics/nodes/usage`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/metrics/queues",
        queues,
        op(
            "metrics",
            "Queued and in-progress tasks per tenant (admin: own tenant; superadmin: all)",
        )
        .ok(200, "tenant name -> counts", Body::MapOf("QueueMetrics"))
        .status(403, "not an admin"),
    )
    .route(
        MethodFilter::GET,
        "/v2/metrics/nodes/usage",
        usage,
        op("metrics", "Node usage over time")
            .query("tenant", "tenant id (superadmin only, or the caller's own)")
            .query("user", "owner")
            .query("cluster", "cluster id")
            .query("clustertemplate", "template name")
            .query_as("start", "unix seconds (not after end)", Param::Time)
            .query_as("end", "unix seconds (default: now)", Param::Time)
            .query_as(
                "groupby",
                "hour, day, week, month or year",
                Param::OneOf(&GROUPS),
            )
            .query_as(
                "timeunit",
                "a time unit name such as seconds (default) or hours",
                Param::OneOf(&UNITS),
            )
            .rule(
                "tenant-is-callers",
                "tenant, when given, is the caller's own (a superadmin may name any): else 405, as Coopr answers",
            )
            .rule("start-not-after-end", "start is not after end (end defaults to now)")
            .ok(200, "usage", Body::Json("UsageReport"))
            .status(400, "bad start, end, groupby or timeunit")
            .status(405, "tenant names another tenant"),
    )
}

async fn queues(
    State(st): State<AppState>,
    id: Identity,
) -> ApiResult<Json<BTreeMap<String, QueueMetrics>>> {
    let counts = weft_engine::view::queue_counts(&st.engine, &id.caller()).await?;
    Ok(Json(
        counts
            .into_iter()
            .map(|(tenant, (queued, in_progress))| {
                let m = QueueMetrics {
                    queued,
                    in_progress,
                    total: queued + in_progress,
                };
                (tenant, m)
            })
            .collect(),
    ))
}

/// What `groupby` may say.
const GROUPS: [&str; 5] = ["hour", "day", "week", "month", "year"];

/// What `timeunit` may say (in any case).
const UNITS: [&str; 7] = [
    "nanoseconds",
    "microseconds",
    "milliseconds",
    "seconds",
    "minutes",
    "hours",
    "days",
];

#[derive(Debug, Deserialize)]
struct UsageQuery {
    tenant: Option<String>,
    start: Option<String>,
    end: Option<String>,
    groupby: Option<String>,
    timeunit: Option<String>,
}

async fn usage(id: Identity, Query(q): Query<UsageQuery>) -> ApiResult<Json<UsageReport>> {
    if let Some(t) = q.tenant.as_deref() {
        if id.role != Role::SuperAdmin && t != id.tenant.id && t != id.tenant.spec.name {
            return Err(ApiError::MethodNotAllowed(format!(
                "tenant {t} is not the caller's tenant"
            )));
        }
    }
    let secs = |name: &str, v: &Option<String>, default: i64| -> ApiResult<i64> {
        match v {
            None => Ok(default),
            Some(s) => s
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "{name} must be a non-negative number of unix seconds"
                    ))
                }),
        }
    };
    let end = secs("end", &q.end, now_ms() / 1000)?;
    let start = secs("start", &q.start, 0)?;
    if start > end {
        return Err(ApiError::BadRequest("start must not be after end".into()));
    }
    if let Some(g) = q.groupby.as_deref() {
        if !GROUPS.contains(&g) {
            return Err(ApiError::BadRequest(format!(
                "groupby {g} is not one of hour, day, week, month, year"
            )));
        }
    }
    if let Some(u) = q.timeunit.as_deref() {
        if !UNITS.contains(&u.to_ascii_lowercase().as_str()) {
            return Err(ApiError::BadRequest(format!(
                "timeunit {u} is not one of {}",
                UNITS.join(", ")
            )));
        }
    }
    Ok(Json(UsageReport {
        start,
        end,
        data: Vec::new(),
    }))
}
