//! New clusters and new jobs: validate a create request (quotas, template, size, lease, provider
//! fields), solve the layout, plan the job, and store cluster, nodes, job and tasks in one commit.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};
use weft_model::{
    lenient, ClusterCreateRequest, ClusterStatus, ClusterTemplate, EntityKind, JobStatus,
    MachineType, Node, NodeProperties, ParameterType, PluginType, Provider, Service,
    MAX_CLUSTER_SIZE,
};
use weft_planner::{Operation, Plan, PlanInput, Vertex};
use weft_solver::{Catalog, TypeOffer};
use weft_store::{
    ChangeSet, ClusterRow, Expect, JobRow, NodeRow, Quota, TaskRow, TaskState, Write, SUPERADMIN,
};

use super::body::{to_body, ClusterBody, JobBody, TaskBody};
use super::{cluster_id_text, notify, store_err, JobEventKind, GATE};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::routes::catalog::resolve_in_tenant;
use crate::state::{now_ms, AppState};

/// What a create request made: a cluster (its id), or for a dry run the plan it would run.
#[derive(Debug)]
pub enum Created {
    Id(String),
    Plan(weft_model::PlanView),
}

/// Creates a cluster and its CLUSTER_CREATE job. Returns the cluster id. A request that cannot be
/// laid out still makes a cluster: it is `terminated`, with the solver's explanation as its message
/// (Coopr solved asynchronously; clients poll the status).
#[tracing::instrument(skip_all, fields(tenant = %who.tenant.spec.name, cluster = %req.name))]
pub async fn create_cluster(
    st: &AppState,
    who: &Identity,
    req: ClusterCreateRequest,
    dry_run: bool,
) -> ApiResult<Created> {
    let tenant = &who.tenant;
    if req.name.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "cluster name must be specified".into(),
        ));
    }
    weft_model::validate_name("name", &req.name)?;
    if req.cluster_template.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "cluster template must be specified".into(),
        ));
    }
    let size = match req.num_machines {
        Some(n) if n > 0 => n as u64,
        None => return Err(ApiError::BadRequest("numMachines must be specified".into())),
        _ => {
            return Err(ApiError::BadRequest(
                "cluster size must be greater than 0".into(),
            ))
        }
    };
    if size > MAX_CLUSTER_SIZE {
        return Err(ApiError::BadRequest(format!(
            "cluster size {size} is above the server's limit of {MAX_CLUSTER_SIZE}"
        )));
    }
    if let Some(s) = &req.dns_suffix {
        weft_model::validate::validate_dns_suffix("dnsSuffix", s)?;
    }
    let (clusters, nodes) = st.store.count_clusters(&tenant.id).await?;
    if clusters + 1 > tenant.spec.max_clusters {
        return Err(ApiError::Conflict(format!(
            "tenant {} would exceed its quota maxClusters ({}): it has {clusters} clusters",
            tenant.spec.name, tenant.spec.max_clusters
        )));
    }
    if nodes + size > tenant.spec.max_nodes {
        return Err(ApiError::Conflict(format!(
            "tenant {} would exceed its quota maxNodes ({}): it has {nodes} nodes and asks for {size} more",
            tenant.spec.name, tenant.spec.max_nodes
        )));
    }
    let tdoc = st
        .store
        .get_entity(
            &tenant.id,
            EntityKind::ClusterTemplate,
            &req.cluster_template,
            None,
        )
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "cluster template {} does not exist.",
                req.cluster_template
            ))
        })?;
    let template = resolve_in_tenant(
        st,
        &tenant.id,
        lenient::from_value::<ClusterTemplate>(tdoc)?,
    )
    .await?;
    let range = template.constraints.size;
    if size < range.min {
        return Err(ApiError::BadRequest(format!(
            "Size must be at least {} for template {}",
            range.min, template.name
        )));
    }
    if size > range.max {
        return Err(ApiError::BadRequest(format!(
            "Size must be at most {} for template {}",
            range.max, template.name
        )));
    }
    let now = now_ms();
    let expire_time = lease_expiry(&template, req.initial_lease_duration, now)?;

    let provider_name = req
        .provider
        .clone()
        .or_else(|| template.defaults.provider.clone())
        .unwrap_or_default();
    let pdoc = st
        .store
        .get_entity(&tenant.id, EntityKind::Provider, &provider_name, None)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("provider {provider_name} does not exist.")))?;
    let mut provider: Provider = lenient::from_value(pdoc)?;
    let ptdoc = st
        .store
        .get_entity(
            SUPERADMIN,
            EntityKind::ProviderType,
            &provider.providertype,
            None,
        )
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "provider type {} does not exist.",
                provider.providertype
            ))
        })?;
    let ptype: PluginType = lenient::from_value(ptdoc)?;
    check_required_fields(&ptype, &provider, &req.provider_fields)?;
    let secrets = split_provider_fields(&ptype, &mut provider, &req.provider_fields);

    let services = req
        .services
        .clone()
        .unwrap_or_else(|| template.defaults.services.clone());
    let config = req
        .config
        .clone()
        .unwrap_or_else(|| template.defaults.config.clone());
    let dns_suffix = req
        .dns_suffix
        .clone()
        .or_else(|| template.defaults.dns_suffix.clone())
        .unwrap_or_else(|| "local".into());
    let hardware: Vec<MachineType> = typed_list(st, &tenant.id, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed_list(st, &tenant.id, EntityKind::ImageType).await?;
    let catalog_services: Vec<Service> = typed_list(st, &tenant.id, EntityKind::Service).await?;

    // A dry run takes no id: it must change nothing, not even a counter.
    let cluster_id = if dry_run {
        0
    } else {
        st.store.next_id("clusters").await?
    };
    let mut body = ClusterBody {
        description: req.description.clone(),
        provider: provider.clone(),
        template: template.clone(),
        services: services.clone(),
        config,
        dns_suffix,
        message: None,
        secrets,
        retiring: Vec::new(),
        leaving: Vec::new(),
        rollback_on_failure: req.rollback_on_failure,
        upgrade_from: None,
        delete_requested: false,
    };
    let mut cluster = ClusterRow {
        tenant_id: tenant.id.clone(),
        id: cluster_id,
        owner: who.user.clone(),
        name: req.name.clone(),
        status: ClusterStatus::Pending.as_str().into(),
        create_time: now,
        expire_time,
        latest_job: None,
        rev: 0,
        body: Value::Null,
    };

    let hw_offer = restrict(
        TypeOffer::hardware_for(&hardware, &provider.name),
        req.hardwaretype
            .as_deref()
            .or(template.defaults.hardwaretype.as_deref()),
    );
    let img_offer = restrict(
        TypeOffer::images_for(&images, &provider.name),
        req.imagetype
            .as_deref()
            .or(template.defaults.imagetype.as_deref()),
    );
    let cat = Catalog {
        template: &template,
        hardware: &hw_offer,
        images: &img_offer,
        services: Some(&catalog_services),
    };
    let layout = match weft_solver::create(&cat, &services, size) {
        Ok(l) => l,
        Err(e) if dry_run => return Err(ApiError::BadRequest(e.to_string())),
        Err(e) => {
            // As in Coopr, a request that cannot be laid out ends as a terminated cluster whose
            // SOLVE_LAYOUT job failed, with the reason as its message.
            let job_id = job_id(st, cluster_id).await?;
            let solve_job = job_id.clone();
            body.message = Some(e.to_string());
            cluster.status = ClusterStatus::Terminated.as_str().into();
            cluster.latest_job = Some(job_id.clone());
            cluster.body = to_body(&body)?;
            let job = JobRow {
                tenant_id: tenant.id.clone(),
                cluster_id,
                id: job_id,
                action: "SOLVE_LAYOUT".into(),
                status: JobStatus::Failed.as_str().into(),
                create_time: now,
                rev: 0,
                body: to_body(&JobBody {
                    message: Some(e.to_string()),
                    ..Default::default()
                })?,
            };
            let cs = ChangeSet {
                expect: vec![],
                writes: vec![Write::Cluster(cluster), Write::Job(job)],
            };
            st.store.commit(&cs).await.map_err(store_err)?;
            tracing::info!(cluster_id, reason = %e, "cluster could not be laid out");
            notify(
                st,
                JobEventKind::Failure,
                &tenant.id,
                cluster_id,
                &solve_job,
            );
            crate::metrics::job_ended("SOLVE_LAYOUT", false);
            return Ok(Created::Id(cluster_id_text(cluster_id)));
        }
    };

    let by_name: BTreeMap<&str, &Service> = catalog_services
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let types = MachineTypes {
        provider: &provider.name,
        hardware: &hardware,
        images: &images,
        services: &catalog_services,
    };
    let mut node_rows = Vec::new();
    let mut plan_nodes = Vec::new();
    for (i, ln) in layout.nodes.iter().enumerate() {
        let nodenum = 1000 + i as u64;
        let name = hostname(&req.name, cluster_id, nodenum, &body.dns_suffix);
        let node = types.new_node(
            cluster_id,
            nodenum,
            name,
            &ln.hardwaretype,
            &ln.imagetype,
            &ln.services,
        );
        plan_nodes.extend(super::work::plan_nodes(std::slice::from_ref(&node)));
        node_rows.push(NodeRow {
            tenant_id: tenant.id.clone(),
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
    body.services = services
        .iter()
        .filter(|s| used.contains(s.as_str()))
        .cloned()
        .collect();
    let input = PlanInput {
        before: Vec::new(),
        after: plan_nodes,
        services: used
            .iter()
            .filter_map(|s| by_name.get(s).map(|d| (*d).clone()))
            .collect(),
        config: Value::Object(body.config.clone()),
    };
    let plan = weft_planner::plan(&Operation::Create, &input)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if dry_run {
        return Ok(Created::Plan(super::ops::preview(&plan, String::new())?));
    }
    // As in Coopr, a create is two jobs: SOLVE_LAYOUT (done here, in the request; its plan has
    // no stages), then CLUSTER_CREATE.
    let solve = solved_job(&tenant.id, cluster_id, job_id(st, cluster_id).await?, now)?;
    let job_id = job_id(st, cluster_id).await?;
    let (job, tasks) = job_rows(&tenant.id, cluster_id, &job_id, &plan, now)?;
    cluster.latest_job = Some(job_id.clone());
    cluster.body = to_body(&body)?;
    // Host pools: a host for each node, taken before anything is recorded (409 if the pool is short).
    let hosts =
        crate::hostpool::take_for_rows(st, &tenant.id, &provider, cluster_id, &mut node_rows)
            .await?;
    let mut writes = vec![Write::Cluster(cluster)];
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
            }),
            Expect::ClusterRev {
                tenant_id: tenant.id.clone(),
                id: cluster_id,
                rev: 0,
            },
        ],
        writes,
    };
    let committed = st.store.commit(&cs).await;
    hosts.settle(st, committed.is_ok()).await; // host pools: in use, or back in the pool
    committed.map_err(store_err)?;
    tracing::info!(cluster_id, job_id = %job_id, nodes = size, "cluster create job started");
    notify(st, JobEventKind::Start, &tenant.id, cluster_id, &job_id);
    Ok(Created::Id(cluster_id_text(cluster_id)))
}

/// What a new node is made from: the provider's hardware and image types and the service catalog.
pub struct MachineTypes<'a> {
    pub provider: &'a str,
    pub hardware: &'a [MachineType],
    pub images: &'a [MachineType],
    pub services: &'a [Service],
}

impl MachineTypes<'_> {
    /// A node with a fresh id: its services' definitions, flavor, image and ssh user from the
    /// provider maps, and the automators its services use.
    pub fn new_node(
        &self,
        cluster_id: u64,
        nodenum: u64,
        hostname: String,
        hardwaretype: &str,
        imagetype: &str,
        services: &[String],
    ) -> Node {
        let defs: Vec<Service> = services
            .iter()
            .filter_map(|s| self.services.iter().find(|d| &d.name == s).cloned())
            .collect();
        let automators: BTreeSet<String> = defs
            .iter()
            .flat_map(|s| s.provisioner.actions.values().map(|a| a.automator.clone()))
            .collect();
        let pm = |types: &[MachineType], name: &str, key: &str| {
            types
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.providermap.get(self.provider))
                .and_then(|m| m.get(key))
                .cloned()
        };
        Node {
            id: uuid::Uuid::new_v4().to_string(),
            cluster_id: cluster_id_text(cluster_id),
            services: defs,
            properties: NodeProperties {
                ipaddresses: BTreeMap::new(),
                hostname: Some(hostname),
                nodenum,
                hardwaretype: hardwaretype.into(),
                imagetype: imagetype.into(),
                flavor: pm(self.hardware, hardwaretype, "flavor"),
                image: pm(self.images, imagetype, "image"),
                sshuser: pm(self.images, imagetype, "sshuser").unwrap_or_else(|| "root".into()),
                services: services.to_vec(),
                automators: automators.into_iter().collect(),
            },
            actions: Vec::new(),
            provisioner_results: Map::new(),
            links: Vec::new(),
        }
    }
}

/// The completed SOLVE_LAYOUT job of a create whose layout was found.
fn solved_job(tenant_id: &str, cluster_id: u64, id: String, now: i64) -> ApiResult<JobRow> {
    Ok(JobRow {
        tenant_id: tenant_id.to_string(),
        cluster_id,
        id,
        action: "SOLVE_LAYOUT".into(),
        status: JobStatus::Complete.as_str().into(),
        create_time: now,
        rev: 0,
        body: to_body(&JobBody::default())?,
    })
}

/// A new job id for a cluster: `<clusterId>-<NNN>` from the global job counter.
pub async fn job_id(st: &AppState, cluster_id: u64) -> ApiResult<String> {
    let n = st.store.next_id("jobs").await?;
    Ok(format!("{}-{n:03}", cluster_id_text(cluster_id)))
}

/// The job and task rows of a plan. Tasks whose predecessors are all done are queued; gates with no
/// pending predecessor are complete at once; one last gate (`<job>-end`) follows every sink.
pub fn job_rows(
    tenant_id: &str,
    cluster_id: u64,
    job_id: &str,
    plan: &Plan,
    now: i64,
) -> ApiResult<(JobRow, Vec<TaskRow>)> {
    let n_tasks = plan.tasks.len();
    let gate_id = |g: usize| format!("{job_id}-g{g}");
    let task_id = |i: usize| format!("{job_id}-{:03}", i + 1);
    let end = super::work::end_gate(job_id);
    let index = |v: &Vertex| match v {
        Vertex::Task(i) => *i,
        Vertex::Gate(g) => n_tasks + *g,
    };
    let total = n_tasks + plan.gates;
    let ids: Vec<String> = (0..total)
        .map(|v| {
            if v < n_tasks {
                task_id(v)
            } else {
                gate_id(v - n_tasks)
            }
        })
        .collect();
    let mut succ: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); total];
    for e in &plan.edges {
        succ[index(&e.from)].insert(index(&e.to));
    }
    let mut deps = vec![0u32; total];
    for s in &succ {
        for &t in s {
            deps[t] += 1;
        }
    }
    let sinks: Vec<usize> = (0..total).filter(|&v| succ[v].is_empty()).collect();
    let mut end_deps = sinks.len() as u32;
    // Settle gates that are done from the start, in dependency order.
    let mut state: Vec<TaskState> = vec![TaskState::Pending; total];
    let mut stack: Vec<usize> = (n_tasks..total).filter(|&g| deps[g] == 0).collect();
    while let Some(g) = stack.pop() {
        state[g] = TaskState::Complete;
        if succ[g].is_empty() {
            end_deps -= 1;
        }
        for &t in &succ[g] {
            deps[t] -= 1;
            if deps[t] == 0 && t >= n_tasks {
                stack.push(t);
            }
        }
    }
    for (i, s) in state.iter_mut().enumerate().take(n_tasks) {
        if deps[i] == 0 {
            *s = TaskState::Queued;
        }
    }
    let mut rows = Vec::with_capacity(total + 1);
    for v in 0..total {
        let (node_id, action, service, automators) = if v < n_tasks {
            let t = &plan.tasks[v];
            (
                t.node_id.clone(),
                t.action.upper().to_string(),
                t.service.clone().unwrap_or_default(),
                t.automators.clone(),
            )
        } else {
            (String::new(), GATE.to_string(), String::new(), Vec::new())
        };
        let mut successors: Vec<String> = succ[v].iter().map(|&t| ids[t].clone()).collect();
        if succ[v].is_empty() {
            successors.push(end.clone());
        }
        rows.push(TaskRow {
            tenant_id: tenant_id.into(),
            cluster_id,
            job_id: job_id.into(),
            id: ids[v].clone(),
            node_id,
            action,
            service,
            state: state[v],
            attempts: 0,
            deps_remaining: deps[v],
            successors,
            lease_owner: None,
            lease_deadline: 0,
            queued_at: if state[v] == TaskState::Queued {
                now
            } else {
                0
            },
            started_at: 0,
            rev: 0,
            body: to_body(&TaskBody {
                automators,
                ..Default::default()
            })?,
        });
    }
    rows.push(TaskRow {
        tenant_id: tenant_id.into(),
        cluster_id,
        job_id: job_id.into(),
        id: end,
        node_id: String::new(),
        action: GATE.into(),
        service: String::new(),
        state: if end_deps == 0 {
            TaskState::Complete
        } else {
            TaskState::Pending
        },
        attempts: 0,
        deps_remaining: end_deps,
        successors: Vec::new(),
        lease_owner: None,
        lease_deadline: 0,
        queued_at: 0,
        started_at: 0,
        rev: 0,
        body: json!({}),
    });
    let stages: Vec<Vec<String>> = plan
        .stages()
        .into_iter()
        .map(|s| s.into_iter().map(task_id).collect())
        .collect();
    let job = JobRow {
        tenant_id: tenant_id.into(),
        cluster_id,
        id: job_id.into(),
        action: plan.action.clone(),
        status: if end_deps == 0 {
            JobStatus::Complete
        } else {
            JobStatus::Running
        }
        .as_str()
        .into(),
        create_time: now,
        rev: 0,
        body: to_body(&JobBody {
            stages,
            total: n_tasks as u64,
            message: None,
        })?,
    };
    Ok((job, rows))
}

/// The expiry time of a new cluster's lease (0 = never), under the template's lease rules.
fn lease_expiry(template: &ClusterTemplate, requested: Option<i64>, now: i64) -> ApiResult<i64> {
    let initial = template.administration.leaseduration.initial as i64;
    let lease = match requested {
        None | Some(-1) => initial,
        Some(r) if r < 0 => {
            return Err(ApiError::BadRequest(format!(
                "initialLeaseDuration {r} is not valid"
            )))
        }
        Some(r) if initial == 0 => r,
        Some(0) => {
            return Err(ApiError::BadRequest(format!(
            "a lease without end is not allowed by template {}: its initial lease is {initial} ms",
            template.name
        )))
        }
        Some(r) if r > initial => {
            return Err(ApiError::BadRequest(format!(
                "initialLeaseDuration {r} is more than template {}'s initial lease of {initial} ms",
                template.name
            )))
        }
        Some(r) => r,
    };
    Ok(if lease == 0 { 0 } else { now + lease })
}

/// 400 with `{"missingFields": [...]}` unless one required set of the provider type's user fields is
/// covered by the provider's fields plus the request's.
fn check_required_fields(
    ptype: &PluginType,
    provider: &Provider,
    given: &Map<String, Value>,
) -> ApiResult<()> {
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
    Err(ApiError::MissingFields(Value::Array(missing)))
}

/// Merges the request's allowed provider fields into the cluster's provider copy and moves every
/// sensitive field (admin or user) out of it. Returns the sensitive fields.
fn split_provider_fields(
    ptype: &PluginType,
    provider: &mut Provider,
    given: &Map<String, Value>,
) -> Map<String, Value> {
    let user = ptype.parameters.get(&ParameterType::User);
    let admin = ptype.parameters.get(&ParameterType::Admin);
    for (k, v) in given {
        let allowed = user.is_some_and(|u| u.fields.contains_key(k))
            || admin
                .and_then(|a| a.fields.get(k))
                .is_some_and(|f| f.r#override);
        if allowed {
            provider.provisioner.insert(k.clone(), v.clone());
        }
    }
    let sensitive = ptype.sensitive_fields();
    let mut secrets = Map::new();
    for f in sensitive {
        if let Some(v) = provider.provisioner.remove(f) {
            secrets.insert(f.to_string(), v);
        }
    }
    secrets
}

/// Only `want` (if given) from an offer; an unoffered `want` leaves nothing, and the solver says why.
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

/// Every entity of a kind in the tenant, typed; entities that no longer parse are skipped.
pub async fn typed_list<T: serde::de::DeserializeOwned>(
    st: &AppState,
    tenant_id: &str,
    kind: EntityKind,
) -> ApiResult<Vec<T>> {
    Ok(st
        .store
        .list_entities(tenant_id, kind)
        .await?
        .into_iter()
        .filter_map(|v| lenient::from_value(v).ok())
        .collect())
}

/// A node's hostname: `<cluster name>-<cluster id>-<nodenum>` (the name lower case, leading
/// digits dropped, `_` and `.` as `-`; Coopr glued the id to the name, which read as a typo), cut
/// to a 63-character label, then `.` and the DNS suffix.
pub fn hostname(name: &str, cluster_id: u64, nodenum: u64, suffix: &str) -> String {
    let base: String = name
        .to_ascii_lowercase()
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .chars()
        .map(|c| if c == '_' || c == '.' { '-' } else { c })
        .collect();
    let tail = format!("{cluster_id}-{nodenum}");
    let room = 63usize.saturating_sub(tail.len() + 1);
    let base: String = base.chars().take(room).collect();
    let base = base.trim_matches('-');
    let suffix = suffix.strip_prefix('.').unwrap_or(suffix);
    if base.is_empty() {
        format!("{tail}.{suffix}")
    } else {
        format!("{base}-{tail}.{suffix}")
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
