//! Agreement with a naive exhaustive reference solver on small random templates: both agree on
//! whether a layout exists, every returned layout passes the independent checker, and solving
//! twice gives the same layout.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use weft_model::{
    ClusterTemplate, Compatibility, Constraints, LayoutConstraint, Quantities, ServiceConstraint,
    UNBOUNDED,
};
use weft_solver::{Catalog, SolveError, TypeOffer};

use crate::common::{reference_exists, Rules};

const SERVICES: [&str; 4] = ["a", "b", "c", "d"];
const HW: [&str; 3] = ["h1", "h2", "h3"];
const IMG: [&str; 3] = ["i1", "i2", "i3"];

/// A random small problem: template, offered types, requested services, size.
#[derive(Debug, Clone)]
struct Case {
    t: ClusterTemplate,
    hw: Vec<String>,
    img: Vec<String>,
    services: BTreeSet<String>,
    size: u64,
}

fn pick<const N: usize>(all: [&'static str; N], mask: u32) -> Vec<String> {
    all.iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, s)| s.to_string())
        .collect()
}

fn service_constraint() -> impl Strategy<Value = ServiceConstraint> {
    (
        0u32..8,
        0u32..8,
        0u64..3,
        prop_oneof![Just(UNBOUNDED), 0u64..4],
    )
        .prop_map(|(h, i, min, max)| {
            // Mostly unrestricted type lists, so that rules and counts get exercised.
            let hw = if h < 5 { Vec::new() } else { pick(HW, h) };
            let img = if i < 6 { Vec::new() } else { pick(IMG, i) };
            ServiceConstraint {
                hardwaretypes: hw,
                imagetypes: img,
                quantities: Quantities {
                    min: min.min(max),
                    max,
                },
            }
        })
}

fn rule(min_len: usize) -> impl Strategy<Value = BTreeSet<String>> {
    proptest::sample::subsequence(SERVICES.to_vec(), min_len..=3)
        .prop_map(|v| v.into_iter().map(String::from).collect())
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(proptest::option::weighted(0.6, service_constraint()), 4),
        proptest::collection::vec(rule(2), 0..3),
        proptest::collection::vec(rule(1), 0..3),
        (1u32..8, 1u32..4, prop_oneof![4 => Just(0u32), 1 => 1u32..8]),
        (1u32..16, 1u64..=4),
    )
        .prop_map(|(cons, must, cant, (hw, img, compat), (svc, size))| {
            let services: BTreeMap<String, ServiceConstraint> = SERVICES
                .iter()
                .zip(cons)
                .filter_map(|(s, c)| c.map(|c| (s.to_string(), c)))
                .collect();
            let t = ClusterTemplate {
                name: "random".into(),
                compatibility: Compatibility {
                    hardwaretypes: pick(HW, compat),
                    ..Compatibility::default()
                },
                constraints: Constraints {
                    layout: LayoutConstraint {
                        mustcoexist: must,
                        cantcoexist: cant,
                    },
                    services,
                    ..Constraints::default()
                },
                ..ClusterTemplate::default()
            };
            // h3 / i3 exist but are never offered.
            Case {
                t,
                hw: pick(HW, hw & 3),
                img: pick(IMG, img & 3),
                services: pick(SERVICES, svc).into_iter().collect(),
                size,
            }
        })
        .prop_filter("something is offered", |c| {
            !c.hw.is_empty() && !c.img.is_empty()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn solver_agrees_with_the_naive_reference(c in case()) {
        let hw = TypeOffer::new(c.hw.clone()).with_known(HW);
        let img = TypeOffer::new(c.img.clone()).with_known(IMG);
        let cat = Catalog { template: &c.t, hardware: &hw, images: &img, services: None };
        let requested: Vec<String> = c.services.iter().cloned().collect();
        let got = weft_solver::create(&cat, &requested, c.size);
        let want = reference_exists(&c.t, &c.hw, &c.img, &c.services, c.size);
        match &got {
            Ok(layout) => {
                prop_assert!(want, "solver found a layout the reference says cannot exist:\n{}", layout.render());
                let rules = Rules { t: &c.t, hw: &c.hw, img: &c.img, services: &c.services };
                if let Err(e) = rules.layout_ok(c.size, &layout.nodes) {
                    prop_assert!(false, "invalid layout ({e}):\n{}", layout.render());
                }
                prop_assert_eq!(&weft_solver::create(&cat, &requested, c.size), &got, "not deterministic");
            }
            Err(e @ (SolveError::NoLayout(_) | SolveError::NoTypes { .. })) => {
                prop_assert!(!want, "solver said no layout ({e}) but the reference found one");
                prop_assert!(!e.to_string().is_empty());
            }
            Err(e) => prop_assert!(false, "unexpected error: {e}"),
        }
    }
}
