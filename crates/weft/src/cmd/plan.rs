//! `weft plan`: offline plan preview. Solves the layout with weft-solver (from a template, or as a
//! change to an existing layout), then plans the operation with weft-planner and prints the task
//! DAG and its stage view as JSON, or a readable text rendering.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Deserialize;
use weft_model::{lenient, ClusterTemplate, Service};
use weft_planner::{Operation, PlanInput, PlanNode};
use weft_solver::{Catalog, Change, ExistingNode, Layout, SolveError, TypeOffer};

/// The operations `weft plan` previews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Op {
    Create,
    Delete,
    AddServices,
    RemoveService,
    Expand,
    Shrink,
    Reconfigure,
    Start,
    Stop,
    Restart,
    Upgrade,
    RollbackUpgrade,
    ChangeTemplate,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Json,
    Text,
}

/// Arguments of `weft plan`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = HELP)]
pub(crate) struct Args {
    /// The v2 cluster template (JSON; Coopr's lenient syntax is accepted).
    #[arg(long, value_name = "T.json")]
    pub template: PathBuf,
    /// The service definitions: a JSON list of v2 service objects.
    #[arg(long, value_name = "S.json")]
    pub services: PathBuf,
    /// Cluster size: required for create; for expand and shrink, the size after the change.
    #[arg(long, value_name = "N")]
    pub size: Option<u64>,
    /// Offered hardware types, most preferred first.
    #[arg(long, value_name = "a,b", value_delimiter = ',', required = true)]
    pub hardwaretypes: Vec<String>,
    /// Offered image types, most preferred first.
    #[arg(long, value_name = "x,y", value_delimiter = ',', required = true)]
    pub imagetypes: Vec<String>,
    /// The operation to plan.
    #[arg(long, value_enum)]
    pub operation: Op,
    /// The cluster's current layout, in `weft solve`'s output format. Required except for create.
    #[arg(long, value_name = "L.json")]
    pub existing: Option<PathBuf>,
    /// The service to remove, start, stop, restart or upgrade (start/stop/restart: all if omitted).
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
    /// Services to add (add-services) or to add with a template change.
    #[arg(long, value_name = "s1,s2", value_delimiter = ',')]
    pub add: Vec<String>,
    /// Reconfigure with a restart (STOP, CONFIGURE, START).
    #[arg(long)]
    pub restart: bool,
    /// Upgrade batch size, in nodes.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub batch_size: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
}

const HELP: &str = "\
The layout comes from weft-solver: `create` solves --size nodes from the template; other operations
read --existing (groups of {\"hardwaretype\",\"imagetype\",\"services\",\"count\"} under \"layout\", as
printed by `weft solve`; nodes are numbered from 1000 in that order) and solve the change.

JSON output: {\"action\", \"tasks\":[{\"index\",\"nodeId\",\"taskName\",\"service\"}], \"gates\",
\"edges\":[{\"from\":\"t0\"|\"g0\",\"to\",\"kind\":\"dependency\"|\"node_order\"}], \"stages\"} where
\"stages\" is Coopr's plan format with task ids 001, 002, ...

Exit status: 0 with the plan on stdout; 2 when no layout exists; 1 on bad input.";

#[derive(Debug, Deserialize)]
struct LayoutFile {
    layout: Vec<Group>,
}

#[derive(Debug, Deserialize)]
struct Group {
    hardwaretype: String,
    imagetype: String,
    services: Vec<String>,
    count: u64,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    lenient::parse_as(&body, what).with_context(|| format!("in {}", path.display()))
}

fn plan_node(
    id: String,
    nodenum: u64,
    hardwaretype: &str,
    imagetype: &str,
    services: BTreeSet<String>,
) -> PlanNode {
    PlanNode {
        hostname: format!("{id}.local"),
        ipaddresses: BTreeMap::from([
            (
                "access_v4".to_string(),
                format!("192.0.2.{}", nodenum % 250),
            ),
            (
                "bind_v4".to_string(),
                format!("10.0.{}.{}", nodenum / 250 % 250, nodenum % 250),
            ),
        ]),
        id,
        nodenum,
        hardwaretype: hardwaretype.to_string(),
        imagetype: imagetype.to_string(),
        services,
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let template: ClusterTemplate = read(&args.template, "a cluster template")?;
    let services: Vec<Service> = read(&args.services, "a list of services")?;
    let hardware = TypeOffer::new(args.hardwaretypes.iter().filter(|s| !s.is_empty()).cloned());
    let images = TypeOffer::new(args.imagetypes.iter().filter(|s| !s.is_empty()).cloned());
    let cat = Catalog {
        template: &template,
        hardware: &hardware,
        images: &images,
        services: Some(&services),
    };
    let before = existing_layout(&args)?;
    let solved = match solve(&args, &cat, &before)? {
        Ok(s) => s,
        Err(e) if e.is_no_layout() || matches!(e, SolveError::SearchLimit { .. }) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => bail!(e),
    };
    let after = layout_after(&before, solved.as_ref());
    let op = operation(&args)?;
    let (before, after) = match args.operation {
        Op::Create => (Vec::new(), after),
        Op::Delete => (before, Vec::new()),
        Op::AddServices | Op::RemoveService | Op::Expand | Op::Shrink | Op::ChangeTemplate => {
            (before, after)
        }
        _ => (Vec::new(), after),
    };
    let input = PlanInput {
        before,
        after,
        services,
        config: serde_json::Value::Object(template.defaults.config.clone()),
        rollout: None,
        force: false,
    };
    let plan = weft_planner::plan(&op, &input)?;
    match args.format {
        Format::Json => super::print_out(
            &(serde_json::to_string_pretty(&plan.to_json(|i| format!("{:03}", i + 1)))? + "\n"),
        )?,
        Format::Text => super::print_out(&plan.render_text())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The layout of `--existing` as planner nodes (`node-1`, numbered from 1000, in the file's
/// order); none for create, which takes none.
fn existing_layout(args: &Args) -> anyhow::Result<Vec<PlanNode>> {
    let path = match &args.existing {
        None if args.operation == Op::Create => return Ok(Vec::new()),
        None => bail!("--existing is required for {:?}", args.operation),
        Some(_) if args.operation == Op::Create => bail!("create takes no --existing layout"),
        Some(path) => path,
    };
    let file: LayoutFile = read(path, "a layout")?;
    let mut nodes = Vec::new();
    for g in &file.layout {
        for _ in 0..g.count {
            let k = nodes.len() as u64;
            let services = g.services.iter().cloned().collect();
            nodes.push(plan_node(
                format!("node-{}", k + 1),
                1000 + k,
                &g.hardwaretype,
                &g.imagetype,
                services,
            ));
        }
    }
    if nodes.is_empty() {
        bail!("{}: the existing layout has no nodes", path.display());
    }
    Ok(nodes)
}

/// `--service`, which the operation needs.
fn need_service(args: &Args) -> anyhow::Result<String> {
    args.service
        .clone()
        .with_context(|| format!("{:?} needs --service", args.operation))
}

/// The solver's layout after the operation, for those that change the layout (`Ok(None)` for the
/// others); the outer error is bad input.
fn solve(
    args: &Args,
    cat: &Catalog<'_>,
    before: &[PlanNode],
) -> anyhow::Result<Result<Option<Layout>, SolveError>> {
    let existing: Vec<ExistingNode> = before
        .iter()
        .map(|n| ExistingNode {
            id: n.id.clone(),
            hardwaretype: n.hardwaretype.clone(),
            imagetype: n.imagetype.clone(),
            services: n.services.clone(),
        })
        .collect();
    let count = before.len() as u64;
    let change = match args.operation {
        Op::Create => {
            let size = args.size.context("create needs --size")?;
            return Ok(weft_solver::create(cat, &[], size).map(Some));
        }
        Op::AddServices => {
            if args.add.is_empty() {
                bail!("add-services needs --add s1,s2");
            }
            Change::AddServices(args.add.clone())
        }
        Op::RemoveService => Change::RemoveService(need_service(args)?),
        Op::Expand => {
            let size = args
                .size
                .context("expand needs --size (the size after expanding)")?;
            if size <= count {
                bail!("expand: --size {size} must be larger than the current {count} nodes");
            }
            Change::Expand(size - count)
        }
        Op::Shrink => {
            let size = args
                .size
                .context("shrink needs --size (the size after shrinking)")?;
            if size >= count {
                bail!("shrink: --size {size} must be smaller than the current {count} nodes");
            }
            Change::Shrink(count - size)
        }
        Op::ChangeTemplate => Change::Retemplate(args.add.clone()),
        _ => return Ok(Ok(None)),
    };
    Ok(weft_solver::change(cat, &existing, &change).map(Some))
}

/// The layout after the operation, as planner nodes: kept nodes keep their numbers, new ones
/// are numbered after the existing ones; `before` when nothing was solved.
fn layout_after(before: &[PlanNode], solved: Option<&Layout>) -> Vec<PlanNode> {
    let Some(layout) = solved else {
        return before.to_vec();
    };
    let by_id: BTreeMap<&str, &PlanNode> = before.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut next = 1000 + before.len() as u64;
    layout
        .nodes
        .iter()
        .map(|n| {
            let services: BTreeSet<String> = n.services.iter().cloned().collect();
            match n.id.as_deref().and_then(|id| by_id.get(id)) {
                Some(old) => PlanNode {
                    services,
                    ..(*old).clone()
                },
                None => {
                    next += 1;
                    let k = next - 1;
                    plan_node(
                        format!("node-{}", k - 999),
                        k,
                        &n.hardwaretype,
                        &n.imagetype,
                        services,
                    )
                }
            }
        })
        .collect()
}

/// The planner's operation for `--operation` and its flags.
fn operation(args: &Args) -> anyhow::Result<Operation> {
    Ok(match args.operation {
        Op::Create => Operation::Create,
        Op::Delete => Operation::Delete,
        Op::AddServices => Operation::AddServices,
        Op::RemoveService => Operation::RemoveService {
            service: need_service(args)?,
        },
        Op::Expand => Operation::Expand,
        Op::Shrink => Operation::Shrink,
        Op::ChangeTemplate => Operation::ChangeTemplate { restart: false },
        Op::Reconfigure => Operation::Reconfigure {
            restart: args.restart,
        },
        Op::Start => Operation::Start {
            service: args.service.clone(),
        },
        Op::Stop => Operation::Stop {
            service: args.service.clone(),
        },
        Op::Restart => Operation::Restart {
            service: args.service.clone(),
        },
        Op::Upgrade => Operation::Upgrade {
            service: need_service(args)?,
            batch_size: args.batch_size,
        },
        Op::RollbackUpgrade => Operation::RollbackUpgrade {
            service: need_service(args)?,
            batch_size: args.batch_size,
            nodes: None,
        },
    })
}
