//! Stateful services: JOIN and LEAVE around membership changes, one change at a time, and the
//! availability rule (quorum, minHealthy) refusing plans that would break it.

use serde_json::json;
use weft_model::{MaxInFlight, ProvisionerAction as A, Service};
use weft_planner::{plan, Operation, Plan, PlanError, PlanInput, PlanNode, RolloutPlan};

use crate::fixtures::*;

const ACTIONS: [&str; 8] = [
    "install",
    "configure",
    "initialize",
    "start",
    "stop",
    "join",
    "leave",
    "healthcheck",
];

/// An etcd-like service: every action, JOIN and LEAVE included, and a quorum rule.
fn etcd(max_concurrent: Option<u64>) -> Service {
    let mut s = svc("etcd", &ACTIONS, &[], &[]);
    s.availability = Some(weft_model::Availability {
        quorum: true,
        min_healthy: None,
    });
    s.membership = max_concurrent.map(|n| weft_model::Membership {
        max_concurrent: Some(n),
    });
    s
}

/// A stateless service on the same nodes (its tasks never join or leave).
fn web() -> Service {
    svc(
        "web",
        &["install", "configure", "start", "stop"],
        &["etcd"],
        &[],
    )
}

fn members(n: u64) -> Vec<PlanNode> {
    (1..=n)
        .map(|i| node(&format!("n{i}"), 1000 + i, &["etcd", "web"]))
        .collect()
}

fn input(before: Vec<PlanNode>, after: Vec<PlanNode>, services: Vec<Service>) -> PlanInput {
    PlanInput {
        before,
        after,
        services,
        config: json!({}),
        rollout: None,
        force: false,
    }
}

fn task(p: &Plan, node: &str, action: A) -> usize {
    p.tasks
        .iter()
        .position(|t| {
            t.node_id == node && t.action == action && t.service.as_deref() == Some("etcd")
        })
        .unwrap_or_else(|| panic!("no {action:?} of etcd on {node}"))
}

fn has(p: &Plan, node: &str, action: A) -> bool {
    p.tasks
        .iter()
        .any(|t| t.node_id == node && t.action == action && t.service.as_deref() == Some("etcd"))
}

#[test]
fn a_create_forms_the_cluster_without_joins() {
    let p = plan(
        &Operation::Create,
        &input(vec![], members(3), vec![etcd(None), web()]),
    )
    .unwrap();
    assert!(p.tasks.iter().all(|t| t.action != A::Join));
    assert!(p.tasks.iter().all(|t| t.action != A::Healthcheck));
}

#[test]
fn an_expand_joins_new_members_one_at_a_time_each_serving_before_the_next() {
    let p = plan(
        &Operation::Expand,
        &input(members(3), members(5), vec![etcd(None), web()]),
    )
    .unwrap();
    insta::assert_snapshot!("etcd-expand-3-to-5", p.render_text());
    for old in ["n1", "n2", "n3"] {
        assert!(!has(&p, old, A::Join), "{old} is a member already");
    }
    for new in ["n4", "n5"] {
        let (join, start) = (task(&p, new, A::Join), task(&p, new, A::Start));
        assert!(precedes(&p, task(&p, new, A::Initialize), join));
        assert!(precedes(&p, join, start), "JOIN before START on {new}");
        assert!(precedes(&p, start, task(&p, new, A::Healthcheck)));
    }
    // The second change starts when the first member serves.
    assert!(precedes(
        &p,
        task(&p, "n4", A::Healthcheck),
        task(&p, "n5", A::Join)
    ));
}

#[test]
fn max_concurrent_lets_that_many_changes_run_together() {
    let p = plan(
        &Operation::Expand,
        &input(members(3), members(7), vec![etcd(Some(2)), web()]),
    )
    .unwrap();
    let join = |n: &str| task(&p, n, A::Join);
    let done = |n: &str| task(&p, n, A::Healthcheck);
    assert!(!precedes(&p, done("n4"), join("n5")), "n4 and n5 together");
    assert!(precedes(&p, done("n4"), join("n6")));
    assert!(precedes(&p, done("n5"), join("n7")));
}

#[test]
fn a_shrink_leaves_before_it_stops_one_member_at_a_time() {
    let p = plan(
        &Operation::Shrink,
        &input(members(5), members(3), vec![etcd(None), web()]),
    )
    .unwrap();
    insta::assert_snapshot!("etcd-shrink-5-to-3", p.render_text());
    for gone in ["n4", "n5"] {
        let (leave, stop) = (task(&p, gone, A::Leave), task(&p, gone, A::Stop));
        assert!(precedes(&p, leave, stop), "LEAVE before STOP on {gone}");
        let delete = p
            .tasks
            .iter()
            .position(|t| t.node_id == gone && t.action == A::Delete)
            .unwrap();
        assert!(precedes(&p, stop, delete));
    }
    let (first, second) = if precedes(&p, task(&p, "n4", A::Stop), task(&p, "n5", A::Leave)) {
        ("n4", "n5")
    } else {
        ("n5", "n4")
    };
    assert!(
        precedes(&p, task(&p, first, A::Stop), task(&p, second, A::Leave)),
        "one LEAVE at a time"
    );
    // The members that stay are configured for the smaller cluster after both have left.
    for stay in ["n1", "n2", "n3"] {
        assert!(!has(&p, stay, A::Leave));
        assert!(precedes(
            &p,
            task(&p, second, A::Stop),
            task(&p, stay, A::Configure)
        ));
    }
}

#[test]
fn removing_the_whole_service_does_not_leave_member_by_member() {
    let mut after = members(3);
    for n in &mut after {
        n.services.remove("etcd");
    }
    let svcs = vec![
        etcd(None),
        svc("web", &["install", "start", "stop"], &[], &[]),
    ];
    let p = plan(
        &Operation::RemoveService {
            service: "etcd".into(),
        },
        &input(members(3), after, svcs),
    )
    .unwrap();
    assert!(p.tasks.iter().all(|t| t.action != A::Leave));
}

#[test]
fn replacing_a_live_member_leaves_first_and_joins_again() {
    let layout = members(3);
    let op = |alive| Operation::ReplaceNode {
        node: "n2".into(),
        alive,
    };
    let inp = input(vec![], layout, vec![etcd(None), web()]);
    let p = plan(&op(true), &inp).unwrap();
    insta::assert_snapshot!("etcd-replace-live-member", p.render_text());
    let delete = p
        .tasks
        .iter()
        .position(|t| t.node_id == "n2" && t.action == A::Delete)
        .unwrap();
    let leave = task(&p, "n2", A::Leave);
    assert!(precedes(&p, leave, delete));
    assert!(precedes(&p, delete, task(&p, "n2", A::Join)));
    assert!(precedes(
        &p,
        task(&p, "n2", A::Join),
        task(&p, "n2", A::Start)
    ));
    // A lost machine cannot leave: the new one still joins.
    let p = plan(&op(false), &inp).unwrap();
    assert!(!has(&p, "n2", A::Leave));
    assert!(has(&p, "n2", A::Join));
}

fn refused(r: Result<Plan, PlanError>) -> String {
    match r {
        Err(e @ PlanError::Unavailable { .. }) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a plan that breaks quorum was made"),
    }
}

#[test]
fn plans_that_would_break_quorum_are_refused_unless_forced() {
    let svcs = vec![etcd(None), web()];
    // Stopping etcd on all three members at once.
    let stop = Operation::Stop {
        service: Some("etcd".into()),
    };
    let same = input(vec![], members(3), svcs.clone());
    let msg = refused(plan(&stop, &same));
    assert!(
        msg.contains("service etcd needs 2 of its 3 nodes") && msg.contains("quorum"),
        "{msg}"
    );
    assert!(msg.contains("takes down 3 at once"), "{msg}");
    // A restart of every member at once, too.
    let restart = Operation::Restart {
        service: Some("etcd".into()),
    };
    refused(plan(&restart, &same));
    // Shrinking 3 to 1: the second LEAVE would leave one of two.
    let msg = refused(plan(
        &Operation::Shrink,
        &input(members(3), members(1), svcs.clone()),
    ));
    assert!(msg.contains("needs 2 of its 2 nodes"), "{msg}");
    // Forced, the operator's call.
    let mut forced = same.clone();
    forced.force = true;
    assert!(plan(&stop, &forced).is_ok());
}

#[test]
fn a_rolling_restart_one_at_a_time_keeps_quorum_and_5_to_3_is_allowed() {
    let mut rolling = input(vec![], members(3), vec![etcd(None), web()]);
    rolling.rollout = Some(RolloutPlan {
        canaries: 0,
        max_in_flight: MaxInFlight::Count(1),
        gates: true,
        nodes: None,
    });
    let restart = Operation::Restart {
        service: Some("etcd".into()),
    };
    assert!(plan(&restart, &rolling).is_ok());
    rolling.rollout.as_mut().unwrap().max_in_flight = MaxInFlight::Count(2);
    refused(plan(&restart, &rolling));
    assert!(plan(
        &Operation::Shrink,
        &input(members(5), members(3), vec![etcd(None), web()])
    )
    .is_ok());
}

#[test]
fn min_healthy_counts_nodes_not_halves() {
    let mut s = etcd(None);
    s.availability = Some(weft_model::Availability {
        quorum: false,
        min_healthy: Some(3),
    });
    // 4 nodes, a lost machine replaced: 3 stay.
    let inp = input(vec![], members(4), vec![s.clone(), web()]);
    let replace = Operation::ReplaceNode {
        node: "n4".into(),
        alive: false,
    };
    assert!(plan(&replace, &inp).is_ok());
    // 3 nodes: replacing one leaves 2 of the 3 required.
    let inp = input(vec![], members(3), vec![s, web()]);
    let replace = Operation::ReplaceNode {
        node: "n3".into(),
        alive: false,
    };
    let msg = refused(plan(&replace, &inp));
    assert!(msg.contains("minHealthy 3"), "{msg}");
}

#[test]
fn each_batch_of_a_rolling_restart_waits_for_the_others_to_be_healthy() {
    let mut rolling = input(vec![], members(3), vec![etcd(None), web()]);
    rolling.rollout = Some(RolloutPlan {
        canaries: 0,
        max_in_flight: MaxInFlight::Count(1),
        gates: true,
        nodes: None,
    });
    let restart = Operation::Restart {
        service: Some("etcd".into()),
    };
    let p = plan(&restart, &rolling).unwrap();
    insta::assert_snapshot!("etcd-rolling-restart", p.render_text());
    let check = |node: &str| {
        p.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.node_id == node
                    && t.action == A::Healthcheck
                    && t.service.as_deref() == Some("etcd")
            })
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    // The first batch stops n1 only once n2 and n3 answer their checks.
    let stop_n1 = task(&p, "n1", A::Stop);
    for other in ["n2", "n3"] {
        assert!(
            check(other).iter().any(|&c| precedes(&p, c, stop_n1)),
            "{other} is checked before n1 stops"
        );
    }
}
