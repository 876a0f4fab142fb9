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

/// `weft bench reads` at a small size, as a test of the read bounds (no timing is judged): every
/// one of many concurrent lists and status reads is answered, and the server's memory stays far
/// below what building each answer from the cluster's nodes and tasks took.
#[test]
fn bench_reads_answers_every_concurrent_read_with_bounded_memory() {
    let out = weft()
        .args([
            "bench",
            "reads",
            "--nodes",
            "300",
            "--small",
            "3",
            "--concurrency",
            "200",
            "--workers",
            "20",
            "-o",
            "json",
        ])
        .output()
        .expect("run weft bench reads");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    let r: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    for phase in ["list", "status"] {
        assert_eq!(r[phase]["answered"], 200, "{phase}: {r}");
        assert_eq!(r[phase]["failed"], 0, "{phase}: {r}");
    }
    assert!(
        r["list"]["answer_bytes"].as_u64().unwrap() > 1000,
        "four clusters listed: {r}"
    );
    let peak = r["server_peak_rss_bytes"].as_u64().unwrap();
    assert!(
        peak > 0 && peak < 300 * 1024 * 1024,
        "the server's peak memory: {peak} bytes: {r}"
    );
}
