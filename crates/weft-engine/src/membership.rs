//! What a JOIN or LEAVE task is told of its service's membership: the members before and after
//! this one change (`config.membership` of its payload).
//!
//! The planner runs a service's membership changes one at a time (or `maxConcurrent` at a
//! time), so the members are read from the job as it stands: the nodes that hold the service,
//! less those whose JOIN of it in this job has not completed and those whose LEAVE has. The
//! changing node is in `before` of a LEAVE and in `after` of a JOIN.

use serde_json::{json, Value};
use weft_model::ProvisionerAction;
use weft_planner::{PlanNode, DEFAULT_IP_TYPE};
use weft_store::{TaskRow, TaskState};

use crate::error::EngineResult;
use crate::Engine;

/// `config.membership` of JOIN or LEAVE task `task` on a cluster of nodes `layout` (every node,
/// the leaving ones included); `None` for other tasks.
pub(crate) async fn of_task(
    st: &Engine,
    task: &TaskRow,
    layout: &[PlanNode],
) -> EngineResult<Option<Value>> {
    let join = ProvisionerAction::Join.upper();
    let leave = ProvisionerAction::Leave.upper();
    if task.action != join && task.action != leave {
        return Ok(None);
    }
    let heads = st
        .store
        .list_task_heads(&task.tenant_id, &task.job_id)
        .await?;
    let not_member = |id: &str| {
        heads.iter().any(|h| {
            h.node_id == id
                && h.service == task.service
                && ((h.action == join && h.state != TaskState::Complete)
                    || (h.action == leave && h.state == TaskState::Complete))
        })
    };
    let member = |n: &&PlanNode| n.services.contains(&task.service) && !not_member(&n.id);
    let mut before: Vec<&PlanNode> = layout.iter().filter(member).collect();
    let mut after = before.clone();
    let me = layout.iter().find(|n| n.id == task.node_id);
    if task.action == join {
        after.extend(me);
        after.sort_by_key(|n| (n.nodenum, n.id.clone()));
    } else {
        after.retain(|n| n.id != task.node_id);
        if !before.iter().any(|n| n.id == task.node_id) {
            before.extend(me);
            before.sort_by_key(|n| (n.nodenum, n.id.clone()));
        }
    }
    Ok(Some(json!({
        "service": task.service,
        "change": task.action.to_ascii_lowercase(),
        "node": task.node_id,
        "before": members(&before),
        "after": members(&after),
    })))
}

fn members(nodes: &[&PlanNode]) -> Value {
    nodes
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "hostname": n.hostname,
                "ip": n.ipaddresses.get(DEFAULT_IP_TYPE).cloned().unwrap_or_default(),
            })
        })
        .collect()
}
