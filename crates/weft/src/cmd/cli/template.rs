//! `weft template ...`: the catalog commands, and `weft template test`, which checks templates
//! offline as CI would (the rules are `weft_engine::lint`; this only loads input and prints).
//!
//! Exit codes of `test`, as the CLI's other checks: 0 no problem, 5 problems found, 1 unusable input (a file missing or not
//! JSON, a template that does not read as one, a name the catalog lacks); the server's answers
//! keep the client's codes (2 refused, 3 unreachable).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::Value;
use weft_client::api::Kind;
use weft_client::PluginKind;
use weft_engine::lint::{test_template, Check, TemplateReport};
use weft_model::{lenient, CatalogExport, ClusterTemplate, PluginType};

use super::{catalog, print_json, Conn, Ctx, Output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    #[command(flatten)]
    Catalog(catalog::Cmd),
    /// Check templates offline, as CI would (exit 5 on problems, 1 on unusable input).
    ///
    /// The checks: the template resolves; what it names exists; its defaults are compatible;
    /// every size in range has a layout; its macros resolve; its services' actions have a known
    /// automator and its fields; a create plan builds at the smallest and largest size.
    #[command(after_long_help = TEST_HELP)]
    Test(TestArgs),
    /// What moving each live cluster on another version to this one would do: the layout
    /// change, the plan in short, or why it cannot move.
    Impact {
        /// The template's name.
        name: String,
        /// The version to move to (default: the latest).
        #[arg(long)]
        version: Option<u64>,
    },
}

#[derive(Debug, clap::Args)]
struct TestArgs {
    /// A JSON file with a template, an array of them or a catalog export; or a template's name.
    target: String,
    /// The catalog to test against: an export (`weft catalog export`) or a directory holding
    /// catalog.json [default: the server's catalog].
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
}

const TEST_HELP: &str = "\
A file's templates replace those of the same name in the catalog. Without --catalog the server's
catalog is read (GET /v2/export with the usual connection flags). Service actions are checked
against the automator types weft's provisioner offers, plus those of the server (without
--catalog) or those the catalog file lists under \"automatortypes\".

Sizes are scanned from constraints.size.min, at most 100 of them; each default provider (or,
without one, each provider that offers hardware and image types) is tried.

-o json prints {\"passed\": bool, \"templates\": [{\"template\", \"passed\", \"problems\":
[{\"check\", \"field\", \"message\"}], \"sizes\": [{\"provider\", \"scanned\", \"solved\",
\"unsolved\": [{\"from\", \"to\", \"reason\"}]}], \"plans\": [{\"provider\", \"size\", \"tasks\"}],
\"notes\"}]}.

Exit status: 0 no problem; 5 problems found; 1 unusable input (file missing, not JSON, not a
template, a name the catalog lacks); 3 the server could not be reached.";

/// Input `template test` cannot use: a file missing or not JSON, a template that does not read
/// as one, a name the catalog lacks (exit 1, as any bad input).
#[derive(Debug)]
pub(crate) struct Unusable(pub String);

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unusable {}

/// `template test` found problems (exit 5, as a check that finds a problem).
#[derive(Debug)]
pub(crate) struct Problems(pub String);

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Problems {}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    match a.cmd {
        Cmd::Catalog(cmd) => catalog::run_cmd(Kind::ClusterTemplate, &a.conn, cmd),
        Cmd::Test(t) => test(&a.conn, &t),
        Cmd::Impact { name, version } => {
            super::declared::impact(&super::Ctx::new(&a.conn)?, &name, version)
        }
    }
}

/// Loads the catalog and the templates, tests each, prints the reports.
fn test(conn: &Conn, a: &TestArgs) -> anyhow::Result<()> {
    let (catalog, mut automators) = match &a.catalog {
        Some(path) => catalog_file(path)?,
        None => server_catalog(conn)?,
    };
    for t in crate::cmd::provisioner::automator_types() {
        if !automators.iter().any(|x| x.name == t.name) {
            automators.push(t);
        }
    }
    let templates = targets(&a.target, &catalog)?;
    let reports: Vec<TemplateReport> = templates
        .iter()
        .map(|t| test_template(&catalog, t, &automators))
        .collect();
    let passed = reports.iter().all(|r| r.passed);
    if conn.output == Output::Json {
        print_json(&serde_json::json!({"passed": passed, "templates": reports}))?;
    } else {
        for r in &reports {
            print!("{}", render(r));
        }
    }
    if passed {
        return Ok(());
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.template.as_str())
        .collect();
    let n: usize = reports.iter().map(|r| r.problems.len()).sum();
    Err(Problems(format!("{n} problem(s) in {}", failed.join(", "))).into())
}

/// Reads a file, as unusable input when it cannot be read or is not JSON.
fn read_json(path: &Path) -> anyhow::Result<Value> {
    let bytes =
        std::fs::read(path).map_err(|e| Unusable(format!("reading {}: {e}", path.display())))?;
    lenient::parse(&bytes)
        .map_err(|e| Unusable(format!("{} is not JSON: {e}", path.display())).into())
}

/// A catalog export file (or `DIR/catalog.json`), with the automator types it lists.
fn catalog_file(path: &Path) -> anyhow::Result<(CatalogExport, Vec<PluginType>)> {
    let file = if path.is_dir() {
        path.join("catalog.json")
    } else {
        path.to_path_buf()
    };
    let v = read_json(&file)?;
    let automators = match v.get("automatortypes") {
        Some(list) => lenient::from_value(list.clone())
            .map_err(|e| Unusable(format!("{}: automatortypes: {e}", file.display())))?,
        None => Vec::new(),
    };
    let catalog = lenient::from_value(v)
        .map_err(|e| Unusable(format!("{} is not a catalog export: {e}", file.display())))?;
    Ok((catalog, automators))
}

/// The server's catalog and the automator types its provisioners registered.
fn server_catalog(conn: &Conn) -> anyhow::Result<(CatalogExport, Vec<PluginType>)> {
    let ctx = Ctx::new(conn)?;
    let catalog = ctx.block(ctx.client.export())?;
    let automators = ctx.block(ctx.client.plugin_types(PluginKind::Automator))?;
    Ok((catalog, automators))
}

/// The templates `target` names: a file's (one, an array, or a catalog export's), or the
/// catalog's template of that name.
fn targets(target: &str, catalog: &CatalogExport) -> anyhow::Result<Vec<ClusterTemplate>> {
    let path = Path::new(target);
    let looks_like_path = target.contains('/') || target.ends_with(".json");
    if !path.exists() && !looks_like_path {
        return match catalog.clustertemplates.iter().find(|t| t.name == target) {
            Some(t) => Ok(vec![t.clone()]),
            None => Err(Unusable(format!(
                "no file {target}, and no template {target} in the catalog"
            ))
            .into()),
        };
    }
    let v = read_json(path)?;
    let (items, whole) = match v {
        Value::Array(items) => (items, false),
        Value::Object(ref o) if o.contains_key("clustertemplates") => (
            o["clustertemplates"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            true,
        ),
        one => (vec![one], false),
    };
    let one = items.len() == 1 && !whole;
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = match (whole, one) {
            (true, _) => format!(" clustertemplates[{i}]"),
            (false, true) => String::new(),
            (false, false) => format!(" [{i}]"),
        };
        let t: ClusterTemplate = lenient::from_value(item)
            .map_err(|e| Unusable(format!("{target}{at}: not a cluster template: {e}")))?;
        out.push(t);
    }
    if out.is_empty() {
        return Err(Unusable(format!("{target} holds no cluster template")).into());
    }
    Ok(out)
}

/// A report for people: a PASS or FAIL line per check with its problems, the sizes and plans.
fn render(r: &TemplateReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let verdict = if r.passed { "PASS" } else { "FAIL" };
    let _ = writeln!(out, "template {}: {verdict}", r.template);
    for check in Check::ALL {
        let problems: Vec<_> = r.problems.iter().filter(|p| p.check == check).collect();
        let mark = if problems.is_empty() { "PASS" } else { "FAIL" };
        let _ = writeln!(out, "  {mark}  {:<10}  {}", check.name(), check.title());
        for p in problems {
            let _ = writeln!(out, "          {}: {}", p.field, p.message);
        }
    }
    for s in &r.sizes {
        let solved: Vec<String> = s.solved.iter().map(|[a, b]| span(*a, *b)).collect();
        let solved = if solved.is_empty() {
            "none".to_string()
        } else {
            solved.join(", ")
        };
        let _ = writeln!(
            out,
            "  sizes {} (provider {}): layouts at {solved}",
            span(s.scanned[0], s.scanned[1]),
            s.provider
        );
    }
    for p in &r.plans {
        let _ = writeln!(
            out,
            "  plan: create at {} nodes (provider {}): {} tasks",
            p.size, p.provider, p.tasks
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

fn span(a: u64, b: u64) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}..{b}")
    }
}
