//! `/v2/providers/{name}/hosts`: the host pool of a `hostpool` provider (a weft addition). The
//! tenant admin lists, adds, changes and removes hosts; the engine lends them to clusters
//! ([`weft_engine::hostpool`]). A host's private key is written, never read back: every answer shows it
//! as `********`, and a PUT without a key (or with `********`) keeps the stored one.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_model::{lenient, EntityKind, PoolHost, PoolHostRequest, Provider};
use weft_store::{HostDelete, PoolHostRow, StoreError};

use super::entities::not_found;
use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};
use weft_engine::cluster_id_text;
use weft_engine::hostpool::view;

const TAG: &str = "hostpools";

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

/// The provider, if it exists and is a host pool.
async fn pool(st: &AppState, who: &Identity, name: &str) -> ApiResult<Provider> {
    let doc = st
        .store
        .get_entity(&who.tenant.id, EntityKind::Provider, name, None)
        .await?
        .ok_or_else(|| not_found(EntityKind::Provider, name))?;
    let p: Provider = lenient::from_value(doc)?;
    if !weft_engine::hostpool::is_pool(&p) {
        return Err(ApiError::NotFound(format!(
            "provider {name} has no host pool: its type is {}, not {}",
            p.providertype,
            weft_model::hostpool::HOSTPOOL
        )));
    }
    Ok(p)
}

fn host_not_found(provider: &str, host: &str) -> ApiError {
    ApiError::NotFound(format!(
        "host {host} not found in the pool of provider {provider}."
    ))
}

fn conflict(e: StoreError, spec: &weft_model::HostSpec) -> ApiError {
    match e {
        StoreError::Conflict(_) => ApiError::Conflict(format!(
            "host {} (or another host at {}:{}) already exists",
            spec.id, spec.address, spec.port
        )),
        other => other.into(),
    }
}

async fn list(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<PoolHost>>> {
    who.require_admin()?;
    pool(&st, &who, &name).await?;
    let hosts = st
        .store
        .list_pool_hosts(&who.tenant.id, Some(&name))
        .await?;
    Ok(Json(hosts.iter().map(view).collect()))
}

async fn get(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
) -> ApiResult<Json<PoolHost>> {
    who.require_admin()?;
    pool(&st, &who, &name).await?;
    let h = st
        .store
        .get_pool_host(&who.tenant.id, &name, &host)
        .await?
        .ok_or_else(|| host_not_found(&name, &host))?;
    Ok(Json(view(&h)))
}

/// A host's private key as it is stored: sealed.
async fn seal_key(st: &AppState, who: &Identity, key: String) -> ApiResult<String> {
    let sealed = st
        .engine
        .sealer
        .seal(&who.tenant.id, &serde_json::Value::String(key))
        .await?;
    Ok(sealed.as_str().unwrap_or_default().to_string())
}

async fn create(
    State(st): State<AppState>,
    who: Identity,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<PoolHost>> {
    who.require_admin()?;
    pool(&st, &who, &name).await?;
    let req: PoolHostRequest = parse_body(&body, "a host object")?;
    let spec = req.check(None)?;
    let key = spec
        .key
        .clone()
        .ok_or_else(|| ApiError::BadRequest("key must be specified".into()))?;
    let key = seal_key(&st, &who, key).await?;
    let row = PoolHostRow {
        tenant_id: who.tenant.id.clone(),
        provider: name.clone(),
        id: spec.id.clone(),
        address: spec.address.clone(),
        port: spec.port,
        user: spec.user.clone(),
        key,
        labels: spec.labels.clone(),
        lease: None,
        create_time: now_ms(),
    };
    st.store
        .insert_pool_host(&row)
        .await
        .map_err(|e| conflict(e, &spec))?;
    tracing::info!(provider = %name, host = %row.id, address = %row.address, "pool host added");
    Ok(Json(view(&row)))
}

async fn put(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<PoolHost>> {
    who.require_admin()?;
    pool(&st, &who, &name).await?;
    let req: PoolHostRequest = parse_body(&body, "a host object")?;
    let spec = req.check(Some(&host))?;
    let stored = st.store.get_pool_host(&who.tenant.id, &name, &host).await?;
    let key = match (&spec.key, &stored) {
        (Some(k), _) => seal_key(&st, &who, k.clone()).await?,
        (None, Some(s)) => s.key.clone(),
        (None, None) => return Err(ApiError::BadRequest("key must be specified".into())),
    };
    let mut row = PoolHostRow {
        tenant_id: who.tenant.id.clone(),
        provider: name.clone(),
        id: spec.id.clone(),
        address: spec.address.clone(),
        port: spec.port,
        user: spec.user.clone(),
        key,
        labels: spec.labels.clone(),
        lease: None,
        create_time: now_ms(),
    };
    let written = match stored {
        Some(_) => st.store.update_pool_host(&row).await,
        // Created by a concurrent writer meanwhile: its conflict is this PUT's answer.
        None => st.store.insert_pool_host(&row).await.map(|()| true),
    }
    .map_err(|e| conflict(e, &spec))?;
    if !written {
        return Err(host_not_found(&name, &host)); // deleted meanwhile
    }
    if let Some(h) = st.store.get_pool_host(&who.tenant.id, &name, &host).await? {
        row = h;
    }
    tracing::info!(provider = %name, host = %row.id, address = %row.address, "pool host written");
    Ok(Json(view(&row)))
}

async fn delete(
    State(st): State<AppState>,
    who: Identity,
    Path((name, host)): Path<(String, String)>,
) -> ApiResult<()> {
    who.require_admin()?;
    pool(&st, &who, &name).await?;
    match st
        .store
        .delete_pool_host(&who.tenant.id, &name, &host)
        .await?
    {
        HostDelete::Deleted => {
            tracing::info!(provider = %name, host = %host, "pool host removed");
            Ok(())
        }
        HostDelete::Missing => Err(host_not_found(&name, &host)),
        HostDelete::InUse(l) => Err(ApiError::Conflict(format!(
            "host {host} is lent to node {} of cluster {}: delete the cluster (or shrink it) first",
            l.node_id,
            cluster_id_text(l.cluster_id)
        ))),
    }
}
