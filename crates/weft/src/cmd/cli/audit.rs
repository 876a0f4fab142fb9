//! `weft audit list|verify`: the audit trail through the API (tenant admins: their tenant; the
//! superadmin: every tenant).

use clap::Subcommand;

use super::{print_json, table, time, Conn, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Records, newest first.
    List {
        /// Only this user's records.
        #[arg(long)]
        user: Option<String>,
        /// Only records of this entity (clusters, providers, apikeys, ...).
        #[arg(long)]
        entity: Option<String>,
        /// Only this action (create, update, delete, read, or an operation's name).
        #[arg(long)]
        action: Option<String>,
        /// Only records of the last DURATION (90s, 10m, 48h, 2d).
        #[arg(long, value_parser = super::duration::parse)]
        since: Option<std::time::Duration>,
        /// A tenant's records (superadmin; default: every tenant).
        #[arg(long = "of-tenant")]
        of_tenant: Option<String>,
        /// At most this many records (the server answers at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Verify each tenant's chain of records; exits 1 if one does not verify.
    Verify,
}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    match a.cmd {
        Cmd::List {
            user,
            entity,
            action,
            since,
            of_tenant,
            limit,
        } => {
            let mut q: Vec<(&str, String)> = vec![("limit", limit.to_string())];
            let named = [
                ("user", user),
                ("entity", entity),
                ("action", action),
                ("tenant", of_tenant),
            ];
            q.extend(named.into_iter().filter_map(|(k, v)| Some((k, v?))));
            if let Some(d) = since {
                let from = weft_engine::now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                q.push(("from", from.to_string()));
            }
            let records = ctx.block(ctx.client.audit(&q))?;
            if ctx.json() {
                return print_json(&records);
            }
            let mut t = table(&[
                "TIME", "USER", "ROLE", "SOURCE", "ACTION", "ENTITY", "ID", "STATUS",
            ]);
            for r in &records {
                let e = &r.entry;
                t.add_row(vec![
                    time(e.time),
                    e.user.clone(),
                    e.role.clone(),
                    e.source.clone(),
                    e.action.clone(),
                    e.entity.clone(),
                    e.entity_id.clone().unwrap_or_default(),
                    e.status.to_string(),
                ]);
            }
            println!("{t}");
            Ok(())
        }
        Cmd::Verify => {
            let reports = ctx.block(ctx.client.audit_verify())?;
            let bad = reports.iter().filter(|r| !r.ok).count();
            if ctx.json() {
                print_json(&reports)?;
            } else {
                for r in &reports {
                    match &r.problem {
                        None => println!(
                            "{}: {} records verify; head {}",
                            r.tenant_id, r.records, r.head_hash
                        ),
                        Some(p) => println!("{}: DOES NOT VERIFY: {p}", r.tenant_id),
                    }
                }
            }
            if bad > 0 {
                anyhow::bail!("{bad} tenant chain(s) do not verify");
            }
            Ok(())
        }
    }
}
