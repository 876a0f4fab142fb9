//! Administration through the API: tenants, provisioners, plugin resources, API keys.

use clap::Subcommand;
use weft_client::api::{NewApiKey, ResourceType};
use weft_client::PluginKind;
use weft_model::TenantSpecification;

use super::{print_json, read_input, table, time, Conn, Ctx, UsageError};

// ---- tenants ----

#[derive(Debug, clap::Args)]
pub(crate) struct TenantArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: TenantCmd,
}

#[derive(Debug, clap::Args)]
struct TenantFields {
    /// Provisioner workers for the tenant.
    #[arg(long)]
    workers: Option<u32>,
    /// Most live clusters.
    #[arg(long)]
    max_clusters: Option<u64>,
    /// Most live nodes.
    #[arg(long)]
    max_nodes: Option<u64>,
    /// What the tenant is for.
    #[arg(long)]
    description: Option<String>,
}

#[derive(Debug, Subcommand)]
enum TenantCmd {
    /// List tenants.
    List,
    /// Show a tenant.
    Show {
        /// The tenant's name.
        name: String,
    },
    /// Create a tenant (unset quotas are unbounded).
    Create {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        fields: TenantFields,
        /// Copy the superadmin's catalog and plugin resources into the new tenant.
        #[arg(long)]
        bootstrap: bool,
    },
    /// Change a tenant's workers, quotas or description (unset fields keep their value).
    Update {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        fields: TenantFields,
    },
    /// Delete a tenant (it must have no live clusters).
    Delete {
        /// The tenant's name.
        name: String,
    },
}

fn tenant_table(list: &[TenantSpecification]) {
    let mut t = table(&[
        "NAME",
        "WORKERS",
        "MAX CLUSTERS",
        "MAX NODES",
        "DESCRIPTION",
    ]);
    let q = |n: u64| {
        if n >= weft_model::UNBOUNDED {
            "unbounded".to_string()
        } else {
            n.to_string()
        }
    };
    for s in list {
        t.add_row(vec![
            s.name.clone(),
            s.workers.to_string(),
            q(s.max_clusters),
            q(s.max_nodes),
            s.description.clone().unwrap_or_default(),
        ]);
    }
    println!("{t}");
}

pub(super) fn tenant(a: TenantArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    match a.cmd {
        TenantCmd::List => {
            let list = ctx.block(c.tenants())?;
            if ctx.json() {
                return print_json(&list);
            }
            tenant_table(&list);
            Ok(())
        }
        TenantCmd::Show { name } => {
            let t = ctx.block(c.tenant(&name))?;
            if ctx.json() {
                return print_json(&t);
            }
            tenant_table(&[t]);
            Ok(())
        }
        TenantCmd::Create {
            name,
            fields,
            bootstrap,
        } => {
            let spec = TenantSpecification {
                name: name.clone(),
                description: fields.description,
                workers: fields.workers.unwrap_or(0),
                max_clusters: fields.max_clusters.unwrap_or(weft_model::UNBOUNDED),
                max_nodes: fields.max_nodes.unwrap_or(weft_model::UNBOUNDED),
                check_interval: 0,
                max_cost_per_hour: None,
            };
            ctx.block(c.create_tenant(&spec, bootstrap))?;
            done(
                &ctx,
                || ctx.block(c.tenant(&name)),
                &format!("created tenant {name}"),
            )
        }
        TenantCmd::Update { name, fields } => {
            let mut spec = ctx.block(c.tenant(&name))?;
            if let Some(w) = fields.workers {
                spec.workers = w;
            }
            if let Some(m) = fields.max_clusters {
                spec.max_clusters = m;
            }
            if let Some(m) = fields.max_nodes {
                spec.max_nodes = m;
            }
            if fields.description.is_some() {
                spec.description = fields.description;
            }
            ctx.block(c.update_tenant(&spec))?;
            done(
                &ctx,
                || ctx.block(c.tenant(&name)),
                &format!("updated tenant {name}"),
            )
        }
        TenantCmd::Delete { name } => {
            ctx.block(c.delete_tenant(&name))?;
            if !ctx.json() {
                println!("deleted tenant {name}");
            }
            Ok(())
        }
    }
}

/// After a write: the entity's JSON for scripts, a sentence for people.
fn done<T: serde::Serialize>(
    ctx: &Ctx,
    fetch: impl FnOnce() -> Result<T, weft_client::ClientError>,
    msg: &str,
) -> anyhow::Result<()> {
    if ctx.json() {
        print_json(&fetch()?)
    } else {
        println!("{msg}");
        Ok(())
    }
}

// ---- provisioners ----

#[derive(Debug, clap::Args)]
pub(crate) struct ProvisionersArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: ProvisionersCmd,
}

#[derive(Debug, Subcommand)]
enum ProvisionersCmd {
    /// List registered provisioners.
    List,
    /// Show one provisioner: capacity, workers per tenant, last heartbeat.
    Show {
        /// The provisioner id.
        id: String,
    },
}

pub(super) fn provisioners(a: ProvisionersArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    let list = match a.cmd {
        ProvisionersCmd::List => {
            let list = ctx.block(c.provisioners())?;
            if ctx.json() {
                return print_json(&list);
            }
            list
        }
        ProvisionersCmd::Show { id } => {
            let p = ctx.block(c.provisioner(&id))?;
            if ctx.json() {
                return print_json(&p);
            }
            vec![p]
        }
    };
    let mut t = table(&["ID", "ADDRESS", "CAPACITY", "FREE", "ASSIGNED", "IN USE"]);
    let per = |m: &std::collections::BTreeMap<String, u32>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for p in &list {
        t.add_row(vec![
            p.id.clone(),
            format!("{}:{}", p.host, p.port),
            p.capacity_total.to_string(),
            p.capacity_free.to_string(),
            per(&p.assignments),
            per(&p.usage),
        ]);
    }
    println!("{t}");
    Ok(())
}

// ---- plugin resources ----

#[derive(Debug, clap::Args)]
pub(crate) struct ResourceArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: ResourceCmd,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Ptype {
    Provider,
    Automator,
}

/// `{provider|automator} PLUGIN TYPE`: where resources live (e.g. `automator shell scripts`).
#[derive(Debug, clap::Args)]
struct At {
    /// The kind of plugin: provider or automator.
    ptype: Ptype,
    /// The plugin's name (e.g. shell).
    plugin: String,
    /// The resource type (e.g. scripts).
    rtype: String,
}

impl At {
    fn to_client(&self) -> ResourceType {
        ResourceType {
            kind: match self.ptype {
                Ptype::Provider => PluginKind::Provider,
                Ptype::Automator => PluginKind::Automator,
            },
            plugin: self.plugin.clone(),
            rtype: self.rtype.clone(),
        }
    }
}

#[derive(Debug, Subcommand)]
enum ResourceCmd {
    /// Every version of every resource of a plugin's resource type.
    List {
        #[command(flatten)]
        at: At,
    },
    /// Upload a file as a new (inactive) version of a resource.
    Upload {
        #[command(flatten)]
        at: At,
        /// The resource's name.
        name: String,
        /// The file (`-` for stdin).
        #[arg(short = 'f', long = "file")]
        file: String,
    },
    /// Stage a version: it goes live at the next sync.
    Stage {
        #[command(flatten)]
        at: At,
        /// The resource's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// Recall a version: it goes off at the next sync.
    Recall {
        #[command(flatten)]
        at: At,
        /// The resource's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// Delete one version, or every version of a resource.
    Delete {
        #[command(flatten)]
        at: At,
        /// The resource's name.
        name: String,
        /// The version [default: every version].
        version: Option<u64>,
    },
    /// Push staged versions live and recalled ones off, on every provisioner.
    Sync,
}

pub(super) fn resource(a: ResourceArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    match a.cmd {
        ResourceCmd::List { at } => {
            let list = ctx.block(c.resources(&at.to_client()))?;
            if ctx.json() {
                return print_json(&list);
            }
            let mut t = table(&["NAME", "VERSION", "STATUS"]);
            for (name, versions) in &list {
                for v in versions {
                    let status = serde_json::to_value(v.status)?;
                    t.add_row(vec![
                        name.clone(),
                        v.version.to_string(),
                        status.as_str().unwrap_or("").to_string(),
                    ]);
                }
            }
            println!("{t}");
            Ok(())
        }
        ResourceCmd::Upload { at, name, file } => {
            let bytes = read_input(&file)?;
            let meta = ctx.block(c.upload_resource(&at.to_client(), &name, bytes))?;
            if ctx.json() {
                return print_json(&meta);
            }
            println!(
                "uploaded {name} version {} (inactive: stage it, then sync)",
                meta.version
            );
            Ok(())
        }
        ResourceCmd::Stage { at, name, version } => {
            ctx.block(c.resource_transition(&at.to_client(), &name, version, "stage"))?;
            say(&ctx, &format!("staged {name} version {version}"));
            Ok(())
        }
        ResourceCmd::Recall { at, name, version } => {
            ctx.block(c.resource_transition(&at.to_client(), &name, version, "recall"))?;
            say(&ctx, &format!("recalled {name} version {version}"));
            Ok(())
        }
        ResourceCmd::Delete { at, name, version } => {
            ctx.block(c.delete_resource(&at.to_client(), &name, version))?;
            match version {
                Some(v) => say(&ctx, &format!("deleted {name} version {v}")),
                None => say(&ctx, &format!("deleted every version of {name}")),
            }
            Ok(())
        }
        ResourceCmd::Sync => {
            ctx.block(c.sync_resources())?;
            say(&ctx, "synced plugin resources");
            Ok(())
        }
    }
}

fn say(ctx: &Ctx, msg: &str) {
    if !ctx.json() {
        println!("{msg}");
    }
}

// ---- API keys ----

#[derive(Debug, clap::Args)]
pub(crate) struct ApiKeyArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: ApiKeyCmd,
}

#[derive(Debug, Subcommand)]
enum ApiKeyCmd {
    /// List API keys (never their secrets).
    List,
    /// Make a key for a tenant's user; the secret is shown once.
    Create {
        /// The tenant the key acts in.
        #[arg(long = "for-tenant")]
        for_tenant: String,
        /// The user the key acts as.
        #[arg(long = "for-user")]
        for_user: String,
        /// The key acts as the tenant's admin.
        #[arg(long)]
        admin: bool,
    },
    /// Delete an API key.
    Delete {
        /// The key id.
        id: String,
    },
}

pub(super) fn apikey(a: ApiKeyArgs) -> anyhow::Result<()> {
    let ctx = Ctx::new(&a.conn)?;
    let c = &ctx.client;
    match a.cmd {
        ApiKeyCmd::List => {
            let list = ctx.block(c.api_keys())?;
            if ctx.json() {
                return print_json(&list);
            }
            let mut t = table(&["ID", "TENANT", "USER", "ADMIN", "CREATED"]);
            for k in &list {
                t.add_row(vec![
                    k.id.clone(),
                    k.tenant.clone(),
                    k.user.clone(),
                    k.admin.to_string(),
                    time(k.create_time),
                ]);
            }
            println!("{t}");
            Ok(())
        }
        ApiKeyCmd::Create {
            for_tenant,
            for_user,
            admin,
        } => {
            if for_tenant.is_empty() || for_user.is_empty() {
                return Err(
                    UsageError("--for-tenant and --for-user must not be empty".into()).into(),
                );
            }
            let k = ctx.block(c.create_api_key(&NewApiKey {
                tenant: for_tenant,
                user: for_user,
                admin,
            }))?;
            if ctx.json() {
                return print_json(&k);
            }
            println!(
                "key {} for {} in tenant {}{}",
                k.id,
                k.user,
                k.tenant,
                if k.admin { " (admin)" } else { "" }
            );
            println!("secret (shown once): {}", k.key);
            Ok(())
        }
        ApiKeyCmd::Delete { id } => {
            ctx.block(c.delete_api_key(&id))?;
            say(&ctx, &format!("deleted key {id}"));
            Ok(())
        }
    }
}
