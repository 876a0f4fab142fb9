//! New clusters and new jobs: validate a create request (quotas, template, size, lease, provider
//! fields), solve the layout, plan the job, and store cluster, nodes, job and tasks in one commit.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use weft_model::{
    lenient, ClusterCreateRequest, ClusterStatus, ClusterTemplate, EntityKind, JobStatus,
    MachineType, ParameterType, PluginType, Provider, Service,
};
use weft_planner::{Operation, Plan, PlanInput};
use weft_solver::{Catalog, Layout, TypeOffer};
use weft_store::{
    ChangeSet, ClusterRow, Expect, JobRow, NodeRow, Quota, Tenant, Write, SUPERADMIN,
};

use super::body::{to_body, ClusterBody, JobBody};
use super::{cluster_id_text, notify, store_err, JobEventKind};
use crate::catalog::{resolve_in_tenant, typed_list};
use crate::cost::{self, PriceList};
use crate::error::{EngineError, EngineResult};
use crate::jobs::{hostname, job_id, job_rows, solved_job, MachineTypes};
use crate::{Caller, Engine};

/// What a create request made: a cluster (its id), or for a dry run the plan it would run.
#[derive(Debug)]
pub enum Created {
    /// The new cluster's id, as text.
    Id(String),
    /// The plan the create would run (a dry run: nothing was written).
    Plan(Box<weft_model::PlanView>),
}

/// Creates a cluster and its CLUSTER_CREATE job. Returns the cluster id. A request that cannot be
/// laid out still makes a cluster: it is `terminated`, with the solver's explanation as its message
/// (Coopr solved asynchronously; clients poll the status).
#[tracing::instrument(skip_all, fields(tenant = %who.tenant.spec.name, cluster = %req.name))]
pub async fn create_cluster(
    st: &Engine,
    who: &Caller,
    req: ClusterCreateRequest,
    dry_run: bool,
) -> EngineResult<Created> {
    let size = validate(&req, st.settings.max_cluster_size)?;
    check_quota(st, &who.tenant, size).await?;
    // The request is valid on its own: what the stored catalog refuses is unservable (409).
    let inputs = gather(st, &who.tenant.id, &req, size)
        .await
        .map_err(EngineError::against_catalog)?;
    // A dry run takes no id: it must change nothing, not even a counter.
    let cluster_id = if dry_run {
        0
    } else {
        st.store.next_id("clusters").await?
    };
    let new = NewCluster::from_request(who, &req, &inputs, cluster_id, size);
    check_complete(&inputs, &req, &new.body.services)?;
    let layout = match solve(&inputs, &req, &new.body.services, size) {
        Ok(l) => l,
        Err(e) if dry_run => return Err(EngineError::Unservable(e.to_string())),
        Err(e) => return record_unsolvable(st, new, e.to_string()).await,
    };
    let (mut new, plan) =
        plan_create(new, &inputs, &layout).map_err(EngineError::against_catalog)?;
    let prices = PriceList::new(&inputs.provider, &inputs.hardware, &inputs.images);
    let kinds = layout
        .nodes
        .iter()
        .map(|n| (n.hardwaretype.as_str(), n.imagetype.as_str()));
    let cost = prices.cost(kinds);
    cost::check_template_cap(&inputs.template, prices.currency.as_deref(), &cost)?;
    new.body.cost_micros_per_hour = prices.currency.is_some().then_some(cost.micros);
    new.body.currency = prices.currency.clone();
    let nodes: Vec<weft_model::Node> = new
        .nodes
        .iter()
        .filter_map(|r| serde_json::from_value(r.body.clone()).ok())
        .collect();
    new.body.cost_spans = prices.spans(&nodes, inputs.now);
    if dry_run {
        let mut view = crate::jobs::preview(&plan, String::new())?;
        let lease =
            (inputs.expire_time > 0).then(|| (inputs.expire_time - inputs.now).max(0) as u64);
        view.cost = prices.estimate(&Default::default(), &cost, lease);
        return Ok(Created::Plan(Box::new(view)));
    }
    commit_create(st, &who.tenant, new, &inputs.provider, plan).await
}

/// Checks what a create request says on its own; returns the cluster size.
fn validate(req: &ClusterCreateRequest, max_size: u64) -> EngineResult<u64> {
    if req.name.trim().is_empty() {
        return Err(EngineError::Invalid(
            "cluster name must be specified".into(),
        ));
    }
    weft_model::validate_name("name", &req.name)?;
    if req.cluster_template.is_empty() {
        return Err(EngineError::Invalid(
            "cluster template must be specified".into(),
        ));
    }
    let size = match req.num_machines {
        Some(n) if n > 0 => n as u64,
        None => return Err(EngineError::Invalid("numMachines must be specified".into())),
        _ => {
            return Err(EngineError::Invalid(
                "cluster size must be greater than 0".into(),
            ))
        }
    };
    if size > max_size {
        return Err(EngineError::Invalid(format!(
            "cluster size {size} is above the server's limit of {max_size} (max_cluster_size)"
        )));
    }
    if let Some(s) = &req.dns_suffix {
        weft_model::validate::validate_dns_suffix("dnsSuffix", s)?;
    }
    Ok(size)
}

/// Refuses a cluster that would take the tenant past its quotas (checked again in the commit).
async fn check_quota(st: &Engine, tenant: &Tenant, size: u64) -> EngineResult<()> {
    let (clusters, nodes) = st.store.count_clusters(&tenant.id).await?;
    if clusters + 1 > tenant.spec.max_clusters {
        return Err(EngineError::ClusterQuota {
            tenant: tenant.spec.name.clone(),
            limit: tenant.spec.max_clusters,
            has: clusters,
        });
    }
    if nodes + size > tenant.spec.max_nodes {
        return Err(EngineError::NodeQuota {
            tenant: tenant.spec.name.clone(),
            limit: tenant.spec.max_nodes,
            has: nodes,
            asks: size,
        });
    }
    Ok(())
}

/// What a create reads from the tenant's catalog.
struct Inputs {
    /// The request's time, and when the new cluster's lease ends.
    now: i64,
    expire_time: i64,
    template: ClusterTemplate,
    provider: Provider,
    secrets: Map<String, Value>,
    user_fields: Vec<String>,
    hardware: Vec<MachineType>,
    images: Vec<MachineType>,
    services: Vec<Service>,
}

/// Reads the template (resolved, and checked against the size), the provider with its type's
/// required fields, and the machine types and services of the tenant.
async fn gather(
    st: &Engine,
    tenant_id: &str,
    req: &ClusterCreateRequest,
    size: u64,
) -> EngineResult<Inputs> {
    let template = template(st, tenant_id, &req.cluster_template).await?;
    check_size(&template, size)?;
    let now = st.now_ms();
    let expire_time = lease_expiry(&template, req.initial_lease_duration, now)?;
    let provider_name = req
        .provider
        .clone()
        .or_else(|| template.defaults.provider.clone())
        .unwrap_or_default();
    let mut provider: Provider = catalog_entry(
        st,
        tenant_id,
        EntityKind::Provider,
        "provider",
        &provider_name,
    )
    .await?;
    let ptype: PluginType = catalog_entry(
        st,
        SUPERADMIN,
        EntityKind::ProviderType,
        "provider type",
        &provider.providertype,
    )
    .await
    .map_err(|e| match e {
        EngineError::NotInCatalog { kind, name } => EngineError::NotOffered { kind, name },
        e => e,
    })?;
    check_required_fields(&ptype, &provider, &req.provider_fields)?;
    let (mut secrets, user_fields) =
        split_provider_fields(&ptype, &mut provider, &req.provider_fields);
    for v in secrets.values_mut() {
        *v = st.sealer.seal(tenant_id, v).await?;
    }
    Ok(Inputs {
        now,
        expire_time,
        template,
        provider,
        secrets,
        user_fields,
        hardware: typed_list(st, tenant_id, EntityKind::HardwareType).await?,
        images: typed_list(st, tenant_id, EntityKind::ImageType).await?,
        services: typed_list(st, tenant_id, EntityKind::Service).await?,
    })
}

/// Refuses a cluster whose services (with what they require), hardware or image type the
/// catalog lacks, naming each: a template may be written before its parts.
fn check_complete(
    inputs: &Inputs,
    req: &ClusterCreateRequest,
    services: &[String],
) -> EngineResult<()> {
    let mut missing = missing_services(&inputs.services, services);
    let types = [
        (
            "hardware type",
            req.hardwaretype
                .as_ref()
                .or(inputs.template.defaults.hardwaretype.as_ref()),
            &inputs.hardware,
        ),
        (
            "image type",
            req.imagetype
                .as_ref()
                .or(inputs.template.defaults.imagetype.as_ref()),
            &inputs.images,
        ),
    ];
    for (what, name, known) in types {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            if !known.iter().any(|t| &t.name == n) {
                missing.push(format!("{what} {n} does not exist"));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(EngineError::Incomplete {
        template: inputs.template.name.clone(),
        missing,
    })
}

/// The named services, and the services they require (install and runtime, transitively), that
/// no service of the catalog is or provides.
fn missing_services(catalog: &[Service], wanted: &[String]) -> Vec<String> {
    let known = |n: &str| {
        catalog
            .iter()
            .find(|s| s.name == n || s.dependencies.provides.iter().any(|p| p == n))
    };
    let mut out = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<(String, Option<String>)> =
        wanted.iter().map(|s| (s.clone(), None)).collect();
    while let Some((name, by)) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        match known(&name) {
            None => out.push(match by {
                None => format!("service {name} does not exist"),
                Some(by) => format!("service {name} (required by {by}) does not exist"),
            }),
            Some(s) => {
                let d = &s.dependencies;
                for r in d.install.requires.iter().chain(&d.runtime.requires) {
                    todo.push((r.clone(), Some(s.name.clone())));
                }
            }
        }
    }
    out.sort();
    out
}

/// The named cluster template, resolved through its parents and partials.
async fn template(st: &Engine, tenant_id: &str, name: &str) -> EngineResult<ClusterTemplate> {
    let own = catalog_entry(
        st,
        tenant_id,
        EntityKind::ClusterTemplate,
        "cluster template",
        name,
    )
    .await?;
    resolve_in_tenant(st, tenant_id, own).await
}

/// One catalog entry, typed; [`EngineError::NotInCatalog`] when the tenant has none of that name.
async fn catalog_entry<T: serde::de::DeserializeOwned>(
    st: &Engine,
    tenant_id: &str,
    kind: EntityKind,
    what: &'static str,
    name: &str,
) -> EngineResult<T> {
    let doc = st
        .store
        .get_entity(tenant_id, kind, name, None)
        .await?
        .ok_or_else(|| EngineError::NotInCatalog {
            kind: what,
            name: name.to_string(),
        })?;
    Ok(lenient::from_value(doc)?)
}

/// Refuses a size outside the template's range.
fn check_size(template: &ClusterTemplate, size: u64) -> EngineResult<()> {
    let range = template.constraints.size;
    if size < range.min {
        return Err(EngineError::Invalid(format!(
            "Size must be at least {} for template {}",
            range.min, template.name
        )));
    }
    if size > range.max {
        return Err(EngineError::Invalid(format!(
            "Size must be at most {} for template {}",
            range.max, template.name
        )));
    }
    Ok(())
}

/// The rows of a new cluster before it is laid out: the cluster row (pending, no body yet) and
/// the body it will get.
struct NewCluster {
    row: ClusterRow,
    body: ClusterBody,
    nodes: Vec<NodeRow>,
    size: u64,
}

impl NewCluster {
    fn from_request(
        who: &Caller,
        req: &ClusterCreateRequest,
        inputs: &Inputs,
        cluster_id: u64,
        size: u64,
    ) -> NewCluster {
        let template = &inputs.template;
        let body = ClusterBody {
            description: req.description.clone(),
            provider: inputs.provider.clone(),
            template: template.clone(),
            services: req
                .services
                .clone()
                .unwrap_or_else(|| template.defaults.services.clone()),
            config: req
                .config
                .clone()
                .unwrap_or_else(|| template.defaults.config.clone()),
            dns_suffix: req
                .dns_suffix
                .clone()
                .or_else(|| template.defaults.dns_suffix.clone())
                .unwrap_or_else(|| "local".into()),
            message: None,
            secrets: inputs.secrets.clone(),
            user_fields: Some(inputs.user_fields.clone()),
            retiring: Vec::new(),
            leaving: Vec::new(),
            drift: None,
            rollback_on_failure: req.rollback_on_failure,
            upgrade_from: None,
            delete_requested: false,
            cost_micros_per_hour: None,
            currency: None,
            cost_spans: Vec::new(),
            idle_warned: None,
        };
        let row = ClusterRow {
            tenant_id: who.tenant.id.clone(),
            id: cluster_id,
            owner: who.user.clone(),
            name: req.name.clone(),
            status: ClusterStatus::Pending,
            create_time: inputs.now,
            expire_time: inputs.expire_time,
            latest_job: None,
            rev: 0,
            node_count: 0,
            body: Value::Null,
        };
        NewCluster {
            row,
            body,
            nodes: Vec::new(),
            size,
        }
    }
}

/// Lays the cluster out on the provider's machine types (the request's or the template's choice
/// of hardware and image, if any).
fn solve(
    inputs: &Inputs,
    req: &ClusterCreateRequest,
    services: &[String],
    size: u64,
) -> Result<Layout, weft_solver::SolveError> {
    let template = &inputs.template;
    let provider = &inputs.provider.name;
    let hw_offer = restrict(
        TypeOffer::hardware_for(&inputs.hardware, provider),
        req.hardwaretype
            .as_deref()
            .or(template.defaults.hardwaretype.as_deref()),
    );
    let img_offer = restrict(
        TypeOffer::images_for(&inputs.images, provider),
        req.imagetype
            .as_deref()
            .or(template.defaults.imagetype.as_deref()),
    );
    let cat = Catalog {
        template,
        hardware: &hw_offer,
        images: &img_offer,
        services: Some(&inputs.services),
    };
    weft_solver::create(&cat, services, size)
}

/// As in Coopr, a request that cannot be laid out ends as a terminated cluster whose SOLVE_LAYOUT
/// job failed, with the reason as its message.
async fn record_unsolvable(st: &Engine, new: NewCluster, reason: String) -> EngineResult<Created> {
    let NewCluster {
        mut row, mut body, ..
    } = new;
    let (tenant_id, cluster_id) = (row.tenant_id.clone(), row.id);
    let job_id = job_id(st, cluster_id).await?;
    body.message = Some(reason.clone());
    row.status = ClusterStatus::Terminated;
    row.latest_job = Some(job_id.clone());
    row.body = to_body(&body)?;
    let job = JobRow {
        tenant_id: tenant_id.clone(),
        cluster_id,
        id: job_id.clone(),
        action: "SOLVE_LAYOUT".into(),
        status: JobStatus::Failed,
        create_time: row.create_time,
        rev: 0,
        steps_done: 0,
        steps_total: 0,
        body: to_body(&JobBody {
            message: Some(reason.clone()),
            ..Default::default()
        })?,
    };
    let cs = ChangeSet {
        expect: vec![],
        writes: vec![Write::Cluster(row), Write::Job(job)],
    };
    st.store.commit(&cs).await.map_err(store_err)?;
    tracing::info!(cluster_id, reason = %reason, "cluster could not be laid out");
    notify(st, JobEventKind::Failure, &tenant_id, cluster_id, &job_id);
    crate::metrics::job_ended("SOLVE_LAYOUT", false);
    Ok(Created::Id(cluster_id_text(cluster_id)))
}

/// Makes the layout's nodes and plans their CLUSTER_CREATE job; the body keeps the services that
/// the layout placed.
fn plan_create(
    mut new: NewCluster,
    inputs: &Inputs,
    layout: &Layout,
) -> EngineResult<(NewCluster, Plan)> {
    let types = MachineTypes {
        provider: &inputs.provider.name,
        hardware: &inputs.hardware,
        images: &inputs.images,
        services: &inputs.services,
    };
    let cluster_id = new.row.id;
    let mut plan_nodes = Vec::new();
    for (i, ln) in layout.nodes.iter().enumerate() {
        let nodenum = 1000 + i as u64;
        let name = hostname(&new.row.name, cluster_id, nodenum, &new.body.dns_suffix);
        let node = types.new_node(
            cluster_id,
            nodenum,
            name,
            &ln.hardwaretype,
            &ln.imagetype,
            &ln.services,
        );
        plan_nodes.extend(super::body::plan_nodes(std::slice::from_ref(&node)));
        new.nodes.push(NodeRow {
            tenant_id: new.row.tenant_id.clone(),
            cluster_id,
            id: node.id.clone(),
            nodenum,
            rev: 0,
            body: to_body(&node)?,
        });
    }
    let used: BTreeSet<&str> = layout
        .nodes
        .iter()
        .flat_map(|n| n.services.iter().map(String::as_str))
        .collect();
    new.body.services.retain(|s| used.contains(s.as_str()));
    let by_name: BTreeMap<&str, &Service> = inputs
        .services
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let input = PlanInput {
        before: Vec::new(),
        after: plan_nodes,
        services: used
            .iter()
            .filter_map(|s| by_name.get(s).map(|d| (*d).clone()))
            .collect(),
        config: Value::Object(new.body.config.clone()),
        rollout: None,
        force: false,
    };
    let plan = weft_planner::plan(&Operation::Create, &input)
        .map_err(|e| EngineError::NoPlan(e.to_string()))?;
    Ok((new, plan))
}

/// Stores cluster, nodes, the SOLVE_LAYOUT and CLUSTER_CREATE jobs and the tasks in one commit,
/// under the tenant's quotas, with a pool host for each node of a host-pool provider.
async fn commit_create(
    st: &Engine,
    tenant: &Tenant,
    new: NewCluster,
    provider: &Provider,
    plan: Plan,
) -> EngineResult<Created> {
    let NewCluster {
        mut row,
        body,
        nodes: mut node_rows,
        size,
    } = new;
    let (cluster_id, now) = (row.id, row.create_time);
    let cost_per_hour = body.cost_micros_per_hour.unwrap_or(0);
    // As in Coopr, a create is two jobs: SOLVE_LAYOUT (done here, in the request; its plan has
    // no stages), then CLUSTER_CREATE.
    let solve = solved_job(&tenant.id, cluster_id, job_id(st, cluster_id).await?, now)?;
    let job_id = job_id(st, cluster_id).await?;
    let (job, tasks) = job_rows(&tenant.id, cluster_id, &job_id, &plan, now)?;
    // A 10,000-node plan is some 240,000 tasks: gone before the rows are written.
    drop(plan);
    row.latest_job = Some(job_id.clone());
    row.body = to_body(&body)?;
    // Host pools: a host for each node, taken before anything is recorded (409 if the pool is short).
    let hosts =
        crate::hostpool::take_for_rows(st, &tenant.id, provider, cluster_id, &mut node_rows)
            .await?;
    let mut writes = vec![Write::Cluster(row)];
    writes.extend(node_rows.into_iter().map(Write::Node));
    writes.push(Write::Job(solve));
    writes.push(Write::Job(job));
    writes.extend(tasks.into_iter().map(Write::Task));
    let cs = ChangeSet {
        expect: vec![
            // Checked again in the commit: concurrent creates cannot pass the check above together.
            Expect::Quota(Quota {
                tenant_id: tenant.id.clone(),
                max_clusters: tenant.spec.max_clusters,
                max_nodes: tenant.spec.max_nodes,
                add_clusters: 1,
                add_nodes: size,
                max_cost_micros: cost::budget(tenant)?,
                add_cost_micros: cost_per_hour,
            }),
            Expect::ClusterRev {
                tenant_id: tenant.id.clone(),
                id: cluster_id,
                rev: 0,
            },
        ],
        writes,
    };
    let committed = st.store.commit_owned(cs).await;
    hosts.settle(st, committed.is_ok()).await; // host pools: in use, or back in the pool
    committed.map_err(store_err)?;
    tracing::info!(cluster_id, job_id = %job_id, nodes = size, "cluster create job started");
    notify(st, JobEventKind::Start, &tenant.id, cluster_id, &job_id);
    Ok(Created::Id(cluster_id_text(cluster_id)))
}

/// The expiry time of a new cluster's lease (0 = never), under the template's lease rules.
fn lease_expiry(template: &ClusterTemplate, requested: Option<i64>, now: i64) -> EngineResult<i64> {
    let initial = template.administration.leaseduration.initial as i64;
    let lease = match requested {
        None | Some(-1) => initial,
        Some(r) if r < 0 => {
            return Err(EngineError::Invalid(format!(
                "initialLeaseDuration {r} is not valid"
            )))
        }
        Some(r) if initial == 0 => r,
        Some(0) => {
            return Err(EngineError::Invalid(format!(
            "a lease without end is not allowed by template {}: its initial lease is {initial} ms",
            template.name
        )))
        }
        Some(r) if r > initial => {
            return Err(EngineError::Invalid(format!(
                "initialLeaseDuration {r} is more than template {}'s initial lease of {initial} ms",
                template.name
            )))
        }
        Some(r) => r,
    };
    Ok(if lease == 0 { 0 } else { now + lease })
}

/// 400 with `{"missingFields": [...]}` unless one required set of the provider type's user fields
/// is
/// covered by the provider's fields plus the request's.
fn check_required_fields(
    ptype: &PluginType,
    provider: &Provider,
    given: &Map<String, Value>,
) -> EngineResult<()> {
    let Some(spec) = ptype.parameters.get(&ParameterType::User) else {
        return Ok(());
    };
    if spec.required.is_empty() {
        return Ok(());
    }
    let have = |f: &String| provider.provisioner.contains_key(f) || given.contains_key(f);
    if spec.required.iter().any(|set| set.iter().all(have)) {
        return Ok(());
    }
    let missing: Vec<Value> = spec
        .required
        .iter()
        .map(|set| {
            let mut m = Map::new();
            for f in set.iter().filter(|f| !have(f)) {
                if let Some(schema) = spec.fields.get(f) {
                    let mut s = serde_json::to_value(schema).unwrap_or(Value::Null);
                    if let Some(o) = s.as_object_mut() {
                        if let Some(d) = o.remove("default") {
                            o.insert("defaultValue".into(), d);
                        }
                    }
                    m.insert(f.clone(), s);
                }
            }
            Value::Object(m)
        })
        .collect();
    Err(EngineError::MissingFields(Value::Array(missing)))
}

/// Merges the request's allowed provider fields into the cluster's provider copy and moves every
/// sensitive field out of it. Returns the sensitive fields the user gave (the admin's are read
/// from the catalog when a task needs them, never kept per cluster) and the names of the fields
/// the user gave.
fn split_provider_fields(
    ptype: &PluginType,
    provider: &mut Provider,
    given: &Map<String, Value>,
) -> (Map<String, Value>, Vec<String>) {
    let user = ptype.parameters.get(&ParameterType::User);
    let admin = ptype.parameters.get(&ParameterType::Admin);
    let mut user_fields = Vec::new();
    for (k, v) in given {
        let allowed = user.is_some_and(|u| u.fields.contains_key(k))
            || admin
                .and_then(|a| a.fields.get(k))
                .is_some_and(|f| f.r#override);
        if allowed {
            provider.provisioner.insert(k.clone(), v.clone());
            user_fields.push(k.clone());
        }
    }
    let sensitive = ptype.sensitive_fields();
    let mut secrets = Map::new();
    for f in sensitive {
        if let Some(v) = provider.provisioner.remove(f) {
            if user_fields.iter().any(|u| u == f) {
                secrets.insert(f.to_string(), v);
            }
        }
    }
    (secrets, user_fields)
}

/// Only `want` (if given) from an offer; an unoffered `want` leaves nothing, and the solver says
/// why.
fn restrict(offer: TypeOffer, want: Option<&str>) -> TypeOffer {
    match want {
        None => offer,
        Some(w) => {
            let known: Vec<String> = offer.offered().to_vec();
            let keep: Vec<&str> = offer
                .offered()
                .iter()
                .filter(|o| *o == w)
                .map(String::as_str)
                .collect();
            TypeOffer::new(keep).with_known(known)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_read_name_id_and_node_number() {
        assert_eq!(
            hostname("123i.am-a_clusTer", 1, 1002, "local"),
            "i-am-a-cluster-1-1002.local"
        );
        assert_eq!(
            hostname("x", 79, 1000, ".dev.example.com"),
            "x-79-1000.dev.example.com"
        );
        assert_eq!(hostname("42", 3, 1000, "local"), "3-1000.local");
        assert_eq!(hostname("web-", 3, 1000, "local"), "web-3-1000.local");
        let long = hostname(&"a".repeat(80), 12, 1000, "local");
        assert_eq!(long.split('.').next().unwrap().len(), 63);
    }
}
