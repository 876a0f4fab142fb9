//! `POST /v2/providers/{name}/sweep` (a weft addition): the machines that carry weft's marks for
//! the caller's tenant on a provider's account but belong to no live node of the tenant, and with
//! `?delete=true` their removal. The tenant admin only.
//! See `weft_engine::sweep`; the provisioner is asked through `POST /v2/sweep` on its API (with
//! the provisioner token).

use axum::extract::{Path, Query, State};
use axum::routing::MethodFilter;
use axum::Json;
use serde::Deserialize;
use weft_model::SweepReport;

use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

/// Registers `POST /v2/providers/{name}/sweep`.
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::POST,
        "/v2/providers/{name}/sweep",
        sweep,
        op(
            "providers",
            "List the machines with weft's marks for this tenant that belong to no live node (tenant admin); delete=true also deletes them",
        )
        .query("delete", "true: delete the machines found")
        .ok(200, "the machines found, and what was deleted", Body::Json("SweepReport"))
        .status(400, "the provider type cannot list its machines, or a field is wrong")
        .status(403, "caller is not the tenant admin")
        .status(404, "no such provider")
        .status(409, "no live provisioner has the provider type")
        .status(500, "a provisioner failed"),
    )
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeleteFlag {
    delete: Option<String>,
}

impl DeleteFlag {
    fn on(&self) -> bool {
        self.delete
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case("true") || d == "1")
    }
}

async fn sweep(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
    Query(flag): Query<DeleteFlag>,
) -> ApiResult<Json<SweepReport>> {
    Ok(Json(
        weft_engine::sweep::sweep(&st.engine, &who.caller(), &name, flag.on()).await?,
    ))
}
