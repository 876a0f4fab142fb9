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
    /// The tenant's name, unique: what `Coopr-TenantID` carries (1 to 255 of `[A-Za-z0-9_.-]`).
    #[serde(default, deserialize_with = "lenient::string")]
    pub name: String,
    /// Free text about the tenant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// How many provisioner workers serve the tenant (default 0). A write is refused (409) when the
    /// registered provisioners lack the free capacity.
    #[serde(default, deserialize_with = "lenient::u32")]
    pub workers: u32,
    /// `maxClusters`: the most clusters the tenant may have that are not terminated (default
    /// 2147483647, unbounded).
    #[serde(
        rename = "maxClusters",
        default = "unbounded",
        deserialize_with = "lenient::u64_or_unbounded"
    )]
    pub max_clusters: u64,
    /// `maxNodes`: the most nodes over all its clusters that are not terminated (default
    /// 2147483647, unbounded).
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
    /// weft extension: the most the tenant's live clusters may cost per hour together (decimal
    /// text, in its providers' currency), checked with the quotas in the commit of every create
    /// and expand; absent: no budget.
    #[serde(
        rename = "maxCostPerHour",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_nonblank"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^ *([0-9]{1,12}(\.[0-9]{0,6})?|\.[0-9]{1,6})? *$")
    )]
    pub max_cost_per_hour: Option<String>,
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
    /// The tenant's settings (required: a body without them is a 400).
    #[serde(default)]
    pub tenant: Option<TenantSpecification>,
    /// On create: copy the `superadmin` tenant's catalog and plugin resources into the new tenant,
    /// then sync its plugins (default false).
    #[serde(default, deserialize_with = "lenient::bool")]
    pub bootstrap: bool,
}

/// A provisioner as the API shows it. Tenant keys are tenant names in API answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Provisioner {
    /// The provisioner's id, as it registered (`PUT /v2/provisioners/{id}`).
    #[serde(default, deserialize_with = "lenient::string")]
    pub id: String,
    /// The host name or address where the server reaches the provisioner's API.
    #[serde(default, deserialize_with = "lenient::string")]
    pub host: String,
    /// The port of the provisioner's API.
    #[serde(default, deserialize_with = "lenient::u16")]
    pub port: u16,
    /// `capacityTotal`: how many workers the provisioner can run, over all tenants.
    #[serde(rename = "capacityTotal", default, deserialize_with = "lenient::u32")]
    pub capacity_total: u32,
    /// How many of its workers the server assigned to each tenant.
    #[serde(default)]
    pub assignments: BTreeMap<String, u32>,
    /// How many workers run for each tenant, as the last heartbeat reported them.
    #[serde(default)]
    pub usage: BTreeMap<String, u32>,
    /// `capacityFree`: `capacityTotal` minus the sum of `assignments`.
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
    /// The provisioner's id; when given, it must equal the path's.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub id: Option<String>,
    /// Where the server reaches the provisioner's API (required).
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub host: Option<String>,
    /// The port of that API (required, 1 to 65535).
    #[serde(default, deserialize_with = "lenient::opt_i64")]
    pub port: Option<i64>,
    /// `capacityTotal`: how many workers it can run (required, above 0).
    #[serde(
        rename = "capacityTotal",
        default,
        deserialize_with = "lenient::opt_i64"
    )]
    pub capacity_total: Option<i64>,
    /// `http` (the default) or `https`.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub scheme: Option<String>,
}

/// `POST /v2/provisioners/{id}/heartbeat`: live workers per tenant id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Heartbeat {
    /// Live workers per tenant, keyed by internal tenant id.
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
    /// The key's id (a UUID): what `DELETE /v2/apikeys/{id}` and audit records name.
    pub id: String,
    /// The name of the tenant the key acts in (its id, if the tenant is gone).
    pub tenant: String,
    /// The user id the key acts as.
    pub user: String,
    /// Whether the key acts as the tenant's admin (as the superadmin, for the `superadmin`
    /// tenant).
    pub admin: bool,
    /// `createTime`: when the key was made, in milliseconds since the epoch.
    #[serde(rename = "createTime")]
    pub create_time: i64,
}

/// `POST /v2/apikeys`.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiKeyRequest {
    /// The name of the tenant the key is for (required; a 404 when there is none).
    #[serde(default, deserialize_with = "lenient::string")]
    pub tenant: String,
    /// The user id the key acts as (required).
    #[serde(default, deserialize_with = "lenient::string")]
    pub user: String,
    /// Whether the key acts as the tenant's admin (default false).
    #[serde(default, deserialize_with = "lenient::bool")]
    pub admin: bool,
}

/// The answer to `POST /v2/apikeys`: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiKeyCreated {
    /// The key's id (a UUID), by which it is listed and revoked.
    pub id: String,
    /// The secret to send as `Coopr-ApiKey` (`weft_` and 48 hex digits). The server keeps only its
    /// SHA-256.
    pub key: String,
    /// The name of the tenant the key acts in.
    pub tenant: String,
    /// The user id the key acts as.
    pub user: String,
    /// Whether the key acts as the tenant's admin.
    pub admin: bool,
}
