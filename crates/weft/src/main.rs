//! The `weft` binary: parses the command line and hands off to a subcommand. Kept thin.
// Doc comments here are clap's help text, where `<data>`-style placeholders are meant as written.
#![allow(rustdoc::invalid_html_tags)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// The server allocates and frees a task payload (tens to hundreds of KB) per take; mimalloc
/// keeps that off glibc's consolidation paths (see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    about = "weft: whole clusters, not single machines",
    after_help = cmd::cli::EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start everything on this machine: server and provisioner on an embedded SQLite, with the example catalog.
    Up(cmd::server::UpArgs),
    /// Delete every cluster `weft up` made on its data dir and wait until nothing is left.
    Down(cmd::down::DownArgs),
    /// Run the server (external API and provisioner API).
    Server(cmd::server::ServerArgs),
    /// Administration on the store directly (bootstrap API keys).
    Admin(cmd::admin::AdminArgs),
    /// Solve a cluster layout offline from a template file (for template authors).
    Solve(cmd::solve::Args),
    /// Preview the task plan of a cluster operation offline.
    Plan(cmd::plan::Args),
    /// Run a provisioner: takes tasks from the server and runs them with its plugins.
    Provisioner(cmd::provisioner::Args),
    /// Load drivers: `weft bench queue` (take/finish throughput), `create` (one create of N
    /// nodes), `reads`, `webhooks`, and `throttle` (N aws nodes at once within a request budget).
    Bench(cmd::bench::Args),
    #[command(flatten)]
    Client(cmd::cli::ClientCommand),
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    // Usage errors exit 1 (documented exit codes); --help and --version exit 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 })
    });
    // `weft up` logs to a file in its data dir (cmd::up_log); everything else to stderr.
    // `weft down` says what it deletes; its in-process server logs only what goes wrong.
    match cli.command {
        Command::Up(_) => {}
        Command::Down(_) => init_tracing("warn"),
        _ => init_tracing("info,sqlx=warn"),
    }
    let result = match cli.command {
        Command::Up(args) => cmd::server::up(args),
        Command::Down(args) => cmd::down::down(args),
        Command::Server(args) => cmd::server::server(args),
        Command::Admin(args) => cmd::admin::run(args),
        Command::Solve(args) => cmd::solve::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Provisioner(args) => cmd::provisioner::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Client(c) => cmd::cli::run(c, <Cli as clap::CommandFactory>::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// A reader that went away (`weft cluster list | head -1`) ends the command quietly with 141, as
/// a process killed by SIGPIPE would (what shells expect), instead of a panic: Rust ignores
/// SIGPIPE, so `println!` to a closed pipe panics with "failed printing to stdout". The daemons
/// print through writers that ignore the error, so this is never reached for them.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if payload.contains("Broken pipe") || payload.contains("BrokenPipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

/// Logs to stderr: `WEFT_LOG` if set, else `default`.
fn init_tracing(default: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| default.into());
    // Colour codes only on a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::Cli;

    /// Every subcommand and every argument a user can see says what it is for.
    #[test]
    fn every_argument_has_help() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut missing = Vec::new();
        walk(&cmd, "weft", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for a in c.get_arguments() {
            let id = a.get_id().as_str();
            if a.is_hide_set() || id == "help" || id == "version" {
                continue;
            }
            if a.get_help().is_none() && a.get_long_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for s in c.get_subcommands() {
            let sub = format!("{path} {}", s.get_name());
            if s.get_name() != "help" && s.get_about().is_none() {
                missing.push(sub.clone());
            }
            walk(s, &sub, missing);
        }
    }
}
