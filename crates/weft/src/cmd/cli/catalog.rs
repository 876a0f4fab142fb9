//! `weft provider|hardwaretype|imagetype|service|template|partialtemplate ...` and
//! `weft catalog export|import`.
//!
//! Entities are shown and edited as the API's JSON, as it is (the server validates them).

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Subcommand;
use serde_json::Value;
use weft_client::api::Kind;
use weft_model::CatalogExport;

use super::{confirm, parse_json, print_json, read_input, table, Conn, Ctx, UsageError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub(super) enum Cmd {
    /// List them.
    List,
    /// Show one (its JSON).
    Show {
        /// Its name.
        name: String,
    },
    /// Create from a JSON file (`-` for stdin); a JSON array creates each element.
    Create {
        /// The JSON file (`-` for stdin).
        #[arg(short = 'f', long = "file")]
        file: String,
    },
    /// Open the JSON in $VISUAL or $EDITOR and write back what you save (a new version).
    Edit {
        /// Its name.
        name: String,
    },
    /// Delete one.
    Delete {
        /// Its name.
        name: String,
    },
    /// Every stored version, oldest first, with what each changed from the one before.
    History {
        /// Its name.
        name: String,
    },
    /// What changed from one version to another (services, constraints, config, links...).
    Diff {
        /// Its name.
        name: String,
        /// The older version.
        from: u64,
        /// The newer version (default: the latest).
        to: Option<u64>,
    },
}

pub(super) fn run(kind: Kind, a: Args) -> anyhow::Result<()> {
    run_cmd(kind, &a.conn, a.cmd)
}

/// One catalog command on `kind` (also reached through `weft provider`).
pub(super) fn run_cmd(kind: Kind, conn: &Conn, cmd: Cmd) -> anyhow::Result<()> {
    let ctx = Ctx::new(conn)?;
    let c = &ctx.client;
    match cmd {
        Cmd::List => {
            let list: Vec<Value> = ctx.block(c.entities(kind))?;
            if ctx.json() {
                return print_json(&list);
            }
            let mut t = table(&["NAME", "VERSION", "DESCRIPTION", "INCOMPLETE"]);
            for e in &list {
                t.add_row(vec![
                    text(&e["name"]),
                    text(&e["version"]),
                    text(&e["description"]),
                    lacks(&e["incomplete"]),
                ]);
            }
            println!("{t}");
            Ok(())
        }
        Cmd::Show { name } => {
            let e: Value = ctx.block(c.entity(kind, &name))?;
            print_json(&e)
        }
        Cmd::Create { file } => {
            let body: Value = parse_json(&read_input(&file)?, &file)?;
            let items = match body {
                Value::Array(items) => items,
                one => vec![one],
            };
            for item in &items {
                let answer = ctx.block(c.create_entity(kind, item))?;
                if !ctx.json() {
                    println!("created {} {}", singular(kind), text(&item["name"]));
                }
                warn(&answer);
            }
            if ctx.json() {
                print_json(&items)?;
            }
            Ok(())
        }
        Cmd::Edit { name } => {
            let before: Value = ctx.block(c.entity(kind, &name))?;
            let Some(after) = edit(&before, &format!("{}-{name}", singular(kind)))? else {
                if !ctx.json() {
                    println!("no change to {} {name}", singular(kind));
                }
                return Ok(());
            };
            warn(&ctx.block(c.put_entity(kind, &name, &after))?);
            if ctx.json() {
                let now: Value = ctx.block(c.entity(kind, &name))?;
                print_json(&now)
            } else {
                println!("updated {} {name}", singular(kind));
                Ok(())
            }
        }
        Cmd::History { name } => history(&ctx, kind, &name),
        Cmd::Diff { name, from, to } => version_diff(&ctx, kind, &name, from, to),
        Cmd::Delete { name } => {
            ctx.block(c.delete_entity(kind, &name))?;
            if !ctx.json() {
                println!("deleted {} {name}", singular(kind));
            }
            Ok(())
        }
    }
}

/// `history NAME`: one row per version with the paths it changed.
fn history(ctx: &Ctx, kind: Kind, name: &str) -> anyhow::Result<()> {
    let versions: Vec<Value> = ctx.block(ctx.client.entity_versions(kind, name))?;
    if ctx.json() {
        return print_json(&versions);
    }
    let mut t = table(&["VERSION", "CHANGES"]);
    let mut before: Option<&Value> = None;
    for v in &versions {
        let changes = match before {
            None => "first version".to_string(),
            Some(b) => summary(&weft_model::diff(b, v)),
        };
        t.add_row(vec![text(&v["version"]), changes]);
        before = Some(v);
    }
    println!("{t}");
    Ok(())
}

/// The changed paths of a diff, each once, in one cell.
fn summary(lines: &[weft_model::DiffLine]) -> String {
    if lines.is_empty() {
        return "no change".into();
    }
    let mut paths: Vec<&str> = lines.iter().map(|l| l.path.as_str()).collect();
    paths.dedup();
    format!("{} change(s): {}", lines.len(), paths.join(", "))
}

/// `diff NAME FROM [TO]`: one line per difference (`+`, `-`, `~`), or `no changes`.
fn version_diff(
    ctx: &Ctx,
    kind: Kind,
    name: &str,
    from: u64,
    to: Option<u64>,
) -> anyhow::Result<()> {
    let c = &ctx.client;
    let old: Value = ctx.block(c.entity_version(kind, name, from))?;
    let new: Value = match to {
        Some(v) => ctx.block(c.entity_version(kind, name, v))?,
        None => ctx.block(c.entity(kind, name))?,
    };
    let lines = weft_model::diff(&old, &new);
    if ctx.json() {
        return print_json(&lines);
    }
    println!(
        "{} {name}: version {} -> {}",
        singular(kind),
        text(&old["version"]),
        text(&new["version"])
    );
    if lines.is_empty() {
        println!("no changes");
    }
    for l in &lines {
        println!("{l}");
    }
    Ok(())
}

/// A write's warnings, one per line on stderr (stdout stays the command's answer).
fn warn(answer: &weft_model::CatalogWriteAnswer) {
    for w in &answer.warnings {
        eprintln!("warning: {}: {}", w.field, w.message);
    }
}

/// What a listed entry lacks, in one cell.
fn lacks(v: &Value) -> String {
    v.as_array()
        .map(|ws| {
            ws.iter()
                .map(|w| format!("{}: {}", text(&w["field"]), text(&w["message"])))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

fn singular(kind: Kind) -> &'static str {
    match kind {
        Kind::Provider => "provider",
        Kind::HardwareType => "hardware type",
        Kind::ImageType => "image type",
        Kind::Service => "service",
        Kind::ClusterTemplate => "template",
        Kind::PartialTemplate => "partial template",
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Writes `v` to a temp file, runs the editor on it, and reads it back; `None` if unchanged.
// Starting the user's $EDITOR is this command's job (clippy.toml).
#[allow(clippy::disallowed_methods)]
fn edit(v: &Value, stem: &str) -> anyhow::Result<Option<Value>> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| {
            std::env::var("EDITOR")
                .ok()
                .filter(|e| !e.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".into());
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(format!("{stem}.json"));
    let original = serde_json::to_string_pretty(v)? + "\n";
    std::fs::write(&path, &original)?;
    loop {
        // The editor setting may carry arguments (`code --wait`), as git allows.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{editor} \"$1\""))
            .arg("sh")
            .arg(&path)
            .status()
            .with_context(|| format!("running the editor `{editor}`"))?;
        if !status.success() {
            return Err(UsageError(format!("the editor `{editor}` exited with {status}")).into());
        }
        let text = std::fs::read_to_string(&path)?;
        if text == original {
            return Ok(None);
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(after) if &after == v => return Ok(None),
            Ok(after) => return Ok(Some(after)),
            Err(e) => {
                if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                    return Err(UsageError(format!("the edited file is not JSON: {e}")).into());
                }
                eprintln!("the edited file is not JSON: {e}");
                if !confirm("edit again?")? {
                    return Err(UsageError("edit abandoned".into()).into());
                }
            }
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct CatalogArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: CatalogCmd,
}

#[derive(Debug, Subcommand)]
enum CatalogCmd {
    /// Print the tenant's whole catalog as JSON: `weft catalog export > catalog.json`. Secrets
    /// read ******** unless --include-secrets.
    Export {
        /// Include the providers' secrets, each sealed under a passphrase (from
        /// --passphrase-file or WEFT_EXPORT_PASSPHRASE; at least 12 characters).
        #[arg(long)]
        include_secrets: bool,
        #[command(flatten)]
        passphrase: Passphrase,
    },
    /// Replace the tenant's catalog with a file's: shows what changes, then asks.
    Import {
        /// The file (`-` for stdin).
        file: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
        /// For a file exported with --include-secrets: its passphrase.
        #[command(flatten)]
        passphrase: Passphrase,
    },
}

/// Where an export's passphrase comes from.
#[derive(Debug, clap::Args)]
struct Passphrase {
    /// A file whose first line is the passphrase.
    #[arg(long)]
    passphrase_file: Option<std::path::PathBuf>,
}

impl Passphrase {
    /// The passphrase from the file, else from WEFT_EXPORT_PASSPHRASE; `None` when neither.
    fn read(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.passphrase_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let line = text.lines().next().unwrap_or_default().to_string();
            return Ok(Some(line));
        }
        Ok(std::env::var("WEFT_EXPORT_PASSPHRASE")
            .ok()
            .filter(|p| !p.is_empty()))
    }
}

/// What an import would change, per kind: (added, changed, removed) names.
pub(super) type Diff = BTreeMap<&'static str, (Vec<String>, Vec<String>, Vec<String>)>;

pub(super) fn diff(current: &CatalogExport, new: &CatalogExport) -> anyhow::Result<Diff> {
    let cur = serde_json::to_value(current)?;
    let new = serde_json::to_value(new)?;
    let mut out = Diff::new();
    for kind in [
        "providers",
        "hardwaretypes",
        "imagetypes",
        "services",
        "clustertemplates",
        "partialtemplates",
    ] {
        let by_name = |v: &Value| -> BTreeMap<String, Value> {
            v[kind]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    let mut e = e.clone();
                    if let Some(o) = e.as_object_mut() {
                        o.remove("version");
                    }
                    (text(&e["name"]), e)
                })
                .collect()
        };
        let (a, b) = (by_name(&cur), by_name(&new));
        let added = b.keys().filter(|k| !a.contains_key(*k)).cloned().collect();
        let removed = a.keys().filter(|k| !b.contains_key(*k)).cloned().collect();
        let changed = b
            .iter()
            .filter(|(k, v)| a.get(*k).is_some_and(|old| old != *v))
            .map(|(k, _)| k.clone())
            .collect();
        out.insert(kind, (added, changed, removed));
    }
    Ok(out)
}

pub(super) fn run_catalog(a: CatalogArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    match a.cmd {
        CatalogCmd::Export {
            include_secrets: false,
            ..
        } => print_json(&ctx.block(c.export())?),
        CatalogCmd::Export { passphrase, .. } => {
            let Some(p) = passphrase.read()? else {
                return Err(UsageError(
                    "--include-secrets needs a passphrase: --passphrase-file FILE or \
                     WEFT_EXPORT_PASSPHRASE"
                        .into(),
                )
                .into());
            };
            print_json(&ctx.block(c.export_sealed(&p))?)
        }
        CatalogCmd::Import {
            file,
            yes,
            passphrase,
        } => {
            let mut new: CatalogExport = parse_json(&read_input(&file)?, &file)?;
            new.passphrase = passphrase.read()?;
            let current = ctx.block(c.export())?;
            let d = diff(&current, &new)?;
            let nothing = d
                .values()
                .all(|(a, c, r)| a.is_empty() && c.is_empty() && r.is_empty());
            if ctx.json() {
                let v: BTreeMap<_, _> = d
                    .iter()
                    .map(|(k, (a, c, r))| {
                        (
                            *k,
                            serde_json::json!({"added": a, "changed": c, "removed": r}),
                        )
                    })
                    .collect();
                // The summary goes to stderr so that stdout stays one JSON document.
                eprintln!("{}", serde_json::to_string(&v)?);
            } else {
                let mut t = table(&["KIND", "ADDED", "CHANGED", "REMOVED"]);
                for (k, (a, c, r)) in &d {
                    t.add_row(vec![
                        k.to_string(),
                        a.join(", "),
                        c.join(", "),
                        r.join(", "),
                    ]);
                }
                println!("{t}");
            }
            if nothing {
                if !ctx.json() {
                    println!("the catalog already matches {file}: nothing to import");
                }
                return Ok(());
            }
            if !yes && !confirm("replace the tenant's catalog with this?")? {
                return Err(UsageError("import cancelled".into()).into());
            }
            warn(&ctx.block(c.import(&new))?);
            if ctx.json() {
                print_json(&ctx.block(c.export())?)
            } else {
                println!("imported {file}");
                Ok(())
            }
        }
    }
}
