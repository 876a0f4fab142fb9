//! The `puppet` automator: applies a manifest, or declares a class, on the node itself with
//! `puppet apply --detailed-exitcodes`.
//!
//! Fields (admin, on the service action): `resource` names a `modules` plugin resource (a tar.gz
//! with modules under `modules/`, and manifests); `manifest` (a file in it) or `class` (a class
//! from its modules) says what to apply; `class_params` (a JSON object) makes the class
//! declaration `class { '<class>': k => v, ... }` instead of `include <class>`; `modulepath` (colon-separated, relative to the resource;
//! default `modules`); `timeout` (seconds) shortens the task time-out.
//!
//! The automator writes a manifest of its own that first sets the top-scope variable `$weft` to the
//! task (a hash: see [`super::weft_vars`]; classes read it as `$weft` or `$::weft`), then holds the
//! named manifest's text or `include <class>`, and applies it with `--modulepath` pointing into the
//! copied resource. Exit codes 0 (nothing changed) and 2 (changes applied) are success; 4 and 6
//! (resources failed) may pass on a retry; 1 (the catalog did not compile) fails for good.
//! BOOTSTRAP does nothing when `puppet` is there (on `PATH` or in /opt/puppetlabs/bin), else
//! installs Debian's `puppet-agent` with apt.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
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
pub const NAME: &str = "puppet";
/// The resource type holding modules and manifests.
pub const MODULES: &str = "modules";
const REQUIRED: &[&[&str]] = &[&["resource", "manifest"], &["resource", "class"]];
const PUPPET_PATH: &str = "/opt/puppetlabs/bin";

/// Installs puppet-agent unless `puppet` is there.
const BOOTSTRAP: &str = r#"set -e
if command -v puppet >/dev/null 2>&1; then echo "puppet is on the node: $(command -v puppet)"; exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "puppet is not on the node and there is no apt-get to install puppet-agent" >&2; exit 3
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends puppet-agent >/dev/null
echo "installed puppet-agent with apt"
"#;

bundle_automator!(
    /// The `puppet` automator.
    PuppetAutomator,
    "Module bundles named by the `resource` field are looked up as `<dir>/modules/<name>` in `dirs` (after the tenant's live resources, with [`PuppetAutomator::with_resources`]).",
    "Looks bundles up first among the tenant's live `modules` resources under `root`."
);

/// `puppet apply --detailed-exitcodes`: 0 and 2 succeed, 1 is a catalog that does not compile.
fn judge(code: i32) -> Verdict {
    match code {
        0 | 2 => Verdict::Success,
        1 => Verdict::Fatal,
        _ => Verdict::Retry,
    }
}

/// A JSON value as a Puppet literal (strings single-quoted, null as undef).
pub fn puppet_literal(v: &Value) -> String {
    match v {
        Value::Null => "undef".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote(s),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(puppet_literal).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{} => {}", quote(k), puppet_literal(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A single-quoted Puppet string: only `\` and `'` are escaped there.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `k => v, ...` for a class declaration; the keys must be parameter names.
fn class_params(params: serde_json::Map<String, Value>) -> Result<String, PluginError> {
    let mut out = Vec::new();
    for (k, v) in params {
        let ok = k.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(PluginError::fatal(format!(
                "puppet: class_params key {k:?} is not a parameter name"
            )));
        }
        out.push(format!("{k} => {}", puppet_literal(&v)));
    }
    Ok(out.join(", "))
}

/// A class name: `a`, `a::b`, lower case, digits and `_`.
fn valid_class(c: &str) -> bool {
    c.split("::").all(|part| {
        part.starts_with(|ch: char| ch.is_ascii_lowercase())
            && part
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
    })
}

#[async_trait]
impl Automator for PuppetAutomator {
    fn plugin_type(&self) -> PluginType {
        plugin_type(
            NAME,
            "Puppet",
            "applies a Puppet manifest or class on the node (puppet apply)",
            &[
                (
                    "resource",
                    field("modules resource", "the name of a modules resource"),
                ),
                (
                    "manifest",
                    field(
                        "manifest",
                        "a manifest file in the resource, e.g. manifests/kv.pp",
                    ),
                ),
                (
                    "class",
                    field(
                        "class",
                        "a class to declare instead of a manifest, e.g. kv::server",
                    ),
                ),
                (
                    "modulepath",
                    field(
                        "module path",
                        "directories in the resource, colon-separated (default modules)",
                    ),
                ),
                (
                    "timeout",
                    field("time-out", "seconds before the run is killed"),
                ),
            ],
            REQUIRED,
            &[(MODULES, ResourceFormat::Archive)],
        )
    }

    async fn bootstrap(&self, task: &Task) -> PluginResult {
        let (t, _) = self.base.node(task)?;
        let cmd = super::script(BOOTSTRAP, &[], PUPPET_PATH, task.timeout);
        run_tool(t.as_ref(), cmd, "installing puppet-agent", |c| match c {
            0 => Verdict::Success,
            3 => Verdict::Fatal,
            _ => Verdict::Retry,
        })
        .await
    }

    async fn service_action(&self, _action: Action, task: &Task) -> PluginResult {
        let fields = task.action_fields();
        check_required(NAME, &fields, REQUIRED)?;
        let get = |k: &str| fields.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
        let modulepath: Vec<&str> = get("modulepath").unwrap_or("modules").split(':').collect();
        if !modulepath.iter().all(|p| valid_relative(p)) {
            return Err(PluginError::fatal(
                "puppet: modulepath must list relative paths inside the resource",
            ));
        }
        let resource = get("resource").unwrap_or_default();
        let bundle = self.base.bundle(&task.tenant_id, MODULES, resource)?;
        let body = match (get("manifest"), get("class")) {
            (Some(m), _) => {
                if !valid_relative(m) {
                    return Err(PluginError::fatal(
                        "puppet: manifest must be a relative path inside the resource",
                    ));
                }
                tokio::fs::read_to_string(bundle.join(m))
                    .await
                    .map_err(|e| {
                        PluginError::not_found(format!("puppet: manifest {m} in {resource}: {e}"))
                    })?
            }
            (None, Some(c)) if valid_class(c) => {
                let params = json_object_field(NAME, &fields, "class_params")?;
                if params.is_empty() {
                    format!("include {c}\n")
                } else {
                    format!("class {{ '{c}': {} }}\n", class_params(params)?)
                }
            }
            (None, Some(c)) => {
                return Err(PluginError::fatal(format!(
                    "puppet: class {c:?} is not a class name"
                )))
            }
            (None, None) => unreachable!("checked by check_required"),
        };
        let (t, dir) = self.base.node(task)?;
        let (code, copied) = ship(
            t.as_ref(),
            vec![(String::new(), bundle)],
            &format!("{dir}/code/{resource}"),
        )
        .await?;
        // One line before the manifest's own, so its line numbers are off by one only.
        let manifest = format!(
            "$weft = {}\n{body}",
            puppet_literal(&super::weft_vars(task))
        );
        let path = format!("{dir}/run/{}.pp", task.id);
        t.write_file(&path, manifest.as_bytes(), 0o600)
            .await
            .map_err(transport_error)?;
        let mp: Vec<String> = modulepath.iter().map(|p| format!("{code}/{p}")).collect();
        let argv = [
            "puppet",
            "apply",
            "--detailed-exitcodes",
            "--color=false",
            "--modulepath",
        ];
        let mut argv: Vec<String> = argv.map(String::from).into();
        argv.extend([mp.join(":"), path]);
        let mut cmd = CommandSpec::new(argv);
        cmd.timeout = action_timeout(task, &fields);
        cmd.max_output = self.base.max_output;
        cmd.cwd = Some(code.clone());
        cmd.env.insert(
            "PATH".into(),
            format!("{PUPPET_PATH}:{}", super::SYSTEM_PATH),
        );
        let mut out = run_tool(t.as_ref(), cmd, "puppet apply", judge).await?;
        if copied {
            out.stdout = format!("copied {resource} to {code}\n{}", out.stdout);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_becomes_a_puppet_literal() {
        let v = json!({"a": "it's \\ here", "n": 3, "l": [true, null], "h": {}});
        assert_eq!(
            puppet_literal(&v),
            r#"{'a' => 'it\'s \\ here', 'n' => 3, 'l' => [true, undef], 'h' => {}}"#
        );
    }

    #[test]
    fn exit_codes_two_is_success_and_one_is_for_good() {
        assert_eq!(judge(0), Verdict::Success);
        assert_eq!(judge(2), Verdict::Success);
        assert_eq!(judge(1), Verdict::Fatal);
        assert_eq!(judge(4), Verdict::Retry);
        assert_eq!(judge(6), Verdict::Retry);
        assert!(valid_class("kv::server_2"));
        for bad in ["", "Kv", "kv::", "kv; exec", "a::1b"] {
            assert!(!valid_class(bad), "{bad}");
        }
    }
}
