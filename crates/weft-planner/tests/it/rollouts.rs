//! Rolling changes: batches (canaries first, alone, then `maxInFlight` at a time), a health gate
//! after each batch, dependency rules within a batch only; snapshots of each kind, and a
//! simulation that no batch starts before the previous batch and its gate are done.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use weft_model::{MaxInFlight, ProvisionerAction as A};
use weft_planner::{plan, Operation, Plan, PlanInput, PlanNode, RolloutPlan, Tracker};

use crate::fixtures::*;

/// db <- app <- web, every service with a health check; one db node, four app+web nodes.
fn input(rollout: Option<RolloutPlan>) -> PlanInput {
    let all = [
        "install",
        "configure",
        "initialize",
        "start",
        "stop",
        "remove",
        "healthcheck",
    ];
    let layout: Vec<PlanNode> = std::iter::once(node("n1", 1000, &["db"]))
        .chain((2..=5).map(|i| node(&format!("n{i}"), 999 + i, &["app", "web"])))
        .collect();
    PlanInput {
        before: vec![],
        after: layout,
        services: vec![
            svc("db", &all, &[], &[]),
            svc("app", &all, &["db"], &[]),
            svc("web", &all, &["app"], &[]),
        ],
        config: json!({}),
        rollout,
        force: false,
    }
}

fn rollout(canaries: usize, m: MaxInFlight) -> Option<RolloutPlan> {
    Some(RolloutPlan {
        canaries,
        max_in_flight: m,
        gates: true,
        nodes: None,
    })
}

/// Nodes changed, and (node, service) checks run.
type Step = (BTreeSet<String>, BTreeSet<(String, String)>);

/// Runs the plan with a tracker, completing every ready task each round. Returns, per round,
/// the nodes whose non-check tasks ran, and the checks that ran.
fn rounds(p: &Plan) -> Vec<Step> {
    let mut t = Tracker::new(p);
    let mut ready = t.initially_ready();
    let mut out = Vec::new();
    while !ready.is_empty() {
        let mut changed = BTreeSet::new();
        let mut checks = BTreeSet::new();
        let mut next = Vec::new();
        for i in ready {
            let task = &p.tasks[i];
            if task.action == A::Healthcheck {
                checks.insert((task.node_id.clone(), task.service.clone().unwrap()));
            } else {
                changed.insert(task.node_id.clone());
            }
            next.extend(t.complete(i));
        }
        out.push((changed, checks));
        next.sort_unstable();
        next.dedup();
        ready = next;
    }
    out
}

/// The batches in the order they ran: nodes whose changes overlap in time form a batch; a batch's
/// gate is the checks that ran after it and before the next batch.
fn batches(p: &Plan) -> Vec<Step> {
    let rounds = rounds(p);
    let mut span: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (r, (changed, checks)) in rounds.iter().enumerate() {
        assert!(
            changed.is_empty() || checks.is_empty(),
            "a gate check ran beside a change: {changed:?} {checks:?}"
        );
        for n in changed {
            span.entry(n.clone()).or_insert((r, r)).1 = r;
        }
    }
    let mut nodes: Vec<(String, (usize, usize))> = span.into_iter().collect();
    nodes.sort_by_key(|(_, s)| *s);
    let mut groups: Vec<(BTreeSet<String>, usize, usize)> = Vec::new();
    for (n, (first, last)) in nodes {
        match groups.last_mut() {
            Some(g) if first <= g.2 => {
                g.0.insert(n);
                g.2 = g.2.max(last);
            }
            _ => groups.push((BTreeSet::from([n]), first, last)),
        }
    }
    let ends: Vec<usize> = groups
        .iter()
        .skip(1)
        .map(|g| g.1)
        .chain([rounds.len()])
        .collect();
    groups
        .into_iter()
        .zip(ends)
        .map(|((nodes, _, last), end)| {
            let checks = rounds[last + 1..end]
                .iter()
                .flat_map(|(_, c)| c.iter().cloned())
                .collect();
            (nodes, checks)
        })
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn checks(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    pairs
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_rolling_restart_does_the_canary_alone_then_batches_each_behind_a_gate() {
    let op = Operation::Restart {
        service: Some("app".into()),
    };
    let p = plan(&op, &input(rollout(1, MaxInFlight::Count(2)))).unwrap();
    insta::assert_snapshot!("rollout-restart-app", p.render_text());
    // Only app restarts (web, which needs it, keeps running); each gate checks the batch's app
    // and every web (web depends on app).
    assert!(p
        .tasks
        .iter()
        .all(|t| t.action == A::Healthcheck || t.service.as_deref() == Some("app")));
    let webs = [("n2", "web"), ("n3", "web"), ("n4", "web"), ("n5", "web")];
    let gate = |apps: &[&str]| {
        let mut c = checks(&webs);
        c.extend(apps.iter().map(|n| (n.to_string(), "app".to_string())));
        c
    };
    assert_eq!(
        batches(&p),
        vec![
            (set(&["n2"]), gate(&["n2"])),
            (set(&["n3", "n4"]), gate(&["n3", "n4"])),
            (set(&["n5"]), gate(&["n5"])),
        ]
    );
}

#[test]
fn a_rolling_upgrade_by_percentage_checks_the_service_and_its_dependents() {
    let op = Operation::Upgrade {
        service: "web".into(),
        batch_size: 1,
    };
    let p = plan(&op, &input(rollout(0, MaxInFlight::Percent(50)))).unwrap();
    insta::assert_snapshot!("rollout-upgrade-web", p.render_text());
    assert_eq!(
        batches(&p),
        vec![
            (set(&["n2", "n3"]), checks(&[("n2", "web"), ("n3", "web")])),
            (set(&["n4", "n5"]), checks(&[("n4", "web"), ("n5", "web")])),
        ]
    );
}

#[test]
fn a_rolling_reconfigure_keeps_dependency_order_within_a_batch_only() {
    let op = Operation::Reconfigure { restart: true };
    let p = plan(&op, &input(rollout(1, MaxInFlight::Count(4)))).unwrap();
    insta::assert_snapshot!("rollout-reconfigure", p.render_text());
    let b = batches(&p);
    assert_eq!(b.len(), 2, "{b:?}");
    // The canary (db's node) first; its gate checks db and everything that needs it.
    assert_eq!(b[0].0, set(&["n1"]));
    assert_eq!(b[0].1.len(), 1 + 4 + 4);
    assert_eq!(b[1].0, set(&["n2", "n3", "n4", "n5"]));
}

#[test]
fn a_revert_runs_only_the_changed_nodes_without_gates() {
    let only = set(&["n3", "n2"]);
    let r = Some(RolloutPlan {
        canaries: 0,
        max_in_flight: MaxInFlight::Count(1),
        gates: false,
        nodes: Some(only.clone()),
    });
    let op = Operation::Reconfigure { restart: true };
    let p = plan(&op, &input(r)).unwrap();
    insta::assert_snapshot!("rollout-revert-reconfigure", p.render_text());
    assert!(p.tasks.iter().all(|t| only.contains(&t.node_id)));
    assert!(p.tasks.iter().all(|t| t.action != A::Healthcheck));
    let order: Vec<BTreeSet<String>> = batches(&p).into_iter().map(|b| b.0).collect();
    assert_eq!(order, vec![set(&["n2"]), set(&["n3"])]);
}

#[test]
fn a_rollout_is_refused_where_it_means_nothing_or_names_unknown_nodes() {
    let e = plan(
        &Operation::Expand,
        &input(rollout(1, MaxInFlight::Count(1))),
    )
    .unwrap_err();
    assert!(e.to_string().contains("a rollout applies only to"), "{e}");
    let r = Some(RolloutPlan {
        canaries: 1,
        max_in_flight: MaxInFlight::Count(1),
        gates: true,
        nodes: Some(set(&["nope"])),
    });
    let e = plan(&Operation::Restart { service: None }, &input(r)).unwrap_err();
    assert!(
        e.to_string().contains("node nope is not in the cluster"),
        "{e}"
    );
}

#[test]
fn without_checks_a_rollout_is_plain_batches() {
    let mut i = input(rollout(1, MaxInFlight::Count(3)));
    for s in &mut i.services {
        s.provisioner.actions.remove(&A::Healthcheck);
    }
    let op = Operation::Restart { service: None };
    let p = plan(&op, &i).unwrap();
    let order: Vec<BTreeSet<String>> = batches(&p).into_iter().map(|b| b.0).collect();
    assert_eq!(
        order,
        vec![set(&["n1"]), set(&["n2", "n3", "n4"]), set(&["n5"])]
    );
}
