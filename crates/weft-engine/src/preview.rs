//! A layout preview (weft's `POST /v2/solve`): the pure solver run on a saved template or on one
//! being edited, with the tenant's hardware and image types as the provider offers them. Nothing
//! is stored. The answer holds the grouped layout at the asked size (or the solver's explanation
//! of why there is none) and, when asked, which sizes from 1 to [`SIZE_SCAN`] have a layout.

use serde_json::{json, Value};
use weft_model::{lenient, ClusterTemplate, EntityKind, MachineType, Service};
use weft_solver::{Catalog, TypeOffer};

use crate::catalog::{resolve_in_tenant, saved_template, typed_list};
use crate::error::{EngineError, EngineResult};
use crate::{Caller, Engine};

/// The largest size the `sizes` scan tries.
pub const SIZE_SCAN: u64 = 100;

/// Which template to lay out: a saved one by name, or a body not saved yet.
pub enum TemplateRef {
    /// A template saved in the tenant's catalog, by name.
    Saved(String),
    /// A template body as a request gives it, not saved.
    Draft(Value),
}

/// What to preview; unset fields take the template's defaults.
pub struct LayoutQuery {
    /// The template to lay out.
    pub template: TemplateRef,
    /// How many machines; the template's default size when `None`.
    pub num_machines: Option<u64>,
    /// Which services; the template's default services when `None`.
    pub services: Option<Vec<String>>,
    /// Which provider; the template's default when `None`.
    pub provider: Option<String>,
    /// Which hardware type; the template's default when `None`.
    pub hardwaretype: Option<String>,
    /// Which image type; the template's default when `None`.
    pub imagetype: Option<String>,
    /// Also scan the sizes 1 to [`SIZE_SCAN`].
    pub sizes: bool,
}

/// Solves `q` in `who`'s tenant: `{numMachines, provider, services, layout, explanation, sizes}`.
pub async fn preview_layout(st: &Engine, who: &Caller, q: LayoutQuery) -> EngineResult<Value> {
    let tenant = who.tenant.id.as_str();
    let template = template_of(st, tenant, &q.template).await?;
    let provider = q
        .provider
        .clone()
        .or_else(|| template.defaults.provider.clone())
        .unwrap_or_default();
    let hardware: Vec<MachineType> = typed_list(st, tenant, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed_list(st, tenant, EntityKind::ImageType).await?;
    let services: Vec<Service> = typed_list(st, tenant, EntityKind::Service).await?;
    let want_hw = q.hardwaretype.as_deref();
    let want_img = q.imagetype.as_deref();
    let hw = restrict(
        TypeOffer::hardware_for(&hardware, &provider),
        want_hw.or(template.defaults.hardwaretype.as_deref()),
    );
    let img = restrict(
        TypeOffer::images_for(&images, &provider),
        want_img.or(template.defaults.imagetype.as_deref()),
    );
    let wanted = q
        .services
        .clone()
        .unwrap_or_else(|| template.defaults.services.clone());
    let max = weft_model::MAX_CLUSTER_SIZE;
    if q.num_machines.is_some_and(|n| n == 0 || n > max) {
        return Err(EngineError::Invalid(format!(
            "numMachines must be 1 to {max}"
        )));
    }
    let size = q
        .num_machines
        .unwrap_or(template.constraints.size.min.max(1));
    let scan = q.sizes;
    // The search is CPU work; keep it off the async workers.
    tokio::task::spawn_blocking(move || {
        let cat = Catalog {
            template: &template,
            hardware: &hw,
            images: &img,
            services: Some(&services),
        };
        let (layout, explanation) = solve_at(&cat, &wanted, size);
        let sizes = if scan {
            scan_sizes(&cat, &wanted)
        } else {
            Value::Null
        };
        json!({"numMachines": size, "provider": provider, "services": wanted,
               "layout": layout, "explanation": explanation, "sizes": sizes})
    })
    .await
    .map_err(|e| EngineError::Internal(format!("solver task: {e}")))
}

/// The template a query names or carries, resolved against the tenant's catalog.
async fn template_of(st: &Engine, tenant: &str, t: &TemplateRef) -> EngineResult<ClusterTemplate> {
    let own: ClusterTemplate = match t {
        TemplateRef::Draft(body) => lenient::from_value(body.clone())
            .map_err(|e| EngineError::Invalid(format!("template: {e}")))?,
        TemplateRef::Saved(name) => {
            let own = saved_template(st, tenant, name).await?;
            let resolved = resolve_in_tenant(st, tenant, own).await;
            return resolved.map_err(EngineError::against_catalog);
        }
    };
    resolve_in_tenant(st, tenant, own).await
}

/// The grouped layout at `size` (or null) and the solver's explanation (or null).
fn solve_at(cat: &Catalog<'_>, wanted: &[String], size: u64) -> (Value, Value) {
    match weft_solver::create(cat, wanted, size) {
        Ok(l) => {
            let groups: Vec<Value> = l
                .groups()
                .into_iter()
                .map(|g| json!({"hardwaretype": g.hardwaretype, "imagetype": g.imagetype, "services": g.services, "count": g.count}))
                .collect();
            (Value::Array(groups), Value::Null)
        }
        Err(e) => (Value::Null, json!(e.to_string())),
    }
}

/// Which sizes from 1 to [`SIZE_SCAN`] have a layout: `{"ranges": [[from, to], ...], "scanned"}`.
fn scan_sizes(cat: &Catalog<'_>, wanted: &[String]) -> Value {
    let fits = (1..=SIZE_SCAN).map(|n| (n, weft_solver::create(cat, wanted, n).is_ok()));
    json!({"ranges": ranges(fits), "scanned": [1, SIZE_SCAN]})
}

/// Only `want` (if given) of an offer; an unoffered `want` leaves nothing, and the solver says why.
pub(crate) fn restrict(offer: TypeOffer, want: Option<&str>) -> TypeOffer {
    match want {
        None => offer,
        Some(w) => {
            let known = offer.offered().to_vec();
            TypeOffer::new(offer.offered().iter().filter(|o| *o == w).cloned()).with_known(known)
        }
    }
}

/// Sizes with a layout, as inclusive ranges.
pub(crate) fn ranges(ok: impl Iterator<Item = (u64, bool)>) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::new();
    for (n, fits) in ok {
        if !fits {
            continue;
        }
        match out.last_mut() {
            Some(r) if r[1] + 1 == n => r[1] = n,
            _ => out.push([n, n]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_become_ranges() {
        let fits = [(1, false), (2, true), (3, true), (4, false), (5, true)];
        assert_eq!(ranges(fits.into_iter()), vec![[2, 3], [5, 5]]);
        assert!(ranges([(1, false)].into_iter()).is_empty());
    }
}
