//! The Costs page (showback): what the caller's clusters accrued over a period (`GET
//! /v2/costs`), per cluster, template or tenant, with a bar chart per day (SVG drawn by the
//! template from numbers computed here) and the same report as CSV through the UI's API proxy.

use axum::extract::Query;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::html::enc;
use super::session::Ctx;
use crate::state::AppState;

type Page = Result<axum::response::Response, axum::response::Response>;

/// The chart's drawing area, in SVG units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/ui/costs", get(costs))
}

#[derive(Debug, Deserialize, Default)]
struct Filter {
    from: Option<String>,
    to: Option<String>,
    #[serde(rename = "groupBy")]
    group_by: Option<String>,
}

async fn costs(ctx: Ctx, Query(f): Query<Filter>) -> Page {
    let mut q = Vec::new();
    for (k, v) in [("from", &f.from), ("to", &f.to)] {
        if let Some(v) = v.as_deref().filter(|v| !v.trim().is_empty()) {
            match weft_model::cost::instant(k, v) {
                Ok(ms) => q.push(format!("{k}={ms}")),
                Err(e) => {
                    return Err(ctx.error_page(axum::http::StatusCode::BAD_REQUEST, &e.to_string()))
                }
            }
        }
    }
    if let Some(g) = f.group_by.as_deref().filter(|g| !g.is_empty()) {
        q.push(format!("groupBy={}", enc(g)));
    }
    let query = q.join("&");
    let report: Value = ctx.get_json(&format!("/v2/costs?{query}")).await?;
    let chart = chart(&report);
    Ok(ctx.page(
        "costs.html",
        "Costs",
        "costs",
        json!({
            "report": report,
            "chart": chart,
            "filter": {"from": f.from, "to": f.to, "groupBy": f.group_by.unwrap_or_else(|| "cluster".into())},
            "csv": format!("/ui/api/v2/costs?{query}{}format=csv", if query.is_empty() { "" } else { "&" }),
        }),
    ))
}

/// Bars of the first currency's per-day series: `{x, y, w, h, day, amount}` each, and the
/// currency and the tallest day's amount.
fn chart(report: &Value) -> Value {
    let series = report["series"].as_array().cloned().unwrap_or_default();
    let Some(currency) = series.first().and_then(|p| p["currency"].as_str()) else {
        return Value::Null;
    };
    let points: Vec<&Value> = series
        .iter()
        .filter(|p| p["currency"] == currency)
        .collect();
    let max = points
        .iter()
        .filter_map(|p| p["micros"].as_u64())
        .max()
        .unwrap_or(0)
        .max(1);
    let w = WIDTH / points.len().max(1) as f64;
    let bars: Vec<Value> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let m = p["micros"].as_u64().unwrap_or(0);
            let h = HEIGHT * m as f64 / max as f64;
            json!({
                "x": format!("{:.1}", i as f64 * w),
                "y": format!("{:.1}", HEIGHT - h),
                "w": format!("{:.1}", (w - 1.0).max(1.0)),
                "h": format!("{h:.1}"),
                "day": p["day"],
                "amount": weft_model::cost::format_micros(m),
            })
        })
        .collect();
    json!({
        "currency": currency,
        "bars": bars,
        "max": weft_model::cost::format_micros(max),
        "width": WIDTH,
        "height": HEIGHT,
    })
}
