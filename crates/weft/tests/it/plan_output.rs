//! The plan as `weft cluster create --dry-run` prints it (issue 15): the layout grouped and a
//! summary, the task table only with `--verbose`, tables that fit `COLUMNS=40` and do not
//! collapse with `COLUMNS=0`.

use crate::support::weft;
use crate::up_down::up;

fn dry_run(api: &str, columns: &str, extra: &[&str]) -> String {
    let out = weft()
        .args(["cluster", "create", "--server", api, "--template", "kv-web"])
        .args(["--size", "4", "--dry-run"])
        .args(extra)
        .env("COLUMNS", columns)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn dry_runs_show_the_layout_grouped_and_tables_fit_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let mut u = up(&dir.path().join("data"));

    assert_eq!(
        dry_run(&u.api, "80", &[]),
        "plan (dry run): CLUSTER_CREATE\n\
         \x20 3 nodes  small/host  kv-replica, web\n\
         \x20 1 node   small/host  kv-primary, lb\n\
         36 tasks on 4 nodes, longest chain 11\n\
         cost: 0.00 -> 0.04 USD per hour (0.96 per day)\n"
    );

    let narrow = dry_run(&u.api, "40", &["--verbose"]);
    let table: Vec<&str> = narrow.lines().skip(5).collect(); // after the summary and cost lines
    assert!(table.len() > 36, "{narrow}");
    for l in &table {
        assert!(l.chars().count() <= 40, "wider than 40: {l}");
    }
    assert!(table.iter().any(|l| l.contains("STAGE")), "{narrow}");

    let zero = dry_run(&u.api, "0", &["--verbose"]);
    let rows: Vec<&str> = zero.lines().filter(|l| l.contains("CREATE ")).collect();
    assert_eq!(rows.len(), 4, "{zero}");
    for r in rows {
        // A whole node id (a UUID) on the row: nothing wrapped.
        let id = r.split_whitespace().find(|w| w.len() == 36);
        assert!(id.is_some(), "collapsed: {r}");
    }
    let _ = u.child.kill();
    let _ = u.child.wait();
}
