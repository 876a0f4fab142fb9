//! Explanations: when no layout exists, find a minimal set of template constraints in conflict
//! (drop constraints one at a time and keep only those whose removal makes a layout possible; the
//! result is irreducible: dropping any one of them makes the request solvable), then say it in a
//! template author's words.

use std::collections::BTreeSet;

use crate::model::{ones, Model, Relax, Unit};
use crate::search::{solve, Setup};
use crate::SolveError;

/// Builds the "no layout" error. `intro` says what could not be done ("cannot lay out 5 nodes").
pub(crate) fn explain(m: &Model, setup: &Setup, intro: &str) -> SolveError {
    let mut relax = Relax::default();
    let mut kept = Vec::new();
    for u in m.units() {
        relax.off.insert(u);
        match solve(m, &relax, setup) {
            Ok(None) => {}
            // Needed (or undecidable within the step budget): keep it in the explanation.
            Ok(Some(_)) | Err(_) => {
                relax.off.remove(&u);
                kept.push(u);
            }
        }
    }
    SolveError::NoLayout(format!("{intro}: {}", render(m, &kept)))
}

/// "a", "a and b", "a, b and c".
pub(crate) fn and_list<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(AsRef::as_ref).collect();
            format!("{} and {}", init.join(", "), last.as_ref())
        }
    }
}

fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

fn nodes(n: u64) -> String {
    if n == 1 {
        "1 node".to_string()
    } else {
        format!("{n} nodes")
    }
}

/// Says why a type list cannot be met on its own, if that is the case.
fn type_clause(
    kind: &str,
    names: &[String],
    offered: &[String],
    compat: Option<&[String]>,
    unknown: &BTreeSet<String>,
) -> String {
    let listed = or_list(names);
    if names.iter().all(|n| unknown.contains(n)) {
        let which = if names.len() == 1 {
            "which the tenant does not have"
        } else {
            "none of which the tenant has"
        };
        return format!("needs {kind} {listed}, {which}");
    }
    if !names.iter().any(|n| offered.contains(n)) {
        let which = if names.len() == 1 {
            "which the provider does not offer"
        } else {
            "none of which the provider offers"
        };
        return format!("needs {kind} {listed}, {which}");
    }
    if let Some(c) = compat {
        if !names.iter().any(|n| offered.contains(n) && c.contains(n)) {
            let which = if names.len() == 1 {
                "which the template does not allow"
            } else {
                "none of which the template allows"
            };
            return format!("needs {kind} {listed}, {which}");
        }
    }
    format!("needs {kind} {listed}")
}

fn render(m: &Model, kept: &[Unit]) -> String {
    let mut clauses = type_clauses(m, kept);
    clauses.extend(coexist_clauses(m, kept));
    clauses.extend(max_clauses(m, kept));
    clauses.extend(min_clauses(m, kept));
    if clauses.is_empty() {
        clauses.push("every node needs at least one service".to_string());
    }
    clauses.join("; ")
}

/// The clauses of the kept hardware and image constraints: per service, then the template's.
fn type_clauses(m: &Model, kept: &[Unit]) -> Vec<String> {
    let mut clauses: Vec<String> = Vec::new();
    let offered_hw: Vec<String> = ones(m.hw_offered).map(|i| m.hw[i].clone()).collect();
    let offered_img: Vec<String> = ones(m.img_offered).map(|i| m.img[i].clone()).collect();
    let compat_hw: Option<Vec<String>> = m
        .compat_hw
        .map(|b| ones(b).map(|i| m.hw[i].clone()).collect());
    let compat_img: Option<Vec<String>> = m
        .compat_img
        .map(|b| ones(b).map(|i| m.img[i].clone()).collect());
    let kept_has = |u: Unit| kept.contains(&u);
    for u in kept {
        match *u {
            Unit::Hw(s) => clauses.push(format!(
                "{} {}",
                m.names[s],
                type_clause(
                    "hardware",
                    &m.rules[s].hw_names,
                    &offered_hw,
                    compat_hw.as_deref().filter(|_| kept_has(Unit::CompatHw)),
                    &m.unknown,
                )
            )),
            Unit::Img(s) => clauses.push(format!(
                "{} {}",
                m.names[s],
                type_clause(
                    "image",
                    &m.rules[s].img_names,
                    &offered_img,
                    compat_img.as_deref().filter(|_| kept_has(Unit::CompatImg)),
                    &m.unknown,
                )
            )),
            _ => {}
        }
    }
    if kept_has(Unit::CompatHw) {
        clauses.push(format!(
            "the template allows only hardware {}",
            or_list(compat_hw.as_deref().unwrap_or_default())
        ));
    }
    if kept_has(Unit::CompatImg) {
        clauses.push(format!(
            "the template allows only image {}",
            or_list(compat_img.as_deref().unwrap_or_default())
        ));
    }
    clauses
}

/// The clauses of the kept must-coexist and can't-coexist rules.
fn coexist_clauses(m: &Model, kept: &[Unit]) -> Vec<String> {
    kept.iter()
        .filter_map(|u| match *u {
            Unit::Must(i) => Some(format!(
                "{} must share a node",
                and_list(&m.set_names(m.must[i]))
            )),
            Unit::Cant(i) => {
                let n = m.set_names(m.cant[i]);
                Some(match n.len() {
                    1 => format!("{} may not be on any node", n[0]),
                    2 => format!("{} may not share a node", and_list(&n)),
                    _ => format!("{} may not all share a node", and_list(&n)),
                })
            }
            _ => None,
        })
        .collect()
}

/// The clauses of the kept maximums, grouped by value.
fn max_clauses(m: &Model, kept: &[Unit]) -> Vec<String> {
    let mut maxes: Vec<(u64, Vec<String>)> = Vec::new();
    for u in kept {
        if let Unit::Max(s) = *u {
            let v = m.rules[s].max;
            match maxes.iter_mut().find(|(k, _)| *k == v) {
                Some((_, l)) => l.push(m.names[s].clone()),
                None => maxes.push((v, vec![m.names[s].clone()])),
            }
        }
    }
    maxes.sort();
    maxes
        .into_iter()
        .map(|(v, l)| {
            if l.len() == 1 {
                format!("{} is limited to {}", l[0], nodes(v))
            } else {
                format!("{} are each limited to {}", and_list(&l), nodes(v))
            }
        })
        .collect()
}

/// The clauses of the kept minimums: those of two or more each, then the services that must be
/// on a node, in one clause.
fn min_clauses(m: &Model, kept: &[Unit]) -> Vec<String> {
    let mut clauses: Vec<String> = Vec::new();
    let mut placed: Vec<String> = Vec::new();
    for u in kept {
        if let Unit::Min(s) = *u {
            let r = &m.rules[s];
            if r.min >= 2 {
                clauses.push(format!("{} needs at least {}", m.names[s], nodes(r.min)));
            } else {
                placed.push(m.names[s].clone());
            }
        }
    }
    match placed.len() {
        0 => {}
        1 => clauses.push(format!("{} must be on a node", placed[0])),
        _ => clauses.push(format!("{} must each be on a node", and_list(&placed))),
    }
    clauses
}
