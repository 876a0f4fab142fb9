//! One cluster page kept open, never reloaded, through a cluster's life: opened while the cluster
//! is pending, it fills in the local provider's addresses, brings every cell to `running` and
//! shows the links as the real provisioner creates the nodes; after a health run the cells still
//! say `running` and the health marks say `healthy`; an expand adds a row with its address and
//! one link URL per web node; a replaced node comes back running. At each step the page's grid,
//! links and node counts must equal what the API says of the cluster. Last, at 390 px every
//! service cell is on screen and nothing scrolls sideways (`l-cluster-live-1400.png`,
//! `l-cluster-live-390.png`).

use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::{json, Value};

use crate::common::*;

const ALICE: Option<(&str, &str)> = Some(("alice", "acme"));
const ADMIN: Option<(&str, &str)> = Some(("admin", "acme"));

/// The page's grid and links as data: per node (sorted by id) its host, addresses, cell and
/// health texts by service; per link its label and URLs; the status, the no-reload marker, the
/// grid's heading (how many nodes) and the services table's node count per service.
const PAGE_STATE: &str = r#"
var rows = Array.from(document.querySelectorAll('#grid-box table#nodes tbody tr[data-node]')).map(function (tr) {
  var node = tr.getAttribute('data-node');
  var by = function (sel, attr) {
    var out = {};
    tr.querySelectorAll(sel).forEach(function (e) {
      var key = e.getAttribute(attr);
      out[key.indexOf(node + '/') === 0 ? key.slice(node.length + 1) : 'foreign:' + key] = e.textContent;
    });
    return out;
  };
  return {id: node, host: (tr.querySelector('th.host') || {}).textContent || '',
    addrs: Array.from(tr.querySelectorAll('span.addr')).map(function (e) { return e.textContent; }).sort(),
    cells: by('span.cell', 'data-cell'), health: by('span.health', 'data-health')};
}).sort(function (a, b) { return a.id < b.id ? -1 : a.id > b.id ? 1 : 0; });
var links = Array.from(document.querySelectorAll('#links li.link')).map(function (li) {
  return {label: (li.querySelector('.link-label') || {}).textContent || '',
    urls: Array.from(li.querySelectorAll('a.link-url')).map(function (a) { return a.getAttribute('href'); }).sort()};
});
var st = document.getElementById('cluster-status');
var heading = document.querySelector('#grid-h small');
var summary = {};
document.querySelectorAll('#service-table tbody tr[id^="service-"]').forEach(function (tr) {
  summary[tr.id.slice('service-'.length)] = (tr.querySelector('td') || {}).textContent || '';
});
return {marker: document.body.dataset.marker || '', status: st ? st.textContent : '', rows: rows, links: links,
  heading: heading ? heading.textContent : '', summary: summary};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_page_stays_true_without_a_reload() {
    if !weft_testkit::require("chromium") || !weft_testkit::require("chromedriver") {
        return;
    }
    let s = server().await;
    live_catalog(&s).await;
    let base = format!("http://{}", s.external);
    let (mut driver, url) = chromedriver().await;
    let c = browser(&url).await;
    let pdir = tempfile::tempdir().unwrap();
    let agent = life(&c, &s, &base, pdir.path()).await;
    phone(&c).await;
    agent.shutdown().await;
    let _ = c.close().await;
    let _ = driver.kill().await;
}

/// `setup`'s catalog with a `web` service that also configures and has a shell health check
/// (`check.sh`), and template `live`: base and web, at least 2 nodes, a link over every web node.
async fn live_catalog(s: &Server) {
    setup(s).await;
    let action = |w: &str| json!({"type": "shell", "fields": {"script": format!("{w}.sh")}});
    let web = json!({"name": "web", "dependencies": {"runtime": {"requires": ["base"]}},
        "provisioner": {"actions": {"install": action("install"), "configure": action("configure"),
            "start": action("start"), "stop": action("stop"), "healthcheck": action("check")}}});
    ok(s, ADMIN, "PUT", "/v2/services/web", web).await;
    let template = json!({"name": "live",
        "compatibility": {"services": ["base", "web"], "hardwaretypes": ["small"], "imagetypes": ["host"]},
        "defaults": {"services": ["base", "web"], "provider": "local", "hardwaretype": "small", "imagetype": "host"},
        "constraints": {"size": {"min": 2, "max": 5}},
        "links": [{"label": "web", "url": "http://%ip.service.web%:8080/"}]});
    ok(s, ADMIN, "POST", "/v2/clustertemplates", template).await;
}

/// The four steps on one open page; returns the provisioner that ran them.
async fn life(
    c: &Client,
    s: &Server,
    base: &str,
    pdir: &std::path::Path,
) -> weft_provisioner::Agent {
    let body = json!({"name": "live", "clusterTemplate": "live", "numMachines": 2});
    let (status, text) = api(s, ALICE, "POST", "/v2/clusters", body).await;
    assert_eq!(status, 200, "create: {text}");
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .expect("the new cluster's id")
        .to_string();
    login(c, base, "acme", "alice").await;
    c.goto(&format!("{base}/ui/clusters/{id}")).await.unwrap();
    let pending = page_state(c).await;
    assert_eq!(pending["status"], "pending", "{pending}");
    for row in pending["rows"].as_array().unwrap() {
        assert_eq!(
            row["addrs"],
            json!([]),
            "no address before the machines: {pending}"
        );
    }
    assert_eq!(count(c, "a.link-url").await, 0, "no live link yet");
    c.execute(
        "document.body.dataset.marker = 'one-page'; return 1;",
        vec![],
    )
    .await
    .unwrap();

    // 1. The provisioner creates the nodes; the page follows.
    let agent = provisioner(s, &tenant_id(s).await, pdir).await;
    job_done(s, &id, "").await;
    let created = shows_the_cluster(c, s, &id, "create", &|_| "health unknown").await;
    assert_eq!(created.len(), 2, "two nodes: {created:?}");

    // 2. A health run: cells stay `running`, the marks turn `healthy`.
    health_run(c, s, &id).await;
    shows_the_cluster(c, s, &id, "the health run", &|_| "healthy").await;

    // 3. Expand by one: a new row, running, with its address; a link URL per web node.
    let before = latest_job(s, &id).await;
    ok(
        s,
        ALICE,
        "POST",
        &format!("/v2/clusters/{id}/nodes"),
        json!({"count": 1}),
    )
    .await;
    job_done(s, &id, &before).await;
    let expanded = shows_the_cluster(c, s, &id, "expand", &|_| "any").await;
    assert_eq!(expanded.len(), 3, "three nodes: {expanded:?}");

    // 4. Replace a web node: it comes back running, with an address, never checked since.
    let node = expanded[0].clone();
    let before = latest_job(s, &id).await;
    let path = format!("/v2/clusters/{id}/nodes/{node}/replace");
    ok(s, ALICE, "POST", &path, Value::Null).await;
    job_done(s, &id, &before).await;
    let health = |n: &str| if n == node { "health unknown" } else { "any" };
    let replaced = shows_the_cluster(c, s, &id, "replace-node", &health).await;
    assert_eq!(replaced, expanded, "the same nodes after the replacement");
    agent
}

/// The page's grid and links (see [`PAGE_STATE`]).
async fn page_state(c: &Client) -> Value {
    c.execute(PAGE_STATE, vec![]).await.unwrap()
}

async fn latest_job(s: &Server, id: &str) -> String {
    let c = get_json(s, ALICE, &format!("/v2/clusters/{id}")).await;
    c["latestJobId"].as_str().unwrap_or_default().to_string()
}

/// Waits (through the API) until the cluster's latest job is a new one (not `before`) and
/// complete, and the cluster active.
async fn job_done(s: &Server, id: &str, before: &str) {
    let end = Instant::now() + WAIT;
    loop {
        let c = get_json(s, ALICE, &format!("/v2/clusters/{id}")).await;
        let new = c["latestJobId"].as_str().is_some_and(|j| j != before);
        let status = &c["progress"]["actionstatus"];
        assert_ne!(status, "failed", "the job failed: {c}");
        if new && status == "complete" && c["status"] == "active" {
            return;
        }
        assert!(Instant::now() < end, "cluster {id}: no job completed: {c}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the page must show of cluster `id` as the API has it now: a row per node with its host
/// name and the local provider's addresses, every service it holds `running`, web's health as
/// `health(node)` says ("any": healthy or not yet checked), the web link with one URL per web
/// node (the API's `urls`), and the node counts above the grid and in the services table.
async fn want(s: &Server, id: &str, health: &dyn Fn(&str) -> &'static str) -> Value {
    let cluster = get_json(s, ALICE, &format!("/v2/clusters/{id}")).await;
    let mut rows: Vec<Value> = Vec::new();
    let mut web_nodes = 0;
    for n in cluster["nodes"].as_array().expect("nodes") {
        let node = n["id"].as_str().unwrap();
        let mut addrs: Vec<&str> = n["properties"]["ipaddresses"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str())
            .collect();
        addrs.sort_unstable();
        assert!(
            !addrs.is_empty(),
            "node {node} has no address in the API: {n}"
        );
        for a in &addrs {
            assert!(a.starts_with("127.77."), "a local provider's address: {a}");
        }
        let mut cells = serde_json::Map::new();
        let mut marks = serde_json::Map::new();
        for svc in n["services"].as_array().into_iter().flatten() {
            let name = svc["name"].as_str().unwrap();
            cells.insert(name.into(), json!("running"));
            if name == "web" {
                web_nodes += 1;
                marks.insert(name.into(), json!(health(node)));
            }
        }
        rows.push(
            json!({"id": node, "host": n["properties"]["hostname"], "addrs": addrs,
            "cells": cells, "health": marks}),
        );
    }
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    let link = &cluster["links"][0];
    let mut urls: Vec<&str> = link["urls"]
        .as_array()
        .expect("links[0].urls")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    urls.sort_unstable();
    assert_eq!(
        urls.len(),
        web_nodes,
        "the API: one URL per web node: {link}"
    );
    let mut summary = serde_json::Map::new();
    for svc in ["base", "web"] {
        let on = rows
            .iter()
            .filter(|r| r["cells"].get(svc).is_some())
            .count();
        summary.insert(svc.into(), json!(on.to_string()));
    }
    json!({"marker": "one-page", "status": "active", "rows": rows,
        "links": [{"label": "web", "urls": urls}],
        "heading": format!("({} nodes)", rows.len()), "summary": summary})
}

/// The page as `want` would say it: where `want` takes any health ("any"), a `healthy` or
/// `health unknown` shown reads "any".
fn as_wanted(page: &Value, want: &Value) -> Value {
    let mut page = page.clone();
    for (p, w) in page["rows"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .zip(want["rows"].as_array().into_iter().flatten())
    {
        for (svc, h) in w["health"].as_object().into_iter().flatten() {
            let shown = &p["health"][svc];
            if h == "any" && (shown == "healthy" || shown == "health unknown") {
                p["health"][svc] = json!("any");
            }
        }
    }
    page
}

/// Where `page` differs from `want`, one line per differing value (`rows[1].cells.web: ...`).
fn differences(path: &str, page: &Value, want: &Value, out: &mut Vec<String>) {
    match (page, want) {
        (Value::Object(p), Value::Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = p.keys().chain(w.keys()).collect();
            for k in keys {
                let (a, b) = (
                    p.get(k).unwrap_or(&Value::Null),
                    w.get(k).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}.{k}"), a, b, out);
            }
        }
        (Value::Array(p), Value::Array(w)) if p.len() == w.len() => {
            for (i, (a, b)) in p.iter().zip(w).enumerate() {
                differences(&format!("{path}[{i}]"), a, b, out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: the page shows {a}, expected {b}")),
        _ => {}
    }
}

/// Polls until the open page shows cluster `id` as the API has it (see [`want`]), without a
/// reload; checks that no URL holds a comma. Returns the ids of the web nodes, in order.
async fn shows_the_cluster(
    c: &Client,
    s: &Server,
    id: &str,
    step: &str,
    health: &dyn Fn(&str) -> &'static str,
) -> Vec<String> {
    let want = want(s, id, health).await;
    let end = Instant::now() + WAIT;
    let mut page = page_state(c).await;
    while as_wanted(&page, &want) != want {
        assert_eq!(
            page["marker"], "one-page",
            "after {step}: the page was reloaded"
        );
        if Instant::now() > end {
            let mut diff = Vec::new();
            differences("", &as_wanted(&page, &want), &want, &mut diff);
            panic!(
                "after {step}, the page is not what the API's cluster says:\n{}\nthe page:\n{page:#}",
                diff.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        page = page_state(c).await;
    }
    for u in want["links"][0]["urls"].as_array().unwrap() {
        assert!(
            !u.as_str().unwrap().contains(','),
            "after {step}: a URL with a comma: {u}"
        );
    }
    want["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["cells"].get("web").is_some())
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

/// Runs the health checks through the API and waits for the run to finish, watching the page on
/// the way: no cell may say anything but `running` while the checks run.
async fn health_run(c: &Client, s: &Server, id: &str) {
    let (status, text) = api(
        s,
        ALICE,
        "POST",
        &format!("/v2/clusters/{id}/health"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "health run: {text}");
    let run: Value = serde_json::from_str(&text).unwrap();
    let job = run["jobId"]
        .as_str()
        .expect("the health run's job")
        .to_string();
    let end = Instant::now() + WAIT;
    loop {
        let cells = c
            .execute("return Array.from(document.querySelectorAll('span.cell')).map(function (e) { return e.textContent; });", vec![])
            .await
            .unwrap();
        let odd: Vec<&Value> = cells
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| *t != "running")
            .collect();
        assert!(
            odd.is_empty(),
            "during the health run the grid says {cells}"
        );
        let h = get_json(s, ALICE, &format!("/v2/clusters/{id}/health")).await;
        if h["jobId"] == job.as_str() && h["jobStatus"] != "running" {
            assert_eq!(h["jobStatus"], "complete", "{h}");
            assert_eq!(h["healthy"], true, "{h}");
            return;
        }
        assert!(Instant::now() < end, "the health run did not finish: {h}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// At 390 px every service cell is within the window and the page does not scroll sideways;
/// screenshots at both widths.
async fn phone(c: &Client) {
    c.set_window_size(390, 844).await.unwrap();
    let js = "return {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, \
        cells: Array.from(document.querySelectorAll('span.cell')).map(function (e) { \
        return [e.getAttribute('data-cell'), e.getBoundingClientRect().left, e.getBoundingClientRect().right]; })};";
    let end = Instant::now() + WAIT;
    let mut got = c.execute(js, vec![]).await.unwrap();
    // The window's new width reaches the page's layout asynchronously.
    while got["inner"].as_f64() != Some(390.0) && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = c.execute(js, vec![]).await.unwrap();
    }
    let inner = got["inner"].as_f64().unwrap();
    assert_eq!(inner, 390.0, "{got}");
    assert!(
        got["scroll"].as_f64().unwrap() <= inner,
        "the page scrolls sideways at 390 px: {got}"
    );
    let cells = got["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "two services on three nodes: {got}");
    for cell in cells {
        assert!(
            cell[1].as_f64().unwrap() >= 0.0 && cell[2].as_f64().unwrap() <= inner,
            "a cell off screen at 390 px: {cell} ({got})"
        );
    }
    c.set_window_size(1400, 1000).await.unwrap();
    c.execute(
        "document.getElementById('links-box').scrollIntoView(); return 1;",
        vec![],
    )
    .await
    .unwrap();
    shots(c, "l-cluster-live").await;
}
