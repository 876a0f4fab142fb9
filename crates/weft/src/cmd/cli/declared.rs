//! Clusters declared in files and moved to template versions: `weft apply -f`, `weft cluster
//! export`, `weft cluster sync`, `weft template impact`. The server decides what changes
//! (`/v2/clusters/{id}/apply`, `.../clustertemplate/sync`); this module reads files, shows the
//! change and asks.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_client::api::CreateCluster;
use weft_model::{ApplyRequest, ClusterChange, ClusterSpec, ClusterStatus};

use super::{confirm, print_json, read_input, Conn, Ctx, UsageError};

/// `weft apply`.
#[derive(Debug, clap::Args)]
pub(crate) struct ApplyArgs {
    #[command(flatten)]
    conn: Conn,
    /// The declaration: YAML or JSON (`-` for stdin): name, template, version, size, services,
    /// config, lease (a duration such as `30d`, or `0` for forever), provider.
    #[arg(short = 'f', long = "file", required_unless_present = "plan")]
    file: Option<String>,
    /// Apply exactly a plan saved with --plan-out; refused if the cluster or the change differ now.
    #[arg(long, conflicts_with_all = ["file", "plan_out", "dry_run"])]
    plan: Option<String>,
    /// Save the plan to this file (to review, then `weft apply --plan FILE`) and change nothing.
    #[arg(long)]
    plan_out: Option<String>,
    /// Show what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Go ahead without asking.
    #[arg(long, visible_alias = "yes")]
    auto_approve: bool,
    /// Do not follow the job until it ends.
    #[arg(long)]
    no_wait: bool,
}

/// What `--plan-out` writes and `--plan` reads.
#[derive(Debug, Serialize, Deserialize)]
struct PlanFile {
    /// The cluster the plan changes; `None`: the plan creates it.
    cluster: Option<String>,
    /// The declaration the plan was made from.
    spec: ClusterSpec,
    /// The server's fingerprint of the state and the change (empty for a create).
    fingerprint: String,
}

/// `weft apply -f FILE` / `weft apply --plan FILE`.
pub(crate) fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    if let Some(path) = &a.plan {
        return apply_plan_file(&ctx, path, a.no_wait);
    }
    let path = a.file.as_deref().unwrap_or("-");
    let spec = read_spec(&read_input(path)?, path)?;
    match find_cluster(&ctx, &spec.name)? {
        None => create(&ctx, &spec, &a),
        Some(id) => change(&ctx, &id, spec, &a),
    }
}

/// A declaration from YAML or JSON; `lease` may be a duration (`30d`, `12h`) or milliseconds.
fn read_spec(bytes: &[u8], path: &str) -> anyhow::Result<ClusterSpec> {
    let bad = |e: String| UsageError(format!("{path}: {e}"));
    let mut doc: Value = serde_yaml_ng::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if let Some(lease) = doc.get_mut("lease") {
        if let Value::String(s) = lease {
            let ms = super::cluster::lease_ms(s).map_err(|e| bad(format!("lease: {e}")))?;
            *lease = Value::from(ms);
        }
    }
    let spec: ClusterSpec = serde_json::from_value(doc).map_err(|e| bad(e.to_string()))?;
    spec.check().map_err(|e| bad(e.to_string()))?;
    Ok(spec)
}

/// The id of the tenant's live cluster named `name`; an error when several have that name.
fn find_cluster(ctx: &Ctx, name: &str) -> anyhow::Result<Option<String>> {
    let all = ctx.block(ctx.client.clusters(None))?;
    let live: Vec<&str> = all
        .iter()
        .filter(|c| c.name == name && c.status != ClusterStatus::Terminated)
        .map(|c| c.id.as_str())
        .collect();
    match live.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.to_string())),
        many => Err(UsageError(format!(
            "several live clusters are named {name} ({}): declare a unique name",
            many.join(", ")
        ))
        .into()),
    }
}

/// A declared cluster that does not exist yet: the create's plan, then the create.
fn create(ctx: &Ctx, spec: &ClusterSpec, a: &ApplyArgs) -> anyhow::Result<()> {
    let req = create_request(spec);
    let plan = ctx.block(ctx.client.plan_cluster(&req))?;
    if let Some(out) = &a.plan_out {
        return save_plan(out, None, spec, String::new());
    }
    if ctx.json() && a.dry_run {
        return print_json(&plan);
    }
    if !ctx.json() {
        println!("cluster {} does not exist: it will be created", spec.name);
        println!("{}", super::plan_view::summary(&plan));
        if let Some(c) = &plan.cost {
            println!("{}", super::plan_view::cost_line(c));
        }
    }
    if a.dry_run || !approved(a, "create it?")? {
        return Ok(());
    }
    let id = ctx.block(ctx.client.create_cluster(&req))?;
    if !ctx.json() {
        println!("created cluster {id} ({})", spec.name);
    }
    follow(ctx, &id, a.no_wait)
}

fn create_request(spec: &ClusterSpec) -> CreateCluster {
    CreateCluster {
        name: spec.name.clone(),
        cluster_template: spec.template.clone(),
        num_machines: i64::try_from(spec.size).unwrap_or(i64::MAX),
        provider: spec.provider.clone(),
        services: spec.services.clone(),
        config: spec.config.clone(),
        initial_lease_duration: spec.lease.map(|l| i64::try_from(l).unwrap_or(i64::MAX)),
        ..Default::default()
    }
}

/// A declared cluster that exists: the change, then (approved) exactly that change.
fn change(ctx: &Ctx, id: &str, spec: ClusterSpec, a: &ApplyArgs) -> anyhow::Result<()> {
    let mut req = ApplyRequest {
        spec,
        fingerprint: None,
    };
    let preview = ctx.block(ctx.client.apply(id, &req, true))?;
    if let Some(out) = &a.plan_out {
        show_change(ctx, &preview)?;
        return save_plan(out, Some(id), &req.spec, preview.fingerprint);
    }
    show_change(ctx, &preview)?;
    if let (Some(why), false) = (&preview.blocked, a.dry_run) {
        return Err(UsageError(format!(
            "cluster {} cannot become what {} declares: {why}",
            preview.cluster_id,
            a.file.as_deref().unwrap_or("the file")
        ))
        .into());
    }
    if !preview.changes || a.dry_run || !approved(a, "apply these changes?")? {
        return Ok(());
    }
    req.fingerprint = Some(preview.fingerprint.clone());
    let done = ctx.block(ctx.client.apply(id, &req, false))?;
    report_started(ctx, &done)?;
    match done.job {
        Some(_) => follow(ctx, id, a.no_wait),
        None => Ok(()),
    }
}

/// `weft apply --plan FILE`: runs the saved plan if it still holds.
fn apply_plan_file(ctx: &Ctx, path: &str, no_wait: bool) -> anyhow::Result<()> {
    let bytes = read_input(path)?;
    let plan: PlanFile = serde_json::from_slice(&bytes)
        .map_err(|e| UsageError(format!("{path}: not a plan file: {e}")))?;
    let now = find_cluster(ctx, &plan.spec.name)?;
    match (&plan.cluster, now) {
        (None, None) => {
            let req = create_request(&plan.spec);
            let id = ctx.block(ctx.client.create_cluster(&req))?;
            if !ctx.json() {
                println!("created cluster {id} ({})", plan.spec.name);
            }
            follow(ctx, &id, no_wait)
        }
        (Some(want), Some(have)) if *want == have => {
            let req = ApplyRequest {
                spec: plan.spec,
                fingerprint: Some(plan.fingerprint),
            };
            let done = ctx.block(ctx.client.apply(&have, &req, false))?;
            report_started(ctx, &done)?;
            match done.job {
                Some(_) => follow(ctx, &have, no_wait),
                None => Ok(()),
            }
        }
        (_, _) => Err(UsageError(format!(
            "the plan in {path} was made for {}; cluster {} is not that now: make a new plan",
            plan.cluster
                .as_deref()
                .map_or("a cluster to create".to_string(), |c| format!(
                    "cluster {c}"
                )),
            plan.spec.name
        ))
        .into()),
    }
}

fn save_plan(
    out: &str,
    cluster: Option<&str>,
    spec: &ClusterSpec,
    fingerprint: String,
) -> anyhow::Result<()> {
    let file = PlanFile {
        cluster: cluster.map(str::to_string),
        spec: spec.clone(),
        fingerprint,
    };
    std::fs::write(out, serde_json::to_string_pretty(&file)? + "\n")
        .map_err(|e| UsageError(format!("writing {out}: {e}")))?;
    eprintln!("plan saved to {out}; apply it with: weft apply --plan {out}");
    Ok(())
}

fn approved(a: &ApplyArgs, question: &str) -> anyhow::Result<bool> {
    Ok(a.auto_approve || confirm(question)?)
}

fn follow(ctx: &Ctx, id: &str, no_wait: bool) -> anyhow::Result<()> {
    if no_wait {
        return Ok(());
    }
    let d = super::cluster::wait(ctx, id, false)?;
    if ctx.json() {
        print_json(&d)?;
    }
    Ok(())
}

fn report_started(ctx: &Ctx, c: &ClusterChange) -> anyhow::Result<()> {
    if ctx.json() {
        return print_json(c);
    }
    match &c.job {
        Some(job) => println!("started job {job} on cluster {}", c.cluster_id),
        None if c.changes => println!("recorded on cluster {} (no task to run)", c.cluster_id),
        None => println!("cluster {} ({}): no changes", c.cluster_id, c.name),
    }
    Ok(())
}

/// A change for people: what moves, the layout, the plan in short; or `no changes`.
pub(super) fn show_change(ctx: &Ctx, c: &ClusterChange) -> anyhow::Result<()> {
    if ctx.json() {
        return print_json(c);
    }
    print!("{}", render_change(c));
    Ok(())
}

/// The text of [`show_change`].
pub(super) fn render_change(c: &ClusterChange) -> String {
    let mut out = format!("cluster {} ({})", c.cluster_id, c.name);
    if !c.changes {
        out.push_str(": no changes\n");
        return out;
    }
    out.push('\n');
    if let Some(why) = &c.blocked {
        out.push_str(&format!("  cannot move: {why}\n"));
    }
    if c.from_version != c.to_version || !c.template_diff.is_empty() {
        out.push_str(&format!(
            "  template {}: version {} -> {}\n",
            c.template, c.from_version, c.to_version
        ));
    }
    let list = |v: &[String]| v.join(", ");
    if !c.services_added.is_empty() {
        out.push_str(&format!("  services added: {}\n", list(&c.services_added)));
    }
    if !c.services_removed.is_empty() {
        out.push_str(&format!(
            "  services removed: {}\n",
            list(&c.services_removed)
        ));
    }
    for l in &c.config_diff {
        out.push_str(&format!("  config {l}\n"));
    }
    if !c.config_kept.is_empty() {
        out.push_str(&format!(
            "  config kept (the cluster's own value): {}\n",
            list(&c.config_kept)
        ));
    }
    if let Some([from, to]) = c.lease {
        let show = |t: i64| {
            if t == 0 {
                "never".into()
            } else {
                super::time(t)
            }
        };
        out.push_str(&format!("  lease ends: {} -> {}\n", show(from), show(to)));
    }
    for l in &c.layout {
        out.push_str(&format!("  {l}\n"));
    }
    if !c.summary.is_empty() {
        out.push_str(&format!("  plan: {}\n", c.summary.join("; ")));
    }
    if let Some(cost) = c.plan.as_ref().and_then(|p| p.cost.as_ref()) {
        out.push_str(&format!("  {}\n", super::plan_view::cost_line(cost)));
    }
    out
}

/// `weft cluster export ID`: the declaration as YAML (JSON with `-o json`).
pub(super) fn export(ctx: &Ctx, id: &str, out: Option<&str>) -> anyhow::Result<()> {
    let spec = ctx.block(ctx.client.export_cluster(id))?;
    let text = if ctx.json() {
        serde_json::to_string_pretty(&spec)? + "\n"
    } else {
        serde_yaml_ng::to_string(&spec)?
    };
    match out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| UsageError(format!("writing {path}: {e}")).into()),
        None => crate::cmd::print_out(&text),
    }
}

/// `weft cluster sync ID [--to-version V] [--dry-run]`.
pub(super) fn sync(
    ctx: &Ctx,
    id: &str,
    version: Option<u64>,
    dry_run: bool,
    wait: bool,
) -> anyhow::Result<()> {
    let c = ctx.block(ctx.client.sync_template(id, version, dry_run))?;
    if dry_run {
        return show_change(ctx, &c);
    }
    report_started(ctx, &c)?;
    match (&c.job, wait) {
        (Some(_), true) => follow(ctx, id, false),
        _ => Ok(()),
    }
}

/// `weft template impact NAME [--version V]`: one block per cluster on another version.
pub(super) fn impact(ctx: &Ctx, name: &str, version: Option<u64>) -> anyhow::Result<()> {
    let list = ctx.block(ctx.client.template_impact(name, version))?;
    if ctx.json() {
        return print_json(&list);
    }
    if list.is_empty() {
        println!("no live cluster follows another version of template {name}");
    }
    for c in &list {
        print!("{}", render_change(c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_declaration_reads_with_a_duration_lease() {
        let spec = read_spec(
            b"name: web\ntemplate: t\nsize: 3\nlease: 2d\nconfig:\n  a: {b: 1}\n",
            "f.yaml",
        )
        .unwrap();
        assert_eq!(spec.lease, Some(2 * 86_400_000));
        assert_eq!(spec.size, 3);
        assert_eq!(spec.config.unwrap()["a"]["b"], 1);
    }

    #[test]
    fn a_declaration_with_a_typo_names_the_field() {
        let e = read_spec(b"name: web\ntemplate: t\nsise: 3\n", "f.yaml").unwrap_err();
        assert!(e.to_string().contains("sise"), "{e}");
        let e = read_spec(
            b"{\"name\": \"web\", \"template\": \"t\", \"size\": 0}",
            "f.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("size"), "{e}");
    }
}
