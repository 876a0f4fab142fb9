//! Snapshot tests: the worked examples of Coopr's solver (coopr-internals §2), the Hadoop-like
//! template at several sizes, and templates with no layout. Bless with `UPDATE_EXPECT=1`.

use expect_test::{expect, Expect};

use weft_solver::{Catalog, TypeOffer};

use crate::common::{names, render, solve_text, template, HADOOP};

fn check(t: &str, hw: &[&str], img: &[&str], services: &[&str], size: u64, want: Expect) {
    want.assert_eq(&solve_text(&template(t), hw, img, services, size));
}

#[test]
fn unconstrained_services_land_on_every_node() {
    // §2.2: hosts and firewall have no constraint and are in no rule.
    let t = r#"{"name":"t","constraints":{"services":{"master":{"quantities":{"min":1,"max":1}}},
                "layout":{"cantcoexist":[["master","worker"]]}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["firewall", "hosts", "master", "worker"],
        3,
        expect![[r#"
               1 x small/centos: firewall, hosts, master
               2 x small/centos: firewall, hosts, worker
        "#]],
    );
}

#[test]
fn must_coexist_is_transitive() {
    // §2.2: rules {a,b} and {b,c} leave the single service set {a,b,c}.
    let t = r#"{"name":"t","constraints":{"layout":{"mustcoexist":[["a","b"],["b","c"]]},
                "services":{"a":{"quantities":{"max":2}}}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b", "c", "d"],
        3,
        expect![[r#"
               2 x small/centos: a, b, c, d
               1 x small/centos: d
        "#]],
    );
}

#[test]
fn cant_coexist_forbids_only_the_whole_set() {
    // §2.2: {a,b,c} as one rule forbids the triple, not the pairs.
    let t = r#"{"name":"t","constraints":{"layout":{"cantcoexist":[["a","b","c"]]}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b", "c"],
        2,
        expect![[r#"
               1 x small/centos: a, b
               1 x small/centos: a, c
        "#]],
    );
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b", "c"],
        1,
        expect![[r#"
        error: cannot lay out 1 node: a, b and c may not all share a node; a, b and c must each be on a node
    "#]],
    );
}

#[test]
fn hardware_is_the_first_adequate_offered_type() {
    // §2.3: Coopr picked the alphabetically smallest name; weft picks the first offered type (the
    // caller lists them smallest first) that every service on the node allows.
    let t = r#"{"name":"t","constraints":{"services":{"db":{"hardwaretypes":["large","medium"],
                "quantities":{"min":1,"max":1}}},"layout":{"cantcoexist":[["db","web"]]}}}"#;
    check(
        t,
        &["small", "medium", "large"],
        &["centos", "ubuntu"],
        &["db", "web"],
        3,
        expect![[r#"
               1 x medium/centos: db
               2 x small/centos: web
        "#]],
    );
}

#[test]
fn greedy_start_no_longer_gives_up() {
    // §2.4: a (max 1) and b (max 1) on 2 nodes: Coopr's greedy start reported no solution.
    let t = r#"{"name":"t","constraints":{"services":{"a":{"quantities":{"max":1}},"b":{"quantities":{"max":1}}}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b"],
        2,
        expect![[r#"
               1 x small/centos: a
               1 x small/centos: b
        "#]],
    );
}

const HADOOP_DISTRIBUTED: &str = r#"{"name":"hadoop-distributed","constraints":{
    "layout":{"mustcoexist":[["datanode","nodemanager"]],"cantcoexist":[["namenode","datanode"],["resourcemanager","nodemanager"]]},
    "services":{"namenode":{"quantities":{"min":1,"max":1}},"resourcemanager":{"quantities":{"min":1,"max":1}}}},
    "defaults":{"services":["firewall","hosts","namenode","resourcemanager","datanode","nodemanager"]}}"#;

#[test]
fn every_requested_service_is_placed() {
    // §2.4: Coopr put datanode and nodemanager nowhere on 1 node; weft says why 1 node is not enough.
    check(
        HADOOP_DISTRIBUTED,
        &["small"],
        &["centos"],
        &[],
        1,
        expect![[r#"
        error: cannot lay out 1 node: nodemanager and resourcemanager may not share a node; nodemanager and resourcemanager must each be on a node
    "#]],
    );
    check(
        HADOOP_DISTRIBUTED,
        &["small"],
        &["centos"],
        &[],
        4,
        expect![[r#"
               3 x small/centos: datanode, firewall, hosts, nodemanager
               1 x small/centos: firewall, hosts, namenode, resourcemanager
        "#]],
    );
}

#[test]
fn hadoop_like_template_at_several_sizes() {
    let hw = ["small", "medium", "large"];
    let img = ["centos"];
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        3,
        expect![[r#"
               1 x large/centos: hbase-master, hdfs-namenode, yarn-resourcemanager, zookeeper
               2 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager, zookeeper
        "#]],
    );
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        5,
        expect![[r#"
               1 x large/centos: hbase-master, hdfs-namenode, yarn-resourcemanager, zookeeper
               4 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager, zookeeper
        "#]],
    );
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        10,
        expect![[r#"
               1 x large/centos: hbase-master, hdfs-namenode, yarn-resourcemanager
               4 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager
               5 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager, zookeeper
        "#]],
    );
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        55,
        expect![[r#"
            1 x large/centos: hbase-master, hdfs-namenode, yarn-resourcemanager
            49 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager
            1 x small/centos: hbase-regionserver, hdfs-datanode, yarn-nodemanager, zookeeper
            4 x small/centos: zookeeper
        "#]],
    );
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        60,
        expect![[r#"
        error: cannot lay out 60 nodes: hdfs-datanode and yarn-nodemanager must share a node; hbase-regionserver and yarn-nodemanager must share a node; hbase-master, hdfs-namenode and yarn-resourcemanager are each limited to 1 node; zookeeper is limited to 5 nodes; hdfs-datanode is limited to 50 nodes
    "#]],
    );
    check(
        HADOOP,
        &hw,
        &img,
        &[],
        2,
        expect![[r#"
        error: cannot lay out 2 nodes: zookeeper needs at least 3 nodes
    "#]],
    );
}

#[test]
fn no_layout_explanations() {
    // A hardware type the provider does not offer.
    let t = template(
        r#"{"name":"t","constraints":{"services":{"namenode":{"hardwaretypes":["large-mem"]}}}}"#,
    );
    let hw = TypeOffer::new(["small", "large"]).with_known(["large-mem"]);
    let img = TypeOffer::new(["centos"]);
    let cat = Catalog {
        template: &t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    let got = render(weft_solver::create(
        &cat,
        &names(&["namenode", "datanode"]),
        2,
    ));
    expect![[r#"
        error: cannot lay out 2 nodes: namenode needs hardware large-mem, which the provider does not offer; namenode must be on a node
    "#]]
    .assert_eq(&got);
    // The same name, unknown to the tenant, never matches, and the explanation says so.
    check(
        r#"{"name":"t","constraints":{"services":{"namenode":{"hardwaretypes":["large-mem"]}}}}"#,
        &["small", "large"],
        &["centos"],
        &["namenode", "datanode"],
        2,
        expect![[r#"
            error: cannot lay out 2 nodes: namenode needs hardware large-mem, which the tenant does not have; namenode must be on a node
        "#]],
    );
    // Allowed by the service, excluded by the template.
    let t = r#"{"name":"t","compatibility":{"hardwaretypes":["small"]},
                "constraints":{"services":{"namenode":{"hardwaretypes":["large"]}}}}"#;
    check(
        t,
        &["small", "large"],
        &["centos"],
        &["namenode"],
        1,
        expect![[r#"
        error: cannot lay out 1 node: namenode needs hardware large, which the template does not allow; the template allows only hardware small
    "#]],
    );
    // Services that must share a node want different hardware.
    let t = r#"{"name":"t","constraints":{"layout":{"mustcoexist":[["a","b"]]},
                "services":{"a":{"hardwaretypes":["small"]},"b":{"hardwaretypes":["large"]}}}}"#;
    check(
        t,
        &["small", "large"],
        &["centos"],
        &["a", "b", "c"],
        2,
        expect![[r#"
        error: cannot lay out 2 nodes: a needs hardware small; b needs hardware large; a and b must share a node; b must be on a node
    "#]],
    );
    // Mutual exclusions with limited counts.
    let t = r#"{"name":"t","constraints":{"layout":{"cantcoexist":[["a","b"],["b","c"],["a","c"]]},
                "services":{"c":{"quantities":{"max":1}},"a":{"quantities":{"min":2}}}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b", "c"],
        3,
        expect![[r#"
        error: cannot lay out 3 nodes: a and b may not share a node; b and c may not share a node; a and c may not share a node; a needs at least 2 nodes; b and c must each be on a node
    "#]],
    );
    // Too many nodes for services that are all bounded.
    let t = r#"{"name":"t","constraints":{"services":{"a":{"quantities":{"max":1}},"b":{"quantities":{"max":2}}}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b"],
        4,
        expect![[r#"
        error: cannot lay out 4 nodes: a is limited to 1 node; b is limited to 2 nodes
    "#]],
    );
    // A service that may not be on any node.
    let t = r#"{"name":"t","constraints":{"layout":{"cantcoexist":[["a"]]}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["a", "b"],
        2,
        expect![[r#"
        error: cannot lay out 2 nodes: a may not be on any node; a must be on a node
    "#]],
    );
    // A service needing more nodes than the cluster has.
    let t =
        r#"{"name":"t","constraints":{"services":{"zookeeper":{"quantities":{"min":3,"max":5}}}}}"#;
    check(
        t,
        &["small"],
        &["centos"],
        &["zookeeper"],
        2,
        expect![[r#"
        error: cannot lay out 2 nodes: zookeeper needs at least 3 nodes
    "#]],
    );
}

/// Coopr's own reactor template names hardware type `large`, which its catalog does not define;
/// Coopr solves it. A constraint naming a type the tenant lacks simply never matches: the
/// template solves at every size it allows, on the types the tenant has.
#[test]
fn a_constraint_naming_a_type_the_tenant_lacks_never_matches() {
    let t = r#"{"name":"reactor","constraints":{"size":{"min":1,"max":12},
        "services":{"master":{"hardwaretypes":["large","medium"],"quantities":{"min":1,"max":1}},
                    "worker":{"hardwaretypes":["large"],"imagetypes":["centos6","ubuntu"]}},
        "layout":{"cantcoexist":[["master","worker"]]}}}"#;
    for size in 1..=12 {
        let got = solve_text(
            &template(t),
            &["small", "medium"],
            &["ubuntu"],
            &["master", "worker"],
            size,
        );
        if size == 1 {
            // One node cannot hold both; and the worker needs hardware the tenant lacks.
            assert!(got.starts_with("error: cannot lay out 1 node"), "{got}");
            continue;
        }
        assert!(
            got.contains("error") && got.contains("large, which the tenant does not have"),
            "size {size}: {got}"
        );
    }
    // With the worker's list naming one type the tenant has, every size from 2 solves.
    let t = t.replace(
        r#""worker":{"hardwaretypes":["large"]"#,
        r#""worker":{"hardwaretypes":["large","small"]"#,
    );
    for size in 2..=12 {
        let got = solve_text(
            &template(&t),
            &["small", "medium"],
            &["ubuntu"],
            &["master", "worker"],
            size,
        );
        assert!(!got.contains("error"), "size {size}: {got}");
        assert!(
            got.contains("medium/ubuntu: master") && got.contains("small/ubuntu: worker"),
            "{got}"
        );
    }
}
