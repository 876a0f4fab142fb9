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

/// `weft bench throttle` at a small size, as a test of the provider's request budget (no timing is
/// judged): 30 nodes made at once through one aws provider against moto behind a proxy that
/// allows 5 calls a second with a burst of 5, the provider given the same budget. No call is
/// refused, every node has exactly one instance (the bench asks moto by the `weft:node` tag), and
/// none is left live after DELETE.
#[test]
fn bench_throttle_keeps_30_nodes_made_at_once_within_the_budget() {
    let moto = std::env::var_os("WEFT_MOTO_SERVER")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let home = std::path::PathBuf::from(std::env::var_os("HOME")?);
            Some(home.join(".cache/weft/moto/bin/moto_server"))
        })
        .filter(|p| p.is_file());
    let Some(moto) = moto else {
        weft_testkit::skip_or_fail(
            "moto",
            "no moto_server (python3 -m venv ~/.cache/weft/moto && \
             ~/.cache/weft/moto/bin/pip install 'moto[server,ec2]', or set WEFT_MOTO_SERVER)",
        );
        return;
    };
    let out = weft()
        .args([
            "bench", "throttle", "--nodes", "30", "--rate", "5", "--burst", "5",
        ])
        .arg("--moto")
        .arg(&moto)
        .args(["-o", "json"])
        .output()
        .expect("run weft bench throttle");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("some output");
    let r: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(r["refused"], 0, "no call over the budget: {r}");
    assert_eq!(r["failed"], 0, "every node's tasks passed: {r}");
    assert_eq!(r["nodes_with_one_instance"], 30, "{r}");
    assert_eq!(r["live_after_delete"], 0, "{r}");
    // Every node made at least a DescribeInstances, a RunInstances and a terminate.
    assert!(r["calls"].as_u64().unwrap() >= 30 * 3, "{r}");
    assert!(
        r["peak_calls_per_second"].as_u64().unwrap() <= 10,
        "the burst and one second's refill at most: {r}"
    );
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
