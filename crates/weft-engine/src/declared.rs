//! Templates as versions that clusters follow, and clusters declared in files: moving a cluster
//! to a template version ([`sync`], Coopr's template sync completed: services the new version
//! adds to its defaults are added, its config changes are taken where the cluster kept the old
//! defaults), what moving every cluster of a template would do ([`impact`]), a cluster as a file
//! declares it ([`export`]) and moving a cluster to such a declaration ([`apply`]). The moves
//! themselves are [`crate::transition`]'s.

use weft_model::{
    lenient, ApplyRequest, ClusterChange, ClusterSpec, ClusterStatus, ClusterTemplate, EntityKind,
};

use crate::catalog::resolve_in_tenant;
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{load, require_status, Loaded, RunMode};
use crate::transition::{follow_config, move_cluster, Target};
use crate::view::visible;
use crate::{Caller, Engine};

/// Version `version` of the tenant's template `name` (the latest when `None`), resolved through
/// its parents and partials as they are now.
pub async fn template_at(
    st: &Engine,
    tenant_id: &str,
    name: &str,
    version: Option<u64>,
) -> EngineResult<ClusterTemplate> {
    let doc = st
        .store
        .get_entity(tenant_id, EntityKind::ClusterTemplate, name, version)
        .await?
        .ok_or_else(|| EngineError::NotInCatalog {
            kind: "cluster template",
            name: match version {
                Some(v) => format!("{name} (version {v})"),
                None => name.to_string(),
            },
        })?;
    // A stored version that no longer reads or resolves is the catalog's fault (409), not the
    // request's.
    let own: ClusterTemplate =
        lenient::from_value(doc).map_err(|e| EngineError::from(e).against_catalog())?;
    let stored = own.version;
    let mut resolved = resolve_in_tenant(st, tenant_id, own)
        .await
        .map_err(EngineError::against_catalog)?;
    resolved.version = stored;
    Ok(resolved)
}

/// Moves cluster `id` (active) to `version` of its template (the latest when `None`): services
/// the version adds to the template's defaults are added, config the template changed is taken
/// where the cluster still had the old default (its own values are kept and listed), nodes keep
/// their placement; an added service that no existing node can hold gets the fewest new nodes
/// that do. With no task to run only the template copy changes, as in Coopr.
pub async fn sync(
    st: &Engine,
    who: &Caller,
    id: &str,
    version: Option<u64>,
    mode: RunMode,
) -> EngineResult<ClusterChange> {
    let row = visible(st, who, id).await?;
    require_status(&row, &[ClusterStatus::Active])?;
    let c = load(st, row).await?;
    let t = template_at(st, &c.row.tenant_id, &c.body.template.name, version).await?;
    move_cluster(st, who, &c, sync_target(&c, t), mode, None).await
}

/// Where a sync to `t` takes cluster `c`.
fn sync_target(c: &Loaded, t: ClusterTemplate) -> Target {
    let old = &c.body.template.defaults;
    let mut services = c.body.services.clone();
    for s in &t.defaults.services {
        if !old.services.contains(s) && !services.contains(s) {
            services.push(s.clone());
        }
    }
    let (config, config_kept) = follow_config(&old.config, &t.defaults.config, &c.body.config);
    Target {
        services,
        size: c.nodes.len() as u64,
        config,
        expire_time: None,
        config_kept,
        may_grow: true,
        template: t,
    }
}

/// What a sync to `version` of template `name` (the latest when `None`) would do to each live
/// cluster of the tenant that follows another version of it, or why it cannot move (tenant
/// admin). Clusters already on that version (and content) are left out.
pub async fn impact(
    st: &Engine,
    who: &Caller,
    name: &str,
    version: Option<u64>,
) -> EngineResult<Vec<ClusterChange>> {
    who.require_admin()?;
    let tenant = &who.tenant.id;
    let t = template_at(st, tenant, name, version).await?;
    let mut out = Vec::new();
    for row in st.store.list_clusters(tenant, None).await? {
        if row.status == ClusterStatus::Terminated {
            continue;
        }
        let c = load(st, row).await?;
        if c.body.template.name != name || c.body.template == t {
            continue;
        }
        let change = match require_status(&c.row, &[ClusterStatus::Active]) {
            Ok(()) => {
                let dry = RunMode::dry(true);
                move_cluster(st, who, &c, sync_target(&c, t.clone()), dry, None).await?
            }
            Err(e) => ClusterChange {
                cluster_id: cluster_id_text(c.row.id),
                name: c.row.name.clone(),
                changes: true,
                template: name.to_string(),
                from_version: c.body.template.version,
                to_version: t.version,
                blocked: Some(e.to_string()),
                ..Default::default()
            },
        };
        out.push(change);
    }
    Ok(out)
}

/// Cluster `id` as a file declares it: `apply` of this changes nothing.
pub async fn export(st: &Engine, who: &Caller, id: &str) -> EngineResult<ClusterSpec> {
    let row = visible(st, who, id).await?;
    let c = load(st, row).await?;
    let lease = match c.row.expire_time {
        0 => 0,
        t => t.saturating_sub(c.row.create_time).max(0) as u64,
    };
    Ok(ClusterSpec {
        name: c.row.name.clone(),
        template: c.body.template.name.clone(),
        version: Some(c.body.template.version),
        size: c.nodes.len() as u64,
        services: Some(c.body.services.clone()),
        config: Some(c.body.config.clone()),
        lease: Some(lease),
        provider: Some(c.body.provider.name.clone()),
    })
}

/// Moves cluster `id` (active) to the state `req.spec` declares, in one job (or none when
/// nothing on the nodes changes); with `req.fingerprint`, only if the change is still exactly the
/// reviewed one on the same state.
pub async fn apply(
    st: &Engine,
    who: &Caller,
    id: &str,
    req: &ApplyRequest,
    mode: RunMode,
) -> EngineResult<ClusterChange> {
    let spec = &req.spec;
    let row = visible(st, who, id).await?;
    spec.check()?;
    require_status(&row, &[ClusterStatus::Active])?;
    let c = load(st, row).await?;
    same_identity(&c, spec)?;
    let t = template_at(st, &c.row.tenant_id, &spec.template, spec.version).await?;
    let expire_time = match spec.lease {
        Some(l) => lease_end(&c, &t, l)?,
        None => None,
    };
    let target = Target {
        services: spec
            .services
            .clone()
            .unwrap_or_else(|| t.defaults.services.clone()),
        size: spec.size,
        config: spec
            .config
            .clone()
            .unwrap_or_else(|| t.defaults.config.clone()),
        expire_time,
        config_kept: vec![],
        may_grow: false,
        template: t,
    };
    move_cluster(st, who, &c, target, mode, req.fingerprint.as_deref()).await
}

/// A declaration names the cluster it is applied to: same name, template and provider.
fn same_identity(c: &Loaded, spec: &ClusterSpec) -> EngineResult<()> {
    let id = cluster_id_text(c.row.id);
    let differs = |field: &str, have: &str, want: &str| {
        EngineError::Invalid(format!(
            "{field}: cluster {id} has {field} {have}, the declaration {want}; \
             a cluster cannot change its {field} (make a new cluster)"
        ))
    };
    if spec.name != c.row.name {
        return Err(differs("name", &c.row.name, &spec.name));
    }
    if spec.template != c.body.template.name {
        return Err(differs("template", &c.body.template.name, &spec.template));
    }
    match &spec.provider {
        Some(p) if *p != c.body.provider.name => Err(differs("provider", &c.body.provider.name, p)),
        _ => Ok(()),
    }
}

/// A declared lease is met when the cluster's lease ends within this long of it: a cluster made
/// from a file gets its lease from the client's clock at create, a few moments before the
/// server records its creation.
const LEASE_SLACK_MS: i64 = 60_000;

/// The lease end a declared lease (ms from creation, 0 forever) gives, within the template's
/// lease rules; `None` when the cluster's lease already meets it.
fn lease_end(c: &Loaded, t: &ClusterTemplate, lease: u64) -> EngineResult<Option<i64>> {
    let now = c.row.expire_time;
    let rules = &t.administration.leaseduration;
    let invalid = |m: String| EngineError::Invalid(format!("lease: {m}"));
    if lease == 0 {
        if rules.max != 0 {
            return Err(invalid(format!(
                "the template allows at most {} ms, not forever",
                rules.max
            )));
        }
        return Ok((now != 0).then_some(0));
    }
    if rules.max != 0 && lease > rules.max {
        return Err(invalid(format!(
            "the template allows at most {} ms, not {lease}",
            rules.max
        )));
    }
    let end = c
        .row
        .create_time
        .saturating_add(lease.min(i64::MAX as u64 / 2) as i64);
    if now != 0 && (end - now).abs() <= LEASE_SLACK_MS {
        return Ok(None);
    }
    if rules.max != 0 && rules.step != 0 && end - now > rules.step as i64 {
        return Err(invalid(format!(
            "the lease may grow by at most {} ms at a time",
            rules.step
        )));
    }
    Ok(Some(end))
}
