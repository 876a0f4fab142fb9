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
    Admin,
    User,
}

/// The schema of one plugin field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FieldSchema {
    #[serde(default, deserialize_with = "lenient::string")]
    pub label: String,
    #[serde(rename = "type", default, deserialize_with = "lenient::string")]
    pub field_type: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub tip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub default: Option<Value>,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub r#override: bool,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub sensitive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub options: Option<Vec<Value>>,
}

/// `{"fields": {...}, "required": [["a","b"],["c"]]}`: any one required set is enough.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ParamSpec {
    #[serde(default, deserialize_with = "fields")]
    pub fields: BTreeMap<String, FieldSchema>,
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
    File,
    Archive,
}

/// A resource type a plugin accepts (`{"format":"file","permissions":"0400"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResourceTypeSpec {
    pub format: ResourceFormat,
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
    #[serde(default, deserialize_with = "lenient::string")]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub classname: Option<String>,
    #[serde(default, deserialize_with = "parameters")]
    pub parameters: BTreeMap<ParameterType, ParamSpec>,
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
    Inactive,
    Staged,
    Active,
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
    pub name: String,
    pub version: u64,
    pub status: ResourceStatus,
}
