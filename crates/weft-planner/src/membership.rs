//! Membership changes: a service's JOINs and LEAVEs run one at a time.
//!
//! A membership change is a JOIN and what follows it in its node's chain of that service (START,
//! then the HEALTHCHECK that shows the new member serving), or a LEAVE and what follows it (STOP,
//! REMOVE). The changes of one service wait for each other in node order, LEAVEs first:
//! change `k` starts when change `k - m` is done, `m` being the service's
//! `membership.maxConcurrent` (1 by default). A consensus system (etcd, ZooKeeper) then sees one
//! member added or removed at a time, each settled before the next.

use std::collections::BTreeMap;

use weft_model::{ProvisionerAction as A, Service};

use crate::dag::{Builder, ProgramTasks};

/// One membership change: its first task (JOIN or LEAVE) and its last.
#[derive(Debug, Clone, Copy)]
struct Change {
    first: usize,
    last: usize,
}

/// Orders every service's membership changes (see the module doc).
pub(crate) fn one_change_at_a_time(
    catalog: &BTreeMap<String, Service>,
    b: &mut Builder<'_>,
    made: &[ProgramTasks],
) {
    let mut leaves: BTreeMap<u32, Vec<Change>> = BTreeMap::new();
    let mut joins: BTreeMap<u32, Vec<Change>> = BTreeMap::new();
    for (sid, tasks) in made.iter().flat_map(|m| &m.chains) {
        for &t in tasks {
            let into = match b.task_action(t) {
                A::Leave => &mut leaves,
                A::Join => &mut joins,
                _ => continue,
            };
            into.entry(*sid).or_default().push(Change {
                first: t,
                last: *tasks.last().unwrap_or(&t),
            });
        }
    }
    let mut services: Vec<u32> = leaves.keys().chain(joins.keys()).copied().collect();
    services.sort_unstable();
    services.dedup();
    for sid in services {
        let m = catalog
            .get(b.service_name(sid))
            .map_or(1, Service::max_concurrent_changes);
        let changes: Vec<Change> = leaves
            .remove(&sid)
            .unwrap_or_default()
            .into_iter()
            .chain(joins.remove(&sid).unwrap_or_default())
            .collect();
        for k in m..changes.len() {
            b.barrier(&[changes[k - m].last], &[changes[k].first]);
        }
    }
}
