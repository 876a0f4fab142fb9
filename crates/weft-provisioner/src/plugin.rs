//! The plugin traits and the dispatcher.
//!
//! A provider makes, confirms and deletes machines; an automator sets up services on them. Each
//! declares its plugin type (fields, sensitive flags, resource types), which the agent registers
//! with the server. Handlers are reconcilers: running one twice does no harm, and a failure says
//! whether running it again may help. Every side effect goes through a narrow trait (the
//! `Transport` for commands and files), so a plugin can be tested against the real thing or a fake.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use weft_model::PluginType;

pub use weft_cloud::plugin::{status_output, Provider};

use crate::task::{Action, PluginError, PluginResult, Task, TaskOutput};

/// Sets up services on machines (contract §4.6). `task.action_fields()` holds the action's fields.
/// Every service action defaults to [`Automator::service_action`], so an automator that treats them
/// alike overrides one method.
#[async_trait]
pub trait Automator: Send + Sync {
    /// The plugin type this automator registers (`automatortypes/{name}`).
    fn plugin_type(&self) -> PluginType;
    /// Prepares a node for this automator (once per node, after CONFIRM).
    async fn bootstrap(&self, task: &Task) -> PluginResult;
    /// What the service actions do unless overridden. The default does nothing.
    async fn service_action(&self, _action: Action, _task: &Task) -> PluginResult {
        Ok(TaskOutput::default())
    }
    /// Runs INSTALL of the task's service; by default [`Automator::service_action`].
    async fn install(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Install, task).await
    }
    /// Runs CONFIGURE of the task's service; by default [`Automator::service_action`].
    async fn configure(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Configure, task).await
    }
    /// Runs INITIALIZE of the task's service; by default [`Automator::service_action`].
    async fn initialize(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Initialize, task).await
    }
    /// Runs START of the task's service; by default [`Automator::service_action`].
    async fn start(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Start, task).await
    }
    /// Runs STOP of the task's service; by default [`Automator::service_action`].
    async fn stop(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Stop, task).await
    }
    /// Runs REMOVE of the task's service; by default [`Automator::service_action`].
    async fn remove(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Remove, task).await
    }
    /// Runs JOIN of the task's service; by default [`Automator::service_action`].
    async fn join(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Join, task).await
    }
    /// Runs LEAVE of the task's service; by default [`Automator::service_action`].
    async fn leave(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Leave, task).await
    }
    /// One try of a service's health check: success means healthy. [`run_automator`] runs it
    /// with the check's tries, interval and time-out (see [`crate::health`]).
    async fn healthcheck(&self, task: &Task) -> PluginResult {
        self.service_action(Action::Healthcheck, task).await
    }
}

/// Runs one action of an automator.
pub async fn run_automator(a: &dyn Automator, action: Action, task: &Task) -> PluginResult {
    match action {
        Action::Bootstrap => a.bootstrap(task).await,
        Action::Install => a.install(task).await,
        Action::Configure => a.configure(task).await,
        Action::Initialize => a.initialize(task).await,
        Action::Start => a.start(task).await,
        Action::Stop => a.stop(task).await,
        Action::Remove => a.remove(task).await,
        Action::Join => a.join(task).await,
        Action::Leave => a.leave(task).await,
        Action::Healthcheck => {
            crate::health::check(task, |t| async move { a.healthcheck(&t).await }).await
        }
        other => Err(PluginError::fatal(format!(
            "{} is not an automator action",
            other.lower()
        ))),
    }
}

/// Runs one action of a provider.
pub async fn run_provider(p: &dyn Provider, action: Action, task: &Task) -> PluginResult {
    match action {
        Action::Create => p.create(task).await,
        Action::Confirm => p.confirm(task).await,
        Action::Delete => p.delete(task).await,
        Action::Status => p.status(task).await,
        other => Err(PluginError::fatal(format!(
            "{} is not a provider action",
            other.lower()
        ))),
    }
}

/// The plugins a provisioner runs, by type name.
#[derive(Clone, Default)]
pub struct Plugins {
    providers: BTreeMap<String, Arc<dyn Provider>>,
    automators: BTreeMap<String, Arc<dyn Automator>>,
}

impl Plugins {
    /// No plugins; add them with [`Plugins::provider`] and [`Plugins::automator`].
    pub fn new() -> Plugins {
        Plugins::default()
    }

    /// Adds a provider; a second plugin with the same type name replaces the first.
    pub fn provider(mut self, p: Arc<dyn Provider>) -> Plugins {
        self.providers.insert(p.plugin_type().name, p);
        self
    }

    /// Adds an automator; a second plugin with the same type name replaces the first.
    pub fn automator(mut self, a: Arc<dyn Automator>) -> Plugins {
        self.automators.insert(a.plugin_type().name, a);
        self
    }

    /// The provider plugin of a provider type, if this provisioner has it.
    pub fn provider_plugin(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.providers.get(name).cloned()
    }

    /// The plugin types of the providers, by name: what the provisioner registers with the server.
    pub fn provider_types(&self) -> Vec<PluginType> {
        self.providers.values().map(|p| p.plugin_type()).collect()
    }

    /// The plugin types of the automators, by name: what the provisioner registers with the
    /// server.
    pub fn automator_types(&self) -> Vec<PluginType> {
        self.automators.values().map(|a| a.plugin_type()).collect()
    }

    /// Runs a task with the plugin it names (contract §4.5): CREATE, CONFIRM, DELETE and STATUS go to the
    /// provider named by `config.provider.providertype`; BOOTSTRAP runs the bootstrap of each
    /// automator in `config.automators`, merging what they answer; the service actions go to the
    /// automator named by `config.service.action.type`.
    pub async fn run(&self, task: &Task) -> PluginResult {
        match task.action {
            Action::Create | Action::Confirm | Action::Delete | Action::Status => {
                let name = task.provider_type().ok_or_else(|| {
                    PluginError::fatal("task has no config.provider.providertype")
                })?;
                let p = self.providers.get(name).ok_or_else(|| {
                    PluginError::fatal(format!("no provider plugin for provider type {name}"))
                })?;
                run_provider(p.as_ref(), task.action, task).await
            }
            Action::Bootstrap => {
                let mut out = TaskOutput::default();
                let names = task.automators();
                if names.is_empty() {
                    tracing::warn!(task_id = %task.id, "bootstrap with no automators listed");
                }
                for name in names {
                    let a = self.automators.get(&name).ok_or_else(|| {
                        PluginError::fatal(format!("no automator plugin for automator type {name}"))
                    })?;
                    out.merge(a.bootstrap(task).await?);
                }
                Ok(out)
            }
            action => {
                let name = task.automator_type().ok_or_else(|| {
                    PluginError::fatal("service task has no config.service.action.type")
                })?;
                let a = self.automators.get(name).ok_or_else(|| {
                    PluginError::fatal(format!("no automator plugin for automator type {name}"))
                })?;
                run_automator(a.as_ref(), action, task).await
            }
        }
    }
}
