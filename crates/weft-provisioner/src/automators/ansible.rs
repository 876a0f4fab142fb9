//! The `ansible` automator: runs a playbook (or one tasks file of a role) on the node itself with
//! `ansible-playbook -i localhost, -c local`.
//!
//! Fields (admin, on the service action): `resource` names a `playbooks` plugin resource (a tar.gz
//! of playbooks and roles), and either `playbook` (a file in it) or `role` (in `roles/` or at the
//! top of the resource) with optional `tasks_from`; `extra_vars` is a JSON object of more
//! variables; `tags` limits the run; `python` is the interpreter Ansible uses on the node
//! (default `/usr/bin/python3`); `timeout` (seconds) shortens the task time-out.
//!
//! The playbook sees the task as the variable `weft` (see [`super::weft_vars`]), with
//! `extra_vars` beside it; both are passed with `-e @file`. BOOTSTRAP makes sure
//! `ansible-playbook` is on the node: it does nothing when it is there (on `PATH` or in the venv
//! `<node dir>/.weft/ansible/venv`), else installs Debian's `ansible-core` with apt, or, without
//! apt, `ansible-core` from PyPI into that venv. Exit codes 4 (parse error) and 5 (bad options)
//! fail for good; any other failure may pass on a retry.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_model::{PluginType, ResourceFormat};

use super::{
    action_timeout, check_required, field, json_object_field, plugin_type, run_tool, ship,
    transport_error, valid_relative, Base, Verdict,
};
use crate::plugin::Automator;
use crate::shell::TransportFactory;
use crate::task::{Action, PluginError, PluginResult, Task};
use crate::transport::CommandSpec;

/// The automator type name.
pub const NAME: &str = "ansible";
/// The resource type holding playbooks.
pub const PLAYBOOKS: &str = "playbooks";
const REQUIRED: &[&[&str]] = &[&["resource", "playbook"], &["resource", "role"]];

/// Installs ansible-core unless `ansible-playbook` is there. `$1` is the venv.
const BOOTSTRAP: &str = r#"set -e
venv=$1
if command -v ansible-playbook >/dev/null 2>&1; then
  echo "ansible-playbook is on the node: $(command -v ansible-playbook)"; exit 0
fi
if [ -x "$venv/bin/ansible-playbook" ]; then echo "ansible-playbook is in $venv"; exit 0; fi
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends ansible-core >/dev/null
  echo "installed ansible-core with apt"; exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q 'ansible-core<2.20'
echo "installed ansible-core into $venv"
"#;

bundle_automator!(
    /// The `ansible` automator.
    AnsibleAutomator,
    "Playbook bundles named by the `resource` field are looked up as `<dir>/playbooks/<name>` in `dirs` (after the tenant's live resources, with [`AnsibleAutomator::with_resources`]).",
    "Looks bundles up first among the tenant's live `playbooks` resources under `root`."
);

/// The exit codes of ansible-playbook: 4 and 5 are the input's fault.
fn judge(code: i32) -> Verdict {
    match code {
        0 => Verdict::Success,
        4 | 5 => Verdict::Fatal,
        _ => Verdict::Retry,
    }
}

/// A one-play playbook that runs `role` (its `tasks_from` file) on localhost, as JSON (which
/// YAML reads).
fn role_playbook(role: &str, tasks_from: Option<&str>) -> String {
    let mut include = json!({"name": role});
    if let Some(t) = tasks_from {
        include["tasks_from"] = json!(t);
    }
    json!([{"hosts": "localhost", "gather_facts": false,
        "tasks": [{"name": format!("role {role}"), "ansible.builtin.include_role": include}]}])
    .to_string()
}

#[async_trait]
impl Automator for AnsibleAutomator {
    fn plugin_type(&self) -> PluginType {
        plugin_type(
            NAME,
            "Ansible",
            "runs an Ansible playbook on the node (ansible-playbook -c local)",
            &[
                (
                    "resource",
                    field("playbooks resource", "the name of a playbooks resource"),
                ),
                (
                    "playbook",
                    field("playbook", "a playbook file in the resource, e.g. site.yml"),
                ),
                ("role", field("role", "a role to run instead of a playbook")),
                (
                    "tasks_from",
                    field("tasks file", "the role's tasks file (default main)"),
                ),
                (
                    "extra_vars",
                    field("extra variables", "a JSON object of variables"),
                ),
                (
                    "tags",
                    field("tags", "only run tasks with these tags (comma-separated)"),
                ),
                (
                    "python",
                    field(
                        "python",
                        "the interpreter on the node (default /usr/bin/python3)",
                    ),
                ),
                (
                    "timeout",
                    field("time-out", "seconds before the run is killed"),
                ),
            ],
            REQUIRED,
            &[(PLAYBOOKS, ResourceFormat::Archive)],
        )
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (t, dir) = self.base.node(task)?;
        let venv = format!("{dir}/venv");
        let cmd = super::script(BOOTSTRAP, &[&venv], &format!("{venv}/bin"), task.timeout);
        run_tool(t.as_ref(), cmd, "installing ansible-core", |c| {
            if c == 0 {
                Verdict::Success
            } else {
                Verdict::Retry
            }
        })
        .await
    }

    async fn service_action(&self, _action: Action, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        check_required(NAME, &fields, REQUIRED)?;
        let get = |k: &str| fields.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
        let extra = json_object_field(NAME, &fields, "extra_vars")?;
        for (k, v) in [
            ("playbook", get("playbook")),
            ("tasks_from", get("tasks_from")),
        ] {
            if v.is_some_and(|v| !valid_relative(v)) {
                return Err(PluginError::fatal(format!(
                    "ansible: {k} must be a relative path inside the resource"
                )));
            }
        }
        let resource = get("resource").unwrap_or_default();
        let bundle = self.base.bundle(&task.tenant_id, PLAYBOOKS, resource)?;
        let (t, dir) = self.base.node(task)?;
        let (code, copied) = ship(
            t.as_ref(),
            vec![(String::new(), bundle)],
            &format!("{dir}/code/{resource}"),
        )
        .await?;
        let run = format!("{dir}/run");
        let mut vars = Value::Object(extra);
        vars["weft"] = super::weft_vars(task);
        let vars_file = format!("{run}/{}.json", task.id);
        t.write_file(&vars_file, vars.to_string().as_bytes(), 0o600)
            .await
            .map_err(transport_error)?;
        let playbook = match (get("playbook"), get("role")) {
            (Some(p), _) => format!("{code}/{p}"),
            (None, Some(role)) => {
                let path = format!("{run}/{}.yml", task.id);
                let text = role_playbook(role, get("tasks_from"));
                t.write_file(&path, text.as_bytes(), 0o644)
                    .await
                    .map_err(transport_error)?;
                path
            }
            (None, None) => unreachable!("checked by check_required"),
        };
        let python = get("python").unwrap_or("/usr/bin/python3");
        let mut argv: Vec<String> = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e"]
            .map(String::from)
            .into();
        argv.push(format!("ansible_python_interpreter={python}"));
        argv.extend(["-e".to_string(), format!("@{vars_file}")]);
        if let Some(tags) = get("tags") {
            argv.extend(["--tags".to_string(), tags.to_string()]);
        }
        argv.push(playbook);
        let mut cmd = CommandSpec::new(argv);
        cmd.timeout = action_timeout(task, &fields);
        cmd.max_output = self.base.max_output;
        cmd.cwd = Some(code.clone());
        let env = [
            ("PATH", format!("{dir}/venv/bin:{}", super::SYSTEM_PATH)),
            ("ANSIBLE_ROLES_PATH", format!("{code}/roles:{code}")),
            ("ANSIBLE_LOCAL_TEMP", format!("{dir}/tmp")),
            ("ANSIBLE_REMOTE_TEMP", format!("{dir}/tmp")),
            ("ANSIBLE_NOCOLOR", "1".into()),
            ("ANSIBLE_RETRY_FILES_ENABLED", "false".into()),
            ("ANSIBLE_LOCALHOST_WARNING", "false".into()),
            ("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false".into()),
        ];
        cmd.env = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let mut out = run_tool(t.as_ref(), cmd, "ansible-playbook", judge).await?;
        if copied {
            out.stdout = format!("copied {resource} to {code}\n{}", out.stdout);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_becomes_a_one_play_playbook() {
        let v: Value = serde_json::from_str(&role_playbook("kv", Some("configure"))).unwrap();
        assert_eq!(v[0]["hosts"], "localhost");
        assert_eq!(
            v[0]["tasks"][0]["ansible.builtin.include_role"],
            json!({"name": "kv", "tasks_from": "configure"})
        );
    }

    #[test]
    fn parse_errors_and_bad_options_are_not_retried() {
        assert_eq!(judge(0), Verdict::Success);
        assert_eq!(judge(2), Verdict::Retry);
        assert_eq!(judge(4), Verdict::Fatal);
        assert_eq!(judge(5), Verdict::Fatal);
    }
}
