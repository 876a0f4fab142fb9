//! The provider contract: what every provider (cloud or not) implements, and the answer of a
//! STATUS task.

use async_trait::async_trait;
use weft_model::{MachineReport, MachineState, PluginType, STATUS_RESULT_KEY};

use crate::task::{PluginError, PluginResult, Task, TaskOutput};

/// Makes, confirms and deletes machines (contract §4.6). `task.provider_fields()` holds the
/// provider's admin, user and sensitive fields.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The plugin type this provider registers (`providertypes/{name}`).
    fn plugin_type(&self) -> PluginType;
    /// Starts making a machine; answers `result.providerid` (and how to reach it, e.g. `ssh-auth`).
    async fn create(&self, task: &Task) -> PluginResult;
    /// Waits until the machine is usable; answers `ipaddresses {access_v4, bind_v4}`.
    async fn confirm(&self, task: &Task) -> PluginResult;
    /// Removes the machine and everything it made. A missing or unknown `providerid` is success.
    async fn delete(&self, task: &Task) -> PluginResult;
    /// Whether the node's machine still exists and runs (a drift check's STATUS), answered as
    /// `result.machine` ([`weft_model::MachineReport`], see [`status_output`]). A missing machine
    /// is a finding, not a failure. The default uses CONFIRM's lookup: a confirmed machine runs,
    /// one CONFIRM fails for good on is missing, and any other failure leaves it unknown.
    /// Providers with a cheaper call override it.
    async fn status(&self, task: &Task) -> PluginResult {
        let (state, message) = match self.confirm(task).await {
            Ok(_) => (MachineState::Running, None),
            Err(e) if !e.retryable => (MachineState::Missing, Some(e.message)),
            Err(e) => (MachineState::Unknown, Some(e.message)),
        };
        Ok(status_output(state, message))
    }
    /// Every machine that carries this provider's marks of a weft node, for the provider fields
    /// `fields` (what `weft provider sweep` compares with the live nodes). The default: the
    /// provider cannot list what it made.
    async fn machines(
        &self,
        _fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Vec<weft_model::SweptMachine>, PluginError> {
        Err(PluginError::fatal(format!(
            "provider type {} cannot list its machines",
            self.plugin_type().name
        )))
    }
}

/// A STATUS task's answer: `result.machine` with `state` and, when given, `message`.
pub fn status_output(state: MachineState, message: Option<String>) -> TaskOutput {
    let report = MachineReport {
        state,
        message: message.clone(),
    };
    let mut out = TaskOutput {
        stdout: format!(
            "machine {}{}\n",
            state.as_str(),
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ),
        ..Default::default()
    };
    out.result.insert(
        STATUS_RESULT_KEY.into(),
        serde_json::to_value(report).unwrap_or_default(),
    );
    out
}
