//! `weft solve`: the offline layout solver for template authors. Reads a v2 cluster template,
//! solves a layout (or a change to an existing one) and prints it as JSON or as a table.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use weft_model::{lenient, ClusterTemplate};
use weft_solver::{Catalog, Change, ExistingNode, Layout, SolveError, TypeOffer};

/// Arguments of `weft solve`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXISTING_HELP)]
pub(crate) struct Args {
    /// The v2 cluster template (JSON; Coopr's lenient syntax is accepted).
    #[arg(long, value_name = "T.json")]
    pub template: PathBuf,
    /// Cluster size. With --existing it defaults to the current size; a larger size expands the
    /// cluster, a smaller one shrinks it.
    #[arg(long, value_name = "N")]
    pub size: Option<u64>,
    /// Offered hardware types, most preferred (smallest) first.
    #[arg(long, value_name = "a,b", value_delimiter = ',', required = true)]
    pub hardwaretypes: Vec<String>,
    /// Offered image types, most preferred first.
    #[arg(long, value_name = "x,y", value_delimiter = ',', required = true)]
    pub imagetypes: Vec<String>,
    /// Services of the cluster (default: the template's default services). With --existing, naming
    /// services the cluster lacks adds them; leaving one out removes it.
    #[arg(long, value_name = "s1,s2", value_delimiter = ',')]
    pub services: Vec<String>,
    /// The cluster's current layout, in the output format (see below).
    #[arg(long, value_name = "L.json")]
    pub existing: Option<PathBuf>,
    /// `json` (the format --existing reads) or `text` (a table for people).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

/// How `weft solve` prints the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Json,
    Text,
}

const EXISTING_HELP: &str = "\
Output (and the --existing format):
  {\"layout\":[{\"hardwaretype\":\"small\",\"imagetype\":\"centos\",\"services\":[\"a\",\"b\"],\"count\":3}, ...]}
  Groups are sorted by hardware type, image type and services; services are sorted.
  In --existing, groups are read in order as the cluster's nodes, oldest first (so a shrink removes
  nodes of the last groups first).

With --existing, exactly one change is made: add services (--services lists new ones), remove one
service (--services leaves it out), expand or shrink (--size), or none (check the layout against
the template, e.g. a new template version).

Exit status: 0 with the layout on stdout; 2 when no layout exists (the reason on stderr);
1 on bad input.";

#[derive(Debug, Serialize, Deserialize)]
struct LayoutFile {
    layout: Vec<Group>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Group {
    hardwaretype: String,
    imagetype: String,
    services: Vec<String>,
    count: u64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let body = std::fs::read(&args.template)
        .with_context(|| format!("reading {}", args.template.display()))?;
    let template: ClusterTemplate = lenient::parse_as(&body, "a cluster template")
        .with_context(|| format!("in {}", args.template.display()))?;
    let hardware = TypeOffer::new(args.hardwaretypes.iter().filter(|s| !s.is_empty()).cloned());
    let images = TypeOffer::new(args.imagetypes.iter().filter(|s| !s.is_empty()).cloned());
    check_known(&template, &args.services)?;
    let cat = Catalog {
        template: &template,
        hardware: &hardware,
        images: &images,
        services: None,
    };
    let result = match &args.existing {
        None => {
            let Some(size) = args.size else {
                bail!("--size is required without --existing")
            };
            weft_solver::create(&cat, &args.services, size)
        }
        Some(path) => {
            let nodes = read_existing(path)?;
            let change = infer_change(&nodes, &args)?;
            weft_solver::change(&cat, &nodes, &change)
        }
    };
    match result {
        Ok(layout) => {
            let file = to_file(&layout);
            let text = match args.format {
                Format::Json => serde_json::to_string(&file)? + "\n",
                Format::Text => as_table(&file),
            };
            super::print_out(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.is_no_layout() => {
            eprintln!("{e}");
            Ok(ExitCode::from(2))
        }
        Err(e @ SolveError::SearchLimit { .. }) => {
            eprintln!("{e}");
            Ok(ExitCode::from(2))
        }
        Err(e) => bail!(e),
    }
}

/// The layout as a table: one row per group of nodes, then the total.
fn as_table(file: &LayoutFile) -> String {
    let rows: Vec<[String; 4]> = file
        .layout
        .iter()
        .map(|g| {
            [
                g.count.to_string(),
                g.hardwaretype.clone(),
                g.imagetype.clone(),
                g.services.join(", "),
            ]
        })
        .collect();
    let header = ["NODES", "HARDWARE", "IMAGE", "SERVICES"].map(String::from);
    let mut widths = [0usize; 3];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        let line = format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let total: u64 = file.layout.iter().map(|g| g.count).sum();
    out.push_str(&format!("{total} nodes in {} groups\n", file.layout.len()));
    out
}

/// Without a service catalog, a requested service must at least be mentioned by the template.
fn check_known(t: &ClusterTemplate, services: &[String]) -> anyhow::Result<()> {
    let c = &t.constraints;
    let mentioned = |s: &String| {
        t.defaults.services.contains(s)
            || t.compatibility.services.contains(s)
            || c.services.contains_key(s)
            || c.layout
                .mustcoexist
                .iter()
                .chain(&c.layout.cantcoexist)
                .any(|r| r.contains(s))
    };
    match services.iter().find(|s| !mentioned(s)) {
        Some(s) => bail!(
            "unknown service {s}: template {} does not mention it",
            t.name
        ),
        None => Ok(()),
    }
}

fn to_file(layout: &Layout) -> LayoutFile {
    LayoutFile {
        layout: layout
            .groups()
            .into_iter()
            .map(|g| Group {
                hardwaretype: g.hardwaretype,
                imagetype: g.imagetype,
                services: g.services,
                count: g.count,
            })
            .collect(),
    }
}

fn read_existing(path: &PathBuf) -> anyhow::Result<Vec<ExistingNode>> {
    let body = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file: LayoutFile =
        lenient::parse_as(&body, "a layout").with_context(|| format!("in {}", path.display()))?;
    let mut nodes = Vec::new();
    for g in file.layout {
        for _ in 0..g.count {
            nodes.push(ExistingNode {
                id: format!("node-{}", nodes.len() + 1),
                hardwaretype: g.hardwaretype.clone(),
                imagetype: g.imagetype.clone(),
                services: g.services.iter().cloned().collect(),
            });
        }
    }
    if nodes.is_empty() {
        bail!("{}: the existing layout has no nodes", path.display());
    }
    Ok(nodes)
}

fn infer_change(nodes: &[ExistingNode], args: &Args) -> anyhow::Result<Change> {
    let current: BTreeSet<&String> = nodes.iter().flat_map(|n| &n.services).collect();
    let wanted: BTreeSet<&String> = if args.services.is_empty() {
        current.clone()
    } else {
        args.services.iter().collect()
    };
    let added: Vec<String> = wanted.difference(&current).map(|s| s.to_string()).collect();
    let removed: Vec<String> = current.difference(&wanted).map(|s| s.to_string()).collect();
    let count = nodes.len() as u64;
    let size = args.size.unwrap_or(count);
    let mut changes = Vec::new();
    if !added.is_empty() {
        changes.push(Change::AddServices(added));
    }
    match removed.as_slice() {
        [] => {}
        [one] => changes.push(Change::RemoveService(one.clone())),
        more => bail!(
            "remove one service at a time (--services leaves out {})",
            more.join(", ")
        ),
    }
    if size > count {
        changes.push(Change::Expand(size - count));
    } else if size < count {
        changes.push(Change::Shrink(count - size));
    }
    match changes.len() {
        0 => Ok(Change::Retemplate(Vec::new())),
        1 => Ok(changes.remove(0)),
        _ => bail!("make one change at a time: add services, remove a service, or change the size"),
    }
}
