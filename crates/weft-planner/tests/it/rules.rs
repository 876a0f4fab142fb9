//! Behaviour of the dependency rules, operations and errors on small hand-made clusters.

use std::collections::BTreeSet;

use serde_json::json;
use weft_model::ProvisionerAction as A;
use weft_planner::{plan, EdgeKind, Operation, Plan, PlanError, PlanInput, Tracker, Vertex};

use crate::fixtures::*;

fn find(p: &Plan, node: &str, action: A, service: Option<&str>) -> usize {
    p.tasks
        .iter()
        .position(|t| t.node_id == node && t.action == action && t.service.as_deref() == service)
        .unwrap_or_else(|| panic!("no task {action:?} {service:?} on {node}"))
}

/// Tasks that `task` waits for directly by a dependency edge, looking through gates.
fn waits_for(p: &Plan, task: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut todo = vec![Vertex::Task(task)];
    while let Some(v) = todo.pop() {
        for (from, kind) in p.predecessors(v) {
            if kind != EdgeKind::Dependency {
                continue;
            }
            match from {
                Vertex::Task(i) => {
                    out.insert(i);
                }
                g @ Vertex::Gate(_) => todo.push(g),
            }
        }
    }
    out
}

fn reaches(p: &Plan, from: usize, to: usize) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![Vertex::Task(from)];
    while let Some(v) = todo.pop() {
        if v == Vertex::Task(to) {
            return true;
        }
        if seen.insert(v) {
            todo.extend(p.edges.iter().filter(|e| e.from == v).map(|e| e.to));
        }
    }
    false
}

fn create(
    services: Vec<weft_model::Service>,
    after: Vec<weft_planner::PlanNode>,
) -> Result<Plan, PlanError> {
    plan(
        &Operation::Create,
        &PlanInput {
            after,
            services,
            ..Default::default()
        },
    )
}

#[test]
fn pass_through_and_minimisation_follow_coopr() {
    // s4 needs s2, s3, s6; s2 has no START and needs s1; s3 needs s1; s6 has no START and needs s5.
    let all = ["install", "start"];
    let services = vec![
        svc("s1", &all, &[], &[]),
        svc("s2", &["install"], &["s1"], &[]),
        svc("s3", &all, &["s1"], &[]),
        svc("s4", &all, &["s2", "s3", "s6"], &[]),
        svc("s5", &all, &[], &[]),
        svc("s6", &["install"], &["s5"], &[]),
    ];
    let p = create(
        services,
        vec![
            node("a", 1000, &["s1", "s2", "s3"]),
            node("b", 1001, &["s4", "s5", "s6"]),
        ],
    )
    .unwrap();
    let start4 = find(&p, "b", A::Start, Some("s4"));
    let deps: BTreeSet<usize> = waits_for(&p, start4)
        .into_iter()
        .filter(|&i| p.tasks[i].action == A::Start)
        .collect();
    let want: BTreeSet<usize> = [
        find(&p, "a", A::Start, Some("s3")),
        find(&p, "b", A::Start, Some("s5")),
    ]
    .into();
    assert_eq!(deps, want);
    assert!(reaches(&p, find(&p, "a", A::Start, Some("s1")), start4));
}

#[test]
fn runtime_requirement_orders_every_start_and_reverses_stops() {
    let p = plan(
        &Operation::Restart { service: None },
        &PlanInput {
            after: three_layout(),
            services: three_services(),
            ..Default::default()
        },
    )
    .unwrap();
    for n in ["n2", "n3"] {
        assert!(reaches(
            &p,
            find(&p, "n1", A::Start, Some("db")),
            find(&p, n, A::Start, Some("app"))
        ));
        assert!(reaches(
            &p,
            find(&p, n, A::Stop, Some("app")),
            find(&p, "n1", A::Stop, Some("db"))
        ));
        for m in ["n2", "n3"] {
            assert!(reaches(
                &p,
                find(&p, n, A::Start, Some("app")),
                find(&p, m, A::Start, Some("web"))
            ));
            assert!(reaches(
                &p,
                find(&p, n, A::Stop, Some("web")),
                find(&p, m, A::Stop, Some("app"))
            ));
        }
    }
}

#[test]
fn provides_stands_for_every_provider() {
    let mut zk = svc("zk", &["start"], &[], &[]);
    zk.dependencies.provides = vec!["coordination".into()];
    let mut etcd = svc("etcd", &["start"], &[], &[]);
    etcd.dependencies.provides = vec!["coordination".into()];
    let app = svc("app", &["start"], &["coordination"], &[]);
    let p = create(
        vec![zk, etcd, app],
        vec![
            node("a", 1000, &["zk"]),
            node("b", 1001, &["etcd"]),
            node("c", 1002, &["app"]),
        ],
    )
    .unwrap();
    let start = find(&p, "c", A::Start, Some("app"));
    let deps = waits_for(&p, start);
    assert!(deps.contains(&find(&p, "a", A::Start, Some("zk"))));
    assert!(deps.contains(&find(&p, "b", A::Start, Some("etcd"))));
}

#[test]
fn uses_orders_like_requires_when_present() {
    let db = svc("db", &["install"], &[], &[]);
    let mut app = svc("app", &["install"], &[], &[]);
    app.dependencies.install.uses = vec!["db".into(), "absent".into()];
    let p = create(
        vec![db, app],
        vec![node("a", 1000, &["db"]), node("b", 1001, &["app"])],
    )
    .unwrap();
    assert!(
        waits_for(&p, find(&p, "b", A::Install, Some("app"))).contains(&find(
            &p,
            "a",
            A::Install,
            Some("db")
        ))
    );
}

#[test]
fn cyclic_dependencies_name_the_cycle() {
    let services = vec![
        svc("a", &["start"], &["b"], &[]),
        svc("b", &["start"], &["c"], &[]),
        svc("c", &["start"], &["a"], &[]),
    ];
    let e = create(services, vec![node("x", 1000, &["a", "b", "c"])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "runtime dependencies form a cycle: a -> b -> c -> a"
    );
    let services = vec![
        svc("a", &["install"], &[], &["b"]),
        svc("b", &["install"], &[], &["a"]),
    ];
    let e = create(services, vec![node("x", 1000, &["a"])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "install dependencies form a cycle: a -> b -> a"
    );
}

#[test]
fn one_task_per_node_and_no_stage_barrier() {
    let p = create(hadoop_services(), hadoop_layout()).unwrap();
    // Every stage has at most one task per node.
    for stage in p.stages() {
        let nodes: BTreeSet<&str> = stage.iter().map(|&i| p.tasks[i].node_id.as_str()).collect();
        assert_eq!(nodes.len(), stage.len());
    }
    // Release tasks as they complete: the master's firewall install does not wait for workers.
    let mut tracker = Tracker::new(&p);
    let ready = tracker.initially_ready();
    assert_eq!(ready.len(), 4, "one CREATE per node");
    let master_create = find(&p, "master", A::Create, None);
    assert_eq!(
        tracker.complete(master_create),
        vec![find(&p, "master", A::Confirm, None)]
    );
    assert!(p.stages().len() <= p.coopr_stages().len());
}

#[test]
fn a_node_does_not_wait_for_another_nodes_sub_stages() {
    // Node a runs one long chain; node b three short ones. Coopr splits the INSTALL stage in three
    // sub-stages that node a must sit through; the DAG lets a's chain run alongside.
    let long = svc(
        "long",
        &["install", "configure", "initialize", "start"],
        &[],
        &[],
    );
    let shorts: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| svc(n, &["install"], &[], &[]))
        .collect();
    let mut services = shorts;
    services.push(long);
    let p = create(
        services,
        vec![
            node("a", 1000, &["long"]),
            node("b", 1001, &["x", "y", "z"]),
        ],
    )
    .unwrap();
    assert_eq!(p.coopr_stages().len(), 3 + 3 + 3);
    assert_eq!(p.stages().len(), 3 + 4);
}

#[test]
fn service_tasks_wait_for_every_confirm_unless_their_service_uses_only_its_own_address() {
    let input = PlanInput {
        after: hadoop_layout(),
        services: hadoop_services(),
        config: hadoop_config(),
        ..Default::default()
    };
    let waits = |p: &weft_planner::Plan| {
        let install = find(p, "worker1", A::Install, Some("firewall"));
        ["master", "worker2", "worker3"]
            .iter()
            .all(|n| reaches(p, find(p, n, A::Confirm, None), install))
    };
    // By default every service task sees every node of the plan with its addresses.
    assert!(waits(&plan(&Operation::Create, &input).unwrap()));
    let no_macros = PlanInput {
        config: json!({}),
        ..input.clone()
    };
    assert!(waits(&plan(&Operation::Create, &no_macros).unwrap()));
    // Services that use only their own node's address start as soon as their node is ready...
    let own = |i: &PlanInput| PlanInput {
        services: i
            .services
            .iter()
            .cloned()
            .map(|mut s| {
                s.own_address_only = true;
                s
            })
            .collect(),
        ..i.clone()
    };
    assert!(!waits(&plan(&Operation::Create, &own(&no_macros)).unwrap()));
    // ...unless configuration names other nodes (the hadoop config's macros).
    assert!(waits(&plan(&Operation::Create, &own(&input)).unwrap()));
}

#[test]
fn bootstrap_lists_each_automator_once() {
    let p = create(three_services(), vec![node("a", 1000, &["db", "app"])]).unwrap();
    let b = &p.tasks[find(&p, "a", A::Bootstrap, None)];
    assert_eq!(
        b.automators,
        vec!["chef-solo".to_string(), "shell".to_string()]
    );
}

#[test]
fn upgrade_runs_in_batches_and_rollback_reverses_them() {
    let layout: Vec<_> = (0..5)
        .map(|i| node(&format!("w{i}"), 1000 + i, &["db", "app"]))
        .collect();
    let input = PlanInput {
        after: layout,
        services: three_services(),
        ..Default::default()
    };
    let p = plan(
        &Operation::Upgrade {
            service: "app".into(),
            batch_size: 2,
        },
        &input,
    )
    .unwrap();
    let actions: Vec<A> = p
        .tasks
        .iter()
        .filter(|t| t.node_id == "w0")
        .map(|t| t.action)
        .collect();
    assert_eq!(
        actions,
        [A::Bootstrap, A::Stop, A::Install, A::Configure, A::Start]
    );
    // Batch {w0,w1} finishes before batch {w2,w3} starts, which finishes before {w4}.
    assert!(reaches(
        &p,
        find(&p, "w1", A::Start, Some("app")),
        find(&p, "w2", A::Bootstrap, None)
    ));
    assert!(reaches(
        &p,
        find(&p, "w3", A::Start, Some("app")),
        find(&p, "w4", A::Bootstrap, None)
    ));
    assert!(!reaches(
        &p,
        find(&p, "w0", A::Start, Some("app")),
        find(&p, "w1", A::Bootstrap, None)
    ));
    let only: BTreeSet<String> = ["w0", "w1", "w2"].iter().map(|s| s.to_string()).collect();
    let r = plan(
        &Operation::RollbackUpgrade {
            service: "app".into(),
            batch_size: 2,
            nodes: Some(only),
        },
        &input,
    )
    .unwrap();
    assert!(r
        .tasks
        .iter()
        .all(|t| ["w0", "w1", "w2"].contains(&t.node_id.as_str())));
    assert!(reaches(
        &r,
        find(&r, "w2", A::Start, Some("app")),
        find(&r, "w0", A::Bootstrap, None)
    ));
    let e = plan(
        &Operation::Upgrade {
            service: "app".into(),
            batch_size: 0,
        },
        &input,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "upgrade: batch size must be at least 1");
}

#[test]
fn start_includes_dependencies_and_stop_includes_dependents() {
    let input = PlanInput {
        after: three_layout(),
        services: three_services(),
        ..Default::default()
    };
    let started: BTreeSet<String> = plan(
        &Operation::Start {
            service: Some("app".into()),
        },
        &input,
    )
    .unwrap()
    .tasks
    .iter()
    .filter_map(|t| t.service.clone())
    .collect();
    assert_eq!(
        started,
        ["app", "db"].iter().map(|s| s.to_string()).collect()
    );
    let stopped: BTreeSet<String> = plan(
        &Operation::Stop {
            service: Some("app".into()),
        },
        &input,
    )
    .unwrap()
    .tasks
    .iter()
    .filter_map(|t| t.service.clone())
    .collect();
    assert_eq!(
        stopped,
        ["app", "web"].iter().map(|s| s.to_string()).collect()
    );
}

#[test]
fn operations_reject_layouts_that_do_not_fit() {
    let services = three_services();
    let l = three_layout();
    let e = plan(
        &Operation::Create,
        &PlanInput {
            before: l.clone(),
            after: l.clone(),
            services: services.clone(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "create: the old layout must be empty, it has 3 nodes"
    );
    let e = plan(
        &Operation::Expand,
        &PlanInput {
            before: l.clone(),
            after: l[..2].to_vec(),
            services: services.clone(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "expand: node n3 is missing from the new layout, but expand removes no nodes"
    );
    let mut without_db = l.clone();
    without_db[0].services.clear();
    let e = plan(
        &Operation::RemoveService {
            service: "db".into(),
        },
        &PlanInput {
            before: l.clone(),
            after: without_db,
            services: services.clone(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "remove-service: service db is required by service app, which stays on the cluster"
    );
    let e = plan(
        &Operation::Restart {
            service: Some("nosuch".into()),
        },
        &PlanInput {
            after: l.clone(),
            services: services.clone(),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "restart: service nosuch is not on the cluster"
    );
    let mut bad = l.clone();
    bad[1].services.insert("ghost".into());
    let e = create(services, bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node n2: service ghost is not in the service catalog"
    );
}

#[test]
fn shrink_stops_services_before_delete_and_reconfigures_survivors() {
    let l = three_layout();
    let p = plan(
        &Operation::Shrink,
        &PlanInput {
            before: l.clone(),
            after: l[..2].to_vec(),
            services: three_services(),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(reaches(
        &p,
        find(&p, "n3", A::Stop, Some("web")),
        find(&p, "n3", A::Delete, None)
    ));
    assert!(reaches(
        &p,
        find(&p, "n3", A::Stop, Some("web")),
        find(&p, "n3", A::Stop, Some("app"))
    ));
    find(&p, "n2", A::Configure, Some("web"));
    find(&p, "n1", A::Configure, Some("db"));
}

#[test]
fn many_to_many_waits_go_through_one_gate() {
    let layout: Vec<_> = (0..50)
        .map(|i| node(&format!("w{i}"), 1000 + i, &["db", "app"]))
        .collect();
    let p = create(three_services(), layout).unwrap();
    // 50 app starts wait for 50 db starts: one gate, not 2,500 edges.
    assert!(p.gates >= 1);
    assert!(p.edges.len() < 50 * 30, "{} edges", p.edges.len());
    let start = find(&p, "w7", A::Start, Some("app"));
    assert_eq!(
        waits_for(&p, start)
            .iter()
            .filter(|&&i| p.tasks[i].action == A::Start)
            .count(),
        50
    );
}

#[test]
fn plans_are_deterministic_and_stage_view_uses_coopr_format() {
    let input = PlanInput {
        after: three_layout(),
        services: three_services(),
        ..Default::default()
    };
    let a = plan(&Operation::Create, &input).unwrap();
    let mut shuffled = input.clone();
    shuffled.after.reverse();
    shuffled.services.reverse();
    assert_eq!(a, plan(&Operation::Create, &shuffled).unwrap());
    let view = a.stage_view(|i| format!("00000001-001-{:03}", i + 1));
    assert_eq!(
        view[0][0],
        json!({"id": "00000001-001-001", "taskName": "CREATE", "nodeId": "n1", "service": ""})
    );
    let ready = a.ready(&[true, true, true]);
    assert!(ready.iter().all(|&i| i >= 3));
}
