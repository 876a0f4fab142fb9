//! Test helpers: building templates and catalogs, rendering results, and an independent layout
//! checker (written from the rules, sharing no code with the solver).

use std::collections::BTreeSet;

use weft_model::{lenient, ClusterTemplate};
use weft_solver::{Catalog, Layout, LayoutNode, SolveError, TypeOffer};

pub(crate) fn template(json: &str) -> ClusterTemplate {
    lenient::parse_as(json.as_bytes(), "a cluster template").expect("test template parses")
}

pub(crate) fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Solves a create and renders the layout, or the error message prefixed with `error: `.
pub(crate) fn solve_text(
    t: &ClusterTemplate,
    hw: &[&str],
    img: &[&str],
    services: &[&str],
    size: u64,
) -> String {
    let hw = TypeOffer::new(hw.iter().copied());
    let img = TypeOffer::new(img.iter().copied());
    let cat = Catalog {
        template: t,
        hardware: &hw,
        images: &img,
        services: None,
    };
    render(weft_solver::create(&cat, &names(services), size))
}

pub(crate) fn render(r: Result<Layout, SolveError>) -> String {
    match r {
        Ok(l) => l.render(),
        Err(e) => format!("error: {e}\n"),
    }
}

/// A Hadoop-like template: three masters (max 1 each, the namenode on large hardware), zookeeper
/// on 3 to 5 nodes, workers (datanode, nodemanager, regionserver together, datanode max 50) that
/// may not sit with their masters.
pub(crate) const HADOOP: &str = r#"{
  "name": "hadoop",
  "defaults": {"services": ["hdfs-namenode", "yarn-resourcemanager", "hbase-master", "zookeeper",
                            "hdfs-datanode", "yarn-nodemanager", "hbase-regionserver"]},
  "constraints": {
    "layout": {
      "mustcoexist": [["hdfs-datanode", "yarn-nodemanager"], ["yarn-nodemanager", "hbase-regionserver"]],
      "cantcoexist": [["hdfs-namenode", "hdfs-datanode"], ["yarn-resourcemanager", "yarn-nodemanager"],
                      ["hbase-master", "hbase-regionserver"]]
    },
    "services": {
      "hdfs-namenode": {"hardwaretypes": ["large"], "quantities": {"min": 1, "max": 1}},
      "yarn-resourcemanager": {"quantities": {"min": 1, "max": 1}},
      "hbase-master": {"quantities": {"min": 1, "max": 1}},
      "zookeeper": {"quantities": {"min": 3, "max": 5}},
      "hdfs-datanode": {"quantities": {"min": 1, "max": 50}}
    }
  }
}"#;

/// The independent checker: is `nodes` a valid layout of `size` nodes for `services`?
pub(crate) struct Rules<'a> {
    pub t: &'a ClusterTemplate,
    pub hw: &'a [String],
    pub img: &'a [String],
    pub services: &'a BTreeSet<String>,
}

impl Rules<'_> {
    /// Node-level rules: services known, types offered and allowed, layout rules.
    pub(crate) fn node_ok(
        &self,
        hw: &str,
        img: &str,
        set: &BTreeSet<String>,
    ) -> Result<(), String> {
        if set.is_empty() {
            return Err("a node has no service".into());
        }
        if !self.hw.iter().any(|h| h == hw) || !self.img.iter().any(|i| i == img) {
            return Err(format!("{hw}/{img} is not offered"));
        }
        let compat = &self.t.compatibility;
        if !compat.hardwaretypes.is_empty() && !compat.hardwaretypes.iter().any(|h| h == hw) {
            return Err(format!("{hw} not compatible"));
        }
        if !compat.imagetypes.is_empty() && !compat.imagetypes.iter().any(|h| h == img) {
            return Err(format!("{img} not compatible"));
        }
        for s in set {
            if !self.services.contains(s) {
                return Err(format!("{s} was not requested"));
            }
            if let Some(c) = self.t.constraints.services.get(s) {
                if !c.hardwaretypes.is_empty() && !c.hardwaretypes.iter().any(|h| h == hw) {
                    return Err(format!("{s} on hardware {hw}"));
                }
                if !c.imagetypes.is_empty() && !c.imagetypes.iter().any(|h| h == img) {
                    return Err(format!("{s} on image {img}"));
                }
            }
        }
        for rule in &self.t.constraints.layout.cantcoexist {
            if !rule.is_empty() && rule.iter().all(|s| set.contains(s)) {
                return Err(format!("{rule:?} share a node"));
            }
        }
        for rule in &self.t.constraints.layout.mustcoexist {
            let on: Vec<_> = rule.iter().filter(|s| self.services.contains(*s)).collect();
            let here = on.iter().filter(|s| set.contains(**s)).count();
            if here != 0 && here != on.len() {
                return Err(format!("{rule:?} split"));
            }
        }
        Ok(())
    }

    /// Per-service counts for a multiset of node service sets.
    pub(crate) fn counts_ok<'s>(
        &self,
        sets: impl Iterator<Item = &'s BTreeSet<String>> + Clone,
    ) -> Result<(), String> {
        for s in self.services {
            let n = sets.clone().filter(|set| set.contains(s)).count() as u64;
            let q = self
                .t
                .constraints
                .services
                .get(s)
                .map(|c| c.quantities)
                .unwrap_or_default();
            if n < q.min || n > q.max {
                return Err(format!("{s} on {n} nodes, outside {}..{}", q.min, q.max));
            }
            if q.max > 0 && n == 0 {
                return Err(format!("{s} is on no node"));
            }
        }
        Ok(())
    }

    pub(crate) fn layout_ok(&self, size: u64, nodes: &[LayoutNode]) -> Result<(), String> {
        if nodes.len() as u64 != size {
            return Err(format!("{} nodes, want {size}", nodes.len()));
        }
        let sets: Vec<BTreeSet<String>> = nodes
            .iter()
            .map(|n| n.services.iter().cloned().collect())
            .collect();
        for (n, set) in nodes.iter().zip(&sets) {
            if n.services.len() != set.len() || !n.services.windows(2).all(|w| w[0] < w[1]) {
                return Err("services not sorted".into());
            }
            self.node_ok(&n.hardwaretype, &n.imagetype, set)?;
        }
        self.counts_ok(sets.iter())
    }
}

/// The naive reference: every multiset of `size` valid node shapes, checked by the rules.
pub(crate) fn reference_exists(
    t: &ClusterTemplate,
    hw: &[String],
    img: &[String],
    services: &BTreeSet<String>,
    size: u64,
) -> bool {
    let rules = Rules {
        t,
        hw,
        img,
        services,
    };
    let all: Vec<&String> = services.iter().collect();
    let mut shapes: Vec<BTreeSet<String>> = Vec::new();
    for mask in 1u32..(1 << all.len()) {
        let set: BTreeSet<String> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, s)| (*s).clone())
            .collect();
        let fits = hw
            .iter()
            .any(|h| img.iter().any(|i| rules.node_ok(h, i, &set).is_ok()));
        if fits {
            shapes.push(set);
        }
    }
    // Multisets as non-decreasing index sequences.
    fn go(
        shapes: &[BTreeSet<String>],
        from: usize,
        left: u64,
        chosen: &mut Vec<usize>,
        rules: &Rules<'_>,
    ) -> bool {
        if left == 0 {
            return rules.counts_ok(chosen.iter().map(|i| &shapes[*i])).is_ok();
        }
        for i in from..shapes.len() {
            chosen.push(i);
            let found = go(shapes, i, left - 1, chosen, rules);
            chosen.pop();
            if found {
                return true;
            }
        }
        false
    }
    go(&shapes, 0, size, &mut Vec::new(), &rules)
}
