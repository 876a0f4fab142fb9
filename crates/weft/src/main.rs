//! The `weft` binary: parses the command line and hands off to a subcommand. Kept thin.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Debug, Parser)]
#[command(name = "weft", version, about = "weft: whole clusters, not single machines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Solve a cluster layout offline from a template file (for template authors).
    Solve(cmd::solve::Args),
    /// Preview the task plan of a cluster operation offline.
    Plan(cmd::plan::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Solve(args) => cmd::solve::run(args),
        Command::Plan(args) => cmd::plan::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
