//! The user's pages: the template catalog, the cluster list, and creating a cluster (with the
//! plan preview of a dry run before confirming). A cluster's own page is in `cluster`.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::html::{enc, field_of};
use super::session::Ctx;
use crate::state::AppState;

type Page = Result<Response, Response>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui/catalog", get(catalog))
        .route("/ui/clusters", get(list))
        .route("/ui/clusters/new", get(new_form).post(new_submit))
}

async fn catalog(ctx: Ctx) -> Page {
    let templates: Vec<Value> = ctx.get_json("/v2/clustertemplates").await?;
    let unusable = unusable(&ctx).await;
    Ok(ctx.page(
        "catalog.html",
        "Template catalog",
        "catalog",
        json!({ "templates": templates, "unusable": unusable }),
    ))
}

/// The caller's templates that cannot make a cluster now, with why (the engine's judgement).
async fn unusable(ctx: &Ctx) -> BTreeMap<String, String> {
    weft_engine::gaps::templates_not_usable(&ctx.state.engine, &ctx.who.tenant.id)
        .await
        .unwrap_or_default()
}

#[derive(Debug, Deserialize, Default)]
struct ListQuery {
    notice: Option<String>,
    error: Option<String>,
    /// Words that must all appear in the name, id, template or services.
    #[serde(default)]
    q: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    template: String,
    #[serde(default)]
    owner: String,
}

/// Whether a cluster summary passes the list's search and filters.
fn listed(c: &Value, q: &ListQuery) -> bool {
    let is = |want: &str, have: &Value| want.is_empty() || have.as_str() == Some(want);
    let hay = format!(
        "{} {} {} {}",
        c["name"].as_str().unwrap_or_default(),
        c["id"].as_str().unwrap_or_default(),
        c["clusterTemplate"]["name"].as_str().unwrap_or_default(),
        strings(&c["services"]).join(" ")
    )
    .to_lowercase();
    is(&q.status, &c["status"])
        && is(&q.template, &c["clusterTemplate"]["name"])
        && is(&q.owner, &c["ownerId"])
        && q.q
            .to_lowercase()
            .split_whitespace()
            .all(|w| hay.contains(w))
}

/// The distinct values of `f` over the clusters, sorted.
fn distinct(clusters: &[Value], f: impl Fn(&Value) -> &Value) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = clusters
        .iter()
        .filter_map(|c| f(c).as_str().map(String::from))
        .collect();
    set.into_iter().collect()
}

async fn list(ctx: Ctx, Query(q): Query<ListQuery>) -> Page {
    let all: Vec<Value> = ctx.get_json("/v2/clusters").await?;
    let filters = json!({
        "status": distinct(&all, |c| &c["status"]),
        "template": distinct(&all, |c| &c["clusterTemplate"]["name"]),
        "owner": distinct(&all, |c| &c["ownerId"]),
    });
    let total = all.len();
    let clusters: Vec<Value> = all.into_iter().filter(|c| listed(c, &q)).collect();
    Ok(ctx.page(
        "clusters.html",
        "Clusters",
        "clusters",
        json!({ "clusters": clusters, "total": total, "filters": filters,
                "query": {"q": q.q, "status": q.status, "template": q.template, "owner": q.owner},
                "notice": q.notice, "error": q.error }),
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
        name: q.get("name").cloned().unwrap_or_default(),
        ..Default::default()
    };
    if let Some(t) = template_facts(&ctx, &f.template).await {
        f.services = strings(&t["defaults"]["services"]).join(", ");
        f.size = t["constraints"]["size"]["min"]
            .as_u64()
            .unwrap_or(1)
            .max(1)
            .to_string();
    }
    let errors = match unusable(&ctx).await.remove(&f.template) {
        Some(why) => BTreeMap::from([(
            "template".to_string(),
            format!("template {} cannot make a cluster now: {why}", f.template),
        )]),
        None => BTreeMap::new(),
    };
    new_page(&ctx, StatusCode::OK, &f, None, errors).await
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// The template `name` resolved (parents and partials merged), as the API resolves it.
async fn template_facts(ctx: &Ctx, name: &str) -> Option<Value> {
    if name.is_empty() {
        return None;
    }
    let t = ctx
        .get(&format!("/v2/clustertemplates/{}", enc(name)))
        .await;
    if !t.ok() {
        return None;
    }
    let r = ctx.api(Method::POST, "/v2/resolve", Some(t.text())).await;
    Some(if r.ok() { r.value() } else { t.value() })
}

/// The services a create form offers for template `t`: its compatible services (all of the
/// tenant's when it lists none) plus its defaults, each with whether it is chosen.
fn service_choices(t: &Value, all: &[Value], chosen: &[&str]) -> Vec<Value> {
    let mut names = strings(&t["compatibility"]["services"]);
    if names.is_empty() {
        names = all
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
    }
    for d in strings(&t["defaults"]["services"]) {
        if !names.contains(&d) {
            names.push(d);
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|n| json!({"name": n, "checked": chosen.contains(&n.as_str())}))
        .collect()
}

async fn new_page(
    ctx: &Ctx,
    status: StatusCode,
    f: &NewCluster,
    preview: Option<Value>,
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
    // Templates that cannot make a cluster now are not offered (the catalog says why).
    let unusable = unusable(ctx).await;
    if let Some(Value::Array(t)) = choices.get_mut("clustertemplates") {
        t.retain(|n| n.as_str().is_none_or(|n| !unusable.contains_key(n)));
    }
    let t = template_facts(ctx, &f.template).await;
    let chosen = service_list(&f.services);
    let all = choices["services"].as_array().cloned().unwrap_or_default();
    let service_boxes = t
        .as_ref()
        .map(|t| service_choices(t, &all, &chosen))
        .unwrap_or_default();
    let size = t.as_ref().map(|t| t["constraints"]["size"].clone());
    Ok(ctx.page_status(
        status,
        "cluster_new.html",
        "Create a cluster",
        "create",
        json!({ "f": f, "choices": choices, "preview": preview, "errors": errors,
                "service_boxes": service_boxes, "size": size }),
    ))
}

fn service_list(s: &str) -> Vec<&str> {
    s.split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
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
    let services = service_list(&f.services);
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

/// The create form's fields; checked service boxes (`svc_<name>`) become `services`.
fn new_cluster(form: &BTreeMap<String, String>) -> NewCluster {
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let boxes: Vec<&str> = form.keys().filter_map(|k| k.strip_prefix("svc_")).collect();
    NewCluster {
        name: get("name"),
        template: get("template"),
        size: get("size"),
        services: if boxes.is_empty() {
            get("services")
        } else {
            boxes.join(", ")
        },
        provider: get("provider"),
        hardwaretype: get("hardwaretype"),
        imagetype: get("imagetype"),
        config: get("config"),
        step: get("step"),
    }
}

/// The solver's layout for the form (grouped), or its explanation of why there is none.
async fn layout_preview(ctx: &Ctx, req: &Value) -> Result<Value, String> {
    let mut q =
        json!({"clusterTemplate": req["clusterTemplate"], "numMachines": req["numMachines"]});
    for k in ["services", "provider", "hardwaretype", "imagetype"] {
        if !req[k].is_null() {
            q[k] = req[k].clone();
        }
    }
    let r = ctx
        .api(Method::POST, "/v2/solve", Some(q.to_string()))
        .await;
    if !r.ok() {
        return Err(r.message());
    }
    let v = r.value();
    match v["explanation"].as_str() {
        Some(e) => Err(e.to_string()),
        None => Ok(v["layout"].clone()),
    }
}

async fn new_submit(ctx: Ctx, Form(form): Form<BTreeMap<String, String>>) -> Page {
    let f = new_cluster(&form);
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
    if confirm {
        let r = ctx
            .api(Method::POST, "/v2/clusters", Some(req.to_string()))
            .await;
        if !r.ok() {
            let m = r.message();
            return new_page(&ctx, StatusCode::BAD_REQUEST, &f, None, error_map(&m)).await;
        }
        let id = r.value()["id"].as_str().unwrap_or_default().to_string();
        return Ok(Redirect::to(&format!("/ui/clusters/{id}")).into_response());
    }
    // The preview: the layout first (with the solver's explanation at the size field when there
    // is none), then the plan of a dry run.
    let layout = if req["numMachines"].is_null() || req["clusterTemplate"] == "" {
        Value::Null
    } else {
        match layout_preview(&ctx, &req).await {
            Ok(l) => l,
            Err(m) => {
                let errors = BTreeMap::from([("size".to_string(), m)]);
                return new_page(&ctx, StatusCode::BAD_REQUEST, &f, None, errors).await;
            }
        }
    };
    let r = ctx
        .api(
            Method::POST,
            "/v2/clusters?dryrun=true",
            Some(req.to_string()),
        )
        .await;
    if !r.ok() {
        let m = r.message();
        return new_page(&ctx, StatusCode::BAD_REQUEST, &f, None, error_map(&m)).await;
    }
    let plan = r.value();
    let tasks: usize = plan["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .map(Vec::len)
        .sum();
    let preview = json!({"layout": layout, "plan": plan, "tasks": tasks});
    new_page(&ctx, StatusCode::OK, &f, Some(preview), BTreeMap::new()).await
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
