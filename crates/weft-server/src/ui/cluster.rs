//! A cluster's page: the node x service grid (what people think of as the cluster), the chosen
//! job as one swimlane per node with each task's attempts and output, the job history, and a
//! button for every action; plus the live event stream of the latest job.
//!
//! The page is built from the API's answers (cluster details, plans) and two read-only looks at
//! the store that the API has no route for: the states of a job's tasks and the cluster's jobs.
//! [`view`] turns those answers into what the template shows; it is pure and unit-tested.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::http::{Method, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft_engine::feed::{self, FeedFilter};

use super::html::{enc, object_from_rows, value_rows};
use super::session::{ApiResp, Ctx};
use crate::state::{now_ms, AppState};

type Page = Result<Response, Response>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui/clusters/{id}", get(detail))
        .route("/ui/clusters/{id}/action", post(action))
        .route("/ui/clusters/{id}/events", get(events))
}

#[derive(Debug, Deserialize, Default)]
struct DetailQuery {
    notice: Option<String>,
    error: Option<String>,
    /// Show this job instead of the latest one.
    job: Option<String>,
    /// The first node of the page shown.
    offset: Option<usize>,
}

/// Nodes a page shows (the grid, the lanes and the live view): a 10,000-node cluster is never
/// read whole for a page or a poll.
pub(super) const PAGE: usize = 100;

/// The cluster's details with the page of nodes from `offset`, and where that page is.
async fn cluster_page(ctx: &Ctx, id: &str, offset: usize) -> Result<(Value, Value), ApiResp> {
    let r = ctx
        .get(&format!(
            "/v2/clusters/{}?offset={offset}&limit={PAGE}",
            enc(id)
        ))
        .await;
    if !r.ok() {
        return Err(r);
    }
    let c = r.value();
    let shown = c["nodes"].as_array().map_or(0, Vec::len);
    let header = |name: &str| {
        r.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
    };
    let total = header("weft-nodes-total").unwrap_or(offset + shown);
    let offset = header("weft-nodes-offset").unwrap_or(offset);
    Ok((c, page_info(offset, shown, total)))
}

/// What the pager shows: the range, and the offsets of the pages before and after (null at an end).
pub(super) fn page_info(offset: usize, shown: usize, total: usize) -> Value {
    let end = offset + shown;
    json!({
        "offset": offset, "first": (offset + 1).min(end), "end": end, "total": total,
        "paged": offset > 0 || end < total,
        "prev": (offset > 0).then(|| offset.saturating_sub(PAGE)),
        "next": (end < total).then_some(end),
    })
}

/// The states of a job's tasks (gates left out), by task id: all of them, or for a cluster shown a
/// page at a time, those of the page's nodes that have started (the rest show as planned).
async fn task_states(ctx: &Ctx, id: &str, job_id: &str, page: &[&str]) -> BTreeMap<String, String> {
    let states =
        weft_engine::view::task_states(&ctx.state.engine, &ctx.who.caller(), id, job_id, page)
            .await;
    states
        .unwrap_or_default()
        .into_iter()
        .map(|(task, state)| (task, state.as_str().to_string()))
        .collect()
}

/// The ids of the nodes shown when they are a page of a larger cluster; empty when all are shown.
fn paged_nodes<'a>(c: &'a Value, page: &Value) -> Vec<&'a str> {
    if page["paged"] != true {
        return Vec::new();
    }
    c["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["id"].as_str())
        .collect()
}

/// The cluster's jobs, newest first: id, action, outcome, start time.
async fn jobs(ctx: &Ctx, id: &str) -> Vec<Value> {
    let jobs = weft_engine::view::jobs_newest_first(&ctx.state.engine, &ctx.who.caller(), id).await;
    jobs.unwrap_or_default()
        .into_iter()
        .map(|j| json!({"id": j.id, "action": j.action, "status": j.status, "time": j.create_time}))
        .collect()
}

async fn detail(ctx: Ctx, Path(id): Path<String>, Query(q): Query<DetailQuery>) -> Page {
    let (c, page) = cluster_page(&ctx, &id, q.offset.unwrap_or(0))
        .await
        .map_err(|r| ctx.error_page(r.status, &r.message()))?;
    let latest = c["latestJobId"].as_str().unwrap_or_default().to_string();
    let job = q
        .job
        .clone()
        .filter(|j| !j.is_empty())
        .unwrap_or(latest.clone());
    let (plan, states) = if job.is_empty() {
        (Value::Null, BTreeMap::new())
    } else {
        let p = ctx
            .get(&format!("/v2/clusters/{}/plans/{}", enc(&id), enc(&job)))
            .await;
        let plan = if p.ok() { p.value() } else { Value::Null };
        (
            plan,
            task_states(&ctx, &id, &job, &paged_nodes(&c, &page)).await,
        )
    };
    let services: Vec<Value> = ctx.get_json("/v2/services").await.unwrap_or_default();
    let known: Vec<String> = services
        .iter()
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect();
    let paged = page["paged"] == true;
    let v = view(
        &c,
        &plan,
        &states,
        ctx.state.settings.max_action_retries,
        paged,
    );
    let title = format!("Cluster {}", c["name"].as_str().unwrap_or(&id));
    let config_json = serde_json::to_string_pretty(&c["config"]).unwrap_or_default();
    let parts = live_parts(&ctx, &c);
    let mut extra = json!({
        "config_rows": value_rows(&c["config"]), "config_json": config_json,
        "grid_rev": parts["grid_rev"], "links_rev": parts["links_rev"],
        "c": c, "job": job, "latest": latest, "jobs": jobs(&ctx, &id).await,
        "addable": addable(&c, &known), "page": page,
        "notice": q.notice, "error": q.error,
    });
    if let (Some(e), Value::Object(v)) = (extra.as_object_mut(), v) {
        e.extend(v);
    }
    Ok(ctx.page("cluster.html", &title, "clusters", extra))
}

/// The services the cluster's template allows (its compatible services; every one of the
/// tenant's when it lists none) that the cluster does not have yet.
fn addable(c: &Value, known: &[String]) -> Vec<String> {
    let have = strings(&c["services"]);
    let allowed = strings(&c["clusterTemplate"]["compatibility"]["services"]);
    known
        .iter()
        .filter(|s| !have.contains(s) && (allowed.is_empty() || allowed.contains(s)))
        .cloned()
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// What a node is called on the page: its hostname, else its number.
fn node_label(n: &Value) -> String {
    match n["properties"]["hostname"].as_str() {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => format!("node {}", n["properties"]["nodenum"].as_u64().unwrap_or(0)),
    }
}

/// A service's lifecycle on a node, read from the node's actions in order: the last lifecycle
/// action (install, configure, initialize, start, stop, remove) says the state, except that a
/// service that was started and not stopped since stays `running` through a configure (an
/// expand or a reconfigure without restart re-configures it in place). Health checks, drift
/// checks and node-level work other than a new machine (`CREATE`, which starts the services
/// over) leave it alone. Returns (state, tone).
pub(super) fn service_state(actions: &[Value], service: &str) -> (String, &'static str) {
    let mut state = ("planned".to_string(), "planned");
    let mut running = false;
    for a in actions {
        let action = a["action"].as_str().unwrap_or_default();
        if action == "CREATE" {
            state = ("planned".into(), "planned");
            running = false;
            continue;
        }
        if a["service"] != service {
            continue;
        }
        let Some((done, doing)) = lifecycle(action) else {
            continue;
        };
        state = match a["status"].as_str() {
            Some("complete") => {
                running = match action {
                    "START" => true,
                    "STOP" | "REMOVE" | "INSTALL" => false,
                    _ => running,
                };
                if running {
                    ("running".into(), "ok")
                } else {
                    (done.into(), "idle")
                }
            }
            Some("in_progress") => (doing.into(), "busy"),
            _ => (format!("{} failed", action.to_lowercase()), "bad"),
        };
    }
    state
}

/// What a lifecycle action leaves a service as, and what it is while it runs.
fn lifecycle(action: &str) -> Option<(&'static str, &'static str)> {
    Some(match action {
        "INSTALL" => ("installed", "installing"),
        "CONFIGURE" => ("configured", "configuring"),
        "INITIALIZE" => ("initialized", "initializing"),
        "START" => ("running", "starting"),
        "STOP" => ("stopped", "stopping"),
        "REMOVE" => ("removed", "removing"),
        _ => return None,
    })
}

/// A service's health on a node: the last finished health check since the service last started
/// or stopped (`healthy`, `unhealthy`), else `unknown`. A configure in place keeps the last check.
pub(super) fn service_health(actions: &[Value], service: &str) -> &'static str {
    let mut health = "unknown";
    for a in actions {
        let action = a["action"].as_str().unwrap_or_default();
        if action == "CREATE" {
            health = "unknown";
        }
        if a["service"] != service {
            continue;
        }
        match (action, a["status"].as_str()) {
            ("HEALTHCHECK", Some("complete")) => health = "healthy",
            ("HEALTHCHECK", Some("failed")) => health = "unhealthy",
            ("START" | "STOP" | "REMOVE" | "INSTALL", _) => health = "unknown",
            _ => {}
        }
    }
    health
}

/// Whether a service has run START successfully on some node.
fn started(nodes: &[Value], service: &str) -> bool {
    nodes.iter().any(|n| {
        let actions = n["actions"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        service_state(actions, service).0 == "running"
    })
}

/// The services a link's URL template refers to (`%host.service.web%` names `web`).
fn link_services(url: &str) -> Vec<String> {
    url.split('%')
        .skip(1)
        .step_by(2)
        .filter_map(|m| m.split_once("service.").map(|(_, s)| s))
        .map(|s| s.split('.').next().unwrap_or(s).to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A human duration of `ms` milliseconds.
pub(super) fn duration(ms: i64) -> String {
    match ms {
        i64::MIN..=0 => "0 s".into(),
        1..=9_999 => format!("{:.1} s", ms as f64 / 1000.0),
        10_000..=119_999 => format!("{} s", ms / 1000),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// The page's model: `grid` and `links` ([`grid_and_links`]), `lanes` (per node the tasks of the
/// plan in stage order, each with its attempts) and `services_summary`.
pub(super) fn view(
    c: &Value,
    plan: &Value,
    states: &BTreeMap<String, String>,
    max_attempts: u32,
    paged: bool,
) -> Value {
    let nodes = c["nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut v = grid_and_links(c);
    v["lanes"] = json!(lanes(nodes, plan, states, max_attempts, paged));
    v["services_summary"] = json!(services_summary(c));
    v
}

/// Each of the cluster's services with the number of (shown) nodes it is on.
fn services_summary(c: &Value) -> Vec<Value> {
    let nodes = c["nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    strings(&c["services"])
        .iter()
        .map(|s| {
            let on = nodes
                .iter()
                .filter(|n| held_services(n).iter().any(|h| h == s))
                .count();
            json!({"name": s, "nodes": on})
        })
        .collect()
}

/// The names of the services on node `n`.
fn held_services(n: &Value) -> Vec<String> {
    n["services"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect()
}

/// What stays true while the page is open, rebuilt for every live update: `grid` (services, and
/// per node its label, addresses, types and one cell per service: lifecycle state and, for
/// services with a health check, health) and `links` (one target per URL; not live while a
/// service a link names has not started).
pub(super) fn grid_and_links(c: &Value) -> Value {
    let nodes = c["nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let services = strings(&c["services"]);
    let rows: Vec<Value> = nodes.iter().map(|n| grid_row(n, &services)).collect();
    json!({"grid": {"services": services, "rows": rows}, "links": links(c, nodes)})
}

fn grid_row(n: &Value, services: &[String]) -> Value {
    let actions = n["actions"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let defs = n["services"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let cells: Vec<Value> = services
        .iter()
        .map(|s| {
            let Some(def) = defs.iter().find(|d| d["name"] == s.as_str()) else {
                return json!({"service": s, "held": false});
            };
            let (state, tone) = service_state(actions, s);
            let checked = def["provisioner"]["actions"]["healthcheck"].is_object();
            let health = checked.then(|| service_health(actions, s));
            json!({"service": s, "held": true, "state": state, "tone": tone, "health": health})
        })
        .collect();
    let p = &n["properties"];
    json!({
        "id": n["id"], "label": node_label(n), "addresses": p["ipaddresses"],
        "hardware": p["hardwaretype"], "image": p["imagetype"], "cells": cells,
    })
}

/// The cluster's links as the page shows them: per link its label, whether it is live (every
/// service it names has started and it expanded fully), what it waits for, and its targets: one
/// per URL (the API's per-node `urls`, else its `url`), each linked only when it is an http or
/// https URL.
fn links(c: &Value, nodes: &[Value]) -> Vec<Value> {
    let raw_links = c["clusterTemplate"]["links"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    c["links"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, l)| {
            let url = l["url"].as_str().unwrap_or_default();
            let raw = raw_links
                .get(i)
                .and_then(|r| r["url"].as_str())
                .unwrap_or(url);
            let waiting: Vec<String> = link_services(raw)
                .into_iter()
                .filter(|s| !started(nodes, s))
                .collect();
            let mut urls = strings(&l["urls"]);
            if urls.is_empty() {
                urls.push(url.to_string());
            }
            let live = waiting.is_empty() && urls.iter().all(|u| !u.contains('%') && !u.is_empty());
            let targets: Vec<Value> = urls
                .iter()
                .map(|u| json!({"text": u, "href": web_url(u)}))
                .collect();
            json!({"label": l["label"], "live": live, "waiting": waiting, "targets": targets})
        })
        .collect()
}

/// `u` when it is an absolute http or https URL (what a link may point to), else `None`: a
/// template's `javascript:` or `data:` URL is shown as text, never as a link.
pub(super) fn web_url(u: &str) -> Option<&str> {
    let t = u.trim();
    let scheme = t.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") if t == u && !t.chars().any(char::is_control) => Some(u),
        _ => None,
    }
}

/// The plan's tasks as one lane per node, in stage order, each with its attempts (from the node's
/// action history) and state, "not retried: <reason>" when its last attempt failed fatally, and
/// the clean-up DELETEs a failed CREATE got (`cleanups`: shown as clean-up, not as tasks of the
/// plan). `paged`: `nodes` are a page of the cluster, and only their lanes are shown (else a
/// task's node missing from `nodes` has left the cluster).
fn lanes(
    nodes: &[Value],
    plan: &Value,
    states: &BTreeMap<String, String>,
    max_attempts: u32,
    paged: bool,
) -> Vec<Value> {
    let index: std::collections::HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let mut order: Vec<String> = Vec::new();
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (stage, tasks) in plan["stages"].as_array().into_iter().flatten().enumerate() {
        for t in tasks.as_array().into_iter().flatten() {
            let node_id = t["nodeId"].as_str().unwrap_or_default().to_string();
            let id = t["id"].as_str().unwrap_or_default();
            let node = index.get(node_id.as_str()).copied();
            if paged && node.is_none() {
                continue;
            }
            let (attempts, cleanups, not_retried) = history(node, id);
            let n = attempts.len();
            // The server numbers attempts and says how many a task may have; else the setting.
            let max_attempts = node
                .and_then(|n| n["actions"].as_array())
                .into_iter()
                .flatten()
                .filter(|a| a["taskId"] == id)
                .filter_map(|a| a["maxAttempts"].as_u64())
                .next_back()
                .unwrap_or(u64::from(max_attempts));
            let attempt = if n > 1 {
                format!("attempt {n} of {max_attempts}")
            } else {
                String::new()
            };
            let state = states.get(id).cloned().unwrap_or_else(|| "planned".into());
            if !by_node.contains_key(&node_id) {
                order.push(node_id.clone());
            }
            by_node.entry(node_id).or_default().push(json!({
                "id": id, "name": t["taskName"], "service": t["service"], "stage": stage + 1,
                "state": state, "attempt": attempt, "last": attempts.last(),
                "earlier": attempts.get(..n.saturating_sub(1)),
                "not_retried": not_retried, "cleanups": cleanups,
            }));
        }
    }
    order
        .into_iter()
        .map(|node_id| {
            let node = index.get(node_id.as_str()).copied();
            let (label, hardware) = match node {
                Some(n) => (node_label(n), n["properties"]["hardwaretype"].clone()),
                None => ("a removed node".to_string(), Value::Null),
            };
            json!({"node": node_id, "label": label, "hardware": hardware,
                   "tasks": by_node.remove(&node_id).unwrap_or_default()})
        })
        .collect()
}

/// A plan task's entries in its node's history: its attempts, the clean-up DELETEs of a failed
/// CREATE (`<id>-r<n>` before a retry, `<id>-cleanup` after a fatal failure), and "not retried:
/// <reason>" when its last attempt failed fatally.
fn history(node: Option<&Value>, id: &str) -> (Vec<Value>, Vec<Value>, Option<String>) {
    let entry = |a: &Value| {
        let took = a["statusTime"].as_i64().unwrap_or(0) - a["submitTime"].as_i64().unwrap_or(0);
        json!({"status": a["status"], "duration": duration(took),
               "stdout": a["stdout"], "stderr": a["stderr"], "name": a["action"]})
    };
    let actions = node
        .and_then(|n| n["actions"].as_array())
        .into_iter()
        .flatten();
    let attempts = actions
        .clone()
        .filter(|a| a["taskId"] == id)
        .map(entry)
        .collect();
    let prefix = format!("{id}-");
    let cleanups = actions
        .clone()
        .filter(|a| a["cleanup"] == true)
        .filter(|a| a["taskId"].as_str().is_some_and(|t| t.starts_with(&prefix)))
        .map(entry)
        .collect();
    let not_retried = actions
        .clone()
        .rfind(|a| a["taskId"] == id)
        .filter(|a| a["status"] == "failed" && a["failure"]["retryable"] == false)
        .map(|a| {
            let reason = a["failure"]["reason"].as_str().unwrap_or("crash");
            format!("not retried: {reason}")
        });
    (attempts, cleanups, not_retried)
}

/// The API call a cluster action makes: method, path, body. `f` is the submitted form.
fn action_call(
    id: &str,
    f: &BTreeMap<String, String>,
) -> Result<(Method, String, Option<Value>), String> {
    let get = |k: &str| f.get(k).map(|s| s.trim()).unwrap_or_default();
    let base = format!("/v2/clusters/{}", enc(id));
    let count = || -> Result<i64, String> {
        get("count")
            .parse::<i64>()
            .map_err(|_| "the number of nodes must be a whole number".to_string())
    };
    let service = get("service");
    Ok(match get("op") {
        "delete" => (Method::DELETE, base, None),
        "expand" => (
            Method::POST,
            format!("{base}/nodes"),
            Some(json!({"count": count()?})),
        ),
        "shrink" => (
            Method::DELETE,
            format!("{base}/nodes"),
            Some(json!({"count": count()?})),
        ),
        "add-service" if service.is_empty() => return Err("choose a service to add".into()),
        "add-service" => (
            Method::POST,
            format!("{base}/services"),
            Some(json!({"services": [service]})),
        ),
        "remove-service" => (
            Method::DELETE,
            format!("{base}/services/{}", enc(service)),
            None,
        ),
        op @ ("start" | "stop" | "restart") if service.is_empty() => {
            (Method::POST, format!("{base}/services/{op}"), None)
        }
        op @ ("start" | "stop" | "restart" | "upgrade") => (
            Method::POST,
            format!("{base}/services/{}/{op}", enc(service)),
            None,
        ),
        op @ ("pause" | "resume" | "abort") => (Method::POST, format!("{base}/{op}"), None),
        "reconfigure" => {
            let config = object_from_rows(f, "")?;
            (
                Method::PUT,
                format!("{base}/config"),
                Some(json!({"config": config, "restart": f.contains_key("restart")})),
            )
        }
        "reconfigure-json" => {
            let config: Value = serde_json::from_str(get("config"))
                .map_err(|e| format!("config is not valid JSON: {e}"))?;
            (
                Method::PUT,
                format!("{base}/config"),
                Some(json!({"config": config, "restart": f.contains_key("restart")})),
            )
        }
        "extend" => {
            let hours: f64 = get("hours")
                .parse()
                .ok()
                .filter(|h: &f64| h.is_finite() && *h > 0.0)
                .ok_or_else(|| {
                    "the lease extension must be a positive number of hours".to_string()
                })?;
            let expire = now_ms() + (hours * 3_600_000.0) as i64;
            (Method::POST, base, Some(json!({"expireTime": expire})))
        }
        other => return Err(format!("unknown action {other}")),
    })
}

async fn action(
    ctx: Ctx,
    Path(id): Path<String>,
    Form(f): Form<BTreeMap<String, String>>,
) -> Response {
    let op = f.get("op").cloned().unwrap_or_default();
    let back = |key: &str, m: &str| {
        let target = if op == "delete" && key == "notice" {
            format!("/ui/clusters?{key}={}", enc(m))
        } else {
            format!("/ui/clusters/{}?{key}={}", enc(&id), enc(m))
        };
        Redirect::to(&target).into_response()
    };
    let (method, path, body) = match action_call(&id, &f) {
        Ok(c) => c,
        Err(m) => return back("error", &m),
    };
    if op.starts_with("reconfigure") && unchanged_config(&ctx, &id, body.as_ref()).await {
        return back(
            "notice",
            "the config is unchanged: nothing to do (Restart all restarts the services)",
        );
    }
    let r = ctx.api(method, &path, body.map(|b| b.to_string())).await;
    let what = match f
        .get("service")
        .filter(|s| !s.is_empty() && op != "add-service" && op != "remove-service")
    {
        Some(s) => format!("{op} {s}"),
        None => op.replace('-', " "),
    };
    if r.ok() {
        let said = r.text();
        let said = said.trim();
        if said.is_empty() || said.starts_with('{') || said.starts_with('[') {
            back("notice", &format!("{what} started"))
        } else {
            back("notice", &format!("{what}: {said}"))
        }
    } else {
        back("error", &format!("{what}: {}", r.message()))
    }
}

/// Whether a reconfigure request's config is the cluster's config as it is: a form submitted
/// unchanged starts no job.
async fn unchanged_config(ctx: &Ctx, id: &str, body: Option<&Value>) -> bool {
    let r = ctx.get(&format!("/v2/clusters/{}/config", enc(id))).await;
    r.ok() && body.is_some_and(|b| b["config"] == r.value())
}

/// What the live view shows of a cluster: its status, message, the latest job's progress and
/// task states, and the grid and links as the page renders them (`grid_html`, `links_html`).
async fn snapshot(ctx: &Ctx, id: &str, offset: usize) -> Option<Value> {
    let (c, page) = cluster_page(ctx, id, offset).await.ok()?;
    let job = c["latestJobId"].as_str().unwrap_or_default().to_string();
    let tasks = if job.is_empty() {
        BTreeMap::new()
    } else {
        task_states(ctx, id, &job, &paged_nodes(&c, &page)).await
    };
    let service_nodes: Map<String, Value> = services_summary(&c)
        .into_iter()
        .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["nodes"].clone())))
        .collect();
    let mut snap = json!({
        "status": c["status"], "job": job, "progress": c["progress"],
        "message": c["message"], "waiting": c["waiting"], "tasks": tasks,
        "nodes_total": page["total"], "service_nodes": service_nodes,
    });
    if let (Some(s), Value::Object(parts)) = (snap.as_object_mut(), live_parts(ctx, &c)) {
        s.extend(parts);
    }
    Some(snap)
}

/// The grid and the links rendered as the page shows them (`grid_html`, `links_html`) with a
/// revision of each (`grid_rev`, `links_rev`): the page replaces a part only when its revision
/// changed, so nothing moves under the reader's pointer while the cluster stands still.
fn live_parts(ctx: &Ctx, c: &Value) -> Value {
    let model = grid_and_links(c);
    let part = |name: &str| {
        ctx.ui
            .env
            .get_template(name)
            .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(&model))))
            .unwrap_or_default()
    };
    let rev = |html: &str| {
        use sha2::Digest as _;
        hex::encode(&sha2::Sha256::digest(html.as_bytes())[..8])
    };
    let (grid, links) = (part("cluster_grid.html"), part("cluster_links.html"));
    json!({"grid_rev": rev(&grid), "links_rev": rev(&links), "grid_html": grid, "links_html": links})
}

/// Server-sent events: a `state` event with the cluster's [`snapshot`] whenever it changes,
/// rebuilt on each of the cluster's events in the tenant's event stream (`/v2/events`, see
/// `weft_engine::feed`) and every [`RECHECK`] for what is no event (health results, links that
/// became reachable); `?offset=` picks the page of nodes, as on the page.
async fn events(ctx: Ctx, Path(id): Path<String>, Query(q): Query<DetailQuery>) -> Response {
    let offset = q.offset.unwrap_or(0);
    let filter = FeedFilter {
        cluster: Some(id.clone()),
        kinds: Vec::new(),
    };
    let engine = ctx.state.engine.clone();
    let Ok(start) = feed::follow(&engine, &ctx.who.caller(), &filter, None).await else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if snapshot(&ctx, &id, offset).await.is_none() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mut tick = tokio::time::interval(RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let live = Live {
        wake: feed::subscribe(&engine),
        after: start.query.after,
        query: start.query,
        tick,
        last: String::new(),
    };
    let stream =
        futures_util::stream::unfold((ctx, id, live), move |(ctx, id, mut live)| async move {
            loop {
                if !live.last.is_empty() && !live.changed(&ctx).await {
                    return None;
                }
                let snap = snapshot(&ctx, &id, offset).await?.to_string();
                if snap != live.last {
                    live.last = snap.clone();
                    let ev = Event::default().event("state").data(snap);
                    return Some((Ok::<Event, Infallible>(ev), (ctx, id, live)));
                }
            }
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// How often a live view looks again without an event.
const RECHECK: Duration = Duration::from_secs(5);

/// A live view's place in its cluster's events.
struct Live {
    wake: tokio::sync::watch::Receiver<u64>,
    query: feed::EventQuery,
    after: u64,
    tick: tokio::time::Interval,
    /// The last snapshot sent.
    last: String,
}

impl Live {
    /// Waits until the cluster has new events or [`RECHECK`] passed; `false` when the stream
    /// must end (the server stops, or the backlog cannot be read).
    async fn changed(&mut self, ctx: &Ctx) -> bool {
        loop {
            self.wake.borrow_and_update();
            let Ok(page) = feed::next_page(&ctx.state.engine, &self.query, self.after).await else {
                return false;
            };
            if let Some(e) = page.last() {
                self.after = e.id;
                return true;
            }
            tokio::select! {
                woke = self.wake.changed() => if woke.is_err() { return false },
                _ = self.tick.tick() => return true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn actions_become_api_calls() {
        let (m, p, b) = action_call("7", &form(&[("op", "expand"), ("count", "2")])).unwrap();
        assert_eq!(
            (m, p.as_str(), b),
            (
                Method::POST,
                "/v2/clusters/7/nodes",
                Some(json!({"count": 2}))
            )
        );
        let (m, p, _) = action_call("7", &form(&[("op", "restart"), ("service", "web")])).unwrap();
        assert_eq!(
            (m, p.as_str()),
            (Method::POST, "/v2/clusters/7/services/web/restart")
        );
        let (_, p, _) = action_call("7", &form(&[("op", "restart")])).unwrap();
        assert_eq!(p, "/v2/clusters/7/services/restart");
        assert!(action_call("7", &form(&[("op", "add-service"), ("service", "")])).is_err());
        assert!(action_call("7", &form(&[("op", "extend"), ("hours", "-1")])).is_err());
        assert!(action_call("7", &form(&[("op", "shrink"), ("count", "x")])).is_err());
    }

    #[test]
    fn the_config_form_keeps_types() {
        let f = form(&[
            ("k0", "port"),
            ("v0", "8080"),
            ("t0", "json"),
            ("k1", "name"),
            ("v1", "8080"),
            ("t1", "string"),
            ("k2", ""),
            ("v2", "dropped"),
            ("k3", "flags"),
            ("v3", "{\"a\": true}"),
            ("k4", "plain"),
            ("v4", "hello world"),
        ]);
        assert_eq!(
            object_from_rows(&f, "").unwrap(),
            json!({"port": 8080, "name": "8080", "flags": {"a": true}, "plain": "hello world"})
        );
        assert!(object_from_rows(&form(&[("k0", "a"), ("k1", "a")]), "").is_err());
    }

    #[test]
    fn service_states_read_the_last_action() {
        let a = |action: &str, status: &str| json!({"service": "web", "action": action, "status": status});
        assert_eq!(service_state(&[], "web").0, "planned");
        assert_eq!(
            service_state(&[a("INSTALL", "complete"), a("START", "complete")], "web"),
            ("running".into(), "ok")
        );
        assert_eq!(
            service_state(&[a("START", "complete"), a("STOP", "in_progress")], "web").0,
            "stopping"
        );
        assert_eq!(
            service_state(&[a("START", "failed")], "web"),
            ("start failed".into(), "bad")
        );
    }

    #[test]
    fn health_checks_and_drift_checks_leave_the_lifecycle_alone() {
        let a = |service: &str, action: &str, status: &str| json!({"service": service, "action": action, "status": status});
        let ran = [
            a("", "CREATE", "complete"),
            a("web", "INSTALL", "complete"),
            a("web", "START", "complete"),
            a("web", "HEALTHCHECK", "complete"),
            a("", "STATUS", "complete"),
        ];
        assert_eq!(service_state(&ran, "web"), ("running".into(), "ok"));
        assert_eq!(service_health(&ran, "web"), "healthy");
        let mut sick = ran.to_vec();
        sick.push(a("web", "HEALTHCHECK", "failed"));
        assert_eq!(service_state(&sick, "web").0, "running");
        assert_eq!(service_health(&sick, "web"), "unhealthy");
        // A restart makes the last check old news; a new machine starts the services over.
        sick.push(a("web", "STOP", "complete"));
        assert_eq!(service_health(&sick, "web"), "unknown");
        assert_eq!(service_state(&sick, "web").0, "stopped");
        sick.push(a("", "CREATE", "in_progress"));
        assert_eq!(service_state(&sick, "web").0, "planned");
        // A configure in place (an expand, a reconfigure without restart) keeps it running.
        let mut expanded = ran.to_vec();
        expanded.push(a("web", "CONFIGURE", "in_progress"));
        assert_eq!(
            service_state(&expanded, "web"),
            ("configuring".into(), "busy")
        );
        expanded.pop();
        expanded.push(a("web", "CONFIGURE", "complete"));
        assert_eq!(service_state(&expanded, "web"), ("running".into(), "ok"));
        assert_eq!(service_health(&expanded, "web"), "healthy");
    }

    #[test]
    fn only_web_urls_become_links() {
        assert_eq!(web_url("http://10.0.0.1:80/"), Some("http://10.0.0.1:80/"));
        assert_eq!(web_url("HTTPS://x/"), Some("HTTPS://x/"));
        for bad in [
            "javascript:alert(1)",
            " javascript://x",
            "data:text/html,<b>",
            "//x/",
            "http://a\nb",
            "vbscript://x",
        ] {
            assert_eq!(web_url(bad), None, "{bad}");
        }
    }

    #[test]
    fn config_rows_read_back_as_the_config() {
        let config =
            json!({"evil": {"k": "x\" onfocus=y"}, "n": 1, "s": "8080", "b": "{", "l": [1, "2"]});
        let mut f = BTreeMap::new();
        for (i, r) in value_rows(&config).iter().enumerate() {
            f.insert(format!("k{i}"), r["key"].as_str().unwrap().to_string());
            f.insert(format!("v{i}"), r["text"].as_str().unwrap().to_string());
            f.insert(format!("t{i}"), r["kind"].as_str().unwrap().to_string());
        }
        assert_eq!(object_from_rows(&f, "").unwrap(), config);
    }

    #[test]
    fn a_link_over_several_nodes_shows_one_url_each() {
        let c = json!({
            "services": ["web"], "nodes": [],
            "clusterTemplate": {"links": [{"label": "site", "url": "http://%ip.service.web%/"}]},
            "links": [{"label": "site", "url": "http://10.0.0.1,10.0.0.2/",
                       "urls": ["http://10.0.0.1/", "http://10.0.0.2/"]}],
        });
        let v = grid_and_links(&c);
        let targets = v["links"][0]["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[1]["href"], "http://10.0.0.2/");
    }

    #[test]
    fn links_wait_for_their_services() {
        assert_eq!(
            link_services("http://%host.service.web%:80/%ip.service.db%"),
            ["web", "db"]
        );
        let c = json!({
            "services": ["web"],
            "nodes": [{"id": "n1", "properties": {"hostname": "h1", "nodenum": 1},
                       "services": [{"name": "web"}],
                       "actions": [{"taskId": "t1", "service": "web", "action": "INSTALL", "status": "complete"}]}],
            "clusterTemplate": {"links": [{"label": "site", "url": "http://%host.service.web%/"}]},
            "links": [{"label": "site", "url": "http://h1/"}],
        });
        let v = view(&c, &Value::Null, &BTreeMap::new(), 3, false);
        assert_eq!(v["links"][0]["live"], false);
        assert_eq!(v["links"][0]["waiting"], json!(["web"]));
        assert_eq!(v["grid"]["rows"][0]["cells"][0]["state"], "installed");
    }

    #[test]
    fn lanes_name_nodes_and_count_attempts() {
        let c = json!({
            "services": ["web"],
            "nodes": [{"id": "n1", "properties": {"hostname": "h1", "nodenum": 1}, "services": [],
                       "actions": [
                         {"taskId": "t1", "service": "web", "action": "INSTALL", "status": "failed", "submitTime": 0, "statusTime": 1500, "stderr": "boom"},
                         {"taskId": "t1", "service": "web", "action": "INSTALL", "status": "complete", "submitTime": 2000, "statusTime": 2500}]}],
        });
        let plan = json!({"stages": [[{"id": "t1", "taskName": "INSTALL", "nodeId": "n1", "service": "web"}],
                                      [{"id": "t2", "taskName": "DELETE", "nodeId": "gone", "service": ""}]]});
        let states = BTreeMap::from([("t1".to_string(), "complete".to_string())]);
        let v = view(&c, &plan, &states, 3, false);
        let lanes = v["lanes"].as_array().unwrap();
        assert_eq!(lanes[0]["label"], "h1");
        assert_eq!(lanes[0]["tasks"][0]["attempt"], "attempt 2 of 3");
        assert_eq!(lanes[0]["tasks"][0]["earlier"][0]["stderr"], "boom");
        assert_eq!(lanes[0]["tasks"][0]["last"]["duration"], "0.5 s");
        assert_eq!(lanes[1]["label"], "a removed node");
        assert_eq!(lanes[1]["tasks"][0]["state"], "planned");
        let paged = view(&c, &plan, &states, 3, true);
        assert_eq!(
            paged["lanes"].as_array().unwrap().len(),
            1,
            "a page shows the lanes of its own nodes only"
        );
    }

    #[test]
    fn lanes_say_not_retried_and_show_clean_up_as_such() {
        let c = json!({
            "services": [],
            "nodes": [{"id": "n1", "properties": {"hostname": "h1", "nodenum": 1}, "services": [],
                       "actions": [
                         {"taskId": "t1", "service": "", "action": "CREATE", "status": "failed",
                          "submitTime": 0, "statusTime": 800, "stderr": "AuthFailure",
                          "failure": {"retryable": false, "reason": "auth"}},
                         {"taskId": "t1-cleanup", "service": "", "action": "DELETE",
                          "status": "complete", "submitTime": 900, "statusTime": 1000,
                          "cleanup": true}]}],
        });
        let plan = json!({"stages": [[{"id": "t1", "taskName": "CREATE", "nodeId": "n1", "service": ""}]]});
        let states = BTreeMap::from([("t1".to_string(), "failed".to_string())]);
        let v = view(&c, &plan, &states, 3, false);
        let task = &v["lanes"][0]["tasks"][0];
        assert_eq!(task["not_retried"], "not retried: auth");
        assert_eq!(task["attempt"], "", "one attempt only");
        assert_eq!(task["cleanups"][0]["name"], "DELETE");
        assert_eq!(task["cleanups"][0]["status"], "complete");
        assert_eq!(
            v["lanes"][0]["tasks"].as_array().unwrap().len(),
            1,
            "the clean-up is no task of the plan"
        );
    }

    #[test]
    fn pages_say_where_they_are() {
        let p = page_info(0, 3, 3);
        assert_eq!(p["paged"], false);
        let p = page_info(0, PAGE, 10_000);
        assert_eq!(
            (p["first"].clone(), p["end"].clone()),
            (json!(1), json!(PAGE))
        );
        assert_eq!(
            (p["prev"].clone(), p["next"].clone()),
            (Value::Null, json!(PAGE))
        );
        let p = page_info(9_950, 50, 10_000);
        assert_eq!(
            (p["prev"].clone(), p["next"].clone()),
            (json!(9_850), Value::Null)
        );
        assert_eq!(p["paged"], true);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(1500), "1.5 s");
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(185_000), "3 min 5 s");
    }
}
