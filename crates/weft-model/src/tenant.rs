//! Tenants, provisioners and API keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::lenient;

/// A tenant as the API shows it (never with its internal id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TenantSpecification {
    #[serde(default, deserialize_with = "lenient::string")]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "lenient::u32")]
    pub workers: u32,
    #[serde(
        rename = "maxClusters",
        default = "unbounded",
        deserialize_with = "lenient::u64_or_unbounded"
    )]
    pub max_clusters: u64,
    #[serde(
        rename = "maxNodes",
        default = "unbounded",
        deserialize_with = "lenient::u64_or_unbounded"
    )]
    pub max_nodes: u64,
    /// weft extension: seconds between the janitor's drift checks of this tenant's active
    /// clusters (0, the default: the server's `check_interval`, itself off by default).
    #[serde(
        rename = "checkInterval",
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "lenient::u64"
    )]
    pub check_interval: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn unbounded() -> u64 {
    crate::UNBOUNDED
}

/// The body of `POST /v2/tenants` and `PUT /v2/tenants/{name}`.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TenantWriteRequest {
    #[serde(default)]
    pub tenant: Option<TenantSpecification>,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub bootstrap: bool,
}

/// A provisioner as the API shows it. Tenant keys are tenant names in API answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Provisioner {
    #[serde(default, deserialize_with = "lenient::string")]
    pub id: String,
    #[serde(default, deserialize_with = "lenient::string")]
    pub host: String,
    #[serde(default, deserialize_with = "lenient::u16")]
    pub port: u16,
    #[serde(rename = "capacityTotal", default, deserialize_with = "lenient::u32")]
    pub capacity_total: u32,
    #[serde(default)]
    pub assignments: BTreeMap<String, u32>,
    #[serde(default)]
    pub usage: BTreeMap<String, u32>,
    #[serde(rename = "capacityFree", default, deserialize_with = "lenient::u32")]
    pub capacity_free: u32,
    /// weft extension: how the server calls the provisioner's API, `http` or `https`.
    #[serde(default = "plain_http", deserialize_with = "lenient::string")]
    pub scheme: String,
}

fn plain_http() -> String {
    "http".into()
}

/// `PUT /v2/provisioners/{id}`: `{id, host, port, capacityTotal}`, and (weft extension) `scheme`:
/// `https` when the provisioner serves its own API over TLS (the default is `http`).
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ProvisionerRegistration {
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub host: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_i64")]
    pub port: Option<i64>,
    #[serde(
        rename = "capacityTotal",
        default,
        deserialize_with = "lenient::opt_i64"
    )]
    pub capacity_total: Option<i64>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub scheme: Option<String>,
}

/// `POST /v2/provisioners/{id}/heartbeat`: live workers per tenant id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Heartbeat {
    #[serde(default)]
    pub usage: BTreeMap<String, u32>,
    /// weft extension: the plugin types this provisioner offers, by kind (`providertypes`,
    /// `automatortypes`). The server answers with those it does not have ([`HeartbeatAnswer`]),
    /// and the provisioner registers them again (a superadmin may have deleted one).
    #[serde(
        rename = "pluginTypes",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub plugin_types: BTreeMap<String, Vec<String>>,
}

/// weft extension: the answer to a heartbeat that lists its plugin types.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HeartbeatAnswer {
    /// The heartbeat's plugin types the server does not have, by kind.
    #[serde(rename = "missingPluginTypes", default)]
    pub missing_plugin_types: BTreeMap<String, Vec<String>>,
}

/// An API key as listed (the secret is shown once, at creation, and stored only as a hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiKeyInfo {
    pub id: String,
    pub tenant: String,
    pub user: String,
    pub admin: bool,
    #[serde(rename = "createTime")]
    pub create_time: i64,
}

/// `POST /v2/apikeys`.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiKeyRequest {
    #[serde(default, deserialize_with = "lenient::string")]
    pub tenant: String,
    #[serde(default, deserialize_with = "lenient::string")]
    pub user: String,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub admin: bool,
}

/// The answer to `POST /v2/apikeys`: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiKeyCreated {
    pub id: String,
    pub key: String,
    pub tenant: String,
    pub user: String,
    pub admin: bool,
}
