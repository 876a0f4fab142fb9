//! Operations on an existing cluster: each builds the layout after the change (with the solver when
//! the layout changes), plans the job, and starts it with [`start_job`], or only shows its plan when
//! asked for a dry run.

use std::collections::BTreeMap;

use weft_model::{EntityKind, MachineType, Node, PlanView, Service};
use weft_planner::Operation;
use weft_solver::{Catalog, Change, ExistingNode, Layout, TypeOffer};

use crate::body::ClusterBody;
use crate::catalog::typed_list;
use crate::error::{EngineError, EngineResult};
use crate::jobs::{hostname, start_job, Loaded, MachineTypes};
use crate::Engine;

/// Solves a change of the cluster's layout against its template and the tenant's current catalog.
pub async fn solve_change(
    st: &Engine,
    c: &Loaded,
    change: &Change,
) -> EngineResult<(Layout, Vec<Service>, Vec<MachineType>, Vec<MachineType>)> {
    let tenant = &c.row.tenant_id;
    let hardware: Vec<MachineType> = typed_list(st, tenant, EntityKind::HardwareType).await?;
    let images: Vec<MachineType> = typed_list(st, tenant, EntityKind::ImageType).await?;
    let services: Vec<Service> = typed_list(st, tenant, EntityKind::Service).await?;
    let hw = TypeOffer::hardware_for(&hardware, &c.body.provider.name);
    let img = TypeOffer::images_for(&images, &c.body.provider.name);
    let catalog = Catalog {
        template: &c.body.template,
        hardware: &hw,
        images: &img,
        services: Some(&services),
    };
    let existing: Vec<ExistingNode> = c
        .nodes
        .iter()
        .map(|n| ExistingNode {
            id: n.id.clone(),
            hardwaretype: n.properties.hardwaretype.clone(),
            imagetype: n.properties.imagetype.clone(),
            services: n.properties.services.iter().cloned().collect(),
        })
        .collect();
    let layout = weft_solver::change(&catalog, &existing, change)
        .map_err(|e| EngineError::NoLayout(e.to_string()))?;
    Ok((layout, services, hardware, images))
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
    op: Operation,
    body: ClusterBody,
    dry_run: bool,
) -> EngineResult<Option<PlanView>> {
    let s = start_job(st, c, op, &[], c.nodes.clone(), body, vec![], dry_run).await?;
    Ok(dry_run.then_some(s.plan))
}

/// Solves `change`, then starts (or plans) `op` from the current layout to the solved one; nodes
/// the solver takes away leave when the job succeeds. Returns the plan only for a dry run.
pub async fn relayout(
    st: &Engine,
    c: &Loaded,
    change: &Change,
    op: Operation,
    body: ClusterBody,
    dry_run: bool,
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
        dry_run,
    )
    .await?;
    Ok(dry_run.then_some(s.plan))
}
