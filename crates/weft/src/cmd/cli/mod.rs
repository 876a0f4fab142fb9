//! The client commands: everything a user or an admin does against a running server, through the
//! typed client of the external API ([`weft_client::api::ApiClient`]).
//!
//! Exit codes: 0 ok; 1 usage or client-side error; 2 the server refused the call (4xx); 3 server
//! error (5xx) or unreachable; 4 a job waited for (`--wait`) failed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use weft_client::api::{ApiClient, Identity};
use weft_client::ClientError;

mod admin;
mod audit; // `weft audit`
mod catalog;
mod cluster;
pub(crate) mod config;
mod cost; // `weft cost report`
mod declared; // `weft apply`, `weft cluster export/sync`, `weft template impact`
mod drift; // `weft cluster check`
pub(crate) mod duration; // durations in one form (48h, 90s)
mod events; // `weft events`
mod hostpool; // `weft hostpool`
mod logs; // `weft cluster logs`
mod plan_view; // plans grouped for people
mod provider; // `weft provider` (catalog commands and sweep)
mod ssh; // `weft cluster ssh`
mod template; // `weft template` (catalog commands and test)

/// Text for `weft --help`: the exit codes of the client commands.
pub(crate) const EXIT_CODES: &str = "Exit codes of the client commands: 0 ok, 1 usage or client error, \
2 the server refused the call (4xx), 3 server error (5xx) or server unreachable, 4 a job waited for \
(--wait) failed, 5 `cluster health` found a service not healthy or `cluster check` found drift; \
`template test`: 1 problems found, 2 unusable input (a file missing or not JSON); \
141 the reader of the output went away (`| head`).";

/// The heading of the flags every client command takes, listed apart from a command's own.
const GLOBAL: &str = "Global options";

/// Where and as whom: flags beat `WEFT_*` variables, which beat the profile in the config file.
#[derive(Debug, Clone, Args)]
pub(crate) struct Conn {
    /// The server's external API URL [default: the profile's, else http://127.0.0.1:55054].
    #[arg(long, env = "WEFT_URL", global = true, help_heading = GLOBAL)]
    server: Option<String>,
    /// Tenant [default: the profile's, else `default`].
    #[arg(long, env = "WEFT_TENANT", global = true, help_heading = GLOBAL)]
    tenant: Option<String>,
    /// User [default: the profile's, else `admin`].
    #[arg(long, env = "WEFT_USER", global = true, help_heading = GLOBAL)]
    user: Option<String>,
    /// API key (servers run with `--auth apikey`).
    #[arg(long, env = "WEFT_API_KEY", global = true, hide_env_values = true, help_heading = GLOBAL)]
    api_key: Option<String>,
    /// PEM CA file the server's certificate must chain to (only it is trusted) [default: the
    /// profile's, else the system's roots].
    #[arg(long, env = "WEFT_CA_CERT", global = true, help_heading = GLOBAL)]
    ca_cert: Option<PathBuf>,
    /// Profile in the config file [default: `default`].
    #[arg(long, env = "WEFT_PROFILE", global = true, help_heading = GLOBAL)]
    profile: Option<String>,
    /// `table` for people, `json` for scripts (the API's JSON).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table, global = true, help_heading = GLOBAL)]
    output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Save a server, tenant, user (and API key) as a profile in ~/.config/weft/config.toml.
    Login(LoginArgs),
    /// Create, inspect, change and delete clusters.
    Cluster(cluster::Args),
    /// Make a cluster what a file declares (create it, or change it in one job): YAML or JSON.
    Apply(declared::ApplyArgs),
    /// Providers in the catalog (admin).
    Provider(provider::Args),
    /// Hardware types in the catalog (admin).
    Hardwaretype(catalog::Args),
    /// Image types in the catalog (admin).
    Imagetype(catalog::Args),
    /// Services in the catalog (admin).
    Service(catalog::Args),
    /// Cluster templates in the catalog (admin); `test` checks templates offline, as CI would.
    Template(template::Args),
    /// Partial templates in the catalog (admin).
    Partialtemplate(catalog::Args),
    /// Export or import the tenant's whole catalog (admin).
    Catalog(catalog::CatalogArgs),
    /// Tenants (superadmin).
    Tenant(admin::TenantArgs),
    /// Provisioners registered with the server (superadmin).
    Provisioners(admin::ProvisionersArgs),
    /// Plugin resources: upload, stage, recall, delete, sync (admin).
    Resource(admin::ResourceArgs),
    /// API keys (superadmin).
    Apikey(admin::ApiKeyArgs),
    /// The audit trail: who did what, from where, and what came of it (admin).
    Audit(audit::Args),
    /// The tenant's events: clusters, jobs, tasks, nodes, audit records; --follow to stream.
    Events(events::Args),
    /// Hosts in the pools of hostpool providers: list, show, add, edit, remove (admin).
    Hostpool(hostpool::Args),
    /// What clusters cost: accrued per cluster, template or tenant over a period (showback).
    Cost(cost::Args),
    /// Print a shell completion script: `weft completions bash > /etc/bash_completion.d/weft`.
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct LoginArgs {
    #[command(flatten)]
    conn: Conn,
    /// Save without checking that the server answers.
    #[arg(long)]
    no_verify: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

/// A client command with its connection settings resolved.
pub(crate) struct Ctx {
    pub client: ApiClient,
    pub output: Output,
    rt: tokio::runtime::Runtime,
}

impl Ctx {
    pub(crate) fn new(conn: &Conn) -> anyhow::Result<Ctx> {
        let (server, who, ca_cert) = resolve(conn)?;
        let trust = weft_client::TlsTrust {
            ca_cert,
            ..Default::default()
        };
        let client = ApiClient::new(&server, who)?.with_tls(&trust)?;
        Ok(Ctx {
            client,
            output: conn.output,
            rt: super::runtime::runtime()?,
        })
    }

    pub(crate) fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub(crate) fn json(&self) -> bool {
        self.output == Output::Json
    }
}

/// The effective server and identity: flag or variable, else profile, else default.
fn resolve(conn: &Conn) -> anyhow::Result<(String, Identity, Option<PathBuf>)> {
    let file = config::load()?;
    let name = conn.profile.as_deref().unwrap_or(config::DEFAULT_PROFILE);
    let profile = match file.profiles.get(name) {
        Some(p) => p.clone(),
        None if conn.profile.is_some() => {
            return Err(UsageError(format!(
                "no profile `{name}` in {}: run `weft login --profile {name} ...` first",
                config::path()?.display()
            ))
            .into())
        }
        None => config::Profile::default(),
    };
    let server = conn
        .server
        .clone()
        .or(profile.server)
        .unwrap_or_else(|| config::DEFAULT_SERVER.into());
    let api_key = conn.api_key.clone().or(profile.api_key);
    let ca_cert = conn.ca_cert.clone().or(profile.ca_cert);
    // With a key, the key decides who calls: no default identity is sent (empty is not sent),
    // only a tenant or user the caller named, which the server checks against the key.
    let default = |d: &str| if api_key.is_some() { "" } else { d }.to_string();
    let who = Identity {
        tenant: conn
            .tenant
            .clone()
            .or(profile.tenant)
            .unwrap_or_else(|| default("default")),
        user: conn
            .user
            .clone()
            .or(profile.user)
            .unwrap_or_else(|| default("admin")),
        api_key,
    };
    Ok((server, who, ca_cert))
}

/// A mistake on the command line or in an input file (exit 1).
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A job that `--wait` watched failed (exit 4).
#[derive(Debug)]
pub(crate) struct JobFailed(pub String);

impl std::fmt::Display for JobFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JobFailed {}

/// `weft cluster health` found a service unhealthy, or could not check it (exit 5).
#[derive(Debug)]
pub(crate) struct Unhealthy(pub String);

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unhealthy {}

/// Runs a client command; prints the error and maps it to the documented exit code.
pub(crate) fn run(cmd: ClientCommand, bin: clap::Command) -> anyhow::Result<ExitCode> {
    match dispatch(cmd, bin) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            let code = exit_code(&e);
            match e.downcast_ref::<ClientError>() {
                // The server's message, as it is.
                Some(c @ ClientError::Status { status, .. }) => {
                    eprintln!("error: {} (HTTP {status})", c.server_message())
                }
                Some(c) if c.tls_refusal().is_some() => eprintln!(
                    "error: {}\n  the server's certificate is not trusted: give its CA with \
                     --ca-cert FILE (`weft up --tls` prints its path), or save it in the profile: \
                     weft login --ca-cert FILE",
                    c.tls_refusal().unwrap_or_default()
                ),
                Some(c) if c.unreachable().is_some() => {
                    let (server, cause) = c.unreachable().unwrap_or_default();
                    eprintln!(
                        "error: cannot reach the weft server at {server} ({cause})\n  is `weft up` \
                         running? Another server: --server URL (or WEFT_URL); to remember one: \
                         weft login --server URL"
                    )
                }
                _ => eprintln!("error: {e:#}"),
            }
            Ok(ExitCode::from(code))
        }
    }
}

pub(crate) fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<JobFailed>().is_some() {
        return 4;
    }
    if e.downcast_ref::<Unhealthy>().is_some() {
        return 5;
    }
    if e.downcast_ref::<template::Problems>().is_some() {
        return 5;
    }
    match e.downcast_ref::<ClientError>() {
        Some(ClientError::Status { status, .. }) if (400..500).contains(status) => 2,
        Some(_) => 3,
        None => 1,
    }
}

fn dispatch(cmd: ClientCommand, bin: clap::Command) -> anyhow::Result<()> {
    use weft_client::api::Kind;
    match cmd {
        ClientCommand::Login(a) => login(a),
        ClientCommand::Cluster(a) => cluster::run(a),
        ClientCommand::Apply(a) => declared::apply(a),
        ClientCommand::Provider(a) => provider::run(a),
        ClientCommand::Hardwaretype(a) => catalog::run(Kind::HardwareType, a),
        ClientCommand::Imagetype(a) => catalog::run(Kind::ImageType, a),
        ClientCommand::Service(a) => catalog::run(Kind::Service, a),
        ClientCommand::Template(a) => template::run(a),
        ClientCommand::Partialtemplate(a) => catalog::run(Kind::PartialTemplate, a),
        ClientCommand::Catalog(a) => catalog::run_catalog(a),
        ClientCommand::Tenant(a) => admin::tenant(a),
        ClientCommand::Provisioners(a) => admin::provisioners(a),
        ClientCommand::Resource(a) => admin::resource(a),
        ClientCommand::Apikey(a) => admin::apikey(a),
        ClientCommand::Audit(a) => audit::run(a),
        ClientCommand::Events(a) => events::run(a),
        ClientCommand::Hostpool(a) => hostpool::run(a),
        ClientCommand::Cost(a) => cost::run(a),
        ClientCommand::Completions(a) => {
            let (mut bin, mut script) = (bin, Vec::new());
            clap_complete::generate(a.shell, &mut bin, "weft", &mut script);
            crate::cmd::print_out(&String::from_utf8_lossy(&script))
        }
    }
}

fn login(a: LoginArgs) -> anyhow::Result<()> {
    let mut file = config::load()?;
    let name = a
        .conn
        .profile
        .clone()
        .unwrap_or_else(|| config::DEFAULT_PROFILE.into());
    let mut p = file.profiles.get(&name).cloned().unwrap_or_default();
    if a.conn.server.is_some() {
        p.server = a.conn.server.clone();
    }
    if a.conn.tenant.is_some() {
        p.tenant = a.conn.tenant.clone();
    }
    if a.conn.user.is_some() {
        p.user = a.conn.user.clone();
    }
    if a.conn.api_key.is_some() {
        p.api_key = a.conn.api_key.clone();
    }
    if let Some(ca) = &a.conn.ca_cert {
        p.ca_cert = Some(std::path::absolute(ca).unwrap_or(ca.clone()));
    }
    if !a.no_verify {
        let anon = |d: &str| if p.api_key.is_some() { "" } else { d }.to_string();
        let conn = Conn {
            profile: None,
            server: Some(
                p.server
                    .clone()
                    .unwrap_or_else(|| config::DEFAULT_SERVER.into()),
            ),
            // With a key and no tenant or user, none is sent (the key decides).
            tenant: Some(p.tenant.clone().unwrap_or_else(|| anon("default"))),
            user: Some(p.user.clone().unwrap_or_else(|| anon("admin"))),
            api_key: p.api_key.clone(),
            ca_cert: p.ca_cert.clone(),
            output: a.conn.output,
        };
        let ctx = Ctx::new(&conn)?;
        ctx.block(ctx.client.clusters(None))
            .context("checking the profile against the server (--no-verify skips this)")?;
    }
    file.profiles.insert(name.clone(), p.clone());
    let path = config::save(&file)?;
    if a.conn.output == Output::Json {
        print_json(&p)?;
    } else {
        println!(
            "profile `{name}` saved in {}: {} as {} in tenant {}",
            path.display(),
            p.server.as_deref().unwrap_or(config::DEFAULT_SERVER),
            p.user.as_deref().unwrap_or("admin"),
            p.tenant.as_deref().unwrap_or("default"),
        );
    }
    Ok(())
}

// ---- output helpers ----

pub(crate) fn print_json<T: Serialize + ?Sized>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub(crate) fn table(header: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if !std::io::stdout().is_terminal() {
        t.force_no_tty();
    }
    // `COLUMNS` wins over the terminal's own idea; a width of 0 (a terminal or a variable that
    // says 0, or nothing known) means "do not wrap" rather than one character per line.
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok());
    match columns.or_else(|| t.width()) {
        Some(w) if w >= MIN_TABLE_WIDTH => {
            t.set_width(w);
        }
        _ => {
            t.set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        }
    }
    t
}

/// Narrower than this, a table is not wrapped to the terminal at all.
const MIN_TABLE_WIDTH: u16 = 20;

/// `1700000000000` as `2023-11-14 22:13 UTC`; 0 as `never`.
pub(crate) fn time(ms: i64) -> String {
    if ms <= 0 {
        return "never".into();
    }
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Asks a yes/no question on the terminal; refuses when stdin is not a terminal.
pub(crate) fn confirm(question: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(
            "stdin is not a terminal: pass --yes to go ahead without asking".into(),
        )
        .into());
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Reads a file, or stdin for `-`.
pub(crate) fn read_input(path: &str) -> anyhow::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path).map_err(|e| UsageError(format!("reading {path}: {e}")).into())
    }
}

/// Parses JSON input, naming the file on error (exit 1).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &str,
) -> anyhow::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| UsageError(format!("{what}: {e}")).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(time(0), "never");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn errors_map_to_documented_exit_codes() {
        let status = |s| {
            anyhow::Error::from(ClientError::Status {
                url: "u".into(),
                status: s,
                body: "b".into(),
            })
        };
        assert_eq!(exit_code(&status(404)), 2);
        assert_eq!(exit_code(&status(500)), 3);
        assert_eq!(exit_code(&JobFailed("x".into()).into()), 4);
        assert_eq!(exit_code(&Unhealthy("x".into()).into()), 5);
        assert_eq!(exit_code(&UsageError("x".into()).into()), 1);
        assert_eq!(exit_code(&template::Unusable("x".into()).into()), 1);
        assert_eq!(exit_code(&template::Problems("x".into()).into()), 5);
    }
}
