//! The task a worker takes (contract §5.11), what a plugin answers, and how a plugin fails.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use weft_model::{FailureReason, TaskFailure};

/// A failed task: a message, whatever output was captured, whether running it again may help, and
/// why it failed (sent to the server as the finish's `failure`: only a retryable failure is run
/// again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PluginError {
    /// What went wrong, for people: the error's text, and the finish's `stderr` after any output.
    pub message: String,
    /// True when the same task may succeed if run again (a flaky network, a busy machine).
    pub retryable: bool,
    /// Why it failed: auth, not_found, invalid, quota, capacity, network, timeout or crash.
    pub reason: FailureReason,
    /// The standard output captured before the failure (empty when none).
    pub stdout: String,
    /// The standard error captured before the failure (empty when none).
    pub stderr: String,
}

impl PluginError {
    /// A failure for `reason`, retryable as the reason usually is
    /// ([`FailureReason::retryable_by_default`]).
    pub fn new(reason: FailureReason, message: impl Into<String>) -> PluginError {
        PluginError {
            message: message.into(),
            retryable: reason.retryable_by_default(),
            reason,
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    /// A failure that will fail again: bad input, a missing field, an unknown plugin (`invalid`).
    pub fn fatal(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::Invalid, message)
    }

    /// A failure that may pass on another try (`crash`: what ran failed; say better with
    /// [`PluginError::because`] or a constructor per reason when it is known).
    pub fn retryable(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::Crash, message)
    }

    /// Credentials refused: fatal.
    pub fn auth(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::Auth, message)
    }

    /// Something the task names does not exist (a script, an image): fatal.
    pub fn not_found(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::NotFound, message)
    }

    /// The network failed on the way: retryable.
    pub fn network(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::Network, message)
    }

    /// The task did not end in time: retryable.
    pub fn timeout(message: impl Into<String>) -> PluginError {
        PluginError::new(FailureReason::Timeout, message)
    }

    /// The same failure with another reason (whether it is retryable stays).
    pub fn because(mut self, reason: FailureReason) -> PluginError {
        self.reason = reason;
        self
    }

    /// The same failure, retryable or not.
    pub fn retryable_if(mut self, retryable: bool) -> PluginError {
        self.retryable = retryable;
        self
    }

    /// The same failure, with the output of the command that failed.
    pub fn with_output(mut self, stdout: String, stderr: String) -> PluginError {
        self.stdout = stdout;
        self.stderr = stderr;
        self
    }

    /// The classification the finish carries.
    pub fn failure(&self) -> TaskFailure {
        TaskFailure::new(self.reason, self.retryable)
    }
}

/// What a plugin answers for a task.
pub type PluginResult = Result<TaskOutput, PluginError>;

/// What a successful task reports back (contract §4.4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOutput {
    /// Replaces the node's hostname (CONFIRM).
    pub hostname: Option<String>,
    /// `{access_v4, bind_v4}` (CONFIRM).
    pub ipaddresses: Option<BTreeMap<String, String>>,
    /// Merged into the node's provisioner results and handed to every later task of the node.
    pub result: Map<String, Value>,
    /// The task's standard output, for the finish (the agent keeps its tail).
    pub stdout: String,
    /// The task's standard error, for the finish (the agent keeps its tail).
    pub stderr: String,
}

impl TaskOutput {
    /// Folds `other` into `self` (BOOTSTRAP runs several automators and merges what they say).
    pub fn merge(&mut self, other: TaskOutput) {
        if other.hostname.is_some() {
            self.hostname = other.hostname;
        }
        if other.ipaddresses.is_some() {
            self.ipaddresses = other.ipaddresses;
        }
        self.result.extend(other.result);
        self.stdout.push_str(&other.stdout);
        self.stderr.push_str(&other.stderr);
    }
}

/// The provisioner actions (contract §6), as `taskName` spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// The provider makes the node's machine.
    Create,
    /// The provider waits until the machine is ready and reports its hostname and addresses.
    Confirm,
    /// The provider removes the node's machine.
    Delete,
    /// Each automator the node uses prepares the machine for its own service actions.
    Bootstrap,
    /// An automator installs a service.
    Install,
    /// An automator writes a service's configuration.
    Configure,
    /// An automator initializes a service; a new service runs it after CONFIGURE, before START.
    Initialize,
    /// An automator starts a service.
    Start,
    /// An automator stops a service.
    Stop,
    /// An automator removes a service.
    Remove,
    /// weft's health check of a service (run by health jobs only).
    Healthcheck,
    /// weft's question to a provider: does the node's machine still exist (drift checks only).
    Status,
    /// An automator makes a new node a member of its service's running cluster (before START).
    Join,
    /// An automator takes a node out of its service's membership (before STOP).
    Leave,
}

impl Action {
    /// Every action, in contract order.
    pub const ALL: [Action; 14] = [
        Action::Create,
        Action::Confirm,
        Action::Delete,
        Action::Bootstrap,
        Action::Install,
        Action::Configure,
        Action::Initialize,
        Action::Start,
        Action::Stop,
        Action::Remove,
        Action::Healthcheck,
        Action::Status,
        Action::Join,
        Action::Leave,
    ];

    /// The service actions an automator runs for a service (besides BOOTSTRAP, which is per node).
    pub const SERVICE: [Action; 8] = [
        Action::Install,
        Action::Configure,
        Action::Initialize,
        Action::Start,
        Action::Stop,
        Action::Remove,
        Action::Join,
        Action::Leave,
    ];

    /// The action's name in lower case (`install`); [`Action::parse`] reads it back.
    pub fn lower(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Confirm => "confirm",
            Action::Delete => "delete",
            Action::Bootstrap => "bootstrap",
            Action::Install => "install",
            Action::Configure => "configure",
            Action::Initialize => "initialize",
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Remove => "remove",
            Action::Healthcheck => "healthcheck",
            Action::Status => "status",
            Action::Join => "join",
            Action::Leave => "leave",
        }
    }

    /// The action a `taskName` names, in any case (`INSTALL`, `install`); `None` if none.
    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL
            .into_iter()
            .find(|a| a.lower().eq_ignore_ascii_case(s))
    }
}

/// One task as taken from the server.
#[derive(Debug, Clone)]
pub struct Task {
    /// The task's id (`taskId`), as the finish reports it.
    pub id: String,
    /// The id of the job the task belongs to (`jobId`); empty when absent.
    pub job_id: String,
    /// The id of the task's cluster (`clusterId`); empty when absent.
    pub cluster_id: String,
    /// What to do (`taskName`).
    pub action: Action,
    /// The id of the node the task is about (`nodeId`); empty when absent.
    pub node_id: String,
    /// `config` of the task JSON: cluster config, service, node properties, provider, nodes, and the
    /// node's provisioner results flattened in.
    pub config: Map<String, Value>,
    /// The whole task JSON, as received (the shell automator hands it to scripts).
    pub raw: Value,
    /// How long the task may run; plugins kill what they started when it is over.
    pub timeout: Duration,
    /// The tenant (internal id) whose worker took the task; empty when unknown.
    pub tenant_id: String,
}

fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Task {
    /// Reads a task JSON. A task without an id, a known `taskName` or a `config` object is refused.
    pub fn from_json(raw: Value, timeout: Duration) -> Result<Task, PluginError> {
        let id = text(&raw, "taskId").ok_or_else(|| PluginError::fatal("task has no taskId"))?;
        let name = text(&raw, "taskName")
            .ok_or_else(|| PluginError::fatal(format!("task {id} has no taskName")))?;
        let action = Action::parse(&name)
            .ok_or_else(|| PluginError::fatal(format!("task {id}: unknown taskName {name}")))?;
        let config = raw
            .get("config")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| PluginError::fatal(format!("task {id} has no config object")))?;
        Ok(Task {
            job_id: text(&raw, "jobId").unwrap_or_default(),
            cluster_id: text(&raw, "clusterId").unwrap_or_default(),
            node_id: text(&raw, "nodeId").unwrap_or_default(),
            id,
            action,
            config,
            raw,
            timeout,
            tenant_id: String::new(),
        })
    }

    /// A string value of `config`.
    pub fn config_str(&self, key: &str) -> Option<&str> {
        self.config.get(key).and_then(Value::as_str)
    }

    /// `config.provider.providertype`.
    pub fn provider_type(&self) -> Option<&str> {
        self.config.get("provider")?.get("providertype")?.as_str()
    }

    /// `config.provider.provisioner`: admin, user and sensitive provider fields.
    pub fn provider_fields(&self) -> Map<String, Value> {
        self.config
            .get("provider")
            .and_then(|p| p.get("provisioner"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// `config.service.name`.
    pub fn service_name(&self) -> Option<&str> {
        self.config.get("service")?.get("name")?.as_str()
    }

    /// `config.service.action.type`: the automator of a service task.
    pub fn automator_type(&self) -> Option<&str> {
        self.config
            .get("service")?
            .get("action")?
            .get("type")?
            .as_str()
    }

    /// `config.service.action.fields`, values as strings.
    pub fn action_fields(&self) -> BTreeMap<String, String> {
        self.config
            .get("service")
            .and_then(|s| s.get("action"))
            .and_then(|a| a.get("fields"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| match v {
                        Value::String(s) => Some((k.clone(), s.clone())),
                        Value::Null => None,
                        other => Some((k.clone(), other.to_string())),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `config.automators`: the automators BOOTSTRAP runs, in order.
    pub fn automators(&self) -> Vec<String> {
        self.config
            .get("automators")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One of the node's IP addresses (`access_v4`, `bind_v4`).
    pub fn ip(&self, kind: &str) -> Option<&str> {
        self.config.get("ipaddresses")?.get(kind)?.as_str()
    }
}

/// `config.providerid` of a task, trimmed: the machine a CREATE made; `None` when absent or empty.
pub fn providerid(task: &Task) -> Option<String> {
    task.config_str("providerid")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A provider field as text: a string (trimmed; `None` when empty), a number or a boolean (as
/// JSON writes them); `None` when absent or of another type.
pub fn provider_field(fields: &Map<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_task_and_refuses_what_is_not_one() {
        let raw = json!({"taskId": "1-1-1", "jobId": "1-1", "clusterId": "1", "taskName": "INSTALL",
            "nodeId": "n", "config": {"service": {"name": "web", "action": {"type": "shell",
            "fields": {"script": "web.sh", "n": 3}}}, "provider": {"providertype": "local",
            "provisioner": {"k": "v"}}, "automators": ["shell"], "ipaddresses": {"bind_v4": "127.0.0.2"}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        assert_eq!(t.action, Action::Install);
        assert_eq!(t.automator_type(), Some("shell"));
        assert_eq!(t.provider_type(), Some("local"));
        assert_eq!(t.service_name(), Some("web"));
        assert_eq!(t.action_fields()["n"], "3");
        assert_eq!(t.provider_fields()["k"], "v");
        assert_eq!(t.automators(), vec!["shell".to_string()]);
        assert_eq!(t.ip("bind_v4"), Some("127.0.0.2"));
        for bad in [
            json!({}),
            json!({"taskId": "x", "taskName": "FLY", "config": {}}),
            json!({"taskId": "x", "taskName": "CREATE"}),
            json!([1, 2]),
        ] {
            let e = Task::from_json(bad, Duration::from_secs(1)).unwrap_err();
            assert!(!e.retryable, "{e}");
        }
    }

    #[test]
    fn merge_keeps_the_latest_addresses_and_all_results() {
        let mut a = TaskOutput {
            result: Map::from_iter([("x".to_string(), json!(1))]),
            stdout: "a".into(),
            ..Default::default()
        };
        a.merge(TaskOutput {
            hostname: Some("h".into()),
            result: Map::from_iter([("y".to_string(), json!(2))]),
            stdout: "b".into(),
            ..Default::default()
        });
        assert_eq!(a.hostname.as_deref(), Some("h"));
        assert_eq!(a.result.len(), 2);
        assert_eq!(a.stdout, "ab");
    }
}
