//! Operations on an existing cluster: each builds the layout after the change (with the solver when
//! the layout changes), plans the job, and starts it with [`start_job`], or only shows its plan when
//! asked for a dry run.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use weft_model::{
    ClusterStatus, ClusterTemplate, EntityKind, MachineType, Node, PlanView, Rollout, RolloutSpec,
    Service,
};
use weft_planner::{Operation, RolloutPlan};
use weft_solver::{Catalog, Change, ExistingNode, Layout, TypeOffer};

use weft_store::{ChangeSet, Expect, Write};

use crate::body::ClusterBody;
use crate::catalog::typed_list;
use crate::error::{EngineError, EngineResult};
use crate::ids::cluster_id_text;
use crate::jobs::{
    hostname, load, require_status, start_job, with_definition, JobOp, Loaded, MachineTypes,
    RunMode,
};
use crate::view::visible;
use crate::{store_err, Caller, Engine};

/// Solves a change of the cluster's layout against its template and the tenant's current catalog.
pub async fn solve_change(
    st: &Engine,
    c: &Loaded,
    change: &Change,
) -> EngineResult<(Layout, Vec<Service>, Vec<MachineType>, Vec<MachineType>)> {
    let tenant = &c.row.tenant_id;
    let hardware: Vec<MachineType> = typed_list(st, tenant, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed_list(st, tenant, EntityKind::ImageType).await?;
    let services = with_own_services(typed_list(st, tenant, EntityKind::Service).await?, c);
    let hw = TypeOffer::hardware_for(&hardware, &c.body.provider.name);
    let img = TypeOffer::images_for(&images, &c.body.provider.name);
    let catalog = Catalog {
        template: &c.body.template,
        hardware: &hw,
        images: &img,
        services: Some(&services),
    };
    let layout = weft_solver::change(&catalog, &existing_nodes(c), change)
        .map_err(|e| EngineError::NoLayout(e.to_string()))?;
    Ok((layout, services, hardware, images))
}

/// Refuses new nodes beyond the tenant's `maxNodes`.
pub(crate) async fn check_node_quota(st: &Engine, who: &Caller, adds: u64) -> EngineResult<()> {
    if adds == 0 {
        return Ok(());
    }
    let tenant = &who.tenant;
    let (_, nodes) = st.store.count_clusters(&tenant.id).await?;
    if nodes + adds > tenant.spec.max_nodes {
        return Err(EngineError::NodeQuota {
            tenant: tenant.spec.name.clone(),
            limit: tenant.spec.max_nodes,
            has: nodes,
            asks: adds,
        });
    }
    Ok(())
}

/// The cluster's nodes as the solver sees them, oldest first.
pub(crate) fn existing_nodes(c: &Loaded) -> Vec<ExistingNode> {
    c.nodes
        .iter()
        .map(|n| ExistingNode {
            id: n.id.clone(),
            hardwaretype: n.properties.hardwaretype.clone(),
            imagetype: n.properties.imagetype.clone(),
            services: n.properties.services.iter().cloned().collect(),
        })
        .collect()
}

/// The catalog's services plus the cluster's own definitions of those it runs that the catalog no
/// longer has (deleted since): a cluster keeps working on what it was built with.
pub(crate) fn with_own_services(mut catalog: Vec<Service>, c: &Loaded) -> Vec<Service> {
    for def in c.nodes.iter().flat_map(|n| &n.services) {
        if !catalog.iter().any(|s| s.name == def.name) {
            catalog.push(def.clone());
        }
    }
    catalog
}

/// The nodes after a solved change: existing nodes with their new service lists (definitions from
/// the catalog for services they gain), and new nodes numbered after the highest nodenum.
pub fn nodes_after(
    c: &Loaded,
    layout: &Layout,
    services: &[Service],
    hardware: &[MachineType],
    images: &[MachineType],
) -> Vec<Node> {
    let types = MachineTypes {
        provider: &c.body.provider.name,
        hardware,
        images,
        services,
    };
    let by_id: BTreeMap<&str, &Node> = c.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut next = c
        .nodes
        .iter()
        .map(|n| n.properties.nodenum)
        .max()
        .map_or(1000, |n| n + 1);
    let mut out = Vec::new();
    for ln in &layout.nodes {
        match ln.id.as_deref().and_then(|id| by_id.get(id)) {
            Some(old) => {
                let mut n = (*old).clone();
                let mut defs: Vec<Service> = Vec::new();
                for s in &ln.services {
                    match old.services.iter().find(|d| &d.name == s) {
                        Some(d) => defs.push(d.clone()),
                        None => defs.extend(services.iter().find(|d| &d.name == s).cloned()),
                    }
                }
                n.properties.automators = {
                    let set: std::collections::BTreeSet<String> = defs
                        .iter()
                        .flat_map(|d| d.provisioner.actions.values().map(|a| a.automator.clone()))
                        .collect();
                    set.into_iter().collect()
                };
                n.properties.services = ln.services.clone();
                n.services = defs;
                out.push(n);
            }
            None => {
                let name = hostname(&c.row.name, c.row.id, next, &c.body.dns_suffix);
                out.push(types.new_node(
                    c.row.id,
                    next,
                    name,
                    &ln.hardwaretype,
                    &ln.imagetype,
                    &ln.services,
                ));
                next += 1;
            }
        }
    }
    out
}

/// Starts (or, for a dry run, plans) an operation that keeps the layout: reconfigure, start, stop,
/// restart. Returns the plan only for a dry run.
pub async fn in_place(
    st: &Engine,
    c: &Loaded,
    op: impl Into<JobOp>,
    body: ClusterBody,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let s = start_job(st, c, op, &[], c.nodes.clone(), body, vec![], mode).await?;
    Ok(mode.dry_run.then_some(s.plan))
}

/// Solves `change`, then starts (or plans) `op` from the current layout to the solved one; nodes
/// the solver takes away leave when the job succeeds. Returns the plan only for a dry run.
pub async fn relayout(
    st: &Engine,
    c: &Loaded,
    change: &Change,
    op: Operation,
    body: ClusterBody,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let (layout, services, hw, img) = solve_change(st, c, change).await?;
    let after = nodes_after(c, &layout, &services, &hw, &img);
    let s = start_job(
        st,
        c,
        op,
        &c.nodes,
        after,
        body,
        layout.removed.clone(),
        mode,
    )
    .await?;
    Ok(mode.dry_run.then_some(s.plan))
}

/// Moves the end of the lease of cluster `id` (as `who` sees it) to `expire_time`, within its
/// template's lease rules (never before creation; at most `step` longer at a time; at most `max`
/// after creation).
pub async fn set_lease(
    st: &Engine,
    who: &Caller,
    id: &str,
    expire_time: Option<i64>,
) -> EngineResult<()> {
    let row = visible(st, who, id).await?;
    let t = expire_time.ok_or_else(|| invalid("expire time not specified".into()))?;
    match row.status {
        ClusterStatus::Terminated | ClusterStatus::Pending => {
            return Err(invalid(format!(
                "cluster {id} is {}: its lease cannot change now",
                row.status.as_str()
            )));
        }
        ClusterStatus::Active | ClusterStatus::Incomplete | ClusterStatus::Inconsistent => {}
    }
    let c = load(st, row.clone()).await?;
    let l = c.body.template.administration.leaseduration;
    if t < row.create_time {
        return Err(invalid(
            "expireTime may not be before the cluster's creation".into(),
        ));
    }
    if l.max != 0 {
        if l.step != 0 && t - row.expire_time > l.step as i64 {
            return Err(invalid(format!(
                "the lease may grow by at most {} ms at a time",
                l.step
            )));
        }
        if t > row.create_time + l.max as i64 {
            return Err(invalid(format!(
                "the lease may not end more than {} ms after creation",
                l.max
            )));
        }
    }
    let mut new = row.clone();
    new.expire_time = t;
    let cs = ChangeSet {
        expect: vec![Expect::cluster(&row)],
        writes: vec![Write::Cluster(new)],
    };
    st.store.commit(&cs).await.map_err(store_err)
}

fn invalid(message: String) -> EngineError {
    EngineError::Invalid(message)
}

/// Whether what the cluster runs (its services, and its nodes' hardware and image types) is
/// within `template`'s compatibility lists (an empty list allows anything); `Err` names the first
/// thing that is not.
pub(crate) fn runs_within(template: &ClusterTemplate, c: &Loaded) -> Result<(), String> {
    let compat = &template.compatibility;
    let allowed = |list: &[String], x: &str| list.is_empty() || list.iter().any(|l| l == x);
    if let Some(s) = c
        .body
        .services
        .iter()
        .find(|s| !allowed(&compat.services, s))
    {
        return Err(format!(
            "it runs service {s}, which the template no longer allows"
        ));
    }
    for n in &c.nodes {
        let p = &n.properties;
        if !allowed(&compat.hardwaretypes, &p.hardwaretype) {
            return Err(format!(
                "node {} has hardware type {}, which the template no longer allows",
                n.id, p.hardwaretype
            ));
        }
        if !allowed(&compat.imagetypes, &p.imagetype) {
            return Err(format!(
                "node {} has image type {}, which the template no longer allows",
                n.id, p.imagetype
            ));
        }
    }
    Ok(())
}

/// Adds `k` nodes to cluster `id` (active), within the tenant's `maxNodes`; returns the plan only
/// for a dry run.
pub async fn expand(
    st: &Engine,
    who: &Caller,
    id: &str,
    k: Option<u64>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let row = visible(st, who, id).await?;
    let k = node_count(k)?;
    require_status(&row, &[ClusterStatus::Active])?;
    check_node_quota(st, who, k).await?;
    let c = load(st, row).await?;
    let size = c.nodes.len() as u64 + k;
    if size > st.settings.max_cluster_size {
        return Err(invalid(format!(
            "cluster size {size} is above the server's limit of {} (max_cluster_size)",
            st.settings.max_cluster_size
        )));
    }
    let body = c.body.clone();
    relayout(st, &c, &Change::Expand(k), Operation::Expand, body, mode).await
}

/// Removes the `k` newest nodes of cluster `id` (active), as far as the template allows; returns
/// the plan only for a dry run.
pub async fn shrink(
    st: &Engine,
    who: &Caller,
    id: &str,
    k: Option<u64>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let row = visible(st, who, id).await?;
    let k = node_count(k)?;
    require_status(&row, &[ClusterStatus::Active])?;
    let c = load(st, row).await?;
    let body = c.body.clone();
    relayout(st, &c, &Change::Shrink(k), Operation::Shrink, body, mode).await
}

/// The number of nodes an expand or shrink asks for, checked after the cluster was found (an
/// unknown cluster is a 404 whatever the count).
fn node_count(k: Option<u64>) -> EngineResult<u64> {
    match k {
        Some(n) if n > 0 => Ok(n),
        _ => Err(EngineError::Invalid(
            "count must be a number of nodes greater than 0".into(),
        )),
    }
}

/// Gives cluster `id` (active or inconsistent) a whole new `config` and configures its services
/// with it, restarting them when `restart`, rolling when a rollout is asked for or the template has
/// one; returns the plan only for a dry run.
pub async fn reconfigure(
    st: &Engine,
    who: &Caller,
    id: &str,
    config: Map<String, Value>,
    restart: bool,
    rollout: Option<&RolloutSpec>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let allowed = [ClusterStatus::Active, ClusterStatus::Inconsistent];
    let c = load_in(st, who, id, &allowed).await?;
    let mut body = c.body.clone();
    body.config = config;
    let mut job = rolling(
        Operation::Reconfigure { restart },
        rollout_policy(&c.body.template, rollout)?,
    );
    if job.policy.is_some() {
        job.config_before = Some(c.body.config.clone());
    }
    in_place(st, &c, job, body, mode).await
}

/// The rollout of an upgrade, restart or reconfigure of `c`: the request's `rollout`, each field
/// falling back to the template's `administration.rollout`; none when neither is given.
pub(crate) fn rollout_policy(
    template: &ClusterTemplate,
    spec: Option<&RolloutSpec>,
) -> EngineResult<Option<Rollout>> {
    let template = template.administration.rollout.as_ref();
    let defaults = template
        .map(|t| t.policy(None, "administration.rollout"))
        .transpose()?;
    Ok(match spec {
        Some(s) => Some(s.policy(defaults.as_ref(), "rollout")?),
        None => defaults,
    })
}

/// `op` as a job, rolling when there is a policy.
pub(crate) fn rolling(op: Operation, policy: Option<Rollout>) -> JobOp {
    JobOp {
        op,
        rollout: policy.map(|p| RolloutPlan {
            canaries: p.canaries as usize,
            max_in_flight: p.max_in_flight,
            gates: true,
            nodes: None,
        }),
        policy,
        config_before: None,
    }
}

/// Adds services of the cluster's template to cluster `id` (active), placing them with the
/// solver; returns the plan only for a dry run.
pub async fn add_services(
    st: &Engine,
    who: &Caller,
    id: &str,
    services: Vec<String>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    if services.is_empty() {
        return Err(invalid("services must name at least one service".into()));
    }
    let c = load_in(st, who, id, &[ClusterStatus::Active]).await?;
    let mut body = c.body.clone();
    for s in &services {
        if !body.services.contains(s) {
            body.services.push(s.clone());
        }
    }
    let change = Change::AddServices(services);
    relayout(st, &c, &change, Operation::AddServices, body, mode).await
}

/// Removes `service` from cluster `id` (active); nodes left with nothing leave. Returns the plan
/// only for a dry run.
pub async fn remove_service(
    st: &Engine,
    who: &Caller,
    id: &str,
    service: &str,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let c = load_with(st, who, id, service).await?;
    require_status(&c.row, &[ClusterStatus::Active])?;
    let mut body = c.body.clone();
    body.services.retain(|s| s != service);
    let change = Change::RemoveService(service.to_string());
    let op = Operation::RemoveService {
        service: service.to_string(),
    };
    relayout(st, &c, &change, op, body, mode).await
}

/// What a user can ask every service of a cluster, or one, to do in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceAction {
    /// Starts the service (a START task per node).
    Start,
    /// Stops the service (a STOP task per node).
    Stop,
    /// Restarts the service, batch by batch as a rolling change.
    Restart,
}

impl ServiceAction {
    /// `start`, `stop` or `restart`, as the API's path says it.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "start" => Some(Self::Start),
            "stop" => Some(Self::Stop),
            "restart" => Some(Self::Restart),
            _ => None,
        }
    }

    fn operation(self, service: Option<String>) -> Operation {
        match self {
            Self::Start => Operation::Start { service },
            Self::Stop => Operation::Stop { service },
            Self::Restart => Operation::Restart { service },
        }
    }
}

/// Starts, stops or restarts `service` (or every service) of cluster `id` (active); a restart rolls
/// when a rollout is asked for or the template has one. Returns the plan only for a dry run.
pub async fn service_action(
    st: &Engine,
    who: &Caller,
    id: &str,
    action: ServiceAction,
    service: Option<&str>,
    rollout: Option<&RolloutSpec>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let c = match service {
        Some(svc) => {
            let c = load_with(st, who, id, svc).await?;
            require_status(&c.row, &[ClusterStatus::Active])?;
            c
        }
        None => load_in(st, who, id, &[ClusterStatus::Active]).await?,
    };
    let op = action.operation(service.map(str::to_string));
    let job = match action {
        ServiceAction::Restart => rolling(op, rollout_policy(&c.body.template, rollout)?),
        _ if rollout.is_some() => {
            return Err(EngineError::Model(weft_model::ModelError::invalid(
                "rollout",
                "rollout applies to restart, upgrade and reconfigure, not to start or stop",
            )))
        }
        _ => op.into(),
    };
    let body = c.body.clone();
    in_place(st, &c, job, body, mode).await
}

/// Upgrades `service` on cluster `id` (active) to its current definition in the catalog,
/// `batch_size` nodes at a time, or as a rollout when one is asked for or the template has one;
/// returns the plan only for a dry run.
pub async fn upgrade(
    st: &Engine,
    who: &Caller,
    id: &str,
    service: &str,
    batch_size: usize,
    rollout: Option<&RolloutSpec>,
    mode: RunMode,
) -> EngineResult<Option<PlanView>> {
    let c = load_with(st, who, id, service).await?;
    require_status(&c.row, &[ClusterStatus::Active])?;
    let defs: Vec<Service> = typed_list(st, &c.row.tenant_id, EntityKind::Service).await?;
    let new_def = defs
        .into_iter()
        .find(|s| s.name == service)
        .ok_or_else(|| EngineError::ServiceGone(service.to_string()))?;
    let after = with_definition(&c.nodes, &new_def);
    let op = Operation::Upgrade {
        service: service.to_string(),
        batch_size: batch_size.max(1),
    };
    let job = rolling(op, rollout_policy(&c.body.template, rollout)?);
    let s = start_job(st, &c, job, &c.nodes, after, c.body.clone(), vec![], mode).await?;
    Ok(mode.dry_run.then_some(s.plan))
}

/// Cluster `id` as `who` sees it, loaded, when its status is one of `allowed` (any if empty).
async fn load_in(
    st: &Engine,
    who: &Caller,
    id: &str,
    allowed: &[ClusterStatus],
) -> EngineResult<Loaded> {
    let row = visible(st, who, id).await?;
    if !allowed.is_empty() {
        require_status(&row, allowed)?;
    }
    load(st, row).await
}

/// Cluster `id` as `who` sees it, loaded, when it runs `service` (whatever its status).
async fn load_with(st: &Engine, who: &Caller, id: &str, service: &str) -> EngineResult<Loaded> {
    let c = load_in(st, who, id, &[]).await?;
    if !c.body.services.iter().any(|s| s == service) {
        return Err(EngineError::ServiceNotOnCluster {
            service: service.to_string(),
            cluster: cluster_id_text(c.row.id),
        });
    }
    Ok(c)
}
