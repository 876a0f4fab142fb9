//! The plugin contract suite, run for every plugin weft ships, plus the local provider's and the
//! shell automator's own promises (addresses unique per node, hanging scripts killed).

use std::sync::Arc;
use std::time::Duration;

use crate::contract::{self, AutomatorFixture};
use serde_json::{json, Map, Value};
use weft_provisioner::local::LocalProvider;
use weft_provisioner::plugin::run_automator;
use weft_provisioner::shell::ShellAutomator;
use weft_provisioner::task::Action;
use weft_provisioner::{Automator, Provider};

use crate::common::scripts_dir;

fn providers(dir: &std::path::Path) -> Vec<Arc<dyn Provider>> {
    vec![Arc::new(LocalProvider::new(dir))]
}

fn automators() -> Vec<Arc<dyn Automator>> {
    vec![Arc::new(ShellAutomator::new(vec![scripts_dir()]))]
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn every_provider_passes_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    for p in providers(dir.path()) {
        contract::provider_contract(p.as_ref(), Map::new(), "node-a").await;
    }
}

/// A ready local node: what CREATE and CONFIRM answered, as later tasks see it.
async fn local_node(p: &LocalProvider, node_id: &str) -> Map<String, Value> {
    let t = |a, c| contract::task(a, node_id, c, Duration::from_secs(10));
    let base =
        obj(json!({"provider": {"providertype": "local", "provisioner": {}}, "hostname": "h"}));
    let created = p.create(&t(Action::Create, base.clone())).await.unwrap();
    let mut node = base;
    node.extend(created.result);
    let confirmed = p.confirm(&t(Action::Confirm, node.clone())).await.unwrap();
    node.insert("ipaddresses".into(), json!(confirmed.ipaddresses.unwrap()));
    node
}

#[tokio::test]
async fn every_automator_passes_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    for a in automators() {
        let node = local_node(&local, "node-b").await;
        let fx = AutomatorFixture {
            node: node.clone(),
            ok_fields: obj(
                json!({"script": "#!/bin/bash\necho \"$WEFT_ACTION $WEFT_CONFIG_CONTRACT_KEY\"\n"}),
            ),
            failing_fields: (
                obj(json!({"script": "#!/bin/bash\necho contract-marker >&2\nexit 3\n"})),
                "contract-marker".into(),
            ),
            hanging_fields: Some(obj(json!({"script": "#!/bin/bash\nsleep 600\n"}))),
        };
        contract::automator_contract(a.as_ref(), fx, "node-b").await;
        let t = contract::task(Action::Delete, "node-b", node, Duration::from_secs(10));
        local.delete(&t).await.unwrap();
    }
}

#[tokio::test]
async fn local_nodes_get_their_own_address_and_delete_kills_what_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    let a = local_node(&local, "n1").await;
    let b = local_node(&local, "n2").await;
    assert_ne!(a["ipaddresses"]["bind_v4"], b["ipaddresses"]["bind_v4"]);
    // Two nodes listen on the same port, each on its own address.
    let shell = ShellAutomator::new(vec![]);
    for node in [&a, &b] {
        let mut c = node.clone();
        c.insert("service".into(), json!({"name": "s", "action": {"type": "shell", "fields": {"script":
            "#!/bin/bash\nnohup python3 -m http.server 9999 --bind \"$WEFT_IP\" >srv.log 2>&1 &\necho $! > srv.pid\nsetsid sleep 600 >/dev/null 2>&1 &\necho $! > escaped.pid\n"}}}));
        shell
            .start(&contract::task(
                Action::Start,
                "x",
                c,
                Duration::from_secs(10),
            ))
            .await
            .unwrap();
    }
    let dir_a = std::path::PathBuf::from(a["nodedir"].as_str().unwrap());
    let pids: Vec<u32> = ["srv.pid", "escaped.pid"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(dir_a.join(f))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    for pid in &pids {
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
    local
        .delete(&contract::task(
            Action::Delete,
            "n1",
            a,
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    for pid in &pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        assert!(
            matches!(state, None | Some('Z')),
            "process {pid} survived its node: {stat}"
        );
    }
    assert!(!dir_a.exists());
    // Node b is untouched.
    let dir_b = std::path::PathBuf::from(b["nodedir"].as_str().unwrap());
    let pid_b: u32 = std::fs::read_to_string(dir_b.join("srv.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid_b}/stat")).exists());
    local
        .delete(&contract::task(
            Action::Delete,
            "n2",
            b,
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_hanging_script_is_killed_with_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    let mut node = local_node(&local, "n3").await;
    node.insert("service".into(), json!({"name": "s", "action": {"type": "shell", "fields": {
        "script": "#!/bin/bash\necho started\nsleep 600 &\necho $! > child.pid\nwait\n", "timeout": "1"}}}));
    let shell = ShellAutomator::new(vec![]);
    let e = shell
        .start(&contract::task(
            Action::Start,
            "n3",
            node.clone(),
            Duration::from_secs(60),
        ))
        .await
        .unwrap_err();
    assert!(e.message.contains("timed out after 1s"), "{e}");
    assert!(
        e.stdout.contains("started"),
        "the output so far is reported: {e:?}"
    );
    let dir_n = std::path::PathBuf::from(node["nodedir"].as_str().unwrap());
    let child: u32 = std::fs::read_to_string(dir_n.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .chars()
        .next();
    assert!(
        matches!(state, None | Some('Z')),
        "the script's child survived: {stat}"
    );
    local
        .delete(&contract::task(
            Action::Delete,
            "n3",
            node,
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
}

/// Many local providers creating nodes at once, over a registry holding reservations of nodes
/// whose directories are gone (a provisioner's data removed without DELETE): every node gets an
/// address of its own, and a DELETE gives back only its own.
#[tokio::test]
async fn concurrent_creates_take_over_stale_addresses_without_sharing_one() {
    // Stale reservations: nodes whose provider's directory is removed.
    for i in 0..8 {
        let gone = tempfile::tempdir().unwrap();
        local_node(&LocalProvider::new(gone.path()), &format!("stale-{i}")).await;
    }
    let dirs: Vec<_> = (0..8).map(|_| tempfile::tempdir().unwrap()).collect();
    let providers: Vec<_> = dirs
        .iter()
        .map(|d| Arc::new(LocalProvider::new(d.path())))
        .collect();
    let mut creates = tokio::task::JoinSet::new();
    for (p, local) in providers.iter().enumerate() {
        for n in 0..3 {
            let local = local.clone();
            creates.spawn(async move { (p, local_node(&local, &format!("n{p}-{n}")).await) });
        }
    }
    let made: Vec<_> = creates.join_all().await;
    let addresses: std::collections::BTreeSet<String> = made
        .iter()
        .map(|(_, n)| n["ipaddresses"]["bind_v4"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        addresses.len(),
        made.len(),
        "every node has its own address"
    );
    for (p, node) in made {
        let t = contract::task(Action::Delete, "x", node, Duration::from_secs(10));
        providers[p].delete(&t).await.unwrap();
    }
}

/// Issue 14: the local provider never hands out an address something listens on, and a
/// reservation whose node directory is gone is not stale while a process of that node lives.
/// Other tests may listen on 127.77.x.y at the same time, so the addresses are found by probing
/// rather than assumed.
#[tokio::test]
async fn addresses_in_use_or_held_by_live_processes_are_never_handed_out() {
    let registry = tempfile::tempdir().unwrap();
    // nextest runs each test in a process of its own: this registry is this test's alone.
    std::env::set_var("WEFT_LOCAL_ADDRESSES", registry.path());
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    let delete = |id: &'static str, node: Map<String, Value>| {
        let t = contract::task(Action::Delete, id, node, Duration::from_secs(10));
        let local = &local;
        async move { local.delete(&t).await.unwrap() }
    };
    let ip = |n: &Map<String, Value>| n["ipaddresses"]["bind_v4"].as_str().unwrap().to_string();
    // The address the provider hands out next, taken by something that is not a node.
    let probe = local_node(&local, "probe-a").await;
    let first = ip(&probe);
    delete("probe-a", probe).await;
    let squatter = std::net::TcpListener::bind(format!("{first}:0")).unwrap();
    // The next one after that, reserved by a node whose directory is gone while a process of
    // that node still runs.
    let probe = local_node(&local, "probe-b").await;
    let second = ip(&probe);
    delete("probe-b", probe).await;
    assert_ne!(first, second, "a listened-on address is skipped");
    std::fs::write(registry.path().join(&second), "/nowhere/nodes/ghost-node").unwrap();
    let mut ghost = std::process::Command::new("sleep")
        .arg("600")
        .env("WEFT_LOCAL_NODE", "ghost-node")
        .spawn()
        .unwrap();

    let a = local_node(&local, "fresh-a").await;
    let got = ip(&a);
    ghost.kill().unwrap();
    ghost.wait().unwrap();
    drop(squatter);
    assert_ne!(got, first, "never an address something listens on");
    assert_ne!(
        got, second,
        "never an address a live process of its node holds"
    );
    delete("fresh-a", a).await;
}

/// A HEALTHCHECK task of the shell automator on a fresh local node, with `script` and the
/// check's settings.
async fn health_task(
    local: &LocalProvider,
    node_id: &str,
    script: &str,
    settings: Value,
) -> weft_provisioner::Task {
    let mut node = local_node(local, node_id).await;
    let mut action = json!({"type": "shell", "fields": {"script": script}});
    for (k, v) in settings.as_object().unwrap() {
        action[k] = v.clone();
    }
    node.insert("service".into(), json!({"name": "s", "action": action}));
    contract::task(Action::Healthcheck, node_id, node, Duration::from_secs(60))
}

fn health_of(out: &weft_provisioner::TaskOutput) -> weft_model::HealthReport {
    serde_json::from_value(out.result["health"].clone()).unwrap()
}

#[tokio::test]
async fn a_shell_healthcheck_tries_until_healthy_or_out_of_tries() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    let shell = ShellAutomator::new(vec![]);
    // Healthy from the third try on (each try counts itself in the node directory).
    let script = "#!/bin/bash\nn=$(( $(cat tries 2>/dev/null || echo 0) + 1 ))\necho $n > tries\necho \"try $n\"\n[ $n -ge 3 ] || { echo \"not yet\" >&2; exit 7; }\n";
    let settings = json!({"tries": 3, "interval": 0, "timeout": 10});
    let t = health_task(&local, "h1", script, settings).await;
    let out = run_automator(&shell, Action::Healthcheck, &t)
        .await
        .unwrap();
    let r = health_of(&out);
    assert!(r.healthy && r.tries == 3, "{r:?}");
    assert!(
        out.stdout.contains("try 3"),
        "the last try's output: {out:?}"
    );

    // Two tries are not enough: unhealthy, and still a task that succeeded.
    let settings = json!({"tries": 2, "interval": 0, "timeout": 10});
    let t = health_task(&local, "h2", script, settings).await;
    let out = run_automator(&shell, Action::Healthcheck, &t)
        .await
        .unwrap();
    let r = health_of(&out);
    assert!(!r.healthy && r.tries == 2, "{r:?}");
    assert!(r.message.unwrap().contains("exited with 7"));
    assert!(
        out.stdout.contains("try 2") && out.stderr.contains("not yet"),
        "{out:?}"
    );

    // The interval separates the tries.
    let settings = json!({"tries": 2, "interval": 1, "timeout": 10});
    let t = health_task(&local, "h3", "#!/bin/bash\nexit 1\n", settings).await;
    let started = std::time::Instant::now();
    let out = run_automator(&shell, Action::Healthcheck, &t)
        .await
        .unwrap();
    assert!(!health_of(&out).healthy);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // A check without a script cannot pass: one try, unhealthy, with the reason.
    let t = health_task(&local, "h4", "", json!({"tries": 5, "interval": 30})).await;
    let r = health_of(
        &run_automator(&shell, Action::Healthcheck, &t)
            .await
            .unwrap(),
    );
    assert!(!r.healthy && r.tries == 1, "{r:?}");
    assert!(r.message.unwrap().contains("script field is required"));
}

#[tokio::test]
async fn a_shell_healthcheck_that_hangs_is_cut_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalProvider::new(dir.path());
    let shell = ShellAutomator::new(vec![]);
    let settings = json!({"tries": 1, "interval": 0, "timeout": 1});
    let t = health_task(
        &local,
        "h5",
        "#!/bin/bash\necho waiting\nsleep 30\n",
        settings,
    )
    .await;
    let started = std::time::Instant::now();
    let out = run_automator(&shell, Action::Healthcheck, &t)
        .await
        .unwrap();
    let r = health_of(&out);
    assert!(!r.healthy && r.tries == 1, "{r:?}");
    assert!(r.message.unwrap().contains("timed out after 1s"));
    assert!(out.stdout.contains("waiting"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
