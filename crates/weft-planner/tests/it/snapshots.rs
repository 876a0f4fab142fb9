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
