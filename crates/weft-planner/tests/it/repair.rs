//! Drift operations: a check (STATUS of every machine, then the declared health checks) and the
//! replacement of one node, as snapshots and as rules.

use std::collections::BTreeSet;

use serde_json::json;
use weft_model::{ProvisionerAction as A, ServiceAction};
use weft_planner::{plan, Operation, Plan, PlanInput};

use crate::fixtures::*;

fn input(services: Vec<weft_model::Service>, layout: Vec<weft_planner::PlanNode>) -> PlanInput {
    PlanInput {
        before: vec![],
        after: layout,
        services,
        config: json!({}),
        rollout: None,
        force: false,
    }
}

/// The three-service cluster, with health checks on web and db (app declares none).
fn three_checked() -> PlanInput {
    let mut services = three_services();
    for s in services
        .iter_mut()
        .filter(|s| s.name == "web" || s.name == "db")
    {
        let automator = s
            .provisioner
            .actions
            .values()
            .next()
            .unwrap()
            .automator
            .clone();
        s.provisioner.actions.insert(
            A::Healthcheck,
            ServiceAction {
                automator,
                ..Default::default()
            },
        );
    }
    input(services, three_layout())
}

fn position(p: &Plan, node: &str, action: A, service: Option<&str>) -> usize {
    p.tasks
        .iter()
        .position(|t| t.node_id == node && t.action == action && t.service.as_deref() == service)
        .unwrap_or_else(|| panic!("no {action:?} {service:?} on {node}"))
}

#[test]
fn a_check_asks_every_machine_then_runs_the_declared_checks() {
    let input = three_checked();
    let all = plan(&Operation::Check { nodes: None }, &input).unwrap();
    insta::assert_snapshot!("three-check", all.render_text());
    assert_eq!(all.action, "CLUSTER_CHECK");
    for n in ["n1", "n2", "n3"] {
        let status = position(&all, n, A::Status, None);
        for (i, t) in all.tasks.iter().enumerate() {
            if t.node_id == n && t.action == A::Healthcheck {
                assert!(precedes(&all, status, i), "{n}: STATUS first");
            }
        }
    }
    assert!(all
        .tasks
        .iter()
        .all(|t| matches!(t.action, A::Status | A::Healthcheck)));

    let one: BTreeSet<String> = ["n2".to_string()].into();
    let some = plan(&Operation::Check { nodes: Some(one) }, &input).unwrap();
    insta::assert_snapshot!("three-check-one-node", some.render_text());
    assert!(some.tasks.iter().all(|t| t.node_id == "n2"));

    let nope: BTreeSet<String> = ["nope".to_string()].into();
    let e = plan(&Operation::Check { nodes: Some(nope) }, &input).unwrap_err();
    assert!(
        e.to_string().contains("node nope is not in the cluster"),
        "{e}"
    );
}

#[test]
fn replacing_a_node_rebuilds_it_and_refreshes_the_others() {
    let input = three_checked();
    let p = plan(
        &Operation::ReplaceNode {
            node: "n1".into(),
            alive: false,
        },
        &input,
    )
    .unwrap();
    insta::assert_snapshot!("three-replace-node", p.render_text());
    assert_eq!(p.action, "REPLACE_NODE");
    // The node itself: a new machine, then its services from scratch.
    let chain = [
        position(&p, "n1", A::Delete, None),
        position(&p, "n1", A::Create, None),
        position(&p, "n1", A::Confirm, None),
        position(&p, "n1", A::Bootstrap, None),
        position(&p, "n1", A::Install, Some("db")),
        position(&p, "n1", A::Configure, Some("db")),
        position(&p, "n1", A::Start, Some("db")),
    ];
    for w in chain.windows(2) {
        assert!(
            precedes(&p, w[0], w[1]),
            "{:?} then {:?}",
            p.tasks[w[0]],
            p.tasks[w[1]]
        );
    }
    // The others re-configure after its CONFIRM; app needs db at runtime (and web needs app), so
    // they also restart, app only after the new db started, web after app.
    let confirm = chain[2];
    let db_start = chain[6];
    for n in ["n2", "n3"] {
        let app_conf = position(&p, n, A::Configure, Some("app"));
        let web_conf = position(&p, n, A::Configure, Some("web"));
        assert!(precedes(&p, confirm, app_conf) && precedes(&p, confirm, web_conf));
        let app_start = position(&p, n, A::Start, Some("app"));
        assert!(
            precedes(&p, db_start, app_start),
            "{n}: app starts after db"
        );
        let web_start = position(&p, n, A::Start, Some("web"));
        assert!(
            precedes(&p, app_start, web_start),
            "{n}: web starts after app"
        );
        assert!(p
            .tasks
            .iter()
            .all(|t| t.node_id != n || t.service.is_some()));
    }

    let e = plan(
        &Operation::ReplaceNode {
            node: "nope".into(),
            alive: false,
        },
        &input,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("node nope is not in the cluster"),
        "{e}"
    );
}

#[test]
fn replacing_a_hadoop_worker() {
    let input = input(hadoop_services(), hadoop_layout());
    let p = plan(
        &Operation::ReplaceNode {
            node: "worker2".into(),
            alive: false,
        },
        &input,
    )
    .unwrap();
    insta::assert_snapshot!("hadoop-replace-worker", p.render_text());
    assert!(p
        .tasks
        .iter()
        .filter(|t| t.node_id == "worker2")
        .any(|t| t.action == A::Create));
    assert!(p
        .tasks
        .iter()
        .filter(|t| t.node_id != "worker2")
        .all(|t| matches!(t.action, A::Configure | A::Stop | A::Start)));
}

#[test]
fn drift_operations_keep_the_layout() {
    let mut input = three_checked();
    input.before = input.after.clone();
    input.before.pop();
    for op in [
        Operation::Check { nodes: None },
        Operation::ReplaceNode {
            node: "n1".into(),
            alive: false,
        },
    ] {
        let e = plan(&op, &input).unwrap_err();
        assert!(e.to_string().contains("n3"), "{op:?}: {e}");
    }
}
