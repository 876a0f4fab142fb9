//! `weft plan`: offline plan preview. (owned by the planner work)

/// Arguments of `weft plan`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("weft plan is not implemented yet")
}
