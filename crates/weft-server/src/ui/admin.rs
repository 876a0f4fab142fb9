//! The tenant admin's pages: list, create, edit and delete the catalog's entities (providers,
//! hardware types, image types, services, cluster and partial templates), plugin resources (upload,
//! stage, recall, sync), catalog import and export, and the host pools (each host-pool provider's
//! hosts and the node that holds each). Every page needs the admin role (403 page
//! otherwise); the API checks again.

use std::collections::BTreeMap;

use axum::extract::{Path, Query};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::html::{enc, field_of};
use super::session::Ctx;
use crate::auth::Role;
use crate::state::AppState;

type Page = Result<Response, Response>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui/admin/plugins", get(plugins))
        .route("/ui/admin/plugins/action", post(plugin_action))
        .route("/ui/admin/catalog", get(import_export).post(import))
        .route("/ui/admin/catalog/export", get(export))
        .route("/ui/admin/hostpools", get(hostpools))
        .route("/ui/admin/{kind}/{name}/json", get(json_form))
        .route("/ui/admin/{kind}", get(list))
        .route("/ui/admin/{kind}/new", get(new_form).post(save_new))
        .route("/ui/admin/{kind}/{name}", get(edit_form).post(save_edit))
        .route("/ui/admin/{kind}/{name}/delete", post(delete))
}

/// How a form field is edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Text,
    Json,
    Check,
}

struct Kind {
    path: &'static str,
    label: &'static str,
    plural: &'static str,
    fields: &'static [(&'static str, &'static str, Input, &'static str)],
}

const NAME: (&str, &str, Input, &str) = (
    "name",
    "Name",
    Input::Text,
    "letters, digits, '_', '.' and '-'",
);
const DESC: (&str, &str, Input, &str) = ("description", "Description", Input::Text, "");

const KINDS: [Kind; 6] = [
    Kind {
        path: "providers",
        label: "provider",
        plural: "Providers",
        fields: &[
            NAME,
            DESC,
            (
                "providertype",
                "Provider type",
                Input::Text,
                "a provider plugin, e.g. local",
            ),
            (
                "provisioner",
                "Provisioner fields (JSON)",
                Input::Json,
                "the provider type's admin fields",
            ),
            (
                "currency",
                "Currency",
                Input::Text,
                "of its machines' prices (ISO 4217, e.g. USD); empty: no cost estimates",
            ),
            (
                "priceMultiplier",
                "Price multiplier",
                Input::Text,
                "a factor on every price, e.g. 0.8 for a 20% discount; empty: 1",
            ),
        ],
    },
    Kind {
        path: "hardwaretypes",
        label: "hardware type",
        plural: "Hardware types",
        fields: &[
            NAME,
            DESC,
            (
                "providermap",
                "Provider map (JSON)",
                Input::Json,
                "{\"<provider>\": {\"flavor\": \"...\", \"price\": \"0.0416\"}} (price per hour, optional)",
            ),
        ],
    },
    Kind {
        path: "imagetypes",
        label: "image type",
        plural: "Image types",
        fields: &[
            NAME,
            DESC,
            (
                "providermap",
                "Provider map (JSON)",
                Input::Json,
                "{\"<provider>\": {\"image\": \"...\", \"sshuser\": \"...\", \"price\": \"0.01\"}} (licence per hour, optional)",
            ),
        ],
    },
    Kind {
        path: "services",
        label: "service",
        plural: "Services",
        fields: &[
            NAME,
            DESC,
            (
                "dependencies",
                "Dependencies (JSON)",
                Input::Json,
                "provides, conflicts, install and runtime requires/uses",
            ),
            (
                "provisioner",
                "Actions (JSON)",
                Input::Json,
                "{\"actions\": {\"install\": {\"type\": \"shell\", \"fields\": {...}}}}",
            ),
        ],
    },
    Kind {
        path: "clustertemplates",
        label: "cluster template",
        plural: "Cluster templates",
        fields: &[
            NAME,
            DESC,
            (
                "includes",
                "Included partial templates (JSON)",
                Input::Json,
                "[{\"name\": \"...\"}]",
            ),
            (
                "compatibility",
                "Compatibility (JSON)",
                Input::Json,
                "services, hardwaretypes, imagetypes",
            ),
            (
                "defaults",
                "Defaults (JSON)",
                Input::Json,
                "services, provider, hardwaretype, imagetype, config",
            ),
            (
                "constraints",
                "Constraints (JSON)",
                Input::Json,
                "layout, services, size",
            ),
            (
                "administration",
                "Administration: lease (JSON)",
                Input::Json,
                "{\"leaseduration\": {\"initial\": ms, \"max\": ms, \"step\": ms}}",
            ),
            (
                "links",
                "Links (JSON)",
                Input::Json,
                "[{\"label\": ..., \"url\": ...}]",
            ),
        ],
    },
    Kind {
        path: "partialtemplates",
        label: "partial template",
        plural: "Partial templates",
        fields: &[
            NAME,
            DESC,
            (
                "immutable",
                "Immutable",
                Input::Check,
                "templates that include it may not override it",
            ),
            ("compatibility", "Compatibility (JSON)", Input::Json, ""),
            ("defaults", "Defaults (JSON)", Input::Json, ""),
            ("constraints", "Constraints (JSON)", Input::Json, ""),
        ],
    },
];

// The error is the page to answer, handed straight back to axum.
#[allow(clippy::result_large_err)]
fn kind_of(ctx: &Ctx, path: &str) -> Result<&'static Kind, Response> {
    KINDS
        .iter()
        .find(|k| k.path == path)
        .ok_or_else(|| ctx.error_page(StatusCode::NOT_FOUND, &format!("no such page: {path}")))
}

#[derive(Debug, Deserialize, Default)]
struct Notice {
    notice: Option<String>,
    error: Option<String>,
}

async fn list(ctx: Ctx, Path(kind): Path<String>, Query(n): Query<Notice>) -> Page {
    ctx.require(Role::Admin)?;
    let k = kind_of(&ctx, &kind)?;
    let items: Vec<Value> = ctx.get_json(&format!("/v2/{}", k.path)).await?;
    Ok(ctx.page(
        "entities.html",
        k.plural,
        k.path,
        json!({"kind": k.path, "label": k.label, "plural": k.plural, "items": items,
               "notice": n.notice, "error": n.error}),
    ))
}

/// The form's fields with their values taken from an entity's JSON.
fn fields_from(k: &Kind, v: &Value) -> (Vec<Value>, String) {
    let mut rest = v.as_object().cloned().unwrap_or_default();
    rest.remove("version");
    let fields = k
        .fields
        .iter()
        .map(|(key, label, input, hint)| {
            let val = rest.remove(*key).unwrap_or(Value::Null);
            let text = match (input, &val) {
                (_, Value::Null) => String::new(),
                (Input::Text, Value::String(s)) => s.clone(),
                (Input::Check, b) => {
                    if b.as_bool().unwrap_or(false) {
                        "on".into()
                    } else {
                        String::new()
                    }
                }
                (_, other) => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            field_json(key, label, *input, hint, &text)
        })
        .collect();
    let extra = if rest.is_empty() {
        String::new()
    } else {
        Value::Object(rest).to_string()
    };
    (fields, extra)
}

fn field_json(key: &str, label: &str, input: Input, hint: &str, value: &str) -> Value {
    json!({"key": key, "label": label, "hint": hint, "value": value,
           "input": match input { Input::Text => "text", Input::Json => "json", Input::Check => "check" }})
}

/// The entity JSON a submitted form describes; an error names the field.
fn entity_from(k: &Kind, form: &BTreeMap<String, String>) -> Result<Value, (String, String)> {
    let mut out: Map<String, Value> = match form.get("_extra").map(|s| s.trim()) {
        Some(s) if !s.is_empty() => serde_json::from_str(s).unwrap_or_default(),
        _ => Map::new(),
    };
    for (key, _, input, _) in k.fields {
        let raw = form.get(*key).map(|s| s.trim()).unwrap_or("");
        match input {
            Input::Text => {
                if !raw.is_empty() || *key == "name" {
                    out.insert(key.to_string(), json!(raw));
                }
            }
            Input::Check => {
                out.insert(key.to_string(), json!(!raw.is_empty()));
            }
            Input::Json => {
                if !raw.is_empty() {
                    let v: Value = serde_json::from_str(raw)
                        .map_err(|e| (key.to_string(), format!("{key} is not valid JSON: {e}")))?;
                    out.insert(key.to_string(), v);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

fn form_page(
    ctx: &Ctx,
    status: StatusCode,
    k: &Kind,
    editing: Option<&str>,
    fields: Vec<Value>,
    extra: &str,
    errors: BTreeMap<String, String>,
) -> Response {
    let title = match editing {
        Some(n) => format!("Edit {} {n}", k.label),
        None => format!("New {}", k.label),
    };
    ctx.page_status(
        status,
        "entity_form.html",
        &title,
        k.path,
        json!({"kind": k.path, "label": k.label, "plural": k.plural, "editing": editing,
               "fields": fields, "extra": extra, "errors": errors}),
    )
}

async fn new_form(ctx: Ctx, Path(kind): Path<String>) -> Page {
    ctx.require(Role::Admin)?;
    let k = kind_of(&ctx, &kind)?;
    let (fields, extra) = fields_from(k, &json!({}));
    Ok(form_page(
        &ctx,
        StatusCode::OK,
        k,
        None,
        fields,
        &extra,
        BTreeMap::new(),
    ))
}

async fn edit_form(ctx: Ctx, Path((kind, name)): Path<(String, String)>) -> Page {
    ctx.require(Role::Admin)?;
    let k = kind_of(&ctx, &kind)?;
    let v: Value = ctx
        .get_json(&format!("/v2/{}/{}", k.path, enc(&name)))
        .await?;
    let (fields, extra) = fields_from(k, &v);
    Ok(form_page(
        &ctx,
        StatusCode::OK,
        k,
        Some(&name),
        fields,
        &extra,
        BTreeMap::new(),
    ))
}

/// The JSON form of an entity (`new` for a new one): the second tab of the structured editors.
async fn json_form(ctx: Ctx, Path((kind, name)): Path<(String, String)>) -> Page {
    if name == "new" {
        new_form(ctx, Path(kind)).await
    } else {
        edit_form(ctx, Path((kind, name))).await
    }
}

/// Saves an entity from the JSON form (also the structured editors' second tab).
pub(super) async fn save(
    ctx: Ctx,
    kind: String,
    name: Option<String>,
    form: BTreeMap<String, String>,
) -> Page {
    ctx.require(Role::Admin)?;
    let k = kind_of(&ctx, &kind)?;
    let refill = |errors: BTreeMap<String, String>| {
        let fields = k
            .fields
            .iter()
            .map(|(key, label, input, hint)| {
                field_json(
                    key,
                    label,
                    *input,
                    hint,
                    form.get(*key).map(String::as_str).unwrap_or(""),
                )
            })
            .collect();
        let extra = form.get("_extra").cloned().unwrap_or_default();
        form_page(
            &ctx,
            StatusCode::BAD_REQUEST,
            k,
            name.as_deref(),
            fields,
            &extra,
            errors,
        )
    };
    let body = match entity_from(k, &form) {
        Ok(b) => b,
        Err((field, m)) => return Ok(refill(BTreeMap::from([(field, m)]))),
    };
    let r = match &name {
        None => {
            ctx.api(
                Method::POST,
                &format!("/v2/{}", k.path),
                Some(body.to_string()),
            )
            .await
        }
        Some(n) => {
            ctx.api(
                Method::PUT,
                &format!("/v2/{}/{}", k.path, enc(n)),
                Some(body.to_string()),
            )
            .await
        }
    };
    if !r.ok() {
        let m = r.message();
        let keys: Vec<&str> = k.fields.iter().map(|f| f.0).collect();
        let at = field_of(&m, &keys).unwrap_or("form").to_string();
        return Ok(refill(BTreeMap::from([(at, m)])));
    }
    let saved = body["name"].as_str().unwrap_or_default();
    Ok(Redirect::to(&format!(
        "/ui/admin/{}?notice={}",
        k.path,
        enc(&saved_notice(k.label, saved, &r))
    ))
    .into_response())
}

/// "Service web saved", and what the catalog lacks for it or it may not mean.
fn saved_notice(label: &str, name: &str, r: &super::session::ApiResp) -> String {
    let answer: weft_model::CatalogWriteAnswer =
        serde_json::from_slice(&r.body).unwrap_or_default();
    if answer.warnings.is_empty() {
        return format!("{label} {name} saved");
    }
    let items: Vec<String> = answer
        .warnings
        .iter()
        .map(|w| format!("{}: {}", w.field, w.message))
        .collect();
    format!("{label} {name} saved, with warnings: {}", items.join("; "))
}

async fn save_new(
    ctx: Ctx,
    Path(kind): Path<String>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Page {
    save(ctx, kind, None, form).await
}

async fn save_edit(
    ctx: Ctx,
    Path((kind, name)): Path<(String, String)>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Page {
    save(ctx, kind, Some(name), form).await
}

async fn delete(ctx: Ctx, Path((kind, name)): Path<(String, String)>) -> Page {
    ctx.require(Role::Admin)?;
    let k = kind_of(&ctx, &kind)?;
    let r = ctx
        .api(
            Method::DELETE,
            &format!("/v2/{}/{}", k.path, enc(&name)),
            None,
        )
        .await;
    let (key, m) = if r.ok() {
        ("notice", format!("{} {name} deleted", k.label))
    } else {
        ("error", r.message())
    };
    Ok(Redirect::to(&format!("/ui/admin/{}?{key}={}", k.path, enc(&m))).into_response())
}

async fn plugins(ctx: Ctx, Query(n): Query<Notice>) -> Page {
    ctx.require(Role::Admin)?;
    let mut types = Vec::new();
    for ptype in ["providertypes", "automatortypes"] {
        let items: Vec<Value> = ctx.get_json(&format!("/v2/plugins/{ptype}")).await?;
        for t in items {
            let name = t["name"].as_str().unwrap_or_default().to_string();
            let mut rtypes = Vec::new();
            for rtype in t["resourceTypes"]
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                let r = ctx
                    .get(&format!(
                        "/v2/plugins/{ptype}/{}/{}",
                        enc(&name),
                        enc(&rtype)
                    ))
                    .await;
                rtypes.push(json!({"name": rtype, "resources": r.value()}));
            }
            types.push(json!({"ptype": ptype, "name": name, "description": t["description"], "rtypes": rtypes}));
        }
    }
    Ok(ctx.page(
        "plugins.html",
        "Plugin resources",
        "plugins",
        json!({"types": types, "notice": n.notice, "error": n.error}),
    ))
}

#[derive(Debug, Deserialize)]
struct PluginAction {
    op: String,
    #[serde(default)]
    ptype: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    rtype: String,
    #[serde(default)]
    rname: String,
    #[serde(default)]
    version: String,
}

async fn plugin_action(ctx: Ctx, Form(f): Form<PluginAction>) -> Page {
    ctx.require(Role::Admin)?;
    let base = format!(
        "/v2/plugins/{}/{}/{}/{}",
        enc(&f.ptype),
        enc(&f.name),
        enc(&f.rtype),
        enc(&f.rname)
    );
    let (method, path) = match f.op.as_str() {
        "sync" => (Method::POST, "/v2/plugins/sync".to_string()),
        "stage" | "recall" => (
            Method::POST,
            format!("{base}/versions/{}/{}", enc(&f.version), f.op),
        ),
        "delete" => (
            Method::DELETE,
            format!("{base}/versions/{}", enc(&f.version)),
        ),
        other => {
            return Err(ctx.error_page(StatusCode::BAD_REQUEST, &format!("unknown action {other}")))
        }
    };
    let r = ctx.api(method, &path, None).await;
    let (key, m) = if r.ok() {
        ("notice", format!("{} done", f.op))
    } else {
        ("error", r.message())
    };
    Ok(Redirect::to(&format!("/ui/admin/plugins?{key}={}", enc(&m))).into_response())
}

async fn import_export(ctx: Ctx, Query(n): Query<Notice>) -> Page {
    ctx.require(Role::Admin)?;
    Ok(ctx.page(
        "import_export.html",
        "Import and export",
        "catalog-io",
        json!({"notice": n.notice, "error": n.error, "catalog": ""}),
    ))
}

#[derive(Debug, Deserialize)]
struct ImportForm {
    #[serde(default)]
    catalog: String,
}

async fn import(ctx: Ctx, Form(f): Form<ImportForm>) -> Page {
    ctx.require(Role::Admin)?;
    let r = ctx
        .api(Method::POST, "/v2/import", Some(f.catalog.clone()))
        .await;
    if r.ok() {
        return Ok(Redirect::to(&format!(
            "/ui/admin/catalog?notice={}",
            enc("catalog imported")
        ))
        .into_response());
    }
    Ok(ctx.page_status(
        StatusCode::BAD_REQUEST,
        "import_export.html",
        "Import and export",
        "catalog-io",
        json!({"error": r.message(), "catalog": f.catalog}),
    ))
}

async fn export(ctx: Ctx) -> Page {
    ctx.require(Role::Admin)?;
    let r = ctx.get("/v2/export").await;
    if !r.ok() {
        return Err(ctx.error_page(r.status, &r.message()));
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"{}-catalog.json\"",
                    ctx.who.tenant.spec.name
                ),
            ),
        ],
        r.body,
    )
        .into_response())
}

/// The hosts of every host-pool provider, each with the cluster and node that hold it.
async fn hostpools(ctx: Ctx) -> Page {
    ctx.require(Role::Admin)?;
    let providers: Vec<Value> = ctx.get_json("/v2/providers").await?;
    let nodes: Vec<Value> = ctx.get_json("/v2/nodes").await.unwrap_or_default();
    let hostname = |id: &Value| {
        nodes
            .iter()
            .find(|n| n["id"] == *id)
            .and_then(|n| n["properties"]["hostname"].as_str())
            .map(String::from)
    };
    let mut pools = Vec::new();
    for p in providers
        .iter()
        .filter(|p| p["providertype"] == weft_model::hostpool::HOSTPOOL)
    {
        let name = p["name"].as_str().unwrap_or_default();
        let mut hosts: Vec<Value> = ctx
            .get_json(&format!("/v2/providers/{}/hosts", enc(name)))
            .await?;
        for h in &mut hosts {
            if let Some(n) = hostname(&h["nodeId"]) {
                h["nodeHostname"] = json!(n);
            }
        }
        pools.push(json!({"provider": name, "hosts": hosts}));
    }
    Ok(ctx.page(
        "hostpools.html",
        "Host pools",
        "hostpools",
        json!({"pools": pools}),
    ))
}
