//! `/v2/providers/{name}/hosts`: the host pool of a `hostpool` provider (a weft addition). The
//! tenant admin lists, adds, changes and removes hosts; the engine lends them to clusters
//! ([`weft_engine::hostpool`]). A host's private key is written, never read back: every answer shows it
//! as `********`, and a PUT without a key (or with `********`) keeps the stored one.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_engine::pools;
use weft_model::{PoolHost, PoolHostRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::ApiResult;
use crate::state::AppState;

const TAG: &str = "hostpools";

/// Registers `/v2/providers/{name}/hosts` and `/v2/providers/{name}/hosts/{host}`.
pub fn routes(api: Api) -> Api {
    let all = "/v2/providers/{name}/hosts";
    let one = "/v2/providers/{name}/hosts/{host}";
    api.route(
        MethodFilter::GET,
        all,
        list,
        op(TAG, "List the hosts of a host-pool provider's pool (tenant admin)")
            .ok(200, "the hosts, by id; keys read ********", Body::Array("PoolHost"))
            .status(403, "caller is not the tenant admin")
            .status(404, "no such provider, or it is not of type hostpool"),
    )
    .route(
        MethodFilter::POST,
        all,
        create,
        op(TAG, "Add a host to a host-pool provider's pool (tenant admin)")
            .body(Body::Json("PoolHostRequest"))
            .ok(200, "the host as stored (key ********)", Body::Json("PoolHost"))
            .status(400, "invalid body; the message names the field")
            .status(403, "caller is not the tenant admin")
            .status(404, "no such provider, or it is not of type hostpool")
            .status(
                409,
                "the pool has a host of that id, or the tenant a host at that address and port",
            ),
    )
    .route(
        MethodFilter::GET,
        one,
        get,
        op(TAG, "Get one host of a pool (tenant admin)")
            .ok(200, "the host (key ********)", Body::Json("PoolHost"))
            .status(403, "caller is not the tenant admin")
            .status(404, "no such provider or host"),
    )
    .route(
        MethodFilter::PUT,
        one,
        put,
        op(
            TAG,
            "Write a host of a pool (tenant admin): creates it if absent; a missing or ******** key keeps the stored one; a lent host keeps its node",
        )
        .body(Body::Json("PoolHostRequest"))
        .ok(200, "the host as stored (key ********)", Body::Json("PoolHost"))
        .status(400, "invalid body; the message names the field")
        .status(403, "caller is not the tenant admin")
        .status(404, "no such provider, or it is not of type hostpool")
        .status(409, "another host of the tenant has that address and port"),
    )
    .route(
        MethodFilter::DELETE,
        one,
        delete,
        op(TAG, "Remove a free host from its pool (tenant admin)")
            .status(200, "removed")
            .status(403, "caller is not the tenant admin")
            .status(404, "no such provider or host")
            .status(409, "the host is lent to a node of a cluster"),
    )
}

async fn list(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<PoolHost>>> {
    Ok(Json(pools::list(&st.engine, &who.caller(), &name).await?))
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
) -> ApiResult<Json<PoolHost>> {
    Ok(Json(
        pools::get(&st.engine, &who.caller(), &name, &host).await?,
    ))
}

async fn create(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<PoolHost>> {
    let req: PoolHostRequest = parse_body(&body, "a host object")?;
    Ok(Json(
        pools::create(&st.engine, &who.caller(), &name, req).await?,
    ))
}

async fn put(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<PoolHost>> {
    let req: PoolHostRequest = parse_body(&body, "a host object")?;
    Ok(Json(
        pools::put(&st.engine, &who.caller(), &name, &host, req).await?,
    ))
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
) -> ApiResult<()> {
    Ok(pools::delete(&st.engine, &who.caller(), &name, &host).await?)
}
