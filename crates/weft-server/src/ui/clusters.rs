//! The user's pages: the template catalog, the cluster list, creating a cluster (with the plan
//! preview of a dry run before confirming), a cluster's detail page with its actions, and the live
//! event stream of a cluster's latest job.

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

use super::html::{enc, field_of};
use super::session::Ctx;
use crate::state::{now_ms, AppState};

type Page = Result<Response, Response>;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui/catalog", get(catalog))
        .route("/ui/clusters", get(list))
        .route("/ui/clusters/new", get(new_form).post(new_submit))
        .route("/ui/clusters/{id}", get(detail))
        .route("/ui/clusters/{id}/action", post(action))
        .route("/ui/clusters/{id}/events", get(events))
}

async fn catalog(ctx: Ctx) -> Page {
    let templates: Vec<Value> = ctx.get_json("/v2/clustertemplates").await?;
    Ok(ctx.page(
        "catalog.html",
        "Template catalog",
        "catalog",
        json!({ "templates": templates }),
    ))
}

#[derive(Debug, Deserialize, Default)]
struct Notice {
    notice: Option<String>,
    error: Option<String>,
}

async fn list(ctx: Ctx, Query(n): Query<Notice>) -> Page {
    let clusters: Vec<Value> = ctx.get_json("/v2/clusters").await?;
    Ok(ctx.page(
        "clusters.html",
        "Clusters",
        "clusters",
        json!({ "clusters": clusters, "notice": n.notice, "error": n.error }),
    ))
}

/// The create form as typed; also the hidden copy carried from the preview to the confirmation.
#[derive(Debug, Deserialize, Default, serde::Serialize)]
struct NewCluster {
    #[serde(default)]
    name: String,
    #[serde(default)]
    template: String,
    #[serde(default)]
    size: String,
    #[serde(default)]
    services: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    hardwaretype: String,
    #[serde(default)]
    imagetype: String,
    #[serde(default)]
    config: String,
    #[serde(default)]
    step: String,
}

/// Form field names and the request fields (as API messages name them) they carry.
const CREATE_FIELDS: [(&str, &str); 8] = [
    ("name", "name"),
    ("clusterTemplate", "template"),
    ("numMachines", "size"),
    ("services", "services"),
    ("provider", "provider"),
    ("hardwaretype", "hardwaretype"),
    ("imagetype", "imagetype"),
    ("config", "config"),
];

async fn new_form(ctx: Ctx, Query(q): Query<BTreeMap<String, String>>) -> Page {
    let mut f = NewCluster {
        template: q.get("template").cloned().unwrap_or_default(),
        ..Default::default()
    };
    if !f.template.is_empty() {
        let t = ctx
            .get(&format!("/v2/clustertemplates/{}", enc(&f.template)))
            .await;
        if t.ok() {
            let t = t.value();
            let d = &t["defaults"];
            f.services = d["services"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            f.size = t["constraints"]["size"]["min"]
                .as_u64()
                .unwrap_or(1)
                .max(1)
                .to_string();
        }
    }
    if f.size.is_empty() {
        f.size = "1".into();
    }
    new_page(&ctx, StatusCode::OK, &f, None, BTreeMap::new()).await
}

async fn new_page(
    ctx: &Ctx,
    status: StatusCode,
    f: &NewCluster,
    plan: Option<Value>,
    errors: BTreeMap<String, String>,
) -> Page {
    let mut choices = Map::new();
    for kind in [
        "clustertemplates",
        "providers",
        "hardwaretypes",
        "imagetypes",
        "services",
    ] {
        let items: Vec<Value> = ctx.get_json(&format!("/v2/{kind}")).await?;
        let names: Vec<Value> = items.iter().map(|i| i["name"].clone()).collect();
        choices.insert(kind.into(), Value::Array(names));
    }
    Ok(ctx.page_status(
        status,
        "cluster_new.html",
        "Create a cluster",
        "create",
        json!({ "f": f, "choices": choices, "plan": plan, "errors": errors }),
    ))
}

/// The API request of a create form; an error names the form field at fault.
fn create_request(f: &NewCluster) -> Result<Value, (String, String)> {
    let mut req = Map::new();
    req.insert("name".into(), json!(f.name.trim()));
    req.insert("clusterTemplate".into(), json!(f.template.trim()));
    let size = f.size.trim();
    if !size.is_empty() {
        let n: i64 = size.parse().map_err(|_| {
            (
                "size".to_string(),
                "size must be a whole number".to_string(),
            )
        })?;
        req.insert("numMachines".into(), json!(n));
    }
    let services: Vec<&str> = f
        .services
        .split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if !services.is_empty() {
        req.insert("services".into(), json!(services));
    }
    for (k, v) in [
        ("provider", &f.provider),
        ("hardwaretype", &f.hardwaretype),
        ("imagetype", &f.imagetype),
    ] {
        if !v.trim().is_empty() {
            req.insert(k.into(), json!(v.trim()));
        }
    }
    if !f.config.trim().is_empty() {
        let c: Value = serde_json::from_str(&f.config).map_err(|e| {
            (
                "config".to_string(),
                format!("config is not valid JSON: {e}"),
            )
        })?;
        if !c.is_object() {
            return Err(("config".into(), "config must be a JSON object".into()));
        }
        req.insert("config".into(), c);
    }
    Ok(Value::Object(req))
}

fn error_map(message: &str) -> BTreeMap<String, String> {
    let names: Vec<&str> = CREATE_FIELDS.iter().map(|(api, _)| *api).collect();
    let forms: Vec<&str> = CREATE_FIELDS.iter().map(|(_, form)| *form).collect();
    // The API names request fields (`numMachines ...`); some messages name the form's word
    // (`Size must be ...`).
    let key = field_of(message, &names)
        .and_then(|api| CREATE_FIELDS.iter().find(|(a, _)| *a == api))
        .map(|(_, form)| *form)
        .or_else(|| field_of(&message.to_lowercase(), &forms))
        .unwrap_or("form")
        .to_string();
    BTreeMap::from([(key, message.to_string())])
}

async fn new_submit(ctx: Ctx, Form(f): Form<NewCluster>) -> Page {
    let req = match create_request(&f) {
        Ok(r) => r,
        Err((field, m)) => {
            return new_page(
                &ctx,
                StatusCode::BAD_REQUEST,
                &f,
                None,
                BTreeMap::from([(field, m)]),
            )
            .await
        }
    };
    let confirm = f.step == "create";
    let path = if confirm {
        "/v2/clusters"
    } else {
        "/v2/clusters?dryrun=true"
    };
    let r = ctx.api(Method::POST, path, Some(req.to_string())).await;
    if !r.ok() {
        let m = r.message();
        return new_page(&ctx, StatusCode::BAD_REQUEST, &f, None, error_map(&m)).await;
    }
    if confirm {
        let id = r.value()["id"].as_str().unwrap_or_default().to_string();
        return Ok(Redirect::to(&format!("/ui/clusters/{id}")).into_response());
    }
    new_page(&ctx, StatusCode::OK, &f, Some(r.value()), BTreeMap::new()).await
}

/// The states of a job's tasks (gates left out), read as the plans route reads them.
async fn task_states(ctx: &Ctx, id: &str, job_id: &str) -> BTreeMap<String, String> {
    let Ok(row) = weft_engine::view::visible(&ctx.state.engine, &ctx.who.caller(), id).await else {
        return BTreeMap::new();
    };
    let Ok(tasks) = ctx.state.store.list_tasks(&row.tenant_id, job_id).await else {
        return BTreeMap::new();
    };
    tasks
        .into_iter()
        .filter(|t| t.cluster_id == row.id && t.action != weft_engine::GATE)
        .map(|t| (t.id, t.state.as_str().to_string()))
        .collect()
}

async fn detail(ctx: Ctx, Path(id): Path<String>, Query(n): Query<Notice>) -> Page {
    let c: Value = ctx.get_json(&format!("/v2/clusters/{}", enc(&id))).await?;
    let job = c["latestJobId"].as_str().unwrap_or_default().to_string();
    let (plan, states) = if job.is_empty() {
        (Value::Null, BTreeMap::new())
    } else {
        let p = ctx
            .get(&format!("/v2/clusters/{}/plans/{}", enc(&id), enc(&job)))
            .await;
        (p.value(), task_states(&ctx, &id, &job).await)
    };
    let mut failures = Vec::new();
    for node in c["nodes"].as_array().into_iter().flatten() {
        for a in node["actions"].as_array().into_iter().flatten() {
            if a["status"] == "failed" {
                failures.push(json!({
                    "node": node["id"], "hostname": node["properties"]["hostname"],
                    "action": a["action"], "service": a["service"], "task": a["taskId"],
                    "stderr": a["stderr"], "stdout": a["stdout"], "time": a["statusTime"],
                }));
            }
        }
    }
    let services: Vec<Value> = ctx.get_json("/v2/services").await.unwrap_or_default();
    let installed: Vec<&str> = c["services"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let addable: Vec<Value> = services
        .iter()
        .map(|s| s["name"].clone())
        .filter(|s| s.as_str().is_some_and(|s| !installed.contains(&s)))
        .collect();
    let title = format!("Cluster {}", c["name"].as_str().unwrap_or(&id));
    Ok(ctx.page(
        "cluster.html",
        &title,
        "clusters",
        json!({
            "c": c, "plan": plan, "states": states, "failures": failures, "addable": addable,
            "config": serde_json::to_string_pretty(&c["config"]).unwrap_or_default(),
            "notice": n.notice, "error": n.error,
        }),
    ))
}

#[derive(Debug, Deserialize, Default)]
struct ActionForm {
    op: String,
    #[serde(default)]
    count: String,
    #[serde(default)]
    service: String,
    #[serde(default)]
    config: String,
    #[serde(default)]
    restart: Option<String>,
    #[serde(default)]
    hours: String,
}

/// The API call a cluster action makes: method, path, body.
fn action_call(id: &str, f: &ActionForm) -> Result<(Method, String, Option<Value>), String> {
    let base = format!("/v2/clusters/{}", enc(id));
    let count = || -> Result<i64, String> {
        f.count
            .trim()
            .parse::<i64>()
            .map_err(|_| "the number of nodes must be a whole number".to_string())
    };
    Ok(match f.op.as_str() {
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
        "add-service" => (
            Method::POST,
            format!("{base}/services"),
            Some(json!({"services": [f.service.trim()]})),
        ),
        "remove-service" => (
            Method::DELETE,
            format!("{base}/services/{}", enc(f.service.trim())),
            None,
        ),
        "start" | "stop" | "restart" => (Method::POST, format!("{base}/services/{}", f.op), None),
        "pause" | "resume" | "abort" => (Method::POST, format!("{base}/{}", f.op), None),
        "reconfigure" => {
            let config: Value = serde_json::from_str(&f.config)
                .map_err(|e| format!("config is not valid JSON: {e}"))?;
            (
                Method::PUT,
                format!("{base}/config"),
                Some(json!({"config": config, "restart": f.restart.is_some()})),
            )
        }
        "extend" => {
            let hours: f64 = f
                .hours
                .trim()
                .parse()
                .map_err(|_| "the lease extension must be a number of hours".to_string())?;
            let expire = now_ms() + (hours * 3_600_000.0) as i64;
            (Method::POST, base, Some(json!({"expireTime": expire})))
        }
        other => return Err(format!("unknown action {other}")),
    })
}

async fn action(ctx: Ctx, Path(id): Path<String>, Form(f): Form<ActionForm>) -> Response {
    let back = |key: &str, m: &str| {
        let target = if f.op == "delete" && key == "notice" {
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
    let r = ctx.api(method, &path, body.map(|b| b.to_string())).await;
    if r.ok() {
        back("notice", &format!("{} started", f.op.replace('-', " ")))
    } else {
        back("error", &r.message())
    }
}

/// What the live view shows of a cluster: its status, the latest job's progress and task states.
async fn snapshot(ctx: &Ctx, id: &str) -> Option<Value> {
    let r = ctx.get(&format!("/v2/clusters/{}", enc(id))).await;
    if !r.ok() {
        return None;
    }
    let c = r.value();
    let job = c["latestJobId"].as_str().unwrap_or_default().to_string();
    let tasks = if job.is_empty() {
        BTreeMap::new()
    } else {
        task_states(ctx, id, &job).await
    };
    Some(json!({
        "status": c["status"], "job": job, "progress": c["progress"],
        "message": c["message"], "tasks": tasks,
    }))
}

/// Server-sent events: a `state` event with the cluster's [`snapshot`] whenever it changes, checked
/// on each job notice of the cluster and every second.
async fn events(ctx: Ctx, Path(id): Path<String>) -> Response {
    let Some(n) = weft_engine::parse_cluster_id(&id) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if snapshot(&ctx, &id).await.is_none() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let rx = ctx.state.engine.events.subscribe();
    let tenant = ctx.who.tenant.id.clone();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = (ctx, id, rx, tick, String::new(), tenant, n);
    let stream = futures_util::stream::unfold(
        start,
        |(ctx, id, mut rx, mut tick, last, tenant, n)| async move {
            let mut first = last.is_empty();
            loop {
                if !first {
                    tokio::select! {
                        ev = rx.recv() => match ev {
                            Ok(e) if e.tenant_id != tenant || e.cluster_id != n => continue,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                            _ => {}
                        },
                        _ = tick.tick() => {}
                    }
                }
                first = false;
                let snap = snapshot(&ctx, &id).await?.to_string();
                if snap != last {
                    let ev = Event::default().event("state").data(snap.clone());
                    return Some((
                        Ok::<Event, Infallible>(ev),
                        (ctx, id, rx, tick, snap, tenant, n),
                    ));
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_form_becomes_a_request() {
        let f = NewCluster {
            name: "c1".into(),
            template: "t".into(),
            size: "3".into(),
            services: "a, b".into(),
            config: r#"{"k": 1}"#.into(),
            ..Default::default()
        };
        let r = create_request(&f).unwrap();
        assert_eq!(
            r,
            json!({"name": "c1", "clusterTemplate": "t", "numMachines": 3, "services": ["a", "b"], "config": {"k": 1}})
        );
        let bad = NewCluster {
            size: "x".into(),
            ..Default::default()
        };
        assert_eq!(create_request(&bad).unwrap_err().0, "size");
    }

    #[test]
    fn api_messages_land_on_form_fields() {
        assert!(error_map("numMachines must be at least 1").contains_key("size"));
        assert!(error_map("clusterTemplate t2 not found").contains_key("template"));
        assert!(error_map("Size must be at most 10 for template t").contains_key("size"));
        assert!(error_map("quota exceeded").contains_key("form"));
    }
}
