//! `weft admin ...`: administration that works on the store directly, for bootstrapping (the first
//! superadmin API key must exist before the API can be used with `--auth apikey`).

use std::path::PathBuf;
use std::process::ExitCode;

use weft_model::ApiKeyRequest;
use weft_server::config::RawConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct AdminArgs {
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AdminCommand {
    /// API keys.
    Apikey {
        #[command(subcommand)]
        command: ApikeyCommand,
    },
    /// Makes a new master key for the secrets sealed in the store and re-wraps every data key
    /// under it, while servers run; the key file then holds the new key alone (copy it to the
    /// other servers of the same database). The old key opens nothing in the store afterwards.
    /// The audit trail, read from the store directly.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    RotateSecretsKey {
        #[command(flatten)]
        store: StoreArgs,
        /// The server's key file [default: <data dir>/secrets.key].
        #[arg(long, env = "WEFT_SECRETS_KEY_FILE")]
        secrets_key_file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Verify every tenant's chain of records (or one tenant's); exits 1 if one does not verify.
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this tenant (its name).
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// Where the server keeps its store.
#[derive(Debug, clap::Args)]
struct StoreArgs {
    /// Data directory of the server [default: ./.weft].
    #[arg(long, env = "WEFT_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL of the server [default: SQLite under --data-dir].
    #[arg(long, env = "WEFT_DATABASE")]
    database: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum ApikeyCommand {
    /// Make a key and print it (it is shown only this once).
    Create {
        /// Tenant name (superadmin for the superadmin's key).
        #[arg(long)]
        tenant: String,
        /// User id the key stands for.
        #[arg(long)]
        user: String,
        /// The key has the tenant admin role (the superadmin role in tenant superadmin).
        #[arg(long)]
        admin: bool,
        /// Data directory of the server [default: ./.weft].
        #[arg(long, env = "WEFT_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Database URL of the server [default: SQLite under --data-dir].
        #[arg(long, env = "WEFT_DATABASE")]
        database: Option<String>,
    },
}

pub(crate) fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AdminCommand::RotateSecretsKey {
            store,
            secrets_key_file,
        } => rotate_secrets_key(store, secrets_key_file),
        AdminCommand::Audit {
            command: AuditCommand::Verify { store, tenant },
        } => verify_audit(store, tenant),
        AdminCommand::Apikey {
            command:
                ApikeyCommand::Create {
                    tenant,
                    user,
                    admin,
                    data_dir,
                    database,
                },
        } => {
            let settings = RawConfig {
                data_dir,
                database,
                ..Default::default()
            }
            .resolve()?;
            super::runtime::runtime()?.block_on(async {
                if settings.database_url.starts_with("sqlite:") {
                    std::fs::create_dir_all(&settings.data_dir)?;
                }
                let store = weft_store::open(&settings.database_url).await?;
                let created = weft_engine::apikeys::make_key(
                    store.as_ref(),
                    &ApiKeyRequest {
                        tenant,
                        user,
                        admin,
                    },
                    weft_engine::now_ms(),
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("{}", serde_json::to_string_pretty(&created)?);
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}

fn verify_audit(store: StoreArgs, tenant: Option<String>) -> anyhow::Result<ExitCode> {
    let settings = RawConfig {
        data_dir: store.data_dir,
        database: store.database,
        ..Default::default()
    }
    .resolve()?;
    super::runtime::runtime()?.block_on(async {
        let store = weft_store::open(&settings.database_url).await?;
        let id = match &tenant {
            None => None,
            Some(name) => Some(
                store
                    .tenant_by_name(name)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("no tenant {name}"))?
                    .id,
            ),
        };
        let reports = weft_store::audit::verify_all(store.as_ref(), id.as_deref()).await?;
        let mut ok = true;
        for r in &reports {
            match &r.problem {
                None => println!(
                    "{}: {} records verify; head {}",
                    r.tenant_id, r.records, r.head_hash
                ),
                Some(p) => {
                    ok = false;
                    println!(
                        "{}: DOES NOT VERIFY at record {}: {p}",
                        r.tenant_id,
                        r.first_bad_seq.unwrap_or(0)
                    );
                }
            }
        }
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

fn rotate_secrets_key(store: StoreArgs, file: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let settings = RawConfig {
        data_dir: store.data_dir,
        database: store.database,
        secrets_key_file: file,
        ..Default::default()
    }
    .resolve()?;
    let source = settings.secrets_key.clone();
    if !matches!(source, weft_engine::seal::KeySource::File(_)) {
        anyhow::bail!(
            "{} holds the key: rotation writes a new key file, so unset it and give \
             --secrets-key-file",
            weft_engine::seal::KEY_ENV
        );
    }
    super::runtime::runtime()?.block_on(async {
        let store = weft_store::open(&settings.database_url).await?;
        let sealer = weft_engine::seal::Sealer::new(store, source);
        sealer.ready().await?;
        let id = sealer.rotate().await?;
        println!("secrets key rotated: master key {id}");
        Ok(ExitCode::SUCCESS)
    })
}
