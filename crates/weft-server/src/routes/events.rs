//! `/v2/events`: the caller's tenant's events as a stream, Server-Sent Events or NDJSON, resumed
//! after `Last-Event-ID` or `?since=` (see `weft_engine::feed`).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;
use weft_engine::feed::{self, EventQuery, FeedFilter, Lost};
use weft_engine::Engine;
use weft_model::{Event, EventKind};

use crate::api::{op, Api, Body, Param, MAX_INT};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Registers `GET /v2/events`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/events",
        follow,
        op(
            "events",
            "The caller's tenant's events as they are committed: cluster and job statuses, task states, nodes added and removed, audit records (admins only); plain users see their own clusters' events. Each event has an id, increasing in commit order; a client that reconnects with the `Last-Event-ID` header (or `?since=`) gets every event after it that the backlog still holds, and a `lost` notice for any it no longer holds. Server-Sent Events, or NDJSON with `?format=ndjson` or `Accept: application/x-ndjson`.",
        )
        .query_as("since", "start after this event id (0: the whole backlog; default: from now on; the Last-Event-ID header wins)", Param::Int(0))
        .query("cluster", "only this cluster's events")
        .query("kind", "only these kinds, comma-separated: cluster, job, task, node, audit")
        .query_as("format", "sse (default) or ndjson", Param::OneOf(&["sse", "ndjson"]))
        .query_as("follow", "false: answer the backlog and end (default true: wait for new events)", Param::OneOf(&["true", "false"]))
        .ok(200, "the events, one by one", Body::Events)
        .status(403, "audit events asked for by a plain user")
        .status(404, "no such cluster (or not the caller's)"),
    )
}

#[derive(Debug, Deserialize)]
struct FeedParams {
    since: Option<u64>,
    cluster: Option<String>,
    kind: Option<String>,
    format: Option<String>,
    follow: Option<String>,
}

/// One item of a stream: an event, or numbers the backlog no longer holds.
enum Item {
    Event(Box<Event>),
    Lost(Lost),
}

async fn follow(
    State(st): State<AppState>,
    who: Identity,
    headers: HeaderMap,
    Query(p): Query<FeedParams>,
) -> ApiResult<Response> {
    let filter = FeedFilter {
        cluster: p.cluster.filter(|c| !c.is_empty()),
        kinds: kinds(p.kind.as_deref())?,
    };
    let since = since(&headers, p.since)?;
    let ndjson = wants_ndjson(p.format.as_deref(), &headers)?;
    let keep_following = match p.follow.as_deref() {
        None | Some("") | Some("true") => true,
        Some("false") => false,
        Some(_) => return Err(ApiError::BadRequest("follow: true or false".into())),
    };
    let engine = st.engine.clone();
    let start = feed::follow(&engine, &who.caller(), &filter, since).await?;
    let items = items(engine, start.query, start.lost, keep_following);
    Ok(if ndjson {
        ndjson_response(items)
    } else {
        sse_response(items)
    })
}

/// `kind=a,b`: known kinds only.
fn kinds(list: Option<&str>) -> ApiResult<Vec<EventKind>> {
    let words = list.unwrap_or_default().split(',').map(str::trim);
    words
        .filter(|w| !w.is_empty())
        .map(|w| {
            EventKind::parse(w).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "kind: {w:?} is not one of cluster, job, task, node, audit"
                ))
            })
        })
        .collect()
}

/// Where to start: the `Last-Event-ID` header (a reconnecting client), else `?since=`.
fn since(headers: &HeaderMap, query: Option<u64>) -> ApiResult<Option<u64>> {
    let bad = || ApiError::BadRequest(format!("Last-Event-ID: an event id, 0 to {MAX_INT}"));
    let header = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            let text = v.to_str().map_err(|_| bad())?.trim();
            Some(
                text.parse::<u64>()
                    .ok()
                    .filter(|n| *n <= MAX_INT)
                    .ok_or_else(bad)?,
            )
        }
    };
    match (header, query) {
        (Some(h), _) => Ok(Some(h)),
        (None, Some(q)) if q > MAX_INT => {
            Err(ApiError::BadRequest(format!("since: at most {MAX_INT}")))
        }
        (None, q) => Ok(q),
    }
}

fn wants_ndjson(format: Option<&str>, headers: &HeaderMap) -> ApiResult<bool> {
    match format {
        Some("ndjson") => Ok(true),
        Some("sse") => Ok(false),
        None | Some("") => Ok(headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("application/x-ndjson"))),
        Some(_) => Err(ApiError::BadRequest("format: sse or ndjson".into())),
    }
}

/// What a follower holds between items.
struct Cursor {
    engine: Engine,
    query: EventQuery,
    after: u64,
    wake: tokio::sync::watch::Receiver<u64>,
    ready: VecDeque<Item>,
    follow: bool,
}

/// The items of a follow: the lost notice if any, then events page by page, waiting for new
/// ones between pages while `follow`. A read that fails ends the stream (the client resumes).
fn items(
    engine: Engine,
    query: EventQuery,
    lost: Option<Lost>,
    follow: bool,
) -> impl Stream<Item = Item> + Send {
    let cursor = Cursor {
        wake: feed::subscribe(&engine),
        after: query.after,
        ready: lost.map(Item::Lost).into_iter().collect(),
        engine,
        query,
        follow,
    };
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(item) = c.ready.pop_front() {
                return Some((item, c));
            }
            // Marked seen before the read: a commit after it wakes the wait below.
            c.wake.borrow_and_update();
            let page = match feed::next_page(&c.engine, &c.query, c.after).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "an event stream ends: the backlog could not be read");
                    return None;
                }
            };
            if let Some(last) = page.last() {
                c.after = last.id;
                c.ready
                    .extend(page.into_iter().map(|e| Item::Event(Box::new(e))));
                continue;
            }
            if !c.follow || c.wake.changed().await.is_err() {
                return None;
            }
        }
    })
}

fn sse_response(items: impl Stream<Item = Item> + Send + 'static) -> Response {
    let events = items.map(|item| {
        Ok::<_, Infallible>(match item {
            Item::Event(e) => SseEvent::default()
                .id(e.id.to_string())
                .event(e.kind.as_str())
                .data(serde_json::to_string(&e).unwrap_or_default()),
            Item::Lost(l) => SseEvent::default()
                .event("lost")
                .data(json!({"from": l.from, "to": l.to}).to_string()),
        })
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn ndjson_response(items: impl Stream<Item = Item> + Send + 'static) -> Response {
    let lines = items.map(|item| {
        let mut line = match item {
            Item::Event(e) => serde_json::to_string(&e).unwrap_or_default(),
            Item::Lost(l) => json!({"lost": {"from": l.from, "to": l.to}}).to_string(),
        };
        line.push('\n');
        Ok::<_, Infallible>(line)
    });
    let mut r = axum::body::Body::from_stream(lines).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r
}
