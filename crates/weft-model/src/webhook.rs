//! Webhooks as tenant admins register them (`/v2/webhooks`) and their deliveries as the API
//! answers them. How deliveries are made, signed and retried is weft-engine's `webhooks`.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::event::EventKind;
use crate::lenient;

/// What a delivery's body looks like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// `{"id", "webhookId", "timestamp", "event"}`.
    #[default]
    Json,
    /// A Slack incoming-webhook message: `{"text": "..."}`.
    Slack,
}

/// A webhook to register, or its new settings (`POST /v2/webhooks`, `PUT /v2/webhooks/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookRequest {
    /// Where deliveries are POSTed: `http` or `https`, no user or password. Loopback and
    /// link-local addresses are refused unless the server allows them (`webhooks_allow_loopback`).
    #[serde(deserialize_with = "lenient::string")]
    pub url: String,
    /// Only events of these kinds (default: every kind; `audit` needs an admin, as in the stream).
    #[serde(default, deserialize_with = "lenient::vec")]
    pub kinds: Vec<EventKind>,
    /// Only events of this cluster.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub cluster: Option<String>,
    /// Only events of clusters made from this template.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_text"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub template: Option<String>,
    /// The signing secret (at least 16 characters); one is made when absent and answered once.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_text"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 16, pattern = r"^[\s\S]{16,}$")
    )]
    pub secret: Option<String>,
    /// How each delivery's body is written (default `json`).
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub format: WebhookFormat,
    /// Paused webhooks keep their place and deliver what they missed when enabled again.
    #[serde(default = "enabled", deserialize_with = "enabled_unless_false")]
    pub enabled: bool,
}

fn enabled() -> bool {
    true
}

/// `enabled`: true unless given as false (null is absent).
fn enabled_unless_false<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(lenient::opt_bool(d)?.unwrap_or(true))
}

/// A registered webhook as answered: never its secret, and its URL without path or query
/// (which often carry a token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// The webhook's id (`wh-` and 12 hex digits).
    pub id: String,
    /// `scheme://host[:port]/…`.
    pub url: String,
    /// The event kinds delivered (empty: every kind).
    pub kinds: Vec<EventKind>,
    /// Only this cluster's events (its id), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Only events of clusters made from this template, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// How each delivery's body is written.
    pub format: WebhookFormat,
    /// False while paused: its events wait and are delivered once it is enabled again.
    pub enabled: bool,
    /// `createdBy`: the user who registered it.
    pub created_by: String,
    /// Milliseconds since the epoch.
    pub create_time: i64,
    /// The last event id given a delivery (every later one will be).
    pub cursor: u64,
}

/// A webhook just registered: the one time its secret is answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookCreated {
    /// The webhook as registered; its fields are inlined in this object's JSON.
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The signing secret, given or made: answered here only.
    pub secret: String,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not yet delivered: waiting for its turn or for its next attempt.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Retries ran out (`webhook_retry_hours`); a redeliver sends it again.
    Failed,
}

impl DeliveryStatus {
    /// The wire and stored name (`pending`, `delivered`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    /// The status whose [`DeliveryStatus::as_str`] is exactly `s`; `None` otherwise.
    pub fn parse(s: &str) -> Option<DeliveryStatus> {
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// One event's delivery to one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// `webhookId`: the webhook delivered to.
    pub webhook_id: String,
    /// `eventId`: the id of the event delivered.
    pub event_id: u64,
    /// The cluster of the event, if any (deliveries of one cluster go in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Where the delivery stands.
    pub status: DeliveryStatus,
    /// How many attempts have been made.
    pub attempts: u32,
    /// The last answer's HTTP status, if one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_code: Option<u16>,
    /// Why the last attempt failed (no answer, a refused address, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How long the last attempt took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Milliseconds since the epoch: the first attempt, the last, and the next (pending only).
    pub first_attempt: i64,
    /// `lastAttempt`: when the last attempt was made, in milliseconds since the epoch.
    pub last_attempt: i64,
    /// `nextAttempt`: when the next attempt is due, in milliseconds since the epoch (pending
    /// deliveries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt: Option<i64>,
}
