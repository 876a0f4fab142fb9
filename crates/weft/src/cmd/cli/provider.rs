//! `weft provider ...`: the catalog commands on providers (list, show, create, edit, delete) and
//! `weft provider sweep NAME [--delete]` (admin): the machines with weft's marks for this tenant
//! on the provider's account that belong to no live node, deleted with `--delete`.

use clap::Subcommand;
use weft_client::api::Kind;
use weft_model::SweepReport;

use super::{catalog, print_json, table, Conn, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the machines weft marked for this tenant that belong to no live node (cloud and
    /// docker providers; local and hostpool answer 400).
    Sweep {
        /// The provider whose account is searched.
        name: String,
        /// Also delete the machines found.
        #[arg(long)]
        delete: bool,
    },
    #[command(flatten)]
    Catalog(catalog::Cmd),
}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    match a.cmd {
        Cmd::Sweep { name, delete } => sweep(&a.conn, &name, delete),
        Cmd::Catalog(cmd) => catalog::run_cmd(Kind::Provider, &a.conn, cmd),
    }
}

fn sweep(conn: &Conn, name: &str, delete: bool) -> anyhow::Result<()> {
    let ctx = Ctx::new(conn)?;
    let report = ctx.block(ctx.client.sweep_provider(name, delete))?;
    if ctx.json() {
        return print_json(&report);
    }
    print_report(name, delete, &report);
    anyhow::ensure!(
        report.errors.is_empty(),
        "{} machine(s) could not be deleted",
        report.errors.len()
    );
    Ok(())
}

fn print_report(name: &str, delete: bool, r: &SweepReport) {
    if r.machines.is_empty() {
        println!("no orphaned machines on provider {name}");
        return;
    }
    let mut t = table(&["MACHINE", "TYPE", "NODE", "CLUSTER", "STATE", "OUTCOME"]);
    for m in &r.machines {
        let outcome = if r.deleted.contains(&m.providerid) {
            "deleted".to_string()
        } else if let Some(e) = r.errors.iter().find(|e| e.providerid == m.providerid) {
            format!("failed: {}", e.message)
        } else if delete {
            "-".to_string()
        } else {
            "orphaned".to_string()
        };
        t.add_row(vec![
            m.providerid.clone(),
            m.providertype.clone(),
            m.node.clone(),
            m.cluster.clone(),
            m.state.clone(),
            outcome,
        ]);
    }
    println!("{t}");
    if !delete {
        println!("run `weft provider sweep {name} --delete` to delete them");
    }
}
