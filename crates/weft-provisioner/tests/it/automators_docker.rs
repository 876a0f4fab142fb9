//! The `docker` automator on a real node over SSH: a container of `weft-node:bookworm-docker`
//! (`images/build-node-image.sh --docker`: the node image with Debian's docker CLI) with this
//! machine's Docker socket mounted, so the node's `docker` drives the real engine. No registry can
//! be reached here: the service image is the node image tagged under a test name, present
//! locally, which INSTALL finds without pulling. A scratch directory is mounted at the same path
//! in the node, so a volume's host directory is the same on the node and on the engine's host.
//! Containers carry the label `weft.container.node=<node id>`, node ids start with `weft-test-`,
//! and the guard removes the containers and the tag (also when a test panics). Needs docker and
//! the images: skipped without them, failed in CI. Also: the 27 docker actions of Coopr's shipped
//! catalog load into a real server and read as containers (no docker needed).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::contract::{self, AutomatorFixture};
use serde_json::{json, Map, Value};
use weft_model::FailureReason;
use weft_provisioner::automators::docker::{LABEL_NODE, LABEL_SERVICE, RESULT_KEY};
use weft_provisioner::automators::DockerAutomator;
use weft_provisioner::ssh::scan_host_key;
use weft_provisioner::task::Action;
use weft_provisioner::{Automator, PluginError, TaskOutput};

use crate::common::until;
use crate::ssh::Node;

const DOCKER_IMAGE: &str = "weft-node:bookworm-docker";
const BUILD_DOCKER: &str = "images/build-node-image.sh --docker";
/// The image the service containers are made from (tagged under a test name).
const APP_BASE: &str = "weft-node:bookworm";

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// A node with the docker CLI and the engine's socket, the service image, a node id of the
/// test's own and a scratch directory shared with the node; all removed on drop.
struct Setup {
    node: Node,
    node_id: String,
    image: String,
    scratch: tempfile::TempDir,
}

impl Setup {
    async fn start() -> Option<Setup> {
        if !weft_testkit::require("docker") {
            return None;
        }
        let scratch = tempfile::Builder::new()
            .prefix("weft-test-docker-")
            .tempdir()
            .unwrap();
        let path = scratch.path().display().to_string();
        let share = format!("{path}:{path}");
        let options = [
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-v",
            &share,
        ];
        let node = Node::start_with(DOCKER_IMAGE, BUILD_DOCKER, &options).await?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let unique = format!("{}x{nanos}", std::process::id());
        let image = format!("weft-test-app:{unique}");
        docker(&["tag", APP_BASE, &image]).expect("the service image is tagged");
        Some(Setup {
            node,
            node_id: format!("weft-test-{unique}"),
            image,
            scratch,
        })
    }

    /// The config of the ready node, reached as `user` (`root`, or `weft` through sudo).
    async fn ready(&self, user: &str) -> Map<String, Value> {
        let host_key = scan_host_key("127.0.0.1", self.node.port, Duration::from_secs(5))
            .await
            .unwrap();
        let key = if user == "root" {
            &self.node.root_key
        } else {
            &self.node.user_key
        };
        obj(json!({
            "hostname": "docker-node",
            "ipaddresses": {"access_v4": "127.0.0.1", "bind_v4": "127.0.0.1"},
            "ssh-auth": {"user": user, "key": key, "port": self.node.port},
            "ssh_host_keys": host_key.to_result(),
        }))
    }

    /// The containers (all states) the automator made for this node: name -> id.
    fn containers(&self) -> BTreeMap<String, String> {
        let filter = format!("label={LABEL_NODE}={}", self.node_id);
        docker(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &filter,
            "--format",
            "{{.Names}} {{.ID}}",
        ])
        .expect("docker ps")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, i)| (n.to_string(), i.to_string()))
        .collect()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for name in self.containers().keys() {
            let _ = docker(&["rm", "-f", "-v", name]);
        }
        let _ = docker(&["rmi", &self.image]);
    }
}

/// One action of the docker automator for service `service` on the node.
async fn act(
    a: &DockerAutomator,
    node: &Map<String, Value>,
    node_id: &str,
    service: &str,
    action: Action,
    fields: Value,
) -> Result<TaskOutput, PluginError> {
    let mut c = node.clone();
    c.insert("automators".into(), json!(["docker"]));
    c.insert(
        "service".into(),
        json!({"name": service, "action": {"type": "docker", "fields": fields}}),
    );
    let t = contract::task(action, node_id, c, Duration::from_secs(60));
    weft_provisioner::plugin::run_automator(a, action, &t).await
}

/// `docker inspect` of a container as JSON.
fn inspect(name: &str) -> Value {
    let text = docker(&["container", "inspect", name]).expect("docker inspect");
    serde_json::from_str::<Value>(&text).unwrap()[0].clone()
}

/// A TCP port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn docker_passes_the_automator_contract_on_a_node_over_ssh() {
    let Some(s) = Setup::start().await else {
        return;
    };
    let a = DockerAutomator::new();
    let fx = AutomatorFixture {
        node: s.ready("root").await,
        ok_fields: obj(json!({"image_name": s.image, "publish_ports": "",
            "environment_variables": "WEFT_CONTRACT=yes",
            // PID 1 ignores TERM unless it handles it: without the trap, STOP waits 10 s.
            "command": r#"sh -c 'trap "exit 0" TERM; sleep 3600 & wait'"#})),
        failing_fields: (
            obj(json!({"image_name": "x; touch /tmp/pwned"})),
            "fields.image_name".into(),
        ),
        // A `docker` command that hangs cannot be asked for with fields.
        hanging_fields: None,
    };
    contract::automator_contract(&a, fx, &s.node_id).await;
    // The contract ends with REMOVE: nothing is left.
    assert_eq!(s.containers(), BTreeMap::new());
}

#[tokio::test]
async fn docker_runs_the_service_with_its_ports_env_and_volumes_once_through_sudo() {
    let Some(s) = Setup::start().await else {
        return;
    };
    let a = DockerAutomator::new();
    // A user who is not root: every docker command goes through sudo.
    let cfg = s.ready("weft").await;
    let port = free_port();
    let data = s.scratch.path().join("www");
    let fields = json!({
        "image_name": s.image,
        "publish_ports": format!("{port}:8080"),
        "environment_variables": "WEFT_GREETING=hello world,MODE=test",
        "volumes": format!("{}:/srv/www:ro", data.display()),
        "command": r#"sh -c 'trap "exit 0" TERM; python3 -m http.server 8080 --directory /srv/www & wait'"#,
    });
    let run = |action, f: &Value| act(&a, &cfg, &s.node_id, "web", action, f.clone());

    let out = run(Action::Install, &fields).await.unwrap();
    assert!(out.stdout.contains("not pulled"), "{}", out.stdout);
    for action in [Action::Configure, Action::Initialize] {
        run(action, &fields).await.unwrap();
    }
    assert!(
        s.containers().is_empty(),
        "configure and initialize run nothing"
    );

    let out = run(Action::Start, &fields).await.unwrap();
    let made = s.containers();
    assert_eq!(made.len(), 1, "{made:?}");
    let (name, id) = made.iter().next().unwrap();
    assert_eq!(name, &format!("weft-web-{}", s.node_id));
    assert_eq!(
        out.result[RESULT_KEY]["web"],
        json!({"name": name, "id": id})
    );
    let c = inspect(name);
    assert_eq!(c["State"]["Running"], true);
    assert_eq!(c["Config"]["Image"], s.image.as_str());
    assert_eq!(c["Config"]["Labels"][LABEL_SERVICE], "web");
    let env: Vec<&str> = c["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(env.contains(&"WEFT_GREETING=hello world"), "{env:?}");
    assert!(env.contains(&"MODE=test"), "{env:?}");
    assert_eq!(
        c["HostConfig"]["PortBindings"]["8080/tcp"][0]["HostPort"],
        port.to_string()
    );
    assert!(data.is_dir(), "start made the volume's host directory");
    // The container really serves the volume on the published port.
    std::fs::write(data.join("hello.txt"), "hello from the volume\n").unwrap();
    let url = format!("http://127.0.0.1:{port}/hello.txt");
    let http = reqwest::Client::new();
    let body = until(Duration::from_secs(30), "the container serves", || async {
        let r = http.get(&url).send().await.ok()?;
        r.status().is_success().then_some(())?;
        r.text().await.ok()
    })
    .await;
    assert_eq!(body, "hello from the volume\n");

    // Another service publishing the same port: START fails, may pass on a retry, and leaves
    // no container of its own behind.
    let e = act(&a, &cfg, &s.node_id, "web2", Action::Start, fields.clone())
        .await
        .unwrap_err();
    assert!(e.retryable && e.reason == FailureReason::Capacity, "{e:?}");
    assert_eq!(&s.containers(), &made, "web2's half-made container is gone");

    // Start again: the same container, not a second one.
    let out = run(Action::Start, &fields).await.unwrap();
    assert!(out.stdout.contains("runs already"), "{}", out.stdout);
    assert_eq!(&s.containers(), &made);

    // Stop, and start again: the stopped container is replaced by one new container.
    run(Action::Stop, &fields).await.unwrap();
    assert_eq!(inspect(name)["State"]["Running"], false);
    let e = a_check(&a, &cfg, &s.node_id).await.unwrap_err();
    assert!(e.retryable, "{e}");
    run(Action::Start, &fields).await.unwrap();
    let again = s.containers();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again[name], made[name], "a new container");
    assert_eq!(inspect(name)["State"]["Running"], true);
    a_check(&a, &cfg, &s.node_id).await.unwrap();

    // Changed fields: START replaces the running container.
    let mut changed = fields.clone();
    changed["environment_variables"] = json!("WEFT_GREETING=bye");
    let out = run(Action::Start, &changed).await.unwrap();
    assert!(
        out.stdout.contains("removed the running container"),
        "{}",
        out.stdout
    );
    assert_eq!(s.containers().len(), 1);
    let env = inspect(name)["Config"]["Env"].to_string();
    assert!(
        env.contains("WEFT_GREETING=bye") && !env.contains("MODE=test"),
        "{env}"
    );

    // Remove; stop and remove of a container that is not there succeed, even with broken
    // fields (a delete always completes).
    run(Action::Remove, &fields).await.unwrap();
    assert!(s.containers().is_empty());
    let broken = json!({"image_name": "--privileged"});
    for action in [Action::Stop, Action::Remove] {
        let out = run(action, &broken).await.unwrap();
        assert!(out.stdout.contains("nothing to"), "{}", out.stdout);
    }
}

/// One try of the health check of service `web`.
async fn a_check(
    a: &DockerAutomator,
    cfg: &Map<String, Value>,
    node_id: &str,
) -> Result<TaskOutput, PluginError> {
    let mut c = cfg.clone();
    c.insert(
        "service".into(),
        json!({"name": "web", "action": {"type": "docker", "fields": {}}}),
    );
    let t = contract::task(Action::Healthcheck, node_id, c, Duration::from_secs(30));
    a.healthcheck(&t).await
}

#[tokio::test]
async fn hostile_docker_fields_are_refused_and_nothing_runs() {
    let Some(s) = Setup::start().await else {
        return;
    };
    let a = DockerAutomator::new();
    let cfg = s.ready("root").await;
    let pwned = format!("/tmp/weft-test-pwned-{}", std::process::id());
    let image = s.image.as_str();
    let hostile = [
        (
            "image_name",
            json!({"image_name": format!("x; touch {pwned}")}),
        ),
        ("image_name", json!({"image_name": "--privileged"})),
        (
            "image_name",
            json!({"image_name": format!("$(touch {pwned})")}),
        ),
        (
            "image_name",
            json!({"image_name": format!("{image} -v /:/host")}),
        ),
        (
            "environment_variables",
            json!({"image_name": image, "environment_variables": format!("A=1\ntouch {pwned}")}),
        ),
        (
            "environment_variables",
            json!({"image_name": image, "environment_variables": "--privileged"}),
        ),
        (
            "publish_ports",
            json!({"image_name": image, "publish_ports": format!("80;touch {pwned}")}),
        ),
        (
            "publish_ports",
            json!({"image_name": image, "publish_ports": "70000"}),
        ),
        (
            "volumes",
            json!({"image_name": image, "volumes": format!("/tmp:/x;touch {pwned}")}),
        ),
        (
            "volumes",
            json!({"image_name": image, "volumes": "/../../etc:/x"}),
        ),
        (
            "links",
            json!({"image_name": image, "links": "--privileged"}),
        ),
        (
            "command",
            json!({"image_name": image, "command": format!("sh -c 'touch {pwned}")}),
        ),
    ];
    for (field, fields) in &hostile {
        for action in [Action::Install, Action::Configure, Action::Start] {
            let e = act(&a, &cfg, &s.node_id, "evil", action, fields.clone())
                .await
                .map(|out| panic!("{action:?} {fields} was not refused: {out:?}"))
                .unwrap_err();
            assert!(!e.retryable, "{action:?} {fields}: {e}");
            assert_eq!(e.reason, FailureReason::Invalid, "{e}");
            assert!(
                e.message.starts_with(&format!("fields.{field}: ")),
                "{action:?} {fields}: {}",
                e.message
            );
        }
    }
    let e = act(
        &a,
        &cfg,
        &s.node_id,
        "evil",
        Action::Start,
        json!({"image_name": image, "publish_ports": "70000"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.message, "fields.publish_ports: 70000 is not a port");
    assert_eq!(
        s.node
            .exec(&format!("test -e {pwned} && echo yes || echo no")),
        "no\n"
    );
    assert!(!std::path::Path::new(&pwned).exists());
    assert!(s.containers().is_empty(), "nothing ran");
}

#[tokio::test]
async fn an_image_from_an_unreachable_registry_is_retried_and_a_node_without_docker_is_not() {
    let Some(s) = Setup::start().await else {
        return;
    };
    let a = DockerAutomator::new();
    let cfg = s.ready("root").await;
    // Nothing listens on port 1: the pull fails on the network, which a retry may fix.
    let fields =
        json!({"image_name": format!("localhost:1/weft-test-nothing:{}", std::process::id())});
    let e = act(
        &a,
        &cfg,
        &s.node_id,
        "remote",
        Action::Install,
        fields.clone(),
    )
    .await
    .unwrap_err();
    assert!(e.retryable && e.reason == FailureReason::Network, "{e:?}");
    assert!(e.stderr.contains("connection refused"), "{e:?}");
    // START of an image that is not there fails, and leaves no container.
    assert!(act(&a, &cfg, &s.node_id, "remote", Action::Start, fields)
        .await
        .is_err());
    assert!(s.containers().is_empty());

    // A node without the docker CLI: BOOTSTRAP fails for good, saying so.
    let Some(plain) = Node::start().await else {
        return;
    };
    let host_key = scan_host_key("127.0.0.1", plain.port, Duration::from_secs(5))
        .await
        .unwrap();
    let mut bare = obj(json!({
        "hostname": "plain",
        "ipaddresses": {"access_v4": "127.0.0.1", "bind_v4": "127.0.0.1"},
        "ssh-auth": {"user": "root", "key": plain.root_key, "port": plain.port},
        "ssh_host_keys": host_key.to_result(),
    }));
    bare.insert("automators".into(), json!(["docker"]));
    let t = contract::task(Action::Bootstrap, &s.node_id, bare, Duration::from_secs(30));
    let e = a.bootstrap(&t).await.unwrap_err();
    assert!(!e.retryable && e.reason == FailureReason::NotFound, "{e:?}");
    assert!(e.message.contains("docker is not on the node"), "{e}");
}

/// The docker actions of Coopr's shipped catalog (coopr-templates, `services/*-docker.json`):
/// nine services with INSTALL, START and STOP each, 27 actions. (service, install, start, stop)
const COOPR_SERVICES: &[(&str, &str, &str, &str)] = &[
    (
        "cassandra-docker",
        r#"{"image_name": "cassandra"}"#,
        r#"{"image_name": "cassandra", "publish_ports": "7000,7001,7199,9042,9160",
            "volumes": "/data/cassandra:/var/lib/cassandra"}"#,
        r#"{"image_name": "cassandra"}"#,
    ),
    (
        "cdap-sandbox-docker",
        r#"{"image_name": "caskdata/cdap-sandbox", "publish_ports": "11011,11015"}"#,
        r#"{"image_name": "caskdata/cdap-sandbox", "publish_ports": "11011,11015"}"#,
        r#"{"image_name": "caskdata/cdap-sandbox", "publish_ports": "11011,11015"}"#,
    ),
    (
        "coopr-standalone-docker",
        r#"{"image_name": "caskdata/coopr-standalone", "publish_ports": "8100,55054"}"#,
        r#"{"image_name": "caskdata/coopr-standalone", "publish_ports": "8100,55054"}"#,
        r#"{"image_name": "caskdata/coopr-standalone", "publish_ports": "8100,55054"}"#,
    ),
    (
        "elasticsearch-docker",
        r#"{"image_name": "elasticsearch"}"#,
        r#"{"image_name": "elasticsearch", "publish_ports": "9200,9300",
            "volumes": "/data/elasticsearch:/usr/share/elasticsearch/data",
            "command": "elasticsearch -Des.network.host=0.0.0.0"}"#,
        r#"{"image_name": "elasticsearch"}"#,
    ),
    (
        "mongodb-docker",
        r#"{"image_name": "mongo"}"#,
        r#"{"image_name": "mongo", "publish_ports": "27017", "volumes": "/data/mongodb:/data/db"}"#,
        r#"{"image_name": "mongo"}"#,
    ),
    (
        "mysql-docker",
        r#"{"image_name": "mysql"}"#,
        r#"{"image_name": "mysql", "publish_ports": "3306",
            "environment_variables": "MYSQL_ROOT_PASSWORD=somedefaultpassword",
            "volumes": "/data/mysql:/var/lib/mysql"}"#,
        r#"{"image_name": "mysql"}"#,
    ),
    (
        "postgresql-docker",
        r#"{"image_name": "postgres"}"#,
        r#"{"image_name": "postgres", "publish_ports": "5432",
            "environment_variables": "POSTGRES_PASSWORD=somedefaultpassword",
            "volumes": "/data/postgresql:/var/lib/postgresql/data"}"#,
        r#"{"image_name": "postgres"}"#,
    ),
    (
        "solr-docker",
        r#"{"image_name": "solr"}"#,
        r#"{"image_name": "solr", "publish_ports": "8983"}"#,
        r#"{"image_name": "solr"}"#,
    ),
    (
        "zookeeper-docker",
        r#"{"image_name": "zookeeper"}"#,
        r#"{"image_name": "zookeeper", "publish_ports": "2181,2888,3888"}"#,
        r#"{"image_name": "zookeeper"}"#,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coopr_catalog_docker_services_load_and_every_action_reads() {
    use reqwest::Method;
    use weft_provisioner::automators::docker::ContainerSpec;
    use weft_provisioner::{Agent, Plugins};

    let (s, _) = crate::common::Server::start("coopr").await;
    let plugins = Plugins::new().automator(std::sync::Arc::new(DockerAutomator::new()));
    let agent = Agent::start(s.config("p-coopr"), plugins)
        .await
        .expect("agent starts");
    let mut actions = 0;
    for (name, install, start, stop) in COOPR_SERVICES {
        let mut acts = Map::new();
        for (action, fields) in [("install", install), ("start", start), ("stop", stop)] {
            let fields: Value = serde_json::from_str(fields).unwrap();
            // Every action's fields read as a container, as START would run it.
            let flat: BTreeMap<String, String> = fields
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            ContainerSpec::from_fields(&flat)
                .unwrap_or_else(|e| panic!("{name} {action}: {}", e.message));
            acts.insert(action.into(), json!({"type": "docker", "fields": fields}));
            actions += 1;
        }
        let service = json!({"name": name, "description": "from Coopr's catalog",
            "provisioner": {"actions": acts}});
        let (code, body) = s
            .ext(
                Method::PUT,
                "coopr",
                &format!("/v2/services/{name}"),
                Some(service),
            )
            .await;
        assert_eq!(code, 200, "{name}: {body}");
    }
    assert_eq!(actions, 27);
    let (code, body) = s
        .ext(
            Method::GET,
            "coopr",
            "/v2/services/elasticsearch-docker",
            None,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["provisioner"]["actions"]["start"]["fields"]["command"],
        "elasticsearch -Des.network.host=0.0.0.0"
    );
    agent.shutdown().await;
}

/// Removes the containers matching a filter, and an image tag, on drop.
struct Leftovers {
    filter: String,
    image: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let ids = docker(&["ps", "-aq", "--filter", &self.filter]).unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = docker(&["rm", "-f", "-v", id]);
        }
        let _ = docker(&["rmi", &self.image]);
    }
}

/// Waits (bounded) until the cluster has status `want`; another final status fails.
async fn cluster_status(s: &crate::common::Server, tenant: &str, id: &str, want: &str) -> Value {
    until(Duration::from_secs(180), want, || async {
        let (_, c) = s
            .ext(
                reqwest::Method::GET,
                tenant,
                &format!("/v2/clusters/{id}"),
                None,
            )
            .await;
        let st = c["status"].as_str().unwrap_or_default().to_string();
        if st == want {
            return Some(c);
        }
        assert!(
            !["incomplete", "inconsistent", "terminated"].contains(&st.as_str()),
            "cluster went {st}: {c}"
        );
        None
    })
    .await
}

/// A cluster of one `local` node (this machine) whose service is a container: made through a
/// real server and provisioner, the macro `%ip.self%` expanded into its environment, serving on
/// its published port; the cluster's DELETE removes the container (the local provider does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_cluster_runs_a_docker_service_and_its_delete_removes_the_container() {
    use reqwest::Method;
    if !weft_testkit::require("docker") {
        return;
    }
    if docker(&["image", "inspect", APP_BASE]).is_err() {
        weft_testkit::skip_or_fail(
            APP_BASE,
            "the image is missing (images/build-node-image.sh)",
        );
        return;
    }
    let unique = format!("{}", std::process::id());
    let svc = format!("weft-test-web-{unique}");
    let image = format!("weft-test-app:e2e{unique}");
    docker(&["tag", APP_BASE, &image]).unwrap();
    let _gone = Leftovers {
        filter: format!("label={LABEL_SERVICE}={svc}"),
        image: image.clone(),
    };
    const T: &str = "dock";
    let (s, tenant_id) = crate::common::Server::start(T).await;
    let plugins = weft_provisioner::Plugins::new()
        .provider(std::sync::Arc::new(
            weft_provisioner::local::LocalProvider::new(&s.provisioner_data()),
        ))
        .automator(std::sync::Arc::new(DockerAutomator::new()));
    let agent = weft_provisioner::Agent::start(s.config("p-dock"), plugins)
        .await
        .expect("agent starts");
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 2, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let port = free_port();
    let fields = json!({"image_name": image, "publish_ports": format!("{port}:8080"),
        "environment_variables": "NODE_IP=%ip.self%,GREETING=hello",
        "command": r#"sh -c 'trap "exit 0" TERM; python3 -m http.server 8080 --directory /etc & wait'"#});
    let actions: Map<String, Value> = ["install", "start", "stop", "remove"]
        .iter()
        .map(|a| (a.to_string(), json!({"type": "docker", "fields": fields})))
        .collect();
    let service = json!({"name": svc, "provisioner": {"actions": actions}});
    let (code, body) = s
        .ext(
            Method::PUT,
            T,
            &format!("/v2/services/{svc}"),
            Some(service),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let tpl = json!({"name": "docker-web", "compatibility": {"hardwaretypes": ["small"],
        "imagetypes": ["host"], "services": [svc]},
        "defaults": {"services": [svc], "provider": "local", "hardwaretype": "small",
            "imagetype": "host", "config": {}},
        "constraints": {"size": {"min": 1, "max": 1}}});
    let (code, body) = s
        .ext(Method::POST, T, "/v2/clustertemplates", Some(tpl))
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": "dock", "clusterTemplate": "docker-web", "numMachines": 1})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let c = cluster_status(&s, T, &id, "active").await;
    let node_ip = c["nodes"][0]["properties"]["ipaddresses"]["bind_v4"]
        .as_str()
        .unwrap()
        .to_string();

    let filter = format!("label={LABEL_SERVICE}={svc}");
    let names = docker(&["ps", "--filter", &filter, "--format", "{{.Names}}"]).unwrap();
    let names: Vec<&str> = names.lines().collect();
    assert_eq!(names.len(), 1, "one running container: {names:?}");
    let env = inspect(names[0])["Config"]["Env"].to_string();
    assert!(env.contains(&format!("NODE_IP={node_ip}")), "{env}");
    let url = format!("http://127.0.0.1:{port}/hostname");
    until(Duration::from_secs(30), "the container serves", || async {
        let r = s.http.get(&url).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;

    let (code, body) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{body}");
    cluster_status(&s, T, &id, "terminated").await;
    let left = docker(&["ps", "-aq", "--filter", &filter]).unwrap();
    assert_eq!(left.trim(), "", "the delete removed the container");
    agent.shutdown().await;
}
