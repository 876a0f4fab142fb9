//! The `ansible`, `puppet` and `chef-solo` automators: the automator contract on a real node over
//! SSH (a container of `weft-node:bookworm-cm`, with ansible-core and puppet-agent: `images/
//! build-node-image.sh --cm`), `chef-solo`'s contract against a stub `chef-solo` (Chef itself cannot
//! be installed here: the stub checks the files and command line it gets and runs
//! `recipes/<name>.sh`), the plugin types as the server lists them, and the kv-web example on
//! Docker nodes set up by Ansible and by Puppet, end to end. Needs docker and the images: skipped
//! without them, failed in CI.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};
use weft_provisioner::automators::{AnsibleAutomator, ChefSoloAutomator, PuppetAutomator};
use weft_provisioner::contract::{self, AutomatorFixture};
use weft_provisioner::docker::DockerProvider;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::ssh::scan_host_key;
use weft_provisioner::task::Action;
use weft_provisioner::{Agent, Automator, Plugins};

use crate::common::{scripts_dir, Server};
use crate::ssh::Node;

const CM_IMAGE: &str = "weft-node:bookworm-cm";
const BUILD_CM: &str = "images/build-node-image.sh --cm";

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// Writes `text` to `dir/rel`, parents created.
fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The config of a ready node: reached over SSH as root with its host key recorded.
async fn ready(node: &Node) -> Map<String, Value> {
    let host_key = scan_host_key("127.0.0.1", node.port, Duration::from_secs(5))
        .await
        .unwrap();
    obj(json!({
        "hostname": "contract-node",
        "ipaddresses": {"access_v4": "127.0.0.1", "bind_v4": "127.0.0.1"},
        "ssh-auth": {"user": "root", "key": node.root_key, "port": node.port},
        "ssh_host_keys": host_key.to_result(),
    }))
}

/// One action of `a` with `fields` on the node.
async fn act(
    a: &dyn Automator,
    node: &Map<String, Value>,
    action: Action,
    fields: Value,
) -> Result<weft_provisioner::TaskOutput, weft_provisioner::PluginError> {
    let name = a.plugin_type().name;
    let mut c = node.clone();
    c.insert(
        "service".into(),
        json!({"name": "contract-svc", "action": {"type": name, "fields": fields}}),
    );
    c.insert("cluster".into(), json!({"contract": {"key": "value"}}));
    let t = contract::task(action, "node-x", c, Duration::from_secs(60));
    weft_provisioner::plugin::run_automator(a, action, &t).await
}

const PLAY_OK: &str = r#"- hosts: localhost
  gather_facts: false
  tasks:
    - name: record what weft passed
      ansible.builtin.copy:
        dest: "/tmp/weft-ansible-{{ weft.action }}"
        content: "{{ weft.cluster.contract.key }} {{ greeting }} {{ weft.service }}\n"
"#;
const PLAY_FAIL: &str = r#"- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.fail: {msg: "contract-marker: failing as asked"}
"#;
const PLAY_HANG: &str = r#"- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.command: sleep 7209
"#;
const ROLE_TASKS: &str = r#"- name: a role's tasks file
  ansible.builtin.copy:
    dest: /tmp/weft-ansible-role
    content: "role {{ weft.action }}\n"
"#;

#[tokio::test]
async fn ansible_passes_the_automator_contract_on_a_node_over_ssh() {
    let Some(node) = Node::start_image(CM_IMAGE, BUILD_CM).await else {
        return;
    };
    let code = tempfile::tempdir().unwrap();
    let b = code.path().join("playbooks/contract");
    write(&b, "ok.yml", PLAY_OK);
    write(&b, "fail.yml", PLAY_FAIL);
    write(&b, "hang.yml", PLAY_HANG);
    write(&b, "broken.yml", "- hosts: [localhost\n");
    write(&b, "roles/greeter/tasks/hello.yml", ROLE_TASKS);
    let a = AnsibleAutomator::new(vec![code.path().to_path_buf()]);
    let cfg = ready(&node).await;
    let fields = |p: &str| obj(json!({"resource": "contract", "playbook": p}));
    let mut ok = fields("ok.yml");
    ok.insert("extra_vars".into(), json!(r#"{"greeting": "hi"}"#));
    let fx = AutomatorFixture {
        node: cfg.clone(),
        ok_fields: ok.clone(),
        failing_fields: (fields("fail.yml"), "contract-marker".into()),
        hanging_fields: Some(fields("hang.yml")),
    };
    contract::automator_contract(&a, fx, "node-a").await;
    // The playbook saw the cluster config, the extra vars and the service under `weft`.
    assert_eq!(
        node.exec("cat /tmp/weft-ansible-configure"),
        "value hi contract-svc\n"
    );
    // Run again, nothing changes; a role's tasks file runs as well as a playbook.
    let again = act(&a, &cfg, Action::Install, Value::Object(ok))
        .await
        .unwrap();
    assert!(again.stdout.contains("changed=0"), "{}", again.stdout);
    let role = json!({"resource": "contract", "role": "greeter", "tasks_from": "hello"});
    act(&a, &cfg, Action::Start, role).await.unwrap();
    assert_eq!(node.exec("cat /tmp/weft-ansible-role"), "role start\n");
    // A failed play may pass on a retry; a playbook that does not parse never will.
    let e = act(&a, &cfg, Action::Configure, json!(fields("fail.yml")))
        .await
        .unwrap_err();
    assert!(e.retryable, "{e}");
    let e = act(&a, &cfg, Action::Configure, json!(fields("broken.yml")))
        .await
        .unwrap_err();
    assert!(!e.retryable && e.message.contains("exited with 4"), "{e}");
    let e = act(&a, &cfg, Action::Configure, json!(fields("../etc/passwd")))
        .await
        .unwrap_err();
    assert!(!e.retryable, "{e}");
}

const CLASS_OK: &str = r#"class contract(String $greeting = 'hello') {
  file { "/tmp/weft-puppet-${weft['action']}":
    content => "${weft['cluster']['contract']['key']} ${greeting} ${weft['service']}\n",
  }
}
"#;

#[tokio::test]
async fn puppet_passes_the_automator_contract_on_a_node_over_ssh() {
    let Some(node) = Node::start_image(CM_IMAGE, BUILD_CM).await else {
        return;
    };
    let code = tempfile::tempdir().unwrap();
    let b = code.path().join("modules/contract");
    write(&b, "modules/contract/manifests/init.pp", CLASS_OK);
    write(
        &b,
        "fail.pp",
        "exec { 'contract-marker': command => '/bin/false' }\n",
    );
    write(
        &b,
        "hang.pp",
        "exec { 'hang': command => '/bin/sleep 7209' }\n",
    );
    write(&b, "broken.pp", "class { 'no-such-class':\n");
    let a = PuppetAutomator::new(vec![code.path().to_path_buf()]);
    let cfg = ready(&node).await;
    let manifest = |m: &str| obj(json!({"resource": "contract", "manifest": m}));
    let fx = AutomatorFixture {
        node: cfg.clone(),
        ok_fields: obj(json!({"resource": "contract", "class": "contract",
            "class_params": r#"{"greeting": "hi"}"#})),
        failing_fields: (manifest("fail.pp"), "contract-marker".into()),
        hanging_fields: Some(manifest("hang.pp")),
    };
    contract::automator_contract(&a, fx, "node-p").await;
    // The class saw the cluster config and the service in $weft, and its parameter.
    assert_eq!(
        node.exec("cat /tmp/weft-puppet-configure"),
        "value hi contract-svc\n"
    );
    // A catalog that does not compile (exit 1) is not retried.
    let e = act(&a, &cfg, Action::Configure, json!(manifest("broken.pp")))
        .await
        .unwrap_err();
    assert!(!e.retryable && e.message.contains("exited with 1"), "{e}");
}

/// A stand-in for chef-solo for the contract test (this is not Chef): it checks its command line,
/// `solo.rb` and `node.json`, then runs `<cookbook>/recipes/<recipe>.sh node.json` for each recipe
/// of the run list.
const STUB_CHEF_SOLO: &str = r#"#!/bin/sh
set -eu
if [ "$#" -ne 4 ] || [ "$1" != -c ] || [ "$3" != -j ]; then
  echo "stub chef-solo: expected -c SOLO_RB -j NODE_JSON, got: $*" >&2; exit 64
fi
exec python3 - "$2" "$4" <<'PY'
import json, os, re, subprocess, sys
solo, node_json = sys.argv[1], sys.argv[2]
settings = dict(re.findall(r'^(\w+) (.*)$', open(solo).read(), re.M))
for key in ("cookbook_path", "data_bag_path", "role_path", "file_cache_path"):
    if key not in settings:
        sys.exit("stub chef-solo: solo.rb sets no " + key)
books = json.loads(settings["cookbook_path"])[0]
node = json.load(open(node_json))
for key in ("run_list", "nodes", "weft"):
    if key not in node:
        sys.exit("stub chef-solo: node.json has no " + key)
print("stub chef-solo: run list " + ",".join(node["run_list"]), flush=True)
for item in node["run_list"]:
    m = re.fullmatch(r"recipe\[([\w-]+)(?:::([\w-]+))?\]", item)
    if not m:
        sys.exit("stub chef-solo: cannot run " + item)
    script = os.path.join(books, m.group(1), "recipes", (m.group(2) or "default") + ".sh")
    rc = subprocess.call(["sh", script, node_json])
    if rc:
        sys.exit(rc)
PY
"#;

const RECIPE_OK: &str = r#"python3 - "$1" <<'PY'
import json, sys
n = json.load(open(sys.argv[1]))
line = "%s %s %s\n" % (n["contract"]["key"], n["greeting"], n["weft"]["service"])
open("/tmp/weft-chef-" + n["weft"]["action"], "w").write(line)
PY
"#;

#[tokio::test]
async fn chef_solo_contract_against_a_stub_chef_solo_not_chef() {
    let Some(node) = Node::start().await else {
        return;
    };
    let code = tempfile::tempdir().unwrap();
    let b = code.path().join("cookbooks/contract/recipes");
    write(&b, "ok.sh", RECIPE_OK);
    write(&b, "fail.sh", "echo contract-marker >&2\nexit 3\n");
    write(&b, "hang.sh", "sleep 7209\n");
    write(code.path(), "roles/web.json", "{\"name\": \"web\"}\n");
    let dirs = vec![code.path().to_path_buf()];
    let cfg = ready(&node).await;

    // Without chef-solo and without an installer, BOOTSTRAP fails for good and says why.
    let bare = ChefSoloAutomator::new(dirs.clone());
    let e = act(&bare, &cfg, Action::Bootstrap, json!({}))
        .await
        .unwrap_err();
    assert!(!e.retryable, "{e}");
    assert!(e.stderr.contains("no installer is configured"), "{e:?}");

    // The configured installer puts the stub in place.
    let installer = format!(
        "cat > /usr/local/bin/chef-solo <<'STUB'\n{STUB_CHEF_SOLO}STUB\nchmod 755 /usr/local/bin/chef-solo"
    );
    let a = ChefSoloAutomator::new(dirs).with_installer(installer);
    let run = |r: &str| obj(json!({"run_list": format!("recipe[contract::{r}]")}));
    let mut ok = run("ok");
    ok.insert("json_attributes".into(), json!(r#"{"greeting": "hi"}"#));
    let fx = AutomatorFixture {
        node: cfg.clone(),
        ok_fields: ok,
        failing_fields: (run("fail"), "contract-marker".into()),
        hanging_fields: Some(run("hang")),
    };
    contract::automator_contract(&a, fx, "node-c").await;
    assert_eq!(
        node.exec("cat /tmp/weft-chef-remove"),
        "value hi contract-svc\n"
    );
    // The roles resource went with the cookbooks.
    let roles = node.exec("ls /var/lib/weft/.weft/chef-solo/code/*/roles");
    assert_eq!(roles, "web.json\n", "{roles}");
}

// ---- the plugin types through the server ----

const T: &str = "acme";

fn all_plugins(s: &Server) -> Plugins {
    let data = s.provisioner_data();
    let res = data.join("resources");
    Plugins::new()
        .provider(Arc::new(DockerProvider::new(&data)))
        .automator(Arc::new(
            ShellAutomator::new(vec![scripts_dir()]).with_resources(res.clone()),
        ))
        .automator(Arc::new(
            AnsibleAutomator::new(vec![]).with_resources(res.clone()),
        ))
        .automator(Arc::new(
            PuppetAutomator::new(vec![]).with_resources(res.clone()),
        ))
        .automator(Arc::new(ChefSoloAutomator::new(vec![]).with_resources(res)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_lists_the_four_automator_types_with_their_parameters() {
    let (s, _) = Server::start(T).await;
    let agent = Agent::start(s.config("p-types"), all_plugins(&s))
        .await
        .expect("agent starts");
    let (code, types) = s
        .ext(Method::GET, T, "/v2/plugins/automatortypes", None)
        .await;
    assert_eq!(code, 200, "{types}");
    let by_name: std::collections::BTreeMap<String, Value> = types
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    let names: BTreeSet<&str> = by_name.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["ansible", "chef-solo", "puppet", "shell"])
    );
    let admin = |t: &str| by_name[t]["parameters"]["admin"].clone();
    assert_eq!(
        admin("ansible")["required"],
        json!([["playbook", "resource"], ["resource", "role"]])
    );
    assert!(admin("ansible")["fields"]["extra_vars"].is_object());
    assert_eq!(
        admin("puppet")["required"],
        json!([["manifest", "resource"], ["class", "resource"]])
    );
    assert_eq!(admin("chef-solo")["required"], json!([["run_list"]]));
    assert_eq!(
        by_name["chef-solo"]["resourceTypes"]["cookbooks"]["format"],
        "archive"
    );
    assert_eq!(
        by_name["ansible"]["resourceTypes"]["playbooks"]["format"],
        "archive"
    );
    agent.shutdown().await;
}
