//! Example catalogs and layouts: a three-service cluster and a Hadoop-like one.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use weft_model::Service;
use weft_planner::{Operation, PlanInput, PlanNode};

/// A service from compact JSON: name, actions (lower-case) with automator, runtime and install deps.
pub(crate) fn service(v: Value) -> Service {
    serde_json::from_value(v).expect("fixture service parses")
}

pub(crate) fn svc(name: &str, actions: &[&str], runtime: &[&str], install: &[&str]) -> Service {
    let acts: serde_json::Map<String, Value> = actions
        .iter()
        .map(|a| {
            (
                a.to_string(),
                json!({"type": "shell", "fields": {"script": format!("{name}-{a}.sh")}}),
            )
        })
        .collect();
    service(json!({
        "name": name,
        "dependencies": {"runtime": {"requires": runtime}, "install": {"requires": install}},
        "provisioner": {"actions": acts},
    }))
}

pub(crate) fn node(id: &str, nodenum: u64, services: &[&str]) -> PlanNode {
    PlanNode {
        id: id.to_string(),
        nodenum,
        hostname: format!("{id}.example"),
        ipaddresses: BTreeMap::from([
            (
                "access_v4".to_string(),
                format!("203.0.113.{}", nodenum - 990),
            ),
            ("bind_v4".to_string(), format!("10.0.0.{}", nodenum - 990)),
        ]),
        hardwaretype: "small".into(),
        imagetype: "debian".into(),
        services: services.iter().map(|s| s.to_string()).collect(),
    }
}

/// db <- app <- web (runtime requires); web lacks INITIALIZE; db is chef-driven.
pub(crate) fn three_services() -> Vec<Service> {
    let mut db = svc(
        "db",
        &[
            "install",
            "configure",
            "initialize",
            "start",
            "stop",
            "remove",
        ],
        &[],
        &[],
    );
    for a in db.provisioner.actions.values_mut() {
        a.automator = "chef-solo".into();
    }
    vec![
        db,
        svc(
            "app",
            &[
                "install",
                "configure",
                "initialize",
                "start",
                "stop",
                "remove",
            ],
            &["db"],
            &[],
        ),
        svc(
            "web",
            &["install", "configure", "start", "stop", "remove"],
            &["app"],
            &[],
        ),
    ]
}

pub(crate) fn three_layout() -> Vec<PlanNode> {
    vec![
        node("n1", 1000, &["db"]),
        node("n2", 1001, &["app", "web"]),
        node("n3", 1002, &["app", "web"]),
    ]
}

/// Hadoop-like: hosts/firewall/base on every node, HDFS, YARN, ZooKeeper and HBase.
pub(crate) fn hadoop_services() -> Vec<Service> {
    let mut zk = svc(
        "zookeeper-server",
        &["install", "configure", "start", "stop"],
        &["hosts"],
        &["base"],
    );
    zk.dependencies.provides = vec!["coordination".into()];
    vec![
        svc("hosts", &["configure"], &[], &[]),
        svc(
            "firewall",
            &["install", "configure", "start", "stop"],
            &[],
            &[],
        ),
        svc("base", &["install"], &[], &[]),
        zk,
        svc(
            "hadoop-hdfs-namenode",
            &["install", "configure", "initialize", "start", "stop"],
            &["hosts"],
            &["base"],
        ),
        svc(
            "hadoop-hdfs-datanode",
            &["install", "configure", "start", "stop"],
            &["hadoop-hdfs-namenode"],
            &["base"],
        ),
        svc(
            "hadoop-yarn-resourcemanager",
            &["install", "configure", "start", "stop"],
            &["hadoop-hdfs-namenode"],
            &["base"],
        ),
        svc(
            "hadoop-yarn-nodemanager",
            &["install", "configure", "start", "stop"],
            &["hadoop-yarn-resourcemanager"],
            &["base"],
        ),
        svc(
            "hbase-master",
            &["install", "configure", "initialize", "start", "stop"],
            &["coordination", "hadoop-hdfs-namenode"],
            &["base"],
        ),
        svc(
            "hbase-regionserver",
            &["install", "configure", "start", "stop"],
            &["hbase-master", "hadoop-hdfs-datanode"],
            &["base"],
        ),
    ]
}

pub(crate) fn hadoop_layout() -> Vec<PlanNode> {
    let master = [
        "hosts",
        "firewall",
        "base",
        "zookeeper-server",
        "hadoop-hdfs-namenode",
        "hadoop-yarn-resourcemanager",
        "hbase-master",
    ];
    let worker = [
        "hosts",
        "firewall",
        "base",
        "hadoop-hdfs-datanode",
        "hadoop-yarn-nodemanager",
        "hbase-regionserver",
    ];
    vec![
        node("master", 1000, &master),
        node("worker1", 1001, &worker),
        node("worker2", 1002, &worker),
        node("worker3", 1003, &worker),
    ]
}

pub(crate) fn hadoop_config() -> Value {
    json!({
        "hadoop": {"core_site": {"fs.defaultFS": "hdfs://%host.service.hadoop-hdfs-namenode%:8020"}},
        "hbase": {"hbase_site": {"hbase.zookeeper.quorum": "%join(map(host.service.zookeeper-server,'$:2181'),',')%"}}
    })
}

fn without_service(layout: &[PlanNode], service: &str) -> Vec<PlanNode> {
    layout
        .iter()
        .cloned()
        .map(|mut n| {
            n.services.remove(service);
            n
        })
        .collect()
}

/// One (operation, input) per operation, on a given catalog and layout. `removable` is a service
/// that nothing else requires; `upgraded` is the service to upgrade.
pub(crate) fn cases(
    services: Vec<Service>,
    layout: Vec<PlanNode>,
    config: Value,
    removable: &str,
    upgraded: &str,
    restarted: &str,
) -> Vec<(String, Operation, PlanInput)> {
    let input = |before: Vec<PlanNode>, after: Vec<PlanNode>| PlanInput {
        before,
        after,
        services: services.clone(),
        config: config.clone(),
        rollout: None,
        force: false,
    };
    let smaller: Vec<PlanNode> = layout[..layout.len() - 1].to_vec();
    let mut template_after = layout.clone();
    template_after[0].services = template_after[0]
        .services
        .iter()
        .filter(|s| *s != removable)
        .cloned()
        .collect::<BTreeSet<_>>();
    let mut template_before = smaller.clone();
    template_before[1].services.remove(removable);
    vec![
        (
            "create".into(),
            Operation::Create,
            input(vec![], layout.clone()),
        ),
        (
            "delete".into(),
            Operation::Delete,
            input(layout.clone(), vec![]),
        ),
        (
            "add-services".into(),
            Operation::AddServices,
            input(without_service(&layout, removable), layout.clone()),
        ),
        (
            "remove-service".into(),
            Operation::RemoveService {
                service: removable.into(),
            },
            input(layout.clone(), without_service(&layout, removable)),
        ),
        (
            "expand".into(),
            Operation::Expand,
            input(smaller.clone(), layout.clone()),
        ),
        (
            "shrink".into(),
            Operation::Shrink,
            input(layout.clone(), smaller.clone()),
        ),
        (
            "reconfigure".into(),
            Operation::Reconfigure { restart: false },
            input(vec![], layout.clone()),
        ),
        (
            "reconfigure-restart".into(),
            Operation::Reconfigure { restart: true },
            input(vec![], layout.clone()),
        ),
        (
            "start-all".into(),
            Operation::Start { service: None },
            input(vec![], layout.clone()),
        ),
        (
            "stop-one".into(),
            Operation::Stop {
                service: Some(restarted.into()),
            },
            input(vec![], layout.clone()),
        ),
        (
            "restart-one".into(),
            Operation::Restart {
                service: Some(restarted.into()),
            },
            input(vec![], layout.clone()),
        ),
        (
            "upgrade".into(),
            Operation::Upgrade {
                service: upgraded.into(),
                batch_size: 2,
            },
            input(vec![], layout.clone()),
        ),
        (
            "rollback-upgrade".into(),
            Operation::RollbackUpgrade {
                service: upgraded.into(),
                batch_size: 2,
                nodes: None,
            },
            input(vec![], layout.clone()),
        ),
        (
            "change-template".into(),
            Operation::ChangeTemplate { restart: false },
            input(template_before, template_after),
        ),
    ]
}

/// Whether task `b` is reachable from task `a` in the plan.
pub(crate) fn precedes(p: &weft_planner::Plan, a: usize, b: usize) -> bool {
    use weft_planner::Vertex;
    let mut seen = BTreeSet::new();
    let mut todo = vec![Vertex::Task(a)];
    while let Some(v) = todo.pop() {
        for e in p.edges.iter().filter(|e| e.from == v) {
            if e.to == Vertex::Task(b) {
                return true;
            }
            if seen.insert(e.to) {
                todo.push(e.to);
            }
        }
    }
    false
}
