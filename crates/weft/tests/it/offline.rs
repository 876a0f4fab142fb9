//! `weft solve` and `weft plan` as template authors run them: files in, JSON or text out, exit codes
//! 0 (done), 1 (bad input) and 2 (no layout).

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

use crate::support::weft;

const CATALOG: &str = include_str!("../../../../examples/catalog/catalog.json");

fn write_catalog(dir: &Path) {
    let catalog: Value = serde_json::from_str(CATALOG).unwrap();
    std::fs::write(
        dir.join("t.json"),
        catalog["clustertemplates"][0].to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("s.json"), catalog["services"].to_string()).unwrap();
}

/// A layout of 5 nodes of the example's first template.
const SOLVE_FIVE: [&str; 9] = [
    "solve",
    "--template",
    "t.json",
    "--size",
    "5",
    "--hardwaretypes",
    "small,medium",
    "--imagetypes",
    "host",
];

fn run(dir: &Path, args: &[&str]) -> Output {
    weft().current_dir(dir).args(args).output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn solve_prints_a_sorted_layout_that_covers_every_service() {
    let dir = tempfile::tempdir().unwrap();
    write_catalog(dir.path());
    let out = run(dir.path(), &SOLVE_FIVE);
    let v = stdout_json(&out);
    let groups = v["layout"].as_array().unwrap();
    let total: u64 = groups.iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 5);
    let mut seen: Vec<String> = Vec::new();
    for g in groups {
        let services: Vec<String> = serde_json::from_value(g["services"].clone()).unwrap();
        let mut sorted = services.clone();
        sorted.sort();
        assert_eq!(services, sorted, "services are sorted");
        assert_eq!(
            g["hardwaretype"], "small",
            "the first offered hardware type that fits is used"
        );
        seen.extend(services);
    }
    for s in ["kv-primary", "kv-replica", "web", "lb"] {
        assert!(seen.iter().any(|x| x == s), "{s} is placed somewhere: {v}");
    }
    let again = stdout_json(&run(dir.path(), &SOLVE_FIVE));
    assert_eq!(v, again, "the same input gives the same layout");
    let text = run(
        dir.path(),
        &[&SOLVE_FIVE[..], &["--format", "text"]].concat(),
    );
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("NODES") && lines[0].contains("SERVICES"),
        "{text}"
    );
    assert_eq!(lines.len(), groups.len() + 2, "{text}");
    assert_eq!(
        lines.last(),
        Some(&format!("5 nodes in {} groups", groups.len()).as_str())
    );
    for (g, line) in groups.iter().zip(&lines[1..]) {
        let count = g["count"].to_string();
        assert!(line.trim_start().starts_with(&count), "{line}");
        assert!(line.contains(g["hardwaretype"].as_str().unwrap()), "{line}");
    }
}

#[test]
fn solve_explains_a_missing_layout_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let t = json!({"name": "tight", "defaults": {"services": ["a", "b"]},
        "constraints": {"layout": {"cantcoexist": [["a", "b"]]},
                        "services": {"a": {"quantities": {"max": 1}}, "b": {"quantities": {"max": 1}}}}});
    std::fs::write(dir.path().join("t.json"), t.to_string()).unwrap();
    let out = run(
        dir.path(),
        &[
            "solve",
            "--template",
            "t.json",
            "--size",
            "3",
            "--hardwaretypes",
            "small",
            "--imagetypes",
            "host",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("3 nodes") && stderr.contains('a') && stderr.contains('b'),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // A size outside the template's range is no layout either (issue 13), not bad input.
    let ranged = json!({"name": "ranged", "defaults": {"services": ["a"]},
        "constraints": {"size": {"min": 2, "max": 4}}});
    std::fs::write(dir.path().join("r.json"), ranged.to_string()).unwrap();
    for size in ["1", "5"] {
        let out = run(
            dir.path(),
            &[
                "solve",
                "--template",
                "r.json",
                "--size",
                size,
                "--hardwaretypes",
                "small",
                "--imagetypes",
                "host",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "size {size}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("2 to 4"), "{stderr}");
    }
}

#[test]
fn solve_rejects_bad_input_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    write_catalog(dir.path());
    std::fs::write(dir.path().join("bad.json"), "{\"name\":").unwrap();
    let cases: [&[&str]; 3] = [
        &[
            "solve",
            "--template",
            "bad.json",
            "--size",
            "3",
            "--hardwaretypes",
            "small",
            "--imagetypes",
            "host",
        ],
        &[
            "solve",
            "--template",
            "missing.json",
            "--size",
            "3",
            "--hardwaretypes",
            "small",
            "--imagetypes",
            "host",
        ],
        &[
            "solve",
            "--template",
            "t.json",
            "--size",
            "0",
            "--hardwaretypes",
            "small",
            "--imagetypes",
            "host",
        ],
    ];
    for args in cases {
        let out = run(dir.path(), args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn plan_prints_tasks_edges_and_stages_as_json_and_as_text() {
    let dir = tempfile::tempdir().unwrap();
    write_catalog(dir.path());
    let base = [
        "plan",
        "--template",
        "t.json",
        "--services",
        "s.json",
        "--size",
        "3",
        "--hardwaretypes",
        "small",
        "--imagetypes",
        "host",
    ];
    let mut args = base.to_vec();
    args.extend(["--operation", "create"]);
    let v = stdout_json(&run(dir.path(), &args));
    assert_eq!(v["action"], "CLUSTER_CREATE");
    let tasks = v["tasks"].as_array().unwrap();
    let creates = tasks.iter().filter(|t| t["taskName"] == "CREATE").count();
    assert_eq!(creates, 3, "one CREATE per node");
    assert!(!v["edges"].as_array().unwrap().is_empty());
    let stages = v["stages"].as_array().unwrap();
    let staged: usize = stages.iter().map(|s| s.as_array().unwrap().len()).sum();
    assert_eq!(staged, tasks.len(), "the stage view holds every task once");
    assert_eq!(stages[0][0]["taskName"], "CREATE");

    args.extend(["--format", "text"]);
    let out = run(dir.path(), &args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("CLUSTER_CREATE"), "{text}");
    assert!(text.contains("START"));
}
