//! Tenants' webhooks and their deliveries' log.
//!
//! A webhook's row holds its settings (`body`, secrets sealed by the engine) and its `cursor`,
//! the last event id given a delivery row. A server delivers a webhook only while it holds the
//! webhook's lease (`lease_owner` until `lease_until`), so that one server at a time sends its
//! deliveries, in order. A delivery row is written pending when the cursor passes its event (in
//! one transaction), and rewritten after each attempt.

use serde_json::Value;
pub use weft_model::webhook::DeliveryStatus;

/// A webhook as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRow {
    /// The tenant the webhook belongs to (its id).
    pub tenant_id: String,
    /// The webhook's id (`wh-` and 12 hex digits), unique in the tenant.
    pub id: String,
    /// Settings as the engine keeps them (URL and secret sealed).
    pub body: Value,
    /// The last event id given a delivery row; events after it are still to be delivered.
    pub cursor: u64,
    /// When the webhook was made, in ms since the epoch.
    pub create_time: i64,
}

/// One event's delivery to one webhook, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// The tenant of the webhook and the event (its id).
    pub tenant_id: String,
    /// The webhook the event is delivered to.
    pub webhook_id: String,
    /// The event delivered: its number in the tenant's event stream.
    pub event_id: u64,
    /// The cluster the event is about; `None` for events of no cluster.
    pub cluster_id: Option<u64>,
    /// Pending, delivered or failed.
    pub status: DeliveryStatus,
    /// Attempts made so far (0 while the first is due).
    pub attempts: u32,
    /// When the delivery row was written (or redelivery asked for), in ms since the epoch; retries
    /// stop `webhook_retry_hours` after it.
    pub first_time: i64,
    /// When the row last changed (written or attempted), in ms since the epoch; retention goes by
    /// it.
    pub last_time: i64,
    /// When the next attempt is due (pending rows).
    pub next_time: i64,
    /// The HTTP status the receiver last answered; `None` if no answer came.
    pub code: Option<u16>,
    /// Why the last attempt failed, when no status says it (no connection, time-out, the event no
    /// longer kept).
    pub error: Option<String>,
    /// How long the last attempt took, in milliseconds.
    pub latency_ms: Option<u64>,
}
