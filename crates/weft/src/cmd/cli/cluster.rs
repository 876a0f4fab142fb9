//! `weft cluster ...`: create, inspect, change and delete clusters.

use std::time::Duration;

use clap::Subcommand;
use serde_json::{Map, Value};
use weft_client::api::{CreateCluster, Kind, Started};
use weft_model::{
    ClusterDetails, ClusterHealth, ClusterStatus, ClusterTemplate, HealthState, JobStatus, Node,
    NodeActionStatus, PlanView,
};

use super::plan_view::{groups, render_groups, summary, NodeKinds};
use super::{print_json, table, time, Conn, Ctx, JobFailed, Unhealthy, UsageError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Flags of every call that starts a job.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct JobFlags {
    /// Show only the plan that would run; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run the change even where it would break a service's availability rule (quorum,
    /// minHealthy); the job records that it was forced.
    #[arg(long)]
    force: bool,
    /// Follow the job with a progress bar until it ends (exit 4 if it fails).
    #[arg(long)]
    wait: bool,
    /// Show the plan's task table too (by default: the layout and a summary).
    #[arg(long, short = 'v')]
    verbose: bool,
}

/// Flags of the calls that can roll a change through the cluster (restart, upgrade, reconfigure).
/// Any of them makes the change a rollout; unset ones take the template's defaults, then one
/// canary, one node at a time and pause.
#[derive(Debug, Clone, Default, clap::Args)]
pub(super) struct RolloutFlags {
    /// Roll: nodes changed first, in a batch of their own (0 for none).
    #[arg(long)]
    canaries: Option<u64>,
    /// Roll: nodes changed at once after the canaries, a count or a percentage ("25%").
    #[arg(long)]
    max_in_flight: Option<String>,
    /// Roll: what a failed health gate does, pause or rollback.
    #[arg(long)]
    on_failure: Option<String>,
}

impl RolloutFlags {
    /// The request's `rollout`, when any flag is set (the server checks the values).
    fn spec(&self) -> Option<weft_model::RolloutSpec> {
        let spec = weft_model::RolloutSpec {
            canaries: self.canaries.map(Value::from),
            max_in_flight: self.max_in_flight.clone().map(Value::from),
            on_failure: self.on_failure.clone().map(Value::from),
        };
        (!spec.is_empty()).then_some(spec)
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create a cluster from a template: shows the plan, then creates.
    Create(CreateArgs),
    /// List the tenant's clusters that are not terminated (`--all` for every one).
    List {
        /// Filter by status (comma-separated: pending,active,incomplete,inconsistent,terminated).
        #[arg(long)]
        status: Option<String>,
        /// Terminated clusters too.
        #[arg(long, conflicts_with = "status")]
        all: bool,
    },
    /// Show a cluster: nodes (a page of them), services, addresses, lease, last job.
    Show {
        /// The cluster id.
        id: String,
        /// The first node shown (0 is the first).
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Nodes shown, 1 to 1000; the last line says how to see the next page.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
    },
    /// The status of a cluster's latest job.
    Status {
        /// The cluster id.
        id: String,
    },
    /// Delete a cluster (all its nodes). A job underway is aborted first: its running tasks end
    /// (or time out), then the delete starts.
    Delete {
        /// The cluster id.
        id: String,
        /// Follow the delete until the cluster is terminated.
        #[arg(long)]
        wait: bool,
        /// Admins: mark the cluster terminated without deleting its machines, for a cluster whose
        /// machines are known to be gone and whose delete cannot succeed (credentials lost for
        /// good, a closed account). Refused while a task of it runs; the cluster's message records
        /// who forced it.
        #[arg(long)]
        force: bool,
    },
    /// Move the cluster to a version of its template (the latest by default): services the
    /// version adds to its defaults are added, its config changes taken where the cluster kept
    /// the old defaults, rolling where the template's rollout policy says.
    Sync {
        /// The cluster id.
        id: String,
        /// The template version to move to.
        #[arg(long)]
        to_version: Option<u64>,
        /// Show what would change and the plan; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Follow the job until it ends.
        #[arg(long)]
        wait: bool,
    },
    /// Write the cluster as a declaration (YAML; JSON with -o json) that `weft apply -f` takes.
    Export {
        /// The cluster id.
        id: String,
        /// Write to this file instead of stdout.
        #[arg(long = "out", short = 'O')]
        out: Option<String>,
    },
    /// Add nodes.
    Expand {
        /// The cluster id.
        id: String,
        /// How many nodes to add.
        #[arg(long)]
        count: u64,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Remove nodes (newest first).
    Shrink {
        /// The cluster id.
        id: String,
        /// How many nodes to remove.
        #[arg(long)]
        count: u64,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Add services.
    AddService {
        /// The cluster id.
        id: String,
        /// The services to add.
        #[arg(required = true)]
        services: Vec<String>,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Remove a service.
    RemoveService {
        /// The cluster id.
        id: String,
        /// The service.
        service: String,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Change the cluster's config (key=value over the current config) and restart services.
    Reconfigure {
        /// The cluster id.
        id: String,
        /// key=value over the current config (dotted keys nest; JSON values allowed).
        #[arg(long = "config", required = true)]
        config: Vec<String>,
        /// Do not restart services after configuring them.
        #[arg(long)]
        no_restart: bool,
        #[command(flatten)]
        rollout: RolloutFlags,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Start every service, or one.
    Start {
        /// The cluster id.
        id: String,
        /// Only this service [default: every service].
        service: Option<String>,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Stop every service, or one.
    Stop {
        /// The cluster id.
        id: String,
        /// Only this service [default: every service].
        service: Option<String>,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Restart every service, or one (rolling, with --canaries / --max-in-flight / --on-failure).
    Restart {
        /// The cluster id.
        id: String,
        /// Only this service [default: every service].
        service: Option<String>,
        #[command(flatten)]
        rollout: RolloutFlags,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Upgrade a service to its latest definition.
    Upgrade {
        /// The cluster id.
        id: String,
        /// The service.
        service: String,
        /// Nodes upgraded at a time (without a rollout).
        #[arg(long)]
        batch_size: Option<u64>,
        #[command(flatten)]
        rollout: RolloutFlags,
        #[command(flatten)]
        job: JobFlags,
    },
    /// Pause the cluster's running job: tasks underway finish, nothing new starts.
    Pause {
        /// The cluster id.
        id: String,
    },
    /// Resume the cluster's paused job.
    Resume {
        /// The cluster id.
        id: String,
    },
    /// Abort the cluster's running or paused job (the cluster ends incomplete).
    Abort {
        /// The cluster id.
        id: String,
    },
    /// Move the end of the cluster's lease: `--until <ms since epoch>` or `--until +48h`.
    ExtendLease {
        /// The cluster id.
        id: String,
        /// The new end: ms since the epoch, or + and a duration (+48h, +30d).
        #[arg(long)]
        until: String,
    },
    /// The plan of a job (default: the latest).
    Plan {
        /// The cluster id.
        id: String,
        /// The job id [default: the latest].
        job: Option<String>,
    },
    /// Output of the cluster's finished and failed tasks, from the nodes' action history.
    Logs(super::logs::LogsArgs),
    /// A shell on a node, or `-- COMMAND...` there (exits with its exit code). Local provider: a
    /// shell in the node's directory with its environment; others: ssh to the node.
    Ssh(SshArgs),
    /// Follow the cluster's running job until it ends.
    Wait {
        /// The cluster id.
        id: String,
    },
    /// Run the services' health checks now, wait for them and show a node x service grid
    /// (exit 5 if any service is not healthy). With --latest, show the latest run instead.
    Health {
        /// The cluster id.
        id: String,
        /// Show the latest run's grid; run nothing.
        #[arg(long)]
        latest: bool,
        /// How long to wait for the checks (e.g. 5m).
        #[arg(long, default_value = "10m", value_parser = super::duration::parse)]
        timeout: Duration,
    },
    /// Check what is really there: each node's machine (does it still exist and run?), the
    /// services' health checks, and machines with the cluster's marks that belong to no node.
    /// Waits for the check (exit 5 if any drift is found). With --latest, show the latest check.
    Check {
        /// The cluster id.
        id: String,
        /// Show the latest check; run nothing.
        #[arg(long)]
        latest: bool,
        /// How long to wait for the check (e.g. 5m).
        #[arg(long, default_value = "10m", value_parser = super::duration::parse)]
        timeout: Duration,
    },
    /// Replace a node: delete its machine if it still exists, make a new one with the same node
    /// id, hardware, image and services, set them up, and re-configure the other nodes.
    ReplaceNode {
        /// The cluster id.
        id: String,
        /// The node id.
        node: String,
        #[command(flatten)]
        job: JobFlags,
    },
}

// `cluster create`'s flags (its help text is the variant's).
#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// The cluster template.
    #[arg(long)]
    template: String,
    /// Number of nodes.
    #[arg(long)]
    size: i64,
    /// Cluster name [default: <template>-<random>].
    #[arg(long)]
    name: Option<String>,
    /// What the cluster is for.
    #[arg(long)]
    description: Option<String>,
    /// A service to run (repeat; default: the template's services).
    #[arg(long = "service")]
    services: Vec<String>,
    /// key=value over the template's default config (dotted keys nest; JSON values allowed).
    #[arg(long = "config")]
    config: Vec<String>,
    /// The provider [default: the template's].
    #[arg(long)]
    provider: Option<String>,
    /// Hardware type of every node [default: per the template].
    #[arg(long)]
    hardwaretype: Option<String>,
    /// Image type of every node [default: per the template].
    #[arg(long)]
    imagetype: Option<String>,
    /// Initial lease: a duration (48h, 30d, 1h30m; 0 for forever, when the template allows it).
    #[arg(long, value_parser = lease_ms)]
    lease: Option<i64>,
    /// Delete what was made if the create fails.
    #[arg(long)]
    rollback_on_failure: bool,
    #[command(flatten)]
    job: JobFlags,
}

// `cluster ssh`'s flags (its help text is the variant's).
#[derive(Debug, clap::Args)]
struct SshArgs {
    /// The cluster.
    id: String,
    /// The node: id, hostname or node number.
    node: String,
    /// Print the ssh command instead of running it.
    #[arg(long)]
    print: bool,
    /// Accepted for compatibility: running is the default.
    #[arg(long, hide = true)]
    exec: bool,
    /// Private key for ssh (host pool: the provider's key) [default: the Docker cluster key].
    #[arg(long)]
    identity: Option<std::path::PathBuf>,
    /// Data dir of the provisioner (`weft up`) that made Docker nodes: its key seed
    /// [default: the data dir of the `weft up` serving --server, else ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// The command to run (after `--`); a shell when missing.
    #[arg(last = true)]
    command: Vec<String>,
}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    match a.cmd {
        Cmd::Create(create) => create_cluster(&ctx, create),
        Cmd::List { status, all } => list(&ctx, status, all),
        Cmd::Show { id, offset, limit } => show(&ctx, &id, offset, limit),
        Cmd::Status { id } => status(&ctx, &id),
        Cmd::Delete { id, wait, force } => delete(&ctx, &id, wait, force),
        Cmd::Sync {
            id,
            to_version,
            dry_run,
            wait,
        } => super::declared::sync(&ctx, &id, to_version, dry_run, wait),
        Cmd::Export { id, out } => super::declared::export(&ctx, &id, out.as_deref()),
        Cmd::Expand { id, count, job } => expand(&ctx, &id, count, &job),
        Cmd::Shrink { id, count, job } => shrink(&ctx, &id, count, &job),
        Cmd::AddService { id, services, job } => add_services(&ctx, &id, &services, &job),
        Cmd::RemoveService { id, service, job } => remove_service(&ctx, &id, &service, &job),
        Cmd::Reconfigure {
            id,
            config,
            no_restart,
            rollout,
            job,
        } => reconfigure(&ctx, &id, &config, !no_restart, &rollout, &job),
        Cmd::Start { id, service, job } => service_action(&ctx, &id, service, "start", None, &job),
        Cmd::Stop { id, service, job } => service_action(&ctx, &id, service, "stop", None, &job),
        Cmd::Restart {
            id,
            service,
            rollout,
            job,
        } => service_action(&ctx, &id, service, "restart", rollout.spec(), &job),
        Cmd::Upgrade {
            id,
            service,
            batch_size,
            rollout,
            job,
        } => upgrade(&ctx, &id, &service, batch_size, &rollout, &job),
        Cmd::Pause { id } => job_control(&ctx, &id, "pause", "paused"),
        Cmd::Resume { id } => job_control(&ctx, &id, "resume", "resumed"),
        Cmd::Abort { id } => job_control(&ctx, &id, "abort", "aborted"),
        Cmd::ExtendLease { id, until } => extend_lease(&ctx, &id, &until),
        Cmd::Plan { id, job } => job_plan(&ctx, &id, job),
        Cmd::Logs(a) => super::logs::run(&ctx, &a),
        Cmd::Ssh(ssh) => ssh_to_node(&ctx, ssh),
        Cmd::Wait { id } => wait_and_show(&ctx, &id),
        Cmd::Health {
            id,
            latest,
            timeout,
        } => health(&ctx, &id, latest, timeout),
        Cmd::Check {
            id,
            latest,
            timeout,
        } => super::drift::check(&ctx, &id, latest, timeout),
        Cmd::ReplaceNode { id, node, job } => replace_node(&ctx, &id, &node, &job),
    }
}

/// `cluster create`: the plan, then (unless a dry run) the create and optionally the wait.
fn create_cluster(ctx: &Ctx, a: CreateArgs) -> anyhow::Result<()> {
    let c = &ctx.client;
    let job = a.job.clone();
    let req = create_request(ctx, a)?;
    let plan = ctx.block(c.plan_cluster(&req))?;
    let t: ClusterTemplate = ctx.block(c.entity(Kind::ClusterTemplate, &req.cluster_template))?;
    let kinds = NodeKinds::from_template(&t, req.hardwaretype.as_deref(), req.imagetype.as_deref());
    if job.dry_run {
        return show_plan(ctx, &plan, &kinds, job.verbose);
    }
    if !ctx.json() {
        let plan = PlanView {
            id: "(to run)".into(),
            ..plan
        };
        show_plan(ctx, &plan, &kinds, job.verbose)?;
    }
    let id = ctx.block(c.create_cluster(&req))?;
    if !ctx.json() {
        println!("created cluster {id} ({})", req.name);
    }
    if job.wait {
        wait_and_show(ctx, &id)
    } else if ctx.json() {
        print_json(&serde_json::json!({ "id": id }))
    } else {
        Ok(())
    }
}

/// The create request of `cluster create`: its config over the template's defaults, its name
/// made up when not given.
fn create_request(ctx: &Ctx, a: CreateArgs) -> anyhow::Result<CreateCluster> {
    let config = if a.config.is_empty() {
        None
    } else {
        let t: ClusterTemplate =
            ctx.block(ctx.client.entity(Kind::ClusterTemplate, &a.template))?;
        let mut base = t.defaults.config.clone();
        apply_kv(&mut base, &a.config)?;
        Some(base)
    };
    let name = a.name.unwrap_or_else(|| {
        let r = uuid::Uuid::new_v4().simple().to_string();
        format!("{}-{}", a.template, &r[..6])
    });
    Ok(CreateCluster {
        name,
        description: a.description,
        cluster_template: a.template,
        num_machines: a.size,
        provider: a.provider,
        hardwaretype: a.hardwaretype,
        imagetype: a.imagetype,
        services: (!a.services.is_empty()).then_some(a.services),
        initial_lease_duration: a.lease,
        config,
        rollback_on_failure: a.rollback_on_failure,
    })
}

/// `cluster list`: live clusters, those of `status`, or (`all`) every one.
fn list(ctx: &Ctx, status: Option<String>, all: bool) -> anyhow::Result<()> {
    let live = "pending,active,incomplete,inconsistent";
    let status = status.or((!all).then(|| live.to_string()));
    let list = ctx.block(ctx.client.clusters(status.as_deref()))?;
    if ctx.json() {
        return print_json(&list);
    }
    let mut t = table(&[
        "ID", "NAME", "STATUS", "TEMPLATE", "NODES", "OWNER", "JOB", "EXPIRES",
    ]);
    for s in &list {
        let job = s
            .progress
            .as_ref()
            .map(|p| {
                format!(
                    "{} {} {}/{}",
                    p.action,
                    p.actionstatus.as_str(),
                    p.stepscompleted,
                    p.stepstotal
                )
            })
            .unwrap_or_default();
        t.add_row(vec![
            s.id.clone(),
            s.name.clone(),
            s.status.as_str().to_string(),
            s.cluster_template.name.clone(),
            s.num_nodes.to_string(),
            s.owner_id.clone(),
            job,
            time(s.expire_time),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// `cluster show`: the cluster with a page of its nodes.
fn show(ctx: &Ctx, id: &str, offset: usize, limit: u64) -> anyhow::Result<()> {
    let (d, page) = ctx.block(ctx.client.cluster_page(id, offset, limit as usize))?;
    if ctx.json() {
        return print_json(&d);
    }
    show_cluster(&d);
    if let Some(more) = page_note(id, page) {
        println!("{more}");
    }
    Ok(())
}

/// `cluster status`: the status of the cluster's latest job.
fn status(ctx: &Ctx, id: &str) -> anyhow::Result<()> {
    let s = ctx.block(ctx.client.cluster_status(id))?;
    if ctx.json() {
        return print_json(&s);
    }
    println!(
        "cluster {} is {}; {} {} ({}/{} steps)",
        s.clusterid,
        s.status.as_str(),
        s.action,
        s.actionstatus.as_str(),
        s.stepscompleted,
        s.stepstotal
    );
    Ok(())
}

/// `cluster delete`: the delete (optionally followed until the end), or the forced one.
fn delete(ctx: &Ctx, id: &str, follow: bool, force: bool) -> anyhow::Result<()> {
    if force {
        ctx.block(ctx.client.force_delete_cluster(id))?;
        if !ctx.json() {
            println!("cluster {id} deleted by force: weft deleted none of its machines");
        }
        return Ok(());
    }
    ctx.block(ctx.client.delete_cluster(id))?;
    if !ctx.json() {
        println!("deleting cluster {id}");
    }
    if follow {
        let d = wait(ctx, id, true)?;
        if ctx.json() {
            print_json(&d)?;
        }
    }
    Ok(())
}

fn expand(ctx: &Ctx, id: &str, count: u64, job: &JobFlags) -> anyhow::Result<()> {
    let r = ctx.block(ctx.client.forcing(job.force).expand(id, count, job.dry_run))?;
    started(
        ctx,
        id,
        r,
        job,
        &format!("expanding cluster {id} by {count}"),
    )
}

fn shrink(ctx: &Ctx, id: &str, count: u64, job: &JobFlags) -> anyhow::Result<()> {
    let r = ctx.block(ctx.client.forcing(job.force).shrink(id, count, job.dry_run))?;
    started(
        ctx,
        id,
        r,
        job,
        &format!("shrinking cluster {id} by {count}"),
    )
}

fn add_services(ctx: &Ctx, id: &str, services: &[String], job: &JobFlags) -> anyhow::Result<()> {
    let r = ctx.block(
        ctx.client
            .forcing(job.force)
            .add_services(id, services, job.dry_run),
    )?;
    let what = format!("adding {} to cluster {id}", services.join(", "));
    started(ctx, id, r, job, &what)
}

fn remove_service(ctx: &Ctx, id: &str, service: &str, job: &JobFlags) -> anyhow::Result<()> {
    let r = ctx.block(
        ctx.client
            .forcing(job.force)
            .remove_service(id, service, job.dry_run),
    )?;
    started(
        ctx,
        id,
        r,
        job,
        &format!("removing {service} from cluster {id}"),
    )
}

/// `cluster reconfigure`: `config` (key=value) over the current config.
fn reconfigure(
    ctx: &Ctx,
    id: &str,
    config: &[String],
    restart: bool,
    rollout: &RolloutFlags,
    job: &JobFlags,
) -> anyhow::Result<()> {
    let mut current = ctx.block(ctx.client.cluster_config(id))?;
    apply_kv(&mut current, config)?;
    let spec = rollout.spec();
    let r = ctx.block(ctx.client.forcing(job.force).reconfigure(
        id,
        &current,
        restart,
        spec.as_ref(),
        job.dry_run,
    ))?;
    started(ctx, id, r, job, &format!("reconfiguring cluster {id}"))
}

fn upgrade(
    ctx: &Ctx,
    id: &str,
    service: &str,
    batch_size: Option<u64>,
    rollout: &RolloutFlags,
    job: &JobFlags,
) -> anyhow::Result<()> {
    let spec = rollout.spec();
    let r = ctx.block(ctx.client.forcing(job.force).upgrade(
        id,
        service,
        batch_size,
        spec.as_ref(),
        job.dry_run,
    ))?;
    started(
        ctx,
        id,
        r,
        job,
        &format!("upgrading {service} on cluster {id}"),
    )
}

fn replace_node(ctx: &Ctx, id: &str, node: &str, job: &JobFlags) -> anyhow::Result<()> {
    let r = ctx.block(
        ctx.client
            .forcing(job.force)
            .replace_node(id, node, job.dry_run),
    )?;
    started(
        ctx,
        id,
        r,
        job,
        &format!("replacing node {node} of cluster {id}"),
    )
}

/// `cluster extend-lease`: `until` is ms since the epoch or + and a duration.
fn extend_lease(ctx: &Ctx, id: &str, until: &str) -> anyhow::Result<()> {
    let at = parse_until(until, now_ms())?;
    ctx.block(ctx.client.set_expire_time(id, at))?;
    if ctx.json() {
        print_json(&serde_json::json!({ "expireTime": at }))
    } else {
        println!("cluster {id} now expires {}", time(at));
        Ok(())
    }
}

/// `cluster plan`: the plan of `job`, by default the latest.
fn job_plan(ctx: &Ctx, id: &str, job: Option<String>) -> anyhow::Result<()> {
    let c = &ctx.client;
    let job = match job {
        Some(j) => j,
        None => ctx
            .block(c.cluster(id))?
            .latest_job_id
            .ok_or_else(|| UsageError(format!("cluster {id} has no job yet")))?,
    };
    let plan = ctx.block(c.plan(id, &job))?;
    let d = ctx.block(c.cluster(id))?;
    let kinds = NodeKinds::from_template(&d.cluster_template, None, None).with_nodes(&d.nodes);
    show_plan(ctx, &plan, &kinds, true)
}

/// `cluster ssh`: runs the shell or command on the node, or (`--print`, `-o json`) shows the
/// ssh command.
fn ssh_to_node(ctx: &Ctx, a: SshArgs) -> anyhow::Result<()> {
    let SshArgs {
        id,
        node,
        print,
        exec: _,
        identity,
        data_dir,
        command,
    } = a;
    let d = ctx.block(ctx.client.cluster(&id))?;
    let n = find_node(&d, &node)?;
    if !print && !ctx.json() {
        let data_dir = data_dir
            .or_else(|| super::config::up_data_dir(ctx.client.base()))
            .unwrap_or_else(|| ".weft".into());
        let opts = super::ssh::SshOptions { identity, data_dir };
        let code = super::ssh::run_on(n, &command, &opts)?;
        std::process::exit(code);
    }
    let ip = access_ip(n).ok_or_else(|| UsageError(format!("node {} has no address yet", n.id)))?;
    let target = format!("{}@{ip}", n.properties.sshuser);
    if ctx.json() {
        print_json(
            &serde_json::json!({ "node": n.id, "user": n.properties.sshuser, "address": ip, "command": format!("ssh {target}") }),
        )
    } else {
        println!("ssh {target}");
        Ok(())
    }
}

/// Follows the cluster's running job until it ends; the cluster as JSON with `-o json`.
fn wait_and_show(ctx: &Ctx, id: &str) -> anyhow::Result<()> {
    let d = wait(ctx, id, false)?;
    if ctx.json() {
        print_json(&d)?;
    }
    Ok(())
}

/// `weft cluster health`: runs the checks (unless `latest`), waits for the run to end, shows the
/// grid; [`Unhealthy`] (exit 5) when a checked service is not healthy.
fn health(ctx: &Ctx, id: &str, latest: bool, timeout: Duration) -> anyhow::Result<()> {
    let job = if latest {
        None
    } else {
        Some(ctx.block(ctx.client.health_run(id))?.job_id)
    };
    let deadline = std::time::Instant::now() + timeout;
    let grid = loop {
        let g = ctx.block(ctx.client.health(id))?;
        let ours = job.is_none() || g.job_id == job;
        if (ours && g.finished()) || std::time::Instant::now() >= deadline {
            break g;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    if ctx.json() {
        print_json(&grid)?;
    } else {
        show_health(&grid);
    }
    let bad = grid.cells(HealthState::Unhealthy).count() + grid.cells(HealthState::Unknown).count();
    if bad > 0 {
        let not_done = if grid.finished() {
            ""
        } else {
            " (the run had not ended)"
        };
        return Err(Unhealthy(format!(
            "cluster {id}: {bad} service check(s) not healthy{not_done}"
        ))
        .into());
    }
    Ok(())
}

/// The grid: one row per node, one column per service (`-` where the node does not run it), then
/// the output of each check that is not healthy.
fn show_health(g: &ClusterHealth) {
    let mut services: Vec<&str> = g
        .nodes
        .iter()
        .flat_map(|n| n.services.iter().map(|s| s.service.as_str()))
        .collect();
    services.sort();
    services.dedup();
    let mut header = vec!["node", "host"];
    header.extend(services.iter().copied());
    let mut t = table(&header);
    for n in &g.nodes {
        let mut row = vec![n.nodenum.to_string(), n.hostname.clone()];
        for s in &services {
            row.push(
                n.services
                    .iter()
                    .find(|c| c.service == *s)
                    .map_or("-", |c| c.state.as_str())
                    .to_string(),
            );
        }
        t.add_row(row);
    }
    println!("{t}");
    for state in [HealthState::Unhealthy, HealthState::Unknown] {
        for (n, s) in g.cells(state) {
            let out = s.output.as_deref().unwrap_or("").trim();
            println!(
                "{} on {} ({}): {}",
                s.service,
                n.hostname,
                state.as_str(),
                out
            );
        }
    }
    let job = g.job_id.as_deref().unwrap_or("none");
    println!(
        "cluster {}: {} (health run {job}, {})",
        g.cluster_id,
        if g.healthy { "healthy" } else { "not healthy" },
        if g.job_status.is_empty() {
            "never run"
        } else {
            g.job_status.as_str()
        }
    );
}

/// Pauses, resumes or aborts the cluster's job.
fn job_control(ctx: &Ctx, id: &str, what: &str, done: &str) -> anyhow::Result<()> {
    ctx.block(ctx.client.job_control(id, what))?;
    if ctx.json() {
        print_json(&serde_json::json!({ "id": id, "job": done }))
    } else {
        println!("cluster {id}: job {done}");
        Ok(())
    }
}

fn service_action(
    ctx: &Ctx,
    id: &str,
    service: Option<String>,
    action: &str,
    rollout: Option<weft_model::RolloutSpec>,
    job: &JobFlags,
) -> anyhow::Result<()> {
    let r = ctx.block(ctx.client.forcing(job.force).service_action(
        id,
        service.as_deref(),
        action,
        rollout.as_ref(),
        job.dry_run,
    ))?;
    let what = match &service {
        Some(s) => format!("{action} {s} on cluster {id}"),
        None => format!("{action} every service on cluster {id}"),
    };
    started(ctx, id, r, job, &what)
}

/// After a call that starts a job: the plan (dry run), or "started" and optionally the wait.
fn started(ctx: &Ctx, id: &str, r: Started, job: &JobFlags, what: &str) -> anyhow::Result<()> {
    match r {
        Started::Plan(p) => {
            let d = ctx.block(ctx.client.cluster(id))?;
            let kinds =
                NodeKinds::from_template(&d.cluster_template, None, None).with_nodes(&d.nodes);
            show_plan(ctx, &p, &kinds, job.verbose)
        }
        Started::Started => {
            if !ctx.json() {
                println!("{what}");
            }
            if job.wait {
                let d = wait(ctx, id, false)?;
                if ctx.json() {
                    print_json(&d)?;
                }
            } else if ctx.json() {
                print_json(&ctx.block(ctx.client.cluster_status(id))?)?;
            }
            Ok(())
        }
    }
}

/// How long `--wait` waits, once the job has failed, for the cluster to settle (its running tasks
/// and a failed CREATE's clean-up to end) so that it can show the cluster's message.
const SETTLE: Duration = Duration::from_secs(60);

/// Follows the cluster's latest job with a progress bar until it ends. `deleting`: success is
/// `terminated`. A failed job is reported once the cluster has settled (or after [`SETTLE`]),
/// naming the task that failed, its host and service, the reason and "not retried".
pub(super) fn wait(ctx: &Ctx, id: &str, deleting: bool) -> anyhow::Result<ClusterDetails> {
    let mut failed_at: Option<std::time::Instant> = None;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        // `wide_msg` takes what the terminal's width leaves and cuts the rest: one line, never
        // wrapped mid-word.
        indicatif::ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} {wide_msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    loop {
        let d = ctx.block(ctx.client.cluster(id))?;
        let (running, failures) = task_counts(&d);
        if let Some(p) = &d.progress {
            bar.set_length(p.stepstotal);
            bar.set_position(p.stepscompleted);
            bar.set_message(format!(
                "tasks, {running} running, {failures} failed: {} {}",
                p.action,
                p.actionstatus.as_str()
            ));
        }
        bar.tick();
        let status = d.progress.as_ref().map(|p| p.actionstatus);
        let done = match status {
            Some(JobStatus::Complete) => true,
            // A delete aborts the job underway: only the delete job's own failure ends the wait.
            Some(JobStatus::Failed)
                if !deleting
                    || d.progress.as_ref().map(|p| p.action.as_str()) == Some("cluster_delete") =>
            {
                let first = *failed_at.get_or_insert_with(std::time::Instant::now);
                if d.status == ClusterStatus::Pending && first.elapsed() < SETTLE {
                    bar.set_message("failed; waiting for running tasks and clean-up to end");
                    bar.tick();
                    std::thread::sleep(Duration::from_millis(300));
                    continue;
                }
                bar.finish_and_clear();
                let mut msg = format!(
                    "the {} job of cluster {id} failed; the cluster is {}",
                    d.progress
                        .as_ref()
                        .map(|p| p.action.as_str())
                        .unwrap_or("latest"),
                    d.status.as_str()
                );
                match (
                    &d.message,
                    failing_task(&d.nodes, d.latest_job_id.as_deref()),
                ) {
                    (Some(m), _) => msg.push_str(&format!(": {m}")),
                    (None, Some(t)) => msg.push_str(&format!(": {t}")),
                    (None, None) => {}
                }
                if !ctx.json() {
                    super::logs::print_failed(ctx, &d)?;
                }
                return Err(JobFailed(msg).into());
            }
            _ => false,
        } || (deleting && d.status == ClusterStatus::Terminated);
        if done {
            bar.finish_and_clear();
            if !ctx.json() {
                eprintln!(
                    "cluster {id} is {} ({} nodes)",
                    d.status.as_str(),
                    d.nodes.len()
                );
            }
            return Ok(d);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The latest job's task that failed for good, as a line: action, service, host, the reason its
/// worker gave, the end of its output, and "not retried: <reason>" when its failure was fatal
/// (what `--wait` says when the cluster has no message yet). Clean-ups are not the cause.
fn failing_task(nodes: &[Node], latest_job: Option<&str>) -> Option<String> {
    let prefix = latest_job.map(|j| format!("{j}-"));
    let (node, a) = nodes
        .iter()
        .flat_map(|n| n.actions.iter().map(move |a| (n, a)))
        .filter(|(_, a)| a.status == NodeActionStatus::Failed && !a.cleanup)
        .filter(|(_, a)| {
            prefix
                .as_ref()
                .is_none_or(|p| a.task_id.starts_with(p.as_str()))
        })
        .max_by_key(|(_, a)| {
            (
                a.failure.as_ref().is_some_and(|f| !f.retryable),
                a.status_time,
            )
        })?;
    let host = node.properties.hostname.as_deref().unwrap_or(&node.id);
    let service = if a.service.is_empty() {
        String::new()
    } else {
        format!(" of {}", a.service)
    };
    let output = a
        .stderr
        .as_deref()
        .or(a.stdout.as_deref())
        .map(|s| s.trim().lines().last().unwrap_or_default().to_string())
        .unwrap_or_default();
    Some(match &a.failure {
        Some(f) if !f.retryable => format!(
            "{}{service} on {host} failed ({}): {output}; not retried: {}",
            a.action, f.reason, f.reason
        ),
        Some(f) => format!(
            "{}{service} on {host} failed ({}): {output}",
            a.action, f.reason
        ),
        None => format!("{}{service} on {host} failed: {output}", a.action),
    })
}

/// Tasks of the latest job now running, and failed attempts of it.
fn task_counts(d: &ClusterDetails) -> (usize, usize) {
    let prefix = d.latest_job_id.as_ref().map(|j| format!("{j}-"));
    let mut running = 0;
    let mut failed = 0;
    for a in d.nodes.iter().flat_map(|n| &n.actions) {
        if prefix
            .as_ref()
            .is_some_and(|p| !a.task_id.starts_with(p.as_str()))
        {
            continue;
        }
        match a.status {
            NodeActionStatus::InProgress => running += 1,
            NodeActionStatus::Failed => failed += 1,
            NodeActionStatus::Complete => {}
        }
    }
    (running, failed)
}

/// The plan: its layout grouped and a summary; the task table with `verbose`.
fn show_plan(ctx: &Ctx, p: &PlanView, kinds: &NodeKinds, verbose: bool) -> anyhow::Result<()> {
    if ctx.json() {
        return print_json(p);
    }
    println!(
        "plan {}: {}",
        if p.id.is_empty() { "(dry run)" } else { &p.id },
        p.action
    );
    print!("{}", render_groups(&groups(p, kinds)));
    println!("{}", summary(p));
    if let Some(c) = &p.cost {
        println!("{}", super::plan_view::cost_line(c));
    }
    if !verbose {
        return Ok(());
    }
    let mut t = table(&["STAGE", "TASK", "SERVICE", "NODE"]);
    for (i, stage) in p.stages.iter().enumerate() {
        for task in stage {
            t.add_row(vec![
                (i + 1).to_string(),
                task.task_name.clone(),
                task.service.clone(),
                task.node_id.clone(),
            ]);
        }
    }
    println!("{t}");
    Ok(())
}

pub(super) fn access_ip(n: &Node) -> Option<&str> {
    let ips = &n.properties.ipaddresses;
    ips.get("access_v4")
        .or_else(|| ips.get("bind_v4"))
        .or_else(|| ips.values().next())
        .map(String::as_str)
}

fn show_cluster(d: &ClusterDetails) {
    let mut t = table(&["FIELD", "VALUE"]);
    let job = match (&d.latest_job_id, &d.progress) {
        (Some(j), Some(p)) => format!(
            "{j}: {} {} ({}/{})",
            p.action,
            p.actionstatus.as_str(),
            p.stepscompleted,
            p.stepstotal
        ),
        (Some(j), None) => j.clone(),
        _ => String::new(),
    };
    let rows: Vec<(&str, String)> = vec![
        ("id", d.id.clone()),
        ("name", d.name.clone()),
        ("status", d.status.as_str().into()),
        ("template", d.cluster_template.name.clone()),
        ("provider", d.provider.name.clone()),
        ("owner", d.account.user_id.clone()),
        ("services", d.services.join(", ")),
        ("created", time(d.create_time)),
        ("lease ends", time(d.expire_time)),
        ("last job", job),
        ("message", d.message.clone().unwrap_or_default()),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    println!("{t}");
    let mut n = table(&[
        "NODE",
        "#",
        "HOSTNAME",
        "ADDRESS",
        "SSH USER",
        "SERVICES",
        "LAST ACTION",
    ]);
    for node in &d.nodes {
        let last = node
            .actions
            .last()
            .map(|a| {
                let what = format!("{} {} {:?}", a.action, a.service, a.status).to_lowercase();
                what + &super::logs::attempt_text(a)
            })
            .unwrap_or_default();
        n.add_row(vec![
            node.id.clone(),
            node.properties.nodenum.to_string(),
            node.properties.hostname.clone().unwrap_or_default(),
            access_ip(node).unwrap_or("").to_string(),
            node.properties.sshuser.clone(),
            node.properties.services.join(", "),
            last,
        ]);
    }
    println!("{n}");
    for l in &d.links {
        if l.urls.is_empty() {
            println!("link {}: {}", l.label, l.url);
        }
        for u in &l.urls {
            println!("link {}: {u}", l.label);
        }
    }
}

/// Which nodes a page showed and how to see the next, when the cluster has more.
fn page_note(id: &str, p: weft_client::api::NodesPage) -> Option<String> {
    let end = p.offset + p.count;
    if p.offset == 0 && end >= p.total {
        return None;
    }
    let mut note = format!("nodes {} to {end} of {}", (p.offset + 1).min(end), p.total);
    if end < p.total {
        note += &format!(
            "; next: weft cluster show {id} --offset {end} --limit {}",
            p.count.max(1)
        );
    }
    Some(note)
}

pub(super) fn find_node<'a>(d: &'a ClusterDetails, which: &str) -> anyhow::Result<&'a Node> {
    d.nodes
        .iter()
        .find(|n| n.id == which)
        .or_else(|| {
            d.nodes
                .iter()
                .find(|n| n.properties.hostname.as_deref() == Some(which))
        })
        .or_else(|| {
            d.nodes
                .iter()
                .find(|n| n.properties.nodenum.to_string() == which)
        })
        .ok_or_else(|| {
            UsageError(format!(
                "cluster {} has no node `{which}` (give a node id, hostname or number)",
                d.id
            ))
            .into()
        })
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `1700000000000` (ms since the epoch) or `+48h` / `+30m` / `+2d` / `+90s` from `now`.
pub(super) fn parse_until(s: &str, now: i64) -> anyhow::Result<i64> {
    let bad = || {
        UsageError(format!(
            "--until {s}: give ms since the epoch or + and a duration (+48h, +30d, +1h30m)"
        ))
    };
    if let Some(rel) = s.strip_prefix('+') {
        let d = super::duration::parse(rel).map_err(|_| bad())?;
        let ms = i64::try_from(d.as_millis()).map_err(|_| bad())?;
        return Ok(now.saturating_add(ms));
    }
    s.parse().map_err(|_| bad().into())
}

/// `--lease`: a duration as milliseconds; `0` is forever.
pub(super) fn lease_ms(s: &str) -> Result<i64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    let d = super::duration::parse(s)?;
    i64::try_from(d.as_millis()).map_err(|_| format!("{s}: too long"))
}

/// Applies `a.b=v` pairs to a config object; `v` is JSON when it parses, else a string.
pub(super) fn apply_kv(config: &mut Map<String, Value>, pairs: &[String]) -> anyhow::Result<()> {
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| UsageError(format!("--config {pair}: expected key=value")))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        let mut parts: Vec<&str> = k.split('.').collect();
        let last = parts
            .pop()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| UsageError(format!("--config {pair}: empty key")))?;
        let mut obj = &mut *config;
        for p in parts {
            let entry = obj
                .entry(p.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            obj = entry.as_object_mut().expect("just made an object");
        }
        obj.insert(last.to_string(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_task_is_named_with_its_host_reason_and_not_retried() {
        let nodes: Vec<Node> = serde_json::from_value(serde_json::json!([{
            "id": "n1", "clusterId": "1", "services": [],
            "properties": {"hostname": "shop-1001.local", "nodenum": 1, "hardwaretype": "small",
                           "imagetype": "host", "sshuser": "root"},
            "actions": [
                {"taskId": "j1-001", "service": "", "action": "CREATE", "submitTime": 1,
                 "statusTime": 2, "status": "failed", "stderr": "out\nec2: AuthFailure: no",
                 "failure": {"retryable": false, "reason": "auth"}},
                {"taskId": "j1-001-cleanup", "service": "", "action": "DELETE", "submitTime": 3,
                 "statusTime": 4, "status": "failed", "stderr": "ec2: AuthFailure: no",
                 "cleanup": true},
                {"taskId": "j0-004", "service": "web", "action": "INSTALL", "submitTime": 0,
                 "statusTime": 9, "status": "failed", "stderr": "older job"}]}]))
        .unwrap();
        assert_eq!(
            failing_task(&nodes, Some("j1")).as_deref(),
            Some(
                "CREATE on shop-1001.local failed (auth): ec2: AuthFailure: no; not retried: auth"
            )
        );
        assert_eq!(
            failing_task(&nodes, Some("j0")).as_deref(),
            Some("INSTALL of web on shop-1001.local failed: older job")
        );
    }

    #[test]
    fn until_reads_absolute_and_relative_times() {
        assert_eq!(parse_until("+48h", 1000).unwrap(), 1000 + 48 * 3_600_000);
        assert_eq!(parse_until("+2d", 0).unwrap(), 2 * 86_400_000);
        assert_eq!(parse_until("12345", 0).unwrap(), 12345);
        assert!(parse_until("+3w", 0).is_err());
        assert_eq!(parse_until("+1h30m", 0).unwrap(), 5_400_000);
        assert_eq!(lease_ms("48h").unwrap(), 48 * 3_600_000);
        assert_eq!(lease_ms("0").unwrap(), 0);
        assert!(lease_ms("172800000").is_err());
        assert!(parse_until("soon", 0).is_err());
    }

    #[test]
    fn config_pairs_nest_and_read_json() {
        let mut c = Map::new();
        apply_kv(
            &mut c,
            &["kv.port=7000".into(), "kv.name=x".into(), "on=true".into()],
        )
        .unwrap();
        assert_eq!(
            Value::Object(c),
            serde_json::json!({"kv": {"port": 7000, "name": "x"}, "on": true})
        );
        assert!(apply_kv(&mut Map::new(), &["novalue".into()]).is_err());
    }

    #[test]
    fn a_page_says_where_it_is_and_how_to_see_the_next() {
        use weft_client::api::NodesPage;
        let p = |offset, count, total| NodesPage {
            total,
            offset,
            count,
        };
        assert_eq!(
            page_note("7", p(0, 3, 3)),
            None,
            "a whole cluster needs no note"
        );
        assert_eq!(
            page_note("7", p(0, 100, 10_000)).unwrap(),
            "nodes 1 to 100 of 10000; next: weft cluster show 7 --offset 100 --limit 100"
        );
        assert_eq!(
            page_note("7", p(9_900, 100, 10_000)).unwrap(),
            "nodes 9901 to 10000 of 10000"
        );
    }

    #[test]
    fn retries_read_as_attempts() {
        let mut a: weft_model::NodeAction = serde_json::from_value(serde_json::json!({
            "taskId": "t", "service": "s", "action": "START", "submitTime": 1, "statusTime": 2,
            "status": "complete"
        }))
        .unwrap();
        assert_eq!(
            super::super::logs::attempt_text(&a),
            "",
            "a first try that worked says nothing"
        );
        a.status = NodeActionStatus::Failed;
        a.attempt = 2;
        a.max_attempts = 3;
        assert_eq!(super::super::logs::attempt_text(&a), ", attempt 2 of 3");
        a.max_attempts = 0;
        assert_eq!(super::super::logs::attempt_text(&a), ", attempt 2");
    }
}
