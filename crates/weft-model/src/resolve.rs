//! Template inheritance (`extends` and `includes`), as `POST /v2/resolve` and cluster creation use it.
//!
//! Merge order: the parent's resolved template, then this template's partials in order, then the
//! template itself. Partials merge defaults and compatibility; a parent also gives service
//! constraints (map override), must/can't-coexist sets (union), and size and lease (replaced when the
//! child sets them). An `immutable` partial locks the config keys it sets.

use std::collections::BTreeSet;

use crate::{ClusterDefaults, ClusterTemplate, Compatibility, ModelError, PartialTemplate};

fn union(into: &mut Vec<String>, from: &[String]) {
    for s in from {
        if !into.contains(s) {
            into.push(s.clone());
        }
    }
}

fn merge_compat(into: &mut Compatibility, from: &Compatibility) {
    union(&mut into.hardwaretypes, &from.hardwaretypes);
    union(&mut into.imagetypes, &from.imagetypes);
    union(&mut into.services, &from.services);
}

/// Merges `from` into `into`; `locked` holds config keys that may not change, and gains `from`'s
/// keys when `lock` is true.
fn merge_defaults(
    into: &mut ClusterDefaults,
    from: &ClusterDefaults,
    locked: &mut BTreeSet<String>,
    lock: bool,
) -> Result<(), ModelError> {
    union(&mut into.services, &from.services);
    for (dst, src) in [
        (&mut into.provider, &from.provider),
        (&mut into.hardwaretype, &from.hardwaretype),
        (&mut into.imagetype, &from.imagetype),
        (&mut into.dns_suffix, &from.dns_suffix),
    ] {
        if let Some(s) = src.as_ref().filter(|s| !s.trim().is_empty()) {
            *dst = Some(s.clone());
        }
    }
    for (k, v) in &from.config {
        if locked.contains(k) && into.config.get(k) != Some(v) {
            return Err(ModelError::invalid(
                format!("defaults.config.{k}"),
                format!("{k} can't be overridden due immutability."),
            ));
        }
        into.config.insert(k.clone(), v.clone());
        if lock {
            locked.insert(k.clone());
        }
    }
    Ok(())
}

/// Resolves `own` given its parent (already merged, if `own.extends` is set) and its included
/// partials (in the order of `own.includes`). The result has no `extends` or `includes`, and must have
/// default services and a default provider.
pub fn resolve_template(
    own: &ClusterTemplate,
    parent: Option<&ClusterTemplate>,
    partials: &[PartialTemplate],
) -> Result<ClusterTemplate, ModelError> {
    let out = merge_template(own, parent, partials)?;
    if out.defaults.services.is_empty() {
        return Err(ModelError::invalid(
            "defaults.services",
            "default services must be specified",
        ));
    }
    if out.defaults.provider.is_none() {
        return Err(ModelError::invalid(
            "defaults.provider",
            "default provider must be specified",
        ));
    }
    crate::Validate::validate(&out)?;
    Ok(out)
}

/// The merge alone, without the completeness checks (for ancestors, which need not be complete).
pub fn merge_template(
    own: &ClusterTemplate,
    parent: Option<&ClusterTemplate>,
    partials: &[PartialTemplate],
) -> Result<ClusterTemplate, ModelError> {
    let mut out = parent.cloned().unwrap_or_default();
    let mut locked = BTreeSet::new();
    for p in partials {
        merge_compat(&mut out.compatibility, &p.compatibility);
        merge_defaults(&mut out.defaults, &p.defaults, &mut locked, p.immutable)?;
    }
    merge_compat(&mut out.compatibility, &own.compatibility);
    merge_defaults(&mut out.defaults, &own.defaults, &mut locked, false)?;
    for (svc, c) in &own.constraints.services {
        out.constraints.services.insert(svc.clone(), c.clone());
    }
    for set in &own.constraints.layout.mustcoexist {
        if !out.constraints.layout.mustcoexist.contains(set) {
            out.constraints.layout.mustcoexist.push(set.clone());
        }
    }
    for set in &own.constraints.layout.cantcoexist {
        if !out.constraints.layout.cantcoexist.contains(set) {
            out.constraints.layout.cantcoexist.push(set.clone());
        }
    }
    if own.constraints.size != Default::default() || parent.is_none() {
        out.constraints.size = own.constraints.size;
    }
    if own.administration != Default::default() || parent.is_none() {
        out.administration = own.administration.clone();
    }
    for l in &own.links {
        if !out.links.contains(l) {
            out.links.push(l.clone());
        }
    }
    out.auto_replace = own.auto_replace || out.auto_replace;
    out.name = own.name.clone();
    out.label = own.label.clone().or(out.label);
    out.description = own.description.clone().or(out.description);
    out.icon = own.icon.clone().or(out.icon);
    out.version = own.version;
    out.extends = None;
    out.includes = Vec::new();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tpl(v: serde_json::Value) -> ClusterTemplate {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn parent_partials_and_own_merge_in_order() {
        let parent = tpl(
            json!({"name":"base","defaults":{"services":["a"],"provider":"p1","config":{"k":1}},
            "constraints":{"size":{"min":2,"max":9},"layout":{"cantcoexist":[["a","b"]]}}}),
        );
        let partial: PartialTemplate =
            serde_json::from_value(json!({"name":"part","immutable":true,"defaults":{"services":["c"],"config":{"lock":true}}}))
                .unwrap();
        let own = tpl(
            json!({"name":"child","extends":{"name":"base"},"includes":[{"name":"part"}],
            "defaults":{"services":["b"],"provider":"p2"}}),
        );
        let r = resolve_template(&own, Some(&parent), std::slice::from_ref(&partial)).unwrap();
        assert_eq!(r.defaults.services, vec!["a", "c", "b"]);
        assert_eq!(r.defaults.provider.as_deref(), Some("p2"));
        assert_eq!(r.constraints.size.max, 9);
        assert_eq!(r.constraints.layout.cantcoexist.len(), 1);
        assert_eq!(r.name, "child");
        assert!(r.extends.is_none() && r.includes.is_empty());

        let over = tpl(
            json!({"name":"x","defaults":{"services":["b"],"provider":"p","config":{"lock":false}}}),
        );
        let e = resolve_template(&over, None, &[partial]).unwrap_err();
        assert_eq!(e.to_string(), "lock can't be overridden due immutability.");
    }

    #[test]
    fn needs_services_and_provider() {
        let e = resolve_template(
            &tpl(json!({"name":"t","defaults":{"services":["a"]}})),
            None,
            &[],
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "default provider must be specified");
    }
}
