//! The contract test suite every plugin passes: [`provider_contract`] for providers and
//! [`automator_contract`] for automators. They run a real plugin through its lifecycle and assert
//! the rules the agent and the server rely on: a valid plugin type; CREATE and DELETE idempotent;
//! DELETE of nothing is success; CONFIRM answers both addresses; STATUS finds a confirmed machine
//! and no deleted one; bad input is a non-retryable
//! error, never a panic; a failing action reports its output; a hanging one ends at the time-out.
//! They panic on a broken rule, so call them from tests.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use weft_model::{MachineReport, MachineState, PluginType, Validate, STATUS_RESULT_KEY};

use weft_provisioner::plugin::{run_automator, Automator, Provider};
use weft_provisioner::task::{Action, PluginError, Task, TaskOutput};
use weft_provisioner::transport::{CommandSpec, Transport};

/// A task for `action` on `node_id` with `config`.
pub(crate) fn task(
    action: Action,
    node_id: &str,
    config: Map<String, Value>,
    timeout: Duration,
) -> Task {
    let raw = json!({"taskId": format!("contract-{}-{}", node_id, action.lower()),
        "jobId": "contract-job", "clusterId": "contract", "taskName": action.lower().to_uppercase(),
        "nodeId": node_id, "config": config});
    Task::from_json(raw, timeout).expect("a well-formed task")
}

/// What STATUS answers for the node (`result.machine.state`), which must be a report.
async fn machine_state(
    p: &dyn Provider,
    node_id: &str,
    config: &Map<String, Value>,
    timeout: Duration,
) -> MachineState {
    let out = ok(
        p.status(&task(Action::Status, node_id, config.clone(), timeout))
            .await,
        "status",
    );
    let report: MachineReport = out
        .result
        .get(STATUS_RESULT_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .expect("status answers result.machine");
    report.state
}

/// The plugin type is valid and its `required` sets name declared fields.
pub(crate) fn check_plugin_type(t: &PluginType) {
    assert!(!t.name.is_empty(), "a plugin type has a name");
    t.validate()
        .unwrap_or_else(|e| panic!("plugin type {} is invalid: {e}", t.name));
    for (who, spec) in &t.parameters {
        for set in &spec.required {
            for f in set {
                assert!(
                    spec.fields.contains_key(f),
                    "{}: required field {f} ({who:?}) is not declared",
                    t.name
                );
            }
        }
    }
}

fn ok(r: Result<TaskOutput, PluginError>, what: &str) -> TaskOutput {
    r.unwrap_or_else(|e| {
        panic!(
            "{what} failed: {e} (stdout {:?}, stderr {:?})",
            e.stdout, e.stderr
        )
    })
}

/// Runs a provider through create, confirm and delete on a fresh node, with `fields` as the
/// provider's fields. Returns the addresses CONFIRM answered.
pub(crate) async fn provider_contract(p: &dyn Provider, fields: Map<String, Value>, node_id: &str) {
    provider_contract_on(p, fields, Map::new(), node_id).await
}

/// [`provider_contract`] for a node whose tasks also carry `node` in their config: what the
/// server gives a node before its CREATE (a pool host's address and credentials, for the
/// `hostpool` provider).
pub(crate) async fn provider_contract_on(
    p: &dyn Provider,
    fields: Map<String, Value>,
    node: Map<String, Value>,
    node_id: &str,
) {
    let t = p.plugin_type();
    check_plugin_type(&t);
    let timeout = Duration::from_secs(60);
    let mut config = node;
    config.insert(
        "provider".into(),
        json!({"name": "contract", "providertype": t.name, "provisioner": fields}),
    );
    config.insert("hostname".into(), json!(format!("{node_id}.contract")));

    let made = check_create(p, node_id, &config, timeout).await;
    check_confirm(p, node_id, &made, timeout).await;
    check_delete(p, node_id, made, config, timeout).await;
}

/// CREATE answers a provider id, and again the same one. Returns the config of the node made
/// (`config` with CREATE's results).
async fn check_create(
    p: &dyn Provider,
    node_id: &str,
    config: &Map<String, Value>,
    timeout: Duration,
) -> Map<String, Value> {
    let created = ok(
        p.create(&task(Action::Create, node_id, config.clone(), timeout))
            .await,
        "create",
    );
    let id = created
        .result
        .get("providerid")
        .and_then(Value::as_str)
        .expect("create answers result.providerid")
        .to_string();
    assert!(!id.is_empty());
    let again = ok(
        p.create(&task(Action::Create, node_id, config.clone(), timeout))
            .await,
        "create again",
    );
    assert_eq!(
        again.result.get("providerid"),
        created.result.get("providerid"),
        "create is idempotent"
    );
    let mut made = config.clone();
    made.extend(created.result);
    made
}

/// CONFIRM answers both addresses, the same ones again; STATUS finds the machine.
async fn check_confirm(
    p: &dyn Provider,
    node_id: &str,
    made: &Map<String, Value>,
    timeout: Duration,
) {
    let confirmed = ok(
        p.confirm(&task(Action::Confirm, node_id, made.clone(), timeout))
            .await,
        "confirm",
    );
    let ips = confirmed
        .ipaddresses
        .clone()
        .expect("confirm answers ipaddresses");
    assert!(
        ips.contains_key("access_v4") && ips.contains_key("bind_v4"),
        "{ips:?}"
    );
    let again = ok(
        p.confirm(&task(Action::Confirm, node_id, made.clone(), timeout))
            .await,
        "confirm again",
    );
    assert_eq!(
        again.ipaddresses, confirmed.ipaddresses,
        "confirm is stable"
    );

    let state = machine_state(p, node_id, made, timeout).await;
    assert_ne!(
        state,
        MachineState::Missing,
        "status finds a confirmed machine"
    );
}

/// DELETE removes the machine (STATUS no longer finds it, CONFIRM fails), and again; a DELETE
/// of nothing (`config`: no provider id) passes, a CONFIRM of nothing fails for good.
async fn check_delete(
    p: &dyn Provider,
    node_id: &str,
    made: Map<String, Value>,
    config: Map<String, Value>,
    timeout: Duration,
) {
    ok(
        p.delete(&task(Action::Delete, node_id, made.clone(), timeout))
            .await,
        "delete",
    );
    let state = machine_state(p, node_id, &made, timeout).await;
    assert!(
        !matches!(state, MachineState::Running | MachineState::Stopped),
        "status finds no deleted machine: {state:?}"
    );
    ok(
        p.delete(&task(Action::Delete, node_id, made.clone(), timeout))
            .await,
        "delete again",
    );
    assert!(
        p.confirm(&task(Action::Confirm, node_id, made, timeout))
            .await
            .is_err(),
        "a deleted node cannot be confirmed"
    );
    ok(
        p.delete(&task(Action::Delete, node_id, config.clone(), timeout))
            .await,
        "delete of nothing",
    );
    let e = p
        .confirm(&task(Action::Confirm, node_id, config, timeout))
        .await
        .expect_err("confirm without a providerid fails");
    assert!(
        !e.retryable,
        "confirm without a providerid is not retryable"
    );
}

/// What an automator's contract run needs.
pub(crate) struct AutomatorFixture {
    /// The config keys of a ready node (addresses and provider results).
    pub(crate) node: Map<String, Value>,
    /// Action fields that succeed for every action.
    pub(crate) ok_fields: Map<String, Value>,
    /// Action fields that fail, and a text the failure's output must contain.
    pub(crate) failing_fields: (Map<String, Value>, String),
    /// Action fields that hang past a one-second task time-out.
    pub(crate) hanging_fields: Option<Map<String, Value>>,
}

fn with_service(
    node: &Map<String, Value>,
    automator: &str,
    fields: &Map<String, Value>,
) -> Map<String, Value> {
    let mut c = node.clone();
    c.insert("automators".into(), json!([automator]));
    c.insert(
        "service".into(),
        json!({"name": "contract-svc", "action": {"type": automator, "fields": fields}}),
    );
    c.insert("cluster".into(), json!({"contract": {"key": "value"}}));
    c
}

/// Runs an automator through bootstrap and every service action on a ready node.
pub(crate) async fn automator_contract(a: &dyn Automator, fx: AutomatorFixture, node_id: &str) {
    let t = a.plugin_type();
    check_plugin_type(&t);
    let timeout = Duration::from_secs(60);
    let good = with_service(&fx.node, &t.name, &fx.ok_fields);
    ok(
        a.bootstrap(&task(Action::Bootstrap, node_id, good.clone(), timeout))
            .await,
        "bootstrap",
    );
    ok(
        a.bootstrap(&task(Action::Bootstrap, node_id, good.clone(), timeout))
            .await,
        "bootstrap again",
    );
    for action in Action::SERVICE {
        ok(
            run_automator(a, action, &task(action, node_id, good.clone(), timeout)).await,
            action.lower(),
        );
    }
    let requires_something = t
        .parameters
        .values()
        .any(|s| s.required.iter().any(|set| !set.is_empty()));
    if requires_something {
        let empty = with_service(&fx.node, &t.name, &Map::new());
        let e = a
            .install(&task(Action::Install, node_id, empty, timeout))
            .await
            .expect_err("an action without its required fields fails");
        assert!(!e.retryable, "a missing field is not retryable: {e}");
    }
    let (fields, marker) = &fx.failing_fields;
    let e = a
        .configure(&task(
            Action::Configure,
            node_id,
            with_service(&fx.node, &t.name, fields),
            timeout,
        ))
        .await
        .expect_err("the failing fields fail");
    let all = format!("{}\n{}\n{}", e.message, e.stdout, e.stderr);
    assert!(
        all.contains(marker.as_str()),
        "a failure reports its output; got {all:?}"
    );
    if let Some(fields) = &fx.hanging_fields {
        let start = Instant::now();
        let e = a
            .start(&task(
                Action::Start,
                node_id,
                with_service(&fx.node, &t.name, fields),
                Duration::from_secs(1),
            ))
            .await
            .expect_err("a hanging action fails at the time-out");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the time-out was not kept"
        );
        assert!(e.message.contains("timed out"), "{e}");
    }
}

/// The contract of a [`weft_provisioner::transport::Transport`], run against a real one: output and exit
/// status, stderr of a failure, environment and working directory, bounded output, a command that
/// hangs killed (with what it started) at the time-out, files written with parents and mode and
/// read back, an empty command refused for good. `dir` is a scratch directory on the node that the
/// transport may write to (it is created).
pub(crate) async fn transport_contract(t: &dyn Transport, dir: &str) {
    check_status_and_streams(t).await;
    check_files(t, dir).await;
    check_bounded_output(t).await;
    check_time_out(t).await;
    let e = t
        .run(&CommandSpec::new(Vec::new()))
        .await
        .expect_err("an empty command is refused");
    assert!(!e.retryable, "{e}");
}

fn sh(line: &str) -> CommandSpec {
    CommandSpec::new(vec!["sh".into(), "-c".into(), line.into()])
}

/// Output and exit status of a command that passes and of one that fails.
async fn check_status_and_streams(t: &dyn Transport) {
    let out = t
        .run(&sh("echo hello; echo oops >&2"))
        .await
        .expect("a command runs");
    assert_eq!(out.exit, Some(0), "{out:?}");
    assert!(!out.timed_out);
    assert_eq!(out.stdout, "hello\n");
    assert_eq!(out.stderr, "oops\n");

    let out = t
        .run(&sh("echo failing >&2; exit 7"))
        .await
        .expect("a failing command runs");
    assert_eq!(out.exit, Some(7), "{out:?}");
    assert!(!out.success());
    assert_eq!(out.stderr, "failing\n");
}

/// Files written with parents and mode, read back by a command with a working directory and
/// environment; a file replaced.
async fn check_files(t: &dyn Transport, dir: &str) {
    t.write_file(
        &format!("{dir}/sub/deeper/file.txt"),
        b"it's \"quoted\"\n$HOME\n",
        0o640,
    )
    .await
    .expect("a file is written, parents created");
    let mut cat = sh("cat sub/deeper/file.txt; stat -c %a sub/deeper/file.txt; echo \"$WEFT_X\"");
    cat.cwd = Some(dir.to_string());
    cat.env.insert("WEFT_X".into(), "a b 'c' $d".into());
    let out = t.run(&cat).await.expect("cat runs");
    assert_eq!(
        out.stdout, "it's \"quoted\"\n$HOME\n640\na b 'c' $d\n",
        "file, mode, working directory and environment: {out:?}"
    );
    t.write_file(&format!("{dir}/sub/deeper/file.txt"), b"new", 0o600)
        .await
        .expect("a file is replaced");
    let out = t
        .run(&sh(&format!("cat {dir}/sub/deeper/file.txt")))
        .await
        .expect("cat runs");
    assert_eq!(out.stdout, "new");
}

/// Output past the bound is cut, the cut marked, the end kept.
async fn check_bounded_output(t: &dyn Transport) {
    let mut big = sh("i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; echo end");
    big.max_output = 100;
    let out = t.run(&big).await.expect("a chatty command runs");
    assert!(out.stdout.ends_with("line-1999\nend\n"), "{:?}", out.stdout);
    assert!(
        out.stdout.len() < 200 && out.stdout.contains("snipped"),
        "output is bounded and the cut is marked: {:?}",
        out.stdout
    );
}

/// A command that hangs is killed at the time-out with what it started; its output so far is
/// kept.
async fn check_time_out(t: &dyn Transport) {
    // Sleep lengths of this test process's own (each test runs in a process of its own), so that
    // counting them sees no other test's sleeps on the same machine.
    let pid = std::process::id();
    let marker = format!("weft-contract-{pid}");
    let (a, b) = (1_000_000 + 2 * pid, 1_000_001 + 2 * pid);
    let mut hang = sh(&format!(
        "sleep {a} & echo started; exec sh -c 'sleep {b}; echo {marker}'"
    ));
    hang.timeout = Duration::from_secs(1);
    let start = Instant::now();
    let out = t.run(&hang).await.expect("a hanging command runs");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit, None);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the time-out was not kept"
    );
    assert_eq!(
        out.stdout, "started\n",
        "output before the time-out is kept"
    );
    let left = t
        .run(&sh(&format!(
            "ps -eo args | grep -c -e '^sleep {a}$' -e '^sleep {b}$' || true"
        )))
        .await
        .expect("ps runs");
    assert_eq!(
        left.stdout.trim(),
        "0",
        "what the command started is killed with it"
    );
}
