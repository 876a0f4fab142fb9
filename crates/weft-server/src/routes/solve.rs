//! `POST /v2/solve` (weft extension): a layout preview from the pure solver, for a saved template
//! (`clusterTemplate`) or one being edited and not saved yet (`template`), with the tenant's
//! hardware and image types as the provider offers them. Nothing is stored or created. The web UI's
//! create form and template editor call it; so can template authors.
//!
//! The answer holds the grouped layout at `numMachines` (or the solver's explanation of why there
//! is none) and, with `"sizes": true`, which sizes from 1 to [`SIZE_SCAN`] have a layout.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_model::{lenient, ClusterTemplate, EntityKind, MachineType, Service};
use weft_solver::{Catalog, TypeOffer};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::catalog::resolve_in_tenant;

/// The largest size the `sizes` scan tries.
pub const SIZE_SCAN: u64 = 100;

pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::POST,
        "/v2/solve",
        solve,
        op(
            "clusters",
            "Preview a layout (weft extension): {\"clusterTemplate\": name | \"template\": {...}, \"numMachines\": n, \"services\": [...], \"provider\": name, \"hardwaretype\": name, \"imagetype\": name, \"sizes\": true}; answers {\"layout\": [{hardwaretype, imagetype, services, count}] or null, \"explanation\": why there is none, \"sizes\": {\"ranges\": [[from, to], ...], \"scanned\": [1, 100]}}; stores nothing",
        )
        .body(Body::Json("SolveRequest"))
        .ok(200, "the layout or the solver's explanation", Body::AnyJson)
        .status(400, "invalid request; the message names the field")
        .status(404, "the template, a parent, a partial or the provider does not exist"),
    )
}

/// The request of `POST /v2/solve`: exactly one of `clusterTemplate` and `template`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SolveRequest)]
pub struct SolveRequest {
    /// A saved template of the tenant, by name.
    #[serde(
        default,
        rename = "clusterTemplate",
        deserialize_with = "lenient::opt_string"
    )]
    cluster_template: Option<String>,
    /// A template body, saved or not (Coopr's template JSON).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    template: Option<Value>,
    /// The size to lay out; default the template's smallest.
    #[serde(default, rename = "numMachines", deserialize_with = "lenient::opt_u64")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 10000)]
    num_machines: Option<u64>,
    /// The services; default the template's.
    #[serde(default)]
    services: Option<Vec<String>>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    hardwaretype: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    imagetype: Option<String>,
    /// Also scan the sizes 1 to 100 for a layout.
    #[serde(default, deserialize_with = "lenient::bool")]
    #[schema(value_type = bool)]
    sizes: bool,
}

async fn typed<T: serde::de::DeserializeOwned>(
    st: &AppState,
    tenant: &str,
    kind: EntityKind,
) -> ApiResult<Vec<T>> {
    let docs = st.store.list_entities(tenant, kind).await?;
    Ok(docs
        .into_iter()
        .filter_map(|d| lenient::from_value(d).ok())
        .collect())
}

/// The template the request names or carries, resolved against the tenant's catalog.
async fn template_of(
    st: &AppState,
    tenant: &str,
    req: &SolveRequest,
) -> ApiResult<ClusterTemplate> {
    let own: ClusterTemplate = match (&req.template, &req.cluster_template) {
        (Some(t), None) => lenient::from_value(t.clone())
            .map_err(|e| ApiError::BadRequest(format!("template: {e}")))?,
        (None, Some(name)) => {
            let doc = st
                .store
                .get_entity(tenant, EntityKind::ClusterTemplate, name, None)
                .await?
                .ok_or_else(|| {
                    ApiError::NotFound(format!("cluster template {name} does not exist."))
                })?;
            lenient::from_value(doc)?
        }
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of clusterTemplate (a name) and template (a body)".into(),
            ))
        }
    };
    Ok(resolve_in_tenant(&st.engine, tenant, own).await?)
}

/// Only `want` (if given) of an offer; an unoffered `want` leaves nothing, and the solver says why.
fn restrict(offer: TypeOffer, want: Option<&str>) -> TypeOffer {
    match want {
        None => offer,
        Some(w) => {
            let known = offer.offered().to_vec();
            TypeOffer::new(offer.offered().iter().filter(|o| *o == w).cloned()).with_known(known)
        }
    }
}

/// Sizes with a layout, as inclusive ranges.
fn ranges(ok: impl Iterator<Item = (u64, bool)>) -> Vec<[u64; 2]> {
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

async fn solve(State(st): State<AppState>, who: Identity, body: Bytes) -> ApiResult<Json<Value>> {
    let req: SolveRequest = parse_body(&body, "a solve request")?;
    let tenant = who.tenant.id.clone();
    let template = template_of(&st, &tenant, &req).await?;
    let provider = req
        .provider
        .clone()
        .or_else(|| template.defaults.provider.clone())
        .unwrap_or_default();
    let hardware: Vec<MachineType> = typed(&st, &tenant, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed(&st, &tenant, EntityKind::ImageType).await?;
    let services: Vec<Service> = typed(&st, &tenant, EntityKind::Service).await?;
    let hw = restrict(
        TypeOffer::hardware_for(&hardware, &provider),
        req.hardwaretype
            .as_deref()
            .or(template.defaults.hardwaretype.as_deref()),
    );
    let img = restrict(
        TypeOffer::images_for(&images, &provider),
        req.imagetype
            .as_deref()
            .or(template.defaults.imagetype.as_deref()),
    );
    let wanted = req
        .services
        .clone()
        .unwrap_or_else(|| template.defaults.services.clone());
    if req
        .num_machines
        .is_some_and(|n| n == 0 || n > weft_model::MAX_CLUSTER_SIZE)
    {
        return Err(ApiError::BadRequest(format!(
            "numMachines must be 1 to {}",
            weft_model::MAX_CLUSTER_SIZE
        )));
    }
    let size = req
        .num_machines
        .unwrap_or(template.constraints.size.min.max(1));
    let scan = req.sizes;
    // The search is CPU work; keep it off the async workers.
    let answer = tokio::task::spawn_blocking(move || {
        let cat = Catalog {
            template: &template,
            hardware: &hw,
            images: &img,
            services: Some(&services),
        };
        let (layout, explanation) = match weft_solver::create(&cat, &wanted, size) {
            Ok(l) => {
                let groups: Vec<Value> = l
                    .groups()
                    .into_iter()
                    .map(|g| json!({"hardwaretype": g.hardwaretype, "imagetype": g.imagetype, "services": g.services, "count": g.count}))
                    .collect();
                (Value::Array(groups), Value::Null)
            }
            Err(e) => (Value::Null, json!(e.to_string())),
        };
        let sizes = if scan {
            let fits = (1..=SIZE_SCAN).map(|n| (n, weft_solver::create(&cat, &wanted, n).is_ok()));
            json!({"ranges": ranges(fits), "scanned": [1, SIZE_SCAN]})
        } else {
            Value::Null
        };
        json!({"numMachines": size, "provider": provider, "services": wanted,
               "layout": layout, "explanation": explanation, "sizes": sizes})
    })
    .await
    .map_err(|e| ApiError::Internal(format!("solver task: {e}")))?;
    Ok(Json(answer))
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
