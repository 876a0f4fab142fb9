//! `weft admin ...`: administration that works on the store directly, for bootstrapping (the first
//! superadmin API key must exist before the API can be used with `--auth apikey`).

use std::path::PathBuf;
use std::process::ExitCode;

use weft_model::ApiKeyRequest;
use weft_server::config::RawConfig;

#[derive(Debug, clap::Args)]
pub struct AdminArgs {
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

pub fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    match args.command {
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
                let created = weft_server::routes::apikeys::make_key(
                    store.as_ref(),
                    &ApiKeyRequest {
                        tenant,
                        user,
                        admin,
                    },
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("{}", serde_json::to_string_pretty(&created)?);
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}
