//! The admin's structured editors: cluster templates (compatibility pick lists, defaults, size,
//! per-service constraints, must/can't coexist groups, lease) with a live solve preview, and
//! services (a dependency table; each action's automator type with the fields its plugin type
//! declares). JSON editing stays a second tab (the generic form of `admin`).
//!
//! Form field names carry structure with `:` (names of entities cannot contain one):
//! `compat:hw:<type>`, `c:<service>:min`, `must:<group>:<service>`, `dep:runtime.requires:<service>`,
//! `act:<action>:type`, `act:<action>:<automator>:<field>`. [`template_from_form`] and
//! [`service_from_form`] turn a submitted form into the entity's JSON, keeping every field the
//! editor does not show (from the hidden `_base`); they are pure and unit-tested.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::Path;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde_json::{json, Map, Value};

use super::html::{enc, field_of, links_from_rows, object_from_rows, value_rows};
use super::session::Ctx;
use crate::auth::Role;
use crate::state::AppState;

/// The structured editors' pages (the generic admin forms are `admin::routes`).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/ui/admin/clustertemplates/new",
            get(template_new).post(template_save_new),
        )
        .route(
            "/ui/admin/clustertemplates/{name}",
            get(template_edit).post(template_save_edit),
        )
        .route("/ui/admin/solve-preview", post(template_preview))
        .route(
            "/ui/admin/services/new",
            get(service_new).post(service_save_new),
        )
        .route(
            "/ui/admin/services/{name}",
            get(service_edit).post(service_save_edit),
        )
}

type Page = Result<Response, Response>;
type FormMap = BTreeMap<String, String>;

/// The service actions an automator runs.
const SERVICE_ACTIONS: [&str; 7] = [
    "install",
    "configure",
    "initialize",
    "start",
    "stop",
    "remove",
    "healthcheck",
];

/// A health check's settings beside its automator fields.
const HEALTH_SETTINGS: [&str; 3] = ["timeout", "tries", "interval"];

/// The dependency classes of the dependency table, as `dependencies` paths.
const DEP_CLASSES: [&str; 5] = [
    "install.requires",
    "install.uses",
    "runtime.requires",
    "runtime.uses",
    "conflicts",
];

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// The names after `prefix` of the checked boxes `prefix<name>`, sorted.
fn checked(form: &FormMap, prefix: &str) -> Vec<String> {
    form.keys()
        .filter_map(|k| k.strip_prefix(prefix))
        .filter(|n| !n.is_empty() && !n.contains(':'))
        .map(String::from)
        .collect()
}

fn text<'a>(form: &'a FormMap, key: &str) -> &'a str {
    form.get(key).map(|s| s.trim()).unwrap_or_default()
}

/// A whole number field; empty is `None`.
fn number(form: &FormMap, key: &str, label: &str) -> Result<Option<u64>, (String, String)> {
    let t = text(form, key);
    if t.is_empty() {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| (key.to_string(), format!("{label} must be a whole number")))
}

/// The base JSON a form edits (`_base`), as an object.
fn base(form: &FormMap) -> Map<String, Value> {
    serde_json::from_str(text(form, "_base")).unwrap_or_default()
}

/// The object at `key` of `m` (empty when absent or not an object).
fn object_at(m: &Map<String, Value>, key: &str) -> Map<String, Value> {
    m.get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Groups `prefix<i>:<service>` of checked boxes, each with two members or more.
fn groups(form: &FormMap, prefix: &str) -> Vec<Vec<String>> {
    let mut by: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for k in form.keys() {
        if let Some((i, s)) = k.strip_prefix(prefix).and_then(|r| r.split_once(':')) {
            if let Ok(i) = i.parse() {
                by.entry(i).or_default().insert(s.to_string());
            }
        }
    }
    by.into_values()
        .filter(|g| g.len() >= 2)
        .map(|g| g.into_iter().collect())
        .collect()
}

/// The cluster template a template editor form describes; an error names the form field.
pub(super) fn template_from_form(form: &FormMap) -> Result<Value, (String, String)> {
    let mut t = base(form);
    t.insert("name".into(), json!(text(form, "name")));
    match text(form, "description") {
        "" => t.remove("description"),
        d => t.insert("description".into(), json!(d)),
    };
    t.insert(
        "compatibility".into(),
        json!({
            "hardwaretypes": checked(form, "compat:hw:"),
            "imagetypes": checked(form, "compat:img:"),
            "services": checked(form, "compat:svc:"),
        }),
    );
    let defaults = template_defaults(form, &t)?;
    t.insert("defaults".into(), Value::Object(defaults));
    let links = links_from_rows(form, "link:");
    if !links.is_empty() || t.contains_key("links") {
        t.insert("links".into(), Value::Array(links));
    }
    let constraints = template_constraints(form, &t)?;
    t.insert("constraints".into(), Value::Object(constraints));
    let admin = template_administration(form, &t)?;
    t.insert("administration".into(), Value::Object(admin));
    Ok(Value::Object(t))
}

/// The template's `defaults` from the form, over those of `t` (the base).
fn template_defaults(
    form: &FormMap,
    t: &Map<String, Value>,
) -> Result<Map<String, Value>, (String, String)> {
    let mut defaults = t
        .get("defaults")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    defaults.insert("services".into(), json!(checked(form, "def:svc:")));
    for key in ["provider", "hardwaretype", "imagetype"] {
        match text(form, &format!("def:{key}")) {
            "" => defaults.remove(key),
            v => defaults.insert(key.into(), json!(v)),
        };
    }
    let config = object_from_rows(form, "cfg:").map_err(|m| ("defaults".to_string(), m))?;
    if config.as_object().is_some_and(|c| !c.is_empty()) || defaults.contains_key("config") {
        defaults.insert("config".into(), config);
    }
    match text(form, "def:dnsSuffix").trim() {
        "" => defaults.remove("dnsSuffix"),
        d => defaults.insert("dnsSuffix".into(), json!(d)),
    };
    Ok(defaults)
}

/// The template's `constraints` (size, per service, layout) from the form, over those of `t`.
fn template_constraints(
    form: &FormMap,
    t: &Map<String, Value>,
) -> Result<Map<String, Value>, (String, String)> {
    let min = number(form, "size:min", "the smallest size")?.unwrap_or(1);
    let max = number(form, "size:max", "the largest size")?.unwrap_or(weft_model::UNBOUNDED);
    let services = service_constraints(form)?;
    let mut constraints = object_at(t, "constraints");
    constraints.insert("size".into(), json!({"min": min, "max": max}));
    constraints.insert("services".into(), Value::Object(services));
    let mut layout = object_at(&Map::from_iter(constraints.clone()), "layout");
    layout.insert("mustcoexist".into(), json!(groups(form, "must:")));
    layout.insert("cantcoexist".into(), json!(groups(form, "cant:")));
    constraints.insert("layout".into(), Value::Object(layout));
    Ok(constraints)
}

/// The per-service constraints of the form's `c:<service>:...` fields, for each service that
/// has any.
fn service_constraints(form: &FormMap) -> Result<Map<String, Value>, (String, String)> {
    let mut services = Map::new();
    let constrained: BTreeSet<&str> = form
        .keys()
        .filter_map(|k| k.strip_prefix("c:"))
        .filter_map(|r| r.split_once(':').map(|(s, _)| s))
        .collect();
    for s in constrained {
        let smin = number(form, &format!("c:{s}:min"), &format!("{s}'s minimum"))?;
        let smax = number(form, &format!("c:{s}:max"), &format!("{s}'s maximum"))?;
        let hw = checked(form, &format!("c:{s}:hw:"));
        let img = checked(form, &format!("c:{s}:img:"));
        if smin.is_none() && smax.is_none() && hw.is_empty() && img.is_empty() {
            continue;
        }
        let mut c = Map::new();
        if !hw.is_empty() {
            c.insert("hardwaretypes".into(), json!(hw));
        }
        if !img.is_empty() {
            c.insert("imagetypes".into(), json!(img));
        }
        if smin.is_some() || smax.is_some() {
            c.insert(
                "quantities".into(),
                json!({"min": smin.unwrap_or(0), "max": smax.unwrap_or(weft_model::UNBOUNDED)}),
            );
        }
        services.insert(s.to_string(), Value::Object(c));
    }
    Ok(services)
}

/// The template's `administration` with the form's lease durations, over that of `t`.
fn template_administration(
    form: &FormMap,
    t: &Map<String, Value>,
) -> Result<Map<String, Value>, (String, String)> {
    let mut lease = Map::new();
    for key in ["initial", "max", "step"] {
        let raw = text(form, &format!("lease:{key}"));
        let ms = if raw.is_empty() {
            0
        } else {
            weft_model::lenient::parse_duration_ms(raw)
                .map_err(|e| (format!("lease:{key}"), format!("lease {key}: {e}")))?
        };
        lease.insert(key.into(), json!(ms));
    }
    // Administration keeps what the editor does not show (a rollout policy, say).
    let mut admin = object_at(t, "administration");
    admin.insert("leaseduration".into(), Value::Object(lease));
    Ok(admin)
}

/// A duration in milliseconds as the editor shows it (`48h`, `30m`, `0` for none).
fn duration_text(ms: u64) -> String {
    match ms {
        0 => String::new(),
        ms if ms % 86_400_000 == 0 => format!("{}d", ms / 86_400_000),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => ms.to_string(),
    }
}

/// Sizes with a layout as words: `3 to 61 nodes`, `2 nodes`, `1 to 3 or 5 nodes`.
pub(super) fn sizes_text(ranges: &Value) -> String {
    let parts: Vec<String> = ranges
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r[0].as_u64()?, r[1].as_u64()?)))
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a} to {b}")
            }
        })
        .collect();
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) if last == "1" => "1 node".into(),
        Some((last, [])) => format!("{last} nodes"),
        Some((last, rest)) => format!("{} or {last} nodes", rest.join(", ")),
    }
}

/// What the template editor shows of template `t`.
fn template_view(t: &Value) -> Value {
    let c = &t["constraints"];
    let size_max = c["size"]["max"].as_u64().unwrap_or(weft_model::UNBOUNDED);
    let lease = &t["administration"]["leaseduration"];
    let mut must: Vec<Value> = c["layout"]["mustcoexist"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    must.push(json!([]));
    let mut cant: Vec<Value> = c["layout"]["cantcoexist"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    cant.push(json!([]));
    let q = |s: &Value, k: &str, none: u64| {
        s["quantities"][k]
            .as_u64()
            .filter(|v| *v != none)
            .map(|v| v.to_string())
            .unwrap_or_default()
    };
    let constraints: Map<String, Value> = c["services"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, s)| {
            (
                name.clone(),
                json!({"min": q(s, "min", 0), "max": q(s, "max", weft_model::UNBOUNDED),
                       "hw": s["hardwaretypes"], "img": s["imagetypes"]}),
            )
        })
        .collect();
    json!({
        "size_min": c["size"]["min"].as_u64().unwrap_or(1),
        "size_max": if size_max >= weft_model::UNBOUNDED { String::new() } else { size_max.to_string() },
        "lease": {
            "initial": duration_text(lease["initial"].as_u64().unwrap_or(0)),
            "max": duration_text(lease["max"].as_u64().unwrap_or(0)),
            "step": duration_text(lease["step"].as_u64().unwrap_or(0)),
        },
        "must": must, "cant": cant, "constraints": constraints,
        "config_rows": value_rows(&t["defaults"]["config"]),
    })
}

/// The names of the tenant's entities of each kind the editors pick from.
async fn choices(ctx: &Ctx, kinds: &[&str]) -> Result<Map<String, Value>, Response> {
    let mut out = Map::new();
    for kind in kinds {
        let items: Vec<Value> = ctx.get_json(&format!("/v2/{kind}")).await?;
        let names: Vec<Value> = items.iter().map(|i| i["name"].clone()).collect();
        out.insert(kind.to_string(), Value::Array(names));
    }
    Ok(out)
}

/// The solve preview of a template at `size` nodes on `provider`: what `solve_preview.html` shows
/// (as `p`).
async fn preview_model(ctx: &Ctx, t: &Value, size: &str, provider: &str) -> Value {
    let mut q = json!({"template": t, "sizes": true});
    if let Ok(n) = size.trim().parse::<u64>() {
        q["numMachines"] = json!(n);
    }
    if !provider.is_empty() {
        q["provider"] = json!(provider);
    }
    let r = ctx
        .api(Method::POST, "/v2/solve", Some(q.to_string()))
        .await;
    if r.ok() {
        let v = r.value();
        json!({"ok": true, "sizes": sizes_text(&v["sizes"]["ranges"]), "scanned": v["sizes"]["scanned"],
               "size": v["numMachines"], "layout": v["layout"], "explanation": v["explanation"]})
    } else {
        json!({"ok": false, "error": r.message()})
    }
}

async fn template_page(
    ctx: &Ctx,
    status: StatusCode,
    t: &Value,
    editing: Option<&str>,
    errors: BTreeMap<String, String>,
    preview: (&str, &str),
) -> Page {
    let choices = choices(
        ctx,
        &[
            "providers",
            "hardwaretypes",
            "imagetypes",
            "services",
            "partialtemplates",
        ],
    )
    .await?;
    let provider = if preview.1.is_empty() {
        t["defaults"]["provider"]
            .as_str()
            .or_else(|| choices["providers"][0].as_str())
            .unwrap_or_default()
            .to_string()
    } else {
        preview.1.to_string()
    };
    let size = if preview.0.is_empty() {
        t["constraints"]["size"]["min"]
            .as_u64()
            .unwrap_or(1)
            .max(1)
            .to_string()
    } else {
        preview.0.to_string()
    };
    let preview = preview_model(ctx, t, &size, &provider).await;
    let title = match editing {
        Some(n) => format!("Edit cluster template {n}"),
        None => "New cluster template".into(),
    };
    Ok(ctx.page_status(
        status,
        "template_editor.html",
        &title,
        "clustertemplates",
        json!({"t": t, "v": template_view(t), "choices": choices, "editing": editing,
               "errors": errors, "base": t.to_string(), "preview": preview,
               "preview_size": size, "preview_provider": provider}),
    ))
}

pub(super) async fn template_new(ctx: Ctx) -> Page {
    ctx.require(Role::Admin)?;
    let t = json!({"constraints": {"size": {"min": 1}}});
    template_page(&ctx, StatusCode::OK, &t, None, BTreeMap::new(), ("", "")).await
}

pub(super) async fn template_edit(ctx: Ctx, Path(name): Path<String>) -> Page {
    ctx.require(Role::Admin)?;
    let t: Value = ctx
        .get_json(&format!("/v2/clustertemplates/{}", enc(&name)))
        .await?;
    template_page(
        &ctx,
        StatusCode::OK,
        &t,
        Some(&name),
        BTreeMap::new(),
        ("", ""),
    )
    .await
}

/// The editor's live preview: the form as it stands, solved; answers the HTML fragment.
pub(super) async fn template_preview(ctx: Ctx, Form(form): Form<FormMap>) -> Response {
    if let Err(r) = ctx.require(Role::Admin) {
        return r;
    }
    let p = match template_from_form(&form) {
        Ok(t) => {
            preview_model(
                &ctx,
                &t,
                text(&form, "preview:size"),
                text(&form, "preview:provider"),
            )
            .await
        }
        Err((_, m)) => json!({"ok": false, "error": m}),
    };
    super::html::render(
        &ctx.ui.env,
        StatusCode::OK,
        "solve_preview.html",
        json!({ "p": p }),
    )
}

/// The editor again, with what was submitted and the error at its field.
async fn refill(
    ctx: &Ctx,
    editor: &str,
    body: &Value,
    name: Option<&str>,
    errors: BTreeMap<String, String>,
    preview: (&str, &str),
) -> Page {
    let status = StatusCode::BAD_REQUEST;
    if editor == "template" {
        template_page(ctx, status, body, name, errors, preview).await
    } else {
        service_page(ctx, status, body, name, errors).await
    }
}

/// What to show again after a form that does not parse: the form without the fields at fault
/// (every other edit kept), else the entity as it was.
fn without_bad_fields(form: &FormMap, first: &str, editor: &str) -> Value {
    let mut rest = form.clone();
    let mut bad = first.to_string();
    for _ in 0..16 {
        rest.remove(&bad);
        let built = if editor == "template" {
            template_from_form(&rest)
        } else {
            service_from_form(&rest)
        };
        match built {
            Ok(v) => return v,
            Err((f, _)) => bad = f,
        }
    }
    Value::Object(base(form))
}

/// Saves what an editor (`_editor` = `template` or `service`) or the JSON tab submitted.
async fn save(ctx: Ctx, kind: &str, name: Option<String>, form: FormMap) -> Page {
    ctx.require(Role::Admin)?;
    let editor = text(&form, "_editor").to_string();
    if editor.is_empty() {
        return super::admin::save(ctx, kind.to_string(), name, form).await;
    }
    let built = if editor == "template" {
        template_from_form(&form)
    } else {
        service_from_form(&form)
    };
    let preview = (text(&form, "preview:size"), text(&form, "preview:provider"));
    let body = match built {
        Ok(b) => b,
        Err((field, m)) => {
            let shown = without_bad_fields(&form, &field, &editor);
            let errors = BTreeMap::from([(field, m)]);
            return refill(&ctx, &editor, &shown, name.as_deref(), errors, preview).await;
        }
    };
    let r = match &name {
        None => {
            ctx.api(Method::POST, &format!("/v2/{kind}"), Some(body.to_string()))
                .await
        }
        Some(n) => {
            ctx.api(
                Method::PUT,
                &format!("/v2/{kind}/{}", enc(n)),
                Some(body.to_string()),
            )
            .await
        }
    };
    if !r.ok() {
        let m = r.message();
        let at = field_of(&m, &["name"]).unwrap_or("form").to_string();
        let errors = BTreeMap::from([(at, m)]);
        return refill(&ctx, &editor, &body, name.as_deref(), errors, preview).await;
    }
    let label = if kind == "services" {
        "service"
    } else {
        "cluster template"
    };
    let saved = body["name"].as_str().unwrap_or_default();
    Ok(Redirect::to(&format!(
        "/ui/admin/{kind}?notice={}",
        enc(&format!("{label} {saved} saved"))
    ))
    .into_response())
}

pub(super) async fn template_save_new(ctx: Ctx, Form(form): Form<FormMap>) -> Page {
    save(ctx, "clustertemplates", None, form).await
}

pub(super) async fn template_save_edit(
    ctx: Ctx,
    Path(name): Path<String>,
    Form(form): Form<FormMap>,
) -> Page {
    save(ctx, "clustertemplates", Some(name), form).await
}

/// The service a service editor form describes; an error names the form field.
pub(super) fn service_from_form(form: &FormMap) -> Result<Value, (String, String)> {
    let mut s = base(form);
    s.insert("name".into(), json!(text(form, "name")));
    match text(form, "description") {
        "" => s.remove("description"),
        d => s.insert("description".into(), json!(d)),
    };
    let provides: Vec<&str> = text(form, "provides")
        .split([',', ' '])
        .filter(|p| !p.is_empty())
        .collect();
    let dep = |class: &str| checked(form, &format!("dep:{class}:"));
    s.insert(
        "dependencies".into(),
        json!({
            "provides": provides,
            "conflicts": dep("conflicts"),
            "install": {"requires": dep("install.requires"), "uses": dep("install.uses")},
            "runtime": {"requires": dep("runtime.requires"), "uses": dep("runtime.uses")},
        }),
    );
    let before = object_at(&object_at(&s, "provisioner"), "actions");
    let mut actions = Map::new();
    for action in SERVICE_ACTIONS {
        let kind = text(form, &format!("act:{action}:type"));
        if kind.is_empty() {
            continue;
        }
        let prefix = format!("act:{action}:{kind}:");
        let fields: Map<String, Value> = form
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?, v)))
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        // What the editor does not show of the action stays as it was.
        let mut a = object_at(&before, action);
        a.insert("type".into(), json!(kind));
        a.insert("fields".into(), Value::Object(fields));
        if action == "healthcheck" {
            for key in HEALTH_SETTINGS {
                let field = format!("act:healthcheck:{key}");
                match number(form, &field, &format!("the health check's {key}"))? {
                    Some(n) => a.insert(key.into(), json!(n)),
                    None => a.remove(key),
                };
            }
        }
        actions.insert(action.into(), Value::Object(a));
    }
    let mut provisioner = object_at(&s, "provisioner");
    provisioner.insert("actions".into(), Value::Object(actions));
    s.insert("provisioner".into(), Value::Object(provisioner));
    let links = links_from_rows(form, "link:");
    if !links.is_empty() || s.contains_key("links") {
        s.insert("links".into(), Value::Array(links));
    }
    Ok(Value::Object(s))
}

/// What the service editor shows of service `s` with the automator types `automators`.
fn service_view(s: &Value, automators: &[Value]) -> Value {
    let d = &s["dependencies"];
    let deps: Map<String, Value> = DEP_CLASSES
        .iter()
        .map(|class| {
            let v = match class.split_once('.') {
                Some((a, b)) => &d[a][b],
                None => &d[*class],
            };
            (class.to_string(), json!(names(v)))
        })
        .collect();
    let types: Vec<Value> = automators
        .iter()
        .map(|a| {
            let fields: Vec<Value> = a["parameters"]["admin"]["fields"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, f)| json!({"name": k, "label": f["label"], "tip": f["tip"], "type": f["type"]}))
                .collect();
            json!({"name": a["name"], "fields": fields})
        })
        .collect();
    let actions: Vec<Value> = SERVICE_ACTIONS
        .iter()
        .map(|a| {
            let cur = &s["provisioner"]["actions"][*a];
            let kind = cur["type"].as_str().unwrap_or_default();
            let declared = automators
                .iter()
                .find(|t| t["name"] == kind)
                .map(|t| &t["parameters"]["admin"]["fields"]);
            // Fields the plugin type does not declare stay editable (and saved).
            let extra: Vec<&String> = cur["fields"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .filter(|k| declared.is_none_or(|d| d.get(k.as_str()).is_none()))
                .collect();
            let settings: Map<String, Value> = HEALTH_SETTINGS
                .iter()
                .map(|k| (k.to_string(), cur[*k].clone()))
                .collect();
            json!({"name": a, "type": kind, "fields": cur["fields"], "extra": extra, "settings": settings})
        })
        .collect();
    json!({"deps": deps, "classes": DEP_CLASSES, "types": types, "actions": actions,
           "provides": names(&d["provides"]).join(", ")})
}

async fn service_page(
    ctx: &Ctx,
    status: StatusCode,
    s: &Value,
    editing: Option<&str>,
    errors: BTreeMap<String, String>,
) -> Page {
    let choices = choices(ctx, &["services"]).await?;
    let automators: Vec<Value> = ctx
        .get_json("/v2/plugins/automatortypes")
        .await
        .unwrap_or_default();
    let title = match editing {
        Some(n) => format!("Edit service {n}"),
        None => "New service".into(),
    };
    Ok(ctx.page_status(
        status,
        "service_editor.html",
        &title,
        "services",
        json!({"s": s, "v": service_view(s, &automators), "choices": choices,
               "editing": editing, "errors": errors, "base": s.to_string()}),
    ))
}

pub(super) async fn service_new(ctx: Ctx) -> Page {
    ctx.require(Role::Admin)?;
    service_page(&ctx, StatusCode::OK, &json!({}), None, BTreeMap::new()).await
}

pub(super) async fn service_edit(ctx: Ctx, Path(name): Path<String>) -> Page {
    ctx.require(Role::Admin)?;
    let s: Value = ctx
        .get_json(&format!("/v2/services/{}", enc(&name)))
        .await?;
    service_page(&ctx, StatusCode::OK, &s, Some(&name), BTreeMap::new()).await
}

pub(super) async fn service_save_new(ctx: Ctx, Form(form): Form<FormMap>) -> Page {
    save(ctx, "services", None, form).await
}

pub(super) async fn service_save_edit(
    ctx: Ctx,
    Path(name): Path<String>,
    Form(form): Form<FormMap>,
) -> Page {
    save(ctx, "services", Some(name), form).await
}

// A test reads as one scenario; short functions (docs/dev/style.md) are for the crates' code.
#[allow(clippy::too_many_lines)]
#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> FormMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_template_form_becomes_a_template() {
        let f = form(&[
            (
                "_base",
                r#"{"links": [{"label": "x", "url": "y"}], "defaults": {"config": {"a": 1}},
                    "administration": {"rollout": {"canaries": 1}}, "label": "Web"}"#,
            ),
            ("name", "web"),
            ("link:label0", "x"),
            ("link:url0", "http://%ip.service.web%/"),
            ("link:label1", ""),
            ("link:url1", ""),
            ("cfg:k0", "a"),
            ("cfg:v0", "{\"n\": [1, \"2\"]}"),
            ("cfg:t0", "json"),
            ("cfg:k1", "port"),
            ("cfg:v1", "8080"),
            ("cfg:t1", "string"),
            ("def:dnsSuffix", "example.internal"),
            ("compat:hw:small", "on"),
            ("compat:svc:base", "on"),
            ("compat:svc:web", "on"),
            ("def:svc:web", "on"),
            ("def:provider", "local"),
            ("def:imagetype", ""),
            ("size:min", "3"),
            ("size:max", ""),
            ("c:web:min", ""),
            ("c:web:max", "2"),
            ("c:web:hw:small", "on"),
            ("c:base:min", ""),
            ("c:base:max", ""),
            ("must:0:base", "on"),
            ("must:0:web", "on"),
            ("must:1:base", "on"),
            ("lease:initial", "24h"),
            ("lease:max", ""),
            ("lease:step", ""),
        ]);
        let t = template_from_form(&f).unwrap();
        assert_eq!(t["label"], "Web", "fields the editor hides are kept");
        assert_eq!(t["administration"]["rollout"], json!({"canaries": 1}));
        assert_eq!(
            t["links"],
            json!([{"label": "x", "url": "http://%ip.service.web%/"}])
        );
        assert_eq!(
            t["defaults"],
            json!({"config": {"a": {"n": [1, "2"]}, "port": "8080"}, "services": ["web"],
                   "provider": "local", "dnsSuffix": "example.internal"})
        );
        assert_eq!(t["compatibility"]["services"], json!(["base", "web"]));
        assert_eq!(
            t["constraints"]["size"],
            json!({"min": 3, "max": 2_147_483_647u64})
        );
        assert_eq!(
            t["constraints"]["services"],
            json!({"web": {"hardwaretypes": ["small"], "quantities": {"min": 0, "max": 2}}})
        );
        assert_eq!(
            t["constraints"]["layout"]["mustcoexist"],
            json!([["base", "web"]])
        );
        assert_eq!(t["administration"]["leaseduration"]["initial"], 86_400_000);
        let bad = form(&[
            ("name", "t"),
            ("size:min", "three"),
            ("lease:max", "soon"),
            ("size:max", "4"),
        ]);
        assert_eq!(template_from_form(&bad).unwrap_err().0, "size:min");
        let shown = without_bad_fields(&bad, "size:min", "template");
        assert_eq!(
            shown["constraints"]["size"],
            json!({"min": 1, "max": 4}),
            "other edits kept"
        );
        // What the form shows reads back the same.
        let v = template_view(&t);
        assert_eq!(v["size_max"], "");
        assert_eq!(v["lease"]["initial"], "1d");
        assert_eq!(v["constraints"]["web"]["max"], "2");
    }

    #[test]
    fn a_service_form_becomes_a_service() {
        let f = form(&[
            ("name", "web"),
            ("provides", "http, www"),
            ("dep:runtime.requires:base", "on"),
            ("dep:conflicts:apache", "on"),
            ("act:install:type", "shell"),
            ("act:install:shell:script", "install.sh"),
            ("act:install:chef:recipe", "ignored: not the chosen type"),
            ("act:start:type", ""),
        ]);
        let s = service_from_form(&f).unwrap();
        assert_eq!(s["dependencies"]["provides"], json!(["http", "www"]));
        assert_eq!(s["dependencies"]["runtime"]["requires"], json!(["base"]));
        assert_eq!(s["dependencies"]["conflicts"], json!(["apache"]));
        assert_eq!(
            s["provisioner"]["actions"],
            json!({"install": {"type": "shell", "fields": {"script": "install.sh"}}})
        );
        let v = service_view(&s, &[]);
        assert_eq!(v["deps"]["runtime.requires"], json!(["base"]));
        assert_eq!(v["actions"][0]["type"], "shell");
        // A health check with its settings, and links.
        let f = form(&[
            (
                "_base",
                r#"{"provisioner": {"actions": {"healthcheck": {"type": "shell", "fields": {"script": "old.sh"}, "future": 1}}}}"#,
            ),
            ("name", "web"),
            ("act:healthcheck:type", "shell"),
            ("act:healthcheck:shell:script", "check.sh"),
            ("act:healthcheck:timeout", "10"),
            ("act:healthcheck:tries", ""),
            ("act:healthcheck:interval", "0"),
            ("link:label0", "status"),
            ("link:url0", "http://%ip.self%/status"),
        ]);
        let s = service_from_form(&f).unwrap();
        assert_eq!(
            s["provisioner"]["actions"]["healthcheck"],
            json!({"type": "shell", "fields": {"script": "check.sh"}, "future": 1, "timeout": 10, "interval": 0})
        );
        assert_eq!(
            s["links"],
            json!([{"label": "status", "url": "http://%ip.self%/status"}])
        );
        let bad = form(&[
            ("act:healthcheck:type", "shell"),
            ("act:healthcheck:tries", "many"),
        ]);
        assert_eq!(
            service_from_form(&bad).unwrap_err().0,
            "act:healthcheck:tries"
        );
    }

    #[test]
    fn sizes_read_as_words() {
        assert_eq!(sizes_text(&json!([[3, 61]])), "3 to 61 nodes");
        assert_eq!(sizes_text(&json!([[1, 1]])), "1 node");
        assert_eq!(sizes_text(&json!([[1, 3], [5, 5]])), "1 to 3 or 5 nodes");
        assert_eq!(sizes_text(&json!([])), "");
    }
}
