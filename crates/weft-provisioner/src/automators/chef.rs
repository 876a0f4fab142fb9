//! The `chef-solo` automator (Coopr's contract): runs `chef-solo -c solo.rb -j node.json` on the
//! node itself.
//!
//! Fields (admin, on the service action): `run_list` (required: `recipe[kv::install]`,
//! `role[web]`, or a bare recipe name, comma-separated), `json_attributes` (a JSON object merged
//! over the cluster config), `timeout` (seconds) shortens the task time-out.
//!
//! Every live resource of the tenant is copied to the node, as Coopr did: `cookbooks` (archives,
//! each one cookbook named as the resource) under `cookbooks/`, `data_bags` (archives) under
//! `data_bags/`, `roles` (files) under `roles/`. The automator writes a `solo.rb` pointing there and
//! a `node.json` whose `run_list` is the field's and whose attributes are the cluster config
//! deep-merged with `json_attributes` (which wins), the nodes map under `nodes`, and the task under
//! `weft` (see [`super::weft_vars`]). A non-zero exit may pass on a retry.
//!
//! BOOTSTRAP checks that `chef-solo` is there (on `PATH` or in /opt/chef/bin); when it is not, it
//! runs the installer given to [`ChefSoloAutomator::with_installer`] if there is one, else fails
//! for good. Chef itself has never been run by weft's tests (it cannot be installed where they
//! run): they check this contract against a stub `chef-solo`.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_model::{PluginType, ResourceFormat};

use super::{
    action_timeout, check_required, deep_merge, field, json_object_field, plugin_type, run_tool,
    ship, transport_error, Base, Verdict,
};
use crate::plugin::Automator;
use crate::shell::TransportFactory;
use crate::task::{Action, PluginError, PluginResult, Task};
use crate::transport::CommandSpec;

/// The automator type name.
pub const NAME: &str = "chef-solo";
const REQUIRED: &[&[&str]] = &[&["run_list"]];
const CHEF_PATH: &str = "/opt/chef/bin:/opt/chef/embedded/bin";
/// The resource types, where each goes on the node.
const RESOURCES: [(&str, ResourceFormat); 3] = [
    ("cookbooks", ResourceFormat::Archive),
    ("data_bags", ResourceFormat::Archive),
    ("roles", ResourceFormat::File),
];

/// Checks for chef-solo; runs `$1` (the installer) when it is missing and one is given.
const BOOTSTRAP: &str = r#"set -e
if command -v chef-solo >/dev/null 2>&1; then echo "chef-solo is on the node: $(command -v chef-solo)"; exit 0; fi
if [ -z "$1" ]; then
  echo "chef-solo is not on the node and no installer is configured" >&2; exit 3
fi
sh -c "$1"
command -v chef-solo >/dev/null 2>&1 || { echo "the installer ran but chef-solo is still missing" >&2; exit 3; }
echo "installed chef-solo"
"#;

/// The `chef-solo` automator.
pub struct ChefSoloAutomator {
    base: Base,
    installer: Option<String>,
}

impl ChefSoloAutomator {
    /// Cookbooks, data bags and roles are looked up as `<dir>/cookbooks/<name>` (and so on) in
    /// `dirs`, after the tenant's live resources (with [`ChefSoloAutomator::with_resources`]).
    pub fn new(dirs: Vec<PathBuf>) -> ChefSoloAutomator {
        ChefSoloAutomator {
            base: Base::new(NAME, dirs),
            installer: None,
        }
    }

    /// Looks cookbooks, data bags and roles up first among the tenant's live resources under
    /// `root`.
    pub fn with_resources(mut self, root: PathBuf) -> ChefSoloAutomator {
        self.base.resources = Some(root);
        self
    }

    /// Reaches nodes through `t` instead of [`crate::shell::DefaultTransports`].
    pub fn with_transports(mut self, t: Arc<dyn TransportFactory>) -> ChefSoloAutomator {
        self.base.transports = t;
        self
    }

    /// A shell command BOOTSTRAP runs on a node without chef-solo (e.g. Chef's install script).
    pub fn with_installer(mut self, command: impl Into<String>) -> ChefSoloAutomator {
        self.installer = Some(command.into());
        self
    }
}

/// `recipe[a::b], role[x], c` -> `["recipe[a::b]", "role[x]", "recipe[c]"]`.
pub fn run_list(text: &str) -> Result<Vec<String>, PluginError> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let inner = ["recipe[", "role["]
            .iter()
            .find_map(|p| item.strip_prefix(p).and_then(|r| r.strip_suffix(']')));
        let name = inner.unwrap_or(item);
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-:.@".contains(c));
        if !ok {
            return Err(PluginError::fatal(format!(
                "chef-solo: run_list item {item:?} is not a recipe or role"
            )));
        }
        out.push(if inner.is_some() {
            item.to_string()
        } else {
            format!("recipe[{item}]")
        });
    }
    if out.is_empty() {
        return Err(PluginError::fatal("chef-solo: run_list is empty"));
    }
    Ok(out)
}

/// The node.json: the run list, then the attributes (see the module doc).
pub fn node_json(task: &Task, run_list: Vec<String>, attributes: Value) -> Value {
    let mut node = task
        .config
        .get("cluster")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    deep_merge(&mut node, attributes);
    node["nodes"] = task
        .config
        .get("nodes")
        .cloned()
        .unwrap_or_else(|| json!({}));
    node["weft"] = super::weft_vars(task);
    node["run_list"] = json!(run_list);
    node
}

/// A Ruby string literal for a path (double-quoted; `#` escaped against interpolation).
fn ruby(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('#', "\\#")
}

#[async_trait]
impl Automator for ChefSoloAutomator {
    fn plugin_type(&self) -> PluginType {
        plugin_type(
            NAME,
            "Chef Solo",
            "runs chef-solo on the node with the action's run list",
            &[
                (
                    "run_list",
                    field("run list", "recipes and roles, e.g. recipe[kv::install]"),
                ),
                (
                    "json_attributes",
                    field("attributes", "a JSON object merged over the cluster config"),
                ),
                (
                    "timeout",
                    field("time-out", "seconds before the run is killed"),
                ),
            ],
            REQUIRED,
            &RESOURCES,
        )
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (t, _) = self.base.node(task)?;
        let installer = self.installer.as_deref().unwrap_or_default();
        let cmd = super::script(BOOTSTRAP, &[installer], CHEF_PATH, task.timeout);
        run_tool(t.as_ref(), cmd, "checking for chef-solo", |c| match c {
            0 => Verdict::Success,
            3 => Verdict::Fatal,
            _ => Verdict::Retry,
        })
        .await
    }

    async fn service_action(&self, _action: Action, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        check_required(NAME, &fields, REQUIRED)?;
        let list = run_list(fields.get("run_list").map(String::as_str).unwrap_or(""))?;
        let attrs = json_object_field(NAME, &fields, "json_attributes")?;
        let mut parts = Vec::new();
        for (rtype, _) in RESOURCES {
            for (name, path) in self.base.bundles(&task.tenant_id, rtype) {
                parts.push((format!("{rtype}/{name}"), path));
            }
        }
        let (t, dir) = self.base.node(task)?;
        let (code, copied) = ship(t.as_ref(), parts, &format!("{dir}/code")).await?;
        let run = format!("{dir}/run");
        let solo = format!(
            "cookbook_path [{}]\ndata_bag_path {}\nrole_path {}\nfile_cache_path {}\n",
            ruby(&format!("{code}/cookbooks")),
            ruby(&format!("{code}/data_bags")),
            ruby(&format!("{code}/roles")),
            ruby(&format!("{dir}/cache")),
        );
        let solo_path = format!("{run}/{}-solo.rb", task.id);
        let json_path = format!("{run}/{}-node.json", task.id);
        let node = node_json(task, list, Value::Object(attrs));
        for (path, text) in [(&solo_path, solo), (&json_path, node.to_string())] {
            t.write_file(path, text.as_bytes(), 0o600)
                .await
                .map_err(transport_error)?;
        }
        let argv = ["chef-solo", "-c", &solo_path, "-j", &json_path];
        let mut cmd = CommandSpec::new(argv.map(String::from).into());
        cmd.timeout = action_timeout(task, &fields);
        cmd.max_output = self.base.max_output;
        cmd.cwd = Some(code.clone());
        cmd.env
            .insert("PATH".into(), format!("{CHEF_PATH}:{}", super::SYSTEM_PATH));
        let mut out = run_tool(t.as_ref(), cmd, "chef-solo", |c| {
            if c == 0 {
                Verdict::Success
            } else {
                Verdict::Retry
            }
        })
        .await?;
        if copied {
            out.stdout = format!("copied the cookbooks to {code}\n{}", out.stdout);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn run_lists_take_recipes_roles_and_bare_names() {
        assert_eq!(
            run_list("recipe[kv::install], role[web],lb").unwrap(),
            vec!["recipe[kv::install]", "role[web]", "recipe[lb]"]
        );
        for bad in ["", " , ", "recipe[]", "kv; rm -rf /"] {
            assert!(!run_list(bad).unwrap_err().retryable, "{bad}");
        }
    }

    #[test]
    fn node_json_merges_attributes_over_the_cluster_config() {
        let raw = json!({"taskId": "t", "taskName": "INSTALL", "nodeId": "n1",
            "config": {"cluster": {"kv": {"port": "7000", "mode": "a"}},
            "nodes": {"n1": {"hostname": "h1"}}}});
        let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
        let n = node_json(
            &t,
            vec!["recipe[kv]".into()],
            json!({"kv": {"port": "7001"}}),
        );
        assert_eq!(n["kv"], json!({"port": "7001", "mode": "a"}));
        assert_eq!(n["nodes"]["n1"]["hostname"], "h1");
        assert_eq!(n["weft"]["action"], "install");
        assert_eq!(n["run_list"], json!(["recipe[kv]"]));
        assert_eq!(ruby("/a/#{x}"), r#""/a/\#{x}""#);
    }
}
