//! What clusters cost: the prices of the tenant's catalog (see `weft_model::cost`) applied to a
//! cluster's nodes, for the estimates that plans carry and the budgets that creates and expands
//! are checked against.
//!
//! A node costs its hardware type's `price` plus its image type's (a licence), for the cluster's
//! provider, times the provider's `priceMultiplier`; a provider without `currency` gives no
//! estimate at all, and a node whose hardware type has no price is listed as unpriced (the
//! estimate leaves it out and says so). A cluster's cost per hour is kept in its body
//! (`costMicrosPerHour`), which the store sums inside the commit that checks a budget.

use std::collections::BTreeMap;

use weft_model::cost::{format_micros, parse_micros, scale, CostEstimate, MICROS, PRICE_KEY};
use weft_model::{ClusterTemplate, EntityKind, MachineType, Provider};

use crate::body::CostSpan;
use crate::catalog::typed_list;
use crate::error::{EngineError, EngineResult};
use crate::Engine;

/// A provider's prices: per hardware type and per image type, in micro-units per hour.
#[derive(Debug, Clone, Default)]
pub struct PriceList {
    /// The provider's currency; `None`: it gives no estimates.
    pub currency: Option<String>,
    multiplier: u64,
    hardware: BTreeMap<String, u64>,
    images: BTreeMap<String, u64>,
}

/// A cluster's cost per hour: the priced nodes' sum, and the kinds of the nodes left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterCost {
    /// Micro-units per hour.
    pub micros: u64,
    /// `hardware/image` of each node without a price (each kind once).
    pub unpriced: Vec<String>,
}

impl PriceList {
    /// The prices `provider` has in `hardware` and `images` (entries that do not parse are
    /// refused when they are written, and read here as unpriced).
    pub fn new(provider: &Provider, hardware: &[MachineType], images: &[MachineType]) -> Self {
        let of = |types: &[MachineType]| -> BTreeMap<String, u64> {
            types
                .iter()
                .filter_map(|t| {
                    let text = t.providermap.get(&provider.name)?.get(PRICE_KEY)?;
                    Some((t.name.clone(), parse_micros(PRICE_KEY, text).ok()?))
                })
                .collect()
        };
        PriceList {
            currency: provider.currency.clone(),
            multiplier: provider
                .price_multiplier
                .as_deref()
                .and_then(|m| parse_micros("priceMultiplier", m).ok())
                .unwrap_or(MICROS),
            hardware: of(hardware),
            images: of(images),
        }
    }

    /// The price list of cluster's provider `provider` from the tenant's catalog as it is now
    /// (the tenant's current entry of that provider when there is one).
    pub async fn read(st: &Engine, tenant_id: &str, provider: &Provider) -> EngineResult<Self> {
        let providers: Vec<Provider> = typed_list(st, tenant_id, EntityKind::Provider).await?;
        let current = providers
            .iter()
            .find(|p| p.name == provider.name)
            .unwrap_or(provider);
        let hardware: Vec<MachineType> =
            typed_list(st, tenant_id, EntityKind::HardwareType).await?;
        let images: Vec<MachineType> = typed_list(st, tenant_id, EntityKind::ImageType).await?;
        Ok(PriceList::new(current, &hardware, &images))
    }

    /// What one node of hardware type `hw` and image type `img` costs per hour; `None` when
    /// the hardware type has no price (or the provider no currency).
    pub fn node(&self, hw: &str, img: &str) -> Option<u64> {
        self.currency.as_ref()?;
        let raw = self.hardware.get(hw)? + self.images.get(img).copied().unwrap_or(0);
        Some(scale(raw, self.multiplier))
    }

    /// The cost spans of `nodes` joining a cluster at `now` (the priced ones).
    pub fn spans(&self, nodes: &[weft_model::Node], now: i64) -> Vec<CostSpan> {
        nodes
            .iter()
            .filter_map(|n| {
                let p = &n.properties;
                Some(CostSpan {
                    node: n.id.clone(),
                    micros_per_hour: self.node(&p.hardwaretype, &p.imagetype)?,
                    start: now,
                    end: None,
                })
            })
            .collect()
    }

    /// What nodes of these `(hardware type, image type)` cost per hour together.
    pub fn cost<'a>(&self, nodes: impl IntoIterator<Item = (&'a str, &'a str)>) -> ClusterCost {
        let mut out = ClusterCost::default();
        for (hw, img) in nodes {
            match self.hardware.get(hw) {
                Some(p) => {
                    let raw = p + self.images.get(img).copied().unwrap_or(0);
                    out.micros += scale(raw, self.multiplier);
                }
                None => {
                    let kind = format!("{hw}/{img}");
                    if !out.unpriced.contains(&kind) {
                        out.unpriced.push(kind);
                    }
                }
            }
        }
        out
    }

    /// The estimate of a change from `before` to `after` (`None` without a currency), with the
    /// cost over `lease_left_ms` when the cluster has a lease.
    pub fn estimate(
        &self,
        before: &ClusterCost,
        after: &ClusterCost,
        lease_left_ms: Option<u64>,
    ) -> Option<CostEstimate> {
        let currency = self.currency.as_deref()?;
        let mut unpriced = after.unpriced.clone();
        unpriced.extend(
            before
                .unpriced
                .iter()
                .filter(|k| !after.unpriced.contains(k))
                .cloned(),
        );
        Some(CostEstimate::new(
            currency,
            before.micros,
            after.micros,
            lease_left_ms,
            unpriced,
        ))
    }
}

/// The `(hardware type, image type)` of each node.
pub fn kinds(nodes: &[weft_model::Node]) -> impl Iterator<Item = (&str, &str)> {
    nodes.iter().map(|n| {
        (
            n.properties.hardwaretype.as_str(),
            n.properties.imagetype.as_str(),
        )
    })
}

/// Refuses a cluster of template `t` that would cost more per hour than the template's
/// `maxCostPerHour` (a 409 naming both figures).
pub fn check_template_cap(
    t: &ClusterTemplate,
    currency: Option<&str>,
    cost: &ClusterCost,
) -> EngineResult<()> {
    let Some(cap) = t.administration.max_cost_per_hour.as_deref() else {
        return Ok(());
    };
    let cap = parse_micros("administration.maxCostPerHour", cap)?;
    if cost.micros > cap {
        return Err(EngineError::OverBudget(format!(
            "template {} caps its clusters at {} {} per hour; this cluster would cost {}",
            t.name,
            format_micros(cap),
            currency.unwrap_or(""),
            format_micros(cost.micros)
        )));
    }
    Ok(())
}

/// The tenant's budget in micro-units per hour, if it has one.
pub fn budget(tenant: &weft_store::Tenant) -> EngineResult<Option<u64>> {
    tenant
        .spec
        .max_cost_per_hour
        .as_deref()
        .map(|t| parse_micros("maxCostPerHour", t).map_err(EngineError::from))
        .transpose()
}

/// What a job's change does to its cluster's cost.
#[derive(Debug, Default)]
pub struct JobCost {
    /// The estimate a dry run answers (`None` without a currency).
    pub estimate: Option<CostEstimate>,
    /// The cost per hour the cluster's body records for the cluster as the job leaves it.
    pub per_hour: Option<u64>,
    /// For a change that adds nodes or cost: the quota (and budget) its commit checks.
    pub quota: Option<weft_store::Expect>,
    /// The cost spans of the nodes the change adds, opened at `Change::now`.
    pub opened: Vec<CostSpan>,
    /// The provider's currency.
    pub currency: Option<String>,
}

/// The cluster as it is, the cluster as a change leaves it.
pub struct Change<'a> {
    /// The tenant (its id).
    pub tenant_id: &'a str,
    /// The cluster's provider (its copy; the tenant's current entry is read).
    pub provider: &'a Provider,
    /// The cluster's template (for its cap).
    pub template: &'a ClusterTemplate,
    /// The nodes now.
    pub old: &'a [weft_model::Node],
    /// The nodes after the change.
    pub new: &'a [weft_model::Node],
    /// What is left of the cluster's lease, when it has one.
    pub lease_left_ms: Option<u64>,
    /// The time the change starts.
    pub now: i64,
}

/// Prices `change`; refuses it (a 409) when it adds cost past the template's cap. A change that
/// adds nodes or cost gets the quota expectation that checks the tenant's `maxNodes` and budget
/// in its commit.
pub async fn of_change(st: &Engine, change: Change<'_>) -> EngineResult<JobCost> {
    let prices = PriceList::read(st, change.tenant_id, change.provider).await?;
    let before = prices.cost(kinds(change.old));
    let after = prices.cost(kinds(change.new));
    if after.micros > before.micros {
        check_template_cap(change.template, prices.currency.as_deref(), &after)?;
    }
    let priced = prices.currency.is_some();
    let add_cost = if priced {
        after.micros.saturating_sub(before.micros)
    } else {
        0
    };
    let add_nodes = change.new.len().saturating_sub(change.old.len()) as u64;
    let quota = if add_cost > 0 || add_nodes > 0 {
        let tenant = st
            .store
            .tenant_by_id(change.tenant_id)
            .await?
            .ok_or_else(|| EngineError::TenantMissing(change.tenant_id.to_string()))?;
        Some(weft_store::Expect::Quota(weft_store::Quota {
            tenant_id: tenant.id.clone(),
            max_clusters: tenant.spec.max_clusters,
            max_nodes: tenant.spec.max_nodes,
            add_clusters: 0,
            add_nodes,
            max_cost_micros: budget(&tenant)?,
            add_cost_micros: add_cost,
        }))
    } else {
        None
    };
    let added: Vec<weft_model::Node> = change
        .new
        .iter()
        .filter(|n| !change.old.iter().any(|o| o.id == n.id))
        .cloned()
        .collect();
    Ok(JobCost {
        estimate: prices.estimate(&before, &after, change.lease_left_ms),
        per_hour: priced.then_some(after.micros),
        quota,
        opened: prices.spans(&added, change.now),
        currency: prices.currency.clone(),
    })
}
