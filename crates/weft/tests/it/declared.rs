//! Templates as versions and clusters declared in files, end to end on the local provider (issue
//! 42): `weft apply -f` creates a cluster from a file, reaches an edited file's size, services and
//! config in one plan, changes nothing the second time, refuses a plan file made before the cluster
//! changed; `weft template history|diff|impact` and `weft cluster sync` move a second cluster to
//! a template version that adds a service and changes config, and its nodes serve the new config.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

use crate::support::{http, weft};
use crate::up_down::{up, Cleanup};

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "default"), ("Coopr-UserID", "admin")];

/// The CLI against `api` as the default tenant's admin, in `dir`.
fn cli(api: &str, dir: &Path, args: &[&str]) -> Output {
    weft()
        .args(args)
        .env("WEFT_URL", api)
        .env("WEFT_TENANT", "default")
        .env("WEFT_USER", "admin")
        .env("WEFT_CLI_CONFIG", dir.join("cli.toml"))
        .env("COLUMNS", "160")
        .current_dir(dir)
        .output()
        .expect("weft")
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn details(api: &str, id: &str) -> Value {
    let (code, text) = http("GET", &format!("{api}/v2/clusters/{id}"), &ADMIN, "");
    assert_eq!(code, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn cluster_named(api: &str, name: &str) -> String {
    let (_, text) = http("GET", &format!("{api}/v2/clusters"), &ADMIN, "");
    let all: Value = serde_json::from_str(&text).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name && c["status"] != "terminated")
        .and_then(|c| c["id"].as_str())
        .unwrap_or_else(|| panic!("no cluster {name}: {text}"))
        .to_string()
}

/// What the nodes running `service` answer on `port`, one body per node.
fn answers(d: &Value, service: &str, port: u16) -> Vec<String> {
    d["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| {
            n["properties"]["services"]
                .as_array()
                .unwrap()
                .contains(&json!(service))
        })
        .map(|n| {
            let ip = n["properties"]["ipaddresses"]["access_v4"]
                .as_str()
                .unwrap();
            http("GET", &format!("http://{ip}:{port}/"), &[], "").1
        })
        .collect()
}

/// Template `sites` from the example services: a store primary and web nodes; version 2 adds
/// the balancer and a new greeting.
fn sites(version: u32) -> Value {
    let services = if version == 1 {
        json!(["kv-primary", "web"])
    } else {
        json!(["kv-primary", "web", "lb"])
    };
    let greeting = if version == 1 { "hello" } else { "salut" };
    json!({
        "name": "sites",
        "defaults": {"services": services, "provider": "local", "hardwaretype": "small",
            "imagetype": "host", "config": {"kv": {"port": "7000"},
            "web": {"port": "8080", "greeting": greeting},
            "lb": {"port": "8000", "backends": "%join(map(ip.service.web,'$:8080'),',')%"}}},
        "compatibility": {"hardwaretypes": ["small"], "imagetypes": ["host"],
            "services": ["kv-primary", "web", "lb"]},
        "constraints": {"size": {"min": 2, "max": 6},
            "layout": {"cantcoexist": [["lb", "web"]]},
            "services": {"kv-primary": {"quantities": {"min": 1, "max": 1}},
                         "lb": {"quantities": {"min": 0, "max": 1}}}}
    })
}

#[test]
fn clusters_follow_files_and_template_versions_on_the_local_provider() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _cleanup = Cleanup(data.clone());
    let mut u = up(&data);
    let (api, d) = (u.api.clone(), dir.path());
    std::fs::write(d.join("t1.json"), sites(1).to_string()).unwrap();
    ok(&cli(&api, d, &["template", "create", "-f", "t1.json"]));

    // Created from a file, then the edited file reached in one plan.
    std::fs::write(
        d.join("site.yaml"),
        "name: site\ntemplate: sites\nsize: 2\n",
    )
    .unwrap();
    let out = ok(&cli(
        &api,
        d,
        &["apply", "-f", "site.yaml", "--auto-approve"],
    ));
    assert!(out.contains("will be created"), "{out}");
    let id = cluster_named(&api, "site");
    assert_eq!(details(&api, &id)["status"], "active");
    std::fs::write(
        d.join("site.yaml"),
        "name: site\ntemplate: sites\nsize: 3\nservices: [kv-primary, web, lb]\n\
         config:\n  kv: {port: '7000'}\n  web: {port: '8080', greeting: bonjour}\n  \
         lb: {port: '8000', backends: \"%join(map(ip.service.web,'$:8080'),',')%\"}\n",
    )
    .unwrap();
    let out = ok(&cli(
        &api,
        d,
        &["apply", "-f", "site.yaml", "--auto-approve"],
    ));
    for want in [
        "services added: lb",
        "+ node",
        "config ~ web.greeting: hello -> bonjour",
        "plan: ",
    ] {
        assert!(out.contains(want), "missing {want:?}: {out}");
    }
    let now = details(&api, &id);
    assert_eq!(now["status"], "active", "{now}");
    assert_eq!(now["nodes"].as_array().unwrap().len(), 3);
    let webs = answers(&now, "web", 8080);
    assert!(
        !webs.is_empty() && webs.iter().all(|b| b.contains("bonjour")),
        "{webs:?}"
    );
    let lb = answers(&now, "lb", 8000);
    assert!(lb.len() == 1 && lb[0].contains("bonjour"), "{lb:?}");
    let out = ok(&cli(&api, d, &["apply", "-f", "site.yaml"]));
    assert!(out.contains("no changes"), "{out}");
    // A declaration the template cannot hold is shown with the reason and not applied.
    let too_big = std::fs::read_to_string(d.join("site.yaml"))
        .unwrap()
        .replace("size: 3", "size: 9");
    std::fs::write(d.join("big.yaml"), too_big).unwrap();
    let big = cli(&api, d, &["apply", "-f", "big.yaml", "--auto-approve"]);
    assert_eq!(big.status.code(), Some(1), "{big:?}");
    let said =
        String::from_utf8_lossy(&big.stdout).to_string() + &String::from_utf8_lossy(&big.stderr);
    assert!(said.contains("outside the template's range 2..6"), "{said}");
    // The export applies as no change.
    let export = ok(&cli(&api, d, &["cluster", "export", &id]));
    std::fs::write(d.join("export.yaml"), &export).unwrap();
    let out = ok(&cli(&api, d, &["apply", "-f", "export.yaml"]));
    assert!(out.contains("no changes"), "{export}\n{out}");

    // A reviewed plan, then a change behind it: refused.
    let smaller = std::fs::read_to_string(d.join("site.yaml"))
        .unwrap()
        .replace("size: 3", "size: 2");
    std::fs::write(d.join("smaller.yaml"), smaller).unwrap();
    ok(&cli(
        &api,
        d,
        &["apply", "-f", "smaller.yaml", "--plan-out", "plan.json"],
    ));
    ok(&cli(
        &api,
        d,
        &[
            "cluster",
            "reconfigure",
            &id,
            "--config",
            "web.greeting=meanwhile",
            "--wait",
        ],
    ));
    let refused = cli(&api, d, &["apply", "--plan", "plan.json"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("changed since the plan was made"),
        "{refused:?}"
    );
    assert_eq!(details(&api, &id)["nodes"].as_array().unwrap().len(), 3);

    // A cluster on version 1, a version 2 with the balancer and a new greeting: history, diff,
    // impact, then sync.
    let out = ok(&cli(
        &api,
        d,
        &[
            "cluster",
            "create",
            "--template",
            "sites",
            "--size",
            "2",
            "--name",
            "other",
            "--wait",
        ],
    ));
    let other = cluster_named(&api, "other");
    std::fs::write(d.join("t2.json"), sites(2).to_string()).unwrap();
    let (code, text) = http(
        "PUT",
        &format!("{api}/v2/clustertemplates/sites"),
        &ADMIN,
        &sites(2).to_string(),
    );
    assert_eq!(code, 200, "{text}\n{out}");
    let history = ok(&cli(&api, d, &["template", "history", "sites"]));
    assert!(
        history.contains("first version") && history.contains("defaults.services"),
        "{history}"
    );
    let diff = ok(&cli(&api, d, &["template", "diff", "sites", "1", "2"]));
    for want in [
        "+ defaults.services: lb",
        "~ defaults.config.web.greeting: hello -> salut",
    ] {
        assert!(diff.contains(want), "missing {want:?}: {diff}");
    }
    let impact = ok(&cli(&api, d, &["template", "impact", "sites"]));
    assert!(
        impact.contains(&format!("cluster {other} (other)")),
        "{impact}"
    );
    assert!(impact.contains("services added: lb"), "{impact}");
    let preview = ok(&cli(&api, d, &["cluster", "sync", &other, "--dry-run"]));
    assert!(
        preview.contains("template sites: version 1 -> 2"),
        "{preview}"
    );
    assert_eq!(details(&api, &other)["clusterTemplate"]["version"], 1);
    ok(&cli(&api, d, &["cluster", "sync", &other, "--wait"]));
    let now = details(&api, &other);
    assert_eq!(now["clusterTemplate"]["version"], 2, "{now}");
    let lb = answers(&now, "lb", 8000);
    assert!(lb.len() == 1 && lb[0].contains("salut"), "{lb:?}");
    let out = ok(&cli(&api, d, &["cluster", "sync", &other]));
    assert!(
        out.contains("no task to run") || out.contains("no changes"),
        "{out}"
    );

    for c in [&id, &other] {
        ok(&cli(&api, d, &["cluster", "delete", c, "--wait"]));
    }
    let _ = u.child.kill();
    let _ = u.child.wait();
}
