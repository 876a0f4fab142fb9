//! `weft template test` as CI runs it, offline with `--catalog`: the example catalog passes; a
//! broken template reports each of its problems (text and JSON) and exits 5; input that is not
//! usable exits 1.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use crate::support::weft;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog")
}

fn run(dir: &Path, args: &[&str]) -> Output {
    weft()
        .current_dir(dir)
        .arg("template")
        .arg("test")
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_example_template_passes() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = examples();
    let catalog = catalog.to_str().unwrap();
    let file = format!("{catalog}/catalog.json");
    let out = run(dir.path(), &[&file, "--catalog", catalog, "-o", "json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["passed"], true);
    let all: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let names: Vec<&str> = all["clustertemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let tested: Vec<&str> = v["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["template"].as_str().unwrap())
        .collect();
    assert_eq!(tested, names, "every template of the file is tested");
    for r in v["templates"].as_array().unwrap() {
        assert_eq!(r["problems"], json!([]), "{r}");
        assert_eq!(r["plans"].as_array().unwrap().len(), 2, "{r}");
    }
    // By name, against the directory's catalog.json, in text.
    for name in names {
        let out = run(dir.path(), &[name, "--catalog", catalog]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {stdout}\n{stderr}");
        assert!(
            stdout.starts_with(&format!("template {name}: PASS\n")),
            "{stdout}"
        );
        assert!(stdout.contains("  PASS  sizes "), "{stdout}");
        assert!(!stdout.contains("FAIL"), "{stdout}");
    }
}

/// The example catalog plus a service whose actions cannot run: an automator type nobody offers
/// (install) and a shell action without its script (start).
fn broken_catalog(dir: &Path) -> PathBuf {
    let path = examples().join("catalog.json");
    let mut cat: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cat["services"].as_array_mut().unwrap().push(json!({
        "name": "broken",
        "provisioner": {"actions": {
            "install": {"type": "shelll", "fields": {"script": "x.sh"}},
            "start": {"type": "shell", "fields": {"args": "start"}}
        }}
    }));
    let file = dir.join("catalog.json");
    std::fs::write(&file, cat.to_string()).unwrap();
    file
}

/// kv-web with one of each problem.
fn broken_template() -> Value {
    json!({
        "name": "broken-kv-web",
        "compatibility": {"hardwaretypes": ["small"], "imagetypes": ["host"],
                          "services": ["kv-primary", "kv-replica", "web", "lb", "broken"]},
        "defaults": {
            "services": ["kv-primary", "kv-replica", "web", "lb", "broken", "nosuch"],
            "provider": "local", "hardwaretype": "medium", "imagetype": "host",
            "config": {"kv": {"port": "7000", "peer": "%ip.service.ghost%"}}
        },
        "constraints": {
            "size": {"min": 1, "max": 7},
            "layout": {"cantcoexist": [["kv-primary", "kv-replica"], ["lb", "web"]]},
            "services": {
                "kv-primary": {"quantities": {"min": 1, "max": 1}},
                "kv-replica": {"quantities": {"min": 1, "max": 1}},
                "web": {"quantities": {"min": 1, "max": 2}},
                "lb": {"quantities": {"min": 1, "max": 1}},
                "broken": {"quantities": {"min": 1, "max": 1}}
            }
        },
        "links": [{"label": "web", "url": "http://%ip.service.web%:8080/"}]
    })
}

#[test]
fn a_broken_template_reports_each_problem_and_exits_5() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = broken_catalog(dir.path());
    let catalog = catalog.to_str().unwrap();
    std::fs::write(dir.path().join("t.json"), broken_template().to_string()).unwrap();
    let out = run(dir.path(), &["t.json", "--catalog", catalog, "-o", "json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{stdout}\n{stderr}");
    assert!(stderr.contains("problem(s) in broken-kv-web"), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["passed"], false);
    let r = &v["templates"][0];
    assert_eq!(r["template"], "broken-kv-web");
    assert_eq!(r["passed"], false);
    let problems: Vec<(&str, &str, &str)> = r["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["check"].as_str().unwrap(),
                p["field"].as_str().unwrap(),
                p["message"].as_str().unwrap(),
            )
        })
        .collect();
    let expected: [(&str, &str, &str); 8] = [
        (
            "references",
            "defaults.services[5]",
            "service nosuch does not exist",
        ),
        (
            "defaults",
            "defaults.hardwaretype",
            "not in compatibility.hardwaretypes",
        ),
        (
            "sizes",
            "constraints.size",
            "no layout at 1 (provider local): ",
        ),
        (
            "sizes",
            "constraints.size",
            "no layout at 7 (provider local): ",
        ),
        ("macros", "links[0].url", "lists every node of service web"),
        (
            "macros",
            "defaults.config.kv.peer",
            "names service ghost, which does not exist",
        ),
        (
            "automators",
            "services/broken.provisioner.actions.install.type",
            "automator type shelll (did you mean shell?)",
        ),
        (
            "automators",
            "services/broken.provisioner.actions.start.fields",
            "automator type shell needs script",
        ),
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for ((check, field, message), (want_check, want_field, want_text)) in
        problems.iter().zip(expected)
    {
        assert_eq!((*check, *field), (want_check, want_field), "{problems:#?}");
        assert!(message.contains(want_text), "{field}: {message}");
    }
    let scan = &r["sizes"][0];
    assert_eq!(scan["provider"], "local");
    assert_eq!(scan["scanned"], json!([1, 7]));
    assert_eq!(scan["solved"], json!([[2, 6]]));
    let unsolved: Vec<(u64, u64)> = scan["unsolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["from"].as_u64().unwrap(), u["to"].as_u64().unwrap()))
        .collect();
    assert_eq!(unsolved, vec![(1, 1), (7, 7)]);
    let plans: Vec<u64> = r["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["size"].as_u64().unwrap())
        .collect();
    assert_eq!(
        plans,
        vec![2, 6],
        "plans at the smallest and largest size with a layout"
    );

    // The text form: a line per check, each problem under its check.
    let out = run(dir.path(), &["t.json", "--catalog", catalog]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(5));
    assert!(
        stdout.starts_with("template broken-kv-web: FAIL\n"),
        "{stdout}"
    );
    for line in [
        "  PASS  form ",
        "  FAIL  references ",
        "  FAIL  defaults ",
        "  FAIL  sizes ",
        "  FAIL  macros ",
        "  FAIL  automators ",
        "  PASS  plans ",
        "          defaults.config.kv.peer: a macro names service ghost",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
}

#[test]
fn unusable_input_exits_1_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = examples();
    let catalog = catalog.to_str().unwrap();
    std::fs::write(dir.path().join("notes.json"), "this is { not JSON").unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["notes.json", "--catalog", catalog],
            "notes.json is not JSON",
        ),
        (
            &["missing.json", "--catalog", catalog],
            "reading missing.json",
        ),
        (
            &["no-such-template", "--catalog", catalog],
            "no template no-such-template",
        ),
        (
            &["kv-web", "--catalog", "notes.json"],
            "notes.json is not JSON",
        ),
    ];
    for (args, want) in cases {
        let out = run(dir.path(), args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}
