//! Plugin types (provider and automator types, registered by provisioners) and plugin resources.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::lenient;

/// `admin` or `user`: who fills a plugin field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ParameterType {
    /// Set by a tenant admin: on the provider (its `provisioner`) for provider types, in a service
    /// action's `fields` for automator types.
    Admin,
    /// Given by users with each cluster request (`providerFields`).
    User,
}

/// The schema of one plugin field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FieldSchema {
    /// The field's name as a form shows it (required).
    #[serde(default, deserialize_with = "lenient::string")]
    pub label: String,
    /// `type`: how a form asks for the value (`text`, `password`, `select`, `checkbox`, ...;
    /// required).
    #[serde(rename = "type", default, deserialize_with = "lenient::string")]
    pub field_type: String,
    /// Help text for the field.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub tip: Option<String>,
    /// The value used when none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub default: Option<Value>,
    /// Whether users may override this admin field in a cluster request's `providerFields`.
    #[serde(default, deserialize_with = "lenient::bool")]
    pub r#override: bool,
    /// Whether the value is a secret: a user's is kept in the credential store, and none is ever
    /// shown.
    #[serde(default, deserialize_with = "lenient::bool")]
    pub sensitive: bool,
    /// The values a `select` field offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub options: Option<Vec<Value>>,
}

/// `{"fields": {...}, "required": [["a","b"],["c"]]}`: any one required set is enough.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ParamSpec {
    /// The fields, by name.
    #[serde(default, deserialize_with = "fields")]
    pub fields: BTreeMap<String, FieldSchema>,
    /// Alternative sets of required field names: the fields given must cover every name of at
    /// least one set. Every name must be a key of `fields`.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub required: Vec<BTreeSet<String>>,
}

fn fields<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, FieldSchema>, D::Error> {
    Ok(Option::<BTreeMap<String, FieldSchema>>::deserialize(d)?.unwrap_or_default())
}

/// `file` or `archive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResourceFormat {
    /// A single file (an SSH key), written on the provisioner with the mode `permissions` gives.
    File,
    /// A tar.gz archive (a cookbook), unpacked into a directory on the provisioner.
    Archive,
}

/// A resource type a plugin accepts (`{"format":"file","permissions":"0400"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResourceTypeSpec {
    /// Whether resources of this type are files or archives.
    pub format: ResourceFormat,
    /// The mode of a `file` resource, as 3 or 4 octal digits (`0400`); allowed only with `file`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub permissions: Option<String>,
}

/// A provider type or automator type, as a provisioner registers it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PluginType {
    /// The type's name (`aws`, `chef-solo`): global, unique among the provider types (or the
    /// automator types).
    #[serde(default, deserialize_with = "lenient::string")]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the plugin.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave it: each registration stores a new one.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// The implementing class, as Coopr's plugin descriptors name it; weft does not use it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub classname: Option<String>,
    /// The fields the plugin takes, by who gives them (`admin`, `user`).
    #[serde(default, deserialize_with = "parameters")]
    pub parameters: BTreeMap<ParameterType, ParamSpec>,
    /// `resourceTypes`: the kinds of plugin resource the type takes (`keys`, `cookbooks`), by
    /// name.
    #[serde(rename = "resourceTypes", default, deserialize_with = "resource_types")]
    pub resource_types: BTreeMap<String, ResourceTypeSpec>,
}

fn parameters<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<ParameterType, ParamSpec>, D::Error> {
    Ok(Option::<BTreeMap<ParameterType, ParamSpec>>::deserialize(d)?.unwrap_or_default())
}

fn resource_types<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ResourceTypeSpec>, D::Error> {
    Ok(Option::<BTreeMap<String, ResourceTypeSpec>>::deserialize(d)?.unwrap_or_default())
}

impl PluginType {
    /// The names of every field marked sensitive, over admin and user parameters.
    pub fn sensitive_fields(&self) -> BTreeSet<&str> {
        self.parameters
            .values()
            .flat_map(|p| p.fields.iter())
            .filter(|(_, f)| f.sensitive)
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

/// Lifecycle of a plugin resource version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResourceStatus {
    /// Uploaded, not in use; only inactive versions may be deleted.
    Inactive,
    /// To be pushed to provisioners by the next sync, which makes it active.
    Staged,
    /// Pushed to provisioners and in use.
    Active,
    /// In use, but to be withdrawn by the next sync, which makes it inactive.
    Recalled,
}

impl ResourceStatus {
    /// From the two stored flags: `live` (pushed to provisioners) and `slated` (wanted live).
    pub fn from_flags(live: bool, slated: bool) -> Self {
        match (live, slated) {
            (false, false) => ResourceStatus::Inactive,
            (false, true) => ResourceStatus::Staged,
            (true, true) => ResourceStatus::Active,
            (true, false) => ResourceStatus::Recalled,
        }
    }

    /// The status named `s`, in any case (as `?status=` filters are read); `None` for an unknown
    /// name.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "inactive" => Some(ResourceStatus::Inactive),
            "staged" => Some(ResourceStatus::Staged),
            "active" => Some(ResourceStatus::Active),
            "recalled" => Some(ResourceStatus::Recalled),
            _ => None,
        }
    }
}

/// `{"name":"hadoop","version":3,"status":"active"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResourceMeta {
    /// The resource's name.
    pub name: String,
    /// Which upload of it this is: 1 for the first, one more for each after.
    pub version: u64,
    /// Where this version stands.
    pub status: ResourceStatus,
}
