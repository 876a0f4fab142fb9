//! Bad input gives clear errors naming the service or type at fault, never a panic.

use expect_test::expect;
use weft_model::{ClusterTemplate, Service};
use weft_solver::{Catalog, SolveError, TypeOffer};

use crate::common::{names, solve_text, template};

#[test]
fn size_limits() {
    let t = template(r#"{"name":"t","constraints":{"size":{"min":2,"max":4}}}"#);
    let got: Vec<String> = [0, 1, 5, 100_001]
        .iter()
        .map(|n| solve_text(&t, &["s"], &["c"], &["a"], *n))
        .collect();
    expect![[r#"
        error: cluster size must be at least 1
        error: cluster size 1 is outside template t's size range 2 to 4
        error: cluster size 5 is outside template t's size range 2 to 4
        error: cluster size 100001 is above the largest cluster weft plans (100000 nodes)
    "#]]
    .assert_eq(&got.concat());
    let big = template(r#"{"name":"big"}"#);
    assert!(solve_text(&big, &["s"], &["c"], &["a"], 10_000).contains("10000 x s/c: a"));
}

#[test]
fn bad_templates_and_requests() {
    let cases = [
        (
            r#"{"name":"t","constraints":{"services":{"a":{"quantities":{"min":3,"max":1}}}}}"#,
            vec!["a"],
        ),
        (
            r#"{"name":"t","constraints":{"size":{"min":5,"max":2}}}"#,
            vec!["a"],
        ),
        (
            r#"{"name":"t","constraints":{"services":{"a":{"imagetypes":["windows"]}}}}"#,
            vec!["a"],
        ),
        (
            r#"{"name":"t","compatibility":{"services":["a"]}}"#,
            vec!["a", "b"],
        ),
        (r#"{"name":"t"}"#, vec![]),
        (
            r#"{"name":"t","compatibility":{"imagetypes":["ubuntu"]}}"#,
            vec!["a"],
        ),
    ];
    let got: Vec<String> = cases
        .iter()
        .map(|(t, s)| solve_text(&template(t), &["s"], &["c"], s, 3))
        .collect();
    expect![[r#"
        error: service a quantities: min (3) is above max (1)
        error: template t size: min (5) is above max (2)
        error: cannot lay out 3 nodes: a needs image windows, which the tenant does not have
        error: service b is not compatible with template t
        error: no services requested and template t has no default services
        error: no image types are available: the template allows only ubuntu; the provider offers c
    "#]]
    .assert_eq(&got.concat());
}

#[test]
fn service_definitions_enable_existence_requires_and_conflicts_checks() {
    let svc = |json: &str| -> Service {
        weft_model::lenient::parse_as(json.as_bytes(), "service").unwrap()
    };
    let defs = vec![
        svc(r#"{"name":"hbase","dependencies":{"runtime":{"requires":["hdfs"]}}}"#),
        svc(r#"{"name":"namenode","dependencies":{"provides":["hdfs"]}}"#),
        svc(r#"{"name":"mysql","dependencies":{"conflicts":["mariadb"]}}"#),
        svc(r#"{"name":"mariadb"}"#),
    ];
    let t = ClusterTemplate {
        name: "t".into(),
        ..ClusterTemplate::default()
    };
    let hw = TypeOffer::new(["s"]);
    let img = TypeOffer::new(["c"]);
    let cat = Catalog {
        template: &t,
        hardware: &hw,
        images: &img,
        services: Some(&defs),
    };
    let solve = |s: &[&str]| {
        weft_solver::create(&cat, &names(s), 2)
            .map(|l| l.render())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        solve(&["hbase", "ghost"]),
        Err("service ghost does not exist".into())
    );
    assert_eq!(
        solve(&["hbase"]),
        Err("service hbase requires hdfs, which is not on the cluster".into())
    );
    assert!(solve(&["hbase", "namenode"]).is_ok());
    assert_eq!(
        solve(&["mysql", "mariadb"]),
        Err("service mysql conflicts with mariadb, and both are on the cluster".into())
    );
    let err = weft_solver::create(&cat, &names(&["mariadb"]), 0).unwrap_err();
    assert!(matches!(err, SolveError::SizeZero) && !err.is_no_layout());
}
