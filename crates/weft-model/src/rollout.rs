//! Rolling changes (weft's extension): how an upgrade, a restart or a reconfigure-with-restart
//! walks through a cluster. A rollout does a batch of canary nodes first, alone, then batches of at
//! most `maxInFlight` nodes; after each batch a health gate runs the changed services' checks on the
//! batch and the checks of the services that depend on them. A failed gate stops the rollout before
//! the next batch and, per `onFailure`, pauses the job or rolls back the batches done.
//!
//! The wire form (`RolloutSpec`) keeps what was sent, read leniently; [`RolloutSpec::policy`] checks
//! it and names the field at fault. A template's `administration.rollout` gives the defaults of a
//! request's `rollout`, field by field.

use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::error::ModelError;

/// A rollout as sent: each field optional, checked by [`RolloutSpec::policy`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RolloutSpec {
    /// Nodes changed first, in a batch of their own (default 1; 0 for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, minimum = 0, maximum = 100000))]
    pub canaries: Option<Value>,
    /// Nodes changed at once after the canaries: a count (at least 1) or a percentage of the
    /// nodes changed, such as `"25%"` (default 1).
    #[serde(
        rename = "maxInFlight",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "25%"))]
    pub max_in_flight: Option<Value>,
    /// What a failed health gate does: `pause` (default; resume after a fix) or `rollback` (the
    /// batches done are reverted).
    #[serde(rename = "onFailure", default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "pause"))]
    pub on_failure: Option<Value>,
}

/// How many nodes a batch holds after the canaries. On the wire: a number, or `"N%"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxInFlight {
    /// This many nodes (at least 1).
    Count(u64),
    /// 1..=100 percent of the nodes the rollout changes, rounded up.
    Percent(u64),
}

impl Serialize for MaxInFlight {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MaxInFlight::Count(n) => s.serialize_u64(*n),
            MaxInFlight::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

impl<'de> Deserialize<'de> for MaxInFlight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        max_in_flight(&v, "maxInFlight").map_err(serde::de::Error::custom)
    }
}

impl MaxInFlight {
    /// The batch size for a rollout over `nodes` nodes: at least 1.
    pub fn of(self, nodes: usize) -> usize {
        match self {
            MaxInFlight::Count(n) => n.max(1) as usize,
            MaxInFlight::Percent(p) => (nodes * p as usize).div_ceil(100).max(1),
        }
    }
}

/// What a failed health gate does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Pause the job before the next batch; resuming it runs the failed gate again.
    Pause,
    /// Fail the job and start one that reverts the nodes changed so far.
    Rollback,
}

impl OnFailure {
    /// The wire name (`pause`, `rollback`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Pause => "pause",
            OnFailure::Rollback => "rollback",
        }
    }
}

/// A checked rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Nodes changed first, in a batch of their own (0: none).
    pub canaries: u64,
    /// `maxInFlight`: nodes per batch after the canaries.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "25%"))]
    pub max_in_flight: MaxInFlight,
    /// `onFailure`: what a failed health gate does.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "pause"))]
    pub on_failure: OnFailure,
}

/// The health check that stopped a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GateFailure {
    /// The id of the node whose check failed.
    pub node: String,
    /// The service whose check failed.
    pub service: String,
    /// The task of the check.
    #[serde(rename = "taskId")]
    pub task_id: String,
    /// Why the check failed, as the provisioner said (`unhealthy` when it gave no reason).
    pub message: String,
}

/// What a rollout did after a failed health gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum RolloutOutcome {
    /// The job is paused before the next batch; resume it after a fix (the gate runs again).
    Paused,
    /// The job failed and a revert job undoes the changed nodes (`revertJob`).
    RollingBack,
    /// The job failed and nothing was reverted; `message` says why.
    NotReverted,
}

/// weft extension of a job's plan (`GET /v2/clusters/{id}/plans/{jobId}`): the rollout of a
/// rolling upgrade, restart or reconfigure, and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    /// The rollout as it runs: the request's, filled in from the template's and the defaults.
    pub policy: Rollout,
    /// Nodes whose change has started (in the order they were changed).
    #[serde(default)]
    pub changed_nodes: Vec<String>,
    /// `failedGate`: the check that stopped the rollout; absent while none has failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_gate: Option<GateFailure>,
    /// What the rollout did after a failed gate; absent while none has failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RolloutOutcome>,
    /// The job that reverts the changed nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert_job: Option<String>,
    /// The job's message after a failed gate: what failed and what happens next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            canaries: 1,
            max_in_flight: MaxInFlight::Count(1),
            on_failure: OnFailure::Pause,
        }
    }
}

impl RolloutSpec {
    /// Whether nothing was set.
    pub fn is_empty(&self) -> bool {
        self == &RolloutSpec::default()
    }

    /// This spec's fields, each falling back to `defaults`' and then to [`Rollout::default`].
    /// `prefix` names where the spec was given (`rollout`, `administration.rollout`).
    pub fn policy(&self, defaults: Option<&Rollout>, prefix: &str) -> Result<Rollout, ModelError> {
        let base = defaults.copied().unwrap_or_default();
        Ok(Rollout {
            canaries: match &self.canaries {
                None => base.canaries,
                Some(v) => canaries(v, &format!("{prefix}.canaries"))?,
            },
            max_in_flight: match &self.max_in_flight {
                None => base.max_in_flight,
                Some(v) => max_in_flight(v, &format!("{prefix}.maxInFlight"))?,
            },
            on_failure: match &self.on_failure {
                None => base.on_failure,
                Some(v) => on_failure(v, &format!("{prefix}.onFailure"))?,
            },
        })
    }
}

/// A whole number read leniently (`3`, `"3"`).
fn whole(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn canaries(v: &Value, field: &str) -> Result<u64, ModelError> {
    match whole(v) {
        Some(n) if n <= crate::LARGEST_CLUSTER => Ok(n),
        _ => Err(ModelError::invalid(
            field,
            format!(
                "{field} must be a whole number of nodes from 0 to {}",
                crate::LARGEST_CLUSTER
            ),
        )),
    }
}

fn max_in_flight(v: &Value, field: &str) -> Result<MaxInFlight, ModelError> {
    let bad = || {
        ModelError::invalid(
            field,
            format!("{field} must be a count of at least 1 or a percentage from 1% to 100%, such as \"25%\""),
        )
    };
    if let Some(p) = v.as_str().and_then(|s| s.trim().strip_suffix('%')) {
        return match p.trim().parse::<u64>() {
            Ok(p) if (1..=100).contains(&p) => Ok(MaxInFlight::Percent(p)),
            _ => Err(bad()),
        };
    }
    match whole(v) {
        Some(n) if n >= 1 => Ok(MaxInFlight::Count(n)),
        _ => Err(bad()),
    }
}

fn on_failure(v: &Value, field: &str) -> Result<OnFailure, ModelError> {
    match v.as_str().map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        Some("pause") => Ok(OnFailure::Pause),
        Some("rollback") => Ok(OnFailure::Rollback),
        _ => Err(ModelError::invalid(
            field,
            format!("{field} must be \"pause\" or \"rollback\""),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> RolloutSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn fields_fall_back_to_the_template_then_to_one_canary_one_at_a_time_and_pause() {
        assert_eq!(
            spec(json!({})).policy(None, "rollout").unwrap(),
            Rollout::default()
        );
        let template = spec(json!({"maxInFlight": "50%", "onFailure": "rollback"}))
            .policy(None, "administration.rollout")
            .unwrap();
        let r = spec(json!({"canaries": "0"}))
            .policy(Some(&template), "rollout")
            .unwrap();
        assert_eq!(r.canaries, 0);
        assert_eq!(r.max_in_flight, MaxInFlight::Percent(50));
        assert_eq!(r.on_failure, OnFailure::Rollback);
        assert_eq!(MaxInFlight::Percent(50).of(5), 3);
        assert_eq!(MaxInFlight::Percent(1).of(5), 1);
        assert_eq!(MaxInFlight::Count(2).of(5), 2);
    }

    #[test]
    fn bad_values_name_their_field() {
        for (v, field) in [
            (json!({"canaries": -1}), "rollout.canaries"),
            (json!({"canaries": "many"}), "rollout.canaries"),
            (json!({"maxInFlight": 0}), "rollout.maxInFlight"),
            (json!({"maxInFlight": "0%"}), "rollout.maxInFlight"),
            (json!({"maxInFlight": "101%"}), "rollout.maxInFlight"),
            (json!({"maxInFlight": [1]}), "rollout.maxInFlight"),
            (json!({"onFailure": "explode"}), "rollout.onFailure"),
        ] {
            let e = spec(v.clone()).policy(None, "rollout").unwrap_err();
            assert_eq!(e.field(), Some(field), "{v}");
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }
}
