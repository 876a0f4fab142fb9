//! Worker placement: how many workers each tenant runs on each provisioner.
//!
//! The superadmin sets each tenant's `workers`; [`place`] spreads them over the registered
//! provisioners, most free capacity first, keeping existing assignments where it can. It is pure;
//! [`reassign`] reads and writes the store around it, and [`rebalance`] also tells the provisioners
//! whose counts changed (in the background, through the [`Messenger`](crate::Messenger)).

use std::collections::BTreeMap;

use weft_store::{ProvisionerRecord, Store};

use crate::error::EngineResult;
use crate::Engine;

/// Computes new assignments. `wanted` maps tenant id to its worker count; tenants not in it lose
/// their workers. Returns the provisioners whose assignments changed.
pub fn place(
    provisioners: &mut [ProvisionerRecord],
    wanted: &BTreeMap<String, u32>,
) -> Vec<String> {
    let before: Vec<BTreeMap<String, u32>> =
        provisioners.iter().map(|p| p.assignments.clone()).collect();
    for p in provisioners.iter_mut() {
        p.assignments
            .retain(|t, n| wanted.contains_key(t) && *n > 0);
    }
    for (tenant, &want) in wanted {
        let have: u32 = provisioners
            .iter()
            .map(|p| p.assignments.get(tenant).copied().unwrap_or(0))
            .sum();
        if have > want {
            let mut excess = have - want;
            // Take back from the most loaded provisioners first.
            let mut order: Vec<usize> = (0..provisioners.len()).collect();
            order.sort_by_key(|&i| (free(&provisioners[i]), provisioners[i].id.clone()));
            for i in order {
                if excess == 0 {
                    break;
                }
                if let Some(n) = provisioners[i].assignments.get_mut(tenant) {
                    let take = (*n).min(excess);
                    *n -= take;
                    excess -= take;
                }
                provisioners[i].assignments.retain(|_, n| *n > 0);
            }
        } else if have < want {
            let mut need = want - have;
            while need > 0 {
                // One worker at a time to the provisioner with the most free capacity: an even spread.
                let Some(i) = (0..provisioners.len())
                    .filter(|&i| free(&provisioners[i]) > 0)
                    .max_by_key(|&i| {
                        (
                            free(&provisioners[i]),
                            std::cmp::Reverse(provisioners[i].id.clone()),
                        )
                    })
                else {
                    break;
                };
                *provisioners[i]
                    .assignments
                    .entry(tenant.clone())
                    .or_insert(0) += 1;
                need -= 1;
            }
        }
    }
    provisioners
        .iter()
        .zip(before)
        .filter(|(p, b)| p.assignments != *b)
        .map(|(p, _)| p.id.clone())
        .collect()
}

fn free(p: &ProvisionerRecord) -> u32 {
    p.capacity_total
        .saturating_sub(p.assignments.values().sum())
}

pub use crate::events::Moved;

/// Re-places every tenant's workers, saves the provisioners that changed and tells those
/// provisioners their new counts, in the background (see [`Messenger::workers_moved`](crate::Messenger::workers_moved)).
pub async fn rebalance(st: &Engine) -> EngineResult<()> {
    let moved = reassign(st.store.as_ref()).await?;
    if !moved.is_empty() {
        st.messenger.workers_moved(moved);
    }
    Ok(())
}

/// Re-places every tenant's workers and saves the provisioners that changed. Returns each
/// (provisioner, tenant) whose count changed. Calls no provisioner.
pub async fn reassign(store: &dyn Store) -> EngineResult<Vec<Moved>> {
    let tenants = store.list_tenants().await?;
    let wanted: BTreeMap<String, u32> = tenants
        .iter()
        .map(|t| (t.id.clone(), t.spec.workers))
        .collect();
    let mut provisioners = store.list_provisioners().await?;
    let before: BTreeMap<String, BTreeMap<String, u32>> = provisioners
        .iter()
        .map(|p| (p.id.clone(), p.assignments.clone()))
        .collect();
    let changed = place(&mut provisioners, &wanted);
    let mut moved = Vec::new();
    for p in provisioners.iter().filter(|p| changed.contains(&p.id)) {
        store.upsert_provisioner(p).await?;
        let old = &before[&p.id];
        let tenants: std::collections::BTreeSet<&String> =
            old.keys().chain(p.assignments.keys()).collect();
        for t in tenants {
            if old.get(t) != p.assignments.get(t) {
                moved.push(Moved {
                    provisioner_id: p.id.clone(),
                    tenant_id: t.clone(),
                });
            }
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prov(id: &str, cap: u32) -> ProvisionerRecord {
        ProvisionerRecord {
            id: id.into(),
            host: "h".into(),
            port: 1,
            capacity_total: cap,
            assignments: BTreeMap::new(),
            usage: BTreeMap::new(),
            last_heartbeat_ms: 0,
            tls: false,
        }
    }

    #[test]
    fn spreads_by_free_capacity_and_shrinks() {
        let mut ps = vec![prov("a", 4), prov("b", 4)];
        let mut want = BTreeMap::from([("t1".to_string(), 4)]);
        place(&mut ps, &want);
        assert_eq!(ps[0].assignments["t1"] + ps[1].assignments["t1"], 4);
        assert_eq!(ps[0].assignments["t1"], 2);
        want.insert("t1".into(), 1);
        want.insert("t2".into(), 6);
        place(&mut ps, &want);
        let total = |ps: &[ProvisionerRecord], t: &str| {
            ps.iter()
                .map(|p| p.assignments.get(t).copied().unwrap_or(0))
                .sum::<u32>()
        };
        assert_eq!((total(&ps, "t1"), total(&ps, "t2")), (1, 6));
        assert!(ps
            .iter()
            .all(|p| p.assignments.values().sum::<u32>() <= p.capacity_total));
        want.remove("t2");
        let changed = place(&mut ps, &want);
        assert!(!changed.is_empty());
        assert_eq!(total(&ps, "t2"), 0);
    }
}
