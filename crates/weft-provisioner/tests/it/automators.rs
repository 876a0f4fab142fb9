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

use crate::contract::{self, AutomatorFixture};
use reqwest::Method;
use serde_json::{json, Map, Value};
use weft_provisioner::automators::{
    AnsibleAutomator, ChefSoloAutomator, DockerAutomator, PuppetAutomator,
};
use weft_provisioner::docker::{DockerProvider, LABEL_CLUSTER, LABEL_TENANT};
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::ssh::scan_host_key;
use weft_provisioner::task::Action;
use weft_provisioner::{Agent, Automator, Plugins};

use crate::common::{scripts_dir, until, Server};
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
    assert!(
        !again.stdout.contains("copied"),
        "an unchanged resource is not copied again: {}",
        again.stdout
    );
    let copies = node.exec("ls /var/lib/weft/.weft/ansible/code/contract | wc -l");
    assert_eq!(copies.trim(), "1", "one copy per content");
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
/// of the run list. As Chef Infra 15 and later do, it exits 172 unless `--chef-license accept`
/// (or `accept-silent`, `accept-no-persist`) is given, when `LICENSED` is 1 (Chef; 0 for Cinc,
/// which asks for no acceptance). The installer scripts below set `LICENSED`.
const STUB_CHEF_SOLO: &str = r#"set -eu
if [ "$#" -lt 4 ] || [ "$1" != -c ] || [ "$3" != -j ]; then
  echo "stub chef-solo: expected -c SOLO_RB -j NODE_JSON [--chef-license V], got: $*" >&2; exit 64
fi
case "$LICENSED:${5:-}:${6:-}" in
  0:*|1:--chef-license:accept|1:--chef-license:accept-silent|1:--chef-license:accept-no-persist) ;;
  *) echo "stub chef-solo: Chef Infra's licence must be accepted (--chef-license accept)" >&2; exit 172 ;;
esac
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
    assert!(e.message.contains("no `installers` resource"), "{e:?}");

    // The tenant's installers resource puts a Chef-like stub in place (no download).
    write(
        code.path(),
        "installers/chef.sh",
        &installer("/usr/local/bin/chef-solo", 1),
    );
    let a = ChefSoloAutomator::new(dirs.clone());
    let run = |r: &str| {
        obj(json!({"run_list": format!("recipe[contract::{r}]"), "chef_license": "accept"}))
    };
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
    assert!(roles.contains("web.json\n"), "{roles}");
    chef_licence_and_cinc(&node, &cfg, code.path(), dirs).await;
}

/// Chef Infra's licence: a run without `chef_license` fails for good and names the field, a
/// wrong value is refused before anything runs. Then Cinc (`/opt/cinc/bin/cinc-solo`, installed
/// from the installers resource on a node without Chef) runs without one.
async fn chef_licence_and_cinc(
    node: &Node,
    cfg: &Map<String, Value>,
    code: &Path,
    dirs: Vec<std::path::PathBuf>,
) {
    let a = ChefSoloAutomator::new(dirs.clone());
    let fields =
        json!({"run_list": "recipe[contract::ok]", "json_attributes": r#"{"greeting": "hi"}"#});
    let e = act(&a, cfg, Action::Install, fields.clone())
        .await
        .unwrap_err();
    assert!(!e.retryable, "exit 172 is not retried: {e}");
    assert!(
        e.message.contains("exited with 172") && e.message.contains("chef_license"),
        "{e}"
    );
    let mut wrong = fields.clone();
    wrong["chef_license"] = json!("yes");
    let e = act(&a, cfg, Action::Install, wrong).await.unwrap_err();
    assert!(
        !e.retryable && e.message.contains("chef_license \"yes\""),
        "{e}"
    );

    node.exec("rm /usr/local/bin/chef-solo");
    std::fs::remove_file(code.join("installers/chef.sh")).unwrap();
    write(
        code,
        "installers/cinc.sh",
        &installer("/opt/cinc/bin/cinc-solo", 0),
    );
    let out = act(&a, cfg, Action::Bootstrap, json!({})).await.unwrap();
    assert!(out.stdout.contains("installed cinc-solo"), "{out:?}");
    let out = act(&a, cfg, Action::Install, fields).await.unwrap();
    assert!(out.stdout.contains("stub chef-solo: run list"), "{out:?}");
}

/// An installer script (an `installers` resource) that puts the stub at `path`.
fn installer(path: &str, licensed: u8) -> String {
    format!(
        "mkdir -p \"$(dirname {path})\"\n\
         {{ echo '#!/bin/sh'; echo 'LICENSED={licensed}'; cat <<'STUB'\n{STUB_CHEF_SOLO}STUB\n}} > {path}\n\
         chmod 755 {path}\n"
    )
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
        .automator(Arc::new(DockerAutomator::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_lists_the_five_automator_types_and_checks_service_actions_against_them() {
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
        BTreeSet::from(["ansible", "chef-solo", "docker", "puppet", "shell"])
    );
    assert_eq!(
        admin_of(&by_name, "docker")["required"],
        json!([["image_name"]])
    );
    for (f, over) in [
        ("image_name", false),
        ("publish_ports", true),
        ("command", true),
    ] {
        assert_eq!(
            admin_of(&by_name, "docker")["fields"][f]["override"],
            over,
            "{f}"
        );
    }
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

    // The catalog checks service actions against the registered types.
    let service = |fields: Value| {
        json!({"name": "configured", "provisioner": {"actions": {
            "install": {"type": "ansible", "fields": fields}}}})
    };
    let (code, body) = s
        .ext(
            Method::PUT,
            T,
            "/v2/services/configured",
            Some(service(json!({"resource": "kv-web"}))),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"]
            .as_str()
            .or(body.as_str())
            .unwrap_or_default(),
        "provisioner.actions.install.fields: automator type ansible needs playbook and \
         resource, or resource and role",
        "{body}"
    );
    // An imported catalog too.
    let bad = json!({"services": [service(json!({"resource": "kv-web"}))]});
    let (code, body) = s.ext(Method::POST, T, "/v2/import", Some(bad)).await;
    assert_eq!(code, 400, "{body}");
    let fields = json!({"resource": "kv-web", "playbook": "kv.yml"});
    let (code, body) = s
        .ext(
            Method::PUT,
            T,
            "/v2/services/configured",
            Some(service(fields)),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    // A service as Coopr's catalog writes it for the docker automator.
    let mysql = json!({"name": "mysql", "provisioner": {"actions": {
        "install": {"type": "docker", "fields": {"image_name": "mysql", "publish_ports": "3306",
            "environment_variables": "MYSQL_ROOT_PASSWORD=somedefaultpassword",
            "volumes": "/data/mysql:/var/lib/mysql"}},
        "start": {"type": "docker", "fields": {"image_name": "mysql", "publish_ports": "3306"}}}}});
    let (code, body) = s
        .ext(Method::PUT, T, "/v2/services/mysql", Some(mysql.clone()))
        .await;
    assert_eq!(code, 200, "{body}");
    let mut nameless = mysql;
    nameless["provisioner"]["actions"]["start"]["fields"] = json!({"publish_ports": "3306"});
    let (code, body) = s
        .ext(Method::PUT, T, "/v2/services/mysql", Some(nameless))
        .await;
    assert_eq!(code, 400, "{body}");
    agent.shutdown().await;
}

/// A plugin type's admin parameters, as the server lists them.
fn admin_of(by_name: &std::collections::BTreeMap<String, Value>, t: &str) -> Value {
    by_name[t]["parameters"]["admin"].clone()
}

// ---- end to end: kv-web on Docker nodes, set up by Ansible and by Puppet ----

/// What differs between the two runs.
struct Tool {
    plugin: &'static str,
    rtype: &'static str,
    /// The bundle's directory under examples/catalog.
    bundle: &'static str,
    /// A file of the bundle and how to make it fail once on configure (the second version).
    fail_once: (&'static str, fn(&str) -> String),
}

fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the containers and network of a tenant's cluster (also when the test panicked). Both
/// labels: cluster ids start at 1 on every test's server.
struct Gone {
    tenant: String,
    cluster: String,
}

impl Drop for Gone {
    fn drop(&mut self) {
        let (t, c) = (
            format!("label={LABEL_TENANT}={}", self.tenant),
            format!("label={LABEL_CLUSTER}={}", self.cluster),
        );
        for id in docker(&["ps", "-aq", "--filter", &t, "--filter", &c]).lines() {
            docker(&["rm", "-f", "-v", id]);
        }
        for n in docker(&["network", "ls", "-q", "--filter", &t, "--filter", &c]).lines() {
            docker(&["network", "rm", n]);
        }
    }
}

/// The bundle as a tar.gz (links followed: the programs are links to examples/catalog/scripts),
/// with `change` applied to one copied file.
fn tarball(dir: &Path, change: Option<(&str, String)>) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("cp")
        .arg("-rL")
        .arg(dir)
        .arg(tmp.path().join("b"))
        .status()
        .unwrap();
    assert!(out.success());
    if let Some((rel, text)) = change {
        std::fs::write(tmp.path().join("b").join(rel), text).unwrap();
    }
    let out = std::process::Command::new("tar")
        .args(["-czf", "-", "-C"])
        .arg(tmp.path().join("b"))
        .arg(".")
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// Uploads, stages and syncs version `v` of the tool's `kv-web` resource, and waits until the
/// provisioner has it live.
async fn publish(s: &Server, tenant_id: &str, tool: &Tool, v: u32, bytes: Vec<u8>) {
    let base = format!(
        "{}/v2/plugins/automatortypes/{}/{}/kv-web",
        s.external, tool.plugin, tool.rtype
    );
    let post = |url: String, body: Vec<u8>| {
        s.http
            .post(url)
            .header("Coopr-UserID", "admin")
            .header("Coopr-TenantID", T)
            .body(body)
            .send()
    };
    for (url, body) in [
        (base.clone(), bytes),
        (format!("{base}/versions/{v}/stage"), Vec::new()),
        (format!("{}/v2/plugins/sync", s.external), Vec::new()),
    ] {
        let r = post(url.clone(), body).await.unwrap();
        assert_eq!(
            r.status().as_u16(),
            200,
            "{url}: {}",
            r.text().await.unwrap()
        );
    }
    let live = s.provisioner_data().join(format!(
        "resources/{tenant_id}/automatortypes/{}/{}/kv-web",
        tool.plugin, tool.rtype
    ));
    let want = format!("/{v}/kv-web");
    until(
        Duration::from_secs(30),
        "the resource to be live",
        || async {
            let target = std::fs::read_link(&live).ok()?;
            target.to_string_lossy().ends_with(&want).then_some(())
        },
    )
    .await;
}

async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

/// Waits (at most five minutes) until the cluster is `want`; fails at any other settled status.
async fn settled(s: &Server, id: &str, want: &str) -> Value {
    let end = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let c = cluster(s, id).await;
        let st = c["status"].as_str().unwrap_or_default();
        if st == want {
            return c;
        }
        let show = || serde_json::to_string_pretty(&c).unwrap();
        assert!(
            !["incomplete", "inconsistent", "terminated"].contains(&st),
            "cluster went {st}: {}",
            show()
        );
        assert!(
            tokio::time::Instant::now() < end,
            "cluster not {want}: {}",
            show()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The bind addresses (and hostnames) of the nodes running `service`.
fn running(c: &Value, service: &str) -> (Vec<String>, BTreeSet<String>) {
    let (mut ips, mut hosts) = (Vec::new(), BTreeSet::new());
    for n in c["nodes"].as_array().unwrap() {
        let p = &n["properties"];
        if p["services"].as_array().unwrap().contains(&json!(service)) {
            ips.push(p["ipaddresses"]["bind_v4"].as_str().unwrap().to_string());
            hosts.insert(p["hostname"].as_str().unwrap().to_string());
        }
    }
    (ips, hosts)
}

/// Waits (30 s) until the balancer answers from every web node in `web` with `greeting` and the
/// stored message.
async fn balancer_answers(s: &Server, lb: &str, web: &BTreeSet<String>, greeting: &str) {
    let url = format!("http://{lb}:8000/");
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = BTreeSet::new();
        let mut last = Vec::new();
        for _ in 0..(2 * web.len() + 2) {
            let body = match s.http.get(&url).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            if let Ok(v) = serde_json::from_str::<Value>(&body) {
                if v["message"] == "written to the primary" && v["greeting"] == greeting {
                    seen.insert(v["node"].as_str().unwrap_or_default().to_string());
                }
            }
            last.push(body);
        }
        if seen == *web {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the balancer answers from {seen:?}, not {web:?}: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// kv-web-<tool> on three containers: active with its services answering; a reconfigure without
/// restart (CONFIGURE only: the code restarts what it changed), with a new version of the code
/// that fails once on configure, changes the greeting, the failure shows its output and its retry
/// passes; deleting the cluster leaves no container.
async fn kv_web_end_to_end(tool: Tool) {
    if !weft_testkit::require("docker") {
        return;
    }
    if docker(&["image", "ls", "-q", CM_IMAGE]).trim().is_empty() {
        weft_testkit::skip_or_fail(CM_IMAGE, &format!("build it with {BUILD_CM}"));
        return;
    }
    let (s, tenant_id) = Server::start(T).await;
    let agent = Agent::start(s.config(&format!("p-{}", tool.plugin)), all_plugins(&s))
        .await
        .expect("agent starts");
    until(Duration::from_secs(20), "workers", || async {
        (agent.usage().get(&tenant_id) == Some(&4)).then_some(())
    })
    .await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/catalog")
        .join(tool.bundle);
    publish(&s, &tenant_id, &tool, 1, tarball(&dir, None)).await;

    let template = format!("kv-web-{}", tool.plugin);
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "cm", "clusterTemplate": template, "numMachines": 3})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let _gone = Gone {
        tenant: tenant_id.clone(),
        cluster: id.clone(),
    };
    let c = settled(&s, &id, "active").await;
    let sfx = tool.plugin;
    let (primary, _) = running(&c, &format!("kv-primary-{sfx}"));
    let (replicas, _) = running(&c, &format!("kv-replica-{sfx}"));
    let (lb, _) = running(&c, &format!("lb-{sfx}"));
    let (_, web) = running(&c, &format!("web-{sfx}"));
    assert!(!replicas.is_empty() && !web.is_empty(), "{c}");

    // Written to the primary, read from the replicas and through the balancer.
    let r = s
        .http
        .put(format!("http://{}:7000/kv/message", primary[0]))
        .body("written to the primary")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    for rep in &replicas {
        let url = format!("http://{rep}:7000/kv/message");
        until(Duration::from_secs(20), "replication", || async {
            let v = s.http.get(&url).send().await.ok()?.text().await.ok()?;
            (v == "written to the primary").then_some(())
        })
        .await;
    }
    balancer_answers(&s, &lb[0], &web, "hello from weft").await;

    // A new version of the code that fails once on configure, and a new greeting.
    let (file, change) = tool.fail_once;
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    publish(
        &s,
        &tenant_id,
        &tool,
        2,
        tarball(&dir, Some((file, change(&text)))),
    )
    .await;
    let (_, mut config) = s
        .ext(Method::GET, T, &format!("/v2/clusters/{id}/config"), None)
        .await;
    config["web"]["greeting"] = json!("reconfigured by weft");
    let (code, body) = s
        .ext(
            Method::PUT,
            T,
            &format!("/v2/clusters/{id}/config"),
            Some(json!({"config": config, "restart": false})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let c = settled(&s, &id, "active").await;
    balancer_answers(&s, &lb[0], &web, "reconfigured by weft").await;
    let actions: Vec<&Value> = c["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["actions"].as_array().unwrap())
        .filter(|a| a["service"] == format!("web-{sfx}") && a["action"] == "CONFIGURE")
        .collect();
    let failed = actions
        .iter()
        .filter(|a| a["status"] == "failed")
        .collect::<Vec<_>>();
    assert_eq!(
        failed.len(),
        web.len(),
        "one failure per web node: {actions:?}"
    );
    for f in failed {
        let out = format!("{}{}", f["stdout"], f["stderr"]);
        assert!(out.contains("failing once as asked"), "{f}");
    }
    // Every web node configured twice at create (install-time) and reconfigure, one retry each.
    let complete = actions.iter().filter(|a| a["status"] == "complete").count();
    assert_eq!(complete, 2 * web.len(), "{actions:?}");

    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    settled(&s, &id, "terminated").await;
    let f = format!("label={LABEL_TENANT}={tenant_id}");
    assert!(docker(&["ps", "-aq", "--filter", &f]).trim().is_empty());
    agent.shutdown().await;
}

fn ansible_fail_once(play: &str) -> String {
    format!(
        "{play}\n- hosts: localhost\n  gather_facts: false\n  tasks:\n    - name: fail once (added by the test)\n      when: weft.action == 'configure'\n      ansible.builtin.shell: \"touch /var/lib/weft/web-failed-once; echo 'failing once as asked'; exit 1\"\n      args: {{creates: /var/lib/weft/web-failed-once}}\n"
    )
}

fn puppet_fail_once(class: &str) -> String {
    let end = class.rfind('}').expect("a class");
    format!(
        "{}  if $weft['action'] == 'configure' {{\n    exec {{ 'fail once':\n      command   => \"touch /var/lib/weft/web-failed-once; echo 'failing once as asked'; exit 1\",\n      creates   => '/var/lib/weft/web-failed-once',\n      provider  => shell,\n      logoutput => true,\n    }}\n  }}\n}}\n",
        &class[..end]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_web_ansible_on_docker_serves_reconfigures_and_retries_a_failed_play() {
    kv_web_end_to_end(Tool {
        plugin: "ansible",
        rtype: "playbooks",
        bundle: "ansible/kv-web",
        fail_once: ("web.yml", ansible_fail_once),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_web_puppet_on_docker_serves_reconfigures_and_retries_a_failed_run() {
    kv_web_end_to_end(Tool {
        plugin: "puppet",
        rtype: "modules",
        bundle: "puppet/kv-web",
        fail_once: ("modules/kvweb/manifests/web.pp", puppet_fail_once),
    })
    .await
}
