//! The resolved model: a cluster's services, hardware and image types as bit indexes, and every
//! template constraint as a relaxable [`Unit`] (so that explanations can drop constraints one by one).

use std::collections::{BTreeMap, BTreeSet};

use weft_model::{ClusterTemplate, LayoutConstraint};

use crate::input::{Catalog, TypeOffer};
use crate::SolveError;

/// A set of services, hardware types or image types, by index.
pub(crate) type Bits = u128;

/// The most services (or hardware types, or image types) one solve handles.
pub(crate) const MAX_BITS: usize = 128;

pub(crate) fn bit(i: usize) -> Bits {
    1u128 << i
}

pub(crate) fn all_bits(n: usize) -> Bits {
    if n >= MAX_BITS {
        Bits::MAX
    } else {
        bit(n) - 1
    }
}

pub(crate) fn ones(b: Bits) -> impl Iterator<Item = usize> {
    (0..MAX_BITS).filter(move |i| b & bit(*i) != 0)
}

/// One service's constraint, resolved to bit sets.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRule {
    pub min: u64,
    pub max: u64,
    /// Allowed hardware (None = any), and the names as the template wrote them.
    pub hw: Option<Bits>,
    pub hw_names: Vec<String>,
    pub img: Option<Bits>,
    pub img_names: Vec<String>,
}

/// A template constraint that an explanation may drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Unit {
    CompatHw,
    CompatImg,
    /// The service must be on at least max(min, 1) nodes.
    Min(usize),
    Hw(usize),
    Img(usize),
    Must(usize),
    Cant(usize),
    Max(usize),
}

/// The template, restricted to one cluster's services, with names turned into indexes.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// The cluster's services, sorted by name; index = bit.
    pub names: Vec<String>,
    /// Hardware names: offered ones in preference order, then types of existing nodes.
    pub hw: Vec<String>,
    pub hw_offered: Bits,
    pub img: Vec<String>,
    pub img_offered: Bits,
    /// The template's compatibility lists (None = any).
    pub compat_hw: Option<Bits>,
    pub compat_img: Option<Bits>,
    pub rules: Vec<ServiceRule>,
    /// Must-coexist sets shrunk to the cluster's services (two or more members).
    pub must: Vec<Bits>,
    /// Can't-coexist sets whose members are all on the cluster.
    pub cant: Vec<Bits>,
    /// Type names that constraints name but the tenant does not have (they never match).
    pub unknown: BTreeSet<String>,
}

fn index(offer: &TypeOffer, extra: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = offer.offered().to_vec();
    for e in extra {
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

fn mask(names: &[String], list: &[String]) -> Bits {
    names
        .iter()
        .enumerate()
        .filter(|(_, n)| list.contains(n))
        .fold(0, |m, (i, _)| m | bit(i))
}

/// The mask of `list` over `names`, `None` (any) for an empty list.
fn list_mask(names: &[String], list: &[String]) -> Option<Bits> {
    (!list.is_empty()).then(|| mask(names, list))
}

/// No min above its max: the template's size and each service's quantities.
fn check_min_max(t: &ClusterTemplate) -> Result<(), SolveError> {
    let c = &t.constraints;
    if c.size.min > c.size.max {
        return Err(SolveError::MinAboveMax {
            what: format!("template {} size", t.name),
            min: c.size.min,
            max: c.size.max,
        });
    }
    for (svc, sc) in &c.services {
        if sc.quantities.min > sc.quantities.max {
            return Err(SolveError::MinAboveMax {
                what: format!("service {svc} quantities"),
                min: sc.quantities.min,
                max: sc.quantities.max,
            });
        }
    }
    Ok(())
}

/// The types the service constraints name that the tenant does not have. Such a type simply
/// never matches (Coopr's own catalogs name some); an explanation says so when nothing else is
/// left.
fn unknown_types(
    cat: &Catalog<'_>,
    extra_hw: &BTreeSet<String>,
    extra_img: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut unknown = BTreeSet::new();
    for sc in cat.template.constraints.services.values() {
        for (list, offer, extra) in [
            (&sc.hardwaretypes, cat.hardware, extra_hw),
            (&sc.imagetypes, cat.images, extra_img),
        ] {
            unknown.extend(
                list.iter()
                    .filter(|n| !offer.is_known(n) && !extra.contains(*n))
                    .cloned(),
            );
        }
    }
    unknown
}

/// Services, hardware types and image types each fit in a bit set.
fn check_sizes(names: &[String], hw: &[String], img: &[String]) -> Result<(), SolveError> {
    for (what, list) in [
        ("services", names),
        ("hardware types", hw),
        ("image types", img),
    ] {
        if list.len() > MAX_BITS {
            return Err(SolveError::TooLarge {
                what,
                count: list.len(),
                limit: MAX_BITS,
            });
        }
    }
    Ok(())
}

/// The layout's must-coexist sets shrunk to the cluster's services `names` (two or more members),
/// and its can't-coexist sets whose members are all on the cluster; without duplicates.
fn coexistence(layout: &LayoutConstraint, names: &[String]) -> (Vec<Bits>, Vec<Bits>) {
    let svc_index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let set_bits = |set: &BTreeSet<String>| -> (Bits, bool) {
        let mut b = 0;
        let mut all = true;
        for s in set {
            match svc_index.get(s.as_str()) {
                Some(i) => b |= bit(*i),
                None => all = false,
            }
        }
        (b, all)
    };
    let mut must = Vec::new();
    for r in &layout.mustcoexist {
        let (b, _) = set_bits(r);
        if b.count_ones() >= 2 && !must.contains(&b) {
            must.push(b);
        }
    }
    let mut cant = Vec::new();
    for r in &layout.cantcoexist {
        let (b, all) = set_bits(r);
        if all && b != 0 && !cant.contains(&b) {
            cant.push(b);
        }
    }
    (must, cant)
}

impl Model {
    /// Resolves the template for a cluster with `services`; `extra_hw` / `extra_img` are the types
    /// of existing nodes (they need an index even when no longer offered).
    pub(crate) fn build(
        cat: &Catalog<'_>,
        services: &BTreeSet<String>,
        extra_hw: &BTreeSet<String>,
        extra_img: &BTreeSet<String>,
    ) -> Result<Model, SolveError> {
        let t = cat.template;
        let c = &t.constraints;
        check_min_max(t)?;
        let unknown = unknown_types(cat, extra_hw, extra_img);
        let names: Vec<String> = services.iter().cloned().collect();
        let hw = index(cat.hardware, extra_hw);
        let img = index(cat.images, extra_img);
        check_sizes(&names, &hw, &img)?;
        let rules = names
            .iter()
            .map(|s| {
                let sc = c.services.get(s).cloned().unwrap_or_default();
                ServiceRule {
                    min: sc.quantities.min,
                    max: sc.quantities.max,
                    hw: list_mask(&hw, &sc.hardwaretypes),
                    img: list_mask(&img, &sc.imagetypes),
                    hw_names: sc.hardwaretypes,
                    img_names: sc.imagetypes,
                }
            })
            .collect();
        let (must, cant) = coexistence(&c.layout, &names);
        Ok(Model {
            names,
            hw_offered: all_bits(cat.hardware.offered().len()),
            img_offered: all_bits(cat.images.offered().len()),
            compat_hw: list_mask(&hw, &t.compatibility.hardwaretypes),
            compat_img: list_mask(&img, &t.compatibility.imagetypes),
            hw,
            img,
            rules,
            must,
            cant,
            unknown,
        })
    }

    /// Every relaxable constraint, in the order an explanation tries to drop them (the ones tried
    /// first are the least informative to blame).
    pub(crate) fn units(&self) -> Vec<Unit> {
        let mut u = Vec::new();
        if self.compat_hw.is_some() {
            u.push(Unit::CompatHw);
        }
        if self.compat_img.is_some() {
            u.push(Unit::CompatImg);
        }
        for (i, r) in self.rules.iter().enumerate() {
            if r.max > 0 || r.min > 0 {
                u.push(Unit::Min(i));
            }
        }
        for (i, r) in self.rules.iter().enumerate() {
            if r.hw.is_some() {
                u.push(Unit::Hw(i));
            }
            if r.img.is_some() {
                u.push(Unit::Img(i));
            }
        }
        u.extend((0..self.must.len()).map(Unit::Must));
        u.extend((0..self.cant.len()).map(Unit::Cant));
        for (i, r) in self.rules.iter().enumerate() {
            if r.max < weft_model::UNBOUNDED {
                u.push(Unit::Max(i));
            }
        }
        u
    }

    pub(crate) fn service_bit(&self, name: &str) -> Option<usize> {
        self.names.binary_search_by(|n| n.as_str().cmp(name)).ok()
    }

    pub(crate) fn hw_bit(&self, name: &str) -> Option<usize> {
        self.hw.iter().position(|n| n == name)
    }

    pub(crate) fn img_bit(&self, name: &str) -> Option<usize> {
        self.img.iter().position(|n| n == name)
    }

    pub(crate) fn set_names(&self, set: Bits) -> Vec<String> {
        ones(set)
            .filter_map(|i| self.names.get(i).cloned())
            .collect()
    }
}

/// Which units are switched off.
#[derive(Debug, Clone, Default)]
pub(crate) struct Relax {
    pub off: BTreeSet<Unit>,
}

impl Relax {
    pub(crate) fn on(&self, u: Unit) -> bool {
        !self.off.contains(&u)
    }
}
