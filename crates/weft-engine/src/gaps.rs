//! What a catalog entry names that the catalog lacks, and what it says that may not hold. Coopr
//! checked no reference at write time, and its own loader writes templates before the services
//! they name, so the catalog accepts such entries; it says so instead:
//!
//! - a **missing reference** (a template's default service, provider, hardware or image type,
//!   parent or partial; a service's dependency; a plugin type no provisioner offers, once some
//!   are offered) makes the entry *incomplete*: writes warn, lists mark it, and a create names it;
//! - an **absent choice** (a name in a compatibility list or a service constraint that the catalog
//!   lacks), a **default outside the template's own compatibility lists**, or a **link whose
//!   macro lists every node of a service that may run on several** is a warning only.
//!
//! The checks are pure over [`Names`]; [`write_warnings`] and [`incomplete`] read the catalog.
//! Hardware and image types name providers in their `providermap`; an entry for a provider the
//! catalog lacks is not a gap (it is simply never used), so they are not checked.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use weft_model::{
    lenient, CatalogExport, CatalogWarning, ClusterDefaults, ClusterTemplate, Compatibility,
    Constraints, EntityKind, Link, ParameterType, PartialTemplate, PluginType, Provider, Service,
};
use weft_store::SUPERADMIN;

use crate::catalog::{resolve_in_tenant, typed_list};
use crate::error::{EngineError, EngineResult};
use crate::Engine;

/// The names a tenant's catalog holds, by kind, and the plugin types provisioners offer.
#[derive(Debug, Default, Clone)]
pub struct Names {
    /// The tenant's providers.
    pub providers: BTreeSet<String>,
    /// The tenant's hardware types.
    pub hardwaretypes: BTreeSet<String>,
    /// The tenant's image types.
    pub imagetypes: BTreeSet<String>,
    /// Service names and what services `provide` (a dependency may name either).
    pub services: BTreeSet<String>,
    /// The tenant's cluster templates.
    pub clustertemplates: BTreeSet<String>,
    /// The tenant's partial templates.
    pub partialtemplates: BTreeSet<String>,
    /// Provider types registered by provisioners (kept in the `superadmin` tenant).
    pub provider_types: BTreeSet<String>,
    /// Automator types registered by provisioners (kept in the `superadmin` tenant).
    pub automator_types: BTreeSet<String>,
}

/// One finding: the warning, and whether it keeps the entry from running (a missing reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The field at fault and what is wrong with it.
    pub warning: CatalogWarning,
    /// Whether the entry names something that does not exist, so it cannot be used until it does.
    pub missing: bool,
}

fn gap(field: String, message: String, missing: bool) -> Gap {
    Gap {
        warning: CatalogWarning { field, message },
        missing,
    }
}

impl Names {
    /// Reads the names of `tenant_id`'s catalog and the offered plugin types.
    pub async fn load(st: &Engine, tenant_id: &str) -> EngineResult<Names> {
        let mut services = BTreeSet::new();
        for doc in st
            .store
            .list_entities(tenant_id, EntityKind::Service)
            .await?
        {
            if let Ok(s) = lenient::from_value::<Service>(doc) {
                services.insert(s.name);
                services.extend(s.dependencies.provides);
            }
        }
        Ok(Names {
            providers: names_of(st, tenant_id, EntityKind::Provider).await?,
            hardwaretypes: names_of(st, tenant_id, EntityKind::HardwareType).await?,
            imagetypes: names_of(st, tenant_id, EntityKind::ImageType).await?,
            services,
            clustertemplates: names_of(st, tenant_id, EntityKind::ClusterTemplate).await?,
            partialtemplates: names_of(st, tenant_id, EntityKind::PartialTemplate).await?,
            provider_types: names_of(st, SUPERADMIN, EntityKind::ProviderType).await?,
            automator_types: names_of(st, SUPERADMIN, EntityKind::AutomatorType).await?,
        })
    }
}

impl Names {
    /// The names a catalog export holds, with `automators` as the offered automator types (no
    /// provider types: a catalog file does not say which a provisioner offers). Pure: for checks
    /// of a catalog that is not stored, such as `weft template test`.
    pub fn of_catalog(catalog: &CatalogExport, automators: &[PluginType]) -> Names {
        let mut services = BTreeSet::new();
        for s in &catalog.services {
            services.insert(s.name.clone());
            services.extend(s.dependencies.provides.iter().cloned());
        }
        Names {
            providers: set(catalog.providers.iter().map(|p| &p.name)),
            hardwaretypes: set(catalog.hardwaretypes.iter().map(|t| &t.name)),
            imagetypes: set(catalog.imagetypes.iter().map(|t| &t.name)),
            services,
            clustertemplates: set(catalog.clustertemplates.iter().map(|t| &t.name)),
            partialtemplates: set(catalog.partialtemplates.iter().map(|t| &t.name)),
            provider_types: BTreeSet::new(),
            automator_types: set(automators.iter().map(|t| &t.name)),
        }
    }
}

fn set<'a>(names: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    names.cloned().collect()
}

async fn names_of(
    st: &Engine,
    tenant_id: &str,
    kind: EntityKind,
) -> EngineResult<BTreeSet<String>> {
    Ok(st
        .store
        .list_entities(tenant_id, kind)
        .await?
        .iter()
        .filter_map(|d| d["name"].as_str().map(String::from))
        .collect())
}

/// The gaps of one entry of `kind` (its canonical JSON) against `names`. A template's defaults
/// are checked against its compatibility lists as written (see [`write_warnings`] for the
/// resolved check).
pub fn entry_gaps(kind: EntityKind, doc: &Value, names: &Names) -> Vec<Gap> {
    match kind {
        EntityKind::ClusterTemplate => lenient::from_value::<ClusterTemplate>(doc.clone())
            .map(|t| template_gaps(&t, names))
            .unwrap_or_default(),
        EntityKind::PartialTemplate => lenient::from_value::<PartialTemplate>(doc.clone())
            .map(|p| {
                let parts = Parts::of_partial(&p);
                parts_gaps(&parts, names)
            })
            .unwrap_or_default(),
        EntityKind::Service => lenient::from_value::<Service>(doc.clone())
            .map(|s| service_gaps(&s, names))
            .unwrap_or_default(),
        EntityKind::Provider => lenient::from_value::<Provider>(doc.clone())
            .map(|p| provider_gaps(&p, names))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The sections cluster and partial templates share.
struct Parts<'a> {
    compatibility: &'a Compatibility,
    defaults: &'a ClusterDefaults,
    constraints: &'a Constraints,
    links: &'a [Link],
}

impl<'a> Parts<'a> {
    fn of_template(t: &'a ClusterTemplate) -> Parts<'a> {
        Parts {
            compatibility: &t.compatibility,
            defaults: &t.defaults,
            constraints: &t.constraints,
            links: &t.links,
        }
    }

    fn of_partial(p: &'a PartialTemplate) -> Parts<'a> {
        Parts {
            compatibility: &p.compatibility,
            defaults: &p.defaults,
            constraints: &p.constraints,
            links: &p.links,
        }
    }
}

/// A cluster template's gaps: its own references (parent, partials, and those of `parts_gaps`).
pub fn template_gaps(t: &ClusterTemplate, names: &Names) -> Vec<Gap> {
    let mut out = Vec::new();
    if let Some(parent) = &t.extends {
        if !names.clustertemplates.contains(&parent.name) {
            out.push(missing("extends.name", "cluster template", &parent.name));
        }
    }
    for (i, inc) in t.includes.iter().enumerate() {
        if !names.partialtemplates.contains(&inc.name) {
            out.push(missing(
                &format!("includes[{i}].name"),
                "partial template",
                &inc.name,
            ));
        }
    }
    out.extend(parts_gaps(&Parts::of_template(t), names));
    out
}

/// A name in a list of choices that the catalog lacks: it cannot be chosen, nothing else fails.
fn absent(field: String, what: &str, name: &str) -> Gap {
    gap(
        field,
        format!("{what} {name} does not exist (yet): it cannot be chosen until it does"),
        false,
    )
}

/// A reference the entry needs that the catalog lacks.
fn missing(field: &str, what: &str, name: &str) -> Gap {
    gap(
        field.to_string(),
        format!("{what} {name} does not exist (yet)"),
        true,
    )
}

/// References in the compatibility lists, defaults and service constraints; defaults outside
/// the compatibility lists; links that list several nodes.
fn parts_gaps(p: &Parts<'_>, names: &Names) -> Vec<Gap> {
    let mut out = Vec::new();
    let lists: [(&str, &str, &[String], &BTreeSet<String>); 3] = [
        (
            "services",
            "service",
            &p.compatibility.services,
            &names.services,
        ),
        (
            "hardwaretypes",
            "hardware type",
            &p.compatibility.hardwaretypes,
            &names.hardwaretypes,
        ),
        (
            "imagetypes",
            "image type",
            &p.compatibility.imagetypes,
            &names.imagetypes,
        ),
    ];
    for (key, what, list, known) in lists {
        for (i, name) in list.iter().enumerate() {
            if !known.contains(name) {
                out.push(absent(format!("compatibility.{key}[{i}]"), what, name));
            }
        }
    }
    out.extend(defaults_gaps(p, names));
    for svc in p.constraints.services.keys() {
        if !names.services.contains(svc) {
            out.push(absent(
                format!("constraints.services.{svc}"),
                "service",
                svc,
            ));
        }
    }
    out.extend(link_gaps(p.links, p.constraints));
    out
}

/// The defaults: each must exist, and lie inside a non-empty compatibility list of its kind.
fn defaults_gaps(p: &Parts<'_>, names: &Names) -> Vec<Gap> {
    let d = p.defaults;
    let c = p.compatibility;
    let mut out = Vec::new();
    for (i, s) in d.services.iter().enumerate() {
        let field = format!("defaults.services[{i}]");
        if !names.services.contains(s) {
            out.push(missing(&field, "service", s));
        } else if !c.services.is_empty() && !c.services.contains(s) {
            out.push(outside(field, "service", s, "services"));
        }
    }
    if let Some(pv) = d.provider.as_deref().filter(|p| !p.is_empty()) {
        if !names.providers.contains(pv) {
            out.push(missing("defaults.provider", "provider", pv));
        }
    }
    let types = [
        TypeDefault {
            key: "hardwaretype",
            what: "hardware type",
            value: d.hardwaretype.as_ref(),
            compat: &c.hardwaretypes,
            known: &names.hardwaretypes,
        },
        TypeDefault {
            key: "imagetype",
            what: "image type",
            value: d.imagetype.as_ref(),
            compat: &c.imagetypes,
            known: &names.imagetypes,
        },
    ];
    for TypeDefault {
        key,
        what,
        value,
        compat,
        known,
    } in types
    {
        let Some(v) = value.filter(|v| !v.is_empty()) else {
            continue;
        };
        if !known.contains(v) {
            out.push(missing(&format!("defaults.{key}"), what, v));
        } else if !compat.is_empty() && !compat.contains(v) {
            out.push(outside(
                format!("defaults.{key}"),
                what,
                v,
                &format!("{key}s"),
            ));
        }
    }
    out
}

/// A default machine type, its compatibility list and the catalog's names of its kind.
struct TypeDefault<'a> {
    key: &'static str,
    what: &'static str,
    value: Option<&'a String>,
    compat: &'a [String],
    known: &'a BTreeSet<String>,
}

fn outside(field: String, what: &str, name: &str, list: &str) -> Gap {
    gap(
        field,
        format!(
            "{what} {name} is a default but not in compatibility.{list}: a cluster that \
             keeps the defaults gets it, one that names its own cannot"
        ),
        false,
    )
}

/// Links whose plain macro lists every node of a service that the template lets run on more
/// than one node (neither the service's quantities nor the cluster size hold it to one).
fn link_gaps(links: &[Link], constraints: &Constraints) -> Vec<Gap> {
    let mut out = Vec::new();
    for (i, l) in links.iter().enumerate() {
        for (svc, raw) in weft_planner::macros::plain_service_macros(&l.url) {
            let max = constraints
                .services
                .get(&svc)
                .map_or(u64::MAX, |c| c.quantities.max);
            if max > 1 && constraints.size.max > 1 {
                out.push(gap(
                    format!("links[{i}].url"),
                    format!(
                        "{raw} lists every node of service {svc}, which may run on several \
                         nodes: one URL is shown per node (limit it with \
                         constraints.services.{svc}.quantities.max = 1, or pick one node \
                         with an index)"
                    ),
                    false,
                ));
            }
        }
    }
    out
}

/// A service's gaps: dependencies on services nothing provides, and actions whose automator
/// type no provisioner offers (missing once some are offered, a note before).
pub fn service_gaps(s: &Service, names: &Names) -> Vec<Gap> {
    let mut out = Vec::new();
    let d = &s.dependencies;
    let classes = [
        ("install.requires", &d.install.requires, true),
        ("install.uses", &d.install.uses, false),
        ("runtime.requires", &d.runtime.requires, true),
        ("runtime.uses", &d.runtime.uses, false),
    ];
    for (key, list, needed) in classes {
        for (i, name) in list.iter().enumerate() {
            let field = format!("dependencies.{key}[{i}]");
            match (names.services.contains(name), needed) {
                (true, _) => {}
                (false, true) => out.push(missing(&field, "service", name)),
                (false, false) => out.push(gap(
                    field,
                    format!(
                        "service {name} does not exist (yet): the order it asks for applies \
                         once it does"
                    ),
                    false,
                )),
            }
        }
    }
    for (action, spec) in &s.provisioner.actions {
        let field = format!("provisioner.actions.{}.type", action.upper().to_lowercase());
        if let Some(g) = plugin_gap(field, "automator", &spec.automator, &names.automator_types) {
            out.push(g);
        }
    }
    out
}

/// A provider's gap: a provider type no provisioner offers.
pub fn provider_gaps(p: &Provider, names: &Names) -> Vec<Gap> {
    plugin_gap(
        "providertype".into(),
        "provider",
        &p.providertype,
        &names.provider_types,
    )
    .into_iter()
    .collect()
}

fn plugin_gap(field: String, what: &str, name: &str, offered: &BTreeSet<String>) -> Option<Gap> {
    if offered.contains(name) {
        return None;
    }
    Some(if offered.is_empty() {
        gap(
            field,
            format!(
                "no provisioner has offered {what} types yet: {what} type {name} is not checked"
            ),
            false,
        )
    } else {
        let all: Vec<&str> = offered.iter().map(String::as_str).collect();
        gap(
            field,
            format!(
                "no provisioner offers {what} type {name} (offered: {})",
                all.join(", ")
            ),
            true,
        )
    })
}

/// What a write of `doc` (canonical JSON of `kind`) should warn about, against the catalog as it
/// is. A cluster template's defaults are checked against its compatibility as resolved through
/// its parents and partials, when those exist.
pub async fn write_warnings(
    st: &Engine,
    tenant_id: &str,
    kind: EntityKind,
    doc: &Value,
) -> EngineResult<Vec<CatalogWarning>> {
    let names = Names::load(st, tenant_id).await?;
    let mut gaps = entry_gaps(kind, doc, &names);
    if kind == EntityKind::ClusterTemplate {
        gaps.extend(resolved_template_gaps(st, tenant_id, doc, &names).await?);
    }
    let mut seen = BTreeSet::new();
    Ok(gaps
        .into_iter()
        .map(|g| g.warning)
        .filter(|w| seen.insert((w.field.clone(), w.message.clone())))
        .collect())
}

/// For a template with a parent or partials: its defaults against the merged compatibility.
async fn resolved_template_gaps(
    st: &Engine,
    tenant_id: &str,
    doc: &Value,
    names: &Names,
) -> EngineResult<Vec<Gap>> {
    let Ok(own) = lenient::from_value::<ClusterTemplate>(doc.clone()) else {
        return Ok(Vec::new());
    };
    if own.extends.is_none() && own.includes.is_empty() {
        return Ok(Vec::new());
    }
    let Ok(t) = resolve_in_tenant(st, tenant_id, own).await else {
        return Ok(Vec::new());
    };
    Ok(defaults_gaps(&Parts::of_template(&t), names)
        .into_iter()
        .filter(|g| !g.missing)
        .collect())
}

/// The entries of `items` (canonical JSON of `kind`) that cannot run yet, by name, with what
/// they lack.
pub async fn incomplete(
    st: &Engine,
    tenant_id: &str,
    kind: EntityKind,
    items: &[Value],
) -> EngineResult<BTreeMap<String, Vec<CatalogWarning>>> {
    if !matches!(
        kind,
        EntityKind::ClusterTemplate
            | EntityKind::PartialTemplate
            | EntityKind::Service
            | EntityKind::Provider
    ) {
        return Ok(BTreeMap::new());
    }
    let names = Names::load(st, tenant_id).await?;
    let mut out = BTreeMap::new();
    for item in items {
        let lacks: Vec<CatalogWarning> = entry_gaps(kind, item, &names)
            .into_iter()
            .filter(|g| g.missing)
            .map(|g| g.warning)
            .collect();
        if let (false, Some(name)) = (lacks.is_empty(), item["name"].as_str()) {
            out.insert(name.to_string(), lacks);
        }
    }
    Ok(out)
}

/// The warnings of a whole imported catalog, each field prefixed with its entry's kind and name
/// (`clustertemplates/hadoop.defaults.services[3]`), against the catalog as imported.
pub async fn import_warnings(
    st: &Engine,
    tenant_id: &str,
    entries: &[(EntityKind, String, Value)],
) -> EngineResult<Vec<CatalogWarning>> {
    let names = Names::load(st, tenant_id).await?;
    Ok(entries
        .iter()
        .flat_map(|(kind, name, doc)| {
            entry_gaps(*kind, doc, &names)
                .into_iter()
                .map(move |g| CatalogWarning {
                    field: format!("{}/{name}.{}", kind.as_str(), g.warning.field),
                    message: g.warning.message,
                })
        })
        .collect())
}

/// Refuses a service that can never run: an action whose automator type no provisioner offers
/// (once provisioners have offered some; before, a catalog may be loaded ahead of them, as
/// Coopr's loader does), naming the field and the nearest offered type; or an action whose fields
/// cover none of the required sets of its type's admin fields. Other kinds pass.
pub async fn refuse_unrunnable(st: &Engine, kind: EntityKind, doc: &Value) -> EngineResult<()> {
    if kind != EntityKind::Service {
        return Ok(());
    }
    let service: Service = lenient::from_value(doc.clone())?;
    let offered = typed_list::<PluginType>(st, SUPERADMIN, EntityKind::AutomatorType).await?;
    if offered.is_empty() {
        return Ok(());
    }
    match unrunnable_actions(&service, &offered).into_iter().next() {
        Some(w) => Err(EngineError::Invalid(format!("{}: {}", w.field, w.message))),
        None => Ok(()),
    }
}

/// The actions of `service` that cannot run with the automator types `offered`, in action order:
/// a type not offered (`provisioner.actions.<action>.type`, with the nearest offered name), or
/// fields that cover none of the required sets of the type's admin fields
/// (`provisioner.actions.<action>.fields`).
pub fn unrunnable_actions(service: &Service, offered: &[PluginType]) -> Vec<CatalogWarning> {
    let mut out = Vec::new();
    for (action, spec) in &service.provisioner.actions {
        let action = action.upper().to_lowercase();
        let Some(t) = offered.iter().find(|t| t.name == spec.automator) else {
            out.push(CatalogWarning {
                field: format!("provisioner.actions.{action}.type"),
                message: unoffered(&spec.automator, offered),
            });
            continue;
        };
        let Some(admin) = t.parameters.get(&ParameterType::Admin) else {
            continue;
        };
        let have = |f: &String| spec.fields.get(f).is_some_and(|v| !v.trim().is_empty());
        if admin.required.is_empty() || admin.required.iter().any(|set| set.iter().all(have)) {
            continue;
        }
        let sets: Vec<String> = admin
            .required
            .iter()
            .map(|set| set.iter().cloned().collect::<Vec<_>>().join(" and "))
            .collect();
        out.push(CatalogWarning {
            field: format!("provisioner.actions.{action}.fields"),
            message: format!(
                "automator type {} needs {}",
                spec.automator,
                sets.join(", or ")
            ),
        });
    }
    out
}

/// Why an automator type is not offered, with the nearest offered name or the whole list.
fn unoffered(automator: &str, offered: &[PluginType]) -> String {
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    let hint = match weft_model::validate::nearest(automator, &names) {
        Some(n) => format!("did you mean {n}?"),
        None => format!("offered: {}", names.join(", ")),
    };
    format!("no provisioner offers automator type {automator} ({hint})")
}

/// A tenant's templates that cannot make a cluster now, with why: what keeps their provider from
/// making machines ([`crate::catalog::unusable_templates`]), then what the catalog lacks for them.
pub async fn templates_not_usable(
    st: &Engine,
    tenant_id: &str,
) -> EngineResult<BTreeMap<String, String>> {
    let mut out = crate::catalog::unusable_templates(st, tenant_id).await?;
    let templates = st
        .store
        .list_entities(tenant_id, EntityKind::ClusterTemplate)
        .await?;
    for (name, lacks) in incomplete(st, tenant_id, EntityKind::ClusterTemplate, &templates).await? {
        let why: Vec<String> = lacks.into_iter().map(|w| w.message).collect();
        let why = format!("incomplete: {}", why.join("; "));
        out.entry(name)
            .and_modify(|w| *w = format!("{w}; {why}"))
            .or_insert(why);
    }
    Ok(out)
}
