//! The audit trail's records as the API answers them (`GET /v2/audit`, `GET /v2/audit/verify`).
//! How they are chained and kept is weft-store's `audit`.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// What one record says. Its JSON (fields in this order) is the body the hash covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Milliseconds since the epoch.
    pub time: i64,
    /// The tenant the request acted in (its id).
    pub tenant_id: String,
    /// The request's id, also in the server's log lines and the answer's `Weft-Request-Id`.
    pub request_id: String,
    /// The caller's user id, or what the request claimed when it was refused.
    pub user: String,
    /// `superadmin`, `admin`, `user`, or `unknown` for a request refused before it was known.
    pub role: String,
    /// The id of the API key used (never the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The client's address.
    pub source: String,
    /// The request's HTTP method (`POST`).
    pub method: String,
    /// The route as declared (`/v2/clusters/{id}`).
    pub route: String,
    /// What kind of thing the request acted on (`clusters`, `providers`, `apikeys`, ...).
    pub entity: String,
    /// Which one, where the route names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity_id: Option<String>,
    /// What was asked: `create`, `update`, `delete`, `read`, or an operation's own name
    /// (`clusterconfig`, `services`, `abort`, ...).
    pub action: String,
    /// The answer's HTTP status; 0 when the request's change committed but the server stopped
    /// before it answered (recorded by the janitor).
    pub status: u16,
}

/// A stored record: its place in the tenant's chain and its hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// The record's number in its tenant's chain: one more than the record before.
    pub seq: u64,
    /// What the record says; its fields are inlined in the record's JSON.
    #[serde(flatten)]
    pub entry: AuditEntry,
    /// `prevHash`: the `hash` of the tenant's record before this one (64 zeros before the first),
    /// hex-encoded SHA-256.
    pub prev_hash: String,
    /// The record's own hash: hex-encoded SHA-256 over its tenant, `seq`, `prevHash` and its
    /// body as stored.
    pub hash: String,
}

/// What a verification of one tenant's chain found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    /// `tenantId`: the id of the tenant whose chain was checked.
    pub tenant_id: String,
    /// How many records were checked (checking stops at the first fault).
    pub records: u64,
    /// True when every record verifies and the chain ends at the tenant's recorded head.
    pub ok: bool,
    /// The first record that does not verify, or where one is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad_seq: Option<u64>,
    /// What is wrong at `firstBadSeq`, in a sentence; absent when `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The last record's hash: keep it elsewhere to detect a rewrite of the whole chain.
    pub head_hash: String,
}
