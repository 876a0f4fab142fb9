//! Helpers: run the built `weft` binary, wait for its banner, and speak plain HTTP/1.1 to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) fn weft() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.env("WEFT_LOG", "warn");
    // The CLI's files (profiles; the data dirs `weft up` notes) stay in the build's own dir, not
    // in the user's config.
    c.env(
        "XDG_CONFIG_HOME",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/xdg-config"),
    );
    for (k, _) in std::env::vars() {
        if k.starts_with("WEFT_") && k != "WEFT_LOG" {
            c.env_remove(k);
        }
    }
    c
}

/// A child process that is killed when dropped.
pub(crate) struct Running {
    pub child: Child,
    pub api: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and reads its stdout until the "REST API" banner line; returns the API base URL.
pub(crate) fn start(mut cmd: Command) -> Running {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn weft");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut api = None;
    for line in lines.by_ref() {
        let line = line.expect("read stdout");
        if let Some(rest) = line.trim().strip_prefix("REST API") {
            let url = rest.split_whitespace().next().expect("url after REST API");
            api = Some(url.trim_end_matches("/v2").to_string());
            break;
        }
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let api = api.expect("weft exited before printing its banner");
    Running { child, api }
}

/// A minimal HTTP/1.1 request; returns (status, body).
pub(crate) fn http(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut s = TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
