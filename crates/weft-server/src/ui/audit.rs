//! The Audit page (tenant admins: their tenant's records; the superadmin: every tenant's): the
//! records newest first, filtered by user, entity and action, a page at a time, and whether each
//! chain verifies.

use axum::extract::Query;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::html::enc;
use super::session::Ctx;
use crate::auth::Role;
use crate::state::AppState;

type Page = Result<axum::response::Response, axum::response::Response>;

/// Records per page.
const PAGE: u64 = 100;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/ui/audit", get(audit))
}

#[derive(Debug, Deserialize, Default)]
struct Filter {
    user: Option<String>,
    entity: Option<String>,
    action: Option<String>,
    offset: Option<u64>,
}

async fn audit(ctx: Ctx, Query(f): Query<Filter>) -> Page {
    ctx.require(Role::Admin)?;
    let offset = f.offset.unwrap_or(0);
    let mut q = vec![format!("limit={PAGE}"), format!("offset={offset}")];
    let given = [
        ("user", &f.user),
        ("entity", &f.entity),
        ("action", &f.action),
    ];
    for (k, v) in given {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            q.push(format!("{k}={}", enc(v)));
        }
    }
    let records: Vec<Value> = ctx.get_json(&format!("/v2/audit?{}", q.join("&"))).await?;
    let chains: Vec<Value> = ctx.get_json("/v2/audit/verify").await?;
    let more = records.len() as u64 == PAGE;
    Ok(ctx.page(
        "audit.html",
        "Audit",
        "audit",
        json!({
            "records": records,
            "chains": chains,
            "filter": {"user": f.user, "entity": f.entity, "action": f.action},
            "prev": (offset > 0).then(|| offset.saturating_sub(PAGE)),
            "next": more.then_some(offset + PAGE),
        }),
    ))
}
