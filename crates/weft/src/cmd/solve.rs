//! `weft solve`: the offline layout solver for template authors. (owned by the solver work)

/// Arguments of `weft solve`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("weft solve is not implemented yet")
}
