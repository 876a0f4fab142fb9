//! The external OpenAPI document against the server it describes, checked by schemathesis, a
//! property-based API fuzzer (from PyPI; `.ci/run` installs it in `~/.cache/weft/schemathesis`, or
//! set `WEFT_SCHEMATHESIS`). A real `weft server` on a temporary SQLite store, with no provisioner
//! (so nothing it is asked to create ever runs), is called as a tenant admin with requests
//! generated from `GET /v2/openapi.json`, with a fixed seed so that a run can be replayed.
//!
//! Checks, on every operation: no 5xx (but a 501 the operation documents: `POST
//! /v2/getClusterStatuses`), every status code and content type documented, every answer
//! matching its schema, an undocumented method answered 405 with a true `Allow` header. These
//! run as the tenant admin and as a plain user. Then, on every operation, with no exceptions: a
//! request the document calls valid is not refused (a client generated from the document
//! validates as the server does), and a request it calls invalid is refused (the document
//! states the reader's leniency: null for an absent optional field, text given as a number or
//! a boolean, versions up to 2^64 - 1, a PUT body without its name).
//!
//! Rules no schema language states are listed in the document (`x-weft-rules` on the operation
//! or on a schema its body reaches, each with an `id`); the hooks in `openapi_hooks.py` keep
//! generated valid requests inside exactly those rules, and fail the run on a rule they do not
//! know.

use std::path::PathBuf;
use std::process::Command;

use crate::support::{http, start, weft};

/// The tenant the requests are made in (the hooks name it as the caller's own).
const TENANT: &str = "fuzz";

/// The schemathesis executable, or `None` (then the test skips, or fails under CI=true).
fn schemathesis() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEFT_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/weft/schemathesis/bin/schemathesis");
    p.is_file().then_some(p)
}

/// The hooks file beside this test.
fn hooks() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/openapi_hooks.py")
}

/// Runs schemathesis against `url` with `args`, in a directory of its own (it keeps a cache in
/// its working directory); returns its exit code and output.
fn run(bin: &PathBuf, url: &str, user: &str, args: &[&str]) -> (i32, String) {
    let cwd = tempfile::tempdir().expect("a directory for schemathesis");
    let out = Command::new(bin)
        .current_dir(cwd.path())
        .args(["run", url, "--seed", "20261126", "--max-examples", "10"])
        .args([
            "--phases",
            "coverage,fuzzing",
            // One worker: Python 3.11's parser is not thread-safe, and hypothesis parses
            // lambdas' sources as it goes (a second worker made runs fail at random with
            // "AST constructor recursion depth mismatch"); one worker also keeps the order.
            "--workers",
            "1",
            "--no-color",
        ])
        .args(["-H", &format!("Coopr-TenantID: {TENANT}"), "-H"])
        .arg(format!("Coopr-UserID: {user}"))
        .args(["--generation-database", "none"])
        // The event stream answers for as long as the client reads unless `follow=false`: a
        // fuzzer cannot read an endless answer. Its parameters are checked in weft-server's
        // `events::bad_input_is_refused_by_name`.
        .args(["--exclude-path", "/v2/events"])
        .args(args)
        .env("SCHEMATHESIS_HOOKS", hooks())
        .env("WEFT_FUZZ_TENANT", TENANT)
        .output()
        .expect("run schemathesis");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// A fresh `weft server` (webhooks may name loopback URLs: the hooks' valid webhook URL is one)
/// with the fuzz tenant, and the URL of its document.
fn server() -> (crate::support::Running, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = weft();
    cmd.args([
        "server",
        "--port",
        "0",
        "--internal-port",
        "0",
        "--data-dir",
    ])
    .arg(dir.path())
    .env("WEFT_WEBHOOKS_ALLOW_LOOPBACK", "true");
    let srv = start(cmd);
    let sa = [("Coopr-TenantID", "superadmin"), ("Coopr-UserID", "admin")];
    let (code, body) = http(
        "PUT",
        &format!("{}/v2/tenants/{TENANT}", srv.api),
        &sa,
        &format!(r#"{{"tenant": {{"name": "{TENANT}", "workers": 0}}}}"#),
    );
    assert!(code < 300, "{code} {body}");
    let doc = format!("{}/v2/openapi.json", srv.api);
    (srv, dir, doc)
}

/// Runs schemathesis as `user` with `args` against a server of its own; each check is a test of
/// its own, so that they run side by side.
fn fuzz(user: &str, args: &[&str], what: &str) {
    let Some(bin) = schemathesis() else {
        weft_testkit::skip_or_fail("schemathesis", "not in ~/.cache/weft/schemathesis");
        return;
    };
    let (_srv, _dir, doc) = server();
    let (code, out) = run(&bin, &doc, user, args);
    assert_eq!(code, 0, "{what}:\n{out}");
}

/// What the conformance runs check.
const CONFORMANCE: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                           response_schema_conformance,unsupported_method,allow_header_conformance";

#[test]
fn the_tenant_admin_is_answered_as_the_document_says() {
    fuzz(
        "admin",
        &["--checks", CONFORMANCE],
        "the server answers the tenant admin as its document says",
    );
}

/// A plain user's 403s must be documented too.
#[test]
fn a_plain_user_is_answered_as_the_document_says() {
    fuzz(
        "bob",
        &["--checks", CONFORMANCE],
        "the server answers a plain user as its document says",
    );
}

#[test]
fn a_request_the_document_calls_valid_is_accepted() {
    fuzz(
        "admin",
        &["--checks", "positive_data_acceptance", "--mode", "positive"],
        "a request the document calls valid is accepted",
    );
}

#[test]
fn a_request_the_document_calls_invalid_is_refused() {
    fuzz(
        "admin",
        &["--checks", "negative_data_rejection", "--mode", "negative"],
        "a request the document calls invalid is refused",
    );
}
