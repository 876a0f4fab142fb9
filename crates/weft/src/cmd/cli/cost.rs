//! `weft cost report`: what clusters accrued over a period (`GET /v2/costs`), per cluster,
//! template or tenant; `--csv` writes the report as CSV.

use clap::Subcommand;
use weft_model::cost::{format_micros, CostReport};

use super::{print_json, table, Conn, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// What accrued over a period, largest first, with the total and a per-day series.
    Report {
        /// Start: YYYY-MM-DD (UTC) or ms since the epoch [default: 30 days before --to].
        #[arg(long)]
        from: Option<String>,
        /// End (excluded), as --from [default: now].
        #[arg(long)]
        to: Option<String>,
        /// cluster, template or tenant (the superadmin: every tenant).
        #[arg(long, default_value = "cluster")]
        group_by: String,
        /// Print the report as CSV (group,name,currency,amount).
        #[arg(long)]
        csv: bool,
    },
}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let Cmd::Report {
        from,
        to,
        group_by,
        csv,
    } = a.cmd;
    let mut params = vec![("groupBy", group_by)];
    for (name, v) in [("from", from), ("to", to)] {
        if let Some(v) = v {
            params.push((name, weft_model::cost::instant(name, &v)?.to_string()));
        }
    }
    if csv {
        print!("{}", ctx.block(ctx.client.costs_csv(&params))?);
        return Ok(());
    }
    let r: CostReport = ctx.block(ctx.client.costs(&params))?;
    if ctx.json() {
        return print_json(&r);
    }
    let mut t = table(&["GROUP", "NAME", "CURRENCY", "AMOUNT"]);
    for l in r.lines.iter().chain(&r.totals) {
        let is_total = r.totals.iter().any(|x| std::ptr::eq(x, l));
        t.add_row(vec![
            if is_total {
                "TOTAL".to_string()
            } else {
                l.key.clone()
            },
            l.name.clone().unwrap_or_default(),
            l.currency.clone(),
            l.amount.clone(),
        ]);
    }
    println!("{t}");
    if !r.series.is_empty() {
        let days: Vec<String> = r
            .series
            .iter()
            .map(|p| format!("{} {}", super::time(p.day), format_micros(p.micros)))
            .collect();
        println!("per day: {}", days.join(", "));
    }
    Ok(())
}
