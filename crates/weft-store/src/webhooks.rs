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
    pub tenant_id: String,
    pub id: String,
    /// Settings as the engine keeps them (URL and secret sealed).
    pub body: Value,
    pub cursor: u64,
    pub create_time: i64,
}

/// One event's delivery to one webhook, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub tenant_id: String,
    pub webhook_id: String,
    pub event_id: u64,
    pub cluster_id: Option<u64>,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub first_time: i64,
    pub last_time: i64,
    /// When the next attempt is due (pending rows).
    pub next_time: i64,
    pub code: Option<u16>,
    pub error: Option<String>,
    pub latency_ms: Option<u64>,
}
