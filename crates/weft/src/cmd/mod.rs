//! The subcommands of the `weft` binary, one module each.

pub(crate) mod admin;
pub(crate) mod bench;
pub(crate) mod bench_create;
pub(crate) mod bench_limiter;
pub(crate) mod bench_reads;
pub(crate) mod bench_throttle;
pub(crate) mod bench_webhooks;
pub(crate) mod cli;
pub(crate) mod down;
pub(crate) mod local_ca;
pub(crate) mod plan;
pub(crate) mod provisioner;
pub(crate) mod runtime;
pub(crate) mod server;
pub(crate) mod solve;
pub(crate) mod up_log;
pub(crate) mod up_record;

/// Writes a command's output to stdout. A reader that went away (`weft plan | head`) is not an
/// error: the command just stops writing.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
