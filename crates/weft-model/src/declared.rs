//! Clusters declared in files and moved to a template version (weft extensions): the declared
//! state ([`ClusterSpec`], what `weft apply -f` sends and `weft cluster export` writes) and what
//! moving a cluster to a declared state or a template version would do ([`ClusterChange`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::{DiffLine, ModelError, PlanView};

/// A cluster as a file declares it. Absent fields follow the template: the latest `version`, its
/// default `services` and `config`; an absent `lease` leaves the lease as it is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// The cluster's name (how `weft apply` finds it among the tenant's live clusters).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 255))]
    pub name: String,
    /// The cluster template's name.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 255))]
    pub template: String,
    /// The template version to follow; absent: the latest.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::opt_json_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2147483647, value_type = Option<i64>))]
    pub version: Option<u64>,
    /// How many nodes.
    #[serde(deserialize_with = "crate::lenient::json_u64")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000, value_type = i64))]
    pub size: u64,
    /// The services to run; absent: the template version's default services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<String>>,
    /// The cluster's config; absent: the template version's default config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub config: Option<Map<String, Value>>,
    /// The lease in milliseconds from the cluster's creation (0: forever); absent: unchanged
    /// (the template's initial lease for a new cluster).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::opt_json_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 9007199254740991_i64, value_type = Option<i64>))]
    pub lease: Option<u64>,
    /// The provider of a new cluster (absent: the template's default); an existing cluster
    /// keeps its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 255))]
    pub provider: Option<String>,
}

impl ClusterSpec {
    /// Checks what needs no store: a name, a template, a size above 0, service names.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.name.trim().is_empty() {
            return Err(ModelError::invalid("name", "name must not be empty"));
        }
        if self.template.trim().is_empty() {
            return Err(ModelError::invalid(
                "template",
                "template must not be empty",
            ));
        }
        if self.size == 0 {
            return Err(ModelError::invalid("size", "size must be at least 1"));
        }
        if self.version == Some(0) {
            return Err(ModelError::invalid("version", "version must be at least 1"));
        }
        for (i, s) in self.services.iter().flatten().enumerate() {
            if s.trim().is_empty() {
                return Err(ModelError::invalid(
                    format!("services[{i}]"),
                    format!("services[{i}]: a service name must not be empty"),
                ));
            }
        }
        Ok(())
    }
}

/// The body of `POST /v2/clusters/{id}/apply`: the declared state, and for `apply --plan` the
/// fingerprint of the reviewed plan.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    /// The declared state.
    pub spec: ClusterSpec,
    /// The `fingerprint` of a reviewed plan: the change runs only if it is still exactly that
    /// plan on the same cluster state (409 otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}-[0-9a-f]{16}$"))]
    pub fingerprint: Option<String>,
}

/// What moving a cluster to a template version or a declared state does (or did).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterChange {
    /// The cluster's id.
    #[serde(rename = "clusterId")]
    pub cluster_id: String,
    /// The cluster's name.
    pub name: String,
    /// Whether anything changes; `false`: the cluster already is as asked.
    pub changes: bool,
    /// The template name.
    pub template: String,
    /// The template version the cluster follows now.
    #[serde(rename = "fromVersion")]
    pub from_version: u64,
    /// The template version it follows after.
    #[serde(rename = "toVersion")]
    pub to_version: u64,
    /// How the template differs from the cluster's copy.
    #[serde(rename = "templateDiff", default)]
    pub template_diff: Vec<DiffLine>,
    /// Services the cluster gains.
    #[serde(rename = "servicesAdded", default)]
    pub services_added: Vec<String>,
    /// Services the cluster loses.
    #[serde(rename = "servicesRemoved", default)]
    pub services_removed: Vec<String>,
    /// How the cluster's config changes.
    #[serde(rename = "configDiff", default)]
    pub config_diff: Vec<DiffLine>,
    /// Config paths the template changed where the cluster has its own value, which is kept
    /// (template sync only).
    #[serde(rename = "configKept", default)]
    pub config_kept: Vec<String>,
    /// Nodes to add.
    #[serde(rename = "nodesAdded", default)]
    pub nodes_added: u64,
    /// Ids of nodes to remove.
    #[serde(rename = "nodesRemoved", default)]
    pub nodes_removed: Vec<String>,
    /// The layout change, one line per node that changes (`+ node ...`, `- node ...`,
    /// `~ node ...: + kafka`).
    #[serde(default)]
    pub layout: Vec<String>,
    /// The lease end before and after (ms since the epoch; 0 forever), when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<i64>>))]
    pub lease: Option<[i64; 2]>,
    /// The plan in short: one line per action and service, with how many nodes.
    #[serde(default)]
    pub summary: Vec<String>,
    /// The plan of the job that makes the change (none when no job is needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanView>,
    /// Why the cluster cannot move (impact previews; a real run answers an error instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// Names the cluster state and the plan this answer was made from: `apply --plan` sends it
    /// back and the change runs only if both are still the same.
    pub fingerprint: String,
    /// The job that makes the change, once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_spec_with_an_unknown_field_is_refused_by_name() {
        let e = serde_json::from_value::<ClusterSpec>(json!({
            "name": "a", "template": "t", "size": 1, "sise": 3
        }))
        .unwrap_err();
        assert!(e.to_string().contains("sise"), "{e}");
    }

    #[test]
    fn spec_checks_name_the_field() {
        let ok = ClusterSpec {
            name: "a".into(),
            template: "t".into(),
            size: 1,
            ..Default::default()
        };
        assert!(ok.check().is_ok());
        let zero = ClusterSpec {
            size: 0,
            ..ok.clone()
        };
        assert!(zero.check().unwrap_err().to_string().contains("size"));
        let blank = ClusterSpec {
            services: Some(vec!["x".into(), " ".into()]),
            ..ok
        };
        assert!(blank
            .check()
            .unwrap_err()
            .to_string()
            .contains("services[1]"));
    }
}
