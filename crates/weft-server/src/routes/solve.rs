//! `POST /v2/solve` (weft extension): a layout preview for a saved template (`clusterTemplate`) or
//! one being edited and not saved yet (`template`); `weft_engine::preview` does the work. The web
//! UI's create form and template editor call it; so can template authors.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use weft_model::lenient;

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use weft_engine::preview::{preview_layout, LayoutQuery, TemplateRef};

/// Registers `POST /v2/solve`.
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
        .status(404, "the template, a parent, a partial or the provider does not exist")
        .status(
            409,
            "the template, as stored (or its parent or partials), is incomplete or invalid",
        ),
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

impl SolveRequest {
    fn into_query(self) -> ApiResult<LayoutQuery> {
        let template = match (self.template, self.cluster_template) {
            (Some(t), None) => TemplateRef::Draft(t),
            (None, Some(name)) => TemplateRef::Saved(name),
            _ => {
                return Err(ApiError::BadRequest(
                    "give exactly one of clusterTemplate (a name) and template (a body)".into(),
                ))
            }
        };
        Ok(LayoutQuery {
            template,
            num_machines: self.num_machines,
            services: self.services,
            provider: self.provider,
            hardwaretype: self.hardwaretype,
            imagetype: self.imagetype,
            sizes: self.sizes,
        })
    }
}

async fn solve(State(st): State<AppState>, who: Identity, body: Bytes) -> ApiResult<Json<Value>> {
    let req: SolveRequest = parse_body(&body, "a solve request")?;
    let answer = preview_layout(&st.engine, &who.caller(), req.into_query()?).await?;
    Ok(Json(answer))
}
