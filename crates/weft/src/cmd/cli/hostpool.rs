//! `weft hostpool`: the hosts of a `hostpool` provider's pool (admin): list, show, add, edit,
//! remove. Private keys are read from a file (`--key-file`) and never shown.

use std::collections::BTreeMap;

use clap::Subcommand;
use weft_model::{PoolHost, PoolHostRequest};

use super::{print_json, read_input, table, time, Conn, Ctx, UsageError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Cmd,
}

// The pool: a provider of type `hostpool`.
#[derive(Debug, clap::Args)]
struct Pool {
    /// The host-pool provider whose pool this is.
    #[arg(long, short = 'p')]
    provider: String,
}

#[derive(Debug, clap::Args)]
struct HostFields {
    /// Host name or IP address to reach it over SSH.
    #[arg(long)]
    address: Option<String>,
    /// SSH port [default for a new host: 22].
    #[arg(long)]
    port: Option<u64>,
    /// SSH user; not root means commands run with sudo [default for a new host: root].
    #[arg(long = "ssh-user")]
    ssh_user: Option<String>,
    /// File with the SSH private key (`-` for stdin); sent to the server, never shown again.
    #[arg(long = "key-file")]
    key_file: Option<String>,
    /// A label `KEY=VALUE` (repeat the flag); hardware types pick hosts by label.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The pool's hosts: address, labels, and which node holds each.
    List {
        #[command(flatten)]
        pool: Pool,
    },
    /// One host.
    Show {
        /// The host's name in the pool.
        host: String,
        #[command(flatten)]
        pool: Pool,
    },
    /// Add a host to the pool (--address and --key-file needed).
    Add {
        /// The host's name in the pool.
        host: String,
        #[command(flatten)]
        pool: Pool,
        #[command(flatten)]
        fields: HostFields,
    },
    /// Change a host: unset flags keep their value; --label adds or replaces a label.
    Edit {
        /// The host's name in the pool.
        host: String,
        #[command(flatten)]
        pool: Pool,
        #[command(flatten)]
        fields: HostFields,
        /// Remove a label (repeat the flag).
        #[arg(long = "unlabel", value_name = "KEY")]
        unlabel: Vec<String>,
    },
    /// Remove a free host from the pool (a host lent to a node is refused).
    Remove {
        /// The host's name in the pool.
        host: String,
        #[command(flatten)]
        pool: Pool,
    },
}

fn labels(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    args.iter()
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| UsageError(format!("--label {l}: expected KEY=VALUE")).into())
        })
        .collect()
}

fn key(file: Option<&str>) -> anyhow::Result<Option<String>> {
    file.map(|f| {
        String::from_utf8(read_input(f)?)
            .map_err(|_| UsageError(format!("--key-file {f}: not a text file")).into())
    })
    .transpose()
}

fn hosts_table(list: &[PoolHost]) {
    let mut t = table(&[
        "ID", "ADDRESS", "USER", "LABELS", "STATE", "CLUSTER", "NODE", "SINCE",
    ]);
    for h in list {
        t.add_row(vec![
            h.id.clone(),
            format!("{}:{}", h.address, h.port),
            h.user.clone(),
            h.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            h.state.as_str().to_string(),
            h.cluster_id.clone().unwrap_or_default(),
            h.node_id.clone().unwrap_or_default(),
            h.reserve_time.map(time).unwrap_or_default(),
        ]);
    }
    println!("{t}");
}

fn shown(ctx: &Ctx, h: &PoolHost, msg: &str) -> anyhow::Result<()> {
    if ctx.json() {
        print_json(h)
    } else {
        println!("{msg}");
        hosts_table(std::slice::from_ref(h));
        Ok(())
    }
}

pub(super) fn run(a: Args) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    match a.cmd {
        Cmd::List { pool } => {
            let list = ctx.block(c.pool_hosts(&pool.provider))?;
            if ctx.json() {
                return print_json(&list);
            }
            hosts_table(&list);
            Ok(())
        }
        Cmd::Show { host, pool } => {
            let h = ctx.block(c.pool_host(&pool.provider, &host))?;
            if ctx.json() {
                return print_json(&h);
            }
            hosts_table(&[h]);
            Ok(())
        }
        Cmd::Add { host, pool, fields } => {
            let Some(key) = key(fields.key_file.as_deref())? else {
                return Err(UsageError("--key-file is needed for a new host".into()).into());
            };
            if fields.address.is_none() {
                return Err(UsageError("--address is needed for a new host".into()).into());
            }
            let req = PoolHostRequest {
                id: Some(host.clone()),
                address: fields.address,
                port: fields.port,
                user: fields.ssh_user,
                key: Some(key),
                labels: labels(&fields.labels)?,
            };
            let h = ctx.block(c.add_pool_host(&pool.provider, &req))?;
            shown(
                &ctx,
                &h,
                &format!("added host {host} to the pool of {}", pool.provider),
            )
        }
        Cmd::Edit {
            host,
            pool,
            fields,
            unlabel,
        } => {
            let now = ctx.block(c.pool_host(&pool.provider, &host))?;
            let mut all = now.labels.clone();
            for k in &unlabel {
                all.remove(k);
            }
            all.extend(labels(&fields.labels)?);
            let req = PoolHostRequest {
                id: Some(host.clone()),
                address: fields.address.or(Some(now.address)),
                port: fields.port.or(Some(u64::from(now.port))),
                user: fields.ssh_user.or(Some(now.user)),
                // None keeps the stored key.
                key: key(fields.key_file.as_deref())?,
                labels: all,
            };
            let h = ctx.block(c.put_pool_host(&pool.provider, &host, &req))?;
            shown(
                &ctx,
                &h,
                &format!("changed host {host} of the pool of {}", pool.provider),
            )
        }
        Cmd::Remove { host, pool } => {
            ctx.block(c.remove_pool_host(&pool.provider, &host))?;
            if !ctx.json() {
                println!("removed host {host} from the pool of {}", pool.provider);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_do_not_clash_with_the_connection_flags() {
        use clap::Args as _;
        Args::augment_args(clap::Command::new("hostpool")).debug_assert();
    }

    #[test]
    fn labels_read_as_key_value() {
        let l = labels(&["disk=ssd".into(), " rack = r1 ".into(), "x=".into()]).unwrap();
        assert_eq!(l["disk"], "ssd");
        assert_eq!(l["rack"], "r1");
        assert_eq!(l["x"], "");
        assert!(labels(&["nolabel".into()]).is_err());
        assert!(labels(&["=v".into()]).is_err());
    }
}
