//! The superadmin's pages: tenants (workers and quotas), provisioners (capacity, usage, last
//! heartbeat), API keys (made, listed, revoked; a secret shown once) and queue metrics.

use axum::extract::{Path, Query};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::html::enc;
use super::session::Ctx;
use crate::auth::Role;
use crate::state::AppState;

type Page = Result<Response, Response>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui/super/tenants", get(tenants).post(save_tenant))
        .route("/ui/super/tenants/{name}/delete", post(delete_tenant))
        .route("/ui/super/provisioners", get(provisioners))
        .route("/ui/super/metrics", get(metrics))
        .route("/ui/super/apikeys", get(apikeys).post(make_apikey))
        .route("/ui/super/apikeys/{id}/delete", post(revoke_apikey))
}

#[derive(Debug, Deserialize, Default)]
struct Notice {
    notice: Option<String>,
    error: Option<String>,
    edit: Option<String>,
}

async fn tenants_page(ctx: &Ctx, status: StatusCode, n: Notice, form: Value) -> Page {
    let tenants: Vec<Value> = ctx.get_json("/v2/tenants").await?;
    let form = match (&n.edit, form.is_null()) {
        (Some(name), true) => tenants
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .map(|t| json!({"name": t["name"], "description": t["description"], "workers": t["workers"],
                            "maxClusters": t["maxClusters"], "maxNodes": t["maxNodes"],
                            "maxCostPerHour": t["maxCostPerHour"], "checkInterval": t["checkInterval"], "editing": true}))
            .unwrap_or(Value::Null),
        _ => form,
    };
    Ok(ctx.page_status(
        status,
        "tenants.html",
        "Tenants",
        "tenants",
        json!({"tenants": tenants, "notice": n.notice, "error": n.error, "form": form}),
    ))
}

async fn tenants(ctx: Ctx, Query(n): Query<Notice>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    tenants_page(&ctx, StatusCode::OK, n, Value::Null).await
}

#[derive(Debug, Deserialize, serde::Serialize)]
struct TenantForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    workers: String,
    #[serde(default, rename = "maxClusters")]
    max_clusters: String,
    #[serde(default, rename = "maxNodes")]
    max_nodes: String,
    #[serde(default, rename = "maxCostPerHour")]
    max_cost_per_hour: String,
    #[serde(default, rename = "checkInterval")]
    check_interval: String,
    #[serde(default)]
    editing: Option<String>,
}

async fn save_tenant(ctx: Ctx, Form(f): Form<TenantForm>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let mut spec = json!({"name": f.name.trim(), "workers": f.workers.trim()});
    if !f.description.trim().is_empty() {
        spec["description"] = json!(f.description.trim());
    }
    let limits = [
        ("maxClusters", &f.max_clusters),
        ("maxNodes", &f.max_nodes),
        ("maxCostPerHour", &f.max_cost_per_hour),
        ("checkInterval", &f.check_interval),
    ];
    for (k, v) in limits {
        if !v.trim().is_empty() {
            spec[k] = json!(v.trim());
        }
    }
    let body = json!({"tenant": spec}).to_string();
    let r = if f.editing.is_some() {
        ctx.api(
            Method::PUT,
            &format!("/v2/tenants/{}", enc(f.name.trim())),
            Some(body),
        )
        .await
    } else {
        ctx.api(Method::POST, "/v2/tenants", Some(body)).await
    };
    if r.ok() {
        let m = format!("tenant {} saved", f.name.trim());
        return Ok(Redirect::to(&format!("/ui/super/tenants?notice={}", enc(&m))).into_response());
    }
    let n = Notice {
        error: Some(r.message()),
        ..Default::default()
    };
    tenants_page(
        &ctx,
        StatusCode::BAD_REQUEST,
        n,
        serde_json::to_value(&f).unwrap_or_default(),
    )
    .await
}

async fn delete_tenant(ctx: Ctx, Path(name): Path<String>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let r = ctx
        .api(Method::DELETE, &format!("/v2/tenants/{}", enc(&name)), None)
        .await;
    let (k, m) = if r.ok() {
        ("notice", format!("tenant {name} deleted"))
    } else {
        ("error", r.message())
    };
    Ok(Redirect::to(&format!("/ui/super/tenants?{k}={}", enc(&m))).into_response())
}

async fn provisioners(ctx: Ctx) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let mut list: Vec<Value> = ctx.get_json("/v2/provisioners").await?;
    // The last heartbeat is not part of the API's view.
    let beats = weft_engine::provisioners::heartbeats(&ctx.state.engine, &ctx.who.caller())
        .await
        .unwrap_or_default();
    let now = ctx.state.engine.now_ms();
    for p in &mut list {
        let id = p["id"].as_str().unwrap_or_default().to_string();
        if let Some(ms) = beats.get(&id) {
            p["lastHeartbeat"] = json!(ms);
            p["secondsAgo"] = json!((now - ms).max(0) / 1000);
        }
    }
    let tenants: Vec<Value> = ctx.get_json("/v2/tenants").await.unwrap_or_default();
    let names: std::collections::BTreeMap<String, Value> =
        weft_engine::tenants::names(&ctx.state.engine, &ctx.who.caller())
            .await
            .map(|ns| ns.into_iter().map(|(id, name)| (id, json!(name))).collect())
            .unwrap_or_default();
    Ok(ctx.page(
        "provisioners.html",
        "Provisioners",
        "provisioners",
        json!({"provisioners": list, "tenant_names": names, "tenants": tenants}),
    ))
}

async fn metrics(ctx: Ctx) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let queues: Value = ctx.get_json("/v2/metrics/queues").await?;
    Ok(ctx.page(
        "metrics.html",
        "Queue metrics",
        "metrics",
        json!({"queues": queues}),
    ))
}

async fn apikeys_page(ctx: &Ctx, n: Notice, made: Value) -> Page {
    let keys: Vec<Value> = ctx.get_json("/v2/apikeys").await?;
    let tenants: Vec<Value> = ctx.get_json("/v2/tenants").await.unwrap_or_default();
    let names: Vec<Value> = tenants.iter().map(|t| t["name"].clone()).collect();
    Ok(ctx.page(
        "apikeys.html",
        "API keys",
        "apikeys",
        json!({"keys": keys, "tenants": names, "made": made,
               "notice": n.notice, "error": n.error}),
    ))
}

async fn apikeys(ctx: Ctx, Query(n): Query<Notice>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    apikeys_page(&ctx, n, Value::Null).await
}

#[derive(Debug, Deserialize)]
struct KeyForm {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    admin: Option<String>,
}

/// Makes a key and shows its secret on the page it answers (the only time it is shown).
async fn make_apikey(ctx: Ctx, Form(f): Form<KeyForm>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let body =
        json!({"tenant": f.tenant.trim(), "user": f.user.trim(), "admin": f.admin.is_some()});
    let r = ctx
        .api(Method::POST, "/v2/apikeys", Some(body.to_string()))
        .await;
    let n = Notice::default();
    if r.ok() {
        apikeys_page(&ctx, n, r.value()).await
    } else {
        let n = Notice {
            error: Some(r.message()),
            ..n
        };
        apikeys_page(&ctx, n, Value::Null).await
    }
}

async fn revoke_apikey(ctx: Ctx, Path(id): Path<String>) -> Page {
    ctx.require(Role::SuperAdmin)?;
    let r = ctx
        .api(Method::DELETE, &format!("/v2/apikeys/{}", enc(&id)), None)
        .await;
    let (k, m) = if r.ok() {
        ("notice", "API key revoked".to_string())
    } else {
        ("error", r.message())
    };
    Ok(Redirect::to(&format!("/ui/super/apikeys?{k}={}", enc(&m))).into_response())
}
