//! The external OpenAPI document against the server it describes, checked by schemathesis, a
//! property-based API fuzzer (from PyPI; `.ci/run` installs it in `~/.cache/weft/schemathesis`, or
//! set `WEFT_SCHEMATHESIS`). A real `weft server` on a temporary SQLite store, with no provisioner
//! (so nothing it is asked to create ever runs), is called as a tenant admin with requests
//! generated from `GET /v2/openapi.json`, with a fixed seed so that a run can be replayed.
//!
//! Checks, on every operation: no 5xx, every status code and content type documented, every
//! answer matching its schema, an undocumented method answered 405 with a true `Allow` header.
//! Then, on every operation but those listed in [`RULES_BEYOND_THE_SCHEMA`]: a request the
//! document calls valid is not refused with 400 (a client generated from the document validates as
//! the server does). Requests the document calls invalid are not checked: the server is lenient on
//! purpose (numbers in strings, as Coopr was).

use std::path::PathBuf;
use std::process::Command;

use crate::support::{http, start, weft};

/// Operations whose server-side rules no OpenAPI schema can state, so a schema-valid request may
/// rightly get a 400 or a 405. Each names why.
const RULES_BEYOND_THE_SCHEMA: &[(&str, &str)] = &[
    (
        "PUT /v2/providers/{name}",
        "the body's name must be the path's",
    ),
    (
        "PUT /v2/hardwaretypes/{name}",
        "the body's name must be the path's",
    ),
    (
        "PUT /v2/imagetypes/{name}",
        "the body's name must be the path's",
    ),
    (
        "PUT /v2/services/{name}",
        "the body's name must be the path's",
    ),
    (
        "PUT /v2/clustertemplates/{name}",
        "the body's name must be the path's",
    ),
    (
        "PUT /v2/partialtemplates/{name}",
        "the body's name must be the path's",
    ),
    ("PUT /v2/nodes/{id}", "the body's id must be the path's"),
    (
        "POST /v2/nodes",
        "the body must name a cluster of the tenant",
    ),
    (
        "POST /v2/providers",
        "providertype must name a registered plugin type",
    ),
    (
        "POST /v2/services",
        "action types must name registered automator types",
    ),
    (
        "POST /v2/clustertemplates",
        "size.max must not be below size.min; names must exist",
    ),
    (
        "POST /v2/partialtemplates",
        "size.max must not be below size.min",
    ),
    (
        "POST /v2/resolve",
        "the defaults may come from included partial templates",
    ),
    (
        "POST /v2/import",
        "references between the imported entities must hold",
    ),
    (
        "POST /v2/clusters",
        "the template decides the size range, services and types",
    ),
    (
        "POST /v2/solve",
        "exactly one of clusterTemplate and template; the template must parse and name what exists",
    ),
    (
        "GET /v2/metrics/nodes/usage",
        "start must not be after end; tenant must be the caller's (405, as Coopr)",
    ),
    (
        "POST /v2/getClusterStatuses",
        "answers 501 on purpose, as documented",
    ),
];

/// The schemathesis executable, or `None` (then the test skips, or fails under CI=true).
fn schemathesis() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEFT_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/weft/schemathesis/bin/schemathesis");
    p.is_file().then_some(p)
}

/// Runs schemathesis against `url` with `args`, in a directory of its own (it keeps a cache in
/// its working directory); returns its exit code and output.
fn run(bin: &PathBuf, url: &str, args: &[&str]) -> (i32, String) {
    let cwd = tempfile::tempdir().expect("a directory for schemathesis");
    let out = Command::new(bin)
        .current_dir(cwd.path())
        .args(["run", url, "--seed", "20261126", "--max-examples", "10"])
        .args([
            "--phases",
            "coverage,fuzzing",
            "--workers",
            "2",
            "--no-color",
        ])
        .args(["-H", "Coopr-TenantID: fuzz", "-H", "Coopr-UserID: admin"])
        .args(["--generation-database", "none"])
        .args(args)
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .expect("run schemathesis");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_client_of_the_openapi_document_is_answered_as_it_documents() {
    let Some(bin) = schemathesis() else {
        weft_testkit::skip_or_fail("schemathesis", "not in ~/.cache/weft/schemathesis");
        return;
    };
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
    .arg(dir.path());
    let srv = start(cmd);
    let sa = [("Coopr-TenantID", "superadmin"), ("Coopr-UserID", "admin")];
    let (code, body) = http(
        "PUT",
        &format!("{}/v2/tenants/fuzz", srv.api),
        &sa,
        r#"{"tenant": {"name": "fuzz", "workers": 0}}"#,
    );
    assert!(code < 300, "{code} {body}");
    let doc = format!("{}/v2/openapi.json", srv.api);

    let (code, out) = run(
        &bin,
        &doc,
        &[
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,unsupported_method,allow_header_conformance",
            "--exclude-name",
            "POST /v2/getClusterStatuses",
        ],
    );
    assert_eq!(code, 0, "the server answers as its document says:\n{out}");

    let mut args = vec!["--checks", "positive_data_acceptance", "--mode", "positive"];
    for (name, _why) in RULES_BEYOND_THE_SCHEMA {
        args.extend(["--exclude-name", name]);
    }
    let (code, out) = run(&bin, &doc, &args);
    assert_eq!(
        code, 0,
        "a request the document calls valid is accepted:\n{out}"
    );
}
