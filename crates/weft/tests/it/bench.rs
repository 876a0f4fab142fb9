//! `weft bench create` runs a small create to the end and reports, as its last line with
//! `-o json`, one object with the figures BENCHMARKS.md records (no figure is judged here).

use crate::support::weft;

#[test]
fn bench_create_reports_its_figures_as_one_json_object() {
    let out = weft()
        .args([
            "bench",
            "create",
            "--nodes",
            "6",
            "--workers",
            "4",
            "-o",
            "json",
        ])
        .output()
        .expect("run weft bench create");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    let r: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(r["nodes"], 6);
    // 3 masters and 3 workers of the 20-service catalog: every task ran.
    assert!(r["tasks"].as_u64().unwrap() > 6 * 10, "{r}");
    for key in ["seconds", "tasks_per_s", "bytes_per_task", "peak_rss_bytes"] {
        assert!(r[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {r}");
    }
    let bad = weft()
        .args(["bench", "create", "--nodes", "6", "-o", "yaml"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
