//! The external OpenAPI document against the server it describes, checked by schemathesis, a
//! property-based API fuzzer (from PyPI; `.ci/run` installs it in `~/.cache/weft/schemathesis`, or
//! set `WEFT_SCHEMATHESIS`). A real `weft server` on a temporary SQLite store, with no provisioner
//! (so nothing it is asked to create ever runs), is called as a tenant admin with requests
//! generated from `GET /v2/openapi.json`, with a fixed seed so that a run can be replayed.
//!
//! Checks, on every operation: no 5xx, every status code and content type documented, every
//! answer matching its schema, an undocumented method answered 405 with a true `Allow` header.
//! These run as the tenant admin and as a plain user. Then, on every operation but those listed
//! in [`RULES_BEYOND_THE_SCHEMA`]: a request the document calls valid is not refused (a client
//! generated from the document validates as the server does); and on every operation but those
//! in [`LENIENT_BEYOND_THE_SCHEMA`]: a request the document calls invalid is refused (the
//! document states the reader's leniency: null for an absent optional field, versions up to
//! 2^64 - 1, a PUT body without its name).

use std::path::PathBuf;
use std::process::Command;

use crate::support::{http, start, weft};

/// Operations where a request the document calls valid may still get a 400 (or, for the usage
/// report, Coopr's 405): rules no schema states yet, each named. Shrinking this list is open
/// work (issue 35, item 7).
const RULES_BEYOND_THE_SCHEMA: &[(&str, &str)] = &[
    ("PUT /v2/nodes/{id}", "the body's id must be the path's"),
    (
        "PUT /v2/providers/{name}",
        "the path's name must be a valid name (undocumented pattern)",
    ),
    (
        "PUT /v2/imagetypes/{name}",
        "the path's name must be a valid name (undocumented pattern)",
    ),
    (
        "PUT /v2/hardwaretypes/{name}",
        "the path's name must be a valid name (undocumented pattern)",
    ),
    (
        "PUT /v2/services/{name}",
        "only the healthcheck action takes timeout, tries, interval",
    ),
    (
        "POST /v2/services",
        "only the healthcheck action takes timeout, tries, interval",
    ),
    (
        "PUT /v2/clustertemplates/{name}",
        "the initial lease must not exceed the max lease",
    ),
    (
        "POST /v2/clustertemplates",
        "the initial lease must not exceed the max lease",
    ),
    (
        "PUT /v2/partialtemplates/{name}",
        "the initial lease must not exceed the max lease",
    ),
    (
        "POST /v2/partialtemplates",
        "the initial lease must not exceed the max lease",
    ),
    ("POST /v2/import", "each entity's own rules (above)"),
    (
        "POST /v2/nodes",
        "links may not be null; the body must name a cluster of the tenant",
    ),
    (
        "POST /v2/clusters/{id}",
        "expireTime is a signed 64-bit time",
    ),
    (
        "POST /v2/resolve",
        "the defaults may come from included partial templates",
    ),
    (
        "POST /v2/clusters",
        "the template decides the size range, services and types",
    ),
    (
        "POST /v2/solve",
        "exactly one of clusterTemplate and template",
    ),
    (
        "GET /v2/metrics/nodes/usage",
        "tenant must be the caller's (405, as Coopr); start <= end",
    ),
    (
        "POST /v2/getClusterStatuses",
        "answers 501 on purpose, as documented",
    ),
];

/// Operations where a request the document calls invalid may still be accepted: the lenient
/// reader takes more than the document states yet (numbers and booleans as text, null for
/// absent in nested objects). Shrinking this list is open work (issue 35, item 7).
const LENIENT_BEYOND_THE_SCHEMA: &[(&str, &str)] = &[
    (
        "POST /v2/providers",
        "providertype given as a number is read as text",
    ),
    (
        "PUT /v2/providers/{name}",
        "providertype given as a number is read as text",
    ),
    (
        "POST /v2/hardwaretypes",
        "icon given as a number is read as text",
    ),
    (
        "PUT /v2/hardwaretypes/{name}",
        "icon given as a number is read as text",
    ),
    (
        "POST /v2/imagetypes",
        "icon given as a number is read as text",
    ),
    (
        "PUT /v2/imagetypes/{name}",
        "icon given as a number is read as text",
    ),
    ("POST /v2/services", "links[].url null is read as absent"),
    (
        "PUT /v2/services/{name}",
        "links[].url null is read as absent",
    ),
    (
        "POST /v2/clustertemplates",
        "links[].url null is read as absent",
    ),
    (
        "PUT /v2/clustertemplates/{name}",
        "links[].url null is read as absent",
    ),
    (
        "POST /v2/partialtemplates",
        "links[].url null is read as absent",
    ),
    (
        "PUT /v2/partialtemplates/{name}",
        "administration.rollout of another type is read as absent",
    ),
    ("POST /v2/import", "the entities' leniency (above)"),
    (
        "POST /v2/getNodeProperties",
        "services given as scalars are read as text",
    ),
    ("GET /v2/metrics/nodes/usage", "end is any 64-bit time"),
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
fn run(bin: &PathBuf, url: &str, user: &str, args: &[&str]) -> (i32, String) {
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
        .args(["-H", "Coopr-TenantID: fuzz", "-H"])
        .arg(format!("Coopr-UserID: {user}"))
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

    // As the tenant admin and as a plain user (whose 403s must be documented too).
    for user in ["admin", "bob"] {
        let (code, out) = run(
            &bin,
            &doc,
            user,
            &[
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,unsupported_method,allow_header_conformance",
                "--exclude-name",
                "POST /v2/getClusterStatuses",
            ],
        );
        assert_eq!(
            code, 0,
            "the server answers {user} as its document says:\n{out}"
        );
    }

    let mut args = vec!["--checks", "positive_data_acceptance", "--mode", "positive"];
    for (name, _why) in RULES_BEYOND_THE_SCHEMA {
        args.extend(["--exclude-name", name]);
    }
    let (code, out) = run(&bin, &doc, "admin", &args);
    assert_eq!(
        code, 0,
        "a request the document calls valid is accepted:\n{out}"
    );

    let mut args = vec!["--checks", "negative_data_rejection", "--mode", "negative"];
    for (name, _why) in LENIENT_BEYOND_THE_SCHEMA {
        args.extend(["--exclude-name", name]);
    }
    let (code, out) = run(&bin, &doc, "admin", &args);
    assert_eq!(
        code, 0,
        "a request the document calls invalid is refused:\n{out}"
    );
}
