//! Changes to existing clusters: existing nodes keep their id, hardware and image, services not
//! part of the change never move, and the result passes the independent checker.

use std::collections::BTreeSet;

use expect_test::expect;
use weft_model::ClusterTemplate;
use weft_solver::{Catalog, Change, ExistingNode, Layout, TypeOffer};

use crate::common::{names, render, template, Rules, HADOOP};

fn offers() -> (TypeOffer, TypeOffer) {
    (
        TypeOffer::new(["small", "large"]),
        TypeOffer::new(["centos"]),
    )
}

/// Creates a cluster and turns it into existing nodes with ids n1, n2, ...
fn existing(t: &ClusterTemplate, services: &[&str], size: u64) -> Vec<ExistingNode> {
    let (hw, img) = offers();
    let cat = Catalog {
        template: t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    let layout = weft_solver::create(&cat, &names(services), size).expect("creates");
    layout
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ExistingNode {
            id: format!("n{}", i + 1),
            hardwaretype: n.hardwaretype.clone(),
            imagetype: n.imagetype.clone(),
            services: n.services.iter().cloned().collect(),
        })
        .collect()
}

fn apply(
    t: &ClusterTemplate,
    nodes: &[ExistingNode],
    change: Change,
) -> Result<Layout, weft_solver::SolveError> {
    let (hw, img) = offers();
    let cat = Catalog {
        template: t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    weft_solver::change(&cat, nodes, &change)
}

/// Existing nodes that stay keep id, hardware and image, and every service they had.
fn assert_kept(before: &[ExistingNode], after: &Layout, may_lose: Option<&str>) {
    for n in after.nodes.iter().filter(|n| n.id.is_some()) {
        let old = before
            .iter()
            .find(|o| Some(&o.id) == n.id.as_ref())
            .expect("known id");
        assert_eq!(
            (&old.hardwaretype, &old.imagetype),
            (&n.hardwaretype, &n.imagetype)
        );
        let now: BTreeSet<&String> = n.services.iter().collect();
        assert!(
            old.services
                .iter()
                .filter(|s| Some(s.as_str()) != may_lose)
                .all(|s| now.contains(s)),
            "{n:?}"
        );
    }
}

fn assert_valid(t: &ClusterTemplate, layout: &Layout) {
    let services: BTreeSet<String> = layout
        .nodes
        .iter()
        .flat_map(|n| n.services.iter().cloned())
        .collect();
    let rules = Rules {
        t,
        hw: &names(&["small", "large"]),
        img: &names(&["centos"]),
        services: &services,
    };
    rules
        .layout_ok(layout.nodes.len() as u64, &layout.nodes)
        .expect("valid layout");
}

const BASE: [&str; 5] = [
    "hdfs-namenode",
    "yarn-resourcemanager",
    "zookeeper",
    "hdfs-datanode",
    "yarn-nodemanager",
];

#[test]
fn add_services_goes_on_existing_nodes_only() {
    let t = template(HADOOP);
    let before = existing(&t, &BASE, 6);
    let after = apply(
        &t,
        &before,
        Change::AddServices(names(&["hbase-master", "hbase-regionserver"])),
    )
    .unwrap();
    assert_eq!(after.nodes.len(), 6);
    assert!(after.nodes.iter().all(|n| n.id.is_some()));
    assert_kept(&before, &after, None);
    assert_valid(&t, &after);
    expect![[r#"
           1 x large/centos: hbase-master, hdfs-namenode, yarn-resourcemanager
           5 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager, zookeeper
    "#]]
    .assert_eq(&after.render());
    let err = apply(&t, &before, Change::AddServices(names(&["zookeeper"]))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "service zookeeper is already on the cluster"
    );
}

#[test]
fn add_services_explains_when_they_do_not_fit() {
    let t = template(
        r#"{"name":"t","constraints":{"layout":{"cantcoexist":[["a","x"],["b","x"]]},
            "services":{"x":{"quantities":{"min":1}}}}}"#,
    );
    let before = existing(
        &template(r#"{"name":"t","constraints":{"layout":{"cantcoexist":[["a","b"]]}}}"#),
        &["a", "b"],
        2,
    );
    expect![[r#"
        error: cannot add x to the 2 existing nodes: a and x may not share a node; b and x may not share a node; x must be on a node
    "#]]
    .assert_eq(&render(apply(&t, &before, Change::AddServices(names(&["x"])))));
}

#[test]
fn remove_service_drops_nodes_left_empty() {
    let t = template(HADOOP);
    let mut all = BASE.to_vec();
    all.extend(["hbase-master", "hbase-regionserver"]);
    let before = existing(&t, &all, 55);
    let after = apply(&t, &before, Change::RemoveService("zookeeper".into())).unwrap();
    assert_eq!(after.removed, vec!["n52", "n53", "n54", "n55"]);
    assert_eq!(after.nodes.len(), 51);
    assert!(after
        .nodes
        .iter()
        .all(|n| !n.services.contains(&"zookeeper".to_string())));
    assert_kept(&before, &after, Some("zookeeper"));
    assert_valid(&t, &after);
    let err = apply(&t, &before, Change::RemoveService("nope".into())).unwrap_err();
    assert_eq!(err.to_string(), "service nope is not on the cluster");
}

#[test]
fn expand_adds_new_nodes_and_leaves_old_ones_alone() {
    let t = template(HADOOP);
    let mut all = BASE.to_vec();
    all.extend(["hbase-master", "hbase-regionserver"]);
    let before = existing(&t, &all, 5);
    let after = apply(&t, &before, Change::Expand(4)).unwrap();
    assert_eq!(after.nodes.len(), 9);
    for (old, new) in before.iter().zip(&after.nodes) {
        assert_eq!(new.id.as_deref(), Some(old.id.as_str()));
        assert_eq!(
            new.services,
            old.services.iter().cloned().collect::<Vec<_>>()
        );
    }
    assert_eq!(after.new_nodes().count(), 4);
    assert_valid(&t, &after);
    expect![[r#"
        error: cannot add 60 nodes to the cluster of 5: hdfs-datanode and yarn-nodemanager must share a node; hbase-regionserver and yarn-nodemanager must share a node; hbase-master, hdfs-namenode and yarn-resourcemanager are each limited to 1 node; zookeeper is limited to 5 nodes; hdfs-datanode is limited to 50 nodes
    "#]]
    .assert_eq(&render(apply(&t, &before, Change::Expand(60))));
}

#[test]
fn shrink_removes_newest_nodes_that_keep_every_constraint() {
    let t = template(r#"{"name":"t"}"#);
    let node = |id: &str, s: &[&str]| ExistingNode {
        id: id.into(),
        hardwaretype: "small".into(),
        imagetype: "centos".into(),
        services: s.iter().map(|x| x.to_string()).collect(),
    };
    // Removing z (newest) first would strand a and b; the solver backtracks and removes y and x.
    let before = vec![node("x", &["a"]), node("y", &["b"]), node("z", &["a", "b"])];
    let after = apply(&t, &before, Change::Shrink(2)).unwrap();
    assert_eq!(after.removed, vec!["y", "x"]);
    assert_eq!(after.nodes[0].id.as_deref(), Some("z"));
    // One node: the newest goes.
    let after = apply(&t, &before, Change::Shrink(1)).unwrap();
    assert_eq!(after.removed, vec!["z"]);
    // Hadoop: zookeeper keeps its 3 nodes.
    let h = template(HADOOP);
    let before = existing(&h, &BASE, 5);
    let after = apply(&h, &before, Change::Shrink(2)).unwrap();
    assert_eq!(after.removed, vec!["n5", "n4"]);
    assert_valid(&h, &after);
    expect![[r#"
        error: cannot remove 1 node from the cluster of 3: zookeeper needs at least 3 nodes
    "#]]
    .assert_eq(&render(apply(
        &h,
        &existing(&h, &BASE, 3),
        Change::Shrink(1),
    )));
}

#[test]
fn retemplate_keeps_placements_or_says_what_breaks() {
    let t = template(HADOOP);
    let before = existing(&t, &BASE, 6);
    // Same template plus a new service: placements stay, the new one is added.
    let after = apply(
        &t,
        &before,
        Change::Retemplate(names(&["hbase-master", "hbase-regionserver"])),
    )
    .unwrap();
    assert_kept(&before, &after, None);
    assert_valid(&t, &after);
    // A new version that allows only 3 zookeepers no longer fits.
    let v2 = template(&HADOOP.replace(r#""min": 3, "max": 5"#, r#""min": 3, "max": 3"#));
    expect![[r#"
        error: cannot move the cluster to template hadoop: zookeeper is limited to 3 nodes
    "#]]
    .assert_eq(&render(apply(&v2, &before, Change::Retemplate(Vec::new()))));
}

#[test]
fn reshape_gives_a_new_service_a_node_of_its_own() {
    let t = template(
        r#"{"name": "sites", "defaults": {"services": ["kv", "web"]},
            "constraints": {"layout": {"cantcoexist": [["lb", "web"]]},
              "services": {"kv": {"quantities": {"min": 1, "max": 1}},
                           "lb": {"quantities": {"min": 0, "max": 1}}}}}"#,
    );
    let before = existing(&t, &["kv", "web"], 2);
    // Every node runs web: the balancer fits on none of them.
    assert!(apply(&t, &before, Change::Retemplate(names(&["lb"]))).is_err());
    let add = |nodes| Change::Reshape {
        add: names(&["lb"]),
        nodes,
    };
    let after = apply(&t, &before, add(1)).unwrap();
    assert_kept(&before, &after, None);
    assert_eq!(after.nodes.len(), 3);
    let fresh: Vec<_> = after.nodes.iter().filter(|n| n.id.is_none()).collect();
    assert_eq!(fresh.len(), 1);
    assert!(fresh[0].services.iter().any(|s| s == "lb"), "{after:?}");
    assert!(render(apply(&t, &before, add(0))).contains("at least 1 node"));
}
