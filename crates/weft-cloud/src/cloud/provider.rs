//! The [`Cloud`] trait and [`CloudProvider`], which runs the lifecycle (see the module doc of
//! [`crate::cloud`]) over any cloud.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use weft_model::{FailureReason, MachineState, PluginType, SweptMachine};

use super::fields::Fields;
use super::machine::SshAddress;
use super::{
    poll_until, with_retries, Backoff, CloudError, Confirmed, Launched, Machine, Marks, Poll,
    Prepared, State, Timing,
};
use crate::plugin::{status_output, Provider};
use crate::task::{providerid, PluginError, PluginResult, Task, TaskOutput};

/// What [`Cloud::prepare`] answers.
pub type Prepare<R> = Result<Prepared<R>, PluginError>;

/// How long one task may wait: the provider's [`Timing`], never past the task's time-out.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    timing: Timing,
    limit: Duration,
}

impl Waits {
    /// The waits of a task that may take `limit`.
    pub fn new(timing: Timing, limit: Duration) -> Waits {
        Waits { timing, limit }
    }

    /// Retries of one call.
    pub fn calls(&self) -> Backoff {
        let t = self.timing;
        Backoff::new(t.first, t.max, t.calls.min(self.limit))
    }

    /// Polls of a machine or an operation.
    pub fn wait(&self) -> Backoff {
        let t = self.timing;
        Backoff::new(t.first, t.max, t.wait.min(self.limit))
    }
}

/// One cloud, as the cloud layer drives it. Each method is one step; the rules of the lifecycle
/// live in [`CloudProvider`].
#[async_trait]
pub trait Cloud: Send + Sync + 'static {
    /// The account, endpoint and settings a provider's fields name, read and checked.
    type Account: Send + Sync;
    /// A launch request, typed.
    type Request: Send + Sync;

    /// The account of a provider's fields (no call is made).
    fn account(&self, fields: &Fields) -> Result<Self::Account, PluginError>;

    /// Whether `id` can be one of this cloud's machine ids (anything else is never sent).
    fn valid_id(&self, id: &str) -> bool;

    /// Everything a launch needs that may take calls: images by name, key pairs; and the login.
    async fn prepare(&self, a: &Self::Account, task: &Task, w: &Waits) -> Prepare<Self::Request>;

    /// Launches one machine. It is idempotent where the cloud offers a way (a client token, a
    /// unique name); a refusal because the machine exists is [`Launched::Taken`].
    async fn launch(
        &self,
        a: &Self::Account,
        req: &Self::Request,
        w: &Waits,
    ) -> Result<Launched, PluginError>;

    /// The machines of the task's node (by its name or its marks), oldest first.
    async fn find(&self, a: &Self::Account, task: &Task) -> Result<Vec<Machine>, CloudError>;

    /// The machine `id`; `None` when the cloud does not know it.
    async fn get(&self, a: &Self::Account, id: &str) -> Result<Option<Machine>, CloudError>;

    /// Asks the cloud to delete machine `id`; false when it was already gone.
    async fn terminate(&self, a: &Self::Account, id: &str) -> Result<bool, CloudError>;

    /// Every machine of the account carrying weft's marks (for drift and sweeps).
    async fn marked(&self, a: &Self::Account) -> Result<Vec<Machine>, CloudError>;

    /// What the cloud adds once the machine runs (host keys, a floating address).
    async fn confirmed(
        &self,
        _a: &Self::Account,
        _task: &Task,
        _m: &Machine,
        _w: &Waits,
    ) -> Result<Confirmed, PluginError> {
        Ok(Confirmed::default())
    }

    /// Whether this task's account holds a key of the cluster that must go with its last machine.
    fn has_cluster_key(&self, _a: &Self::Account) -> bool {
        false
    }

    /// Removes the cluster's key once its last machine is gone; answers what it did.
    async fn drop_cluster_key(
        &self,
        _a: &Self::Account,
        _task: &Task,
        _w: &Waits,
    ) -> Result<String, PluginError> {
        Ok(String::new())
    }
}

/// A [`crate::Provider`] over a [`Cloud`].
#[derive(Debug)]
pub struct CloudProvider<C> {
    cloud: C,
    plugin: PluginType,
    name: &'static str,
    timing: Timing,
}

impl<C: Cloud> CloudProvider<C> {
    /// The provider `name` of `cloud`, described by its plugin descriptor (JSON, see
    /// [`super::fields::plugin_type`]), with the default [`Timing`].
    pub fn of(name: &'static str, descriptor: &str, cloud: C) -> CloudProvider<C> {
        let plugin = super::fields::plugin_type(descriptor);
        debug_assert_eq!(plugin.name, name);
        CloudProvider {
            cloud,
            plugin,
            name,
            timing: Timing::default(),
        }
    }

    /// The provider with its defaults (a cloud's `Default` provider is its name, descriptor and
    /// a default cloud).
    pub fn new() -> CloudProvider<C>
    where
        CloudProvider<C>: Default,
    {
        CloudProvider::default()
    }

    /// How long to wait between tries and in all (tests use milliseconds).
    pub fn with_timing(mut self, timing: Timing) -> CloudProvider<C> {
        self.timing = timing;
        self
    }

    /// The cloud it drives.
    pub fn cloud(&self) -> &C {
        &self.cloud
    }

    fn waits(&self, task: &Task) -> Waits {
        Waits::new(self.timing, task.timeout)
    }

    fn account(&self, task: &Task) -> Result<C::Account, PluginError> {
        self.cloud.account(&Fields::of(task))
    }

    fn id_of(&self, task: &Task) -> Result<String, PluginError> {
        let id = providerid(task)
            .ok_or_else(|| PluginError::fatal("no providerid (was CREATE run?)"))?;
        if !self.cloud.valid_id(&id) {
            return Err(PluginError::fatal(format!(
                "providerid {id:?} is not a machine id"
            )));
        }
        Ok(id)
    }

    /// The node's live machine, with every twin but the oldest terminated; one that failed to
    /// provision is terminated and the CREATE fails retryably (it makes a new one next time).
    async fn take_over(
        &self,
        a: &C::Account,
        task: &Task,
        w: &Waits,
        stdout: &mut String,
    ) -> Result<Option<Machine>, PluginError> {
        let found = with_retries(w.calls(), || self.cloud.find(a, task)).await?;
        let live: Vec<Machine> = found.into_iter().filter(Machine::is_live).collect();
        let Some((first, twins)) = live.split_first() else {
            return Ok(None);
        };
        for twin in twins {
            tracing::warn!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                machine = %twin.id, "terminating a twin machine");
            with_retries(w.calls(), || self.cloud.terminate(a, &twin.id)).await?;
            stdout.push_str(&format!("twin machine {} terminated\n", twin.id));
        }
        if first.state == State::Failed {
            with_retries(w.calls(), || self.cloud.terminate(a, &first.id)).await?;
            return Err(PluginError::retryable(format!(
                "machine {} failed to provision ({}); it was deleted",
                first.id, first.status
            )));
        }
        stdout.push_str(&format!("machine {} exists ({})\n", first.id, first.status));
        Ok(Some(first.clone()))
    }

    /// The node's machine: found by its marks, else launched; looked for again before every
    /// further launch, so that no retry leaves a second machine.
    async fn find_or_launch(
        &self,
        a: &C::Account,
        task: &Task,
        req: &C::Request,
        stdout: &mut String,
    ) -> Result<String, PluginError> {
        let w = self.waits(task);
        let mut backoff = w.calls();
        for _ in 0..10 {
            if let Some(m) = self.take_over(a, task, &w, stdout).await? {
                return Ok(m.id);
            }
            let e = match self.cloud.launch(a, req, &w).await {
                Ok(Launched::Made(id)) => {
                    tracing::info!(cluster_id = %task.cluster_id, node_id = %task.node_id,
                        machine = %id, "machine launched");
                    stdout.push_str(&format!("machine {id} launched\n"));
                    return Ok(id);
                }
                Ok(Launched::Taken) => PluginError::new(
                    FailureReason::Network,
                    format!(
                        "the cloud says the machine of node {} exists but does not show it yet",
                        task.node_id
                    ),
                ),
                Err(e) => e,
            };
            // Only a failure on the way (no answer, throttling, 5xx) may have made a machine
            // without saying so: look again. Any other ends the task (retryably or not).
            let on_the_way = e.reason == FailureReason::Network;
            if !e.retryable || !on_the_way || !backoff.wait(None).await {
                return Err(e);
            }
            tracing::debug!(node_id = %task.node_id, error = %e, "no machine yet; looking again");
        }
        Err(PluginError::retryable(format!(
            "could not launch a machine for node {} (too many tries)",
            task.node_id
        )))
    }

    /// Waits until every machine of `ids` is gone.
    async fn wait_gone(
        &self,
        a: &C::Account,
        ids: &[String],
        w: &Waits,
    ) -> Result<(), PluginError> {
        poll_until("machines gone", w.wait(), || async {
            for id in ids {
                if let Some(m) = self.cloud.get(a, id).await? {
                    if m.state != State::Gone {
                        return Ok(Poll::Pending(format!("{id} is {}", m.status)));
                    }
                }
            }
            Ok(Poll::Ready(()))
        })
        .await
    }

    /// The cluster's key goes once no live machine of the cluster (in its tenant) is left.
    async fn drop_key_if_last(
        &self,
        a: &C::Account,
        task: &Task,
        w: &Waits,
    ) -> Result<String, PluginError> {
        if !self.cloud.has_cluster_key(a) || task.cluster_id.is_empty() {
            return Ok(String::new());
        }
        let marks = Marks::of(task);
        let all = with_retries(w.calls(), || self.cloud.marked(a)).await?;
        let left = all.iter().filter(|m| m.is_live()).any(|m| {
            m.marks.as_ref().is_some_and(|k| {
                k.cluster == marks.cluster && (k.tenant == marks.tenant || k.tenant == "-")
            })
        });
        if left {
            return Ok(String::new());
        }
        self.cloud.drop_cluster_key(a, task, w).await
    }
}

#[async_trait]
impl<C: Cloud> Provider for CloudProvider<C> {
    fn plugin_type(&self) -> PluginType {
        self.plugin.clone()
    }

    async fn create(&self, task: &Task) -> PluginResult {
        if task.node_id.is_empty() {
            return Err(PluginError::fatal("create: the task names no node"));
        }
        let a = self.account(task)?;
        let prepared = self.cloud.prepare(&a, task, &self.waits(task)).await?;
        let mut stdout = prepared.stdout;
        let id = self
            .find_or_launch(&a, task, &prepared.request, &mut stdout)
            .await?;
        let mut result = match &prepared.login {
            Some(l) => crate::keys::login_result(&l.user, &l.key),
            None => Map::new(),
        };
        result.extend(prepared.result);
        result.insert("providerid".into(), json!(id));
        Ok(TaskOutput {
            result,
            stdout,
            ..Default::default()
        })
    }

    async fn confirm(&self, task: &Task) -> PluginResult {
        let id = self.id_of(task)?;
        let how = SshAddress::read(&Fields::of(task))?;
        let a = self.account(task)?;
        let w = self.waits(task);
        let (id, cloud) = (id.as_str(), &self.cloud);
        let m = poll_until(&format!("machine {id} running"), w.wait(), || async {
            let Some(m) = cloud.get(&a, id).await? else {
                return Ok(Poll::Pending("not known to the cloud yet".into()));
            };
            match m.state {
                State::Running if m.addresses.private.is_some() => Ok(Poll::Ready(m)),
                State::Running | State::Pending => Ok(Poll::Pending(m.status)),
                _ => Err(CloudError::from_status(
                    self.name,
                    409,
                    "MachineState",
                    format!("machine {id} is {}, not running", m.status),
                    None,
                )),
            }
        })
        .await?;
        let extra = self.cloud.confirmed(&a, task, &m, &w).await?;
        let mut m = m;
        if extra.public.is_some() {
            m.addresses.public = extra.public;
        }
        let (access, bind) = how.choose(&m)?.unwrap_or_default();
        Ok(TaskOutput {
            hostname: task
                .config_str("hostname")
                .filter(|h| !h.is_empty())
                .map(str::to_string),
            ipaddresses: Some(
                [
                    ("access_v4".to_string(), access.clone()),
                    ("bind_v4".to_string(), bind.clone()),
                ]
                .into(),
            ),
            result: extra.result,
            stdout: format!(
                "machine {id} is {} at {access} (private {bind})\n{}",
                m.status, extra.stdout
            ),
            ..Default::default()
        })
    }

    async fn status(&self, task: &Task) -> PluginResult {
        let Some(id) = providerid(task).filter(|id| self.cloud.valid_id(id)) else {
            return Ok(status_output(
                MachineState::Missing,
                Some("no machine id: CREATE never answered".into()),
            ));
        };
        let a = self.account(task)?;
        let (state, message) = match self.cloud.get(&a, &id).await? {
            None => (MachineState::Missing, format!("machine {id} is not known")),
            Some(m) => (m.machine_state(), format!("machine {id} is {}", m.status)),
        };
        Ok(status_output(state, Some(message)))
    }

    async fn delete(&self, task: &Task) -> PluginResult {
        let a = self.account(task)?;
        let w = self.waits(task);
        let mut ids = BTreeSet::new();
        match providerid(task) {
            Some(id) if self.cloud.valid_id(&id) => {
                ids.insert(id);
            }
            Some(id) => {
                tracing::warn!(task_id = %task.id, providerid = %id, "not a machine id; deleting by marks");
            }
            None => {}
        }
        if !task.node_id.is_empty() {
            let found = with_retries(w.calls(), || self.cloud.find(&a, task)).await?;
            ids.extend(found.into_iter().filter(Machine::is_live).map(|m| m.id));
        }
        let mut stdout = String::new();
        let mut gone = Vec::new();
        for id in &ids {
            if with_retries(w.calls(), || self.cloud.terminate(&a, id)).await? {
                stdout.push_str(&format!("machine {id} terminating\n"));
                gone.push(id.clone());
            } else {
                stdout.push_str(&format!("machine {id} does not exist\n"));
            }
        }
        self.wait_gone(&a, &gone, &w).await?;
        if ids.is_empty() {
            stdout.push_str("no machine to delete\n");
        }
        stdout.push_str(&self.drop_key_if_last(&a, task, &w).await?);
        Ok(TaskOutput {
            stdout,
            ..Default::default()
        })
    }

    async fn machines(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<Vec<SweptMachine>, PluginError> {
        let a = self.cloud.account(&Fields(fields.clone()))?;
        let w = Waits::new(self.timing, self.timing.calls);
        let all = with_retries(w.calls(), || self.cloud.marked(&a)).await?;
        Ok(all
            .iter()
            .filter(|m| m.is_live())
            .filter_map(|m| m.swept(self.name))
            .collect())
    }
}
