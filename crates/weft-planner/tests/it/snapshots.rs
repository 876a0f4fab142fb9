//! Snapshot tests of the text rendering of every operation on the two example clusters.
//! Bless changes with `INSTA_UPDATE=always cargo test -p weft-planner` (or `cargo insta review`).

use serde_json::json;
use weft_planner::plan;

use crate::fixtures::*;

fn snapshot_all(
    prefix: &str,
    cases: Vec<(String, weft_planner::Operation, weft_planner::PlanInput)>,
) {
    for (name, op, input) in cases {
        let p = plan(&op, &input).unwrap_or_else(|e| panic!("{prefix} {name}: {e}"));
        insta::assert_snapshot!(format!("{prefix}-{name}"), p.render_text());
    }
}

#[test]
fn three_service_cluster_every_operation() {
    snapshot_all(
        "three",
        cases(
            three_services(),
            three_layout(),
            json!({}),
            "web",
            "app",
            "app",
        ),
    );
}

#[test]
fn hadoop_like_cluster_every_operation() {
    snapshot_all(
        "hadoop",
        cases(
            hadoop_services(),
            hadoop_layout(),
            hadoop_config(),
            "hbase-regionserver",
            "hadoop-hdfs-datanode",
            "hadoop-hdfs-namenode",
        ),
    );
}

/// Health runs: the HEALTHCHECK of each service that declares one (web with shell, db with
/// chef-solo; app declares none), on every node or on the nodes asked for, and nothing else.
#[test]
fn healthcheck_runs_only_declared_checks() {
    use std::collections::BTreeSet;
    use weft_model::{ProvisionerAction, ServiceAction};
    use weft_planner::{Operation, PlanInput};

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
            ProvisionerAction::Healthcheck,
            ServiceAction {
                automator,
                ..Default::default()
            },
        );
    }
    let layout = three_layout();
    let input = PlanInput {
        before: vec![],
        after: layout.clone(),
        services,
        config: json!({}),
        rollout: None,
        force: false,
    };
    let all = plan(&Operation::Healthcheck { nodes: None }, &input).unwrap();
    assert!(all
        .tasks
        .iter()
        .all(|t| t.action == ProvisionerAction::Healthcheck));
    insta::assert_snapshot!("three-healthcheck", all.render_text());
    let first: BTreeSet<String> = [layout[0].id.clone()].into();
    let some = plan(
        &Operation::Healthcheck {
            nodes: Some(first.clone()),
        },
        &input,
    )
    .unwrap();
    assert!(!some.tasks.is_empty());
    assert!(some.tasks.iter().all(|t| first.contains(&t.node_id)));
    insta::assert_snapshot!("three-healthcheck-one-node", some.render_text());
    let unknown: BTreeSet<String> = ["nope".to_string()].into();
    let e = plan(
        &Operation::Healthcheck {
            nodes: Some(unknown),
        },
        &input,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("node nope is not in the cluster"),
        "{e}"
    );
}
