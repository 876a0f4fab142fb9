//! Criterion benches: create plans for 1,000 and 10,000 nodes with 20 services, and macro
//! expansion over a 1,000-node layout. Run: `cargo bench -p weft-planner --bench planner`.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use weft_model::Service;
use weft_planner::{plan, MacroContext, Operation, PlanInput, PlanNode};

fn svc(name: &str, actions: &[&str], runtime: &[&str], install: &[&str]) -> Service {
    let acts: serde_json::Map<String, Value> =
        actions.iter().map(|a| (a.to_string(), json!({"type": "chef-solo", "fields": {"run_list": format!("recipe[{name}::{a}]")}}))).collect();
    serde_json::from_value(json!({
        "name": name,
        "dependencies": {"runtime": {"requires": runtime}, "install": {"requires": install}},
        "provisioner": {"actions": acts},
    }))
    .expect("bench service parses")
}

const FULL: [&str; 5] = ["install", "configure", "initialize", "start", "stop"];
const EVERY: [&str; 4] = ["hosts", "firewall", "base", "monitoring-agent"];
const MASTERS: [&str; 13] = [
    "zookeeper-server",
    "hadoop-hdfs-namenode",
    "hadoop-hdfs-secondarynamenode",
    "hadoop-yarn-resourcemanager",
    "hadoop-mapreduce-historyserver",
    "hbase-master",
    "hive-metastore",
    "hive-server2",
    "oozie",
    "hue",
    "mysql-server",
    "spark-history",
    "kafka-broker",
];
const WORKERS: [&str; 3] = [
    "hadoop-hdfs-datanode",
    "hadoop-yarn-nodemanager",
    "hbase-regionserver",
];

/// 20 services: 4 on every node, 13 spread over 3 masters, 3 on every worker.
fn services() -> Vec<Service> {
    let mut out = vec![
        svc("hosts", &["configure"], &[], &[]),
        svc(
            "firewall",
            &["install", "configure", "start", "stop"],
            &[],
            &[],
        ),
        svc("base", &["install"], &[], &[]),
        svc("monitoring-agent", &FULL, &["hosts"], &["base"]),
    ];
    let mut prev = "hosts";
    for m in MASTERS {
        out.push(svc(m, &FULL, &[prev], &["base"]));
        prev = m;
    }
    out.push(svc(
        "hadoop-hdfs-datanode",
        &FULL,
        &["hadoop-hdfs-namenode", "hosts"],
        &["base"],
    ));
    out.push(svc(
        "hadoop-yarn-nodemanager",
        &FULL,
        &["hadoop-yarn-resourcemanager", "hadoop-hdfs-datanode"],
        &["base"],
    ));
    out.push(svc(
        "hbase-regionserver",
        &FULL,
        &["hbase-master", "hadoop-hdfs-datanode"],
        &["base"],
    ));
    out
}

fn layout(n: usize) -> Vec<PlanNode> {
    (0..n)
        .map(|i| {
            let mut services: Vec<&str> = EVERY.to_vec();
            if i < 3 {
                services.extend(MASTERS.iter().skip(i).step_by(3));
            } else {
                services.extend(WORKERS);
            }
            PlanNode {
                id: format!("node-{i:05}"),
                nodenum: 1000 + i as u64,
                hostname: format!("cluster1-{}.example.com", 1000 + i),
                ipaddresses: BTreeMap::from([
                    (
                        "access_v4".to_string(),
                        format!("198.51.{}.{}", i / 250, i % 250),
                    ),
                    (
                        "bind_v4".to_string(),
                        format!("10.1.{}.{}", i / 250, i % 250),
                    ),
                ]),
                hardwaretype: "large".into(),
                imagetype: "debian".into(),
                services: services.into_iter().map(String::from).collect(),
            }
        })
        .collect()
}

fn config() -> Value {
    json!({
        "hadoop": {
            "core_site": {"fs.defaultFS": "hdfs://%host.service.hadoop-hdfs-namenode[0]%:8020"},
            "hdfs_site": {"dfs.datanode.data.dir": "/data/%instance.self.service.hadoop-hdfs-datanode%"},
            "slaves": "%join(host.service.hadoop-hdfs-datanode,'\n')%"
        },
        "hbase": {"hbase_site": {"hbase.zookeeper.quorum": "%join(map(ip.service.zookeeper-server,'$:2181'),',')%"}},
        "self": {"host": "%host.self%", "ip": "%ip.access_v4.self%", "owner": "%cluster.owner%"},
        "counts": ["%num.service.hadoop-yarn-nodemanager%", "100%%"]
    })
}

fn bench_plans(c: &mut Criterion) {
    let services = services();
    for n in [1_000usize, 10_000] {
        let input = PlanInput {
            after: layout(n),
            services: services.clone(),
            config: config(),
            ..Default::default()
        };
        let tasks = plan(&Operation::Create, &input)
            .expect("bench plan")
            .tasks
            .len();
        let mut group = c.benchmark_group("plan_create");
        group.sample_size(10);
        group.bench_function(format!("{n}_nodes_20_services_{tasks}_tasks"), |b| {
            b.iter(|| plan(black_box(&Operation::Create), black_box(&input)).expect("bench plan"))
        });
        group.finish();
    }
}

fn bench_macros(c: &mut Criterion) {
    let nodes = layout(1_000);
    let cfg = config();
    let ctx = MacroContext::new(&nodes, "alice").expect("bench layout");
    let mut group = c.benchmark_group("macros_1000_nodes");
    group.bench_function("config_for_one_node", |b| {
        b.iter(|| {
            ctx.expand_value(Some("node-00500"), black_box(&cfg))
                .expect("expands")
        })
    });
    group.sample_size(10);
    group.bench_function("config_for_every_node", |b| {
        b.iter(|| {
            for n in &nodes {
                black_box(ctx.expand_value(Some(&n.id), &cfg).expect("expands"));
            }
        })
    });
    group.bench_function("index_layout", |b| {
        b.iter(|| MacroContext::new(black_box(&nodes), "alice").expect("index"))
    });
    group.finish();
}

criterion_group!(benches, bench_plans, bench_macros);
criterion_main!(benches);
