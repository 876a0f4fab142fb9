//! `/v2/webhooks`: a tenant admin's webhooks (the tenant's events POSTed, signed, to a URL),
//! their delivery log and redelivery (see `weft_engine::webhooks`).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use weft_model::webhook::{Delivery, Webhook, WebhookCreated, WebhookRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body, Param, MAX_INT};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

const BODY: &str = "{url, kinds, cluster, template, secret, format, enabled}";

/// What no schema states of a webhook's URL.
const URL_RULE: &str = "url: an http or https URL with a host and no user or password; its host \
                        is not a loopback, link-local, unspecified or multicast address, nor \
                        localhost (loopback and link-local are allowed when the server's \
                        webhooks_allow_loopback is set)";

/// Registers `/v2/webhooks` and the routes of one webhook and its deliveries.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/webhooks",
        list,
        op("webhooks", "The tenant's webhooks, without their secrets (tenant admins)")
            .ok(200, "webhooks", Body::Array("Webhook"))
            .status(403, "not an admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/webhooks",
        create,
        op(
            "webhooks",
            "Register a webhook: the tenant's events from now on (of the kinds, cluster or template given) are POSTed to its URL, signed with its secret (answered once), in order, retried with back-off; loopback and link-local URLs are refused unless the server allows them",
        )
        .body(Body::Json("WebhookRequest"))
        .rule("webhook-url", URL_RULE)
        .ok(200, "the webhook and its secret", Body::Json("WebhookCreated"))
        .status(403, "not an admin"),
    )
    .route(
        MethodFilter::GET,
        "/v2/webhooks/{id}",
        get,
        op("webhooks", "A webhook, without its secret (tenant admins)")
            .ok(200, "the webhook", Body::Json("Webhook"))
            .status(403, "not an admin"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/webhooks/{id}",
        update,
        op(
            "webhooks",
            "New settings for a webhook (its place in the events is kept; without a secret the old one stays)",
        )
        .body(Body::Json("WebhookRequest"))
        .rule("webhook-url", URL_RULE)
        .ok(200, "the webhook", Body::Json("Webhook"))
        .status(403, "not an admin"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/webhooks/{id}",
        delete,
        op("webhooks", "Remove a webhook and its delivery log")
            .status(200, "removed")
            .status(403, "not an admin"),
    )
    .route(
        MethodFilter::GET,
        "/v2/webhooks/{id}/deliveries",
        deliveries,
        op(
            "webhooks",
            "A webhook's deliveries, newest event first: attempts, status, last answer, latency",
        )
        .query_as("before", "only deliveries of events before this id", Param::Int(1))
        .query_as("limit", "deliveries to answer (default 100; at most 1000 are answered)", Param::Int(1))
        .ok(200, "deliveries", Body::Array("Delivery"))
        .status(403, "not an admin"),
    )
    .route(
        MethodFilter::POST,
        "/v2/webhooks/{id}/deliveries/{event}/redeliver",
        redeliver,
        op(
            "webhooks",
            "Send an event to the webhook again (its delivery goes back to pending, due now)",
        )
        .ok(200, "the delivery", Body::Json("Delivery"))
        .status(403, "not an admin"),
    )
}

async fn list(State(st): State<AppState>, who: Identity) -> ApiResult<Json<Vec<Webhook>>> {
    Ok(Json(
        weft_engine::webhooks::list(&st.engine, &who.caller()).await?,
    ))
}

async fn create(
    State(st): State<AppState>,
    who: Identity,
    body: Bytes,
) -> ApiResult<Json<WebhookCreated>> {
    let req: WebhookRequest = parse_body(&body, BODY)?;
    Ok(Json(
        weft_engine::webhooks::create(&st.engine, &who.caller(), req).await?,
    ))
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<Webhook>> {
    Ok(Json(
        weft_engine::webhooks::get(&st.engine, &who.caller(), &id).await?,
    ))
}

async fn update(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Webhook>> {
    let req: WebhookRequest = parse_body(&body, BODY)?;
    Ok(Json(
        weft_engine::webhooks::update(&st.engine, &who.caller(), &id, req).await?,
    ))
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
) -> ApiResult<()> {
    weft_engine::webhooks::delete(&st.engine, &who.caller(), &id).await?;
    Ok(())
}

#[derive(Debug, Deserialize)]
struct DeliveryParams {
    before: Option<u64>,
    limit: Option<u64>,
}

async fn deliveries(
    State(st): State<AppState>,
    who: Identity,
    Path(id): Path<String>,
    Query(p): Query<DeliveryParams>,
) -> ApiResult<Json<Vec<Delivery>>> {
    for (name, v) in [("before", p.before), ("limit", p.limit)] {
        if v.is_some_and(|v| v == 0 || v > MAX_INT) {
            return Err(ApiError::BadRequest(format!("{name}: 1 to {MAX_INT}")));
        }
    }
    Ok(Json(
        weft_engine::webhooks::deliveries(&st.engine, &who.caller(), &id, p.before, p.limit)
            .await?,
    ))
}

async fn redeliver(
    State(st): State<AppState>,
    who: Identity,
    Path((id, event)): Path<(String, String)>,
) -> ApiResult<Json<Delivery>> {
    let event: u64 = event
        .trim()
        .parse()
        .ok()
        .filter(|e| (1..=MAX_INT).contains(e))
        .ok_or_else(|| ApiError::BadRequest("event: an event id".into()))?;
    Ok(Json(
        weft_engine::webhooks::redeliver(&st.engine, &who.caller(), &id, event).await?,
    ))
}
