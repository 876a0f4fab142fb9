//! How a task failed (weft's extension of the finish message): whether another try may pass and
//! why it failed, as a provisioner classified it. Coopr's provisioners send no classification:
//! a failure without one is retryable, as every failure was in Coopr.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::lenient;

/// Why a task failed, as the plugin that ran it saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// Credentials refused (HTTP 401/403, a cloud's auth error): fixed by an admin, not by a retry.
    Auth,
    /// Something the task names does not exist: a script, an image, a machine type.
    NotFound,
    /// The task cannot run as given: a bad parameter, a plugin type no provisioner has, a
    /// misconfigured endpoint.
    Invalid,
    /// An account limit was reached.
    Quota,
    /// The cloud or the host has no room now; it may later.
    Capacity,
    /// The network failed on the way (connection refused or reset, throttling, 5xx).
    Network,
    /// The task did not end in time.
    Timeout,
    /// What the task ran failed (a script's exit status, a plugin that panicked): the default.
    #[serde(other)]
    Crash,
}

impl FailureReason {
    /// Every reason, in declaration order (`crash`, the default, last).
    pub const ALL: [FailureReason; 8] = [
        FailureReason::Auth,
        FailureReason::NotFound,
        FailureReason::Invalid,
        FailureReason::Quota,
        FailureReason::Capacity,
        FailureReason::Network,
        FailureReason::Timeout,
        FailureReason::Crash,
    ];

    /// The wire name, snake case (`not_found`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Auth => "auth",
            FailureReason::NotFound => "not_found",
            FailureReason::Invalid => "invalid",
            FailureReason::Quota => "quota",
            FailureReason::Capacity => "capacity",
            FailureReason::Network => "network",
            FailureReason::Timeout => "timeout",
            FailureReason::Crash => "crash",
        }
    }

    /// Whether a failure for this reason is worth another try when the plugin did not say:
    /// capacity, network, timeout and crash are; auth, not_found, invalid and quota are not.
    pub fn retryable_by_default(self) -> bool {
        matches!(
            self,
            FailureReason::Capacity
                | FailureReason::Network
                | FailureReason::Timeout
                | FailureReason::Crash
        )
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `failure` of a finish (and of a node's action history): the plugin's classification of a
/// failed task. Only a retryable failure is run again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TaskFailure {
    /// False: the server fails the job at once, without another attempt of the task.
    #[serde(deserialize_with = "lenient::bool")]
    pub retryable: bool,
    /// Absent or unknown: `crash`.
    #[serde(default = "crash")]
    pub reason: FailureReason,
}

fn crash() -> FailureReason {
    FailureReason::Crash
}

impl TaskFailure {
    /// A failure for `reason`, retryable or not as the plugin said.
    pub fn new(reason: FailureReason, retryable: bool) -> TaskFailure {
        TaskFailure { retryable, reason }
    }

    /// What a failure with no classification (Coopr's provisioners, a lease that ran out) is:
    /// retryable, reason `crash`.
    pub fn unclassified() -> TaskFailure {
        TaskFailure::new(FailureReason::Crash, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_and_write_in_snake_case() {
        for r in FailureReason::ALL {
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v, serde_json::json!(r.as_str()));
            assert_eq!(serde_json::from_value::<FailureReason>(v).unwrap(), r);
        }
        let odd: FailureReason = serde_json::from_str("\"cosmic_rays\"").unwrap();
        assert_eq!(
            odd,
            FailureReason::Crash,
            "an unknown reason reads as crash"
        );
    }

    #[test]
    fn failures_read_leniently() {
        let f: TaskFailure =
            serde_json::from_str(r#"{"retryable": "false", "reason": "auth"}"#).unwrap();
        assert_eq!(f, TaskFailure::new(FailureReason::Auth, false));
        let f: TaskFailure = serde_json::from_str(r#"{"retryable": true}"#).unwrap();
        assert_eq!(f, TaskFailure::unclassified());
    }

    #[test]
    fn default_retryability_follows_the_design() {
        let fatal: Vec<_> = FailureReason::ALL
            .into_iter()
            .filter(|r| !r.retryable_by_default())
            .map(FailureReason::as_str)
            .collect();
        assert_eq!(fatal, ["auth", "not_found", "invalid", "quota"]);
    }
}
