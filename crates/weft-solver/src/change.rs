//! The operations: [`create`] a layout, and [`change`] an existing cluster. Both check the request
//! (size, services, requires and conflicts), build the model, run the search and turn its node
//! classes back into nodes, or explain why no layout exists.

use std::collections::{BTreeSet, HashMap};

use weft_model::LARGEST_CLUSTER;

use crate::explain::{and_list, explain};
use crate::input::{Catalog, Change, ExistingNode};
use crate::layout::{Layout, LayoutNode};
use crate::model::{bit, ones, Bits, Model, Relax};
use crate::search::{solve, Class, Setup, STEP_LIMIT};
use crate::SolveError;

/// Lays out a new cluster of `size` nodes with `services` (empty: the template's defaults).
pub fn create(cat: &Catalog<'_>, services: &[String], size: u64) -> Result<Layout, SolveError> {
    check_size(cat, size)?;
    let requested: Vec<String> = if services.is_empty() {
        cat.template.defaults.services.clone()
    } else {
        services.to_vec()
    };
    let all: BTreeSet<String> = requested.into_iter().collect();
    if all.is_empty() {
        return Err(SolveError::NoServices {
            template: cat.template.name.clone(),
        });
    }
    check_services(cat, &all, &all)?;
    let m = Model::build(cat, &all, &BTreeSet::new(), &BTreeSet::new())?;
    check_types(cat, &m)?;
    let setup = Setup {
        total: size,
        existing: Vec::new(),
        fresh: size,
        place: Bits::MAX,
    };
    run(
        &m,
        &setup,
        &Existing::default(),
        &format!("cannot lay out {}", nodes(size)),
    )
}

/// Changes an existing cluster. `existing` lists its nodes oldest first.
pub fn change(
    cat: &Catalog<'_>,
    existing: &[ExistingNode],
    change: &Change,
) -> Result<Layout, SolveError> {
    check_existing(existing)?;
    let on_cluster: BTreeSet<String> = existing
        .iter()
        .flat_map(|n| n.services.iter().cloned())
        .collect();
    match change {
        Change::AddServices(new) => add_services(cat, existing, &on_cluster, new, false),
        Change::Retemplate(new) => add_services(cat, existing, &on_cluster, new, true),
        Change::RemoveService(s) => remove_service(cat, existing, &on_cluster, s),
        Change::Expand(k) => grow(cat, existing, &on_cluster, &[], *k),
        Change::Shrink(k) => shrink(cat, existing, &on_cluster, *k),
        Change::Reshape { add, nodes } => grow(cat, existing, &on_cluster, add, *nodes),
    }
}

/// The cluster has nodes, none listed twice.
fn check_existing(existing: &[ExistingNode]) -> Result<(), SolveError> {
    let mut ids = BTreeSet::new();
    for n in existing {
        if !ids.insert(n.id.as_str()) {
            return Err(SolveError::BadChange(format!(
                "node {} is listed twice",
                n.id
            )));
        }
    }
    if existing.is_empty() {
        return Err(SolveError::BadChange(
            "the cluster has no nodes".to_string(),
        ));
    }
    Ok(())
}

/// Adds services `new` to the existing nodes, or (`retemplate`) moves the cluster to the
/// catalog's template, placing those of `new` not yet on the cluster.
fn add_services(
    cat: &Catalog<'_>,
    existing: &[ExistingNode],
    on_cluster: &BTreeSet<String>,
    new: &[String],
    retemplate: bool,
) -> Result<Layout, SolveError> {
    let count = existing.len() as u64;
    let new: BTreeSet<String> = new
        .iter()
        .filter(|s| !retemplate || !on_cluster.contains(*s))
        .cloned()
        .collect();
    if !retemplate {
        if new.is_empty() {
            return Err(SolveError::BadChange("no services to add".to_string()));
        }
        if let Some(s) = new.iter().find(|s| on_cluster.contains(*s)) {
            return Err(SolveError::BadChange(format!(
                "service {s} is already on the cluster"
            )));
        }
    } else {
        check_size(cat, count)?;
    }
    let all: BTreeSet<String> = on_cluster.union(&new).cloned().collect();
    check_services(cat, &all, &new)?;
    let ex = Existing::group(existing, &BTreeSet::new(), true);
    let m = ex.model(cat, &all)?;
    let place = new
        .iter()
        .filter_map(|s| m.service_bit(s))
        .fold(0, |b, i| b | bit(i));
    let setup = Setup {
        total: count,
        existing: ex.classes(&m),
        fresh: 0,
        place,
    };
    let intro = if retemplate {
        format!("cannot move the cluster to template {}", cat.template.name)
    } else {
        format!(
            "cannot add {} to the {} existing {}",
            and_list(&new.iter().collect::<Vec<_>>()),
            count,
            plural(count)
        )
    };
    run(&m, &setup, &ex, &intro)
}

/// Removes service `s` from every node; nodes left with nothing go.
fn remove_service(
    cat: &Catalog<'_>,
    existing: &[ExistingNode],
    on_cluster: &BTreeSet<String>,
    s: &String,
) -> Result<Layout, SolveError> {
    if !on_cluster.contains(s) {
        return Err(SolveError::BadChange(format!(
            "service {s} is not on the cluster"
        )));
    }
    let all: BTreeSet<String> = on_cluster.iter().filter(|x| *x != s).cloned().collect();
    check_services(cat, &all, &BTreeSet::new())?;
    let gone = BTreeSet::from([s.clone()]);
    let ex = Existing::group(existing, &gone, false);
    let left = ex.nodes.len() as u64;
    if left == 0 {
        return Err(SolveError::BadChange(format!(
            "removing {s} would leave the cluster with no nodes"
        )));
    }
    check_size(cat, left)?;
    let m = ex.model(cat, &all)?;
    let setup = Setup {
        total: left,
        existing: ex.classes(&m),
        fresh: 0,
        place: 0,
    };
    run(&m, &setup, &ex, &format!("cannot remove {s}"))
}

/// Adds `k` new nodes and the `new` services: with none, the existing nodes keep what they have
/// (expand); with some, existing nodes may gain them and the new nodes take any service
/// (reshape).
fn grow(
    cat: &Catalog<'_>,
    existing: &[ExistingNode],
    on_cluster: &BTreeSet<String>,
    new: &[String],
    k: u64,
) -> Result<Layout, SolveError> {
    if k == 0 {
        return Err(SolveError::BadChange(
            "expand needs at least 1 node".to_string(),
        ));
    }
    let count = existing.len() as u64;
    let total = count.saturating_add(k);
    check_size(cat, total)?;
    let new: BTreeSet<String> = new
        .iter()
        .filter(|s| !on_cluster.contains(*s))
        .cloned()
        .collect();
    let all: BTreeSet<String> = on_cluster.union(&new).cloned().collect();
    check_services(cat, &all, &new)?;
    let ex = Existing::group(existing, &BTreeSet::new(), !new.is_empty());
    let m = ex.model(cat, &all)?;
    check_types(cat, &m)?;
    let setup = Setup {
        total,
        existing: ex.classes(&m),
        fresh: k,
        place: Bits::MAX,
    };
    let intro = if new.is_empty() {
        format!("cannot add {} to the cluster of {}", nodes(k), count)
    } else {
        format!(
            "cannot move the cluster to template {} with {} more",
            cat.template.name,
            nodes(k)
        )
    };
    run(&m, &setup, &ex, &intro)
}

fn nodes(n: u64) -> String {
    format!("{n} {}", plural(n))
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        "node"
    } else {
        "nodes"
    }
}

fn check_size(cat: &Catalog<'_>, size: u64) -> Result<(), SolveError> {
    let t = cat.template;
    if size == 0 {
        return Err(SolveError::SizeZero);
    }
    if size > LARGEST_CLUSTER {
        return Err(SolveError::SizeAboveLimit {
            size,
            limit: LARGEST_CLUSTER,
        });
    }
    let c = t.constraints.size;
    if c.min > c.max {
        return Err(SolveError::MinAboveMax {
            what: format!("template {} size", t.name),
            min: c.min,
            max: c.max,
        });
    }
    if size < c.min || size > c.max {
        return Err(SolveError::SizeOutsideTemplate {
            template: t.name.clone(),
            size,
            min: c.min,
            max: c.max,
        });
    }
    Ok(())
}

/// Existence and compatibility of `new`, then Coopr's cluster-wide requires and conflicts checks.
fn check_services(
    cat: &Catalog<'_>,
    all: &BTreeSet<String>,
    new: &BTreeSet<String>,
) -> Result<(), SolveError> {
    let compat = &cat.template.compatibility.services;
    for s in new {
        if let Some(defs) = cat.services {
            if !defs.iter().any(|d| &d.name == s) {
                return Err(SolveError::UnknownService { service: s.clone() });
            }
        }
        if !compat.is_empty() && !compat.contains(s) {
            return Err(SolveError::IncompatibleService {
                service: s.clone(),
                template: cat.template.name.clone(),
            });
        }
    }
    let Some(defs) = cat.services else {
        return Ok(());
    };
    let on: Vec<_> = defs.iter().filter(|d| all.contains(&d.name)).collect();
    for d in &on {
        let deps = &d.dependencies;
        for req in deps.install.requires.iter().chain(&deps.runtime.requires) {
            let provided =
                all.contains(req) || on.iter().any(|o| o.dependencies.provides.contains(req));
            if !provided {
                return Err(SolveError::Requires {
                    service: d.name.clone(),
                    missing: req.clone(),
                });
            }
        }
        if let Some(other) = deps
            .conflicts
            .iter()
            .find(|c| all.contains(*c) && **c != d.name)
        {
            return Err(SolveError::Conflicts {
                service: d.name.clone(),
                other: other.clone(),
            });
        }
    }
    Ok(())
}

/// Fails early, with a plain message, when no hardware or image type is both offered and allowed.
fn check_types(cat: &Catalog<'_>, m: &Model) -> Result<(), SolveError> {
    let c = &cat.template.compatibility;
    for (kind, names, offered, compat, listed) in [
        (
            "hardware type",
            &m.hw,
            m.hw_offered,
            m.compat_hw,
            &c.hardwaretypes,
        ),
        (
            "image type",
            &m.img,
            m.img_offered,
            m.compat_img,
            &c.imagetypes,
        ),
    ] {
        if offered & compat.unwrap_or(Bits::MAX) != 0 {
            continue;
        }
        let list = |b: Bits| {
            ones(b)
                .map(|i| names[i].clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let detail = if offered == 0 {
            "the provider offers none".to_string()
        } else {
            format!(
                "the template allows only {}; the provider offers {}",
                listed.join(", "),
                list(offered)
            )
        };
        return Err(SolveError::NoTypes { kind, detail });
    }
    Ok(())
}

/// The existing nodes, grouped into classes of identical nodes (first occurrence order).
#[derive(Debug, Default)]
struct Existing {
    /// (id, hardware, image, services) of the nodes that stay, oldest first.
    nodes: Vec<(String, String, String, BTreeSet<String>)>,
    /// Ids of nodes removed by the change itself.
    removed: Vec<String>,
    /// For each class: its node indexes (into `nodes`).
    groups: Vec<Vec<usize>>,
    open: bool,
}

impl Existing {
    /// Groups `nodes` after taking the `gone` services off them; nodes left empty are removed.
    fn group(nodes: &[ExistingNode], gone: &BTreeSet<String>, open: bool) -> Self {
        let mut ex = Existing {
            open,
            ..Existing::default()
        };
        let mut keys: HashMap<(String, String, BTreeSet<String>), usize> = HashMap::new();
        for n in nodes {
            let services: BTreeSet<String> = n.services.difference(gone).cloned().collect();
            if services.is_empty() && !n.services.is_empty() {
                ex.removed.push(n.id.clone());
                continue;
            }
            let key = (
                n.hardwaretype.clone(),
                n.imagetype.clone(),
                services.clone(),
            );
            let g = *keys.entry(key).or_insert_with(|| {
                ex.groups.push(Vec::new());
                ex.groups.len() - 1
            });
            ex.groups[g].push(ex.nodes.len());
            ex.nodes.push((
                n.id.clone(),
                n.hardwaretype.clone(),
                n.imagetype.clone(),
                services,
            ));
        }
        ex
    }

    fn model(&self, cat: &Catalog<'_>, all: &BTreeSet<String>) -> Result<Model, SolveError> {
        let hw = self.nodes.iter().map(|n| n.1.clone()).collect();
        let img = self.nodes.iter().map(|n| n.2.clone()).collect();
        Model::build(cat, all, &hw, &img)
    }

    fn classes(&self, m: &Model) -> Vec<Class> {
        self.groups
            .iter()
            .enumerate()
            .map(|(origin, g)| {
                let (_, hw, img, services) = &self.nodes[g[0]];
                Class {
                    set: services
                        .iter()
                        .filter_map(|s| m.service_bit(s))
                        .fold(0, |b, i| b | bit(i)),
                    hw: m.hw_bit(hw).map_or(0, bit),
                    img: m.img_bit(img).map_or(0, bit),
                    open: self.open,
                    origin,
                    count: g.len() as u64,
                }
            })
            .collect()
    }
}

fn run(m: &Model, setup: &Setup, ex: &Existing, intro: &str) -> Result<Layout, SolveError> {
    match solve(m, &Relax::default(), setup)? {
        Some(classes) => Ok(to_layout(m, &classes, ex)),
        None => Err(explain(m, setup, intro)),
    }
}

fn to_layout(m: &Model, classes: &[Class], ex: &Existing) -> Layout {
    let first = |b: Bits, names: &[String]| {
        ones(b)
            .next()
            .and_then(|i| names.get(i).cloned())
            .unwrap_or_default()
    };
    let mut existing: Vec<Option<LayoutNode>> = vec![None; ex.nodes.len()];
    let mut next_in_group = vec![0usize; ex.groups.len()];
    let mut fresh = Vec::new();
    for c in classes {
        let services = m.set_names(c.set);
        if let Some(group) = ex.groups.get(c.origin) {
            for _ in 0..c.count {
                let Some(&idx) = group.get(next_in_group[c.origin]) else {
                    break;
                };
                next_in_group[c.origin] += 1;
                let (id, hw, img, _) = &ex.nodes[idx];
                existing[idx] = Some(LayoutNode {
                    id: Some(id.clone()),
                    hardwaretype: hw.clone(),
                    imagetype: img.clone(),
                    services: services.clone(),
                });
            }
        } else {
            let node = LayoutNode {
                id: None,
                hardwaretype: first(c.hw, &m.hw),
                imagetype: first(c.img, &m.img),
                services,
            };
            fresh.push((node, c.count));
        }
    }
    fresh.sort();
    let mut nodes: Vec<LayoutNode> = existing.into_iter().flatten().collect();
    for (node, count) in fresh {
        nodes.extend(std::iter::repeat_n(node, count as usize));
    }
    Layout {
        nodes,
        removed: ex.removed.clone(),
    }
}

/// Shrink: removes `k` nodes, preferring the newest, such that every service keeps its minimum.
fn shrink(
    cat: &Catalog<'_>,
    existing: &[ExistingNode],
    on_cluster: &BTreeSet<String>,
    k: u64,
) -> Result<Layout, SolveError> {
    let n = existing.len() as u64;
    if k == 0 || k >= n {
        return Err(SolveError::BadChange(format!(
            "shrink needs between 1 and {} nodes, got {k}",
            n - 1
        )));
    }
    check_size(cat, n - k)?;
    let ex_all = Existing::group(existing, &BTreeSet::new(), false);
    let m = ex_all.model(cat, on_cluster)?;
    // The current layout must be valid before any node can go.
    let setup = Setup {
        total: n,
        existing: ex_all.classes(&m),
        fresh: 0,
        place: 0,
    };
    if solve(&m, &Relax::default(), &setup)?.is_none() {
        return Err(explain(
            &m,
            &setup,
            "the current layout breaks the template",
        ));
    }
    let sets: Vec<Bits> = existing
        .iter()
        .map(|e| {
            e.services
                .iter()
                .filter_map(|s| m.service_bit(s))
                .fold(0, |b, i| b | bit(i))
        })
        .collect();
    let mut slack: Vec<i64> = m
        .rules
        .iter()
        .enumerate()
        .map(|(s, r)| {
            let have = sets.iter().filter(|b| *b & bit(s) != 0).count() as i64;
            let need = if r.max > 0 { r.min.max(1) } else { 0 };
            have - need.min(i64::MAX as u64) as i64
        })
        .collect();
    let mut chosen = Vec::new();
    if !pick(&sets, k as usize, &mut slack.clone(), &mut chosen)? {
        return Err(shrink_blocked(&m, &sets, k, n, &mut slack)?);
    }
    Ok(layout_without(existing, &chosen))
}

/// Why `k` of the `n` nodes (`sets`: their services) cannot go: a minimal set of minimums that
/// block the shrink (`slack`: per service, how many nodes with it may go).
fn shrink_blocked(
    m: &Model,
    sets: &[Bits],
    k: u64,
    n: u64,
    slack: &mut [i64],
) -> Result<SolveError, SolveError> {
    let mut needed = Vec::new();
    for s in 0..slack.len() {
        let saved = slack[s];
        slack[s] = i64::MAX / 2;
        if pick(sets, k as usize, &mut slack.to_vec(), &mut Vec::new())? {
            slack[s] = saved;
            needed.push(s);
        }
    }
    let what: Vec<String> = needed
        .iter()
        .map(|&s| match m.rules[s].min {
            0 | 1 => format!("{} must be on a node", m.names[s]),
            min => format!("{} needs at least {}", m.names[s], nodes(min)),
        })
        .collect();
    Ok(SolveError::NoLayout(format!(
        "cannot remove {} from the cluster of {n}: {}",
        nodes(k),
        what.join("; ")
    )))
}

/// The existing nodes without those at the indexes `chosen`, which are the removed ones (newest
/// first).
fn layout_without(existing: &[ExistingNode], chosen: &[usize]) -> Layout {
    let gone: BTreeSet<&str> = chosen.iter().map(|i| existing[*i].id.as_str()).collect();
    let nodes = existing
        .iter()
        .filter(|e| !gone.contains(e.id.as_str()))
        .map(|e| LayoutNode {
            id: Some(e.id.clone()),
            hardwaretype: e.hardwaretype.clone(),
            imagetype: e.imagetype.clone(),
            services: e.services.iter().cloned().collect(),
        })
        .collect();
    let removed = existing
        .iter()
        .rev()
        .filter(|e| gone.contains(e.id.as_str()))
        .map(|e| e.id.clone())
        .collect();
    Layout { nodes, removed }
}

/// Depth first over nodes newest first: remove a node when every service on it has slack left,
/// else keep it; backtracks (explicit stack, no recursion) when too few nodes remain.
fn pick(
    sets: &[Bits],
    k: usize,
    slack: &mut [i64],
    chosen: &mut Vec<usize>,
) -> Result<bool, SolveError> {
    let mut next = sets.len(); // the next node considered is next - 1
    let mut steps = 0u64;
    loop {
        if chosen.len() == k {
            return Ok(true);
        }
        steps += 1;
        if steps > STEP_LIMIT {
            return Err(SolveError::SearchLimit { steps: STEP_LIMIT });
        }
        if next < k - chosen.len() {
            // Undo the latest removal and keep that node instead.
            let Some(c) = chosen.pop() else {
                return Ok(false);
            };
            ones(sets[c]).for_each(|s| slack[s] += 1);
            next = c;
            continue;
        }
        let i = next - 1;
        next = i;
        if ones(sets[i]).all(|s| slack[s] > 0) {
            ones(sets[i]).for_each(|s| slack[s] -= 1);
            chosen.push(i);
        }
    }
}
