//! `/v2/tenants`: the superadmin creates, changes and deletes tenants (their workers and quotas).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::MethodFilter;
use axum::Json;
use weft_model::{EntityKind, TenantSpecification, TenantWriteRequest, Validate};
use weft_store::{Tenant, SUPERADMIN};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::state::{now_ms, AppState};
use weft_engine::workers::{free_capacity, rebalance};

pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::GET,
        "/v2/tenants",
        list,
        op("tenants", "List every tenant (superadmin)")
            .ok(200, "tenants", Body::Array("TenantSpecification"))
            .status(403, "not the superadmin (empty body)"),
    )
    .route(
        MethodFilter::POST,
        "/v2/tenants",
        create,
        op("tenants", "Create a tenant (superadmin)")
            .body(Body::Json("TenantWriteRequest"))
            .status(200, "created")
            .status(400, "invalid body or tenant missing")
            .status(403, "not the superadmin (empty body)")
            .status(409, "the name exists, or not enough worker capacity"),
    )
    .route(
        MethodFilter::GET,
        "/v2/tenants/{name}",
        get,
        op("tenants", "Get a tenant (superadmin)")
            .ok(200, "the tenant", Body::Json("TenantSpecification"))
            .status(403, "not the superadmin (empty body)")
            .status(404, "tenant not found"),
    )
    .route(
        MethodFilter::PUT,
        "/v2/tenants/{name}",
        put,
        op(
            "tenants",
            "Change a tenant, or create it if absent (superadmin)",
        )
        .body(Body::Json("TenantWriteRequest"))
        .status(200, "written")
        .status(400, "invalid body or name mismatch")
        .status(403, "not the superadmin (empty body)")
        .status(409, "not enough worker capacity"),
    )
    .route(
        MethodFilter::DELETE,
        "/v2/tenants/{name}",
        delete,
        op(
            "tenants",
            "Delete a tenant and everything it owns (superadmin; 200 also if absent)",
        )
        .status(200, "deleted")
        .status(403, "not the superadmin, or deleting superadmin")
        .status(409, "the tenant still has workers"),
    )
}

async fn list(
    State(st): State<AppState>,
    id: Identity,
) -> ApiResult<Json<Vec<TenantSpecification>>> {
    id.require_superadmin()?;
    Ok(Json(
        st.store
            .list_tenants()
            .await?
            .into_iter()
            .map(|t| t.spec)
            .collect(),
    ))
}

async fn get(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<TenantSpecification>> {
    id.require_superadmin()?;
    let t = st
        .store
        .tenant_by_name(&name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {name} not found")))?;
    Ok(Json(t.spec))
}

fn read_spec(body: &Bytes) -> ApiResult<(TenantSpecification, bool)> {
    let req: TenantWriteRequest = parse_body(body, "{\"tenant\": {...}}")?;
    let spec = req
        .tenant
        .ok_or_else(|| ApiError::BadRequest("tenant must be specified".into()))?;
    spec.validate()?;
    Ok((spec, req.bootstrap))
}

async fn check_capacity(
    st: &AppState,
    spec: &TenantSpecification,
    tenant_id: Option<&str>,
) -> ApiResult<()> {
    if spec.workers == 0 {
        return Ok(());
    }
    let provisioners = st.store.list_provisioners().await?;
    let tenants = st.store.list_tenants().await?;
    let free = free_capacity(&provisioners, &tenants, tenant_id);
    if u64::from(spec.workers) > free {
        return Err(ApiError::Conflict(format!(
            "not enough worker capacity: tenant {} asks for {} workers, registered provisioners have {} free",
            spec.name, spec.workers, free
        )));
    }
    Ok(())
}

async fn create(State(st): State<AppState>, id: Identity, body: Bytes) -> ApiResult<()> {
    id.require_superadmin()?;
    let (spec, bootstrap) = read_spec(&body)?;
    if st.store.tenant_by_name(&spec.name).await?.is_some() {
        return Err(ApiError::Conflict(format!(
            "tenant {} already exists",
            spec.name
        )));
    }
    check_capacity(&st, &spec, None).await?;
    let tenant = Tenant {
        id: uuid::Uuid::new_v4().to_string(),
        spec,
        create_time: now_ms(),
    };
    st.store.insert_tenant(&tenant).await.map_err(|e| match e {
        weft_store::StoreError::Conflict(_) => {
            ApiError::Conflict(format!("tenant {} already exists", tenant.spec.name))
        }
        other => other.into(),
    })?;
    if bootstrap {
        bootstrap_tenant(&st, &tenant.id).await?;
    }
    Ok(rebalance(&st.engine).await?)
}

async fn put(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<()> {
    id.require_superadmin()?;
    let (spec, bootstrap) = read_spec(&body)?;
    if spec.name != name {
        return Err(ApiError::BadRequest(format!(
            "tenant name in the body ({}) does not match the name in the path ({name})",
            spec.name
        )));
    }
    match st.store.tenant_by_name(&name).await? {
        Some(existing) => {
            check_capacity(&st, &spec, Some(&existing.id)).await?;
            let (clusters, nodes) = st.store.count_clusters(&existing.id).await?;
            if spec.max_clusters < clusters || spec.max_nodes < nodes {
                return Err(ApiError::Conflict(format!(
                    "tenant {name} has {clusters} clusters and {nodes} nodes: maxClusters {} and maxNodes {} would be below its usage",
                    spec.max_clusters, spec.max_nodes
                )));
            }
            st.store.update_tenant(&Tenant { spec, ..existing }).await?;
        }
        None => {
            check_capacity(&st, &spec, None).await?;
            let tenant = Tenant {
                id: uuid::Uuid::new_v4().to_string(),
                spec,
                create_time: now_ms(),
            };
            st.store.insert_tenant(&tenant).await?;
            if bootstrap {
                bootstrap_tenant(&st, &tenant.id).await?;
            }
        }
    }
    Ok(rebalance(&st.engine).await?)
}

async fn delete(
    State(st): State<AppState>,
    id: Identity,
    Path(name): Path<String>,
) -> ApiResult<()> {
    id.require_superadmin()?;
    if name == SUPERADMIN {
        return Err(ApiError::Forbidden("Superadmin cannot be deleted.".into()));
    }
    let Some(t) = st.store.tenant_by_name(&name).await? else {
        return Ok(());
    };
    if t.spec.workers > 0 {
        return Err(ApiError::Conflict(format!(
            "tenant {name} still has {} workers; set its workers to 0 first",
            t.spec.workers
        )));
    }
    st.store.delete_tenant(&t.id).await?;
    Ok(rebalance(&st.engine).await?)
}

/// Copies the superadmin's catalog (entities and plugin resources) into a new tenant.
pub async fn bootstrap_tenant(st: &AppState, tenant_id: &str) -> ApiResult<()> {
    let mut entities = Vec::new();
    for kind in EntityKind::ADMIN {
        for mut doc in st.store.list_entities(SUPERADMIN, kind).await? {
            if kind == EntityKind::Provider {
                // A sealed value opens only for its own tenant: sealed again for the new one.
                st.engine.sealer.open_all(SUPERADMIN, &mut doc).await?;
                weft_engine::entities::provider_to_store(&st.engine, tenant_id, &mut doc).await?;
            }
            let name = doc
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_string();
            entities.push((kind, name, doc));
        }
    }
    st.store.replace_entities(tenant_id, &entities).await?;
    let resources = st.resources.as_ref();
    Ok(weft_engine::plugins::copy_resources(&st.engine, resources, SUPERADMIN, tenant_id).await?)
}
