//! The subcommands of the `weft` binary, one module each.

pub mod admin;
pub mod bench;
pub mod bench_create;
pub mod bench_reads;
pub mod bench_webhooks;
pub mod cli;
pub mod down;
pub mod local_ca;
pub mod plan;
pub mod provisioner;
pub mod runtime;
pub mod server;
pub mod solve;
pub mod up_log;
pub mod up_record;

/// Writes a command's output to stdout. A reader that went away (`weft plan | head`) is not an
/// error: the command just stops writing.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
