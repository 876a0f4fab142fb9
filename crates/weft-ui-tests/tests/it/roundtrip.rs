//! Forms saved unchanged change nothing. (a) Every admin editor (the structured editors of services
//! and cluster templates, the generic form of the other kinds, and every kind's JSON tab), opened
//! on an entity made through the API with rich values (nested JSON, strings that read as numbers,
//! unicode, quotes, `<` and `&`, a service's health check, a template's rollout, links and DNS
//! suffix) and saved as it stands, leaves the entity as the API shows it equal as JSON (but its
//! `version`). (b) The cluster page's Reconfigure key/value form and its "Edit the config as
//! JSON" form, pressed unchanged on an active cluster whose config holds nested objects, arrays,
//! numbers, booleans, null, strings that read as JSON (`"8080"`, `"{"`) and a string with `"`,
//! leave `GET /v2/clusters/{id}/config` equal and start no job (the cluster's `latestJobId` stays
//! the same); changing one nested value through the form changes that value only.

use std::time::Duration;

use fantoccini::Client;
use serde_json::{json, Value};

use crate::common::*;

const ADMIN: Option<(&str, &str)> = Some(("admin", "acme"));
const ALICE: Option<(&str, &str)> = Some(("alice", "acme"));

/// Text that forms tend to mangle.
const RICH: &str = "Ünïcødé – «quotes» \"double\" 'single' <b>not bold</b> & &amp; 0042";

/// A config with every kind of JSON value, and strings that read as other kinds.
fn rich_config() -> Value {
    json!({
        "port": "8080",
        "brace": "{",
        "quote": "say \"hi\" <now> & then",
        "json_string": "{\"k\": 1}",
        "truthy": "true",
        "n": 42,
        "f": 1.5,
        "b": true,
        "nothing": null,
        "list": [1, "2", {"x": "y"}, [false]],
        "obj": {"a": {"b": [true, "false"], "deep": {"deeper": "007"}}, "s": "<&>"},
        "empty": {},
        "unicode": "日本語 ✓",
    })
}

/// The entities of the editors' round trip, made through the API (after `setup`).
fn entities() -> Vec<(&'static str, Value)> {
    let hc = json!({"type": "shell", "fields": {"script": "check.sh"}, "timeout": 10, "tries": 2, "interval": 1});
    vec![
        (
            "providers",
            json!({"name": "rt-prov", "providertype": "local", "label": RICH, "description": RICH,
            "provisioner": {"region": "0123", "count": "42", "nested": {"a": [1, "2", {"b": RICH}]}}}),
        ),
        (
            "hardwaretypes",
            json!({"name": "rt-hw", "description": RICH,
            "providermap": {"local": {"flavor": "007", "note": RICH}}}),
        ),
        (
            "imagetypes",
            json!({"name": "rt-img", "description": RICH,
            "providermap": {"local": {"image": "{\"x\": 1}", "sshuser": "weft"}}}),
        ),
        (
            "services",
            json!({"name": "rt-svc", "label": RICH, "description": RICH, "ownAddressOnly": true,
            "dependencies": {"provides": ["rt-alias"], "conflicts": [], "install": {"requires": ["base"], "uses": []},
                             "runtime": {"requires": [], "uses": ["web"]}},
            "provisioner": {"actions": {
                "install": {"type": "shell", "fields": {"script": "install.sh --opt=\"<&>\""}},
                "configure": {"type": "shell", "fields": {"script": "0042", "extra": RICH}},
                "healthcheck": hc}},
            "links": [{"label": RICH, "url": "http://%host.service.rt-svc%:8080/?a=1&b=<2>"}]}),
        ),
        (
            "partialtemplates",
            json!({"name": "rt-part", "description": RICH, "immutable": false,
            "compatibility": {"services": ["base"]},
            "defaults": {"config": rich_config()}}),
        ),
        (
            "clustertemplates",
            json!({"name": "rt-tpl", "label": RICH, "description": RICH, "icon": "icon.png",
            "includes": [{"name": "rt-part"}],
            "compatibility": {"services": ["base", "web"], "hardwaretypes": ["small"], "imagetypes": ["host"]},
            "defaults": {"services": ["base", "web"], "provider": "local", "hardwaretype": "small",
                         "imagetype": "host", "dnsSuffix": "example.test", "config": rich_config()},
            "constraints": {"size": {"min": 1, "max": 7},
                            "services": {"web": {"hardwaretypes": ["small"], "quantities": {"min": 1, "max": 3}}},
                            "layout": {"mustcoexist": [["base", "web"]], "cantcoexist": []}},
            "administration": {"leaseduration": {"initial": 86_400_000, "max": 0, "step": 3_600_000},
                               "rollout": {"canaries": 1, "maxInFlight": "25%", "onFailure": "pause"}},
            "links": [{"label": RICH, "url": "http://%host.service.web%:8080/?q=<x>&y=\"z\""}],
            "autoReplace": true}),
        ),
    ]
}

/// The paths at which two JSON values differ, with both sides.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (l, r) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                if x.contains_key(k) != y.contains_key(k) {
                    out.push(format!(
                        "{path}.{k}: {} -> {}",
                        shown(x.get(k)),
                        shown(y.get(k))
                    ));
                } else {
                    diff(&format!("{path}.{k}"), l, r, out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), l, r, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

fn shown(v: Option<&Value>) -> String {
    v.map_or_else(|| "(absent)".into(), Value::to_string)
}

/// The entity as the API shows it, without its version (every save bumps it).
async fn entity(s: &Server, kind: &str, name: &str) -> Value {
    let mut v = get_json(s, ADMIN, &format!("/v2/{kind}/{name}")).await;
    if let Some(o) = v.as_object_mut() {
        o.remove("version");
    }
    v
}

/// The page's error messages, if any.
async fn page_errors(c: &Client) -> String {
    let js = "return Array.from(document.querySelectorAll('.error, .field-error, #page-error')).map(function (e) { return e.textContent.trim(); }).join(' | ');";
    let v = c.execute(js, vec![]).await.unwrap();
    v.as_str().unwrap_or_default().to_string()
}

/// Presses `#save` on the form at `path` as it stands; a form error is a finding.
async fn save_unchanged(c: &Client, base: &str, path: &str, found: &mut Vec<String>) {
    c.goto(&format!("{base}{path}")).await.unwrap();
    text(c, "#save").await;
    submit(c, "#save").await;
    let errors = page_errors(c).await;
    if !errors.is_empty() {
        found.push(format!("{path}: saving unchanged was refused: {errors}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editors_saved_unchanged_change_nothing() {
    if !weft_testkit::require("chromium") || !weft_testkit::require("chromedriver") {
        return;
    }
    let s = server().await;
    setup(&s).await;
    let mut made = Vec::new();
    for (kind, body) in entities() {
        ok(&s, ADMIN, "POST", &format!("/v2/{kind}"), body.clone()).await;
        made.push((kind, body["name"].as_str().unwrap().to_string()));
    }
    let base = format!("http://{}", s.external);
    let (mut driver, url) = chromedriver().await;
    let c = browser(&url).await;
    login(&c, &base, "acme", "admin").await;
    let mut found = Vec::new();
    for (kind, name) in &made {
        for path in [
            format!("/ui/admin/{kind}/{name}"),
            format!("/ui/admin/{kind}/{name}/json"),
        ] {
            let before = entity(&s, kind, name).await;
            c.goto(&format!("{base}{path}")).await.unwrap();
            let shot = format!(
                "h-rt-{kind}{}",
                if path.ends_with("/json") { "-json" } else { "" }
            );
            if let Err(e) = try_shots(&c, &shot).await {
                eprintln!("layout: {e}");
            }
            save_unchanged(&c, &base, &path, &mut found).await;
            let after = entity(&s, kind, name).await;
            let mut d = Vec::new();
            diff("", &before, &after, &mut d);
            for line in d {
                found.push(format!("{path} saved unchanged changed {line}"));
            }
        }
    }
    let _ = c.close().await;
    let _ = driver.kill().await;
    assert!(
        found.is_empty(),
        "{} round-trip differences:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The cluster's config and latest job id, from the API.
async fn config_and_job(s: &Server, id: &str) -> (Value, Value) {
    let config = get_json(s, ALICE, &format!("/v2/clusters/{id}/config")).await;
    let cluster = get_json(s, ALICE, &format!("/v2/clusters/{id}")).await;
    (config, cluster["latestJobId"].clone())
}

/// Waits (through the API) until cluster `id` is active with no job running.
async fn active(s: &Server, id: &str) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let c = get_json(s, ALICE, &format!("/v2/clusters/{id}")).await;
        if c["status"] == "active" && c["progress"]["actionstatus"] != "running" {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "cluster {id} not active: {c}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An active cluster of template `rt` whose config is [`rich_config`]; returns its id.
async fn rich_cluster(s: &Server) -> String {
    let template = json!({"name": "rt", "compatibility": {"services": ["base", "web"]},
        "defaults": {"services": ["base", "web"], "provider": "local", "hardwaretype": "small", "imagetype": "host"}});
    ok(s, ADMIN, "POST", "/v2/clustertemplates", template).await;
    let body =
        json!({"name": "rich", "clusterTemplate": "rt", "numMachines": 1, "config": rich_config()});
    let (status, text) = api(s, ALICE, "POST", "/v2/clusters", body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// Presses the button `css` on cluster `id`'s page with the form unchanged; a finding when the
/// config or the latest job changed.
async fn press_unchanged(
    c: &Client,
    s: &Server,
    base: &str,
    id: &str,
    css: &str,
    found: &mut Vec<String>,
) {
    let (config, job) = config_and_job(s, id).await;
    c.goto(&format!("{base}/ui/clusters/{id}")).await.unwrap();
    let open = "document.querySelectorAll('#actions details, .actions details').forEach(function (d) { d.open = true; }); return 1;";
    c.execute(open, vec![]).await.unwrap();
    submit(c, css).await;
    let (after, job_after) = config_and_job(s, id).await;
    let mut d = Vec::new();
    diff("config", &config, &after, &mut d);
    for line in d {
        found.push(format!("{css} pressed unchanged changed {line}"));
    }
    if job != job_after {
        found.push(format!(
            "{css} pressed unchanged started job {job_after} (the latest was {job}); the page says: {}",
            page_errors(c).await
        ));
    }
    active(s, id).await;
}

/// From [`rich_config`], changes `obj.a.deep.deeper` through the key/value form (the row of key
/// `obj`, as a person edits its JSON text); a finding for every other difference.
async fn change_one(c: &Client, s: &Server, base: &str, id: &str, found: &mut Vec<String>) {
    let reset = json!({"config": rich_config(), "restart": false});
    ok(s, ALICE, "PUT", &format!("/v2/clusters/{id}/config"), reset).await;
    active(s, id).await;
    let mut want = rich_config();
    want["obj"]["a"]["deep"]["deeper"] = json!("008");
    c.goto(&format!("{base}/ui/clusters/{id}")).await.unwrap();
    let set = "var rows = document.querySelectorAll('#reconfigure-form tbody tr');
        for (var i = 0; i < rows.length; i++) {
          var k = rows[i].querySelector('input[name^=k]');
          if (k && k.value === 'obj') { rows[i].querySelector('input[name^=v]').value = arguments[0]; return true; }
        }
        return false;";
    let done = c
        .execute(set, vec![json!(want["obj"].to_string())])
        .await
        .unwrap();
    if done != json!(true) {
        found.push("the key/value form has no row for key obj".into());
        return;
    }
    submit(c, "#reconfigure").await;
    active(s, id).await;
    let after = get_json(s, ALICE, &format!("/v2/clusters/{id}/config")).await;
    let mut d = Vec::new();
    diff("config", &want, &after, &mut d);
    for line in d {
        found.push(format!(
            "changing config.obj.a.deep.deeper through the form: expected -> got at {line}"
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_config_forms_saved_unchanged_change_nothing() {
    if !weft_testkit::require("chromium") || !weft_testkit::require("chromedriver") {
        return;
    }
    let s = server().await;
    setup(&s).await;
    let id = rich_cluster(&s).await;
    let pdir = tempfile::tempdir().unwrap();
    let agent = provisioner(&s, &tenant_id(&s).await, pdir.path()).await;
    active(&s, &id).await;
    let base = format!("http://{}", s.external);
    let (mut driver, url) = chromedriver().await;
    let c = browser(&url).await;
    login(&c, &base, "acme", "alice").await;
    c.goto(&format!("{base}/ui/clusters/{id}")).await.unwrap();
    if let Err(e) = try_shots(&c, "h-rt-cluster").await {
        eprintln!("layout: {e}");
    }
    let mut found = Vec::new();
    press_unchanged(&c, &s, &base, &id, "#reconfigure", &mut found).await;
    let json_button = "button[value='reconfigure-json']";
    press_unchanged(&c, &s, &base, &id, json_button, &mut found).await;
    change_one(&c, &s, &base, &id, &mut found).await;
    let _ = c.close().await;
    let _ = driver.kill().await;
    agent.shutdown().await;
    assert!(
        found.is_empty(),
        "{} differences:\n{}",
        found.len(),
        found.join("\n")
    );
}
