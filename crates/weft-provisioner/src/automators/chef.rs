//! The `chef-solo` automator (Coopr's contract): runs `chef-solo -c solo.rb -j node.json` on the
//! node itself.
//!
//! Fields (admin, on the service action): `run_list` (required: `recipe[kv::install]`,
//! `role[web]`, or a bare recipe name, comma-separated), `json_attributes` (a JSON object merged
//! over the cluster config), `timeout` (seconds) shortens the task time-out, and `chef_license`
//! (`accept`, `accept-silent` or `accept-no-persist`: passed as `--chef-license`). Chef Infra 15
//! and later refuse to run (exit 172) until their licence is accepted, so that exit is fatal and
//! names the field; Cinc, the free build, needs no acceptance.
//!
//! Every live resource of the tenant is copied to the node, as Coopr did: `cookbooks` (archives,
//! each one cookbook named as the resource) under `cookbooks/`, `data_bags` (archives) under
//! `data_bags/`, `roles` (files) under `roles/`. The automator writes a `solo.rb` pointing there and
//! a `node.json` whose `run_list` is the field's and whose attributes are the cluster config
//! deep-merged with `json_attributes` (which wins), the nodes map under `nodes`, and the task under
//! `weft` (see [`super::weft_vars`]). A non-zero exit may pass on a retry.
//!
//! The run is `chef-solo`, or Cinc's `cinc-solo`, on `PATH` or in /opt/chef/bin or /opt/cinc/bin.
//! BOOTSTRAP checks that one is there; when neither is, it copies the tenant's `installers`
//! resources (files: a `.deb`, a `.rpm` or a `.sh`, e.g. Cinc's package) to the node and installs
//! them (with `sudo -n` unless root), so a node needs no route to Chef's or Cinc's downloads; with
//! no installer it fails for good. Chef itself has never been run by weft's tests (it cannot be
//! installed where they run): they check this contract against a stub that behaves as Chef's
//! documentation says (`--chef-license` or exit 172).

use std::collections::BTreeMap;
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

/// The automator type name.
pub const NAME: &str = "chef-solo";
const REQUIRED: &[&[&str]] = &[&["run_list"]];
/// Where Chef's and Cinc's omnibus packages put their programs.
const CHEF_PATH: &str = "/opt/chef/bin:/opt/chef/embedded/bin:/opt/cinc/bin:/opt/cinc/embedded/bin";
/// The resource types copied for every run, where each goes on the node.
const RESOURCES: [(&str, ResourceFormat); 3] = [
    ("cookbooks", ResourceFormat::Archive),
    ("data_bags", ResourceFormat::Archive),
    ("roles", ResourceFormat::File),
];
/// The resource type of what BOOTSTRAP installs on a node without Chef.
const INSTALLERS: &str = "installers";
/// Every resource type the automator declares.
const DECLARED: [(&str, ResourceFormat); 4] = [
    RESOURCES[0],
    RESOURCES[1],
    RESOURCES[2],
    (INSTALLERS, ResourceFormat::File),
];
/// The values `--chef-license` takes.
const LICENSES: [&str; 3] = ["accept", "accept-silent", "accept-no-persist"];
/// Chef Infra's exit code when its licence has not been accepted.
const LICENSE_NOT_ACCEPTED: i32 = 172;

/// Exits 0 when chef-solo or cinc-solo is on the node, 4 when neither is.
const CHECK: &str = r#"for b in chef-solo cinc-solo; do
  if command -v "$b" >/dev/null 2>&1; then echo "$b is on the node: $(command -v "$b")"; exit 0; fi
done
exit 4
"#;

/// Installs every file in `$1` (the installers shipped to the node), then checks again.
const INSTALL: &str = r#"set -e
SUDO=; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
for f in "$1"/*; do
  case "$f" in
    *.deb) echo "installing $f"; $SUDO dpkg -i "$f" ;;
    *.rpm) echo "installing $f"; $SUDO rpm -Uvh "$f" ;;
    *.sh) echo "running $f"; $SUDO sh "$f" ;;
    *) echo "skipping $f: not a .deb, .rpm or .sh" ;;
  esac
done
for b in chef-solo cinc-solo; do
  if command -v "$b" >/dev/null 2>&1; then echo "installed $b: $(command -v "$b")"; exit 0; fi
done
echo "the installers ran but neither chef-solo nor cinc-solo is on the node" >&2; exit 3
"#;

/// Runs chef-solo, or cinc-solo where only Cinc is installed, with the script's arguments.
const RUN: &str = r#"for b in chef-solo cinc-solo; do
  if command -v "$b" >/dev/null 2>&1; then exec "$b" "$@"; fi
done
echo "neither chef-solo nor cinc-solo is on the node" >&2; exit 127
"#;

bundle_automator!(
    /// The `chef-solo` automator.
    ChefSoloAutomator,
    "Cookbooks, data bags and roles are looked up as `<dir>/cookbooks/<name>` (and so on) in `dirs`, after the tenant's live resources (with [`ChefSoloAutomator::with_resources`]).",
    "Looks cookbooks, data bags and roles up first among the tenant's live resources under `root`."
);

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

/// The `chef_license` field: `None` when unset, else one of [`LICENSES`].
fn license(fields: &BTreeMap<String, String>) -> Result<Option<&str>, PluginError> {
    match fields.get("chef_license").map(|v| v.trim()) {
        None | Some("") => Ok(None),
        Some(v) => LICENSES
            .iter()
            .find(|l| **l == v)
            .copied()
            .map(Some)
            .ok_or_else(|| {
                PluginError::fatal(format!(
                    "chef-solo: chef_license {v:?} is not one of {}",
                    LICENSES.join(", ")
                ))
            }),
    }
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
                (
                    "chef_license",
                    field(
                        "Chef licence",
                        "accept, accept-silent or accept-no-persist (Chef Infra 15+; Cinc needs none)",
                    ),
                ),
            ],
            REQUIRED,
            &DECLARED,
        )
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (t, dir) = self.base.node(task)?;
        let check = super::script(CHECK, &[], CHEF_PATH, task.timeout);
        let out = t.run(&check).await.map_err(transport_error)?;
        if out.exit == Some(0) {
            return Ok(crate::task::TaskOutput {
                stdout: out.stdout,
                ..Default::default()
            });
        }
        let installers: Vec<_> = self
            .base
            .bundles(&task.tenant_id, INSTALLERS)
            .into_iter()
            .map(|(name, path)| (format!("{INSTALLERS}/{name}"), path))
            .collect();
        if installers.is_empty() {
            return Err(PluginError::fatal(
                "chef-solo: neither chef-solo nor cinc-solo is on the node, and the tenant has no \
                 `installers` resource of the chef-solo automator to install one",
            ));
        }
        let (code, _) = ship(t.as_ref(), installers, &format!("{dir}/code")).await?;
        let from = format!("{code}/{INSTALLERS}");
        let cmd = super::script(INSTALL, &[&from], CHEF_PATH, task.timeout);
        run_tool(t.as_ref(), cmd, "installing Chef", |c| match c {
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
        let license = license(&fields)?;
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
        let mut argv = vec!["-c", solo_path.as_str(), "-j", json_path.as_str()];
        if let Some(l) = license {
            argv.extend(["--chef-license", l]);
        }
        let mut cmd = super::script(RUN, &argv, CHEF_PATH, action_timeout(task, &fields));
        cmd.max_output = self.base.max_output;
        cmd.cwd = Some(code.clone());
        let mut out = run_tool(t.as_ref(), cmd, "chef-solo", |c| match c {
            0 => Verdict::Success,
            LICENSE_NOT_ACCEPTED => Verdict::Refused(
                "Chef Infra's licence is not accepted: set the action's chef_license field \
                 (accept, accept-silent or accept-no-persist), or install Cinc",
            ),
            127 => Verdict::Refused("neither chef-solo nor cinc-solo is on the node"),
            _ => Verdict::Retry,
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
