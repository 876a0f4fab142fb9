//! A cluster template tested offline against a catalog, as CI runs `weft template test`: pure, no
//! store. [`test_template`] runs every check and answers a [`TemplateReport`] whose problems each
//! name their check, the field at fault and what is wrong:
//!
//! - **form**: the template reads as a template (names, sizes), and its parents and partials
//!   resolve;
//! - **references**: every entity it names exists (services, hardware and image types, the default
//!   provider, parent and partials; the dependencies of the services it can place), as
//!   [`crate::gaps`] finds them;
//! - **defaults**: every default lies inside the template's compatibility lists;
//! - **sizes**: every size of `constraints.size` (at most [`SIZE_SCAN`] of them, from the
//!   smallest) has a layout of the default services, per provider; the sizes without one are
//!   listed as ranges with the solver's reason;
//! - **macros**: every macro of the default config, the links and the placeable services' action
//!   fields parses and names a service that exists (one the template can place, for its own config
//!   and links), and no link lists every node of a service that may run on several;
//! - **automators**: every action of a placeable service names a known automator type and carries
//!   the admin fields that type requires;
//! - **plans**: a create plan builds at the smallest and the largest size with a layout.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_model::{CatalogExport, ClusterTemplate, PartialTemplate, PluginType, Service};
use weft_planner::{Operation, PlanInput, PlanNode};
use weft_solver::{Catalog, Layout, TypeOffer};

use crate::gaps::{self, Gap, Names};
use crate::preview::{ranges, restrict};

/// The most sizes the `sizes` check solves, from the template's smallest.
pub const SIZE_SCAN: u64 = crate::preview::SIZE_SCAN;

/// The checks, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// The template reads as one, and its parents and partials resolve.
    Form,
    /// Every entity it names exists.
    References,
    /// Every default lies inside the compatibility lists.
    Defaults,
    /// Every size in range has a layout.
    Sizes,
    /// Every macro parses and names a service that exists; links name one node.
    Macros,
    /// Every action names a known automator type with its required fields.
    Automators,
    /// A create plan builds at the smallest and largest size.
    Plans,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 7] = [
        Check::Form,
        Check::References,
        Check::Defaults,
        Check::Sizes,
        Check::Macros,
        Check::Automators,
        Check::Plans,
    ];

    /// What the check asserts, for people.
    pub fn title(self) -> &'static str {
        match self {
            Check::Form => "the template is well formed and resolves",
            Check::References => "every entity it names exists",
            Check::Defaults => "every default is compatible",
            Check::Sizes => "every size in range has a layout",
            Check::Macros => "every macro resolves",
            Check::Automators => "every action has a known automator and its fields",
            Check::Plans => "a create plan builds at the smallest and largest size",
        }
    }

    /// The check's name as JSON writes it (`references`).
    pub fn name(self) -> &'static str {
        match self {
            Check::Form => "form",
            Check::References => "references",
            Check::Defaults => "defaults",
            Check::Sizes => "sizes",
            Check::Macros => "macros",
            Check::Automators => "automators",
            Check::Plans => "plans",
        }
    }
}

/// One problem: its check, the field at fault (`defaults.services[1]`,
/// `services/web.provisioner.actions.start.type`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The check that found it.
    pub check: Check,
    /// The field at fault; a service's fields are prefixed with `services/<name>.`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Sizes without a layout, one range with the solver's reason at its first size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unsolved {
    /// The first size of the range.
    pub from: u64,
    /// The last size of the range (inclusive).
    pub to: u64,
    /// Why the solver found no layout at `from`.
    pub reason: String,
}

/// The sizes scanned for one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeScan {
    /// The provider whose hardware and image types were offered.
    pub provider: String,
    /// The sizes scanned, inclusive.
    pub scanned: [u64; 2],
    /// The sizes with a layout, as inclusive ranges.
    pub solved: Vec<[u64; 2]>,
    /// The sizes without one.
    pub unsolved: Vec<Unsolved>,
}

/// A create plan that was built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBuilt {
    /// The provider of the layout.
    pub provider: String,
    /// The cluster size.
    pub size: u64,
    /// How many node tasks the plan has.
    pub tasks: usize,
}

/// What [`test_template`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateReport {
    /// The template's name.
    pub template: String,
    /// True when there is no problem.
    pub passed: bool,
    /// Every problem, in check order.
    pub problems: Vec<Problem>,
    /// The size scans, one per provider tried.
    pub sizes: Vec<SizeScan>,
    /// The create plans built.
    pub plans: Vec<PlanBuilt>,
    /// What was not checked, and why (sizes past the scan, a provider missing...).
    pub notes: Vec<String>,
}

/// Tests `template` against `catalog` (where a template of the same name is replaced by it), with
/// `automators` as the automator types a provisioner offers.
pub fn test_template(
    catalog: &CatalogExport,
    template: &ClusterTemplate,
    automators: &[PluginType],
) -> TemplateReport {
    let mut cat = catalog.clone();
    cat.clustertemplates.retain(|t| t.name != template.name);
    cat.clustertemplates.push(template.clone());
    let names = Names::of_catalog(&cat, automators);
    let mut r = TemplateReport {
        template: template.name.clone(),
        passed: false,
        problems: Vec::new(),
        sizes: Vec::new(),
        plans: Vec::new(),
        notes: Vec::new(),
    };
    let t = match resolve(&cat, template) {
        Ok(t) => t,
        Err(fault) => {
            if let Some(p) = fault {
                r.problems.push(p);
            }
            r.notes
                .push("the template did not resolve: the rest is checked as written".into());
            template.clone()
        }
    };
    r.problems.extend(reference_problems(template, &t, &names));
    let services = placeable(&cat, &t);
    for s in &services {
        r.problems.extend(service_problems(s, &names, automators));
    }
    r.problems.extend(macro_problems(&t, &names, &services));
    sizes_and_plans(&cat, &t, &mut r);
    r.problems.sort_by_key(|p| p.check);
    r.passed = r.problems.is_empty();
    r
}

fn problem(check: Check, field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        check,
        field: field.into(),
        message: message.into(),
    }
}

/// `own` merged through its parents and partials from `cat`. `Err(None)` when a parent or partial
/// is missing (the references check names it); `Err(Some(_))` when the merge breaks a rule.
fn resolve(cat: &CatalogExport, own: &ClusterTemplate) -> Result<ClusterTemplate, Option<Problem>> {
    let form = |e: weft_model::ModelError| {
        let field = match &e {
            weft_model::ModelError::Invalid { field, .. } => field.clone(),
            weft_model::ModelError::Malformed(_) => String::new(),
        };
        Some(problem(Check::Form, field, e.to_string()))
    };
    let mut chain = vec![own.clone()];
    while let Some(parent) = chain.last().and_then(|t| t.extends.clone()) {
        if chain.len() > 16 || chain.iter().any(|t| t.name == parent.name) {
            let msg = format!("template inheritance through {} is circular", parent.name);
            return Err(Some(problem(Check::Form, "extends.name", msg)));
        }
        let next = cat.clustertemplates.iter().find(|t| t.name == parent.name);
        chain.push(next.ok_or(None)?.clone());
    }
    let mut resolved: Option<ClusterTemplate> = None;
    while let Some(t) = chain.pop() {
        let partials: Vec<PartialTemplate> = t
            .includes
            .iter()
            .map(|inc| cat.partialtemplates.iter().find(|p| p.name == inc.name))
            .collect::<Option<Vec<_>>>()
            .ok_or(None)?
            .into_iter()
            .cloned()
            .collect();
        let merged = if chain.is_empty() {
            weft_model::resolve::resolve_template(&t, resolved.as_ref(), &partials)
        } else {
            weft_model::resolve::merge_template(&t, resolved.as_ref(), &partials)
        };
        resolved = Some(merged.map_err(form)?);
    }
    resolved.ok_or(None)
}

/// The references and defaults checks: the parent and partials of the template as written, the
/// rest of the resolved one. A link that lists several nodes is the macros check's.
fn reference_problems(own: &ClusterTemplate, t: &ClusterTemplate, names: &Names) -> Vec<Problem> {
    let inherits =
        |g: &Gap| g.warning.field == "extends.name" || g.warning.field.starts_with("includes[");
    let mut gaps: Vec<Gap> = gaps::template_gaps(own, names)
        .into_iter()
        .filter(inherits)
        .collect();
    gaps.extend(
        gaps::template_gaps(t, names)
            .into_iter()
            .filter(|g| !inherits(g)),
    );
    let mut seen = BTreeSet::new();
    gaps.into_iter()
        .filter(|g| seen.insert((g.warning.field.clone(), g.warning.message.clone())))
        .map(|g| {
            let f = &g.warning.field;
            let check = if f.starts_with("links[") {
                Check::Macros
            } else if f.starts_with("defaults.") && !g.missing {
                Check::Defaults
            } else {
                Check::References
            };
            problem(check, g.warning.field, g.warning.message)
        })
        .collect()
}

/// The catalog's services the template can place: its compatible and default services.
fn placeable<'a>(cat: &'a CatalogExport, t: &ClusterTemplate) -> Vec<&'a Service> {
    let wanted: BTreeSet<&str> = t
        .compatibility
        .services
        .iter()
        .chain(&t.defaults.services)
        .map(String::as_str)
        .collect();
    cat.services
        .iter()
        .filter(|s| wanted.contains(s.name.as_str()))
        .collect()
}

/// A placeable service's missing dependencies (references) and unrunnable actions (automators).
fn service_problems(s: &Service, names: &Names, automators: &[PluginType]) -> Vec<Problem> {
    let prefix = |f: &str| format!("services/{}.{f}", s.name);
    let mut out: Vec<Problem> = gaps::service_gaps(s, names)
        .into_iter()
        .filter(|g| !g.warning.field.starts_with("provisioner.actions."))
        .map(|g| {
            problem(
                Check::References,
                prefix(&g.warning.field),
                g.warning.message,
            )
        })
        .collect();
    out.extend(
        gaps::unrunnable_actions(s, automators)
            .into_iter()
            .map(|w| problem(Check::Automators, prefix(&w.field), w.message)),
    );
    out
}

/// Macros of the default config and links (naming services the template can place) and of the
/// placeable services' action fields and links (naming services that exist).
fn macro_problems(t: &ClusterTemplate, names: &Names, services: &[&Service]) -> Vec<Problem> {
    let own: BTreeSet<&str> = t
        .compatibility
        .services
        .iter()
        .chain(&t.defaults.services)
        .map(String::as_str)
        .filter(|s| names.services.contains(*s))
        .collect();
    let mut out = Vec::new();
    for (i, l) in t.links.iter().enumerate() {
        out.extend(macro_problem(
            &format!("links[{i}].url"),
            &l.url,
            Some(&own),
            names,
        ));
    }
    let mut texts = Vec::new();
    strings_in(
        "defaults.config".into(),
        &Value::Object(t.defaults.config.clone()),
        &mut texts,
    );
    for (field, text) in &texts {
        out.extend(macro_problem(field, text, Some(&own), names));
    }
    for s in services {
        for (action, spec) in &s.provisioner.actions {
            let action = action.upper().to_lowercase();
            for (k, v) in &spec.fields {
                let f = format!(
                    "services/{}.provisioner.actions.{action}.fields.{k}",
                    s.name
                );
                out.extend(macro_problem(&f, v, None, names));
            }
        }
        for (i, l) in s.links.iter().enumerate() {
            let f = format!("services/{}.links[{i}].url", s.name);
            out.extend(macro_problem(&f, &l.url, None, names));
        }
    }
    out
}

/// Every string in `v` with its path (`defaults.config.lb.backends`, `...list[2]`).
fn strings_in(path: String, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((path, s.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings_in(format!("{path}[{i}]"), item, out);
            }
        }
        Value::Object(m) => {
            for (k, item) in m {
                strings_in(format!("{path}.{k}"), item, out);
            }
        }
        _ => {}
    }
}

/// The problems of one string's macros: one that does not parse, or a service it names that the
/// catalog lacks or (with `placeable`) that the template cannot place, so the macro is always
/// empty.
fn macro_problem(
    field: &str,
    text: &str,
    placeable: Option<&BTreeSet<&str>>,
    names: &Names,
) -> Vec<Problem> {
    if !text.contains('%') {
        return Vec::new();
    }
    let named = match weft_planner::macros::named_services(text) {
        Ok(n) => n,
        Err(e) => return vec![problem(Check::Macros, field, e.to_string())],
    };
    let mut out = Vec::new();
    for svc in named {
        let message = if !names.services.contains(&svc) {
            format!("a macro names service {svc}, which does not exist")
        } else if placeable.is_some_and(|p| !p.contains(svc.as_str())) {
            format!(
                "a macro names service {svc}, which this template cannot place (not in \
                 compatibility.services or defaults.services): it is always empty"
            )
        } else {
            continue;
        };
        out.push(problem(Check::Macros, field, message));
    }
    out
}

/// The default services the solver is given: those that exist and are compatible (the others are
/// reported by the references and defaults checks, and would hide every size's own answer).
fn solvable_defaults(t: &ClusterTemplate, names: &Names) -> Vec<String> {
    let compat = &t.compatibility.services;
    t.defaults
        .services
        .iter()
        .filter(|s| names.services.contains(*s))
        .filter(|s| compat.is_empty() || compat.contains(s))
        .cloned()
        .collect()
}

/// The providers to lay the template out on: its default, else each of the catalog's providers
/// that offers a hardware and an image type.
fn providers(cat: &CatalogExport, t: &ClusterTemplate, notes: &mut Vec<String>) -> Vec<String> {
    if let Some(p) = t.defaults.provider.as_deref().filter(|p| !p.is_empty()) {
        if cat.providers.iter().any(|x| x.name == p) {
            return vec![p.to_string()];
        }
        notes.push(format!(
            "sizes and plans not checked: provider {p} does not exist"
        ));
        return Vec::new();
    }
    let out: Vec<String> = cat
        .providers
        .iter()
        .filter(|p| {
            !TypeOffer::hardware_for(&cat.hardwaretypes, &p.name)
                .offered()
                .is_empty()
                && !TypeOffer::images_for(&cat.imagetypes, &p.name)
                    .offered()
                    .is_empty()
        })
        .map(|p| p.name.clone())
        .collect();
    if out.is_empty() {
        notes.push(
            "sizes and plans not checked: no provider offers a hardware and an image type".into(),
        );
    }
    out
}

/// A type offer of `provider`, restricted to the template's default when that is compatible (a
/// create with the defaults gets it; an incompatible one is the defaults check's problem).
fn offer(
    types: &[weft_model::MachineType],
    provider: &str,
    hardware: bool,
    default: Option<&str>,
    compat: &[String],
) -> TypeOffer {
    let all = if hardware {
        TypeOffer::hardware_for(types, provider)
    } else {
        TypeOffer::images_for(types, provider)
    };
    let default = default
        .filter(|d| !d.is_empty())
        .filter(|d| compat.is_empty() || compat.iter().any(|c| c == d));
    restrict(all, default)
}

/// The sizes to scan: from the template's smallest, at most [`SIZE_SCAN`] of them.
fn scan_range(t: &ClusterTemplate, notes: &mut Vec<String>) -> Option<[u64; 2]> {
    let size = t.constraints.size;
    let from = size.min.max(1);
    let limit = weft_model::MAX_CLUSTER_SIZE;
    if from > size.max || from > limit {
        return None;
    }
    let to = size.max.min(from + SIZE_SCAN - 1).min(limit);
    if to < size.max {
        let max = if size.max == u64::MAX {
            "unbounded".to_string()
        } else {
            size.max.to_string()
        };
        notes.push(format!(
            "sizes {}.. not scanned: at most {SIZE_SCAN} sizes are (constraints.size.max is {max})",
            to + 1
        ));
    }
    Some([from, to])
}

/// The sizes and plans checks, per provider.
fn sizes_and_plans(cat: &CatalogExport, t: &ClusterTemplate, r: &mut TemplateReport) {
    let names = Names::of_catalog(cat, &[]);
    let wanted = solvable_defaults(t, &names);
    if wanted.is_empty() {
        r.notes
            .push("sizes and plans not checked: no default service exists".into());
        return;
    }
    let Some([from, to]) = scan_range(t, &mut r.notes) else {
        return;
    };
    for provider in providers(cat, t, &mut r.notes) {
        let d = &t.defaults;
        let c = &t.compatibility;
        let hw = offer(
            &cat.hardwaretypes,
            &provider,
            true,
            d.hardwaretype.as_deref(),
            &c.hardwaretypes,
        );
        let img = offer(
            &cat.imagetypes,
            &provider,
            false,
            d.imagetype.as_deref(),
            &c.imagetypes,
        );
        let solver = Catalog {
            template: t,
            hardware: &hw,
            images: &img,
            services: Some(&cat.services),
        };
        let scan = scan(&solver, &wanted, &provider, [from, to]);
        for u in &scan.unsolved {
            let at = if u.from == u.to {
                u.from.to_string()
            } else {
                format!("{}..{}", u.from, u.to)
            };
            let message = format!("no layout at {at} (provider {provider}): {}", u.reason);
            r.problems
                .push(problem(Check::Sizes, "constraints.size", message));
        }
        let mut ends: Vec<u64> = Vec::new();
        if let (Some(first), Some(last)) = (scan.solved.first(), scan.solved.last()) {
            ends.push(first[0]);
            if last[1] != first[0] {
                ends.push(last[1]);
            }
        }
        for size in ends {
            match plan_at(&solver, &wanted, size, &cat.services, t) {
                Ok(tasks) => r.plans.push(PlanBuilt {
                    provider: provider.clone(),
                    size,
                    tasks,
                }),
                Err(e) => r.problems.push(problem(
                    Check::Plans,
                    "defaults.services",
                    format!("no create plan at {size} nodes (provider {provider}): {e}"),
                )),
            }
        }
        r.sizes.push(scan);
    }
}

/// Solves every size of `range`: the solved ones as ranges, the others grouped with the reason
/// at the first size of each group.
fn scan(solver: &Catalog<'_>, wanted: &[String], provider: &str, range: [u64; 2]) -> SizeScan {
    let results: Vec<(u64, Option<String>)> = (range[0]..=range[1])
        .map(|n| {
            (
                n,
                weft_solver::create(solver, wanted, n)
                    .err()
                    .map(|e| e.to_string()),
            )
        })
        .collect();
    let mut unsolved: Vec<Unsolved> = Vec::new();
    for (n, why) in &results {
        let Some(why) = why else { continue };
        match unsolved.last_mut() {
            Some(u) if u.to + 1 == *n => u.to = *n,
            _ => unsolved.push(Unsolved {
                from: *n,
                to: *n,
                reason: why.clone(),
            }),
        }
    }
    SizeScan {
        provider: provider.to_string(),
        scanned: range,
        solved: ranges(results.iter().map(|(n, why)| (*n, why.is_none()))),
        unsolved,
    }
}

/// Builds the create plan of the layout at `size`: how many node tasks it has, or why it fails.
fn plan_at(
    solver: &Catalog<'_>,
    wanted: &[String],
    size: u64,
    services: &[Service],
    t: &ClusterTemplate,
) -> Result<usize, String> {
    let layout = weft_solver::create(solver, wanted, size).map_err(|e| e.to_string())?;
    let used: BTreeSet<&str> = layout
        .nodes
        .iter()
        .flat_map(|n| n.services.iter().map(String::as_str))
        .collect();
    let input = PlanInput {
        before: Vec::new(),
        after: plan_nodes(&layout),
        services: services
            .iter()
            .filter(|s| used.contains(s.name.as_str()))
            .cloned()
            .collect(),
        config: Value::Object(t.defaults.config.clone()),
        rollout: None,
        force: false,
    };
    let plan = weft_planner::plan(&Operation::Create, &input).map_err(|e| e.to_string())?;
    Ok(plan.tasks.len())
}

/// A layout's nodes as the planner reads them, numbered from 1000 with made-up names and
/// addresses.
fn plan_nodes(layout: &Layout) -> Vec<PlanNode> {
    layout
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let nodenum = 1000 + i as u64;
            let ip = format!("10.0.{}.{}", i / 250, i % 250 + 1);
            PlanNode {
                id: format!("node-{nodenum}"),
                nodenum,
                hostname: format!("node-{nodenum}.test"),
                ipaddresses: BTreeMap::from([
                    ("access_v4".to_string(), ip.clone()),
                    (weft_planner::DEFAULT_IP_TYPE.to_string(), ip),
                ]),
                hardwaretype: n.hardwaretype.clone(),
                imagetype: n.imagetype.clone(),
                services: n.services.iter().cloned().collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_model::lenient;

    use super::*;

    /// A catalog of one provider, two hardware types, one image, and three shell services.
    fn catalog() -> CatalogExport {
        let action =
            |args: &str| json!({"type": "shell", "fields": {"script": "s.sh", "args": args}});
        let service = |name: &str, deps: Value| {
            json!({"name": name, "dependencies": deps, "provisioner": {"actions": {
                "install": action("install"), "start": action("start")}}})
        };
        lenient::from_value(json!({
            "providers": [{"name": "p", "providertype": "local"}],
            "hardwaretypes": [
                {"name": "small", "providermap": {"p": {"flavor": "s"}}},
                {"name": "large", "providermap": {"p": {"flavor": "l"}}}],
            "imagetypes": [{"name": "img", "providermap": {"p": {"image": "i"}}}],
            "services": [
                service("db", json!({})),
                service("web", json!({"runtime": {"requires": ["db"]}})),
                service("lb", json!({"runtime": {"requires": ["web"]}}))],
        }))
        .unwrap()
    }

    fn shell() -> Vec<PluginType> {
        lenient::from_value(json!([{"name": "shell", "parameters": {"admin": {
            "fields": {"script": {"label": "script"}}, "required": [["script"]]}}}]))
        .unwrap()
    }

    fn good() -> Value {
        json!({
            "name": "t",
            "compatibility": {"hardwaretypes": ["small"], "imagetypes": ["img"],
                              "services": ["db", "web", "lb"]},
            "defaults": {"services": ["db", "web", "lb"], "provider": "p",
                         "hardwaretype": "small", "imagetype": "img",
                         "config": {"lb": {"backends": "%join(map(ip.service.web,'$:80'),',')%"}}},
            "constraints": {"size": {"min": 1, "max": 8},
                            "services": {"lb": {"quantities": {"min": 1, "max": 1}}}},
            "links": [{"label": "lb", "url": "http://%ip.service.lb%/"}]
        })
    }

    fn run(t: Value) -> TemplateReport {
        run_in(&catalog(), t)
    }

    fn run_in(cat: &CatalogExport, t: Value) -> TemplateReport {
        let t: ClusterTemplate = lenient::from_value(t).unwrap();
        test_template(cat, &t, &shell())
    }

    /// The fields of a check's problems, sorted.
    fn fields(r: &TemplateReport, check: Check) -> Vec<&str> {
        let mut out: Vec<&str> = r
            .problems
            .iter()
            .filter(|p| p.check == check)
            .map(|p| p.field.as_str())
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn a_sound_template_passes_every_check() {
        let r = run(good());
        assert!(r.passed, "{:#?}", r.problems);
        assert_eq!(r.sizes.len(), 1);
        assert_eq!(r.sizes[0].provider, "p");
        assert_eq!(r.sizes[0].scanned, [1, 8]);
        assert_eq!(r.sizes[0].solved, vec![[1, 8]]);
        let sizes: Vec<u64> = r.plans.iter().map(|p| p.size).collect();
        assert_eq!(sizes, vec![1, 8], "plans at the smallest and largest size");
        assert!(r.plans.iter().all(|p| p.tasks > 0));
        assert!(r.notes.is_empty(), "{:?}", r.notes);
    }

    #[test]
    fn missing_references_and_incompatible_defaults_are_named_by_field() {
        let mut t = good();
        t["defaults"]["services"] = json!(["db", "web", "lb", "cache"]);
        t["defaults"]["hardwaretype"] = json!("large");
        t["compatibility"]["imagetypes"] = json!(["img", "gone"]);
        let r = run(t);
        assert!(!r.passed);
        assert_eq!(
            fields(&r, Check::References),
            vec!["compatibility.imagetypes[1]", "defaults.services[3]"]
        );
        assert_eq!(fields(&r, Check::Defaults), vec!["defaults.hardwaretype"]);
        assert!(
            r.problems.iter().any(|p| p.message.contains("cache")),
            "{:#?}",
            r.problems
        );
        // The sizes are solved with what exists and is compatible: no gap hides behind them.
        assert!(fields(&r, Check::Sizes).is_empty(), "{:#?}", r.problems);
    }

    #[test]
    fn sizes_without_a_layout_are_grouped_into_ranges_with_the_reason() {
        let mut t = good();
        // Each service on one node only, db and lb apart: 1 node is too few, 4 too many.
        t["constraints"]["services"]["db"] = json!({"quantities": {"min": 1, "max": 1}});
        t["constraints"]["services"]["web"] = json!({"quantities": {"min": 1, "max": 1}});
        t["constraints"]["layout"] = json!({"cantcoexist": [["db", "lb"]]});
        let r = run(t);
        assert_eq!(r.sizes[0].solved, vec![[2, 3]], "{:#?}", r.sizes);
        let gaps: Vec<(u64, u64)> = r.sizes[0].unsolved.iter().map(|u| (u.from, u.to)).collect();
        assert_eq!(gaps, vec![(1, 1), (4, 8)]);
        let msgs: Vec<&str> = r
            .problems
            .iter()
            .filter(|p| p.check == Check::Sizes)
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(
            msgs[0].starts_with("no layout at 1 (provider p): "),
            "{msgs:?}"
        );
        assert!(
            msgs[1].starts_with("no layout at 4..8 (provider p): "),
            "{msgs:?}"
        );
        let sizes: Vec<u64> = r.plans.iter().map(|p| p.size).collect();
        assert_eq!(sizes, vec![2, 3]);
    }

    #[test]
    fn macros_naming_unknown_or_unplaceable_services_and_wide_links_are_problems() {
        let mut t = good();
        t["defaults"]["config"]["lb"]["primary"] = json!("%ip.service.nosuch%");
        t["defaults"]["config"]["list"] = json!(["%host.service.db[%"]);
        t["compatibility"]["services"] = json!(["db", "web", "lb"]);
        t["links"] = json!([{"label": "web", "url": "http://%ip.service.web%/"}]);
        let r = run(t);
        assert_eq!(
            fields(&r, Check::Macros),
            vec![
                "defaults.config.lb.primary",
                "defaults.config.list[0]",
                "links[0].url"
            ],
            "{:#?}",
            r.problems
        );
        assert!(r.problems.iter().all(|p| p.check == Check::Macros));
    }

    #[test]
    fn actions_need_a_known_automator_and_its_required_fields() {
        let mut cat = catalog();
        let web = cat.services.iter_mut().find(|s| s.name == "web").unwrap();
        for a in web.provisioner.actions.values_mut() {
            a.automator = "shel".into();
        }
        let db = cat.services.iter_mut().find(|s| s.name == "db").unwrap();
        for a in db.provisioner.actions.values_mut() {
            a.fields.remove("script");
        }
        let r = run_in(&cat, good());
        assert_eq!(
            fields(&r, Check::Automators),
            vec![
                "services/db.provisioner.actions.install.fields",
                "services/db.provisioner.actions.start.fields",
                "services/web.provisioner.actions.install.type",
                "services/web.provisioner.actions.start.type",
            ]
        );
        let hint = &r
            .problems
            .iter()
            .find(|p| p.field.ends_with(".type"))
            .unwrap()
            .message;
        assert!(hint.contains("did you mean shell?"), "{hint}");
    }

    #[test]
    fn a_parent_from_the_catalog_is_merged_and_a_missing_one_is_named() {
        let mut cat = catalog();
        let mut parent = good();
        parent["name"] = json!("base");
        cat.clustertemplates
            .push(lenient::from_value(parent).unwrap());
        let child = json!({"name": "child", "extends": {"name": "base"},
                           "constraints": {"size": {"min": 2, "max": 4}}});
        let r = run_in(&cat, child.clone());
        assert!(r.passed, "{:#?}", r.problems);
        assert_eq!(r.sizes[0].scanned, [2, 4]);
        let mut orphan = child;
        orphan["extends"]["name"] = json!("nobody");
        let r = run_in(&cat, orphan);
        assert_eq!(fields(&r, Check::References), vec!["extends.name"]);
        assert!(r.notes.iter().any(|n| n.contains("did not resolve")));
    }

    #[test]
    fn the_scan_stops_after_its_bound_and_says_so() {
        let mut t = good();
        t["constraints"]["size"] = json!({"min": 1});
        let r = run(t);
        assert!(r.passed, "{:#?}", r.problems);
        assert_eq!(r.sizes[0].scanned, [1, SIZE_SCAN]);
        assert!(
            r.notes.iter().any(|n| n.contains("101.. not scanned")),
            "{:?}",
            r.notes
        );
    }
}
