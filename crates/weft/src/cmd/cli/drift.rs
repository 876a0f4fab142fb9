//! `weft cluster check`: runs a drift check (unless `--latest`), waits for it, and shows each
//! node's machine and services, then the orphan machines; exit 5 when anything drifted.

use std::time::Duration;

use weft_model::{DriftReport, HealthState, MachineState};

use super::{print_json, table, Ctx, Unhealthy};

/// Runs (unless `latest`) and shows a check; [`Unhealthy`] (exit 5) when drift was found or the
/// check did not end in time.
pub(super) fn check(ctx: &Ctx, id: &str, latest: bool, timeout: Duration) -> anyhow::Result<()> {
    let job = if latest {
        None
    } else {
        Some(ctx.block(ctx.client.check_run(id))?.job_id)
    };
    let deadline = std::time::Instant::now() + timeout;
    let r = loop {
        let r = ctx.block(ctx.client.check(id))?;
        let ours = job.is_none() || r.job_id == job;
        if (ours && r.finished()) || std::time::Instant::now() >= deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    if ctx.json() {
        print_json(&r)?;
    } else {
        show(&r);
    }
    let gone = r.nodes.iter().filter(|n| n.machine.is_drift()).count();
    let sick = r
        .nodes
        .iter()
        .flat_map(|n| &n.services)
        .filter(|s| s.state == HealthState::Unhealthy)
        .count();
    if r.drift || !r.finished() {
        let not_done = if r.finished() {
            ""
        } else {
            " (the check had not ended)"
        };
        return Err(Unhealthy(format!(
            "cluster {id}: drift found: {gone} machine(s) missing or stopped, {sick} service(s) unhealthy, {} orphan machine(s){not_done}",
            r.orphans.len()
        ))
        .into());
    }
    Ok(())
}

fn show(r: &DriftReport) {
    let mut t = table(&["node", "host", "id", "machine", "unhealthy services"]);
    for n in &r.nodes {
        let sick: Vec<&str> = n
            .services
            .iter()
            .filter(|s| s.state == HealthState::Unhealthy)
            .map(|s| s.service.as_str())
            .collect();
        t.add_row(vec![
            n.nodenum.to_string(),
            n.hostname.clone(),
            n.id.clone(),
            n.machine.as_str().to_string(),
            if sick.is_empty() {
                "-".to_string()
            } else {
                sick.join(", ")
            },
        ]);
    }
    println!("{t}");
    for n in r
        .nodes
        .iter()
        .filter(|n| n.machine != MachineState::Running)
    {
        if let Some(m) = &n.message {
            println!("{} ({}): {m}", n.hostname, n.machine.as_str());
        }
    }
    for m in &r.orphans {
        println!(
            "orphan: {} {} (node {}, {})",
            m.providertype, m.providerid, m.node, m.state
        );
    }
    if let Some(why) = &r.orphans_unknown {
        println!("orphans not looked for: {why}");
    }
    for a in &r.replacements {
        println!("replaced automatically: node {} (job {})", a.node, a.job_id);
    }
    println!(
        "cluster {}: {} (check {}, {})",
        r.cluster_id,
        if r.drift { "drift found" } else { "no drift" },
        r.job_id.as_deref().unwrap_or("none"),
        if r.job_status.is_empty() {
            "never run"
        } else {
            r.job_status.as_str()
        }
    );
}
