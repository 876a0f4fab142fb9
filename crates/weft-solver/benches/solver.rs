//! Criterion benches for the layout solver: Hadoop-like templates with 10, 20 and 40 services on
//! clusters of 10, 1,000 and 10,000 nodes, an explained failure, a change, and the naive reference
//! of the tests on small cases (for the speed ratio).

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use weft_model::{ClusterTemplate, Constraints, LayoutConstraint, Quantities, ServiceConstraint};
use weft_solver::{Catalog, Change, ExistingNode, TypeOffer};

#[allow(dead_code)]
#[path = "../tests/it/common.rs"]
mod common;

fn set(names: &[String]) -> BTreeSet<String> {
    names.iter().cloned().collect()
}

fn q(min: u64, max: u64) -> ServiceConstraint {
    ServiceConstraint {
        quantities: Quantities { min, max },
        ..ServiceConstraint::default()
    }
}

/// A Hadoop-like template with `n` services: a fifth masters (max 1, the first on large hardware),
/// zookeeper (3 to 5), an edge service (max 2, not with masters), worker groups of three that must
/// coexist and may not sit with "their" master, and the rest unconstrained (hosts, firewall, clients).
fn hadoop_like(n: usize) -> (ClusterTemplate, Vec<String>) {
    let masters: Vec<String> = (0..n / 5).map(|i| format!("master-{i:02}")).collect();
    let groups = (n * 2 / 5) / 3;
    let workers: Vec<Vec<String>> = (0..groups)
        .map(|g| (0..3).map(|k| format!("worker-{g:02}-{k}")).collect())
        .collect();
    let mut services: Vec<String> = masters.clone();
    services.push("zookeeper".into());
    services.push("edge".into());
    services.extend(workers.iter().flatten().cloned());
    let mut i = 0;
    while services.len() < n {
        services.push(format!("client-{i:02}"));
        i += 1;
    }
    let mut cons: BTreeMap<String, ServiceConstraint> = BTreeMap::new();
    for (i, m) in masters.iter().enumerate() {
        let mut c = q(1, 1);
        if i == 0 {
            c.hardwaretypes = vec!["large".into()];
        }
        cons.insert(m.clone(), c);
    }
    cons.insert("zookeeper".into(), q(3, 5));
    cons.insert("edge".into(), q(1, 2));
    let mut must = Vec::new();
    let mut cant = Vec::new();
    for (g, w) in workers.iter().enumerate() {
        must.push(set(w));
        if let Some(m) = masters.get(g % masters.len().max(1)) {
            cant.push(set(&[m.clone(), w[0].clone()]));
        }
    }
    for m in &masters {
        cant.push(set(&[m.clone(), "edge".into()]));
    }
    let t = ClusterTemplate {
        name: format!("hadoop-{n}"),
        constraints: Constraints {
            layout: LayoutConstraint {
                mustcoexist: must,
                cantcoexist: cant,
            },
            services: cons,
            ..Constraints::default()
        },
        ..ClusterTemplate::default()
    };
    (t, services)
}

fn offers() -> (TypeOffer, TypeOffer) {
    (
        TypeOffer::new(["small", "medium", "large"]),
        TypeOffer::new(["centos", "ubuntu"]),
    )
}

fn create(c: &mut Criterion) {
    let (hw, img) = offers();
    let mut g = c.benchmark_group("create");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for n in [10, 20, 40] {
        let (t, services) = hadoop_like(n);
        let cat = Catalog {
            template: &t,
            hardware: &hw,
            images: &img,
            services: None,
        };
        for size in [10u64, 1_000, 10_000] {
            assert!(
                weft_solver::create(&cat, &services, size).is_ok(),
                "{n} services, {size} nodes"
            );
            g.bench_with_input(
                BenchmarkId::new(format!("{n}-services"), size),
                &size,
                |b, &size| {
                    b.iter(|| weft_solver::create(black_box(&cat), black_box(&services), size))
                },
            );
        }
    }
    g.finish();
}

fn explain_and_change(c: &mut Criterion) {
    let (hw, img) = offers();
    let mut g = c.benchmark_group("other");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    // No layout: the Hadoop-like template without its unconstrained clients, every worker group
    // capped at 50 nodes.
    let (mut t, mut services) = hadoop_like(20);
    services.retain(|s| !s.starts_with("client-"));
    for s in services.iter().filter(|s| s.starts_with("worker-")) {
        t.constraints.services.insert(s.clone(), q(1, 50));
    }
    let cat = Catalog {
        template: &t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    assert!(weft_solver::create(&cat, &services, 1_000).is_err());
    g.bench_function("explain-20-services-1000", |b| {
        b.iter(|| weft_solver::create(black_box(&cat), &services, 1_000))
    });
    // Expand a 1,000-node cluster by 100 nodes.
    let (t, services) = hadoop_like(20);
    let cat = Catalog {
        template: &t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    let nodes: Vec<ExistingNode> = weft_solver::create(&cat, &services, 1_000)
        .expect("solves")
        .nodes
        .into_iter()
        .enumerate()
        .map(|(i, n)| ExistingNode {
            id: format!("n{i}"),
            hardwaretype: n.hardwaretype,
            imagetype: n.imagetype,
            services: n.services.into_iter().collect(),
        })
        .collect();
    g.bench_function("expand-20-services-1000-by-100", |b| {
        b.iter(|| weft_solver::change(black_box(&cat), &nodes, &Change::Expand(100)))
    });
    g.bench_function("shrink-20-services-1000-by-100", |b| {
        b.iter(|| weft_solver::change(black_box(&cat), &nodes, &Change::Shrink(100)))
    });
    g.finish();
}

/// The naive reference of the tests against the solver, on small cases.
fn reference(c: &mut Criterion) {
    let mut g = c.benchmark_group("small");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    let t = common::template(
        r#"{"name":"small","constraints":{"layout":{"mustcoexist":[["c","d"]],"cantcoexist":[["a","c"],["b","c"]]},
            "services":{"a":{"quantities":{"min":1,"max":1}},"b":{"quantities":{"max":2}},"c":{"hardwaretypes":["h2"]}}}}"#,
    );
    let hw_names = common::names(&["h1", "h2"]);
    let img_names = common::names(&["i1", "i2"]);
    let (hw, img) = (
        TypeOffer::new(hw_names.clone()),
        TypeOffer::new(img_names.clone()),
    );
    let services = common::names(&["a", "b", "c", "d"]);
    let svc_set = set(&services);
    let cat = Catalog {
        template: &t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    for size in [2u64, 4] {
        assert_eq!(
            weft_solver::create(&cat, &services, size).is_ok(),
            common::reference_exists(&t, &hw_names, &img_names, &svc_set, size)
        );
        g.bench_with_input(BenchmarkId::new("solver", size), &size, |b, &size| {
            b.iter(|| weft_solver::create(black_box(&cat), &services, size))
        });
        g.bench_with_input(BenchmarkId::new("reference", size), &size, |b, &size| {
            b.iter(|| {
                common::reference_exists(black_box(&t), &hw_names, &img_names, &svc_set, size)
            })
        });
    }
    // An infeasible small case, where the reference must try everything.
    let size = 5;
    let none = common::template(
        r#"{"name":"none","constraints":{"services":{"a":{"quantities":{"max":1}},"b":{"quantities":{"max":1}},"c":{"quantities":{"max":1}},"d":{"quantities":{"max":1}}}}}"#,
    );
    let cat = Catalog {
        template: &none,
        hardware: &hw,
        images: &img,
        services: None,
    };
    assert!(weft_solver::create(&cat, &services, size).is_err());
    g.bench_function("solver-no-layout-5", |b| {
        b.iter(|| weft_solver::create(black_box(&cat), &services, size))
    });
    g.bench_function("reference-no-layout-5", |b| {
        b.iter(|| common::reference_exists(black_box(&none), &hw_names, &img_names, &svc_set, size))
    });
    g.finish();
}

criterion_group!(benches, create, explain_and_change, reference);
criterion_main!(benches);
